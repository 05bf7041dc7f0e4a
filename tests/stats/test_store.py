"""PromptStatistics (``trl_adaptive/stats/store.py``): counting rules, epochs, Est's decay, the cumulative Beta, the
success rule, saving and loading, config and argument checks, speed-sized inputs, and a plain reference."""

import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.stats import FORMAT_VERSION, PromptStatistics


def test_update_counts_and_rates_after_epoch():
    stats = PromptStatistics()
    stats.update(np.array([5, 5, 5, 5, 6, 6]), np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]))
    assert np.isnan(stats.success_rates([5, 6])).all()  # no completed epoch yet
    stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([6, 5, 99]), [0.0, 0.75, np.nan])
    b = stats.batch([5, 6, 99])
    np.testing.assert_array_equal(b.prompt_ids, [5, 6, 99])
    np.testing.assert_array_equal(b.attempts, [4, 2, 0])
    np.testing.assert_array_equal(b.successes, [3, 0, 0])


def test_success_threshold_on_float_rewards():
    stats = PromptStatistics(success_threshold=0.5)
    stats.update([1] * 5, [-1.0, 0.49, 0.5, 2.0, float("inf")])
    stats.end_epoch()
    assert stats.success_rates([1])[0] == pytest.approx(3 / 5)


def test_nan_rewards_are_not_attempts():
    stats = PromptStatistics()
    stats.update([1, 1, 1, 2], [1.0, np.nan, 0.0, np.nan])
    assert len(stats) == 1 and 2 not in stats  # prompt 2 had no scorable completion
    b = stats.batch([1, 2])
    np.testing.assert_array_equal(b.attempts, [2, 0])
    # An all-NaN visit is not a visit: prompt 1's decayed counts do not decay.
    before = stats.batch([1]).smoothed_rate
    stats.update([1, 1], [np.nan, np.nan])
    np.testing.assert_array_equal(stats.batch([1]).smoothed_rate, before)


def test_end_epoch_keeps_older_last_epoch_for_unvisited_prompts():
    stats = PromptStatistics()
    stats.update([1, 1, 2, 2], [1, 0, 1, 1])
    stats.end_epoch()
    assert stats.epoch == 1 and stats.num_seen == 2
    stats.update([1, 1, 1, 1], [0, 0, 0, 1])  # prompt 2 not attempted in epoch 2
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.5, 1.0])  # still epoch-1 rates mid-epoch
    stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.25, 1.0])
    stats.end_epoch()  # an epoch with no attempts changes no rate
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.25, 1.0])
    assert stats.epoch == 3
    np.testing.assert_array_equal(stats.batch([1, 2]).attempts, [6, 2])  # cumulative


def test_decay_per_visit_hand_computed():
    stats = PromptStatistics(decay=0.9)
    stats.update([3, 3, 3, 3], [0, 0, 0, 0])  # n_pos = 0, n_tot = 4
    stats.update([3, 3], [1, 0])  # n_pos = 0.9 * 0 + 1 = 1, n_tot = 0.9 * 4 + 2 = 5.6
    stats.update([3, 3], [1, 1])  # n_pos = 0.9 + 2 = 2.9, n_tot = 5.04 + 2 = 7.04
    p = stats.batch([3, 4]).smoothed_rate
    np.testing.assert_allclose(p, [(1 + 2.9) / (17 + 7.04), 1 / 17])
    # Several completions of one prompt in one call are one visit, whatever their order in the arrays.
    a, b = PromptStatistics(), PromptStatistics()
    a.update([1, 2, 1, 2], [1, 0, 0, 1])
    b.update([2, 2, 1, 1], [0, 1, 0, 1])
    np.testing.assert_array_equal(a.batch([1, 2]).smoothed_rate, b.batch([1, 2]).smoothed_rate)


def test_smoothed_rate_never_zero_or_one():
    stats = PromptStatistics()
    stats.update([1] * 1000 + [2] * 1000, [0.0] * 1000 + [1.0] * 1000)
    p = stats.batch([1, 2]).smoothed_rate
    assert 0 < p[0] < p[1] < 1


def test_beta_posterior_from_cumulative_counts():
    stats = PromptStatistics(decay=0.5)
    stats.update([1, 1, 1], [1, 0, 0])
    stats.end_epoch()
    stats.update([1, 1], [1, 1])
    b = stats.batch([1, 2])
    np.testing.assert_array_equal(b.beta_a, [1 + 3, 1])
    np.testing.assert_array_equal(b.beta_b, [1 + 2, 1])


