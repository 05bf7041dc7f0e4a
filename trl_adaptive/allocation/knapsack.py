"""Knapsack RL (arXiv 2509.25849): rollouts go where they buy the most expected learning, under a fixed budget."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..batch import PromptBatchStats
from .base import Allocator, fill_evenly, largest_remainder
from .solvers import SOLVERS, solve_dp, solve_greedy
from .value import marginal_gains, mixed_group_demand, value_table


@dataclass
class KnapsackAllocator(Allocator):
    """Knapsack RL's allocation: maximise sum_i Value(N_i, p_i) subject to sum_i N_i = B (the paper's Eq. 5).

    Paper: Z. Li, C. Chen, T. Yang, T. Ding, R. Sun, G. Zhang, W. Huang and Z. Luo, "Knapsack RL: Unlocking Exploration
    of LLMs via Optimizing Budget Allocation", 2025, arXiv 2509.25849. Implements Sec. 4: the knapsack of Eq. 5 over
    the value of Sec. 4.1, with the fallback strategy of Sec. 4.2.

    Value(N, p) = (1 - p^N - (1 - p)^N) * p (1 - p)^2 (ProbNonZeroGradient x InfoGain, see :mod:`.value`), solved
    exactly per step by :mod:`.solvers`. Symbols: ``success_rates`` are p_i (the previous epoch's c_i / t_i, NaN when
    unseen), ``budget`` is B = N_total, ``min_rollouts`` is N_low, ``max_rollouts`` is N_up.

    The rules, in order:

    1. Unseen prompts (NaN) get exactly what :class:`~.uniform.UniformAllocator` would give them (B // M, plus one for
       the first B % M positions). With every prompt unseen, as in the first epoch, the result IS the uniform one.
       Unseen prompts are never treated as hard (p = 0).
    2. With ``fallback=True`` (the paper's default, which its ablation finds essential):

       - p = 1 prompts get N_low, a canary that detects regression;
       - 0 < p < 1 prompts are solved by the knapsack, each capped at its 90%-mixed-group demand
         ceil(ln 0.1 / ln max(p, 1 - p)) clipped to [N_low, N_up] (Theorem 1's bound);
       - whatever is left goes evenly to the p = 0 prompts, up to N_up each;
       - only if there are no p = 0 prompts, or all are at N_up, does the rest go back to the 0 < p < 1 prompts by
         marginal value (uncapped, on top of what they have);
       - anything still left (every other prompt at N_up) is spread evenly over the remaining prompts.
    3. With ``fallback=False``: the pure knapsack over all seen prompts. p in {0, 1} has zero value, so those prompts
       get N_low and absorb evenly only what the valued prompts cannot hold below N_up.

    Args:
        min_rollouts: N_low (default 2, the paper's).
        max_rollouts: N_up (default 128, the paper's).
        fallback: apply the fallback rules above (default True, as in the paper).
        solver: ``"greedy"`` (default; exact because Value is concave for N >= 1, and 60-160x faster than ``"dp"`` at
            256 prompts x 8, see docs/benchmarks.md) or ``"dp"`` (the paper's dynamic programme). Both are exact; they
            may break ties differently.

    Under a token budget (:class:`~.token_budgeted.TokenBudgeted`), the seen prompts are re-solved when the rules'
    counts would spend more than T: the same number of completions, Value first, then the fallback's tiers in their
    order (the p = 0 prompts' share, the surplus to mid prompts, the rest), each tier's completions priced by their
    tokens (:func:`tiered_gains`). Unseen prompts keep their uniform share.

    Example:
        >>> nan = float("nan")
        >>> KnapsackAllocator().allocate([nan, nan, nan, nan], budget=32).counts.tolist()  # first epoch: uniform
        [8, 8, 8, 8]
        >>> # p=0.5 and p=0.9 get their 90%-mixed demand (4, 22), p=1 the canary N_low, p=0 the rest
        >>> KnapsackAllocator().allocate([0.0, 0.5, 0.9, 1.0], budget=32).counts.tolist()
        [4, 4, 22, 2]

    Warning:
        This departs from the official KnapsackRL code, which (i) scores "no extra rollouts" as 0 instead of
        V(N_low) in its DP and so misses the optimum, (ii) can exceed N_up, (iii) treats unseen prompts as unsolved,
        (iv) sends surplus to solved prompts whenever there is no p = 0 prompt, and (v) crashes when every prompt is
        mid-difficulty and cheap. Here the optimum is exact, N_up is never exceeded, unseen prompts get the uniform
        share, and surplus returns to mid-difficulty prompts by value before any solved prompt sees it. The 90% demand
        also differs by design: the official code grants N_low + int(bound) rollouts (23 at p = 0.9), we grant
        ceil(bound) in total (22), which is what the bound asks for; so the paper's Table 3 fallback column (29 / 23)
        comes out as 30 / 22 here (``tests/allocation/test_knapsack.py::test_table3_like_example``).
    """

    name = "knapsack"
    reads = ("epoch_rate",)  # success_rate

    fallback: bool = True
    solver: str = "greedy"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.solver not in SOLVERS:
            raise ValueError(f"solver={self.solver!r} is not one of {SOLVERS}: use 'greedy' (default) or 'dp'.")
        if not isinstance(self.fallback, (bool, np.bool_)):
            raise ValueError(f"fallback={self.fallback!r} must be True or False.")

    # -- what a token budget re-solves (token_budgeted.TokenBudgeted) ---------------------------------------------
    def budget_positions(self, stats: PromptBatchStats) -> np.ndarray:
        """The seen prompts: the others get their uniform share."""
        return np.flatnonzero(~np.isnan(np.asarray(stats.success_rate, dtype=np.float64)))

    def budget_gains(self, stats: PromptBatchStats, positions: np.ndarray) -> np.ndarray:
        """Knapsack RL's priorities as gains (:func:`tiered_gains`) for the prompts at ``positions``."""
        rates = np.asarray(stats.success_rate, dtype=np.float64)[positions]
        return tiered_gains(rates, self.min_rollouts, self.max_rollouts, self.fallback)

    def _allocate(self, stats: PromptBatchStats, budget: int) -> np.ndarray:
        success_rates = np.asarray(stats.success_rate, dtype=np.float64)
        num_prompts = len(success_rates)
        counts = largest_remainder(np.full(num_prompts, budget / num_prompts), budget)
        seen = self.budget_positions(stats)
        if len(seen):
            rates, seen_budget = success_rates[seen], int(counts[seen].sum())
            if self.fallback:
                counts[seen] = self._allocate_with_fallback(rates, seen_budget)
            else:
                counts[seen] = self._allocate_pure(rates, seen_budget)
        return counts

    # -- the two policies -------------------------------------------------------------------------------------------
    def _allocate_with_fallback(self, rates: np.ndarray, budget: int) -> np.ndarray:
        n_low, n_up = self.min_rollouts, self.max_rollouts
        counts = np.full(len(rates), n_low, dtype=np.int64)
        left = budget - int(counts.sum())
        mid = np.flatnonzero((rates > 0) & (rates < 1))
        hard = np.flatnonzero(rates == 0)
        if len(mid) and left:
            demand = mixed_group_demand(rates[mid], n_low=n_low, n_up=n_up)
            mid_budget = min(len(mid) * n_low + left, int(demand.sum()))
            counts[mid] = self._solve(rates[mid], mid_budget, n_low, demand)
            left -= mid_budget - len(mid) * n_low
        if len(hard) and left:
            counts[hard], left = fill_evenly(counts[hard], left, n_up)
        if len(mid) and left:
            room = len(mid) * n_up - int(counts[mid].sum())
            extra = min(left, room)
            if extra:
                counts[mid] = self._solve(rates[mid], int(counts[mid].sum()) + extra, counts[mid], n_up)
                left -= extra
        if left:
            counts, left = fill_evenly(counts, left, n_up)
        return counts

    def _allocate_pure(self, rates: np.ndarray, budget: int) -> np.ndarray:
        n_low, n_up = self.min_rollouts, self.max_rollouts
        counts = np.full(len(rates), n_low, dtype=np.int64)
        valued = np.flatnonzero((rates > 0) & (rates < 1))
        zero_value = np.flatnonzero((rates == 0) | (rates == 1))
        # Value is non-decreasing in N, so giving the valued prompts as much as they can hold loses nothing.
        valued_budget = min(budget - len(zero_value) * n_low, len(valued) * n_up)
        if len(valued):
            counts[valued] = self._solve(rates[valued], valued_budget, n_low, n_up)
        left = budget - int(counts.sum())
        if left:
            counts[zero_value], left = fill_evenly(counts[zero_value], left, n_up)
        return counts

    def _solve(self, rates: np.ndarray, budget: int, lower: int | np.ndarray, upper: int | np.ndarray) -> np.ndarray:
        n_cols = int(np.max(upper))
        if self.solver == "dp":
            return solve_dp(value_table(rates, n_cols), budget, lower, upper)
        return solve_greedy(None, budget, lower, upper, gains=marginal_gains(rates, n_cols))


def tiered_gains(rates: np.ndarray, n_low: int, n_up: int, fallback: bool = True) -> np.ndarray:
    """``(M, n_up)`` marginal gains whose greedy follows Knapsack RL's priorities, for the knapsack under a token
    budget: Value's gains first; then, in scaled-down tiers that every Value gain outranks, the fallback's order
    (the p = 0 prompts filled evenly, the mid prompts beyond their 90%-mixed demand by Value, then the rest evenly).
    Without the fallback the zero-value prompts form the last tier. Pricing each completion's tokens against these
    gains moves the cheapest-to-lose completions first, tier by tier.
    """
    rates = np.asarray(rates, dtype=np.float64)
    columns = np.arange(n_up, dtype=np.float64)[None, :]
    value = marginal_gains(rates, n_up)
    mid = (rates > 0) & (rates < 1)
    if fallback:
        demand = mixed_group_demand(np.where(mid, rates, 0.5), n_low=n_low, n_up=n_up)[:, None]
    else:
        demand = np.full((len(rates), 1), n_up)
    within = mid[:, None] & (columns < demand)
    smallest = value[within & (columns >= n_low)]
    scale = 0.5 * float(smallest[smallest > 0].min()) if np.any(smallest > 0) else 1.0
    even = (n_up - columns) / n_up  # decreasing in N: equal prompts are filled evenly
    hard = (rates == 0)[:, None] if fallback else np.zeros((len(rates), 1), dtype=bool)
    top_value = float(value.max()) if value.size else 1.0
    tier3 = scale / n_up / 2  # below the last p = 0 unit
    beyond = tier3 * (0.5 + 0.5 * value / max(top_value, 1e-300))  # ordered by Value, above every tier-4 unit
    gains = np.where(within, value, np.where(hard, scale * even, np.where(mid[:, None], beyond, tier3 / 4 * even)))
    return np.ascontiguousarray(gains)
