"""Each prompt's expected completion length in generated tokens, with forgetting (NumPy only).

Users pay for generated tokens, not completions: a token budget (``generation_token_budget``) and token-balanced
dispatch read this estimate. Per prompt the store keeps a decayed sum of completion lengths L and a decayed count W
of the completions measured; each visit (an ``update`` call that measured the prompt) first multiplies both by
gamma = ``length_decay``, then adds the batch's. The estimate is L / W: a weighted mean in which a completion measured
k visits ago weighs gamma^k, so it follows a model whose answers grow or shrink during training.

A prompt never measured reads the population's estimate, the mean of the measured prompts' estimates (an unseen
prompt is taken to be a typical one); with nothing measured at all it reads NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from ._checks import DAMAGED, check_decay
from .columns import Columns
from .table import RowTable


def as_completion_tokens(completion_tokens: object, size: int) -> np.ndarray:
    """``(size,)`` float64 generated tokens per completion (NaN where unknown; all NaN for None), checked."""
    if completion_tokens is None:
        return np.full(size, np.nan)
    tokens = np.asarray(completion_tokens, dtype=np.float64)
    if tokens.shape != (size,):
        raise ValueError(f"completion_tokens must hold one length per completion ({size}), got shape {tokens.shape}.")
    if np.any(tokens < 0) or np.any(np.isinf(tokens)):
        raise ValueError("completion_tokens must be finite numbers of tokens >= 0 (NaN where unknown).")
    return tokens


class CompletionLength(Columns):
    """Expected generated tokens per completion of each prompt, a mean decayed per visit (``PromptBatchStats``'s
    ``expected_tokens``).

    Args:
        table: the row table.
        length_decay: gamma in (0, 1]; 1.0 keeps the plain mean of every completion measured.

    Example:
        >>> length = CompletionLength(RowTable(CompletionLength.columns), length_decay=0.5)
        >>> rows = length.table.rows_adding(np.array([1, 2]))
        >>> length.observe(rows[:1], np.array([30.0]), np.array([2.0]))  # prompt 1: two completions, 30 tokens
        >>> length.observe(rows[:1], np.array([60.0]), np.array([2.0]))  # (0.5 * 30 + 60) / (0.5 * 2 + 2)
        >>> length.read(length.table.gather(np.array([1, 2, 3]))).tolist()  # 2 and 3 read the population's
        [25.0, 25.0, 25.0]
    """

    name: ClassVar[str] = "completion_length"
    fields: ClassVar[tuple[str, ...]] = ("expected_tokens",)  # of PromptBatchStats
    columns: ClassVar[tuple[str, ...]] = (
        "length_tokens",  # L: decayed sum of generated tokens
        "length_weight",  # W: decayed number of completions measured
    )

    def __init__(self, table: RowTable, length_decay: float = 0.9) -> None:
        super().__init__(table)
        self.decay = check_decay("length_decay", length_decay, "a prompt's measured completion lengths", "the default")

    @property
    def config(self) -> dict[str, float | None]:
        return {"length_decay": self.decay}

    def observe(self, rows: np.ndarray, tokens: np.ndarray, measured: np.ndarray) -> None:
        """One visit of the ``rows`` with ``measured > 0`` completions of known length, ``tokens`` in total."""
        visited = measured > 0
        rows = rows[visited]
        total, weight = self.table.column("length_tokens"), self.table.column("length_weight")
        total[rows] = self.decay * total[rows] + tokens[visited]
        weight[rows] = self.decay * weight[rows] + measured[visited]

    def population(self) -> float:
        """The mean of the measured prompts' estimates; NaN when no prompt has been measured."""
        weight = self.table.column("length_weight")
        measured = weight > 0
        if not measured.any():
            return float("nan")
        return float(np.mean(self.table.column("length_tokens")[measured] / weight[measured]))

    def read(self, g: Mapping[str, np.ndarray]) -> np.ndarray:
        """L / W for measured rows, the population's estimate for the others (NaN when nothing is measured)."""
        weight = g["length_weight"]
        own = g["length_tokens"] / np.where(weight > 0, weight, 1.0)
        if (weight > 0).all():  # the population's mean scans every row: only when a prompt needs it
            return own
        return np.where(weight > 0, own, self.population())

    def check(self, arrays: Mapping[str, np.ndarray]) -> None:
        """A row holds tokens only if it measured completions (W = 0 with L > 0 is no mean)."""
        bad = np.flatnonzero((arrays["length_weight"] == 0) & (arrays["length_tokens"] > 0))
        if len(bad):
            raise ValueError(
                f"PromptStatistics state: length_tokens > 0 with length_weight = 0 for prompt ids "
                f"{self.table.ids[bad][:5].tolist()} (tokens of no completion). {DAMAGED}"
            )


__all__ = ["CompletionLength", "as_completion_tokens"]
