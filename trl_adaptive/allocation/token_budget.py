"""The knapsack under a token budget: the same value, the same number of completions, and at most T expected tokens.

    max_{N_1..N_M}  sum_i V_i(N_i)   s.t.   sum_i N_i = B,   sum_i l_i N_i <= T,   N_low,i <= N_i <= N_up,i,

where l_i is prompt i's expected generated tokens per completion (``PromptBatchStats.expected_tokens``). TRL's batch
shape fixes the count B; the budget T decides which prompts those B completions go to.

The token constraint is relaxed with a price lambda >= 0 per token: for a fixed lambda the problem is the ordinary
knapsack over the gains ``g_i(n) - lambda l_i``, still concave per row, so the greedy of :mod:`.solvers` solves it
exactly; the tokens it spends fall as lambda rises. A bisection on lambda (in log space, the prices of a value table
span many orders of magnitude) finds the smallest price whose solution fits T (up to half a token,
:func:`rounding_slack`). That solution is feasible, and weak duality bounds what it can miss:
OPT <= V(N_lambda) + lambda (T - tokens(N_lambda)), so the gap to the optimum is at most lambda (T - tokens(N_lambda)),
reported as :attr:`TokenBudgetSolution.gap_bound` (0 when T does not bind).

When even the fewest tokens the bounds allow exceed T (every prompt's N_low, the rest to the shortest prompts), no
allocation fits: the solver returns that fewest-token allocation and says so (``feasible=False``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..batch import Allocation, PromptBatchStats
from .solvers import _as_bounds, _as_table, _check_budget, _dp, _greedy


@dataclass(frozen=True)
class TokenBudgetSolution:
    """Counts under a token budget, and how they relate to it.

    Attributes:
        counts: ``(M,)`` int64, summing to the budget B, within the bounds.
        expected_tokens: sum_i l_i N_i of ``counts``.
        price: lambda, the value of one token at the answer (0: the budget does not bind; inf: no allocation fits).
        gap_bound: the most value ``counts`` may miss from the optimum (0 when the budget does not bind; NaN when
            nothing fits).
        feasible: False when even the fewest tokens the bounds allow exceed the budget.
    """

    counts: np.ndarray
    expected_tokens: float
    price: float
    gap_bound: float
    feasible: bool


def solve_token_budget(
    gains: np.ndarray,
    lengths: np.ndarray,
    budget: int,
    token_budget: float,
    n_low: int | np.ndarray,
    n_up: int | np.ndarray,
) -> TokenBudgetSolution:
    """The knapsack over marginal ``gains`` with sum N_i = ``budget`` and sum l_i N_i <= ``token_budget``.

    Args:
        gains: ``(M, C)`` marginal gains V_i(n + 1) - V_i(n), concave from ``n_low`` on (non-concave rows are solved
            exactly too, through the DP, at its cost).
        lengths: ``(M,)`` l_i >= 0, expected tokens per completion of each prompt.
        budget: B, the total number of completions.
        token_budget: T > 0, the most expected tokens the allocation may spend.
        n_low, n_up: the bounds, an integer or one per prompt (n_up <= C).

    Returns:
        a :class:`TokenBudgetSolution`.

    Example:
        >>> from trl_adaptive.allocation.value import marginal_gains
        >>> gains = marginal_gains([0.5, 0.5], n_up=8)  # two equal prompts; the second is 4x as long
        >>> solve_token_budget(gains, np.array([10.0, 40.0]), 8, 1e9, 2, 8).counts.tolist()  # T does not bind
        [4, 4]
        >>> solution = solve_token_budget(gains, np.array([10.0, 40.0]), 8, 140.0, 2, 8)
        >>> solution.counts.tolist(), solution.expected_tokens, solution.price > 0
        ([6, 2], 140.0, True)
    """
    gains = _as_table(gains, "gains")
    lo, hi = _as_bounds(gains.shape[0], n_low, n_up, gains.shape[1])
    budget = _check_budget(budget, lo, hi)
    lengths = _as_lengths(lengths, gains.shape[0])
    if not (isinstance(token_budget, (int, float, np.integer, np.floating)) and np.isfinite(token_budget)):
        raise ValueError(f"token_budget must be a finite number of tokens, got {token_budget!r}.")
    token_budget = float(token_budget)

    def solve_at(price: float) -> np.ndarray:
        adjusted = gains - price * lengths[:, None]
        counts, exact = _greedy(adjusted, budget, lo, hi)
        if exact:
            return counts
        table = np.zeros((adjusted.shape[0], adjusted.shape[1] + 1))
        np.cumsum(adjusted, axis=1, out=table[:, 1:])
        return _dp(table, budget, lo, hi)

    def tokens(counts: np.ndarray) -> float:
        return float(counts @ lengths)

    slack = rounding_slack(token_budget)
    counts = solve_at(0.0)
    if tokens(counts) <= token_budget + slack:
        return TokenBudgetSolution(counts, tokens(counts), 0.0, 0.0, True)
    ceiling = _dominating_price(gains, lengths, lo, hi)
    fewest = solve_at(ceiling)
    if tokens(fewest) > token_budget + slack:
        return TokenBudgetSolution(fewest, tokens(fewest), float("inf"), float("nan"), False)
    # Bracket [low, high]: low does not fit, high does; start from the price that values a typical unit at its tokens.
    solutions = {ceiling: fewest}

    def fits(price: float) -> bool:
        solutions[price] = solve_at(price)
        return tokens(solutions[price]) <= token_budget + slack

    low, high = 0.0, ceiling
    guess = min(float(np.abs(gains).mean()) / max(float(lengths.mean()), 1e-300), ceiling)
    while guess > 1e-300 and fits(guess) and guess < high:
        high, guess = guess, guess / 8.0
    low = guess if guess < high else low
    # Until one move of one completion separates the two ends (one breakpoint of tokens(price) is left inside), or
    # the prices agree to 1e-9 (closer breakpoints are ties of the gains' rounding).
    while low == 0.0 or (high / low > 1.0 + 1e-9 and np.abs(solutions[high] - solutions[low]).sum() > 2):
        middle = (
            high / 2.0
            if low == 0.0
            else _interpolated(low, high, tokens(solutions[low]), tokens(solutions[high]), token_budget)
        )
        if fits(middle):
            high = middle
        else:
            low = middle
    counts = solutions[high]
    gap = high * max(token_budget - tokens(counts), 0.0)
    return TokenBudgetSolution(counts, tokens(counts), high, gap, True)


UNIFORM_TOKENS = "uniform"  # token_budget: the expected tokens of the uniform split of the batch


def rounding_slack(token_budget: float) -> float:
    """How far expected tokens may exceed T and still fit: half a token (a generated batch has whole tokens, and
    expected lengths are means, so counts whose expectation is within half a token of T are not over it), or the
    float rounding of the dot product for a budget of more than 5e8 tokens. This is what makes ``"uniform"`` exactly
    inert when every prompt's expected length is the same: any split of the same completions then expects T, up to
    the rounding of a mean."""
    return max(0.5, 1e-9 * abs(token_budget))


def expected_lengths(stats: PromptBatchStats) -> np.ndarray | None:
    """``(M,)`` l_i from ``stats.expected_tokens``: NaN entries (nothing measured for them) take the mean of the known
    ones; None when none is known (no length has been measured yet, so no token budget can be planned)."""
    return None if stats.expected_tokens is None else filled_lengths(stats.expected_tokens)


def filled_lengths(lengths: np.ndarray) -> np.ndarray | None:
    """``lengths`` as float64 with unknown (NaN) entries set to the mean of the known ones; None when none is known."""
    lengths = np.asarray(lengths, dtype=np.float64)
    known = ~np.isnan(lengths)
    if not known.any():
        return None
    return np.where(known, lengths, lengths[known].mean())


def within_token_budget(
    counts: np.ndarray,
    solved: np.ndarray,
    lengths: np.ndarray | None,
    token_budget: float | str,
    gains: Callable[[], np.ndarray],
    n_low: int | np.ndarray,
    n_up: int,
) -> Allocation:
    """An allocator's ``counts`` kept when they fit ``token_budget``, else the knapsack over ``gains()`` under it.

    The prompts at positions ``solved`` are re-solved (their completions move between them); the others (the prompts
    an allocator gives their uniform share: nothing is known of them) keep their counts and their tokens.

    Args:
        counts: ``(M,)`` the allocator's counts without a token budget.
        solved: positions of the prompts the knapsack decides.
        lengths: ``(M,)`` expected tokens per completion (:func:`expected_lengths`), or None when unknown: the counts
            are kept and ``tokens_expected`` is left out.
        token_budget: T, expected generated tokens of the whole batch, or ``"uniform"``: what the uniform split of
            the same completions over the same prompts expects, sum(counts) x mean(l), recomputed every batch.
        gains: builds the ``(len(solved), C)`` marginal gains of the solved prompts (only called when T binds).
        n_low, n_up: the allocator's bounds (``n_low`` may be one per prompt, e.g. what a pilot round drew).

    Returns:
        an :class:`~.base.Allocation` with the metrics ``token_budget``, ``tokens_expected`` (of the counts, when
        known), ``token_price`` (lambda; 0 when T does not bind), ``token_gap_bound`` and ``token_budget_infeasible``
        (1 when even the fewest tokens exceed T).
    """
    if lengths is not None and token_budget == UNIFORM_TOKENS:
        token_budget = float(counts.sum()) * float(lengths.mean())
    metrics = {"token_price": 0.0, "token_gap_bound": 0.0}
    if token_budget != UNIFORM_TOKENS:  # nothing measured yet under "uniform": no number to log
        metrics["token_budget"] = float(token_budget)
    if lengths is None:  # nothing measured yet: nothing to plan on, and no expected tokens to log
        return Allocation(counts, metrics=metrics | {"token_budget_infeasible": 0.0})
    slack = rounding_slack(token_budget)
    if float(counts @ lengths) > token_budget + slack and len(solved):
        fixed = np.setdiff1d(np.arange(len(counts)), solved)
        left = token_budget - float(counts[fixed] @ lengths[fixed])
        low = n_low if np.ndim(n_low) == 0 else np.asarray(n_low)[solved]
        solution = solve_token_budget(gains(), lengths[solved], int(counts[solved].sum()), left, low, n_up)
        counts = counts.copy()
        counts[solved] = solution.counts
        price = solution.price if solution.feasible else float("nan")
        metrics |= {"token_price": price, "token_gap_bound": solution.gap_bound}
    infeasible = float(counts @ lengths) > token_budget + slack
    return Allocation(
        counts,
        metrics=metrics | {"tokens_expected": float(counts @ lengths), "token_budget_infeasible": float(infeasible)},
    )


def _interpolated(low: float, high: float, tokens_low: float, tokens_high: float, target: float) -> float:
    """The price where tokens, linear in log(price) between the two ends, meet ``target``; kept inside the middle
    80% of the bracket (in log space) so every step shrinks it."""
    share = (tokens_low - target) / max(tokens_low - tokens_high, 1e-300)
    return float(low * (high / low) ** min(max(share, 0.1), 0.9))


def _as_lengths(lengths: np.ndarray, num_rows: int) -> np.ndarray:
    values = np.ascontiguousarray(lengths, dtype=np.float64)
    if values.shape != (num_rows,) or np.any(~np.isfinite(values)) or np.any(values < 0):
        raise ValueError(
            f"lengths must be {num_rows} finite expected token counts >= 0, one per prompt; got {values.tolist()[:5]}."
        )
    return values


def _dominating_price(gains: np.ndarray, lengths: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """A price at which any difference in length outweighs every difference in gain: the fewest-token allocation."""
    columns = np.arange(gains.shape[1])[None, :]
    offered = gains[(columns >= lo[:, None]) & (columns < hi[:, None])]
    spread = float(offered.max() - offered.min()) if offered.size else 0.0
    distinct = np.unique(lengths)
    step = float(np.diff(distinct).min()) if len(distinct) > 1 else 1.0
    return 2.0 * max(spread, 1e-300) / step + 1e-300


__all__ = [
    "UNIFORM_TOKENS",
    "TokenBudgetSolution",
    "expected_lengths",
    "filled_lengths",
    "solve_token_budget",
    "within_token_budget",
]
