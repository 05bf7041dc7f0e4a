"""Exact solvers of the multiple-choice knapsack behind Knapsack RL (arXiv 2509.25849, Eq. 5):

    max_{N_1..N_M}  sum_i V_i(N_i)   s.t.   sum_i N_i = B,   N_low,i <= N_i <= N_up,i,   N_i integer,

where ``value_table[i, n]`` = V_i(n) (column index = number of rollouts). Two solvers, both returning ``int64``
counts that sum to exactly B:

- :func:`solve_dp`: the paper's dynamic programme, exact for ANY value table, O(M * (B - sum N_low) * (N_up - N_low)).
- :func:`solve_greedy`: a heap over marginal gains, O(M * N_up + (B - sum N_low) log M). Exact for values concave
  in N (Knapsack RL's Value is, from N = 1 on); for other tables it runs on the least concave majorant, returns the
  result when it provably reaches the optimum, and otherwise falls back to :func:`solve_dp`. So it is exact on every
  table, and fast on the tables it is meant for.

This module validates and allocates; the loops live in :mod:`._kernels`. Nothing here imports torch or trl.
"""

from __future__ import annotations

import numpy as np

from .._validate import is_int
from . import _kernels
from .value import MAX_ROLLOUTS_LIMIT

SOLVERS = ("greedy", "dp")

_compiled = False


def _ensure_compiled() -> None:
    """Compile the kernels once per process (numba's disk cache makes later processes cheap)."""
    global _compiled
    if not _compiled:
        _kernels.warmup()
        _compiled = True


