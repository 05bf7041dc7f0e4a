"""How stale the prompts of each generation batch are: batches since each prompt's previous completions.

The live, per-batch form of the run report's ``report.visit_staleness`` (same rule: a prompt counts when it got
completions in the batch, its first visit has no gap). The sampler shows about an epoch's batches; a prompt source
that keeps choosing the same prompts shows fewer, one that lets prompts wait shows more. Every rank keeps the same
clock (the batch's record is identical on every rank); the main process's is saved with each checkpoint, so a
resumed run logs what the uninterrupted one would.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class VisitClock:
    """Generation batches so far, and the batch of each prompt's latest completions."""

    def __init__(self) -> None:
        self.batches = 0
        self.last_visit: dict[int, int] = {}

    def visit(self, prompt_ids: np.ndarray, generated: np.ndarray) -> dict[str, float]:
        """Record one batch (``generated``: completions per prompt of ``prompt_ids``); its ``prompts/*`` metrics:
        ``revisited`` (prompts seen in an earlier batch) and, when there is one, the mean and max of
        ``batches_since_last_visit`` over them.

        Example:
            >>> clock = VisitClock()
            >>> clock.visit(np.array([0, 1]), np.array([2, 2]))
            {'prompts/revisited': 0.0}
            >>> clock.visit(np.array([0, 2]), np.array([2, 2]))["prompts/batches_since_last_visit_max"]
            1.0
        """
        gaps = []
        for prompt_id, count in zip(np.asarray(prompt_ids).tolist(), np.asarray(generated).tolist(), strict=True):
            if count > 0:
                if prompt_id in self.last_visit:
                    gaps.append(self.batches - self.last_visit[prompt_id])
                self.last_visit[prompt_id] = self.batches
        self.batches += 1
        metrics = {"prompts/revisited": float(len(gaps))}
        if gaps:
            metrics["prompts/batches_since_last_visit_mean"] = float(np.mean(gaps))
            metrics["prompts/batches_since_last_visit_max"] = float(max(gaps))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        ids = list(self.last_visit)
        return {"batches": self.batches, "prompt_ids": ids, "last_visit": [self.last_visit[i] for i in ids]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ids, batches = state["prompt_ids"], state["last_visit"]
        if len(ids) != len(batches):
            raise ValueError(f"visits: {len(ids)} prompt ids but {len(batches)} last visits.")
        self.batches = int(state["batches"])
        self.last_visit = {int(i): int(b) for i, b in zip(ids, batches, strict=True)}
