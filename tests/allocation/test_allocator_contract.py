"""One contract, every registered allocator (``trl_adaptive/allocation/base.py``).

For hypothesis-generated success rates (NaN, 0, 1, 0.5, all equal, a single prompt, budgets not divisible by M):
integer counts summing exactly to the budget, within [min_rollouts, max_rollouts] (0 only where allowed), the same
inputs and state giving the same counts, ``allocate`` changing no state (it moves in ``end_step``, once per step), a
JSON round trip of ``state_dict`` restoring the next allocation exactly, and weights of shape (M,) when given. The
procedures that drive allocators have their own contract (``tests/sampling/test_sampling_contract.py``).
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation import PromptBatchStats, largest_remainder
from trl_adaptive.strategies import get_allocator, registered_allocators, strategy

ALLOCATORS = registered_allocators()
# Every built-in allocator, so a broken registration fails here instead of shrinking the parametrisation.
assert {"uniform", "knapsack", "bayes_knapsack", "reinforce_ada_est", "cero"} <= set(ALLOCATORS), ALLOCATORS

RATE = st.one_of(
    st.just(float("nan")),
    st.just(0.0),
    st.just(1.0),
    st.just(0.5),
    st.floats(0.0, 1.0, allow_nan=False),
    st.sampled_from([1 / 8, 3 / 8, 7 / 8]),
)
RATES = st.one_of(
    st.lists(RATE, min_size=1, max_size=24),
    st.builds(lambda r, n: [r] * n, RATE, st.integers(1, 24)),  # all equal
)


def _budget(allocator, num_prompts: int, data: st.DataObject) -> int:
    low = 0 if allocator.allows_zero else num_prompts * allocator.min_rollouts
    # Keep budgets small enough for fast exact solvers, but reach the top of the range when it is small.
    high = num_prompts * min(allocator.max_rollouts, 12)
    budget = data.draw(st.integers(low, max(low, high)), label="budget")
    try:
        allocator.check_budget(num_prompts, budget)
    except ValueError:
        budget = num_prompts * allocator.min_rollouts + (num_prompts > 1)  # always feasible, not divisible by M
    return budget


def _with_stats(rates: list[float], seed: int) -> PromptBatchStats:
    """Stats as a real store would hand them: counts of varying size behind each rate, distinct sparse ids."""
    rng = np.random.default_rng(seed)
    rate = np.asarray(rates, dtype=np.float64)
    seen = ~np.isnan(rate)
    t = np.where(seen, rng.integers(1, 40, len(rate)), 0).astype(np.float64)
    c = np.round(np.nan_to_num(rate) * t)
    return PromptBatchStats(
        prompt_ids=rng.permutation(1000)[: len(rate)].astype(np.int64),
        success_rate=np.where(seen, c / np.maximum(t, 1), np.nan),
        attempts=t,
        successes=c,
        smoothed_rate=(1 + 0.5 * c) / (17 + 0.5 * t),
        beta_a=1 + c,
        beta_b=1 + t - c,
    )


def _check(allocator, allocation, rates: list[float], budget: int) -> None:
    counts = allocation.counts
    assert isinstance(counts, np.ndarray) and counts.dtype == np.int64 and counts.shape == (len(rates),)
    assert int(counts.sum()) == budget and allocation.budget == budget and len(allocation.prompt_ids) == len(rates)
    nonzero = counts[counts != 0]
    assert np.all(nonzero >= allocator.min_rollouts) and np.all(nonzero <= allocator.max_rollouts)
    if not allocator.allows_zero:
        assert np.all(counts != 0)
    if allocation.weights is not None:
        weights = np.asarray(allocation.weights)
        assert weights.shape == (len(rates),) and np.all(np.isfinite(weights)) and np.all(weights >= 0)
    assert all(np.isfinite(float(v)) for v in allocation.metrics.values())


def _as_stats(rates: list[float]) -> PromptBatchStats:
    return PromptBatchStats.from_success_rates(np.asarray(rates, dtype=np.float64))


@pytest.mark.parametrize("name", ALLOCATORS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rates=RATES, data=st.data(), use_stats=st.booleans(), seed=st.integers(0, 2**16))
@example(rates=[float("nan")] * 3, data=None, use_stats=False, seed=0).via("first epoch")
def test_allocator_contract(name, rates, data, use_stats, seed):
    fresh = get_allocator(name)
    if data is None:  # the explicit example: a budget M does not divide
        budget = len(rates) * fresh.min_rollouts + 1
    else:
        budget = _budget(fresh, len(rates), data)
    given_stats = _with_stats(rates, seed) if use_stats else np.asarray(rates)

    # Same inputs, same (fresh) state -> same allocation, from two independent instances; allocate moves no state.
    a, b = get_allocator(name), get_allocator(name)
    before = json.dumps(a.state_dict(), sort_keys=True)
    first = a.allocate(given_stats, budget)
    _check(a, first, rates, budget)
    assert json.dumps(a.state_dict(), sort_keys=True) == before
    np.testing.assert_array_equal(first.counts, b.allocate(given_stats, budget).counts)

    # The state after a step (end_step) survives JSON and restores the next allocation exactly.
    a.end_step([first])
    state = json.loads(json.dumps(a.state_dict(), allow_nan=False))
    c = get_allocator(name)
    c.load_state_dict(state)
    second = a.allocate(given_stats, budget)
    _check(a, second, rates, budget)
    np.testing.assert_array_equal(second.counts, c.allocate(given_stats, budget).counts)
    assert json.dumps(a.state_dict(), sort_keys=True) == json.dumps(c.state_dict(), sort_keys=True)


@pytest.mark.parametrize("name", ALLOCATORS)
def test_single_prompt_and_edge_budgets(name):
    allocator = get_allocator(name)
    for rate in (float("nan"), 0.0, 0.5, 1.0):
        for budget in (allocator.min_rollouts, allocator.max_rollouts, allocator.min_rollouts + 1):
            _check(allocator, allocator.allocate([rate], budget), [rate], budget)
    with pytest.raises(ValueError):
        allocator.allocate([0.5], allocator.max_rollouts + 1)
    with pytest.raises(ValueError):
        allocator.allocate([0.5, 1.5], 8)


@pytest.mark.parametrize("name", ALLOCATORS)
def test_an_argument_the_allocator_does_not_take_is_named(name):
    accepted = strategy(name).parameters
    assert {"min_rollouts", "max_rollouts"} <= set(accepted)
    assert get_allocator(name, min_rollouts=2).min_rollouts == 2
    with pytest.raises(
        ValueError, match=rf"{name!r} takes no argument\(s\) \['not_an_option'\].*; it takes min_rollouts"
    ):
        get_allocator(name, not_an_option=1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ALLOCATORS)
def test_out_of_reach_budgets_raise_rather_than_hang(name):
    allocator = get_allocator(name)
    for num_prompts in (1, 3, 16):
        rates = [0.0, 0.5, 1.0, float("nan")] * 4
        rates = rates[:num_prompts]
        too_many = num_prompts * allocator.max_rollouts + 1
        with pytest.raises(ValueError, match=str(too_many)):
            allocator.allocate(rates, too_many)
        if not allocator.allows_zero:
            too_few = num_prompts * allocator.min_rollouts - 1
            with pytest.raises(ValueError, match=f"budget={too_few}"):
                allocator.allocate(rates, too_few)


# -- largest_remainder: the rounding every allocator shares -----------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    shares=st.lists(st.floats(0.0, 60.0), min_size=1, max_size=40),
    low=st.integers(0, 4),
    span=st.one_of(st.none(), st.integers(0, 40)),
    data=st.data(),
)
def test_largest_remainder_keeps_the_sum_and_the_bounds(shares, low, span, data):
    """The rounding every allocator shares: exact sum, bounds kept, floor or ceiling of each share when consistent."""
    x = np.asarray(shares)
    num = len(x)
    high = None if span is None else low + span
    total = data.draw(st.integers(num * low, num * (low + 60 if high is None else high)), label="total")
    n = largest_remainder(x, total, low, high)
    assert n.dtype == np.int64 and n.shape == x.shape and int(n.sum()) == total
    assert np.all(n >= low) and (high is None or np.all(n <= high))
    # Shares that already sum to the total within the bounds: every count is the floor or the ceiling of its share.
    if high is not None and x.sum() > 0:
        fitted = np.clip(x * total / x.sum(), low, high)
        if abs(fitted.sum() - total) < 1e-9 * max(1, total):
            assert np.all(np.abs(largest_remainder(fitted, total, low, high) - fitted) < 1 + 1e-9)


@pytest.mark.timeout(10)
def test_largest_remainder_out_of_reach_raises():
    for shares, total, low, high in (([1.0, 1.0], 5, 0, 2), ([3.0, 3.0], 3, 2, 8), ([], 1, 0, None)):
        with pytest.raises(ValueError, match=f"total={total} .*M={len(shares)}"):
            largest_remainder(np.asarray(shares, dtype=np.float64), total, low, high)


@pytest.mark.timeout(10)
def test_largest_remainder_raises_instead_of_looping_when_total_is_out_of_reach():
    # Both used to loop forever: no count can move once every one sits at its bound.
    with pytest.raises(ValueError, match=r"total=10 .*M=2 .*low=0 and high=2.*\[0, 4\]"):
        largest_remainder(np.array([1.0, 1.0]), 10, 0, 2)
    with pytest.raises(ValueError, match=r"total=3 .*M=2 .*low=2 .*\[4, 20\]"):
        largest_remainder(np.array([5.0, 5.0]), 3, 2, 10)
    with pytest.raises(ValueError, match="total=3"):
        largest_remainder(np.array([]), 3)
    assert largest_remainder(np.array([]), 0).tolist() == []


def test_largest_remainder_rejects_bad_shares_and_totals():
    for bad in (np.nan, np.inf, -np.inf, -0.5):
        with pytest.raises(ValueError, match="finite and >= 0"):
            largest_remainder(np.array([1.0, bad]), 2)
    with pytest.raises(ValueError, match="whole number"):
        largest_remainder(np.array([1.25, 1.25]), 2.5)
    with pytest.raises(ValueError, match="low=5 > high=3"):
        largest_remainder(np.array([4.0, 4.0]), 8, 5, 3)
    with pytest.raises(ValueError, match="1-D"):
        largest_remainder(np.ones((2, 2)), 4)
    assert largest_remainder(np.array([2.0, 2.0]), 4.0).tolist() == [2, 2]  # a whole float total is fine


# ---- every allocator on the estimators it declares, read from a real store ------------------------------------------
def _store_with_data():
    """A store after six steps with three epochs, priors, unscored completions and measured lengths; the batch's ids
    (an unknown one among them)."""
    from trl_adaptive.stats import PromptStatistics

    store = PromptStatistics(decay=0.8, posterior_half_life=4.0)
    rng = np.random.default_rng(5)
    ids = np.arange(20) * 7
    for step in range(6):
        drawn = np.repeat(rng.choice(ids, 12, replace=False), 4)
        rewards = (rng.random(len(drawn)) < rng.random(len(drawn))).astype(float)
        rewards[::11] = np.nan
        store.update(drawn, rewards, completion_tokens=rng.integers(10, 300, len(drawn)))
        if step % 2:
            store.end_epoch()
    store.set_prior(ids[:3], [0.2, 0.5, 0.9], weight=4)
    return store, np.concatenate([ids[2:], [9999]])


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.counts, b.counts)
    assert (a.weights is None) == (b.weights is None)
    if a.weights is not None:
        np.testing.assert_array_equal(a.weights, b.weights)
    assert dict(a.metrics) == dict(b.metrics)


def _variants(name):
    """The allocator ``name`` as built by default, and with a token budget where it takes one."""
    yield get_allocator(name)
    if "token_budget" in strategy(name).parameters:
        yield get_allocator(name, token_budget="uniform")


@pytest.mark.parametrize("name", ALLOCATORS)
def test_each_allocator_runs_on_the_estimators_it_declares(name):
    """``store.batch(ids, reads=type(allocator).reads)`` holds all an allocator reads: the allocation is the one it
    makes from every estimator, bit for bit, and an estimator it leaves out is not read (None)."""
    from trl_adaptive.batch import ESTIMATOR_FIELDS

    store, ids = _store_with_data()
    budget = len(ids) * 6 + 3
    for allocator, twin in zip(_variants(name), _variants(name), strict=True):
        reads = type(allocator).reads
        declared = store.batch(ids, reads=reads)
        for estimator, fields in ESTIMATOR_FIELDS.items():
            if estimator not in reads and estimator != "epoch_rate":  # success_rate is always read
                assert all(getattr(declared, field) is None for field in fields), (name, estimator)
        allocation = allocator.allocate(declared, budget)
        _check(allocator, allocation, list(ids), budget)
        _same(allocation, twin.allocate(store.batch(ids), budget))


def test_the_other_entry_points_run_on_the_estimators_they_declare():
    """``bayes_knapsack``'s round two (``allocate_remaining`` after ``absorb``) and CERO's pacing (``wanted``,
    ``allocate_paced``) read only the estimators their allocator declares, as ``allocate`` does."""
    from trl_adaptive.allocation import absorb

    store, ids = _store_with_data()
    already = np.full(len(ids), 2)
    successes = np.arange(len(ids)) % 3
    for bayes in _variants("bayes_knapsack"):
        remaining = [
            bayes.allocate_remaining(absorb(stats, successes, already), 4 * len(ids) + 1, already)
            for stats in (store.batch(ids, reads=type(bayes).reads), store.batch(ids))
        ]
        _same(*remaining)
    cero = get_allocator("cero")
    declared, full = store.batch(ids, reads=type(cero).reads), store.batch(ids)
    np.testing.assert_array_equal(cero.wanted(declared), cero.wanted(full))
    _same(*(cero.allocate_paced(stats, 8 * len(ids), num_sampled=len(ids) - 4) for stats in (declared, full)))
