"""The prompt-status buckets: one rule, one set of keys and labels, used by the trainer's metrics, the report,
the Hub card and the simulator.

Knapsack RL (Li et al., 2025, section 5.2) follows prompts through five states by success rate; "unseen" is a
prompt with no evidence yet (NaN). Boundaries: p = 0, 0 < p <= 0.2, 0.2 < p < 0.8, 0.8 <= p < 1, p = 1.

>>> import numpy as np
>>> status_index(np.array([np.nan, 0.0, 0.2, 0.5, 0.8, 1.0])).tolist()
[0, 1, 2, 3, 4, 5]
>>> prompts_per_status([0.0, 0.1, 1.0, float("nan")])
{'unseen': 1, 'p0': 1, 'p0_0.2': 1, 'p0.2_0.8': 0, 'p0.8_1': 0, 'p1': 1}
"""

from __future__ import annotations

import numpy as np

#: Every bucket, in order of difficulty; ``STATUSES[status_index(p)]`` is the bucket of rate ``p``.
STATUSES: tuple[str, ...] = ("unseen", "p0", "p0_0.2", "p0.2_0.8", "p0.8_1", "p1")
#: The five buckets of a prompt with evidence (Knapsack RL's states).
SEEN_STATUSES: tuple[str, ...] = STATUSES[1:]
#: Human-readable labels (tables, plots, the model card).
STATUS_LABELS: dict[str, str] = {
    "unseen": "unseen",
    "p0": "p = 0",
    "p0_0.2": "0 < p ≤ 0.2",
    "p0.2_0.8": "0.2 < p < 0.8",
    "p0.8_1": "0.8 ≤ p < 1",
    "p1": "p = 1",
}


def status_index(success_rates) -> np.ndarray:
    """Index into :data:`STATUSES` of each rate (NaN = unseen)."""
    p = np.asarray(success_rates, dtype=np.float64)
    return np.select([np.isnan(p), p <= 0, p <= 0.2, p < 0.8, p < 1], [0, 1, 2, 3, 4], default=5)


def status_of(success_rate: float) -> str:
    """The bucket of one rate."""
    return STATUSES[int(status_index(success_rate))]


def prompts_per_status(success_rates) -> dict[str, int]:
    """Counts of prompts per bucket, every bucket present (zeros included)."""
    counts = np.bincount(status_index(np.ravel(success_rates)), minlength=len(STATUSES))
    return {name: int(n) for name, n in zip(STATUSES, counts, strict=True)}


__all__ = ["SEEN_STATUSES", "STATUSES", "STATUS_LABELS", "prompts_per_status", "status_index", "status_of"]
