"""bayes_knapsack (trl_adaptive/allocation/bayes_knapsack.py): the knapsack over E[Value] under a Beta posterior.

The expected value against the Beta-function closed form and Monte Carlo, concavity in N (so the greedy stays exact),
the plug-in limit as a + b grows, exactness against brute force (also with a per-prompt offset, the pilot's round
two), the compiled kernel against its plain body, bad input, and a resume that keeps the next allocation identical.
The Allocator contract is checked for every registered allocator by tests/allocation/test_allocator_contract.py.
"""

import json
import math

import numpy as np
import pytest
from helpers.allocation import brute_force
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation import (
    BayesKnapsackAllocator,
    PromptBatchStats,
    UniformAllocator,
    _kernels,
    absorb,
    expected_info_gain,
    expected_marginal_gains,
    expected_value_table,
    pilot_budget_check,
    value_table,
)
from trl_adaptive.allocation.bayes_knapsack import expected_gains
from trl_adaptive.allocation.solvers import _greedy, knapsack_objective
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import get_allocator, registered_allocators

NAN = float("nan")
# Beta parameters over many orders of magnitude: 1e-3 (almost all mass at 0 or 1) to 1e8 (almost a point mass).
PARAM = st.floats(-3.0, 8.0).map(lambda x: 10.0**x)


def closed_form(a: float, b: float, n: int) -> float:
    """E[Value(n, p)] = [B(a+1, b+2) - B(a+n+1, b+2) - B(a+1, b+n+2)] / B(a, b), straight from lgamma."""
    if n < 2:
        return 0.0

    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    base = log_beta(a, b)
    return (
        math.exp(log_beta(a + 1, b + 2) - base)
        - math.exp(log_beta(a + n + 1, b + 2) - base)
        - math.exp(log_beta(a + 1, b + n + 2) - base)
    )


def stats_for(a, b, evidence=None) -> PromptBatchStats:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    t = np.full(len(a), 8.0) if evidence is None else np.asarray(evidence, dtype=np.float64)
    return PromptBatchStats(
        prompt_ids=np.arange(len(a), dtype=np.int64),
        success_rate=np.where(t > 0, a / (a + b), NAN),
        attempts=t,
        successes=np.zeros(len(a)),
        smoothed_rate=np.full(len(a), 1 / 17),
        beta_a=a,
        beta_b=b,
    )


# ---- the expected value ---------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(a=st.floats(0.05, 300.0), b=st.floats(0.05, 300.0))
def test_expected_value_is_the_beta_function_closed_form(a, b):
    table = expected_value_table([a], [b], n_up=40)[0]
    for n in range(41):
        assert table[n] == pytest.approx(closed_form(a, b, n), rel=1e-9, abs=1e-13)
    log_beta = math.lgamma(a + 1) + math.lgamma(b + 2) - math.lgamma(a + b + 3)
    info_gain = math.exp(log_beta - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)))  # B(a+1, b+2) / B(a, b)
    assert expected_info_gain([a], [b])[0] == pytest.approx(info_gain, rel=1e-12)


def test_expected_value_against_monte_carlo():
    rng = np.random.default_rng(0)
    for a, b in ((1.0, 9.0), (5.0, 5.0), (0.3, 0.7)):
        p = rng.beta(a, b, size=400_000)
        for n in (2, 8, 32):
            sample = (1 - p**n - (1 - p) ** n) * p * (1 - p) ** 2
            estimate, error = sample.mean(), sample.std() / math.sqrt(len(p))
            assert abs(expected_value_table([a], [b], n)[0, n] - estimate) < 5 * error


@settings(max_examples=300, deadline=None)
@given(a=PARAM, b=PARAM)
def test_expected_value_is_concave_in_n(a, b):
    # g(N) = E[InfoGain(p) (p^N (1-p) + (1-p)^N p)] does not increase from N = 1 on, in floating point too, for the
    # NumPy reference and for the kernel: the greedy is exact without its DP fallback.
    for gains in (expected_marginal_gains([a], [b], 128), expected_gains(np.array([a]), np.array([b]), 128)):
        g = gains[0]
        assert g[0] == 0.0 and np.all(g >= 0.0)
        assert np.all(np.diff(g[1:]) <= 0.0), g
    table = expected_value_table([a], [b], 128)[0]
    assert np.all(np.diff(table[1:]) >= 0.0)


