"""Priors (``trl_adaptive/stats/prior.py``): a success rate given before any attempt, how it blends into every
estimator, replacing and clearing it, bad input, and a plain reference."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import get_allocator


def test_prior_gives_a_first_epoch_rate_then_blends_without_fading():
    stats = PromptStatistics()
    stats.set_prior([1, 2, 3], [0.25, 1.0, np.nan], weight=4)
    assert len(stats) == 2 and 3 not in stats and stats.num_with_prior == 2 and stats.num_seen == 0
    np.testing.assert_allclose(stats.success_rates([1, 2, 3, 4]), [0.25, 1.0, np.nan, np.nan])
    stats.update([1] * 4 + [2] * 4, [1, 1, 1, 1] + [0, 0, 0, 0])
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.25, 1.0])  # mid-epoch: still the prior alone
    stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([1, 2]), [(1 + 4) / (4 + 4), (4 + 0) / (4 + 4)])
    for _ in range(3):  # the same evidence epoch after epoch: the prior keeps its full weight
        stats.update([1] * 4, [1, 1, 1, 1])
        stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([1]), [(1 + 4) / (4 + 4)])
    np.testing.assert_array_equal(stats.batch([1, 2]).success_rate, stats.success_rates([1, 2]))


def test_prior_seeds_est_decayed_counts_and_decays_per_visit():
    stats = PromptStatistics(decay=0.5)
    stats.set_prior([1], [0.25], weight=8)  # s0 = 2, t0 = 8
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + 2) / (17 + 8)])
    stats.update([1, 1], [1.0, 0.0])  # v = 1: n_pos = 1, n_tot = 2
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + 0.5 * 2 + 1) / (17 + 0.5 * 8 + 2)])
    stats.update([1, 1], [1.0, 1.0])  # v = 2: n_pos = 0.5 + 2, n_tot = 1 + 2
    stats.update([1, 1], [np.nan, np.nan])  # not a visit
    stats.end_epoch()  # priors and decay untouched by epochs
    want = (1 + 0.25 * 2 + 2.5) / (17 + 0.25 * 8 + 3)
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [want])
    # The prior decays exactly like pseudo-counts added to the decayed columns at set_prior time.
    alt = PromptStatistics(decay=0.5)
    alt.update([1] * 8, [1.0] * 2 + [0.0] * 6)  # a real visit worth the prior
    alt.update([1, 1], [1.0, 0.0])
    alt.update([1, 1], [1.0, 1.0])
    np.testing.assert_allclose(alt.batch([1]).smoothed_rate, [want])


def test_set_prior_again_replaces_without_double_counting():
    stats = PromptStatistics(decay=0.5)
    stats.update([1, 1], [1.0, 0.0])
    stats.set_prior([1], [0.5], weight=4)
    stats.update([1, 1], [0.0, 0.0])  # v = 1
    before = stats.state_dict()
    stats.set_prior([1], [0.5], weight=4)  # the same prior again: nothing changes (v stays 1)
    assert stats.state_dict() == before
    stats.set_prior([1], [1.0], weight=2)  # another prior: replaces the old one and starts at v = 0
    n_pos, n_tot = 0.5 * 1 + 0, 0.5 * 2 + 2
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + 2 + n_pos) / (17 + 2 + n_tot)])
    assert stats.state_dict()["columns"]["prior_visits"] == [0]
    stats.set_prior([1], [np.nan], weight=2)  # NaN clears it
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + n_pos) / (17 + n_tot)])
    assert stats.num_with_prior == 0 and len(stats) == 1
    stats.set_prior([1], [0.5], weight=3)
    stats.set_prior([1], [0.5], weight=0)  # weight 0 clears it too
    assert stats.num_with_prior == 0
    np.testing.assert_array_equal(stats.batch([1]).prior_attempts, [0.0])


def test_prior_in_cero_beta_and_counts_stay_real():
    stats = PromptStatistics()
    stats.set_prior([1, 2], [0.75, 0.0], weight=4)
    stats.update([1, 1, 1], [1.0, 0.0, 0.0])
    b = stats.batch([1, 2, 3])
    np.testing.assert_array_equal(b.beta_a, [1 + 3 + 1, 1 + 0, 1])
    np.testing.assert_array_equal(b.beta_b, [1 + 1 + 2, 1 + 4, 1])
    np.testing.assert_array_equal(b.attempts, [3, 0, 0])  # real counts only
    np.testing.assert_array_equal(b.successes, [1, 0, 0])
    np.testing.assert_array_equal(b.prior_attempts, [4, 4, 0])
    np.testing.assert_array_equal(b.evidence > 0, [True, True, False])  # a prior makes a prompt "seen" for Est


def test_est_does_not_treat_a_prompt_with_prior_as_unseen():
    stats = PromptStatistics()
    stats.update([1] * 8, [0.0] * 7 + [1.0])
    stats.end_epoch()
    est = get_allocator("reinforce_ada_est", max_rollouts=64)
    w_before = est.prompt_weights(stats.batch([1, 2, 3]))
    assert w_before[1] == w_before[2] == w_before[0]  # unseen prompts 2 and 3 get the seen prompt's weight
    stats.set_prior([2], [0.9], weight=8)  # an easy prompt: weighted by its own p~, below the others
    w = est.prompt_weights(stats.batch([1, 2, 3]))
    assert w[1] < w[0] and w[2] == pytest.approx(np.mean(w[:2]))


def test_end_epoch_leaves_priors_untouched():
    stats = PromptStatistics()
    stats.set_prior([1], [0.5], weight=2)
    stats.update([1], [1.0])
    columns = stats.state_dict()["columns"]
    stats.end_epoch()
    after = stats.state_dict()["columns"]
    assert all(after[k] == columns[k] for k in ("prior_successes", "prior_attempts", "prior_visits"))


@pytest.mark.parametrize(
    "rates, weight, match",
    [
        ([1.5], 1.0, r"success_rates must lie in \[0, 1\].*\[1.5\].*\[0\]"),
        ([-0.1], 1.0, "success_rates must lie in"),
        ([float("inf")], 1.0, "success_rates must lie in"),
        ([0.5], -1.0, "weight=-1.0: must be >= 0"),
        ([0.5], float("nan"), "weight=nan: must be finite"),
        ([0.5], float("inf"), "weight=inf: must be finite"),
        ([0.5], "8", "weight='8': must be a real number"),
        ([0.5, 0.5], 1.0, "one rate per prompt id"),
        (["a"], 1.0, "success_rates must hold numbers"),
    ],
)
def test_invalid_priors_are_rejected(rates, weight, match):
    stats = PromptStatistics()
    with pytest.raises(ValueError, match=match):
        stats.set_prior([0], rates, weight)
    assert len(stats) == 0


def test_prior_duplicates_and_none():
    stats = PromptStatistics()
    stats.set_prior([1, 1, 2], [0.5, 0.5, None], weight=2)  # a repeated id with the same rate is fine
    assert len(stats) == 1 and stats.num_with_prior == 1
    with pytest.raises(ValueError, match="prompt id 3 is given two different"):
        stats.set_prior([3, 3], [0.5, 0.25], weight=2)
    stats.set_prior([], [], weight=2)
    assert len(stats) == 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("update"), st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 1.0])), max_size=8)
            ),
            st.tuples(st.just("epoch"), st.none()),
            st.tuples(
                st.just("prior"),
                st.tuples(
                    st.integers(0, 4),
                    st.one_of(st.just(math.nan), st.floats(0.0, 1.0)),
                    st.sampled_from([0.0, 0.5, 2.0, 8.0]),
                ),
            ),
        ),
        max_size=12,
    )
)
def test_prior_rules_match_a_plain_reference(ops):
    """Every reading against a reference that keeps the prior apart and applies the documented formulas."""
    gamma = 0.8
    stats = PromptStatistics(decay=gamma)
    cur, last, tot, dec, prior = {}, {}, {}, {}, {}  # prior: id -> [s0, t0, v]
    for kind, arg in ops:
        if kind == "update":
            stats.update(np.array([i for i, _ in arg], dtype=np.int64), np.array([r for _, r in arg]))
            visit = {}
            for i, r in arg:
                s, t = visit.get(i, (0, 0))
                visit[i] = (s + r, t + 1)
            for i, (s, t) in visit.items():
                for d in (cur, tot):
                    d[i] = tuple(a + b for a, b in zip(d.get(i, (0, 0)), (s, t), strict=True))
                p0, n0 = dec.get(i, (0.0, 0.0))
                dec[i] = (gamma * p0 + s, gamma * n0 + t)
                if i in prior:
                    prior[i][2] += 1
        elif kind == "epoch":
            stats.end_epoch()
            last.update(cur)
            cur = {}
        else:
            i, p, w = arg
            stats.set_prior([i], [p], w)
            if math.isnan(p) or w == 0:
                prior.pop(i, None)
            elif i not in prior or prior[i][:2] != [w * p, w]:
                prior[i] = [w * p, w, 0]
    ids = list(range(6))
    b = stats.batch(ids)
    want_rate, want_smooth, want_a, want_b = [], [], [], []
    for i in ids:
        s0, t0, v = prior.get(i, (0.0, 0.0, 0))
        c_last, t_last = last.get(i, (0, 0))
        c, t = tot.get(i, (0, 0))
        n_pos, n_tot = dec.get(i, (0.0, 0.0))
        want_rate.append((c_last + s0) / (t_last + t0) if t_last + t0 > 0 else math.nan)
        want_smooth.append((1 + gamma**v * s0 + n_pos) / (17 + gamma**v * t0 + n_tot))
        want_a.append(1 + s0 + c)
        want_b.append(1 + (t0 - s0) + (t - c))
    np.testing.assert_allclose(b.success_rate, want_rate, rtol=1e-12)
    np.testing.assert_allclose(b.smoothed_rate, want_smooth, rtol=1e-12)
    np.testing.assert_allclose(b.beta_a, want_a, rtol=1e-12)
    np.testing.assert_allclose(b.beta_b, want_b, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(b.attempts, [tot.get(i, (0, 0))[1] for i in ids])
    np.testing.assert_array_equal(b.prior_attempts, [prior.get(i, (0, 0))[1] for i in ids])
    assert stats.num_with_prior == len(prior)
    restored = PromptStatistics(decay=gamma)
    restored.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert restored.state_dict() == stats.state_dict()
    assert PromptStatistics.from_dataset(stats.to_dataset()).state_dict() == stats.state_dict()


def test_prior_counts_reject_before_changing_anything():
    from trl_adaptive.stats import PriorCounts, RowTable

    prior = PriorCounts(RowTable(PriorCounts.columns))
    assert prior.set(np.array([1, 2]), [0.5, 0.25], weight=2).tolist() == [0, 1]
    assert prior.set(np.array([1, 2]), [0.5, 0.5], weight=2).tolist() == [1]  # only 2 changed
    with pytest.raises(ValueError, match="lie in"):
        prior.set(np.array([1, 3]), [0.0, 2.0], weight=2)
    assert prior.state_dict()["columns"]["prior_successes"] == [1.0, 1.0] and len(prior.table) == 2
    bad = {"columns": {"prior_successes": [3.0, 0.0], "prior_attempts": [2.0, 0.0]}}
    with pytest.raises(ValueError, match="prior_successes exceeds prior_attempts"):
        prior.load_state_dict(bad)