def test_save_load_round_trip_atomic(tmp_path):
    stats = PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0)
    stats.update([10, 10, 11, 12], [0.7, 0.1, 0.9, np.nan])
    stats.end_epoch()
    stats.update([10, 11, 11], [0.6, 0.0, 0.2])
    path = tmp_path / "ckpt" / "prompt_stats.json"
    stats.save(path)
    assert os.listdir(path.parent) == ["prompt_stats.json"]  # no temporary file left behind
    raw = json.loads(path.read_text())
    assert raw["version"] == FORMAT_VERSION and raw["config"]["decay"] == 0.8 and raw["epoch"] == 1
    loaded = PromptStatistics.load(path)
    assert loaded.config == stats.config and loaded.epoch == 1 and len(loaded) == 2
    ids = [10, 11, 12]
    for field in ("success_rate", "attempts", "successes", "smoothed_rate", "beta_a", "beta_b"):
        np.testing.assert_array_equal(getattr(loaded.batch(ids), field), getattr(stats.batch(ids), field))
    assert loaded.state_dict() == stats.state_dict()
    # Both go on identically after the round trip.
    for s in (stats, loaded):
        s.update([10, 13], [1.0, 0.0])
        s.end_epoch()
    assert loaded.state_dict() == stats.state_dict()


def test_save_overwrites_atomically_and_cleans_up_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    old = PromptStatistics()
    old.update([1], [1.0])
    old.save(path)
    before = path.read_text()
    new = PromptStatistics()
    new.update([2], [0.0])

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(json, "dump", boom)
    with pytest.raises(OSError, match="disk full"):
        new.save(path)
    assert path.read_text() == before  # the old file is intact
    assert os.listdir(tmp_path) == ["s.json"]  # and no temporary file remains


def test_saved_files_get_the_usual_permissions(tmp_path):
    """A temporary file is made 0600; the saved file gets what a plain open() would give it (0666 less the umask)."""
    mask = os.umask(0o022)
    try:
        path = tmp_path / "s.json"
        PromptStatistics().save(path)
        assert path.stat().st_mode & 0o777 == 0o644
        path.chmod(0o600)
        PromptStatistics().save(path)  # the umask decides, not the file it replaces
        assert path.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(mask)


def test_load_rejects_mismatched_config_and_version(tmp_path):
    path = tmp_path / "s.json"
    stats = PromptStatistics(decay=0.8)
    stats.update([1], [1.0])
    stats.save(path)
    with pytest.raises(ValueError, match="decay"):
        PromptStatistics.load(path, decay=0.9)
    with pytest.raises(TypeError, match="threshold"):
        PromptStatistics.load(path, threshold=0.9)
    with pytest.raises(ValueError, match="decay: saved 0.8"):
        PromptStatistics(decay=0.9).load_state_dict(stats.state_dict())
    bad = stats.state_dict() | {"version": FORMAT_VERSION + 1}
    with pytest.raises(ValueError, match="version"):
        PromptStatistics(decay=0.8).load_state_dict(bad)
    with pytest.raises(ValueError, match="format"):
        PromptStatistics().load_state_dict({"version": 1})
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a PromptStatistics file"):
        PromptStatistics.load(path)


def test_empty_store_round_trip_and_lookup():
    stats = PromptStatistics()
    b = stats.batch([1, 2])
    np.testing.assert_allclose(b.smoothed_rate, [1 / 17, 1 / 17])
    assert np.isnan(b.success_rate).all()
    fresh = PromptStatistics()
    fresh.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert len(fresh) == 0 and fresh.num_seen == 0
    stats.update([], [])
    assert len(stats) == 0