@settings(max_examples=100, deadline=None)
@given(p=st.floats(0.01, 0.99), n=st.integers(2, 128))
@example(p=0.07, n=16)
def test_expected_value_tends_to_the_plug_in_value(p, n):
    # a + b = s with a / s = p: the posterior concentrates at p and E[Value(n, p)] -> Value(n, p), error O(n^2 / s).
    # A bound per s, not a ratio between successive errors: the O(1/s) coefficient, V''(p) p (1 - p) / 2, crosses
    # zero at some (p, n) (p = 0.07, n = 16 is one), where successive errors shrink unevenly. The largest
    # error * s / n^2 over a fine (p, n, s) grid is 0.044.
    plug_in = value_table([p], n)[0, n]
    for s in (1e2, 1e4, 1e6, 1e8):
        error = abs(expected_value_table([p * s], [(1 - p) * s], n)[0, n] - plug_in)
        assert error <= 0.1 * n * n / s + 1e-7, (s, error)
    # And the expected info gain tends to InfoGain(p).
    assert expected_info_gain([p * 1e8], [(1 - p) * 1e8])[0] == pytest.approx(p * (1 - p) ** 2, rel=1e-6)


def test_uniform_posterior_hand_computed():
    # p ~ U(0, 1): E[Value(2)] = 2 E[p^2 (1-p)^3] = 2 B(3, 4) = 1/30, E[InfoGain] = B(2, 3) = 1/12.
    assert expected_value_table([1.0], [1.0], 2)[0].tolist() == pytest.approx([0.0, 0.0, 1 / 30])
    assert expected_info_gain(1.0, 1.0)[0] == pytest.approx(1 / 12)


@settings(max_examples=60, deadline=None)
@given(a=st.lists(PARAM, min_size=1, max_size=6), data=st.data())
def test_kernel_matches_reference_and_its_plain_body(a, data):
    b = data.draw(st.lists(PARAM, min_size=len(a), max_size=len(a)))
    a, b = np.array(a), np.array(b)
    width = data.draw(st.integers(0, 40))
    compiled, plain = np.full((len(a), width), np.nan), np.full((len(a), width), np.nan)
    _kernels.expected_gains(a, b, compiled)
    _kernels._expected_gains_py(a, b, plain)
    # numba's log / exp may differ from NumPy's by an ulp each, a few ulps over the sum of ten terms
    np.testing.assert_allclose(compiled, plain, rtol=1e-13, atol=0)
    reference = expected_marginal_gains(a, b, width)
    np.testing.assert_allclose(compiled, reference, rtol=1e-11, atol=1e-300)


@pytest.mark.parametrize(
    "a, b, match",
    [([0.0], [1.0], "a must be finite and > 0"), ([1.0], [NAN], "b must be finite"), ([1.0, 2.0], [1.0], "equal")],
)
def test_expected_value_rejects_bad_parameters(a, b, match):
    with pytest.raises(ValueError, match=match):
        expected_value_table(a, b, 8)


# ---- the allocator --------------------------------------------------------------------------------------------------
def test_registered_with_the_knapsack_defaults():
    assert "bayes_knapsack" in registered_allocators() and "knapsack" in registered_allocators()
    allocator = get_allocator("bayes_knapsack")
    assert isinstance(allocator, BayesKnapsackAllocator)
    assert (allocator.min_rollouts, allocator.max_rollouts, allocator.solver) == (2, 128, "greedy")
    assert allocator.state_dict() == {} and not allocator.allows_zero


@st.composite
def small_instances(draw):
    m = draw(st.integers(1, 4))
    a = draw(st.lists(st.floats(0.1, 30.0), min_size=m, max_size=m))
    b = draw(st.lists(st.floats(0.1, 30.0), min_size=m, max_size=m))
    n_low = draw(st.integers(2, 3))
    n_up = draw(st.integers(n_low, 9))
    budget = draw(st.integers(m * n_low, m * n_up))
    return np.array(a), np.array(b), n_low, n_up, budget


@settings(max_examples=80, deadline=None)
@given(instance=small_instances())
def test_exact_against_brute_force(instance):
    a, b, n_low, n_up, budget = instance
    table = expected_value_table(a, b, n_up)
    best = brute_force(table, budget, np.full(len(a), n_low), np.full(len(a), n_up))
    for solver in ("greedy", "dp"):
        allocator = BayesKnapsackAllocator(min_rollouts=n_low, max_rollouts=n_up, solver=solver)
        allocation = allocator.allocate(stats_for(a, b), budget)
        counts = allocation.counts
        assert allocation.weights is None and allocation.budget == budget
        assert counts.dtype == np.int64 and int(counts.sum()) == budget
        assert np.all(counts >= n_low) and np.all(counts <= n_up)
        assert knapsack_objective(table, counts) == pytest.approx(best, rel=1e-12, abs=1e-15)


