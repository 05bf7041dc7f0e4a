"""Exact knapsack solvers (trl_adaptive/allocation/solvers.py, _kernels.py) against brute force and each other."""

import numpy as np
import pytest
from helpers.allocation import brute_force
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation import _kernels
from trl_adaptive.allocation.solvers import _greedy, knapsack_objective, solve_dp, solve_greedy
from trl_adaptive.allocation.value import marginal_gains, value_table


@st.composite
def instances(draw, concave: bool = False, max_rows: int = 4, max_n: int = 6):
    """A small table with per-row bounds and a feasible budget; ``concave`` makes every row concave."""
    rows = draw(st.integers(1, max_rows))
    n_cols = draw(st.integers(1, max_n)) + 1
    cells = st.floats(-1.0, 1.0, allow_nan=False, width=32) if not concave else st.floats(0.0, 1.0, width=32)
    raw = np.array(draw(st.lists(cells, min_size=rows * n_cols, max_size=rows * n_cols)), dtype=np.float64)
    table = raw.reshape(rows, n_cols)
    if concave:  # cumulative sums of sorted-decreasing gains
        gains = -np.sort(-table[:, 1:], axis=1) - 0.5
        table = np.concatenate([table[:, :1], table[:, :1] + np.cumsum(gains, axis=1)], axis=1)
    lo = np.array(draw(st.lists(st.integers(0, n_cols - 1), min_size=rows, max_size=rows)), dtype=np.int64)
    width = np.array(draw(st.lists(st.integers(0, n_cols - 1), min_size=rows, max_size=rows)), dtype=np.int64)
    hi = np.minimum(lo + width, n_cols - 1)
    budget = draw(st.integers(int(lo.sum()), int(hi.sum())))
    return table, budget, lo, hi


def check_counts(counts: np.ndarray, budget: int, lo, hi) -> None:
    assert counts.dtype == np.int64
    assert int(counts.sum()) == budget
    assert np.all(counts >= lo) and np.all(counts <= hi)


@pytest.mark.parametrize("solve", [solve_dp, solve_greedy], ids=["dp", "greedy"])
@settings(max_examples=80, deadline=None)
@given(instance=instances())
def test_solver_is_exact_on_any_table(solve, instance):
    # The greedy sends non-concave rows through the envelope, the certificate and, if needed, the DP: still exact.
    table, budget, lo, hi = instance
    counts = solve(table, budget, lo, hi)
    check_counts(counts, budget, lo, hi)
    assert knapsack_objective(table, counts) == pytest.approx(brute_force(table, budget, lo, hi), abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(instance=instances(concave=True))
def test_greedy_needs_no_fallback_on_concave_tables(instance):
    table, budget, lo, hi = instance
    # the differences of a cumulative sum are non-increasing only up to rounding ([1e-12, 0.5, 1.0] has a rising
    # last ulp); the greedy's certificate is about concave gains, so hand it exactly non-increasing ones
    gains = np.minimum.accumulate(np.diff(table, axis=1), axis=1)
    counts, certified = _greedy(np.ascontiguousarray(gains), budget, lo, hi)
    assert certified
    check_counts(counts, budget, lo, hi)
    assert knapsack_objective(table, counts) == pytest.approx(brute_force(table, budget, lo, hi), abs=1e-9)


rate = st.sampled_from([0.0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]) | st.floats(0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    p=st.lists(rate, min_size=1, max_size=4),
    n_low=st.integers(0, 3),
    n_up=st.integers(3, 7),
    data=st.data(),
)
def test_dp_greedy_and_brute_force_agree_on_knapsack_values(p, n_low, n_up, data):
    # Includes N_low = 0 and 1, where Value is not concave at 0 -> 1 -> 2 (Knapsack RL's value).
    table = value_table(p, n_up)
    budget = data.draw(st.integers(len(p) * n_low, len(p) * n_up))
    lo, hi = np.full(len(p), n_low), np.full(len(p), n_up)
    best = brute_force(table, budget, lo, hi)
    for counts in (
        solve_dp(table, budget, n_low, n_up),
        solve_greedy(table, budget, n_low, n_up),
        solve_greedy(None, budget, n_low, n_up, gains=marginal_gains(p, n_up)),
    ):
        check_counts(counts, budget, lo, hi)
        assert knapsack_objective(table, counts) == pytest.approx(best, abs=1e-15)


def test_greedy_takes_zero_to_two_as_one_block_when_n_low_is_zero():
    # Equal prompts, N_low = 0, odd budget: the greedy alone (no DP fallback) reaches the optimum, with no N_i = 1.
    table = value_table([0.3] * 4, 8)
    lo, hi = np.zeros(4, dtype=np.int64), np.full(4, 8, dtype=np.int64)
    counts, certified = _greedy(np.ascontiguousarray(np.diff(table, axis=1)), 9, lo, hi)
    assert certified and 1 not in counts.tolist()
    assert knapsack_objective(table, counts) == pytest.approx(brute_force(table, 9, lo, hi))


def test_dp_and_greedy_agree_at_scale():
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(0, 1, 48), np.zeros(8), np.ones(8)])
    table = value_table(p, 128)
    dp = solve_dp(table, 64 * 8, 2, 128)
    greedy = solve_greedy(None, 64 * 8, 2, 128, gains=marginal_gains(p, 128))
    assert knapsack_objective(table, greedy) == pytest.approx(knapsack_objective(table, dp), rel=1e-12)


