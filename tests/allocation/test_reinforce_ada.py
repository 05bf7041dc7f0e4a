"""Reinforce-Ada Est: shares proportional to 1/p~ or 1/sqrt(p~), the per-prompt cap, unseen prompts, weights."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation import PromptBatchStats, ReinforceAdaEstAllocator
from trl_adaptive.allocation.base import largest_remainder
from trl_adaptive.allocation.reinforce_ada import water_fill
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import get_allocator


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
    # p~ = 1/2, 1/4, 1/8: w = 2, 4, 8 (sum 14). B = 42 -> lambda = 3 and N = 3 w = 6, 12, 24 exactly.
    est = ReinforceAdaEstAllocator(weighting="inverse")
    stats = _stats([0.5, 0.25, 0.125])
    allocation = est.allocate(stats, 42)
    assert allocation.counts.tolist() == [6, 12, 24]
    assert allocation.weights is None  # inverse: no residual weights
    assert est.residual_weights(allocation.counts, stats) is None


def test_hybrid_is_proportional_to_one_over_sqrt_p():
    # p~ = 1/4, 1/16, 1/64: w = 2, 4, 8. B = 42 -> N = 3 w = 6, 12, 24.
    est = ReinforceAdaEstAllocator(weighting="hybrid")
    stats = _stats([1 / 4, 1 / 16, 1 / 64])
    counts = est.allocate(stats, 42).counts
    assert counts.tolist() == [6, 12, 24]


def test_shares_are_proportional_not_a_uniform_floor_plus_proportional_extra():
    # The case: the old rule N = N_low + lambda * w gave 8, 14, 26 here, so count x weight was 16 : 56 : 208
    # (1 : 3.5 : 13) instead of the log objective's 1 : 4 : 16.
    est = ReinforceAdaEstAllocator()
    stats = _stats([1 / 4, 1 / 16, 1 / 64])  # w = 2, 4, 8
    x = water_fill(est.prompt_weights(stats), 48, est.min_rollouts, est.max_rollouts)
    np.testing.assert_allclose(x, np.array([2, 4, 8]) * 48 / 14)
    v = est.residual_weights(x, stats)
    np.testing.assert_allclose(x * v / (x[0] * v[0]), [1, 4, 16])  # exact on the real shares
    counts = est.allocate(stats, 48).counts
    assert counts.tolist() == [7, 14, 27]  # 6.86, 13.71, 27.43 rounded


def test_low_bound_raises_easy_prompts_and_the_rest_stay_proportional():
    # w = 1, 4, 5, B = 20, N_low = 3: lambda * 1 < 3, so the easy prompt is raised to 3 and 17 = lambda * 9.
    x = water_fill(np.array([1.0, 4.0, 5.0]), 20, 3, 10)
    np.testing.assert_allclose(x, [3, 4 * 17 / 9, 5 * 17 / 9])
    # Both bounds at once: w = 1, 2, 3, 100 with [2, 10] and B = 21: 10 for the hard one, 2 for w = 1, and
    # lambda * (2 + 3) = 9 for the two in between.
    x = water_fill(np.array([1.0, 2.0, 3.0, 100.0]), 21, 2, 10)
    np.testing.assert_allclose(x, [2, 2 * 9 / 5, 3 * 9 / 5, 10])
    # Edges of the feasible range and equal bounds.
    np.testing.assert_array_equal(water_fill(np.array([1.0, 9.0]), 4, 2, 10), [2, 2])
    np.testing.assert_array_equal(water_fill(np.array([1.0, 9.0]), 20, 2, 10), [10, 10])
    np.testing.assert_array_equal(water_fill(np.array([1.0, 9.0]), 8, 4, 4), [4, 4])
    assert water_fill(np.array([]), 0, 2, 10).shape == (0,)


def test_cap_with_water_filling():
    # w = 1, 1, 1, 97 (a never-solved prompt). Uncapped, the hard prompt would take 80 * 97 / 100 = 77.6.
    est = ReinforceAdaEstAllocator(weighting="inverse", max_rollouts=32)
    stats = _stats([1.0, 1.0, 1.0, 1 / 97])
    counts = est.allocate(stats, 80).counts
    # The cap takes 32; the other 48 are split evenly over the three equal prompts.
    assert counts.tolist() == [16, 16, 16, 32]


def test_cap_binding_on_several_prompts_redistributes_in_proportion():
    est = ReinforceAdaEstAllocator(weighting="inverse", max_rollouts=10)
    stats = _stats([1 / 100, 1 / 90, 1 / 2, 1 / 1])  # w = 100, 90, 2, 1
    counts = est.allocate(stats, 32).counts
    # Two capped at 10; the remaining 12 = lambda * (2 + 1) -> lambda = 4 -> 8, 4.
    assert counts.tolist() == [10, 10, 8, 4]


def _check_water_fill(w: np.ndarray, x: np.ndarray, total: float, low: float, high: float) -> np.ndarray:
    """Assert x = clip(lambda * w, low, high) for one lambda, with sum total; return the unclamped mask."""
    assert x.shape == w.shape and x.sum() == pytest.approx(total, rel=1e-12, abs=1e-9)
    assert np.all(x >= low) and np.all(x <= high)
    at_low, at_high = x == low, x == high  # clamped shares are set to the bound exactly
    inside = ~(at_low | at_high)
    # Every prompt strictly inside the bounds has the same x_i / w_i = lambda ...
    ratio = x[inside] / w[inside]
    if inside.any():
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
    # ... and the clamped ones are clamped for that lambda: lambda * w_i <= low where raised, >= high where cut.
    only_low, only_high = at_low & ~at_high, at_high & ~at_low
    lam_min = max([*(high / w[only_high]), *ratio], default=0.0)
    lam_max = min([*(low / w[only_low]), *ratio], default=np.inf)
    assert lam_min <= lam_max * (1 + 1e-9)
    return inside


@settings(max_examples=200, deadline=None)
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
    _check_water_fill(w, x, total, low, high)
    # More weight never gets less.
    order = np.argsort(w, kind="stable")
    assert np.all(np.diff(x[order]) >= -1e-9)
    n = largest_remainder(x, total, low, high)
    assert n.dtype == np.int64 and n.sum() == total and n.min() >= low and n.max() <= high
    assert np.all(np.abs(n - x) < 1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(1e-6, 1e6), min_size=1, max_size=60),
    # Exact zeros, or values away from the float range's bottom: a total like 1e-313 is subnormal, keeps too few
    # digits for the exactness checks, and is no budget anyway.
    st.one_of(st.just(0.0), st.floats(1e-6, 50.0)),
    st.one_of(st.just(0.0), st.floats(1e-6, 200.0)),
    st.one_of(st.just(0.0), st.just(1.0), st.floats(1e-9, 1.0)),
)
def test_water_fill_is_exact_for_any_weights_and_real_bounds(w, low, span, where):
    w = np.asarray(w)
    high = low + span
    total = len(w) * (low + where * span)  # anywhere in [M * low, M * high]
    _check_water_fill(w, water_fill(w, total, low, high), total, low, high)


def test_water_fill_scales_to_large_batches():
    rng = np.random.default_rng(0)
    w = 1 / rng.uniform(1e-3, 1.0, 200_000)
    x = water_fill(w, 200_000 * 8, 2, 32)
    _check_water_fill(w, x, 200_000 * 8, 2, 32)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(1 / 97, 1.0), min_size=1, max_size=40),
    st.integers(2, 4),
    st.integers(4, 40),
    st.data(),
)
def test_hybrid_count_times_weight_is_proportional_to_one_over_p(p, low, span, data):
    """The log objective's weight: N_i v_i proportional to 1 / p~_i for every prompt strictly inside the bounds."""
    p = np.asarray(p)
    est = ReinforceAdaEstAllocator(min_rollouts=low, max_rollouts=low + span)
    stats = _stats(p.tolist())
    budget = data.draw(st.integers(len(p) * low, len(p) * (low + span)))
    w = est.prompt_weights(stats)
    x = water_fill(w, budget, low, low + span)
    inside = _check_water_fill(w, x, budget, low, low + span)
    if not inside.any():
        return
    # Real shares: x_i v_i p~_i is one constant over the unclamped prompts.
    v = est.residual_weights(x, stats)
    target = x * v * p
    np.testing.assert_allclose(target[inside], target[inside][0], rtol=1e-9)
    # Integer counts (each the floor or ceiling of x_i): N_i v_i p~_i / (x_i v_i p~_i) = N_i / x_i, off by < 1 / x_i.
    allocation = est.allocate(stats, budget)
    counts, v = allocation.counts, allocation.weights
    np.testing.assert_array_equal(v, est.residual_weights(counts, stats))  # the allocation carries the weights
    ref = (x * v * p)[inside][0]  # the same constant with the integer counts' weight normalisation
    rel = counts * v * p / ref - 1
    assert np.all(np.abs(rel[inside]) <= 1 / x[inside] + 1e-9)


