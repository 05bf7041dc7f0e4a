"""Per-prompt success statistics, keyed by a stable integer prompt id, that every allocator reads.

One store serves all strategies (DESIGN 2): Knapsack RL's last-epoch rate p_i = c_i / t_i, Reinforce-Ada Est's
decayed pass rate p~_i, and CERO's Beta(a_i, b_i) posterior. It is plain NumPy (no torch, no trl) and saves to a
plain JSON file atomically, so it survives checkpoint and resume (the Reinforce-Ada ``hanze`` branch loses its
statistics on resume; KnapsackRL collides prompts without an index; see ``shared/research/peer-implementations.md``).

Storage: a dict ``prompt id -> row`` plus one preallocated ``float64`` array per column that doubles in capacity when
full, so :meth:`PromptStatistics.batch` is a dict lookup per id and a vectorised gather (1024 ids among 17k prompts
take about a tenth of a millisecond).

Example:
    >>> import numpy as np
    >>> stats = PromptStatistics()
    >>> stats.update(np.array([7, 7, 7, 7, 9, 9]), np.array([1.0, 0.0, 0.0, 1.0, 0.0, float("nan")]))
    >>> stats.success_rates([7, 9, 11]).tolist()  # no epoch has ended yet
    [nan, nan, nan]
    >>> stats.end_epoch()
    >>> stats.success_rates([7, 9, 11]).tolist()
    [0.5, 0.0, nan]
    >>> round(float(stats.batch([7]).smoothed_rate[0]), 4)  # (1 + 2) / (17 + 4)
    0.1429
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .allocation.base import PromptBatchStats

FORMAT_NAME = "trl_adaptive.PromptStatistics"
FORMAT_VERSION = 1

# Per-prompt columns, one float64 array each. Integer-valued counts are stored as float64 too (exact up to 2**53).
_COUNT_COLUMNS = (
    "current_successes",  # c_i, t_i of the epoch in progress
    "current_attempts",
    "last_successes",  # c_i, t_i of the most recent completed epoch in which the prompt was attempted
    "last_attempts",
    "total_successes",  # cumulative over the whole run
    "total_attempts",
)
_DECAYED_COLUMNS = (
    "decayed_successes",  # Reinforce-Ada Est's n_pos, decayed by `decay` per visit
    "decayed_attempts",  # Reinforce-Ada Est's n_tot
)
_COLUMNS = _COUNT_COLUMNS + _DECAYED_COLUMNS
_CONFIG_FIELDS = ("success_threshold", "decay", "prior_alpha", "prior_beta")


def _as_ids(prompt_ids: np.ndarray | Sequence[int], name: str = "prompt_ids") -> np.ndarray:
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
    return ids.astype(np.int64, copy=False)


class PromptStatistics:
    """Success statistics per prompt id: last-epoch rate, Reinforce-Ada Est's decayed rate, CERO's Beta posterior.

    A completion is a *success* when its reward is ``>= success_threshold``; rewards may be any float. A NaN reward
    marks an unscorable completion: it is neither a success nor an attempt, and a prompt whose completions in one
    :meth:`update` call are all NaN is not visited by that call (its decayed counts do not decay).

    Per prompt i the store keeps

    - c_i, t_i for the epoch in progress, for the most recent *completed* epoch in which i was attempted ("last
      epoch"), and cumulated over the run;
    - Reinforce-Ada Est's decayed counts n_pos, n_tot: each :meth:`update` call that scores the prompt is one visit,
      ``n <- decay * n + new`` (official ``hanze`` branch: decay 0.9 per visit);
    - from these, on request: the last-epoch rate p_i = c_i / t_i (Knapsack RL), the smoothed rate
      p~_i = (alpha + n_pos) / (alpha + beta + n_tot) (Reinforce-Ada Est, never 0 or 1; 1 / 17 for an unseen prompt
      under the default prior), and the Beta(1 + successes, 1 + failures) posterior over cumulative counts (CERO).

    **Success-rate rule.** :meth:`success_rates` returns the rate of the most recent completed epoch in which the
    prompt was attempted, and NaN before any such epoch, even if the prompt was already scored in the epoch in
    progress. This is Knapsack RL's p_i (its first epoch is plain GRPO). A run shorter than one epoch therefore gives
    Knapsack-style allocators only NaN; that loses nothing, since such a run visits each prompt at most once. Call
    :meth:`end_epoch` at every epoch boundary, otherwise rates stay NaN. Est reads p~_i, which moves at every visit.

    Args:
        success_threshold: tau; a completion with reward r counts as a success when r >= tau.
        decay: gamma in (0, 1]; Est's per-visit decay of n_pos and n_tot (1.0 keeps plain cumulative counts).
        prior_alpha: alpha > 0 of Est's Beta prior (official: 1.0).
        prior_beta: beta > 0 of Est's Beta prior (official: 16.0, so an unseen prompt has p~ = 1 / 17).

    Example:
        >>> stats = PromptStatistics(success_threshold=0.5)
        >>> stats.update([3, 3, 4], [0.9, 0.2, 0.7])
        >>> b = stats.batch([3, 4, 5])
        >>> b.beta_a.tolist(), b.beta_b.tolist()
        ([2.0, 2.0, 1.0], [2.0, 1.0, 1.0])
        >>> stats.num_seen, len(stats), stats.epoch
        (0, 2, 0)
    """

    def __init__(
        self, success_threshold: float = 1.0, decay: float = 0.9, prior_alpha: float = 1.0, prior_beta: float = 16.0
    ) -> None:
        self.success_threshold = _check_finite("success_threshold", success_threshold)
        self.decay = _check_finite("decay", decay)
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(
                f"decay={decay!r}: must lie in (0, 1]; it multiplies the decayed counts at every visit "
                "(Reinforce-Ada Est uses 0.9; 1.0 keeps plain cumulative counts)."
            )
        self.prior_alpha = _check_finite("prior_alpha", prior_alpha)
        self.prior_beta = _check_finite("prior_beta", prior_beta)
        for field, value in (("prior_alpha", self.prior_alpha), ("prior_beta", self.prior_beta)):
            if value <= 0.0:
                raise ValueError(
                    f"{field}={value!r}: must be > 0 so that the smoothed rate is never 0 or 1 "
                    "(Reinforce-Ada Est uses prior_alpha=1, prior_beta=16)."
                )
        self.epoch = 0
        self._index: dict[int, int] = {}
        self._ids = np.zeros(0, dtype=np.int64)
        self._cols: dict[str, np.ndarray] = {name: np.zeros(0, dtype=np.float64) for name in _COLUMNS}

    # -- bookkeeping ------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of prompts with at least one scored completion."""
        return len(self._index)

    def __contains__(self, prompt_id: object) -> bool:
        return isinstance(prompt_id, (int, np.integer)) and int(prompt_id) in self._index

    def __repr__(self) -> str:
        return (
            f"PromptStatistics(success_threshold={self.success_threshold}, decay={self.decay}, "
            f"prior_alpha={self.prior_alpha}, prior_beta={self.prior_beta}; {len(self)} prompts, epoch {self.epoch})"
        )

    @property
    def config(self) -> dict[str, float]:
        """The four constructor arguments; saved with the statistics and checked on load."""
        return {field: getattr(self, field) for field in _CONFIG_FIELDS}

    @property
    def num_seen(self) -> int:
        """Number of prompts that have a success rate, i.e. were attempted in some completed epoch (not NaN)."""
        return int(np.count_nonzero(self._cols["last_attempts"][: len(self)] > 0))

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, -1 for ids never scored."""
        get = self._index.get
        return np.fromiter((get(i, -1) for i in ids.tolist()), dtype=np.int64, count=len(ids))

    def _add_rows(self, new_ids: np.ndarray) -> None:
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

    # -- writing ----------------------------------------------------------------------------------------------------
    def update(self, prompt_ids: np.ndarray | Sequence[int], rewards: np.ndarray | Sequence[float]) -> None:
        """Record one generation batch: one entry per completion, grouped here by prompt id.

        For each prompt with at least one scorable (non-NaN) reward, with s successes (reward >= tau) among t scored
        completions: c and t of the current epoch and the cumulative counts grow by s and t, and this call is one
        Est visit, n_pos <- gamma * n_pos + s, n_tot <- gamma * n_tot + t (decay first, then add). Call it once per
        generation batch: two calls for the same prompt decay its counts twice.

        Args:
            prompt_ids: ``(C,)`` integer prompt id of each completion.
            rewards: ``(C,)`` float reward of each completion; NaN for unscorable ones (not counted).

        Example:
            >>> s = PromptStatistics(decay=0.5)
            >>> s.update([1, 1], [1.0, 0.0]); s.update([1, 1], [1.0, 1.0])
            >>> s.batch([1]).smoothed_rate.round(4).tolist()  # (1 + 0.5 * 1 + 2) / (17 + 0.5 * 2 + 2)
            [0.175]
        """
        ids = _as_ids(prompt_ids)
        r = np.asarray(rewards, dtype=np.float64)
        if r.ndim != 1 or len(r) != len(ids):
            raise ValueError(
                f"prompt_ids and rewards must be 1-D arrays of equal length (one entry per completion), got shapes "
                f"{ids.shape} and {r.shape}."
            )
        scored = ~np.isnan(r)
        ids, r = ids[scored], r[scored]
        if len(ids) == 0:
            return
        unique, inverse = np.unique(ids, return_inverse=True)
        attempts = np.bincount(inverse, minlength=len(unique)).astype(np.float64)
        hits = (r >= self.success_threshold).astype(np.float64)
        successes = np.bincount(inverse, weights=hits, minlength=len(unique))
        rows = self._rows(unique)
        if np.any(rows < 0):
            self._add_rows(unique[rows < 0])
            rows = self._rows(unique)
        cols = self._cols
        for prefix in ("current", "total"):
            cols[f"{prefix}_successes"][rows] += successes
            cols[f"{prefix}_attempts"][rows] += attempts
        cols["decayed_successes"][rows] = self.decay * cols["decayed_successes"][rows] + successes
        cols["decayed_attempts"][rows] = self.decay * cols["decayed_attempts"][rows] + attempts

    def end_epoch(self) -> None:
        """Close the epoch: prompts attempted in it get it as their "last epoch"; current counts reset to 0.

        Prompts not attempted in the closing epoch keep their older last-epoch rate. Increments :attr:`epoch`.
        """
        n = len(self)
        cols = self._cols
        attempted = cols["current_attempts"][:n] > 0
        for kind in ("successes", "attempts"):
            cols[f"last_{kind}"][:n][attempted] = cols[f"current_{kind}"][:n][attempted]
            cols[f"current_{kind}"][:n] = 0.0
        self.epoch += 1

    # -- reading ----------------------------------------------------------------------------------------------------
    def _gather(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        rows = self._rows(ids)
        known = rows >= 0
        safe = np.where(known, rows, 0)
        out = {}
        for name, col in self._cols.items():
            out[name] = np.where(known, col[safe], 0.0) if len(col) else np.zeros(len(ids))
        return out

    def success_rates(self, prompt_ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """Last-epoch success rate p_i = c_i / t_i per id (Knapsack RL), NaN before any completed epoch with attempts.

        Returns:
            ``(M,)`` float64, aligned with ``prompt_ids``; unknown ids give NaN.
        """
        g = self._gather(_as_ids(prompt_ids))
        t = g["last_attempts"]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(t > 0, g["last_successes"] / t, np.nan)

    def batch(self, prompt_ids: np.ndarray | Sequence[int]) -> PromptBatchStats:
        """The statistics the allocators read, for the M prompts of one generation batch (ids may repeat).

        - ``success_rate``: as :meth:`success_rates`.
        - ``attempts``, ``successes``: cumulative counts.
        - ``smoothed_rate``: p~_i = (alpha + n_pos) / (alpha + beta + n_tot), Reinforce-Ada Est.
        - ``beta_a``, ``beta_b``: 1 + cumulative successes, 1 + cumulative failures (CERO's Beta(1, 1) start).

        Unknown ids get zero counts: NaN rate, p~ = alpha / (alpha + beta), Beta(1, 1).
        """
        ids = _as_ids(prompt_ids)
        g = self._gather(ids)
        t_last = g["last_attempts"]
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(t_last > 0, g["last_successes"] / t_last, np.nan)
        c, t = g["total_successes"], g["total_attempts"]
        alpha, beta = self.prior_alpha, self.prior_beta
        return PromptBatchStats(
            prompt_ids=ids.copy(),
            success_rate=rate,
            attempts=t,
            successes=c,
            smoothed_rate=(alpha + g["decayed_successes"]) / (alpha + beta + g["decayed_attempts"]),
            beta_a=1.0 + c,
            beta_b=1.0 + t - c,
        )

    # -- persistence ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable snapshot: format name and version, config, epoch, ids and one list per column.

        Counts are written as integers; decayed counts as floats (``json`` writes floats with ``repr``, so a
        round trip is exact).
        """
        n = len(self)
        columns: dict[str, list[Any]] = {}
        for name in _COLUMNS:
            col = self._cols[name][:n]
            columns[name] = col.astype(np.int64).tolist() if name in _COUNT_COLUMNS else col.tolist()
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "config": self.config,
            "epoch": self.epoch,
            "prompt_ids": self._ids[:n].tolist(),
            "columns": columns,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with ``state`` (from :meth:`state_dict`).

        Raises:
            ValueError: when the format or version differs, when the saved config (threshold, decay, prior) differs
                from this store's (the counts would mean something else), or when the arrays are inconsistent.
        """
        if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
            raise ValueError(f"Not a PromptStatistics state: expected format {FORMAT_NAME!r}.")
        if state.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"PromptStatistics state has format version {state.get('version')!r}; this code reads version "
                f"{FORMAT_VERSION}."
            )
        saved = state.get("config", {})
        diff = [
            f"{k}: saved {saved.get(k)!r}, configured {getattr(self, k)!r}"
            for k in _CONFIG_FIELDS
            if saved.get(k) != getattr(self, k)
        ]
        if diff:
            raise ValueError(
                "PromptStatistics config mismatch (" + "; ".join(diff) + "). Construct the store with the saved "
                "values, or use PromptStatistics.load(path) to take them from the file."
            )
        raw_ids = state["prompt_ids"]
        if not isinstance(raw_ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw_ids):
            raise ValueError("PromptStatistics state: prompt_ids must be a list of integers.")
        ids = np.asarray(raw_ids, dtype=np.int64).reshape(-1)
        if len(np.unique(ids)) != len(ids):
            raise ValueError("PromptStatistics state has duplicate prompt ids.")
        columns = state["columns"]
        missing = [name for name in _COLUMNS if name not in columns]
        if missing:
            raise ValueError(f"PromptStatistics state lacks columns {missing}.")
        arrays = {name: np.asarray(columns[name], dtype=np.float64).reshape(-1) for name in _COLUMNS}
        if any(len(a) != len(ids) for a in arrays.values()):
            raise ValueError("PromptStatistics state columns and prompt_ids differ in length.")
        if any(np.any(~np.isfinite(a) | (a < 0)) for a in arrays.values()):
            raise ValueError("PromptStatistics state holds negative or non-finite counts.")
        self.epoch = int(state["epoch"])
        self._index = dict(zip(ids.tolist(), range(len(ids)), strict=True))
        self._ids = ids.copy()
        self._cols = arrays

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` as JSON to ``path`` atomically.

        The JSON goes to a temporary file in the same directory, is flushed and fsynced, then ``os.replace``-d over
        ``path``: a crash leaves either the old file or the new one, never a partial file, and no temporary file.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.state_dict(), f, allow_nan=False, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str], **expected_config: float) -> PromptStatistics:
        """Read a store written by :meth:`save`; its config comes from the file.

        Args:
            path: the JSON file.
            **expected_config: optional ``success_threshold`` / ``decay`` / ``prior_alpha`` / ``prior_beta`` this run
                is configured with; each given value must equal the saved one, or a ValueError names the field.

        Example:
            >>> import tempfile, os
            >>> s = PromptStatistics(); s.update([0, 0], [1.0, 0.0])
            >>> p = os.path.join(tempfile.mkdtemp(), "prompt_stats.json"); s.save(p)
            >>> PromptStatistics.load(p, decay=0.9).batch([0]).attempts.tolist()
            [2.0]
        """
        unknown = sorted(set(expected_config) - set(_CONFIG_FIELDS))
        if unknown:
            raise TypeError(f"Unknown PromptStatistics config fields {unknown}; expected some of {_CONFIG_FIELDS}.")
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
        if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
            raise ValueError(f"{path} is not a PromptStatistics file (expected format {FORMAT_NAME!r}).")
        saved = state.get("config") or {}
        if set(saved) != set(_CONFIG_FIELDS):
            raise ValueError(f"{path}: config must hold exactly {_CONFIG_FIELDS}, got {sorted(saved)}.")
        for field, value in expected_config.items():
            if saved[field] != value:
                raise ValueError(
                    f"{path} was saved with {field}={saved[field]!r} but this run uses {field}={value!r}; the "
                    "counts would mean something else. Use the saved value or start fresh statistics."
                )
        store = cls(**saved)
        store.load_state_dict(state)
        return store


def _check_finite(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{field}={value!r}: must be a real number.")
    if not math.isfinite(float(value)):
        raise ValueError(f"{field}={value!r}: must be finite.")
    return float(value)


__all__ = ["FORMAT_VERSION", "PromptStatistics"]