@settings(max_examples=80, deadline=None)
@given(instance=small_instances(), data=st.data())
def test_allocate_remaining_is_exact_against_brute_force(instance, data):
    # Round two of a pilot: the knapsack with a per-prompt offset already_i (any in [0, N_up]).
    a, b, n_low, n_up, _ = instance
    m = len(a)
    already = np.array(data.draw(st.lists(st.integers(0, n_up), min_size=m, max_size=m)), dtype=np.int64)
    lower = np.maximum(already, n_low)
    left = data.draw(st.integers(int(lower.sum() - already.sum()), int(m * n_up - already.sum())))
    table = expected_value_table(a, b, n_up)
    best = brute_force(table, int(already.sum()) + left, lower, np.full(m, n_up))
    for solver in ("greedy", "dp"):
        allocator = BayesKnapsackAllocator(min_rollouts=n_low, max_rollouts=n_up, solver=solver)
        remaining = allocator.allocate_remaining(stats_for(a, b), left, already)
        extra = remaining.counts
        assert remaining.budget == left and remaining.prompt_ids.tolist() == list(range(m))
        assert extra.dtype == np.int64 and np.all(extra >= 0) and int(extra.sum()) == left
        total = already + extra
        assert np.all(total >= n_low) and np.all(total <= n_up)
        assert knapsack_objective(table, total) == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_greedy_needs_no_dp_at_scale():
    # 256 x 8 with DAPO-like posteriors: the greedy's answer is certified optimal on its own (concave rows).
    rng = np.random.default_rng(0)
    t = np.full(256, 8.0)
    c = rng.binomial(8, rng.choice([0.005, 0.5, 0.99], size=256)).astype(float)
    gains = expected_gains(1 + c, 1 + t - c, 128)
    lo, hi = np.full(256, 2, dtype=np.int64), np.full(256, 128, dtype=np.int64)
    counts, certified = _greedy(gains, 2048, lo, hi)
    assert certified and int(counts.sum()) == 2048


def test_no_evidence_gets_the_uniform_share():
    # First epoch without priors: exactly uniform. Mixed batch: prompts without evidence get their uniform share.
    nan_stats = PromptBatchStats.from_success_rates([NAN] * 5)
    allocator = BayesKnapsackAllocator()
    assert (
        allocator.allocate(nan_stats, 43).counts.tolist() == UniformAllocator().allocate([NAN] * 5, 43).counts.tolist()
    )
    rates = [NAN, 0.0, 0.5, NAN, 1.0]
    counts = allocator.allocate(rates, 41).counts
    uniform = UniformAllocator().allocate(rates, 41).counts
    assert counts[[0, 3]].tolist() == uniform[[0, 3]].tolist() and int(counts.sum()) == 41


def test_a_prompt_with_a_prior_is_not_unseen():
    store = PromptStatistics()
    store.set_prior([1], [0.5], weight=8)
    stats = store.batch([0, 1, 2])
    counts = BayesKnapsackAllocator().allocate(stats, 24).counts
    assert counts[0] == counts[2] == 8 and counts[1] == 8  # its share is solved alone, within the same 8
    stats = store.batch([1, 3])
    assert stats.evidence.tolist() == [8.0, 0.0]


def test_posterior_spends_on_uncertain_prompts_not_on_certainty():
    # 0/8 keeps value under Beta(1, 9); 800/800 is all but certainly solved and sits at N_low.
    a = np.array([1.0, 5.0, 801.0, 9.0])
    b = np.array([9.0, 5.0, 1.0, 1.0])
    counts = BayesKnapsackAllocator().allocate(stats_for(a, b), 64).counts
    assert counts[2] == 2 and counts[0] > 8 and int(counts.sum()) == 64


def test_bad_posterior_names_the_field():
    allocator = BayesKnapsackAllocator()
    for a, b, field in (([0.0, 1.0], [1.0, 1.0], "beta_a"), ([1.0, 1.0], [1.0, np.inf], "beta_b")):
        with pytest.raises(ValueError, match=f"stats.{field} must be finite and > 0.*PromptStatistics.batch"):
            allocator.allocate(stats_for(a, b), 8)
        with pytest.raises(ValueError, match=f"stats.{field}"):
            allocator.allocate_remaining(stats_for(a, b), 4, np.array([2, 2]))
    with pytest.raises(ValueError, match="solver"):
        BayesKnapsackAllocator(solver="magic")
    with pytest.raises(ValueError, match="min_rollouts"):
        BayesKnapsackAllocator(min_rollouts=1)


