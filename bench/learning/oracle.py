"""The oracle: an allocator and a prompt source that know every training prompt's TRUE success probability.

On these tasks the answer is one token sequence, so a prompt's true success probability under the current policy is
exact and cheap: p = P(answer + end of sequence | prompt), teacher-forced, one forward pass over the training
prompts (``task.expected_accuracy``, the same function that scores the held-out set). :class:`TrueSuccessCallback`
computes it before every generation batch, and two registered strategies read it, through the package's public
extension points only (``register_allocator``, ``register_prompt_source``, a trainer callback; :func:`register`
makes the names, as ``runs.training_config`` does for an oracle method):

- ``oracle_knapsack`` (:class:`OracleKnapsack`): Knapsack RL's allocation (the fallback included) on the true p,
  from the first batch on; no estimate, no staleness.
- ``oracle_pool`` (:class:`OraclePool`): from a pool of 4 x the batch's prompts, those whose group of G completions
  has the largest true Value(G, p) = P(mixed) x p (1 - p)^2 (Knapsack RL's objective).

What they gain over tuned uniform bounds what any estimate of p can gain with that objective: the ceiling.

One training run per process at a time (bench_learning.run_all runs them in turn): :data:`TRUE_SUCCESS` is the
process's table, indexed by prompt id (the training rows' index, the id the trainer gives a dataset without one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
from transformers import TrainerCallback

from trl_adaptive.allocation import KnapsackAllocator
from trl_adaptive.allocation.value import prob_nonzero_gradient, value
from trl_adaptive.sampling.source import PromptSource, SourceBatch, SourceContext
from trl_adaptive.strategies import register_allocator, register_prompt_source

from . import task


class TrueSuccess:
    """The true success probability of every training prompt under the policy as it stood before this batch."""

    def __init__(self) -> None:
        self.p: np.ndarray | None = None
        self.updates = 0

    def of(self, prompt_ids: np.ndarray) -> np.ndarray:
        if self.p is None:
            raise RuntimeError("The oracle was asked before TrueSuccessCallback scored the training prompts.")
        # Clipped off 0 and 1: a softmax policy never reaches either, and the knapsack's tiers treat exact 0 / 1 apart.
        return np.clip(self.p[np.asarray(prompt_ids, dtype=np.int64)], 1e-12, 1 - 1e-12)


TRUE_SUCCESS = TrueSuccess()


class TrueSuccessCallback(TrainerCallback):
    """Scores every training prompt exactly at the start of each generation batch (every ``steps_per_generation``
    optimizer steps: TRL generates at the step that begins one), before the trainer samples it."""

    def __init__(self, tokenizer, rows: list[dict], steps_per_generation: int) -> None:
        self.tokenizer, self.rows, self.every = tokenizer, rows, steps_per_generation
        self.batches = task.scoring_batches(tokenizer, rows)
        TRUE_SUCCESS.p, TRUE_SUCCESS.updates = None, 0

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            TRUE_SUCCESS.p = task.expected_accuracy(model, self.tokenizer, self.rows, self.batches)
            TRUE_SUCCESS.updates += 1


def _true(stats):
    """``stats`` with the true success probability in place of the epoch rate (the knapsack's p)."""
    return replace(stats, success_rate=TRUE_SUCCESS.of(stats.prompt_ids))


@dataclass
class OracleKnapsack(KnapsackAllocator):
    """Knapsack RL's allocation on the true p (an oracle: the benchmark's ceiling for the knapsack's objective)."""

    name: ClassVar[str] = "oracle_knapsack"
    reads: ClassVar[tuple[str, ...]] = ()

    def _allocate(self, stats, budget):
        return super()._allocate(_true(stats), budget)

    def budget_positions(self, stats):
        return super().budget_positions(_true(stats))

    def budget_gains(self, stats, positions):
        return super().budget_gains(_true(stats), positions)


class OraclePool(PromptSource):
    """From the offered prompts and (pool_factor - 1) x as many drawn ones, the U of highest true Value(G, p)."""

    name: ClassVar[str] = "oracle_pool"
    needs_pool: ClassVar[bool] = True

    def __init__(self, pool_factor: int = 4) -> None:
        self.pool_factor = pool_factor

    def compose(self, ctx: SourceContext) -> SourceBatch:
        offered = np.asarray(ctx.offered, dtype=np.int64)
        drawn = np.asarray(ctx.draw(offered, (self.pool_factor - 1) * len(offered)), dtype=np.int64)
        pool = np.concatenate([offered, drawn])
        p = TRUE_SUCCESS.of(pool)
        kept = np.sort(np.argsort(-value(ctx.group_size, p), kind="stable")[: len(offered)])
        selected = np.zeros(len(pool), dtype=bool)
        selected[kept] = True
        predicted = float(prob_nonzero_gradient(ctx.group_size, p[kept]).mean())
        return SourceBatch(
            prompt_ids=pool[kept], examined=pool, skipped={"lower_value": pool[~selected]}, predicted_mixed=predicted
        )


def register() -> None:
    """Make ``oracle_knapsack`` and ``oracle_pool`` config names (again: the same classes replace themselves). Not at
    import, so that importing the benchmark leaves the package's registry as it ships."""
    register_allocator(papers=("knapsack_rl",))(OracleKnapsack)
    register_prompt_source(OraclePool)


__all__ = ["TRUE_SUCCESS", "OracleKnapsack", "OraclePool", "TrueSuccess", "TrueSuccessCallback", "register"]
