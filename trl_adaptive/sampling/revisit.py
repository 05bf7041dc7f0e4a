"""A floor of visits for any selecting prompt source: no prompt is passed over for more than ``epochs`` epochs.

A selecting source (``mopps``, ``greso``) stops generating for prompts it judges settled; a prompt solved early is
then never seen again, and its accuracy drifts while the policy moves elsewhere (docs/benchmarks.md: prompts the
initial policy solved regress under both sources, with GRPO's uniform allocation too). :class:`RevisitFloor`
wraps a source and gives every prompt a maintenance visit: the data's sampler offers each prompt once per epoch,
and an offered prompt the wrapped source passed over at ``epochs`` consecutive offers is generated at this one::

    epochs = 2, prompt 11 offered at epochs 1, 2, 3:
        epoch 1  offered, greso skips it         passed over 1x
        epoch 2  offered, greso skips it         passed over 2x
        epoch 3  offered -> generated, whatever greso says; the wrapped source composes the rest of the batch from
                 the other offered ids (its further draws never return 11), and 11's count starts again at 0

Built by the registry from ``prompt_source_kwargs={"revisit_epochs": k}`` (strategies.build_prompt_source), for the
trainer and the simulator alike. The count is kept per prompt in :meth:`own_state` (JSON, with the wrapped source's
state), so a resumed run forces the same prompts; it moves in :meth:`end_step`, from the batch's generated prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._validate import check_int
from .source import OfferedPrompts, PromptSource, SourceBatch, SourceContext


class RevisitFloor(PromptSource):
    """``source``, except that an offered prompt it passed over at ``epochs`` consecutive offers is generated.

    Args:
        source: the selecting prompt source to wrap (not the default ``"sampler"``, which passes over nothing).
        epochs: consecutive offers (epochs) a prompt may be passed over, >= 1.

    Attributes:
        name, reads, needs_pool: the wrapped source's (a checkpoint names the wrapped source).

    Example:
        >>> from trl_adaptive.sampling import SettledPromptSkipping
        >>> RevisitFloor(SettledPromptSkipping(), epochs=2).name
        'greso'
    """

    def __init__(self, source: PromptSource, epochs: int) -> None:
        if not isinstance(source, PromptSource) or type(source) is OfferedPrompts:
            raise ValueError(
                "revisit_epochs applies to a selecting prompt source ('mopps', 'greso', ...): prompt_source="
                f"{getattr(source, 'name', source)!r} generates every prompt it is offered. Remove revisit_epochs "
                "from prompt_source_kwargs."
            )
        self.source = source
        reason, fix = "epochs a prompt may be passed over", "Set it in prompt_source_kwargs."
        self.epochs = check_int("revisit_epochs", epochs, minimum=1, reason=reason, fix=fix)
        self.name, self.reads, self.needs_pool = source.name, source.reads, source.needs_pool
        self._passed: dict[int, int] = {}
        self._offered: np.ndarray | None = None  # this batch's offer, until end_step counts it

    def passed_over(self, prompt_ids: np.ndarray) -> np.ndarray:
        """Consecutive offers at which each prompt was not generated, int64."""
        return np.array([self._passed.get(i, 0) for i in np.asarray(prompt_ids).tolist()], dtype=np.int64)

    def compose(self, ctx: SourceContext) -> SourceBatch:
        offered = np.asarray(ctx.offered, dtype=np.int64)
        self._offered = offered
        due_mask = self.passed_over(offered) >= self.epochs
        if not due_mask.any():  # logged as 0 forced, so the metric is there at every batch
            return dataclasses.replace(self.source.compose(ctx), revisited=np.zeros(0, dtype=np.int64))
        due, rest = offered[due_mask], offered[~due_mask]
        if len(rest) == 0:
            return SourceBatch(prompt_ids=due, examined=due, skipped={}, revisited=due)
        inner = self.source.compose(dataclasses.replace(ctx, offered=rest, draw=_excluding(ctx.draw, due)))
        return SourceBatch(
            prompt_ids=np.concatenate([due, np.asarray(inner.prompt_ids, dtype=np.int64)]),
            examined=np.concatenate([due, np.asarray(inner.examined, dtype=np.int64)]),
            skipped=inner.skipped,
            predicted_mixed=inner.predicted_mixed,  # of the wrapped source's own choices
            revisited=due,
        )

    def draw_further(self, draw, exclude: np.ndarray, number: int) -> np.ndarray:
        return self.source.draw_further(draw, exclude, number)

    def end_step(
        self, prompt_ids: np.ndarray, group_ids: np.ndarray, rewards: np.ndarray, success_threshold: float
    ) -> None:
        self.source.end_step(prompt_ids, group_ids, rewards, success_threshold)
        generated = set(np.asarray(prompt_ids, dtype=np.int64).tolist())
        for prompt in generated:
            self._passed.pop(prompt, None)
        for prompt in [] if self._offered is None else self._offered.tolist():
            if prompt not in generated:
                self._passed[prompt] = self._passed.get(prompt, 0) + 1
        self._offered = None

    def own_state(self) -> dict[str, Any]:
        return {
            "source": self.source.own_state(),
            "passed_over": {str(i): k for i, k in sorted(self._passed.items())},
        }

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        if set(state) != {"source", "passed_over"}:
            raise ValueError(
                f"the saved prompt source state has keys {sorted(state)}, not a revisit floor's ['passed_over', "
                "'source']: the checkpoint was written without revisit_epochs. Resume with the same "
                "prompt_source_kwargs."
            )
        self.source.load_own_state(state["source"])
        self._passed = {int(i): int(k) for i, k in state["passed_over"].items()}
        self._offered = None

    def check(self, num_prompts: int, batch_prompts: int) -> None:
        self.source.check(num_prompts, batch_prompts)

    def __repr__(self) -> str:
        return f"RevisitFloor({self.source!r}, epochs={self.epochs})"


def _excluding(
    draw: Callable[[np.ndarray, int], np.ndarray], ids: np.ndarray
) -> Callable[[np.ndarray, int], np.ndarray]:
    """``draw`` that never returns ``ids`` (the prompts a floor already put in the batch)."""
    return lambda exclude, number: draw(np.concatenate([np.asarray(exclude, dtype=np.int64), ids]), number)


__all__ = ["RevisitFloor"]