# -- validation -------------------------------------------------------------------------------------------------------
def _as_table(table: np.ndarray, name: str) -> np.ndarray:
    array = np.ascontiguousarray(table, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(f"{name} must be a 2-D array with one row per prompt, got shape {array.shape}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite; it holds {int((~np.isfinite(array)).sum())} NaN/inf entries.")
    return array


def _as_bounds(
    num_rows: int, n_low: int | np.ndarray, n_up: int | np.ndarray, max_n: int
) -> tuple[np.ndarray, np.ndarray]:
    bounds = []
    for name, bound in (("n_low", n_low), ("n_up", n_up)):
        array = np.asarray(bound)
        if array.dtype.kind not in "iu" or array.ndim > 1 or (array.ndim == 1 and len(array) != num_rows):
            raise ValueError(f"{name} must be an integer or an integer array of length {num_rows}, got {bound!r}.")
        bounds.append(np.ascontiguousarray(np.broadcast_to(array, (num_rows,)), dtype=np.int64))
    lo, hi = bounds
    if np.any(lo < 0) or np.any(hi < lo):
        bad = int(np.flatnonzero((lo < 0) | (hi < lo))[0])
        raise ValueError(
            f"need 0 <= n_low <= n_up for every prompt; prompt {bad} has n_low={lo[bad]}, n_up={hi[bad]}."
        )
    if np.any(hi > max_n):
        raise ValueError(
            f"n_up={int(hi.max())} exceeds the table, which covers N = 0..{max_n}. Build the table up to N_up."
        )
    if max_n > MAX_ROLLOUTS_LIMIT + 1:
        raise ValueError(f"tables beyond N = {MAX_ROLLOUTS_LIMIT} rollouts are not supported, got {max_n}.")
    return lo, hi


def _check_budget(budget: int, lo: np.ndarray, hi: np.ndarray) -> int:
    if not is_int(budget):
        raise ValueError(f"budget must be an integer number of rollouts, got {budget!r}.")
    low, high = int(lo.sum()), int(hi.sum())
    if not low <= budget <= high:
        raise ValueError(
            f"budget={budget} cannot be split over {len(lo)} prompts within their bounds: it must lie in "
            f"[sum(n_low), sum(n_up)] = [{low}, {high}]."
        )
    return int(budget)


# -- public solvers ---------------------------------------------------------------------------------------------------
def solve_dp(value_table: np.ndarray, budget: int, n_low: int | np.ndarray, n_up: int | np.ndarray) -> np.ndarray:
    """Exact multiple-choice knapsack by dynamic programming, for any value table (Knapsack RL, Eq. 5).

    dp[i][w] = max_{N_i in [N_low, N_up]} dp[i-1][w - N_i] + V_i(N_i), with backtracking; run over the units above
    N_low, so its cost is O(M * (B - sum N_low) * (N_up - N_low)) time and O(M * (B - sum N_low)) int16 memory. Ties
    go to the smallest N_i in backtracking order (last prompt first), deterministically.

    Args:
        value_table: ``(M, C)`` finite V_i(n) for n = 0..C-1 (e.g. :func:`~.value.value_table`).
        budget: B, the total number of rollouts.
        n_low: N_low, an integer or one per prompt.
        n_up: N_up, an integer or one per prompt, at most C - 1.

    Returns:
        ``(M,)`` int64 N_i with ``sum == budget``.

    Example:
        >>> from trl_adaptive.allocation.value import value_table
        >>> solve_dp(value_table([0.0, 0.5, 0.9], n_up=16), budget=16, n_low=2, n_up=16).tolist()
        [2, 8, 6]

    Warning:
        Unlike the official KnapsackRL code, choosing no extra rollouts scores V(N_low), not 0, so the result is the
        true optimum of Eq. 5.
    """
    values = _as_table(value_table, "value_table")
    lo, hi = _as_bounds(values.shape[0], n_low, n_up, values.shape[1] - 1)
    return _dp(values, _check_budget(budget, lo, hi), lo, hi)


def solve_greedy(
    value_table: np.ndarray | None,
    budget: int,
    n_low: int | np.ndarray,
    n_up: int | np.ndarray,
    *,
    gains: np.ndarray | None = None,
) -> np.ndarray:
    """Exact knapsack by a heap over marginal gains; the fast solver for concave values such as Knapsack RL's.

    Start every prompt at N_low and hand out the remaining B - sum N_low rollouts one at a time to the prompt whose
    next rollout adds the most value, V_i(N_i + 1) - V_i(N_i). When every V_i is concave this is optimal. Ties go to
    the prompt with fewer rollouts so far, then the lower index, so prompts with equal rates receive counts within one
    of each other, and zero-value prompts absorb leftovers evenly.

    Non-concave rows (e.g. Knapsack RL's Value with N_low = 0, where V(0) = V(1) = 0) are replaced by their least
    concave majorant, whose flat stretches are taken as whole blocks (0 -> 2 in that example). If a block does not
    fit the remaining budget the greedy skips it; the answer is kept only if it still reaches the fractional upper
    bound, otherwise :func:`solve_dp` solves the instance. The result is exact in every case.

    Args:
        value_table: ``(M, C)`` finite V_i(n) for n = 0..C-1; may be None when ``gains`` is given.
        budget: B, the total number of rollouts.
        n_low: N_low, an integer or one per prompt.
        n_up: N_up, an integer or one per prompt, at most C - 1.
        gains: optional ``(M, C - 1)`` marginal gains ``V_i(n + 1) - V_i(n)`` to use instead of differencing the
            table (e.g. the closed form :func:`~.value.marginal_gains`, exact to rounding where Value saturates).

    Returns:
        ``(M,)`` int64 N_i with ``sum == budget``.

    Example:
        >>> from trl_adaptive.allocation.value import marginal_gains
        >>> p = [0.0, 0.5, 0.9]
        >>> solve_greedy(None, budget=16, n_low=2, n_up=16, gains=marginal_gains(p, n_up=16)).tolist()
        [2, 8, 6]
    """
    values = None if value_table is None else _as_table(value_table, "value_table")
    if gains is None:
        if values is None:
            raise ValueError("solve_greedy needs a value_table or a gains table, got neither.")
        gains = np.diff(values, axis=1)
    gains = _as_table(gains, "gains")
    if values is not None and values.shape != (gains.shape[0], gains.shape[1] + 1):
        raise ValueError(f"gains of shape {gains.shape} do not match value_table of shape {values.shape}.")
    lo, hi = _as_bounds(gains.shape[0], n_low, n_up, gains.shape[1])
    budget = _check_budget(budget, lo, hi)
    counts, exact = _greedy(gains, budget, lo, hi)
    if exact:
        return counts
    if values is None:
        values = np.zeros((gains.shape[0], gains.shape[1] + 1))
        np.cumsum(gains, axis=1, out=values[:, 1:])
    return _dp(values, budget, lo, hi)


def knapsack_objective(value_table: np.ndarray, counts: np.ndarray) -> float:
    """sum_i V_i(N_i), the objective of Eq. 5, for counts within the table's columns."""
    values = np.asarray(value_table, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    return float(values[np.arange(len(counts)), counts].sum())


# -- kernel drivers (inputs already validated) ------------------------------------------------------------------------
def _dp(values: np.ndarray, budget: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    _ensure_compiled()
    num_rows = values.shape[0]
    capacity = budget - int(lo.sum())
    counts = np.empty(num_rows, dtype=np.int64)
    choice = np.empty((num_rows, capacity + 1), dtype=np.int16)
    _kernels.mckp_dp(values, lo, hi, capacity, np.empty(capacity + 1), np.empty(capacity + 1), choice, counts)
    return counts


def _greedy(gains: np.ndarray, budget: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, bool]:
    """Greedy counts and whether they are certified optimal (always, for concave rows)."""
    _ensure_compiled()
    num_rows = gains.shape[0]
    extra = budget - int(lo.sum())
    width = max(int((hi - lo).max()), 1)
    env = np.empty_like(gains)
    block_end = np.empty(gains.shape, dtype=np.int64)
    pooled = np.empty(num_rows, dtype=np.bool_)
    stack_start, stack_sum = np.empty(width, dtype=np.int64), np.empty(width)
    _kernels.concave_envelope(gains, lo, hi, env, block_end, pooled, stack_start, stack_sum)
    counts = np.empty(num_rows, dtype=np.int64)
    heap_gain, heap_count, heap_row = np.empty(num_rows), np.empty(num_rows, dtype=np.int64), np.empty_like(counts)
    left, skipped = _kernels.greedy(
        gains, env, block_end, pooled, lo, hi, extra, counts, heap_gain, heap_count, heap_row
    )
    if left:
        return counts, False
    if not skipped:
        return counts, True
    # Certificate: the best `extra` envelope units bound every integer solution from above.
    columns = np.arange(gains.shape[1])[None, :]
    envelope = np.where(pooled[:, None], env, gains)
    offered = envelope[(columns >= lo[:, None]) & (columns < hi[:, None])]
    bound = float(-np.partition(-offered, extra - 1)[:extra].sum())
    achieved = float(gains[(columns >= lo[:, None]) & (columns < counts[:, None])].sum())
    tolerance = 1e-12 * extra * float(np.abs(offered).max())
    return counts, achieved >= bound - tolerance


__all__ = ["SOLVERS", "knapsack_objective", "solve_dp", "solve_greedy"]
