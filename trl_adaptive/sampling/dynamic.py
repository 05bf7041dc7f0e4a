"""DAPO's dynamic sampling (arXiv 2503.14476) around any procedure that trains what it generates."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._validate import check_int
from ..allocation.base import Allocator
from .base import BatchContext, BatchRecord, Procedure, Round, relay
from .rules import dynamic_sampling_keep, is_success

# Why a batch's extra rounds stopped (``record.notes["dynamic_sampling_stop"]``; the fill warning says it).
STOP_FULL = "the batch was full"
STOP_ROUND_LIMIT = "dynamic_sampling_max_rounds was reached"
STOP_TOO_FEW_MISSING = "the missing completions were fewer than min_rollouts, too few for one more group"
STOP_OUT_OF_PROMPTS = "the training data had no further prompts to draw (every prompt was already in the batch)"
STOP_INNER_REFUSED = "the strategy could not split the missing completions over the drawn prompts"


@dataclass
class DynamicSampling(Procedure):
    """Keep the mixed groups, draw further prompts for the rest, at most ``max_rounds`` extra rounds per batch.

    Paper: Q. Yu, Z. Zhang, R. Zhu, Y. Yuan, X. Zuo, Y. Yue et al., "DAPO: An Open-Source LLM Reinforcement Learning
    System at Scale", 2025, arXiv 2503.14476. Implements Sec. 3.2, dynamic sampling: over-sample and filter out the
    groups whose accuracy is 0 or 1.

    One batch: the ``inner`` procedure samples the batch's prompts (e.g. knapsack's plan); groups whose completions
    are all successes or all failures by the success rule are dropped; while the kept groups hold fewer than B
    completions and fewer than ``max_rounds`` extra rounds were taken, further prompts are drawn from the training
    data (``ctx.draw_prompts``: about one per ``group_size`` missing completions, enough to hold them within
    max_rollouts), the inner procedure samples them with the missing completions as its budget, and their mixed
    groups are kept. Kept completions are trained on in generation order, up to B. A batch still short is filled
    with completions of dropped groups, whose advantage weight is set to 0: they add no gradient whatever the reward
    (with shaped rewards an "all correct" group can still have reward variance), as zero-std groups in GRPO.

    Args:
        inner: the procedure (``trl_adaptive.strategies.as_procedure`` builds one from a name or an allocator). It
            must train every completion it generates: Reinforce-Ada Seq, which selects, is refused.
        max_rounds: the most extra rounds per batch (the trainer's ``dynamic_sampling_max_rounds``).
    """

    inner: Procedure
    max_rounds: int = 3
    draws_prompts: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int("max_rounds", self.max_rounds, minimum=0, reason="extra rounds per step")
        if not isinstance(self.inner, Procedure):
            raise TypeError(
                f"DynamicSampling wraps a Procedure, got {self.inner!r}; build one with "
                "trl_adaptive.strategies.as_procedure(name or allocator)."
            )
        if not self.inner.trains_all_generated:
            raise ValueError(
                f"dynamic_sampling=True with {type(self.inner).__name__}: it selects which completions to train on "
                "(Reinforce-Ada Seq already samples until each prompt shows signal), so there is nothing for "
                "dynamic sampling to keep or drop. Use dynamic_sampling with a plan-ahead allocator (knapsack, "
                "uniform, reinforce_ada_est, bayes_knapsack, cero) or a pilot round, or drop it."
            )

    @property
    def allocator(self) -> Allocator | None:
        return self.inner.allocator

    @property
    def max_rollouts(self) -> int:
        return self.inner.max_rollouts

    @property
    def min_rollouts(self) -> int:
        return self.inner.min_rollouts

    def check(self, num_prompts: int, budget: int, group_size: int) -> None:
        self.inner.check(num_prompts, budget, group_size)

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        yield from relay(self.inner.rounds(ctx, record))
        low, drawn, extra, stop = max(self.min_rollouts, 1), 0, 0, STOP_FULL
        while (missing := ctx.budget - len(self._kept(record))) > 0:
            if extra >= self.max_rounds:
                stop = STOP_ROUND_LIMIT
                break
            number = min(max(1, missing // ctx.group_size), missing // low)
            number = max(number, -(-missing // self.max_rollouts))  # enough prompts to hold `missing` within N_up
            if number == 0 or number * low > missing:
                stop = STOP_TOO_FEW_MISSING
                break
            ids = ctx.draw_prompts(record.prompt_ids, number)
            if len(ids) < number:
                stop = STOP_OUT_OF_PROMPTS
                break
            try:
                self.inner.check(len(ids), missing, ctx.group_size)
            except ValueError as refusal:
                stop = f"{STOP_INNER_REFUSED} ({refusal})"
                break
            extra, drawn = extra + 1, drawn + len(ids)
            yield from relay(self.inner.rounds(ctx.replace(prompt_ids=ids, budget=missing), record))
        record.notes["dynamic_sampling_stop"] = stop
        kept = self._kept(record)[: ctx.budget]
        mixed = self._mixed(record)
        fill = np.flatnonzero(~mixed[record.group_ids])[: ctx.budget - len(kept)]
        if len(fill):
            record.set_weights(record.prompt_ids[np.unique(record.group_ids[fill])], 0.0)
        record.metrics.update(
            {
                "dynamic_sampling/groups_dropped": float(np.sum(~mixed & (record.counts() > 0))),
                "dynamic_sampling/prompts_drawn": float(drawn),
                "dynamic_sampling/extra_rounds": float(extra),
                "dynamic_sampling/filled": float(len(fill)),
            }
        )
        return np.concatenate([kept, fill])

    @staticmethod
    def _mixed(record: BatchRecord) -> np.ndarray:
        success = is_success(record.rewards, record.success_threshold)
        return dynamic_sampling_keep(success, record.group_ids, len(record.prompt_ids))

    def _kept(self, record: BatchRecord) -> np.ndarray:
        return np.flatnonzero(self._mixed(record)[record.group_ids])


__all__ = ["DynamicSampling"]