def test_allocate_remaining_bad_input():
    allocator = BayesKnapsackAllocator(max_rollouts=16)
    stats = stats_for([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        allocator.allocate_remaining(stats, 4, np.array([2, 2, 2]))
    with pytest.raises(ValueError, match=r"\[0, max_rollouts=16\]"):
        allocator.allocate_remaining(stats, 4, np.array([2, 17]))
    with pytest.raises(ValueError, match="whole numbers"):
        allocator.allocate_remaining(stats, 4, np.array([2.5, 2.0]))
    with pytest.raises(ValueError, match="budget_left"):
        allocator.allocate_remaining(stats, -1, np.array([2, 2]))
    with pytest.raises(ValueError, match=r"must lie in \[4, 32\], it is 33"):
        allocator.allocate_remaining(stats, 29, np.array([2, 2]))
    with pytest.raises(ValueError, match=r"must lie in \[4, 32\], it is 3"):
        allocator.allocate_remaining(stats, 1, np.array([1, 1]))
    assert allocator.allocate_remaining(stats, 0, np.array([2, 16])).counts.tolist() == [0, 0]


# ---- the pilot round ------------------------------------------------------------------------------------------------
def test_pilot_budget_check():
    pilot_budget_check(4, num_prompts=256, budget=2048, min_rollouts=2)
    pilot_budget_check(7, num_prompts=256, budget=2048, min_rollouts=2)
    with pytest.raises(ValueError, match=r"pilot_rollouts=8 x 256 prompts = 2048 .*at most 7"):
        pilot_budget_check(8, num_prompts=256, budget=2048, min_rollouts=2)
    with pytest.raises(ValueError, match=r"pilot_rollouts=9 .*leaves nothing for round two"):
        pilot_budget_check(9, num_prompts=256, budget=2048, min_rollouts=2)
    for bad in (0, -2, 1.5, True, None):
        with pytest.raises(ValueError, match="pilot_rollouts="):
            pilot_budget_check(bad, num_prompts=4, budget=32, min_rollouts=2)
    with pytest.raises(ValueError, match="num_prompts=0"):
        pilot_budget_check(1, num_prompts=0, budget=32, min_rollouts=2)
    with pytest.raises(ValueError, match="min_rollouts=4 x 4 prompts"):
        pilot_budget_check(1, num_prompts=4, budget=12, min_rollouts=4)


def test_absorb_adds_the_round_to_the_posterior():
    stats = stats_for([1.0, 2.0, 1.0], [1.0, 3.0, 1.0], evidence=[0.0, 5.0, 0.0])
    after = absorb(stats, np.array([1, 0, 2]), np.array([4, 4, 2]))
    assert after.beta_a.tolist() == [2.0, 2.0, 3.0] and after.beta_b.tolist() == [4.0, 7.0, 1.0]
    assert after.evidence.tolist() == [4.0, 9.0, 2.0]
    assert stats.beta_a.tolist() == [1.0, 2.0, 1.0]  # the input is not changed
    with pytest.raises(ValueError, match="0 <= successes <= attempts"):
        absorb(stats, np.array([5, 0, 0]), np.array([4, 4, 4]))
    with pytest.raises(ValueError, match="one count per prompt"):
        absorb(stats, np.array([1, 0]), np.array([4, 4]))


def test_pilot_then_round_two_spends_the_step_budget():
    rng = np.random.default_rng(3)
    store = PromptStatistics()
    ids = np.arange(64)
    p = rng.choice([0.01, 0.3, 0.7, 0.99], size=64)
    pilot_budget_check(2, num_prompts=64, budget=512, min_rollouts=2)
    first = np.full(64, 2)
    successes = rng.binomial(2, p)
    after = absorb(store.batch(ids), successes, first)
    extra = BayesKnapsackAllocator().allocate_remaining(after, 512 - 128, first).counts
    assert int((first + extra).sum()) == 512 and np.all(extra >= 0)


# ---- resume ---------------------------------------------------------------------------------------------------------
def test_resume_keeps_the_posterior_and_the_next_allocation_bit_identical():
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 40)
    store = PromptStatistics(posterior_half_life=5.0, posterior_prior_a=0.5, posterior_prior_b=0.5)
    store.set_prior([3, 4], [0.2, 0.9], weight=8)
    allocator = BayesKnapsackAllocator()
    for step in range(6):
        ids = rng.permutation(40)[:16]
        counts = allocator.allocate(store.batch(ids), 128).counts
        seg = np.repeat(ids, counts)
        store.update(seg, (rng.random(len(seg)) < p[seg]).astype(float))
        if step % 3 == 2:
            store.end_epoch()
    resumed = PromptStatistics(posterior_half_life=5.0, posterior_prior_a=0.5, posterior_prior_b=0.5)
    resumed.load_state_dict(json.loads(json.dumps(store.state_dict())))
    ids = np.arange(40)
    for s in (store, resumed):
        s.update(ids, (p > 0.5).astype(float))
    a, b = store.batch(ids), resumed.batch(ids)
    np.testing.assert_array_equal(a.beta_a, b.beta_a)
    np.testing.assert_array_equal(a.beta_b, b.beta_b)
    np.testing.assert_array_equal(allocator.allocate(a, 320).counts, allocator.allocate(b, 320).counts)
