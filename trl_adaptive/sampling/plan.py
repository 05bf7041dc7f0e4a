"""Procedures built on an allocator: plan ahead (one round); a pilot round, then the rest."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from .._validate import check_int
from ..allocation.base import Allocator
from .base import BatchContext, BatchRecord, Procedure, Round


def check_allocator(procedure: str, allocator: object) -> None:
    """An allocator object, not a name: names resolve in ``trl_adaptive.strategies`` (which this layer sits below)."""
    if not isinstance(allocator, Allocator):
        raise TypeError(
            f"{procedure} takes an Allocator, got {allocator!r}. Build one by name with "
            f"trl_adaptive.strategies.get_allocator({allocator!r}), or use build_procedure / as_procedure."
        )


@dataclass
class PlanAhead(Procedure):
    """The allocator splits the budget over the batch's prompts before anything is sampled; one round, all trained.

    Paper: the allocator's (each allocator class names its own); this procedure adds no rule of its own.

    With ``uniform`` this is GRPOTrainer's batch exactly.

    Example:
        >>> from trl_adaptive.allocation import KnapsackAllocator
        >>> procedure = PlanAhead(KnapsackAllocator())
        >>> procedure.allocator.name
        'knapsack'
    """

    allocator: Allocator

    def __post_init__(self) -> None:
        check_allocator(type(self).__name__, self.allocator)

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

    Round 1 gives every prompt ``pilot_rollouts`` = k; the allocator absorbs the results into the batch's statistics
    (``allocator.absorb``; the store itself is updated once per step); round 2 splits the remaining B - k M
    completions with the allocator's ``allocate_remaining`` (``bayes_knapsack``). Every completion of both rounds is
    trained on: the batch is exactly B.

    Args:
        allocator: an allocator with ``absorb(stats, successes, attempts) -> stats``,
            ``allocate_remaining(stats, budget_left, already)`` and ``check_pilot(pilot_rollouts, num_prompts,
            budget)`` (:class:`~trl_adaptive.allocation.BayesKnapsackAllocator`).
        pilot_rollouts: k >= 1, with k M < B.
    """

    allocator: Allocator
    pilot_rollouts: int = 2

    def __post_init__(self) -> None:
        k = self.pilot_rollouts
        check_int("pilot_rollouts", k, minimum=1, reason="completions per prompt in round one")
        check_allocator(type(self).__name__, self.allocator)
        if not all(hasattr(self.allocator, m) for m in ("absorb", "allocate_remaining", "check_pilot")):
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
        self.allocator.check_pilot(self.pilot_rollouts, num_prompts, budget)
        self.allocator.check_budget(num_prompts, budget)

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        ids = ctx.prompt_ids
        stats = ctx.statistics(ids)
        yield Round(ids, np.full(len(ids), self.pilot_rollouts, dtype=np.int64))
        already = record.counts(ids)  # k each, plus any completion a round rounded up to the ranks added
        if already.sum() >= ctx.budget:  # a dynamic-sampling refill whose pilot the ranks' rounding already filled
            return record.completions_of(ids)
        posterior = self.allocator.absorb(stats, record.successes(ids), record.attempts(ids))
        allocation = self.allocator.allocate_remaining(posterior, ctx.budget - int(already.sum()), already)
        record.note_allocation(allocation)
        record.metrics["pilot/completions"] = record.metrics.get("pilot/completions", 0.0) + float(already.sum())
        if allocation.counts.sum() > 0:
            yield Round(ids, allocation.counts, final=True)
        return record.completions_of(ids)


__all__ = ["PlanAhead", "Pilot", "check_allocator"]