def test_17k_prompts_batch_lookup():
    rng = np.random.default_rng(0)
    num_prompts = 17_917  # DAPO-Math-17k
    ids = rng.permutation(10 * num_prompts)[:num_prompts]  # sparse ids
    stats = PromptStatistics()
    true_p = rng.random(num_prompts)
    for start in range(0, num_prompts, 4096):
        batch = np.repeat(ids[start : start + 4096], 8)
        stats.update(batch, (rng.random(len(batch)) < np.repeat(true_p[start : start + 4096], 8)).astype(float))
    stats.end_epoch()
    assert len(stats) == num_prompts == stats.num_seen
    pick = rng.choice(num_prompts, 1024, replace=False)
    b = stats.batch(ids[pick])
    assert len(b) == 1024 and not np.isnan(b.success_rate).any()
    assert np.corrcoef(b.success_rate, true_p[pick])[0, 1] > 0.8


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"decay": 0.0}, "decay"),
        ({"decay": 1.5}, "decay"),
        ({"decay": float("nan")}, "decay"),
        ({"prior_alpha": 0.0}, "prior_alpha"),
        ({"prior_beta": -1.0}, "prior_beta"),
        ({"success_threshold": float("nan")}, "success_threshold"),
        ({"success_threshold": "1"}, "success_threshold"),
        ({"success_threshold": True}, "success_threshold"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PromptStatistics(**kwargs)


def test_invalid_update_arguments():
    stats = PromptStatistics()
    with pytest.raises(ValueError, match="equal length"):
        stats.update([1, 2], [1.0])
    with pytest.raises(ValueError, match="integer prompt ids"):
        stats.update([1.5], [1.0])
    with pytest.raises(ValueError, match="integer prompt ids"):
        stats.batch(["a"])
    with pytest.raises(ValueError, match="1-D"):
        stats.update([[1]], [[1.0]])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.sampled_from([0.0, 0.3, 1.0, 2.0, math.nan])), max_size=12),
        max_size=6,
    ),
    st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_matches_a_plain_reference(calls, epoch_ends):
    """Against a dict-of-lists reference that applies the documented rules one completion at a time."""
    stats = PromptStatistics(success_threshold=1.0, decay=0.9)
    cur, last, tot, dec = {}, {}, {}, {}
    for call, end in zip(calls, epoch_ends, strict=False):
        stats.update(np.array([i for i, _ in call], dtype=np.int64), np.array([r for _, r in call]))
        visit = {}
        for i, r in call:
            if not math.isnan(r):
                s, t = visit.get(i, (0, 0))
                visit[i] = (s + (r >= 1.0), t + 1)
        for i, (s, t) in visit.items():
            for d in (cur, tot):
                c0, t0 = d.get(i, (0, 0))
                d[i] = (c0 + s, t0 + t)
            p0, n0 = dec.get(i, (0.0, 0.0))
            dec[i] = (0.9 * p0 + s, 0.9 * n0 + t)
        if end:
            stats.end_epoch()
            last.update(cur)
            cur = {}
    ids = list(range(8))
    b = stats.batch(ids)
    want_rate = [last[i][0] / last[i][1] if i in last else math.nan for i in ids]
    np.testing.assert_allclose(b.success_rate, want_rate)
    np.testing.assert_array_equal(b.attempts, [tot.get(i, (0, 0))[1] for i in ids])
    np.testing.assert_array_equal(b.beta_a, [1 + tot.get(i, (0, 0))[0] for i in ids])
    np.testing.assert_allclose(
        b.smoothed_rate, [(1 + dec.get(i, (0, 0))[0]) / (17 + dec.get(i, (0, 0))[1]) for i in ids]
    )
    assert len(stats) == len(tot) and stats.num_seen == len(last)
    restored = PromptStatistics()
    restored.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert restored.state_dict() == stats.state_dict()


def test_the_success_rule_is_the_sampling_rule():
    from trl_adaptive.sampling.rules import is_success

    rng = np.random.default_rng(3)
    rewards = np.concatenate([rng.normal(0.5, 1.0, 200), [np.inf, -np.inf, np.nan, 0.5, np.nextafter(0.5, 0)]])
    stats = PromptStatistics(success_threshold=0.5)
    stats.update(np.zeros(len(rewards), dtype=np.int64), rewards)
    assert stats.batch([0]).successes[0] == is_success(rewards, 0.5).sum()
    assert stats.batch([0]).attempts[0] == len(rewards) - 1  # the NaN is no attempt


def test_ids_outside_int64_are_refused_not_wrapped():
    """uint64 ids above 2**63 - 1 would wrap to negative ids; a saved file with one, or a dataset column, too."""
    from trl_adaptive.stats import stable_prompt_ids

    with pytest.raises(ValueError, match="above 2\\*\\*63 - 1"):
        PromptStatistics().update(np.array([2**63 + 7], dtype=np.uint64), [1.0])
    with pytest.raises(ValueError, match="'prompt_id' holds ids outside int64"):
        stable_prompt_ids([2**63])
    state = PromptStatistics().state_dict() | {"prompt_ids": [2**64], "fingerprints": [""]}
    with pytest.raises(ValueError, match="must fit in int64"):
        PromptStatistics().load_state_dict(state)
