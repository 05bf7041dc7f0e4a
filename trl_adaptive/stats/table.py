"""The row table under the statistics store: prompt ids -> rows, and one ``float64`` array per column (NumPy only).

A dict ``prompt id -> row`` plus one preallocated array per column that doubles in capacity when full, so reading the
rows of a generation batch is a dict lookup per id and a vectorised gather (1024 ids among 17k prompts take about a
tenth of a millisecond). Integer-valued counts are stored as ``float64`` too (exact up to 2**53). Each row may carry
a fingerprint of its prompt's text (``""`` when unknown). The estimators own the meaning of the columns; the table
only stores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def as_ids(prompt_ids: np.ndarray | Sequence[int], name: str = "prompt_ids") -> np.ndarray:
    """``prompt_ids`` as a 1-D ``int64`` array; a ValueError naming ``name`` for anything but integers.

    Example:
        >>> as_ids([3, 1]).tolist()
        [3, 1]
    """
    ids = np.asarray(prompt_ids)
    if ids.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integer prompt ids, got shape {ids.shape}.")
    if ids.size == 0:
        return ids.astype(np.int64)
    if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"{name} must hold integer prompt ids (dtype {ids.dtype} given). Key prompts by a stable integer id, "
            "e.g. the dataset row index, not by text or hash."
        )
    if ids.dtype == np.uint64 and (ids > np.iinfo(np.int64).max).any():  # would wrap to negative ids
        raise ValueError(f"{name} holds ids above 2**63 - 1; prompt ids are int64: number your prompts below that.")
    return ids.astype(np.int64, copy=False)


class RowTable:
    """Per-prompt rows: an id index, named ``float64`` columns aligned by row, and one fingerprint per row.

    Args:
        columns: the column names, in the order the store writes them.

    Example:
        >>> table = RowTable(("attempts",))
        >>> rows = table.rows_adding(np.array([3, 7, 3]))  # new ids get new rows, all zero
        >>> rows.tolist(), len(table), 3 in table
        ([0, 1, 0], 2, True)
        >>> table.column("attempts")[rows[:2]] += 2.0  # a live view of the rows in use
        >>> table.gather(np.array([3, 5]))["attempts"].tolist()  # unknown ids read as zero
        [2.0, 0.0]
    """

    def __init__(self, columns: Sequence[str]) -> None:
        self.names = tuple(columns)
        self._index: dict[int, int] = {}
        self._ids = np.zeros(0, dtype=np.int64)
        self._cols = {name: np.zeros(0, dtype=np.float64) for name in self.names}
        self.fingerprints: list[str] = []  # one per row, "" when unknown

    @classmethod
    def with_rows(cls, columns: Sequence[str], ids: np.ndarray, fingerprints: Sequence[str]) -> RowTable:
        """A table holding exactly the unique ``ids`` (all columns zero) with their ``fingerprints``."""
        table = cls(columns)
        table.add_rows(np.asarray(ids, dtype=np.int64))
        table.fingerprints = list(fingerprints)
        return table

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, prompt_id: object) -> bool:
        return isinstance(prompt_id, (int, np.integer)) and int(prompt_id) in self._index

    @property
    def ids(self) -> np.ndarray:
        """``(rows,)`` the prompt id of each row, in row order (a copy)."""
        return self._ids[: len(self)].copy()

    def column(self, name: str) -> np.ndarray:
        """The column ``name`` over the rows in use: a view, so writing to it writes to the table."""
        return self._cols[name][: len(self)]

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, -1 for ids without a row."""
        get = self._index.get
        return np.fromiter((get(i, -1) for i in ids.tolist()), dtype=np.int64, count=len(ids))

    def rows_adding(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, adding rows for unknown ones."""
        rows = self.rows(ids)
        if np.any(rows < 0):
            self.add_rows(np.unique(ids[rows < 0]))
            rows = self.rows(ids)
        return rows

    def add_rows(self, new_ids: np.ndarray) -> None:
        """Append rows (all zero, no fingerprint) for ``new_ids``, which must be unique and unknown."""
        start, needed = len(self), len(self) + len(new_ids)
        if needed > len(self._ids):
            capacity = max(needed, 2 * len(self._ids), 1024)
            self._ids = np.resize(self._ids, capacity)
            for name, col in self._cols.items():
                grown = np.zeros(capacity, dtype=np.float64)
                grown[:start] = col[:start]
                self._cols[name] = grown
        self._ids[start:needed] = new_ids
        self._index.update(zip(new_ids.tolist(), range(start, needed), strict=True))
        self.fingerprints.extend([""] * len(new_ids))

    def gather(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Every column at ``ids`` (repeats allowed), 0 for ids without a row."""
        rows = self.rows(ids)
        known = rows >= 0
        safe = np.where(known, rows, 0)
        out = {}
        for name, col in self._cols.items():
            out[name] = np.where(known, col[safe], 0.0) if len(col) else np.zeros(len(ids))
        return out

    def set_columns(self, values: Mapping[str, np.ndarray]) -> None:
        """Overwrite whole columns with ``(rows,)`` arrays."""
        for name, array in values.items():
            self.column(name)[:] = array
