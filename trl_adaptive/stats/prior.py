"""A prompt's prior: a pass rate worth w pseudo-completions, e.g. from a dataset's success-rate column (NumPy only).

A rate p0 in [0, 1] with weight w > 0 is kept as s0 = w p0 pseudo-successes among t0 = w pseudo-attempts. Each
estimator decides how the prior enters its reading (:mod:`.estimators`): the epoch rate and the posterior add s0, t0
to their counts at full weight, Est's decayed rate lets it decay per visit like real evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from ._checks import check_at_most, check_duplicates_agree, check_real
from .columns import Columns


def as_rates(values: np.ndarray | Sequence[float], length: int) -> np.ndarray:
    """``(length,)`` float64 rates (None becomes NaN); a ValueError for anything else."""
    try:
        rates = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("success_rates must hold numbers in [0, 1] (NaN or None where unknown).") from None
    if rates.shape != (length,):
        raise ValueError(
            f"success_rates must be a 1-D array with one rate per prompt id ({length}), got shape {rates.shape}."
        )
    return rates


class PriorCounts(Columns):
    """The prior's pseudo-counts s0, t0 per row (0, 0 without a prior).

    Example:
        >>> from trl_adaptive.stats.table import RowTable
        >>> prior = PriorCounts(RowTable(PriorCounts.columns))
        >>> prior.set(np.array([4, 5]), [0.25, float("nan")], weight=8).tolist()  # rows whose prior changed
        [0]
        >>> prior.state_dict()  # 5 had no rate: no prior, no row
        {'columns': {'prior_successes': [2.0], 'prior_attempts': [8.0]}}
    """

    name: ClassVar[str] = "prior"
    columns: ClassVar[tuple[str, ...]] = ("prior_successes", "prior_attempts")

    @property
    def count(self) -> int:
        """Number of rows that carry a prior."""
        return int(np.count_nonzero(self.table.column("prior_attempts") > 0))

    def has_prior(self, rows: np.ndarray) -> np.ndarray:
        """``(len(rows),)`` bool: the row carries a prior."""
        return self.table.column("prior_attempts")[rows] > 0

    def set(self, ids: np.ndarray, success_rates: np.ndarray | Sequence[float], weight: float) -> np.ndarray:
        """Set the prior of ``ids`` to (w p, w); a NaN rate or ``weight == 0`` removes it. Returns the changed rows.

        Ids that get a prior and have no row get one; setting the same prior again changes nothing (so it is not in
        the returned rows).

        Raises:
            ValueError: for a rate outside [0, 1] (naming the ids), a negative or non-finite weight, shapes that do
                not match, or an id repeated with different rates.
        """
        rates = as_rates(success_rates, len(ids))
        w = check_real("weight", weight)
        if w < 0.0:
            raise ValueError(
                f"weight={weight!r}: must be >= 0, the number of completions the prior is worth (0 for no prior)."
            )
        bad = ~np.isnan(rates) & ~((rates >= 0.0) & (rates <= 1.0))
        if np.any(bad):
            raise ValueError(
                f"success_rates must lie in [0, 1] (NaN where unknown), got {rates[bad][:3].tolist()} for prompt ids "
                f"{ids[bad][:3].tolist()}. Give pass rates as fractions (divide percentages by 100)."
            )
        check_duplicates_agree(ids, rates.tolist(), "prior success rates")
        has = ~np.isnan(rates) & (w > 0.0)
        prior_s = np.where(has, w * np.where(has, rates, 0.0), 0.0)
        prior_t = np.where(has, w, 0.0)
        rows = self.table.rows(ids)
        if np.any(has & (rows < 0)):
            self.table.add_rows(np.unique(ids[has & (rows < 0)]))
            rows = self.table.rows(ids)
        known = rows >= 0
        rows, prior_s, prior_t = rows[known], prior_s[known], prior_t[known]
        s0, t0 = self.table.column("prior_successes"), self.table.column("prior_attempts")
        changed = (s0[rows] != prior_s) | (t0[rows] != prior_t)
        rows = rows[changed]
        s0[rows], t0[rows] = prior_s[changed], prior_t[changed]
        return rows

    def check(self, arrays: Mapping[str, np.ndarray]) -> None:
        """s0 <= t0: a rate in [0, 1] times the weight."""
        s0, t0 = arrays["prior_successes"], arrays["prior_attempts"]
        check_at_most(self.table.ids, "prior_successes", s0, "prior_attempts", t0)
