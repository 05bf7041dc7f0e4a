"""Pilot-Commit's rule (``databricks/pilot-commit``, ``recipe/pc``) at a fixed budget."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._validate import check_int
from ..allocation.base import fill_evenly
from .base import BatchContext, BatchRecord, Outcome, Procedure, Round


@dataclass
class PilotCommit(Procedure):
    """A pilot of k per prompt; prompts whose pilot success rate is mid-range share the rest; solved ones are evicted.

    Paper: none published; the rule of the Pilot-Commit code (`databricks/pilot-commit`, `recipe/pc`) with its README's
    thresholds.

    One batch: every prompt not evicted gets ``pilot_rollouts`` = k completions; prompts whose pilot success rate q
    lies in [``lower``, 1 - ``upper``] (the official ``diversity_threshold_lower`` / ``_upper``; README values
    0.125 / 0.25) share the rest of the budget evenly, up to ``max_rollouts`` each (anything that does not fit is
    spread evenly over the other active prompts); too-hard (q < lower) and too-easy prompts get nothing more this
    batch (too-hard ones come back next epoch); prompts with q >= ``evict_at`` (the official
    ``exclude_threshold_upper``, 1.0 in the README) are evicted at the end of the step: they get no completion in
    any later batch. All completions, pilot included, are trained on.

    Departures from the official code, forced by a fixed-size step: the commit happens in the same step, on the
    pilot's prompts (the official trainer commits from a replay buffer up to 4 steps later, with fresh prompts
    filling the batch); an evicted prompt's share stays in the batch instead of drawing a new prompt; if fewer than
    B / max_rollouts prompts of a batch are active, eviction is ignored for that batch.

    Own state (``own_state``, JSON): ``{"evicted": [prompt ids]}``.
    """

    name: ClassVar[str] = "pilot_commit"

    pilot_rollouts: int = 4
    lower: float = 0.125
    upper: float = 0.25
    evict_at: float | None = 1.0
    max_rollouts: int = 128
    evicted: set[int] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        k = self.pilot_rollouts
        check_int("pilot_rollouts", k, minimum=2, reason="a group of one has no baseline")
        if not 0.0 <= self.lower <= 1.0 - self.upper <= 1.0:
            raise ValueError(f"Need 0 <= lower <= 1 - upper <= 1, got lower={self.lower}, upper={self.upper}.")
        check_int("max_rollouts", self.max_rollouts, minimum=k, minimum_name="pilot_rollouts")

    @property
    def min_rollouts(self) -> int:
        return self.pilot_rollouts

    def check(self, num_prompts: int, budget: int, group_size: int) -> None:
        if self.pilot_rollouts >= group_size:
            fix = (
                f"Set pilot_rollouts={max(2, group_size // 2)} (the config field, or allocator_kwargs="
                f'{{"pilot_rollouts": {max(2, group_size // 2)}}}), or raise num_generations.'
                if group_size >= 3
                else "Pilot-Commit needs num_generations >= 3 (a pilot of at least 2, and more to commit): raise it."
            )
            raise ValueError(
                f"pilot_rollouts={self.pilot_rollouts} leaves nothing to commit: it must be below "
                f"num_generations={group_size}, the average completions per prompt. {fix}"
            )
        if budget > num_prompts * self.max_rollouts:
            raise ValueError(f"budget={budget} exceeds {num_prompts} prompts x max_rollouts={self.max_rollouts}.")

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        ids, k, n_up, budget = ctx.prompt_ids, self.pilot_rollouts, self.max_rollouts, ctx.budget
        active = ~np.isin(ids, np.fromiter(self.evicted, np.int64, len(self.evicted)))
        if active.sum() * n_up < budget or active.sum() * k >= budget:
            active[:] = True  # too few prompts left to hold the budget: ignore eviction this batch
        first = np.where(active, k, 0).astype(np.int64)
        yield Round(ids, first)
        first = record.counts(ids)
        rate = np.divide(record.successes(ids), first, out=np.zeros(len(ids)), where=first > 0)
        keep = np.flatnonzero(active & (rate >= self.lower) & (rate <= 1.0 - self.upper))
        counts, left = first.copy(), budget - int(first.sum())
        if len(keep):
            counts[keep], left = fill_evenly(counts[keep], left, n_up)
        if left:
            on = np.flatnonzero(active)
            counts[on], left = fill_evenly(counts[on], left, n_up)
        if self.evict_at is not None:
            # Under dynamic sampling this runs again for drawn prompts: add to the step's evictions.
            record.notes.setdefault("evict", []).extend(ids[active & (rate >= self.evict_at)].tolist())
        if int((counts - first).sum()) > 0:
            yield Round(ids, counts - first, final=True)
        return record.completions_of(ids)

    def end_step(self, outcome: Outcome) -> None:
        self.evicted.update(int(i) for i in outcome.record.notes.get("evict", ()))

    def own_state(self) -> dict[str, Any]:
        return {"evicted": sorted(self.evicted)}

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        unknown = set(state) - {"evicted"}
        if unknown:
            raise ValueError(f"PilotCommit state has unknown keys {sorted(unknown)}; it holds only 'evicted'.")
        self.evicted = {int(i) for i in state.get("evicted", ())}


__all__ = ["PilotCommit"]