def test_unseen_prompts_get_an_average_share_not_a_hard_one():
    est = ReinforceAdaEstAllocator(weighting="inverse")
    store = PromptStatistics()
    first = est.allocate(store.batch([0, 1, 2, 3]), 32)
    assert first.counts.tolist() == [8, 8, 8, 8]  # first epoch: uniform
    store.update([0] * 8 + [1] * 8, [1.0] * 4 + [0.0] * 4 + [0.0] * 8)
    batch = store.batch([0, 1, 2, 3])  # p~ = 5/25 and 1/25, then two unseen prompts
    np.testing.assert_allclose(batch.smoothed_rate, [0.2, 0.04, 1 / 17, 1 / 17])
    counts = est.allocate(batch, 32).counts
    # w = 5, 25 and the batch mean 15 for the unseen: 32 * (5, 25, 15, 15) / 60 = 2.67, 13.33, 8, 8.
    assert counts.tolist() == [3, 13, 8, 8]
    # Two half-solved prompts (p~ = 5/25, w = 5) next to two new ones: the unseen get the same share as them,
    # while the official prior (p~ = 1/17, w = 17) treats the new prompts as hard: 32 * 17 / 44 = 12.4.
    store2 = PromptStatistics()
    store2.update([0] * 8 + [1] * 8, [1.0, 0.0] * 8)
    batch = store2.batch([0, 1, 2, 3])
    assert est.allocate(batch, 32).counts.tolist() == [8, 8, 8, 8]
    official = ReinforceAdaEstAllocator(weighting="inverse", unseen_weight="prior")
    assert official.allocate(batch, 32).counts.tolist() == [4, 4, 12, 12]


