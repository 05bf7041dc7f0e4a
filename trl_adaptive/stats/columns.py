"""What every part of the store shares: a set of columns of the row table, saved as a plain dict (NumPy only).

Each part (an estimator, or the prior) names the columns it owns; :class:`Columns` turns them into the JSON-able
state ``{"columns": {name: [...]}}`` and back, checking on the way in that each is a list of finite, non-negative
numbers with one entry per row (whole numbers where ``whole`` says so). A part adds its own invariants in
:meth:`Columns.check`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ._checks import DAMAGED
from .table import RowTable


def column_values(columns: Mapping[str, Any], name: str) -> np.ndarray:
    """The saved column ``name`` as a 1-D ``float64`` array; a ValueError naming it when it is not numbers."""
    try:
        return np.asarray(columns[name], dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"PromptStatistics state: column {name!r} must be a list of numbers.") from None


class Columns:
    """Base of the store's parts: the columns it owns in a shared :class:`~.table.RowTable`, and their state.

    Subclasses set ``columns`` (and ``whole``, the ones that hold counts), and may override :meth:`check`.
    """

    name: ClassVar[str] = ""
    columns: ClassVar[tuple[str, ...]] = ()
    whole: ClassVar[tuple[str, ...]] = ()  # written as integers, and must be whole numbers on load

    def __init__(self, table: RowTable) -> None:
        self.table = table

    @property
    def config(self) -> dict[str, float | None]:
        """The settings this part was built with (saved with the statistics); none by default."""
        return {}

    def bind(self, table: RowTable) -> Columns:
        """The same part, with the same settings and counters, on another table (a load builds the new one)."""
        clone = copy.copy(self)
        clone.table = table
        return clone

    def state_dict(self) -> dict[str, Any]:
        """``{"columns": {name: list}}`` over the rows in use: whole columns as ints, the others as floats."""
        out: dict[str, list[Any]] = {}
        for name in self.columns:
            col = self.table.column(name)
            out[name] = col.astype(np.int64).tolist() if name in self.whole else col.tolist()
        return {"columns": out}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Fill this part's columns from ``state["columns"]`` (which may hold other parts' columns too).

        Raises:
            ValueError: naming the column, for a column that is not a list of numbers, has another length than the
                table, holds negative or non-finite values, or a fraction in a whole column.
        """
        arrays = {name: column_values(state["columns"], name) for name in self.columns}
        for name, values in arrays.items():
            if len(values) != len(self.table):
                raise ValueError(
                    f"PromptStatistics state: column {name!r} has {len(values)} entries for {len(self.table)} prompt "
                    f"ids (one per id). {DAMAGED}"
                )
            if np.any(~np.isfinite(values) | (values < 0)):
                raise ValueError(f"PromptStatistics state: column {name!r} holds negative or non-finite counts.")
            if name in self.whole and np.any(values != np.round(values)):
                raise ValueError(f"PromptStatistics state: column {name!r} must hold whole numbers (it counts).")
        self.check(arrays)
        self.table.set_columns(arrays)

    def check(self, arrays: Mapping[str, np.ndarray]) -> None:
        """This part's own invariants on columns about to be loaded (each already finite and >= 0); the rows' prompt
        ids are ``self.table.ids``."""
