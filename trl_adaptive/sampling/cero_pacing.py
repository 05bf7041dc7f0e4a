"""CERO's pacing (arXiv 2606.05606): the price decides which prompts are sampled, further prompts drawn on demand."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._validate import check_int
from ..allocation.cero import CeroAllocator
from .base import BatchContext, BatchRecord, Procedure, Round
from .plan import PlanAhead


@dataclass
class CeroPacing(PlanAhead):
    """CERO's rule with prompts drawn on demand: a batch prompt priced out (theta_i <= mu) is skipped and further
    prompts are drawn in its place, so the price decides which and how many distinct prompts an epoch trains on.

    Paper: Y. Zong, Y. Wang and J. Jiang, "Cross-Epoch Adaptive Rollout Optimization for RL Post-Training", 2026,
    arXiv 2606.05606. Implements the sampling rule of Sec. 4, Algorithm 1 (a prompt is sampled while its dual exceeds
    the price), with further prompts drawn on demand.

    Up to ``max_draw_rounds`` times, while the wanted prompts examined cannot spend B at N_max each, twice the missing
    number of prompts is drawn (``ctx.draw_prompts``); then
    :meth:`~trl_adaptive.allocation.cero.CeroAllocator.allocate_paced` splits B over every examined prompt. Examined
    prompts that get 0 are groups of the batch with no completion. The duals move once per step
    (``CeroAllocator.end_step``).

    Args:
        allocator: the :class:`~trl_adaptive.allocation.CeroAllocator`.
        max_draw_rounds: how many times a step may draw further prompts before the budget left is given to the
            best-ranked prompts examined, wanted or not (default 3).
    """

    allocator: CeroAllocator
    max_draw_rounds: int = 3
    draws_prompts: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.allocator, CeroAllocator):
            raise ValueError(f"CeroPacing needs a CeroAllocator, got {self.allocator!r}.")
        check_int("max_draw_rounds", self.max_draw_rounds, minimum=0, reason="times a step may draw prompts")

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        cero, examined = self.allocator, ctx.prompt_ids
        for _ in range(self.max_draw_rounds):
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


def cero_procedure(allocator: CeroAllocator, pacing: bool = True, max_draw_rounds: int = 3) -> Procedure:
    """How strategy ``"cero"`` samples: :class:`CeroPacing` (``pacing=True``, the default) or the fixed-prompt
    mapping of :meth:`CeroAllocator.allocate` planned ahead (``pacing=False``)."""
    if not isinstance(pacing, bool):
        raise ValueError(f"pacing={pacing!r} must be True (CERO's price picks the prompts) or False (fixed prompts).")
    return CeroPacing(allocator, max_draw_rounds) if pacing else PlanAhead(allocator)


__all__ = ["CeroPacing", "cero_procedure"]