def test_allocation_weights_hybrid():
    est = ReinforceAdaEstAllocator()
    stats = _stats([1 / 4, 1 / 16, 1 / 64])
    allocation = est.allocate(stats, 42)
    counts, v = allocation.counts, allocation.weights
    assert v.shape == (3,) and v.dtype == np.float64
    np.testing.assert_array_equal(v, est.residual_weights(counts, stats))
    assert np.dot(counts, v) / counts.sum() == pytest.approx(1.0)  # mean over completions is 1
    np.testing.assert_allclose(v / v[0], [1, 2, 4])  # proportional to 1 / sqrt(p~)
    # Allocation x weight is proportional to 1 / p~ where the bounds do not bind (log objective's weight).
    np.testing.assert_allclose(counts * v / (counts[0] * v[0]), [1, 4, 16])
    with pytest.raises(ValueError, match="shape"):
        est.residual_weights(np.array([1, 2]), stats)


@pytest.mark.timeout(10)
def test_water_fill_raises_when_the_total_is_out_of_reach():
    with pytest.raises(ValueError, match=r"total=25 .*M=2 .*low=2 and high=10.*\[4, 20\]"):
        water_fill(np.array([1.0, 2.0]), 25, 2, 10)
    with pytest.raises(ValueError, match=r"total=3 .*M=2"):
        water_fill(np.array([1.0, 2.0]), 3, 2, 10)
    with pytest.raises(ValueError, match="total=1"):
        water_fill(np.array([]), 1, 2, 10)


def test_water_fill_rejects_bad_weights_and_bounds():
    for bad in (np.nan, np.inf, -1.0, 0.0):
        with pytest.raises(ValueError, match="finite and > 0"):
            water_fill(np.array([1.0, bad]), 8, 2, 10)
    with pytest.raises(ValueError, match="0 <= low <= high"):
        water_fill(np.array([1.0, 1.0]), 8, 5, 3)
    with pytest.raises(ValueError, match="0 <= low <= high"):
        water_fill(np.array([1.0, 1.0]), 8, -1, 10)
    with pytest.raises(ValueError, match="1-D"):
        water_fill(np.ones((2, 2)), 8, 2, 10)


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
        counts = est.allocate(store.batch(ids), 64).counts
        comp = np.repeat(ids, counts)
        store.update(comp, (rng.random(len(comp)) < np.repeat(true_p, counts)).astype(float))
    assert counts.sum() == 64 and counts[0] > counts[-1]
    assert np.all(np.diff(counts) <= 0)  # harder prompts get more
