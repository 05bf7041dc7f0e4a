"""Procedures built on an allocator: plan ahead (one round), a pilot round then the rest, CERO's pacing."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._validate import check_int
from ..allocation.base import Allocator, get_allocator
from ..allocation.bayes_knapsack import absorb, pilot_budget_check
from ..allocation.cero import CeroAllocator
from .base import BatchContext, BatchRecord, Procedure, Round


def as_allocator(allocator: str | Allocator) -> Allocator:
    """A registered allocator name, built with its defaults, or the instance itself."""
    return get_allocator(allocator) if isinstance(allocator, str) else allocator


@dataclass
class PlanAhead(Procedure):
    """The allocator splits the budget over the batch's prompts before anything is sampled; one round, all trained.

    Paper: the allocator's (each allocator class names its own); this procedure adds no rule of its own.

    With ``uniform`` this is GRPOTrainer's batch exactly.

    Example:
        >>> from trl_adaptive.sampling import BatchContext, drive
        >>> procedure = PlanAhead("knapsack")
        >>> procedure.allocator.name
        'knapsack'
    """

    allocator: str | Allocator = "knapsack"

    def __post_init__(self) -> None:
        self.allocator = as_allocator(self.allocator)

    @property
    def max_rollouts(self) -> int:
        return self.allocator.max_rollouts

    @property
    def min_rollouts(self) -> int:
        return self.allocator.min_rollouts

    def check(self, num_prompts: int, budget: int, group_size: int) -> None:
        self.allocator.check_budget(num_prompts, budget)

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        allocation = self.allocator.allocate(ctx.statistics(ctx.prompt_ids), ctx.budget)
        record.note_allocation(allocation)
        yield Round(ctx.prompt_ids, allocation.counts, final=True)
        return record.completions_of(ctx.prompt_ids)


@dataclass
class Pilot(Procedure):
    """A pilot round of k completions per prompt, then the rest of the budget on the posterior that absorbed it.

    Paper: none; this package's two-round use of Knapsack RL (Li et al., 2025, arXiv 2509.25849): round 2 maximises the
    knapsack objective of its Sec. 4 (Eq. 5) in expectation under the posterior (docs/allocators.md, "The pilot
    round").

    Round 1 gives every prompt ``pilot_rollouts`` = k; the batch's posterior absorbs the results
    (:func:`~trl_adaptive.allocation.bayes_knapsack.absorb`; the store itself is updated once per step); round 2
    splits the remaining B - k M completions with the allocator's ``allocate_remaining`` (``bayes_knapsack``). Every
    completion of both rounds is trained on: the batch is exactly B.

    Args:
        allocator: a registered name or an instance with ``allocate_remaining(stats, budget_left, already)``.
        pilot_rollouts: k >= 1, with k M < B.
    """

    allocator: str | Allocator = "bayes_knapsack"
    pilot_rollouts: int = 2

    def __post_init__(self) -> None:
        k = self.pilot_rollouts
        check_int("pilot_rollouts", k, minimum=1, reason="completions per prompt in round one")
        self.allocator = as_allocator(self.allocator)
        if not hasattr(self.allocator, "allocate_remaining"):
            raise ValueError(
                f"pilot_rollouts={k} needs allocator='bayes_knapsack' (its posterior absorbs the pilot and "
                f"allocate_remaining spends the rest), not {self.allocator.name!r}. Set allocator='bayes_knapsack' "
                "or pilot_rollouts=0."
            )

    @property
    def max_rollouts(self) -> int:
        return self.allocator.max_rollouts

    @property
    def min_rollouts(self) -> int:
        return max(self.allocator.min_rollouts, self.pilot_rollouts + 1)

    def check(self, num_prompts: int, budget: int, group_size: int) -> None:
        pilot_budget_check(self.pilot_rollouts, num_prompts, budget, self.allocator.min_rollouts)
        self.allocator.check_budget(num_prompts, budget)

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        ids = ctx.prompt_ids
        stats = ctx.statistics(ids)
        yield Round(ids, np.full(len(ids), self.pilot_rollouts, dtype=np.int64))
        already = record.counts(ids)  # k each, plus any completion a round rounded up to the ranks added
        if already.sum() >= ctx.budget:  # a dynamic-sampling refill whose pilot the ranks' rounding already filled
            return record.completions_of(ids)
        posterior = absorb(stats, record.successes(ids), record.attempts(ids))
        allocation = self.allocator.allocate_remaining(posterior, ctx.budget - int(already.sum()), already)
        record.note_allocation(allocation)
        record.metrics["pilot/completions"] = record.metrics.get("pilot/completions", 0.0) + float(already.sum())
        if allocation.counts.sum() > 0:
            yield Round(ids, allocation.counts, final=True)
        return record.completions_of(ids)


@dataclass
class CeroPacing(PlanAhead):
    """CERO's rule with prompts drawn on demand: a batch prompt priced out (theta_i <= mu) is skipped and further
    prompts are drawn in its place, so the price decides which and how many distinct prompts an epoch trains on.

    Paper: Y. Zong, Y. Wang and J. Jiang, "Cross-Epoch Adaptive Rollout Optimization for RL Post-Training", 2026,
    arXiv 2606.05606. Implements the sampling rule of Sec. 4, Algorithm 1 (a prompt is sampled while its dual exceeds
    the price), with further prompts drawn on demand.

    Up to ``allocator.max_draw_rounds`` times, while the wanted prompts examined cannot spend B at N_max each, twice
    the missing number of prompts is drawn (``ctx.draw_prompts``); then
    :meth:`~trl_adaptive.allocation.cero.CeroAllocator.allocate_paced` splits B over every examined prompt. Examined
    prompts that get 0 are groups of the batch with no completion. The duals move once per step
    (``CeroAllocator.end_step``).
    """

    allocator: CeroAllocator
    draws_prompts: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.allocator, CeroAllocator):
            raise ValueError(f"CeroPacing needs a CeroAllocator, got {self.allocator!r}.")

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        cero, examined = self.allocator, ctx.prompt_ids
        for _ in range(cero.max_draw_rounds):
            supply = int(cero.wanted(ctx.statistics(examined)).sum()) * cero.max_rollouts
            if supply >= ctx.budget:
                break
            number = 2 * -(-(ctx.budget - supply) // cero.max_rollouts)  # twice what is missing: not all are wanted
            drawn = ctx.draw_prompts(np.concatenate([record.prompt_ids, examined]), number)
            if len(drawn) == 0:
                break
            examined = np.concatenate([examined, drawn])
        allocation = cero.allocate_paced(ctx.statistics(examined), ctx.budget, num_sampled=len(ctx.prompt_ids))
        record.note_allocation(allocation)
        record.metrics["cero/prompts_drawn"] = float(len(examined) - len(ctx.prompt_ids))
        yield Round(examined, allocation.counts, final=True)
        return record.completions_of(examined)


__all__ = ["CeroPacing", "PlanAhead", "Pilot", "as_allocator"]
