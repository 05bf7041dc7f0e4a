"""Bayesian Knapsack RL: the multiple-choice knapsack over each prompt's EXPECTED value under its Beta posterior.

Knapsack RL (arXiv 2509.25849, Eq. 5) maximises sum_i Value(N_i, p_i) with p_i the previous epoch's empirical rate:
eight samples, up to an epoch old, exactly 0 or 1 for many prompts. Plugging that p_i in treats a guess as the
truth. Here p_i is a random variable, p_i ~ Beta(a_i, b_i) (``PromptBatchStats.beta_a`` / ``beta_b``: the store's
one posterior, with the prior column and optional forgetting, see docs/statistics.md), and the knapsack maximises
the expected objective

    max_{N_1..N_M}  sum_i E_{p ~ Beta(a_i, b_i)}[Value(N_i, p)]   s.t.  sum_i N_i = B,  N_low <= N_i <= N_up,

    E[Value(N, p)] = E[(1 - p^N - (1 - p)^N) p (1 - p)^2]
                   = [B(a + 1, b + 2) - B(a + N + 1, b + 2) - B(a + 1, b + N + 2)] / B(a, b)       (N >= 2)

(:func:`~.value.expected_value_table`; gains in log space by :func:`~.value.expected_marginal_gains` and the kernel
``_kernels.expected_gains``). Its marginal gain, E[InfoGain(p) (p^N (1 - p) + (1 - p)^N p)], is an expectation of
a non-increasing function of N, so E[Value] is concave on N >= 1 and the greedy solver is exact, at the same cost as
``knapsack``'s. As a + b grows with a / (a + b) = p fixed, E[Value(N, p)] -> Value(N, p): with a lot of fresh
evidence this IS Knapsack RL. With little evidence, a prompt seen 0/8 still has posterior mass at p > 0 and is worth
sampling, and a prompt seen 4/8 is not certainly mid-difficulty; no fallback rule is needed for p = 0 or 1.

Also here, for a trainer's pilot round (``pilot_rollouts = k``: k completions per prompt, then the rest of the step's
budget by this allocator on the updated posterior): :func:`pilot_budget_check`, :func:`absorb` and
:meth:`BayesKnapsackAllocator.allocate_remaining`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .._validate import check_int
from ..batch import Allocation, PromptBatchStats
from . import _kernels
from .base import Allocator, largest_remainder
from .solvers import SOLVERS, _ensure_compiled, solve_dp, solve_greedy


@dataclass
class BayesKnapsackAllocator(Allocator):
    """Knapsack RL on the posterior: maximise sum_i E[Value(N_i, p_i)], p_i ~ Beta(a_i, b_i), with sum_i N_i = B.

    Paper: builds on Z. Li, C. Chen, T. Yang, T. Ding, R. Sun, G. Zhang, W. Huang and Z. Luo, "Knapsack RL: Unlocking
    Exploration of LLMs via Optimizing Budget Allocation", 2025, arXiv 2509.25849: the objective of its Sec. 4 (Eq. 5),
    taken in expectation under each prompt's Beta posterior. The expectation is this package's extension, not the
    paper's (docs/allocators.md, "bayes_knapsack").

    Symbols: ``stats.beta_a`` / ``stats.beta_b`` are a_i, b_i (from ``PromptStatistics.batch``: Beta(1, 1), plus the
    prior column's pseudo-counts, plus the evidence, forgotten at ``posterior_half_life`` if set); ``budget`` is B;
    ``min_rollouts`` / ``max_rollouts`` are N_low / N_up, as for ``knapsack``.

    Rules:

    1. Prompts with no evidence at all (``stats.evidence == 0``: never scored and no prior) get exactly what
       ``uniform`` would give them, as in ``knapsack``: in the first epoch without priors the result IS uniform.
    2. Every other prompt enters the knapsack with its expected value; it is solved exactly (greedy on the concave
       expected gains, or the DP). There is no separate fallback: the posterior never says p = 0 or p = 1, so an
       unsolved prompt keeps a value that shrinks with the evidence against it, and a solved one falls to N_low
       (the canary) by value, not by rule.

    Args:
        min_rollouts: N_low (default 2).
        max_rollouts: N_up (default 128, as ``knapsack``).
        solver: ``"greedy"`` (default; exact by concavity) or ``"dp"`` (the paper's dynamic programme).

    Under a token budget (:class:`~.token_budgeted.TokenBudgeted`), the prompts with evidence are re-solved when the
    counts would spend more than T (the same expected value and number of completions, each completion priced by its
    tokens); prompts without evidence keep their uniform share. In :meth:`allocate_remaining` T covers both rounds:
    the tokens expected of ``already`` count against it, and every prompt is re-solved.

    Example:
        >>> nan = float("nan")
        >>> BayesKnapsackAllocator().allocate([nan, nan, nan, nan], budget=32).counts.tolist()  # no evidence: uniform
        [8, 8, 8, 8]
        >>> # 8 completions each: 0/8, 4/8, 7/8, 8/8 -> Beta(1, 9), Beta(5, 5), Beta(8, 2), Beta(9, 1)
        >>> BayesKnapsackAllocator().allocate([0.0, 0.5, 0.875, 1.0], budget=32).counts.tolist()
        [13, 8, 7, 4]

    Warning:
        ``knapsack`` stays exactly the paper's (plug-in p_i with the fallback), for reproduction; this is a separate
        strategy. It reads ``beta_a`` / ``beta_b`` only; success rates passed instead of stats become a posterior
        through ``PromptBatchStats.from_success_rates`` (8 completions each).
    """

    name = "bayes_knapsack"
    reads = ("posterior",)  # beta_a, beta_b (and the real counts' evidence)

    solver: str = "greedy"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.solver not in SOLVERS:
            raise ValueError(f"solver={self.solver!r} is not one of {SOLVERS}: use 'greedy' (default) or 'dp'.")

    def _allocate(self, stats: PromptBatchStats, budget: int) -> np.ndarray | Allocation:
        a, b = posterior(stats)
        num_prompts = len(a)
        counts = largest_remainder(np.full(num_prompts, budget / num_prompts), budget)
        seen = self.budget_positions(stats)
        if len(seen):
            counts[seen] = self._solve(a[seen], b[seen], int(counts[seen].sum()), self.min_rollouts)
        return counts

    # -- what a token budget re-solves (token_budgeted.TokenBudgeted) ---------------------------------------------
    def budget_positions(self, stats: PromptBatchStats) -> np.ndarray:
        """The prompts with evidence: the others get their uniform share."""
        return np.flatnonzero(np.asarray(stats.evidence) > 0)

    def budget_gains(self, stats: PromptBatchStats, positions: np.ndarray) -> np.ndarray:
        """E[Value]'s gains under each posterior, for the prompts at ``positions``."""
        a, b = posterior(stats)
        return expected_gains(a[positions], b[positions], self.max_rollouts)

    # -- a pilot round (sampling.Pilot) ------------------------------------------------------------------------------
    def absorb(self, stats: PromptBatchStats, successes: np.ndarray, attempts: np.ndarray) -> PromptBatchStats:
        """``stats`` with a round's results in the posterior (:func:`absorb`): what round two decides on."""
        return absorb(stats, successes, attempts)

    def check_pilot(self, pilot_rollouts: int, num_prompts: int, budget: int) -> None:
        """Refuse a pilot round that leaves round two nothing (:func:`pilot_budget_check`)."""
        pilot_budget_check(pilot_rollouts, num_prompts, budget, self.min_rollouts)

    def allocate_remaining(self, stats: PromptBatchStats, budget_left: int, already: np.ndarray) -> Allocation:
        """Round two of a step: extra completions per prompt on top of ``already`` (e.g. a pilot round's k each).

        Solves max sum_i E[Value(already_i + x_i, p_i)] s.t. sum_i x_i = ``budget_left``, x_i >= 0 and
        N_low <= already_i + x_i <= N_up: the knapsack with a per-prompt offset. The rows start at
        max(already_i, N_low) >= 2, where E[Value] is concave, so the greedy stays exact. Every prompt is valued by
        its posterior here (no uniform share for prompts without evidence): pass the posterior that already holds
        round one, e.g. ``absorb(stats, pilot_successes, already)``.

        Args:
            stats: the batch's statistics; ``beta_a`` / ``beta_b`` are read.
            budget_left: the completions of the step not spent yet (B - sum(already)), >= 0.
            already: ``(M,)`` completions each prompt already has in this step, integers in [0, N_up].

        Returns:
            an :class:`~.base.Allocation` whose ``counts`` are the ``(M,)`` int64 extra completions, >= 0, summing to
            ``budget_left``; ``already + counts`` lies in [N_low, N_up] (checked by the contract's guard) and
            maximises the expected objective.

        Raises:
            ValueError: for a malformed ``already`` or ``budget_left``, or when no split fits the bounds (naming the
                numbers).

        Example:
            >>> stats = PromptBatchStats.from_success_rates([0.0, 0.5, 1.0], attempts=4)
            >>> BayesKnapsackAllocator().allocate_remaining(stats, 12, np.array([4, 4, 4])).counts.tolist()
            [7, 4, 1]
        """
        a, b = posterior(stats)
        num_prompts = len(a)
        already = _checked_already(already, num_prompts, self.max_rollouts)
        check_int("budget_left", budget_left, minimum=0, reason="completions not yet spent")
        lower = np.maximum(already, self.min_rollouts)
        total = int(already.sum()) + int(budget_left)
        low, high = int(lower.sum()), num_prompts * self.max_rollouts
        if not low <= total <= high:
            raise ValueError(
                f"budget_left={budget_left} on top of {int(already.sum())} completions already drawn cannot be split "
                f"over {num_prompts} prompts within [min_rollouts={self.min_rollouts}, max_rollouts="
                f"{self.max_rollouts}]: the total must lie in [{low}, {high}], it is {total}. Change the pilot, the "
                "budget or the bounds."
            )
        totals = self.checked(Allocation(self._solve(a, b, total, lower)), stats, total)
        return dataclasses.replace(totals, counts=totals.counts - already, budget=int(budget_left))

    def _solve(self, a: np.ndarray, b: np.ndarray, budget: int, lower: int | np.ndarray) -> np.ndarray:
        gains = expected_gains(a, b, self.max_rollouts)
        if self.solver == "dp":
            table = np.zeros((gains.shape[0], gains.shape[1] + 1))
            np.cumsum(gains, axis=1, out=table[:, 1:])
            return solve_dp(table, budget, lower, self.max_rollouts)
        return solve_greedy(None, budget, lower, self.max_rollouts, gains=gains)


# -- the posterior, and the pilot round -------------------------------------------------------------------------------
def posterior(stats: PromptBatchStats) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` of ``stats`` as float64 arrays, checked: finite and > 0, one per prompt.

    Raises:
        ValueError: naming ``stats.beta_a`` or ``stats.beta_b`` and the positions, with the fix; or when the stats were
            read without the posterior (None).
    """
    out = []
    for field in ("beta_a", "beta_b"):
        if getattr(stats, field) is None:
            raise ValueError(
                f"stats.{field} is None: these statistics were read without the 'posterior' estimator. Read them with "
                "PromptStatistics.batch(ids, reads=BayesKnapsackAllocator.reads)."
            )
        values = np.asarray(getattr(stats, field), dtype=np.float64)
        if values.shape != (len(stats),):
            raise ValueError(f"stats.{field} must hold one value per prompt ({len(stats)}), got shape {values.shape}.")
        bad = ~np.isfinite(values) | (values <= 0.0)
        if np.any(bad):
            raise ValueError(
                f"stats.{field} must be finite and > 0 (a Beta posterior); got {values[bad][:3].tolist()} at "
                f"positions {np.flatnonzero(bad)[:3].tolist()}. Build stats with PromptStatistics.batch(ids), whose "
                "posterior is Beta(1 + prior + successes, 1 + prior + failures), or fix the values passed in."
            )
        out.append(values)
    return out[0], out[1]


def expected_gains(a: np.ndarray, b: np.ndarray, n_up: int) -> np.ndarray:
    """``(M, n_up)`` expected marginal gains E[Value(n + 1, p)] - E[Value(n, p)], p ~ Beta(a_i, b_i), compiled.

    The same numbers as :func:`~.value.expected_marginal_gains` (its NumPy reference, to ~1e-13 relative), about
    20x faster. ``a`` and ``b`` must already be checked (:func:`posterior`).
    """
    _ensure_compiled()
    gains = np.empty((len(a), int(n_up)))
    _kernels.expected_gains(
        np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(b, dtype=np.float64), gains
    )
    return gains


def absorb(stats: PromptBatchStats, successes: np.ndarray, attempts: np.ndarray) -> PromptBatchStats:
    """``stats`` with a round's results added to the posterior: Beta(a + s, b + t - s), attempts and successes + t, s.

    What a pilot round hands to round two within one step, without touching the store (which the trainer updates
    once per step with every completion). ``success_rate`` (the last completed epoch's rate) is left as it is.
    With ``posterior_half_life`` set, the store will also multiply the OLD evidence by 2^(-1/h) when it records the
    step; round two reads it one step less faded, a difference of one factor 2^(-1/h) on old evidence only.

    Args:
        stats: the batch's statistics before the round.
        successes: ``(M,)`` s_i, successful completions of the round per prompt.
        attempts: ``(M,)`` t_i, scored completions of the round per prompt (unscorable ones excluded), s_i <= t_i.

    Example:
        >>> s = absorb(PromptBatchStats.from_success_rates([float("nan")] * 2), np.array([1, 0]), np.array([4, 4]))
        >>> s.beta_a.tolist(), s.beta_b.tolist(), s.evidence.tolist()
        ([2.0, 1.0], [4.0, 5.0], [4.0, 4.0])
    """
    s = np.asarray(successes, dtype=np.float64)
    t = np.asarray(attempts, dtype=np.float64)
    if s.shape != (len(stats),) or t.shape != (len(stats),):
        raise ValueError(
            f"successes and attempts must hold one count per prompt ({len(stats)}), got shapes {s.shape}, {t.shape}."
        )
    if np.any(~np.isfinite(s) | ~np.isfinite(t) | (s < 0) | (s > t)):
        raise ValueError("successes and attempts must be finite with 0 <= successes <= attempts for every prompt.")
    a, b = posterior(stats)
    return dataclasses.replace(
        stats,
        attempts=np.asarray(stats.attempts, dtype=np.float64) + t,
        successes=np.asarray(stats.successes, dtype=np.float64) + s,
        beta_a=a + s,
        beta_b=b + (t - s),
    )


def pilot_budget_check(pilot_rollouts: int, num_prompts: int, budget: int, min_rollouts: int) -> None:
    """Refuse a pilot round that leaves nothing for round two, before anything is generated.

    Round one gives every prompt ``pilot_rollouts`` = k completions; round two splits the rest, B - k M, by
    :meth:`BayesKnapsackAllocator.allocate_remaining`, raising each prompt to at least N_low.

    Args:
        pilot_rollouts: k, completions per prompt in round one (an integer >= 1).
        num_prompts: M, prompts of the step.
        budget: B, completions of the step (``num_generations`` x M in the trainer).
        min_rollouts: N_low of the allocator of round two.

    Raises:
        ValueError: naming ``pilot_rollouts`` and the fix when k is not an integer >= 1, when k M >= B (no round
            two), or when B < N_low M (round two cannot bring every prompt to N_low).

    Example:
        >>> pilot_budget_check(4, num_prompts=256, budget=2048, min_rollouts=2)  # 1024 left for round two
        >>> pilot_budget_check(8, num_prompts=256, budget=2048, min_rollouts=2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: pilot_rollouts=8 x 256 prompts = 2048 completions leaves nothing for round two ... at most 7, ...
    """
    for field, value in (("pilot_rollouts", pilot_rollouts), ("num_prompts", num_prompts), ("budget", budget)):
        pilot = field == "pilot_rollouts"
        reason = "completions per prompt in the pilot round; leave the pilot off instead of 0" if pilot else ""
        check_int(field, value, minimum=1, reason=reason)
    if pilot_rollouts * num_prompts >= budget:
        raise ValueError(
            f"pilot_rollouts={pilot_rollouts} x {num_prompts} prompts = {pilot_rollouts * num_prompts} completions "
            f"leaves nothing for round two of the step's budget of {budget} (num_generations x prompts). Lower "
            f"pilot_rollouts to at most {(budget - 1) // num_prompts}, or raise num_generations."
        )
    if budget < min_rollouts * num_prompts:
        raise ValueError(
            f"budget={budget} is below min_rollouts={min_rollouts} x {num_prompts} prompts: round two after "
            f"pilot_rollouts={pilot_rollouts} cannot bring every prompt to min_rollouts. Raise num_generations or "
            "lower min_rollouts."
        )


def _checked_already(already: np.ndarray, num_prompts: int, n_up: int) -> np.ndarray:
    counts = np.asarray(already)
    if counts.shape != (num_prompts,) or counts.dtype.kind not in "iuf":
        raise ValueError(f"already must be an integer array of shape ({num_prompts},), got {counts.shape}.")
    if counts.dtype.kind == "f" and (np.any(~np.isfinite(counts)) or np.any(counts != np.round(counts))):
        raise ValueError("already must hold whole numbers of completions.")
    counts = counts.astype(np.int64)
    if np.any(counts < 0) or np.any(counts > n_up):
        raise ValueError(f"already must lie in [0, max_rollouts={n_up}] for every prompt, got {counts.tolist()[:8]}.")
    return counts


__all__ = ["BayesKnapsackAllocator", "absorb", "expected_gains", "pilot_budget_check", "posterior"]
