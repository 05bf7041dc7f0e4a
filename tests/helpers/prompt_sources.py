"""A prompt source with a known behaviour, registered for the tests that train with it (trainer, resume matrix).

:class:`LeastPickedPool` draws a pool beyond the sampler's prompts and picks the prompts it has generated for least
often (ties by ``ctx.rng``): its choice depends on its state, so a resume that lost the state picks other prompts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trl_adaptive.sampling.source import PromptSource, SourceBatch, SourceContext
from trl_adaptive.strategies import register_prompt_source


@register_prompt_source
class LeastPickedPool(PromptSource):
    """Pool = the offered U prompts and up to ``(pool_factor - 1) * U`` drawn; the U picked least often so far."""

    name = "test_least_picked"
    needs_pool = True

    def __init__(self, pool_factor: int = 2) -> None:
        self.pool_factor = pool_factor
        self.picked: dict[int, int] = {}  # prompt id -> steps it was generated for
        self._composed: list[tuple[list[int], list[int]]] = []  # (offered, composed) per step: what tests read

    def check(self, num_prompts: int, batch_prompts: int) -> None:
        if not isinstance(self.pool_factor, int) or not 1 <= self.pool_factor <= num_prompts:
            raise ValueError(f"pool_factor={self.pool_factor!r} must be an integer in [1, {num_prompts}].")

    def compose(self, ctx: SourceContext) -> SourceBatch:
        drawn = ctx.draw(ctx.offered, (self.pool_factor - 1) * len(ctx.offered))
        pool = np.concatenate([ctx.offered, drawn])
        times = np.array([self.picked.get(int(i), 0) for i in pool])
        chosen = pool[np.lexsort((ctx.rng.random(len(pool)), times))[: len(ctx.offered)]]
        self._composed.append((ctx.offered.tolist(), chosen.tolist()))
        return SourceBatch(chosen, pool, {"picked_more": np.setdiff1d(pool, chosen)})

    def end_step(self, prompt_ids, group_ids, rewards, success_threshold) -> None:
        for prompt_id in prompt_ids[np.unique(group_ids)].tolist():
            self.picked[prompt_id] = self.picked.get(prompt_id, 0) + 1

    def own_state(self) -> dict[str, Any]:
        return {"picked": {str(k): v for k, v in sorted(self.picked.items())}}

    def load_own_state(self, state) -> None:
        self.picked = {int(k): int(v) for k, v in state.get("picked", {}).items()}
