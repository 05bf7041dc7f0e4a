"""Reinforce-Ada Est: shares proportional to 1/p~ or 1/sqrt(p~), the per-prompt cap, unseen prompts, weights."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation import PromptBatchStats, ReinforceAdaEstAllocator, get_allocator
from trl_adaptive.allocation.base import largest_remainder
from trl_adaptive.allocation.reinforce_ada import water_fill
from trl_adaptive.stats import PromptStatistics


def _stats(smoothed: list[float], attempts: float = 8.0) -> PromptBatchStats:
    """Batch stats with the given p~ and every prompt seen (attempts > 0)."""
    p = np.asarray(smoothed, dtype=np.float64)
    n = len(p)
    return PromptBatchStats(
        prompt_ids=np.arange(n),
        success_rate=p,
        attempts=np.full(n, attempts),
        successes=p * attempts,
        smoothed_rate=p,
        beta_a=np.ones(n),
        beta_b=np.ones(n),
    )


def test_registered_with_documented_defaults():
    est = get_allocator("reinforce_ada_est")
    assert isinstance(est, ReinforceAdaEstAllocator)
    assert (est.min_rollouts, est.max_rollouts, est.weighting, est.unseen_weight) == (2, 32, "hybrid", "batch_mean")
    assert not est.allows_zero and est.state_dict() == {}


def test_inverse_is_proportional_to_one_over_p():
    # p~ = 1/2, 1/4, 1/8: w = 2, 4, 8 (sum 14). B = 4 * 2 + 3 * 14 = 50, so N = 2 + 3 w = 8, 14, 26 exactly.
    est = ReinforceAdaEstAllocator(weighting="inverse")
    stats = _stats([0.5, 0.25, 0.125])
    counts = est.allocate(stats.success_rate, 3 * 2 + 42, stats=stats)
    assert counts.tolist() == [8, 14, 26]
    assert est.completion_weights(counts, stats) is None


def test_hybrid_is_proportional_to_one_over_sqrt_p():
    # p~ = 1/4, 1/16, 1/64: w = 2, 4, 8. B = 3 * 2 + 42 -> N = 2 + 3 w = 8, 14, 26.
    est = ReinforceAdaEstAllocator(weighting="hybrid")
    stats = _stats([1 / 4, 1 / 16, 1 / 64])
    counts = est.allocate(stats.success_rate, 48, stats=stats)
    assert counts.tolist() == [8, 14, 26]


def test_cap_with_water_filling():
    # w = 1, 1, 1, 97 (a never-solved prompt). Uncapped, the hard prompt would take 2 + 72 * 97 / 100 = 71.8.
    est = ReinforceAdaEstAllocator(weighting="inverse", max_rollouts=32)
    stats = _stats([1.0, 1.0, 1.0, 1 / 97])
    counts = est.allocate(stats.success_rate, 80, stats=stats)
    # The cap takes 32; the other 48 are split evenly over the three equal prompts.
    assert counts.tolist() == [16, 16, 16, 32]


def test_cap_binding_on_several_prompts_redistributes_in_proportion():
    est = ReinforceAdaEstAllocator(weighting="inverse", max_rollouts=10)
    stats = _stats([1 / 100, 1 / 90, 1 / 2, 1 / 1])  # w = 100, 90, 2, 1
    counts = est.allocate(stats.success_rate, 32, stats=stats)
    # Two capped at 10; the remaining 12 = 2 + 2 + 8 extra split 2 : 1 -> 2 + 16/3, 2 + 8/3 -> 7.33, 4.67.
    assert counts.tolist() == [10, 10, 7, 5]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(1e-3, 1.0), min_size=1, max_size=30),
    st.integers(2, 4),
    st.integers(0, 40),
    st.data(),
)
def test_water_fill_and_rounding_properties(p, low, span, data):
    high = low + span
    w = 1 / np.asarray(p)
    total = data.draw(st.integers(len(w) * low, len(w) * high))
    x = water_fill(w, total, low, high)
    assert x.sum() == pytest.approx(total) and np.all(x >= low - 1e-9) and np.all(x <= high + 1e-9)
    # More weight never gets less; uncapped prompts share the extra in proportion to their weights.
    order = np.argsort(w, kind="stable")
    assert np.all(np.diff(x[order]) >= -1e-9)
    uncapped = x < high - 1e-9
    if uncapped.sum() >= 2:
        ratio = (x[uncapped] - low) / w[uncapped]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-6, atol=1e-9)
    n = largest_remainder(x, total, low, high)
    assert n.dtype == np.int64 and n.sum() == total and n.min() >= low and n.max() <= high
    assert np.all(np.abs(n - x) < 1 + 1e-9)


def test_unseen_prompts_get_an_average_share_not_a_hard_one():
    est = ReinforceAdaEstAllocator(weighting="inverse")
    store = PromptStatistics()
    first = est.allocate([np.nan] * 4, 32, stats=store.batch([0, 1, 2, 3]))
    assert first.tolist() == [8, 8, 8, 8]  # first epoch: uniform
    store.update([0] * 8 + [1] * 8, [1.0] * 4 + [0.0] * 4 + [0.0] * 8)
    batch = store.batch([0, 1, 2, 3])  # p~ = 5/25 and 1/25, then two unseen prompts
    np.testing.assert_allclose(batch.smoothed_rate, [0.2, 0.04, 1 / 17, 1 / 17])
    counts = est.allocate(batch.success_rate, 32, stats=batch)
    # w = 5, 25 and the batch mean 15 for the unseen: 2 + 24 * (5, 25, 15, 15) / 60.
    assert counts.tolist() == [4, 12, 8, 8]
    # Two half-solved prompts (p~ = 5/25, w = 5) next to two new ones: the unseen get the same share as them,
    # while the official prior (p~ = 1/17, w = 17) treats the new prompts as hard: 2 + 24 * 17 / 44 = 11.3.
    store2 = PromptStatistics()
    store2.update([0] * 8 + [1] * 8, [1.0, 0.0] * 8)
    batch = store2.batch([0, 1, 2, 3])
    assert est.allocate(batch.success_rate, 32, stats=batch).tolist() == [8, 8, 8, 8]
    official = ReinforceAdaEstAllocator(weighting="inverse", unseen_weight="prior")
    assert official.allocate(batch.success_rate, 32, stats=batch).tolist() == [5, 5, 11, 11]


def test_completion_weights_hybrid():
    est = ReinforceAdaEstAllocator()
    stats = _stats([1 / 4, 1 / 16, 1 / 64])
    counts = est.allocate(stats.success_rate, 48, stats=stats)
    v = est.completion_weights(counts, stats)
    assert v.shape == (3,)
    assert np.dot(counts, v) / counts.sum() == pytest.approx(1.0)  # mean over completions is 1
    np.testing.assert_allclose(v / v[0], [1, 2, 4])  # proportional to 1 / sqrt(p~)
    # Allocation x weight is proportional to 1 / p~ where the cap does not bind (log objective's weight).
    np.testing.assert_allclose((counts - 2) * v / ((counts[0] - 2) * v[0]), [1, 4, 16])
    with pytest.raises(ValueError, match="shape"):
        est.completion_weights(np.array([1, 2]), stats)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="weighting"):
        ReinforceAdaEstAllocator(weighting="sqrt")
    with pytest.raises(ValueError, match="unseen_weight"):
        ReinforceAdaEstAllocator(unseen_weight="hard")
    with pytest.raises(ValueError, match="max_rollouts"):
        ReinforceAdaEstAllocator(max_rollouts=1)
    with pytest.raises(ValueError, match="budget"):
        ReinforceAdaEstAllocator().allocate([0.5, 0.5], budget=65)  # above 2 * 32


def test_end_to_end_with_the_store_moves_budget_to_hard_prompts():
    rng = np.random.default_rng(0)
    true_p = np.array([0.05, 0.3, 0.6, 0.95])
    store = PromptStatistics()
    est = ReinforceAdaEstAllocator()
    ids = np.array([100, 200, 300, 400])
    for _ in range(20):
        counts = est.allocate(store.success_rates(ids), 64, stats=store.batch(ids))
        comp = np.repeat(ids, counts)
        store.update(comp, (rng.random(len(comp)) < np.repeat(true_p, counts)).astype(float))
    assert counts.sum() == 64 and counts[0] > counts[-1]
    assert np.all(np.diff(counts) <= 0)  # harder prompts get more