def test_greedy_spreads_ties_evenly_and_is_deterministic():
    table = value_table([0.5] * 5 + [0.0] * 3, 128)
    first = solve_greedy(table, 77, 2, 128)
    assert first.tolist() == solve_greedy(table, 77, 2, 128).tolist()
    assert np.ptp(first[:5]) <= 1  # equal prompts within one unit
    zero_value = value_table([0.0] * 5, 16)  # all-zero table: leftovers spread evenly
    assert solve_greedy(zero_value, 23, 2, 16).tolist() == [5, 5, 5, 4, 4]


def test_single_prompt_and_tight_budgets():
    table = value_table([0.4], 16)
    assert solve_dp(table, 7, 2, 16).tolist() == [7]
    assert solve_greedy(table, 7, 2, 16).tolist() == [7]
    table = value_table([0.1, 0.6, 1.0], 8)
    assert solve_dp(table, 6, 2, 8).tolist() == [2, 2, 2]  # budget == sum(N_low)
    assert solve_greedy(table, 24, 2, 8).tolist() == [8, 8, 8]  # budget == sum(N_up)


# -- compiled kernels against their plain Python bodies -----------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(instance=instances(max_rows=5, max_n=8))
def test_compiled_kernels_match_their_python_bodies(instance):
    table, budget, lo, hi = instance
    rows, n_cols = table.shape
    capacity = budget - int(lo.sum())
    results = []
    for dp in (_kernels.mckp_dp, _kernels._mckp_dp_py):
        counts = np.empty(rows, dtype=np.int64)
        choice = np.empty((rows, capacity + 1), dtype=np.int16)
        best = dp(table, lo, hi, capacity, np.empty(capacity + 1), np.empty(capacity + 1), choice, counts)
        results.append((best, counts.tolist()))
    assert results[0][0] == pytest.approx(results[1][0], abs=1e-12) and results[0][1] == results[1][1]

    gains = np.ascontiguousarray(np.diff(table, axis=1))
    outputs = []
    for envelope, greedy in (
        (_kernels.concave_envelope, _kernels.greedy),
        (_kernels._concave_envelope_py, _kernels._greedy_py),
    ):
        env, block_end = np.zeros_like(gains), np.zeros(gains.shape, dtype=np.int64)
        pooled = np.zeros(rows, dtype=np.bool_)
        n_pooled = envelope(gains, lo, hi, env, block_end, pooled, np.zeros(n_cols, dtype=np.int64), np.zeros(n_cols))
        counts = np.empty(rows, dtype=np.int64)
        heap = (np.empty(rows), np.empty(rows, dtype=np.int64), np.empty(rows, dtype=np.int64))
        left, skipped = greedy(gains, env, block_end, pooled, lo, hi, capacity, counts, *heap)
        outputs.append((n_pooled, env.tolist(), block_end.tolist(), pooled.tolist(), left, skipped, counts.tolist()))
    assert outputs[0] == outputs[1]


def test_envelope_pools_the_non_concave_start():
    gains = np.ascontiguousarray(np.diff(value_table([0.5], 5), axis=1))  # [0, 1/16, 1/32, 1/64, 1/128]
    env, block_end = np.zeros_like(gains), np.zeros(gains.shape, dtype=np.int64)
    pooled = np.zeros(1, dtype=np.bool_)
    lo, hi = np.array([0]), np.array([5])
    assert _kernels.concave_envelope(gains, lo, hi, env, block_end, pooled, np.zeros(5, np.int64), np.zeros(5)) == 1
    assert env[0].tolist() == pytest.approx([1 / 32, 1 / 32, 1 / 32, 1 / 64, 1 / 128])
    assert block_end[0, 0] == 2 and block_end[0, 2] == 3


# -- validation -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", [solve_dp, solve_greedy])
def test_infeasible_budget_names_the_numbers(solver):
    table = value_table([0.5, 0.5, 0.5], 8)
    with pytest.raises(ValueError, match=r"budget=5 .*\[6, 24\]"):
        solver(table, 5, 2, 8)
    with pytest.raises(ValueError, match=r"budget=25 .*\[6, 24\]"):
        solver(table, 25, 2, 8)
    with pytest.raises(ValueError, match="integer"):
        solver(table, 12.0, 2, 8)


@pytest.mark.parametrize("solver", [solve_dp, solve_greedy])
def test_invalid_tables_and_bounds_raise(solver):
    table = value_table([0.5, 0.5], 8)
    with pytest.raises(ValueError, match="n_up=9 exceeds the table"):
        solver(table, 8, 2, 9)
    with pytest.raises(ValueError, match="n_low <= n_up"):
        solver(table, 8, 5, 4)
    with pytest.raises(ValueError, match="finite"):
        solver(np.where(table > 0.1, np.nan, table), 8, 2, 8)
    with pytest.raises(ValueError, match="2-D"):
        solver(table[0], 8, 2, 8)
    with pytest.raises(ValueError, match="length 2"):
        solver(table, 8, [2, 2, 2], 8)


def test_greedy_needs_values_or_gains():
    with pytest.raises(ValueError, match="neither"):
        solve_greedy(None, 4, 2, 8)
    with pytest.raises(ValueError, match="do not match"):
        solve_greedy(value_table([0.5], 8), 4, 2, 8, gains=np.zeros((1, 4)))
