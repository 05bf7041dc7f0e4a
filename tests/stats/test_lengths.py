"""The store's completion-length estimate: decayed per visit, the population's for unseen prompts, saved exactly."""

import json

import numpy as np
import pytest

from trl_adaptive.stats import PromptStatistics


def test_the_estimate_is_a_mean_decayed_per_visit_and_unseen_prompts_read_the_population():
    stats = PromptStatistics(length_decay=0.5)
    assert np.isnan(stats.expected_tokens([1])).all()  # nothing measured yet
    stats.update([1, 1, 2], [1.0, 0.0, 0.0], completion_tokens=[10, 30, 50])
    stats.update([1, 1], [1.0, 1.0], completion_tokens=[40, 40])
    own = (0.5 * 40 + 80) / (0.5 * 2 + 2)
    np.testing.assert_allclose(stats.expected_tokens([1, 2, 99]), [own, 50.0, (own + 50.0) / 2])
    np.testing.assert_array_equal(stats.batch([1, 2, 99]).expected_tokens, stats.expected_tokens([1, 2, 99]))


def test_unknown_lengths_and_unscored_completions_measure_nothing():
    stats = PromptStatistics()
    stats.update([1, 1, 2, 3], [1.0, 0.0, float("nan"), 1.0], completion_tokens=[10, float("nan"), 99, 7])
    assert stats.expected_tokens([1, 3]).tolist() == [10.0, 7.0]
    assert 2 not in stats  # its only completion was unscored: no row, no length
    stats.update([3], [0.0])  # no lengths given: counts move, the length estimate does not
    assert stats.expected_tokens([3]).tolist() == [7.0] and stats.batch([3]).attempts.tolist() == [2.0]


@pytest.mark.parametrize(
    "tokens, match",
    [([1.0], "one length per completion"), ([-1.0, 2.0], "finite numbers"), ([float("inf"), 2.0], "finite")],
)
def test_bad_lengths_are_refused_naming_the_argument(tokens, match):
    with pytest.raises(ValueError, match=f"completion_tokens.*{match}|{match}"):
        PromptStatistics().update([1, 1], [1.0, 0.0], completion_tokens=tokens)


def test_length_decay_is_checked_and_saved_with_the_statistics(tmp_path):
    with pytest.raises(ValueError, match=r"length_decay=1.5: must lie in \(0, 1\]"):
        PromptStatistics(length_decay=1.5)
    stats = PromptStatistics(length_decay=0.7)
    stats.update([4, 4, 5], [1.0, 0.0, 1.0], completion_tokens=[3, 5, 8])
    stats.save(tmp_path / "s.json")
    loaded = PromptStatistics.load(tmp_path / "s.json")
    assert loaded.length_decay == 0.7 and loaded.state_dict() == stats.state_dict()
    for store in (stats, loaded):  # a resumed store goes on bit for bit
        store.update([4, 6], [0.0, 1.0], completion_tokens=[11, 2])
    assert loaded.state_dict() == stats.state_dict()
    with pytest.raises(ValueError, match="length_decay=0.7 but this run uses length_decay=0.9"):
        PromptStatistics.load(tmp_path / "s.json", length_decay=0.9)


def test_a_state_with_tokens_but_no_measured_completion_is_refused():
    stats = PromptStatistics()
    stats.update([4, 5], [1.0, 0.0], completion_tokens=[3, float("nan")])
    state = json.loads(json.dumps(stats.state_dict()))
    state["columns"]["length_tokens"][1] = 4.0  # prompt 5 measured nothing
    with pytest.raises(ValueError, match=r"length_tokens > 0 with length_weight = 0 for prompt ids \[5\]"):
        PromptStatistics().load_state_dict(state)


def test_the_dataset_export_carries_the_expected_completion_tokens_column():
    stats = PromptStatistics()
    stats.update([4, 4, 5], [1.0, 0.0, 1.0], completion_tokens=[3, 5, 8])
    stats.set_prior([6], [0.5], weight=4)  # a row without a length: the population's estimate
    ds = stats.to_dataset()
    assert ds["expected_completion_tokens"][:] == [4.0, 8.0, 6.0]
    assert PromptStatistics.from_dataset(ds).state_dict() == stats.state_dict()
