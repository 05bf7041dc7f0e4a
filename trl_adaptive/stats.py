"""Per-prompt success statistics, keyed by a stable integer prompt id, that every allocator reads.

One store serves all strategies (DESIGN 2): Knapsack RL's last-epoch rate p_i = c_i / t_i, Reinforce-Ada Est's
decayed pass rate p~_i, and the Beta(a_i, b_i) posterior that CERO and ``bayes_knapsack`` read (one posterior, with
optional forgetting, ``posterior_half_life``, and a weak prior, ``posterior_prior_a`` / ``posterior_prior_b``). It is
plain NumPy (no torch, no trl) and saves to a plain JSON file atomically, so it survives checkpoint and resume (the
Reinforce-Ada ``hanze`` branch loses its statistics on resume; KnapsackRL collides prompts without an index; see
``shared/research/peer-implementations.md``).

Besides the counts, each prompt may carry a *prior* (pseudo-completions from a dataset's pass-rate column,
:meth:`PromptStatistics.set_prior`) and a *fingerprint* of its text (:func:`prompt_fingerprint`,
:meth:`PromptStatistics.set_fingerprints`), so statistics resumed or imported from another run are never applied to
other prompts that reuse the same ids. :meth:`PromptStatistics.to_dataset` / :meth:`PromptStatistics.from_dataset`
export and import the whole store as a ``datasets.Dataset`` (a warm start for the next run).

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
    >>> stats.set_prior([11], [0.25], weight=8)  # a pass rate from the dataset, worth 8 completions
    >>> stats.success_rates([11]).tolist()
    [0.25]
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._io import read_json, write_json_atomic
from .allocation.base import PromptBatchStats

if TYPE_CHECKING:  # imported lazily at run time: stats.py must import without it
    import datasets

FORMAT_NAME = "trl_adaptive.PromptStatistics"
FORMAT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)  # version 1: no priors, no fingerprints; versions 1-2: no posterior columns

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
    "decayed_successes",  # Reinforce-Ada Est's n_pos, decayed by `decay` per visit (real evidence only)
    "decayed_attempts",  # Reinforce-Ada Est's n_tot
)
_PRIOR_COLUMNS = (
    "prior_successes",  # w * p of the prior set by set_prior, 0 without one
    "prior_attempts",  # w
    "prior_visits",  # v, visits since the prior was set; Est weighs the prior by decay ** v
)
_POSTERIOR_COLUMNS = (
    "posterior_successes",  # S, the posterior's successes: cumulative, or decayed by 2^(-1/h) per update call
    "posterior_failures",  # F, the posterior's failures, likewise
)
_V1_COLUMNS = _COUNT_COLUMNS + _DECAYED_COLUMNS
_V2_COLUMNS = _V1_COLUMNS + _PRIOR_COLUMNS
_COLUMNS = _V2_COLUMNS + _POSTERIOR_COLUMNS
_INT_COLUMNS = (*_COUNT_COLUMNS, "prior_visits")  # written as integers by state_dict / to_dataset
_V2_CONFIG_FIELDS = ("success_threshold", "decay", "prior_alpha", "prior_beta")
_POSTERIOR_CONFIG_FIELDS = ("posterior_half_life", "posterior_prior_a", "posterior_prior_b")
_CONFIG_FIELDS = (*_V2_CONFIG_FIELDS, *_POSTERIOR_CONFIG_FIELDS)  # versions 1-2 files carry the first four only

# to_dataset / from_dataset
_ID_COLUMN = "prompt_id"
_FINGERPRINT_COLUMN = "prompt_fingerprint"
_RATE_COLUMN = "success_rate"


def stable_prompt_ids(values: Sequence[Any], column: str = "prompt_id") -> np.ndarray:
    """``(N,)`` int64 store ids of a dataset's prompt-id column: integers as they are, strings mapped by SHA-256.

    String ids (hashes, UUIDs, names) become the first 63 bits of the SHA-256 of their UTF-8 bytes: the same in every
    process, machine and Python version. Two distinct strings collide with probability about 5e-8 among 10**6 ids.

    Raises:
        ValueError / TypeError: naming ``column`` for a missing id or a mix of kinds.

    Example:
        >>> stable_prompt_ids([3, 5]).tolist()
        [3, 5]
        >>> stable_prompt_ids(["a3f9c2"]).tolist()
        [2513115939235962885]
    """
    values = list(values)
    missing = [i for i, v in enumerate(values) if v is None]
    if missing:
        raise ValueError(
            f"train_dataset column {column!r} has no id at rows {missing[:5]}: every row needs a prompt id (an "
            "integer or a string). Fill them in, or drop the column to let the trainer number the rows."
        )
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values):
        return np.asarray(values, dtype=np.int64).reshape(len(values))
    if all(isinstance(v, str) for v in values):
        digests = (hashlib.sha256(v.encode("utf-8")).digest()[:8] for v in values)
        return np.fromiter((int.from_bytes(d, "big") >> 1 for d in digests), np.int64, len(values))
    raise TypeError(
        f"train_dataset column {column!r} must hold prompt ids, all integers or all strings, got values like "
        f"{values[0]!r} ({type(values[0]).__name__}). Convert them, or set prompt_id_column to another column (or to "
        "a name the dataset does not have, to let the trainer number the rows)."
    )


def prompt_fingerprint(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """A 16-hex-character fingerprint of a prompt's text: the start of SHA-256 over its canonical JSON.

    The canonical JSON is ``json.dumps(prompt, sort_keys=True, ensure_ascii=False, separators=(",", ":"))`` encoded
    as UTF-8, so the fingerprint is the same in every process, machine and Python version (no ``hash()``), and does
    not depend on the key order of the message dicts. Everything else counts: whitespace, Unicode normalisation, the
    system message, extra keys of a message (also ones set to ``None``), and a plain string differs from the same
    text wrapped in a message list.

    Args:
        prompt: a plain-text prompt, or a conversational prompt: a list of ``{"role": ..., "content": ...}`` dicts
            (TRL's two prompt formats).

    Returns:
        16 lowercase hex characters (64 bits: a collision among 10**6 prompts has probability about 3e-8).

    Example:
        >>> prompt_fingerprint("What is 2 + 2?")
        'fb3eb78712d637f5'
        >>> a = [{"role": "user", "content": "What is 2 + 2?"}]
        >>> prompt_fingerprint(a) == prompt_fingerprint([{"content": "What is 2 + 2?", "role": "user"}])
        True
    """
    if isinstance(prompt, str):
        canonical: Any = str(prompt)
    elif isinstance(prompt, (list, tuple)) and all(isinstance(message, Mapping) for message in prompt):
        canonical = [dict(message) for message in prompt]
    else:
        raise TypeError(
            f"prompt must be a string or a list of {{'role': ..., 'content': ...}} dicts (TRL's prompt formats), got "
            f"{type(prompt).__name__}."
        )
    try:
        text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise TypeError(f"prompt cannot be written as JSON, so it has no fingerprint: {error}") from None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


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


def _as_rates(values: np.ndarray | Sequence[float], length: int) -> np.ndarray:
    try:
        rates = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("success_rates must hold numbers in [0, 1] (NaN or None where unknown).") from None
    if rates.shape != (length,):
        raise ValueError(
            f"success_rates must be a 1-D array with one rate per prompt id ({length}), got shape {rates.shape}."
        )
    return rates


def _as_fingerprints(fingerprints: Sequence[str], length: int) -> list[str]:
    values = list(fingerprints)
    if len(values) != length:
        raise ValueError(f"fingerprints holds {len(values)} entries but prompt_ids holds {length}; give one each.")
    for value in values:
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"fingerprints must be non-empty strings, got {value!r}; compute them with prompt_fingerprint(prompt)."
            )
    return [str(value) for value in values]


def _check_duplicates_agree(ids: np.ndarray, values: Sequence[Any], what: str) -> None:
    """An id may repeat only with the same value (NaN equal to NaN)."""
    if len(np.unique(ids)) == len(ids):
        return
    first: dict[int, Any] = {}
    for i, value in zip(ids.tolist(), values, strict=True):
        previous = first.setdefault(i, value)
        if previous != value and not (previous != previous and value != value):
            raise ValueError(
                f"prompt id {i} is given two different {what} ({previous!r} and {value!r}); give each prompt id once."
            )


def _require(state: Mapping[str, Any], key: str) -> Any:
    if key not in state:
        raise ValueError(
            f"PromptStatistics state lacks the key {key!r}: it is truncated or was not written by "
            "PromptStatistics.state_dict(). Use an intact file (e.g. an earlier checkpoint) or start fresh statistics."
        )
    return state[key]


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
    - an optional prior (:meth:`set_prior`): a pass rate p0 worth w pseudo-completions, kept as s0 = w p0, t0 = w,
      and v, the number of visits since it was set;
    - an optional fingerprint of the prompt text (:meth:`set_fingerprints`), to refuse statistics of other prompts;
    - the posterior's evidence S_i, F_i: successes and failures, cumulative with ``posterior_half_life=None`` (the
      default), otherwise forgotten at a half-life of h steps: every :meth:`update` call (one generation batch, one
      step) multiplies S and F of EVERY prompt by 2^(-1/h), visited or not, then adds the call's own counts, so a
      completion scored k steps ago weighs 2^(-k/h);
    - from these, on request: the last-epoch rate p_i (Knapsack RL), the smoothed rate p~_i (Reinforce-Ada Est,
      never 0 or 1; 1 / 17 for an unseen prompt without prior under the default alpha, beta), and the Beta posterior
      Beta(a0 + s0 + S_i, b0 + (t0 - s0) + F_i) that CERO and ``bayes_knapsack`` read (a0 = b0 = 1 by default).

    **How the prior combines with the evidence**, per reading (s0 = t0 = 0 without a prior):

    ==================================  ==============================================================================
    reading (allocator)                 value
    ==================================  ==============================================================================
    ``success_rate`` (Knapsack RL)      (c_last + s0) / (t_last + t0); NaN when t_last + t0 = 0. With a prior the first
                                        epoch is already adaptive; later the prior is blended with the last epoch's
                                        counts at its full weight w, every epoch: it does not fade.
    ``smoothed_rate`` (Est)             (alpha + gamma^v s0 + n_pos) / (alpha + beta + gamma^v t0 + n_tot): the prior
                                        seeds the decayed counts and decays per visit like real evidence.
    ``beta_a``, ``beta_b`` (CERO,       a0 + s0 + S, b0 + (t0 - s0) + F: the weak Beta(a0, b0) prior (default
    ``bayes_knapsack``)                 Beta(1, 1)), the prior's pseudo-counts (they never fade) and the posterior's
                                        evidence S, F (cumulative counts unless ``posterior_half_life`` is set;
                                        forgetting pulls the posterior back to Beta(a0 + s0, b0 + t0 - s0)).
    ``attempts``, ``successes``         real cumulative counts only; ``prior_attempts`` carries t0, so a prompt with
                                        a prior is not "unseen" (Est's ``unseen_weight``).
    ==================================  ==============================================================================

    **Success-rate rule.** Without a prior, :meth:`success_rates` returns the rate of the most recent completed epoch
    in which the prompt was attempted, and NaN before any such epoch, even if the prompt was already scored in the
    epoch in progress. This is Knapsack RL's p_i (its first epoch is plain GRPO). A run shorter than one epoch
    therefore gives Knapsack-style allocators only NaN for prompts without a prior; that loses nothing, since such a
    run visits each prompt at most once. Call :meth:`end_epoch` at every epoch boundary, otherwise rates stay NaN (or
    the prior). Est reads p~_i, which moves at every visit.

    Args:
        success_threshold: tau; a completion with reward r counts as a success when r >= tau.
        decay: gamma in (0, 1]; Est's per-visit decay of n_pos and n_tot (1.0 keeps plain cumulative counts).
        prior_alpha: alpha > 0 of Est's Beta prior (official: 1.0).
        prior_beta: beta > 0 of Est's Beta prior (official: 16.0, so an unseen prompt has p~ = 1 / 17).
        posterior_half_life: h > 0, the half-life of the posterior's evidence in steps (:meth:`update` calls), or
            None (default) to never forget: then Beta(a, b) is exactly Beta(1 + s0 + c, 1 + t0 - s0 + t - c) over
            the cumulative counts (with the default weak prior), as CERO has always read it. Forgetting lets old
            evidence fade as the policy changes; docs/statistics.md reports what it did in the simulator.
        posterior_prior_a, posterior_prior_b: a0, b0 > 0, the weak Beta prior of every prompt's posterior, to which
            the prior column's pseudo-counts and the evidence are added (default 1, 1: CERO's Beta(1, 1); 0.5, 0.5
            is Jeffreys' prior, which puts more mass near 0 and 1, see docs/statistics.md).

    Example:
        >>> stats = PromptStatistics(success_threshold=0.5)
        >>> stats.update([3, 3, 4], [0.9, 0.2, 0.7])
        >>> b = stats.batch([3, 4, 5])
        >>> b.beta_a.tolist(), b.beta_b.tolist()
        ([2.0, 2.0, 1.0], [2.0, 1.0, 1.0])
        >>> stats.num_seen, len(stats), stats.epoch
        (0, 2, 0)
        >>> stats.set_prior([5], [0.5], weight=4)  # prompt 5: Beta(1 + 2, 1 + 2), rate 0.5 before any epoch
        >>> b = stats.batch([5])
        >>> b.beta_a.tolist(), b.beta_b.tolist(), b.success_rate.tolist(), b.attempts.tolist()
        ([3.0], [3.0], [0.5], [0.0])
    """

    def __init__(
        self,
        success_threshold: float = 1.0,
        decay: float = 0.9,
        prior_alpha: float = 1.0,
        prior_beta: float = 16.0,
        posterior_half_life: float | None = None,
        posterior_prior_a: float = 1.0,
        posterior_prior_b: float = 1.0,
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
        self.posterior_half_life = _check_half_life(posterior_half_life)
        self.posterior_prior_a = _check_finite("posterior_prior_a", posterior_prior_a)
        self.posterior_prior_b = _check_finite("posterior_prior_b", posterior_prior_b)
        for field, value in (
            ("posterior_prior_a", self.posterior_prior_a),
            ("posterior_prior_b", self.posterior_prior_b),
        ):
            if value <= 0.0:
                raise ValueError(
                    f"{field}={value!r}: must be > 0, a Beta prior's pseudo-count (1.0: uniform, CERO's default; "
                    "0.5: Jeffreys)."
                )
        self.epoch = 0
        self._index: dict[int, int] = {}
        self._ids = np.zeros(0, dtype=np.int64)
        self._cols: dict[str, np.ndarray] = {name: np.zeros(0, dtype=np.float64) for name in _COLUMNS}
        self._fingerprints: list[str] = []  # one per row, "" when unknown

    # -- bookkeeping ------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of prompts with a row: scored at least once, given a prior, or given a fingerprint."""
        return len(self._index)

    def __contains__(self, prompt_id: object) -> bool:
        return isinstance(prompt_id, (int, np.integer)) and int(prompt_id) in self._index

    def __repr__(self) -> str:
        return (
            f"PromptStatistics(success_threshold={self.success_threshold}, decay={self.decay}, "
            f"prior_alpha={self.prior_alpha}, prior_beta={self.prior_beta}, "
            f"posterior_half_life={self.posterior_half_life}, posterior_prior_a={self.posterior_prior_a}, "
            f"posterior_prior_b={self.posterior_prior_b}; {len(self)} prompts, epoch {self.epoch})"
        )

    @property
    def config(self) -> dict[str, float | None]:
        """The seven constructor arguments; saved with the statistics and checked on load."""
        return {field: getattr(self, field) for field in _CONFIG_FIELDS}

    @property
    def posterior_decay(self) -> float:
        """2^(-1/h), the factor the posterior's evidence is multiplied by at every :meth:`update` call (1.0: never)."""
        return 1.0 if self.posterior_half_life is None else 2.0 ** (-1.0 / self.posterior_half_life)

    @property
    def num_seen(self) -> int:
        """Number of prompts attempted in some completed epoch (real evidence; priors do not count here)."""
        return int(np.count_nonzero(self._cols["last_attempts"][: len(self)] > 0))

    @property
    def num_with_prior(self) -> int:
        """Number of prompts that carry a prior (:meth:`set_prior` with a finite rate and weight > 0)."""
        return int(np.count_nonzero(self._cols["prior_attempts"][: len(self)] > 0))

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, -1 for ids without a row."""
        get = self._index.get
        return np.fromiter((get(i, -1) for i in ids.tolist()), dtype=np.int64, count=len(ids))

    def _add_rows(self, new_ids: np.ndarray) -> None:
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
        self._fingerprints.extend([""] * len(new_ids))

    def _rows_adding(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, adding rows for unknown ones."""
        rows = self._rows(ids)
        if np.any(rows < 0):
            self._add_rows(np.unique(ids[rows < 0]))
            rows = self._rows(ids)
        return rows

    # -- writing ----------------------------------------------------------------------------------------------------
    def update(self, prompt_ids: np.ndarray | Sequence[int], rewards: np.ndarray | Sequence[float]) -> None:
        """Record one generation batch: one entry per completion, grouped here by prompt id.

        For each prompt with at least one scorable (non-NaN) reward, with s successes (reward >= tau) among t scored
        completions: c and t of the current epoch and the cumulative counts grow by s and t, and this call is one
        Est visit, n_pos <- gamma * n_pos + s, n_tot <- gamma * n_tot + t (decay first, then add), and a prior's visit
        count v grows by one. Call it once per generation batch: two calls for the same prompt decay its counts twice.

        Each call is also one step of the posterior's clock: with ``posterior_half_life`` h, the posterior evidence
        S, F of every prompt is multiplied by 2^(-1/h) (visited or not; also when nothing is scored), then S grows by
        s and F by t - s. Without a half-life S and F are the cumulative counts. A step whose completions come in
        rounds (a pilot, then the rest) should still make one call with all of them; the allocator of a later round
        reads the earlier rounds through ``bayes_knapsack.absorb`` instead.

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
        self._forget()
        scored = ~np.isnan(r)
        ids, r = ids[scored], r[scored]
        if len(ids) == 0:
            return
        unique, inverse = np.unique(ids, return_inverse=True)
        attempts = np.bincount(inverse, minlength=len(unique)).astype(np.float64)
        hits = (r >= self.success_threshold).astype(np.float64)
        successes = np.bincount(inverse, weights=hits, minlength=len(unique))
        rows = self._rows_adding(unique)
        cols = self._cols
        for prefix in ("current", "total"):
            cols[f"{prefix}_successes"][rows] += successes
            cols[f"{prefix}_attempts"][rows] += attempts
        cols["decayed_successes"][rows] = self.decay * cols["decayed_successes"][rows] + successes
        cols["decayed_attempts"][rows] = self.decay * cols["decayed_attempts"][rows] + attempts
        cols["prior_visits"][rows[cols["prior_attempts"][rows] > 0]] += 1.0
        cols["posterior_successes"][rows] += successes
        cols["posterior_failures"][rows] += attempts - successes

    def _forget(self) -> None:
        """One step of the posterior's clock: S, F <- 2^(-1/h) S, 2^(-1/h) F for every row (nothing without h)."""
        if self.posterior_half_life is None:
            return
        factor, n = self.posterior_decay, len(self)
        for name in _POSTERIOR_COLUMNS:
            self._cols[name][:n] *= factor

    def end_epoch(self) -> None:
        """Close the epoch: prompts attempted in it get it as their "last epoch"; current counts reset to 0.

        Prompts not attempted in the closing epoch keep their older last-epoch rate. Priors are left untouched.
        Increments :attr:`epoch`.
        """
        n = len(self)
        cols = self._cols
        attempted = cols["current_attempts"][:n] > 0
        for kind in ("successes", "attempts"):
            cols[f"last_{kind}"][:n][attempted] = cols[f"current_{kind}"][:n][attempted]
            cols[f"current_{kind}"][:n] = 0.0
        self.epoch += 1

    def set_prior(
        self, prompt_ids: np.ndarray | Sequence[int], success_rates: np.ndarray | Sequence[float], weight: float
    ) -> None:
        """Give prompts a prior success rate worth ``weight`` pseudo-completions, e.g. a dataset's pass-rate column.

        For each id with a finite rate p in [0, 1] (and weight w > 0) the prior is s0 = w p pseudo-successes among
        t0 = w pseudo-attempts; ids without a row get one. A NaN (or None) rate, or ``weight == 0``, removes the
        prior of that id (no row is added). Setting the same prior again changes nothing; a different one replaces
        the old one (no double counting) and restarts its Est decay (v = 0). Real counts are never changed. How
        each reading combines prior and evidence is in the class docstring: in short Knapsack's rate and CERO's
        Beta add s0, t0 to the counts, and Est adds gamma^v s0, gamma^v t0 to its decayed counts.

        Args:
            prompt_ids: ``(M,)`` integer prompt ids (an id may repeat only with the same rate).
            success_rates: ``(M,)`` prior pass rate of each prompt, in [0, 1]; NaN (or None) where unknown.
            weight: w >= 0, how many completions the prior is worth, e.g. the number of samples it was measured on,
                or ``num_generations`` so the prior weighs as much as one generation batch's group. 0: no prior.

        Raises:
            ValueError: for a rate outside [0, 1] (naming the ids), a negative or non-finite weight, shapes that do
                not match, or an id repeated with different rates.

        Example:
            >>> s = PromptStatistics()
            >>> s.set_prior([1, 2], [0.25, float("nan")], weight=4)  # prompt 2: no prior, no row
            >>> len(s), s.num_with_prior, s.batch([1]).smoothed_rate.tolist()  # (1 + 4 * 0.25) / (17 + 4)
            (1, 1, [0.09523809523809523])
        """
        ids = _as_ids(prompt_ids)
        rates = _as_rates(success_rates, len(ids))
        w = _check_finite("weight", weight)
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
        _check_duplicates_agree(ids, rates.tolist(), "prior success rates")
        has = ~np.isnan(rates) & (w > 0.0)
        prior_s = np.where(has, w * np.where(has, rates, 0.0), 0.0)
        prior_t = np.where(has, w, 0.0)
        rows = self._rows(ids)
        if np.any(has & (rows < 0)):
            self._add_rows(np.unique(ids[has & (rows < 0)]))
            rows = self._rows(ids)
        known = rows >= 0
        rows, prior_s, prior_t = rows[known], prior_s[known], prior_t[known]
        cols = self._cols
        changed = (cols["prior_successes"][rows] != prior_s) | (cols["prior_attempts"][rows] != prior_t)
        rows, prior_s, prior_t = rows[changed], prior_s[changed], prior_t[changed]
        cols["prior_successes"][rows] = prior_s
        cols["prior_attempts"][rows] = prior_t
        cols["prior_visits"][rows] = 0.0

    def set_fingerprints(self, prompt_ids: np.ndarray | Sequence[int], fingerprints: Sequence[str]) -> None:
        """Record the fingerprint of each prompt's text (from :func:`prompt_fingerprint`); adds rows for new ids.

        A stored fingerprint is overwritten: call :meth:`fingerprint_mismatches` first to refuse statistics that were
        measured on other prompts. Fingerprints are saved with the statistics and exported by :meth:`to_dataset`.

        Args:
            prompt_ids: ``(M,)`` integer prompt ids (an id may repeat only with the same fingerprint).
            fingerprints: ``M`` non-empty strings.
        """
        ids = _as_ids(prompt_ids)
        values = _as_fingerprints(fingerprints, len(ids))
        _check_duplicates_agree(ids, values, "fingerprints")
        stored = self._fingerprints
        for row, value in zip(self._rows_adding(ids).tolist(), values, strict=True):
            stored[row] = value

    # -- reading ----------------------------------------------------------------------------------------------------
    def fingerprint_mismatches(
        self, prompt_ids: np.ndarray | Sequence[int], fingerprints: Sequence[str]
    ) -> np.ndarray:
        """The ids whose stored fingerprint exists and differs from the given one: statistics of another prompt.

        Ids without a stored fingerprint (never fingerprinted, or loaded from a version-1 file) are not mismatches.

        Args:
            prompt_ids: ``(M,)`` integer prompt ids.
            fingerprints: ``M`` non-empty strings, the fingerprints of the prompts these ids stand for now.

        Returns:
            sorted unique ``int64`` ids, empty when all agree.

        Example:
            >>> s = PromptStatistics()
            >>> s.set_fingerprints([0, 1], [prompt_fingerprint("1 + 1?"), prompt_fingerprint("2 + 2?")])
            >>> s.fingerprint_mismatches([0, 1, 2], [prompt_fingerprint(p) for p in ("1 + 1?", "3 + 3?", "x")])
            array([1])
        """
        ids = _as_ids(prompt_ids)
        values = _as_fingerprints(fingerprints, len(ids))
        stored = self._fingerprints
        bad = [
            i
            for i, row, value in zip(ids.tolist(), self._rows(ids).tolist(), values, strict=True)
            if row >= 0 and stored[row] and stored[row] != value
        ]
        return np.unique(np.asarray(bad, dtype=np.int64))

    def _gather(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        rows = self._rows(ids)
        known = rows >= 0
        safe = np.where(known, rows, 0)
        out = {}
        for name, col in self._cols.items():
            out[name] = np.where(known, col[safe], 0.0) if len(col) else np.zeros(len(ids))
        return out

    @staticmethod
    def _rate(g: dict[str, np.ndarray]) -> np.ndarray:
        """(c_last + s0) / (t_last + t0), NaN where the denominator is 0."""
        s = g["last_successes"] + g["prior_successes"]
        t = g["last_attempts"] + g["prior_attempts"]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(t > 0, s / t, np.nan)

    def success_rates(self, prompt_ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """Knapsack RL's p_i per id: (c_last + s0) / (t_last + t0), last completed epoch's counts plus the prior.

        Without a prior this is the last completed epoch's c_i / t_i, NaN before any completed epoch with attempts.

        Returns:
            ``(M,)`` float64, aligned with ``prompt_ids``; NaN for ids with neither evidence nor prior.
        """
        return self._rate(self._gather(_as_ids(prompt_ids)))

    def batch(self, prompt_ids: np.ndarray | Sequence[int]) -> PromptBatchStats:
        """The statistics the allocators read, for the M prompts of one generation batch (ids may repeat).

        With s0, t0 the prior's pseudo-counts (0 without one) and v the visits since it was set:

        - ``success_rate``: as :meth:`success_rates`, (c_last + s0) / (t_last + t0).
        - ``attempts``, ``successes``: real cumulative counts (no prior).
        - ``smoothed_rate``: p~_i = (alpha + gamma^v s0 + n_pos) / (alpha + beta + gamma^v t0 + n_tot), Est.
        - ``beta_a``, ``beta_b``: a0 + s0 + S, b0 + (t0 - s0) + F, the weak prior Beta(a0, b0) (default Beta(1, 1))
          plus the posterior's evidence S, F (cumulative successes and failures without ``posterior_half_life``,
          decayed ones with it); read by CERO and ``bayes_knapsack``.
        - ``prior_attempts``: t0, so a prompt with a prior is not treated as unseen.

        Unknown ids get zero counts: NaN rate, p~ = alpha / (alpha + beta), Beta(a0, b0).
        """
        ids = _as_ids(prompt_ids)
        g = self._gather(ids)
        c, t = g["total_successes"], g["total_attempts"]
        prior_s, prior_t = g["prior_successes"], g["prior_attempts"]
        scale = np.power(self.decay, g["prior_visits"])
        alpha, beta = self.prior_alpha, self.prior_beta
        return PromptBatchStats(
            prompt_ids=ids.copy(),
            success_rate=self._rate(g),
            attempts=t,
            successes=c,
            smoothed_rate=(alpha + g["decayed_successes"] + scale * prior_s)
            / (alpha + beta + g["decayed_attempts"] + scale * prior_t),
            beta_a=self.posterior_prior_a + prior_s + g["posterior_successes"],
            beta_b=self.posterior_prior_b + (prior_t - prior_s) + g["posterior_failures"],
            prior_attempts=prior_t,
        )

    # -- persistence ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable snapshot (format version 3).

        Keys: ``format``, ``version``, ``config``, ``epoch``, ``prompt_ids``, ``fingerprints`` (one string per id,
        ``""`` when unknown) and ``columns`` (one list per column, aligned with ``prompt_ids``). Counts and
        ``prior_visits`` are written as integers; decayed counts, prior pseudo-counts and the posterior's evidence as
        floats (``json`` writes floats with ``repr``, so a round trip is exact and a resumed run continues
        bit-identically).
        """
        n = len(self)
        columns: dict[str, list[Any]] = {}
        for name in _COLUMNS:
            col = self._cols[name][:n]
            columns[name] = col.astype(np.int64).tolist() if name in _INT_COLUMNS else col.tolist()
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "config": self.config,
            "epoch": self.epoch,
            "prompt_ids": self._ids[:n].tolist(),
            "fingerprints": list(self._fingerprints),
            "columns": columns,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with ``state`` (from :meth:`state_dict`, version 3 or the older versions 1 and 2).

        A version-1 state (no priors, no fingerprints) loads with neither. Versions 1 and 2 predate the posterior
        columns and the posterior's config (half-life, weak prior): the posterior starts from the cumulative counts
        (as if nothing had been forgotten yet) and this store's posterior config is kept. Nothing changes when a
        check fails.

        Raises:
            ValueError: when the format or version is unknown, a key or column is missing (named), the saved config
                (threshold, decay, prior) differs from this store's (the counts would mean something else), or the
                arrays are inconsistent.
        """
        if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
            raise ValueError(f"Not a PromptStatistics state: expected format {FORMAT_NAME!r}.")
        version = _require(state, "version")
        if isinstance(version, bool) or version not in _READABLE_VERSIONS:
            raise ValueError(
                f"PromptStatistics state has format version {version!r}; this code reads versions "
                f"{list(_READABLE_VERSIONS)}. Upgrade trl_adaptive to read it, or start fresh statistics."
            )
        saved = _require(state, "config")
        if not isinstance(saved, dict):
            raise ValueError("PromptStatistics state: config must be a dict of the constructor arguments.")
        fields = _CONFIG_FIELDS if version == FORMAT_VERSION else _V2_CONFIG_FIELDS
        diff = [
            f"{k}: saved {saved.get(k)!r}, configured {getattr(self, k)!r}"
            for k in fields
            if saved.get(k) != getattr(self, k)
        ]
        if diff:
            raise ValueError(
                "PromptStatistics config mismatch (" + "; ".join(diff) + "). Construct the store with the saved "
                "values, or use PromptStatistics.load(path) to take them from the file."
            )
        epoch = _require(state, "epoch")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"PromptStatistics state: epoch must be an integer >= 0, got {epoch!r}.")
        raw_ids = _require(state, "prompt_ids")
        if not isinstance(raw_ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw_ids):
            raise ValueError("PromptStatistics state: prompt_ids must be a list of integers.")
        ids = np.asarray(raw_ids, dtype=np.int64).reshape(-1)
        if len(np.unique(ids)) != len(ids):
            raise ValueError("PromptStatistics state has duplicate prompt ids.")
        columns = _require(state, "columns")
        if not isinstance(columns, dict):
            raise ValueError("PromptStatistics state: columns must be a dict of lists.")
        names = {1: _V1_COLUMNS, 2: _V2_COLUMNS}.get(version, _COLUMNS)
        missing = [name for name in names if name not in columns]
        if missing:
            raise ValueError(f"PromptStatistics state lacks columns {missing}.")
        arrays = {name: np.zeros(len(ids), dtype=np.float64) for name in _COLUMNS}
        for name in names:
            try:
                arrays[name] = np.asarray(columns[name], dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                raise ValueError(f"PromptStatistics state: column {name!r} must be a list of numbers.") from None
        if any(len(a) != len(ids) for a in arrays.values()):
            raise ValueError("PromptStatistics state columns and prompt_ids differ in length.")
        total_failures = arrays["total_attempts"] - arrays["total_successes"]
        if version < 3:  # no forgetting before version 3: the posterior's evidence is the cumulative counts
            arrays["posterior_successes"] = arrays["total_successes"].copy()
            arrays["posterior_failures"] = total_failures
        if any(np.any(~np.isfinite(a) | (a < 0)) for a in arrays.values()):
            raise ValueError("PromptStatistics state holds negative or non-finite counts.")
        if any(np.any(arrays[name] != np.round(arrays[name])) for name in _INT_COLUMNS):
            raise ValueError(f"PromptStatistics state: columns {list(_INT_COLUMNS)} must hold whole numbers.")
        if np.any(arrays["prior_successes"] > arrays["prior_attempts"]):
            raise ValueError("PromptStatistics state: prior_successes exceeds prior_attempts.")
        if np.any(arrays["posterior_successes"] > arrays["total_successes"]) or np.any(
            arrays["posterior_failures"] > total_failures
        ):
            raise ValueError(
                "PromptStatistics state: the posterior's evidence exceeds the cumulative counts (posterior_successes "
                "> total_successes or posterior_failures > total_attempts - total_successes)."
            )
        if version == 1:
            fingerprints = [""] * len(ids)
        else:
            fingerprints = _require(state, "fingerprints")
            if not isinstance(fingerprints, list) or not all(isinstance(f, str) for f in fingerprints):
                raise ValueError("PromptStatistics state: fingerprints must be a list of strings ('' when unknown).")
            if len(fingerprints) != len(ids):
                raise ValueError("PromptStatistics state: fingerprints and prompt_ids differ in length.")
        self.epoch = epoch
        self._index = dict(zip(ids.tolist(), range(len(ids)), strict=True))
        self._ids = ids.copy()
        self._cols = arrays
        self._fingerprints = list(fingerprints)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` as JSON to ``path`` atomically.

        The JSON goes to a temporary file in the same directory, is flushed and fsynced, then ``os.replace``-d over
        ``path`` (and the folder fsynced): a crash leaves either the old file or the new one, never a partial file,
        and no temporary file.
        """
        write_json_atomic(path, self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str], **expected_config: float | None) -> PromptStatistics:
        """Read a store written by :meth:`save` (format version 1, 2 or 3); its config comes from the file.

        Args:
            path: the JSON file.
            **expected_config: optional ``success_threshold`` / ``decay`` / ``prior_alpha`` / ``prior_beta`` /
                ``posterior_half_life`` / ``posterior_prior_a`` / ``posterior_prior_b`` this run is configured with;
                each given value must equal the saved one, or a ValueError names the field. A version-1 or 2 file has
                no posterior config: the given values (the constructor's defaults when not given) are used.

        Raises:
            ValueError: naming ``path``, when the file is truncated or corrupt (not JSON), is not a PromptStatistics
                file, lacks a key, or was saved with another config than ``expected_config``.

        Example:
            >>> import tempfile, os
            >>> s = PromptStatistics(); s.update([0, 0], [1.0, 0.0])
            >>> p = os.path.join(tempfile.mkdtemp(), "prompt_stats.json"); s.save(p)
            >>> PromptStatistics.load(p, decay=0.9).batch([0]).attempts.tolist()
            [2.0]
        """
        _check_config_names(expected_config)
        state = read_json(
            path,
            "PromptStatistics JSON file",
            "save() replaces the file atomically, so it was damaged afterwards or written by something else: use an "
            "intact copy (e.g. from an earlier checkpoint), or delete it and start with fresh statistics.",
        )
        return cls._from_state(state, str(path), expected_config)

    @classmethod
    def _from_state(cls, state: Any, source: str, expected_config: Mapping[str, float | None]) -> PromptStatistics:
        """A store built from ``state`` with the config it carries, checked against ``expected_config``."""
        if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
            raise ValueError(f"{source} is not a PromptStatistics file (expected format {FORMAT_NAME!r}).")
        saved = state.get("config")
        fields = _V2_CONFIG_FIELDS if state.get("version") in (1, 2) else _CONFIG_FIELDS
        if not isinstance(saved, dict) or set(saved) != set(fields):
            found = sorted(saved) if isinstance(saved, dict) else saved
            raise ValueError(f"{source}: config must hold exactly {fields}, got {found!r}.")
        saved = {**{k: expected_config[k] for k in _POSTERIOR_CONFIG_FIELDS if k in expected_config}, **saved}
        for field, value in expected_config.items():
            if saved[field] != value:
                raise ValueError(
                    f"{source} was saved with {field}={saved[field]!r} but this run uses {field}={value!r}; the "
                    "counts would mean something else. Use the saved value or start fresh statistics."
                )
        try:
            store = cls(**saved)
            store.load_state_dict(state)
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from error
        return store

    # -- datasets export / import -----------------------------------------------------------------------------------
    def to_dataset(self) -> datasets.Dataset:
        """The whole store as a ``datasets.Dataset``, one row per prompt: a warm start for the next run.

        Columns: ``prompt_id`` (int64), ``prompt_fingerprint`` (string, ``""`` when unknown), ``success_rate``
        (float64, as :meth:`success_rates`, NaN when unknown; informational, ignored by :meth:`from_dataset`), then
        every stored column: ``current_*``, ``last_*``, ``total_*`` successes / attempts and ``prior_visits``
        (int64), ``decayed_*``, ``prior_successes`` / ``prior_attempts`` and ``posterior_successes`` /
        ``posterior_failures`` (float64).

        The format name and version, the config and the epoch are JSON in the ``id`` of the ``prompt_id`` feature
        (``dataset.features["prompt_id"].id``) and, for reading, in ``dataset.info.description``. The feature id is
        what :meth:`from_dataset` reads: it survives ``save_to_disk`` / ``load_from_disk``, ``to_parquet`` /
        ``Dataset.from_parquet`` (it is in the parquet schema's ``huggingface`` metadata) and ``push_to_hub`` /
        ``load_dataset`` (also in the card's ``dataset_info``), whereas the description does not survive parquet.
        Casting or rebuilding the ``prompt_id`` column drops it.

        Example:
            >>> s = PromptStatistics(); s.update([4, 4], [1.0, 0.0]); s.end_epoch()
            >>> ds = s.to_dataset()
            >>> ds.num_rows, ds[0]["prompt_id"], ds[0]["success_rate"], ds[0]["total_attempts"]
            (1, 4, 0.5, 2)
            >>> PromptStatistics.from_dataset(ds).state_dict() == s.state_dict()
            True
        """
        import datasets
        import pyarrow as pa

        n = len(self)
        metadata = json.dumps(
            {"format": FORMAT_NAME, "version": FORMAT_VERSION, "config": self.config, "epoch": self.epoch},
            sort_keys=True,
        )
        features = datasets.Features(
            {
                _ID_COLUMN: datasets.Value("int64", id=metadata),
                _FINGERPRINT_COLUMN: datasets.Value("string"),
                _RATE_COLUMN: datasets.Value("float64"),
                **{name: datasets.Value("int64" if name in _INT_COLUMNS else "float64") for name in _COLUMNS},
            }
        )
        g = {name: col[:n] for name, col in self._cols.items()}
        data: dict[str, Any] = {
            _ID_COLUMN: self._ids[:n].copy(),
            _FINGERPRINT_COLUMN: list(self._fingerprints),
            _RATE_COLUMN: self._rate(g),
        }
        for name in _COLUMNS:
            data[name] = g[name].astype(np.int64) if name in _INT_COLUMNS else g[name].copy()
        # Straight to Arrow: Dataset.from_dict would encode every value in Python (2 s for 18k prompts, not 5 ms).
        table = pa.Table.from_pydict(data, schema=features.arrow_schema)
        return datasets.Dataset(table, info=datasets.DatasetInfo(description=metadata, features=features))

    @classmethod
    def from_dataset(cls, dataset: datasets.Dataset, **expected_config: float | None) -> PromptStatistics:
        """The exact inverse of :meth:`to_dataset`: ``from_dataset(s.to_dataset()).state_dict() == s.state_dict()``.

        Rows may have been reordered or selected (``select``, ``shuffle``, ``filter``); ``success_rate`` is not read.
        A dataset of prompt ids and pass rates only (e.g. a reference model's pass-rate column) is not saved
        statistics: give it to :meth:`set_prior` instead.

        Args:
            dataset: a ``datasets.Dataset`` written by :meth:`to_dataset` (possibly via ``save_to_disk``, parquet or
                the Hub).
            **expected_config: as in :meth:`load`: each given value must equal the saved one.

        Raises:
            ValueError: naming the missing columns, when the metadata is gone, or as :meth:`load` does.
            TypeError: for a ``DatasetDict`` (pick a split) or something that is not a ``datasets.Dataset``.
        """
        import datasets

        _check_config_names(expected_config)
        if isinstance(dataset, datasets.DatasetDict):
            raise TypeError(
                f"from_dataset takes one split, got a DatasetDict with splits {list(dataset)}; pass e.g. "
                f"dataset[{next(iter(dataset), 'train')!r}]."
            )
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(f"from_dataset takes a datasets.Dataset, got {type(dataset).__name__}.")
        required = (_ID_COLUMN, _FINGERPRINT_COLUMN, *_V2_COLUMNS)
        missing = [name for name in required if name not in dataset.column_names]
        if missing:
            hint = (
                " For a column of pass rates (e.g. from a reference model) use "
                "PromptStatistics.set_prior(prompt_ids, rates, weight) instead."
                if _ID_COLUMN in dataset.column_names
                else ""
            )
            raise ValueError(
                f"The dataset lacks the columns {missing} that PromptStatistics.to_dataset() writes (it has "
                f"{dataset.column_names}).{hint}"
            )
        state = dict(_dataset_metadata(dataset))
        names = _V2_COLUMNS if state.get("version") in (1, 2) else _COLUMNS
        missing = [name for name in names if name not in dataset.column_names]
        if missing:
            raise ValueError(
                f"The dataset lacks the columns {missing} that PromptStatistics.to_dataset() writes (it has "
                f"{dataset.column_names})."
            )
        table = dataset.with_format("arrow")[:]  # honours an indices mapping (select / shuffle / filter)
        state["prompt_ids"] = table.column(_ID_COLUMN).to_pylist()
        state["fingerprints"] = [f or "" for f in table.column(_FINGERPRINT_COLUMN).to_pylist()]
        state["columns"] = {name: table.column(name).to_pylist() for name in names}
        return cls._from_state(state, "dataset", expected_config)


def _dataset_metadata(dataset: datasets.Dataset) -> dict[str, Any]:
    """Format, version, config and epoch that :meth:`PromptStatistics.to_dataset` stored in the dataset."""
    feature = dataset.features.get(_ID_COLUMN)
    for text in (getattr(feature, "id", None), dataset.info.description):
        if not text:
            continue
        try:
            metadata = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(metadata, dict) and metadata.get("format") == FORMAT_NAME:
            return {key: metadata[key] for key in ("format", "version", "config", "epoch") if key in metadata}
    raise ValueError(
        "The dataset carries no PromptStatistics metadata (config and epoch). PromptStatistics.to_dataset() stores it "
        "in the id of the 'prompt_id' feature, which survives save_to_disk, parquet and the Hub but not casting or "
        "rebuilding that column. Export the statistics again with to_dataset(), or, for a column of pass rates, use "
        "PromptStatistics.set_prior."
    )


def _check_config_names(expected_config: Mapping[str, float | None]) -> None:
    unknown = sorted(set(expected_config) - set(_CONFIG_FIELDS))
    if unknown:
        raise TypeError(f"Unknown PromptStatistics config fields {unknown}; expected some of {_CONFIG_FIELDS}.")


def _check_half_life(value: float | None) -> float | None:
    if value is None:
        return None
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not real or not math.isfinite(float(value)) or value <= 0:
        raise ValueError(
            f"posterior_half_life={value!r}: must be a finite number of steps > 0 (evidence scored h steps ago "
            "weighs half), or None to never forget. Use e.g. posterior_half_life=None or a positive number of steps."
        )
    return float(value)


def _check_finite(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{field}={value!r}: must be a real number.")
    if not math.isfinite(float(value)):
        raise ValueError(f"{field}={value!r}: must be finite.")
    return float(value)


__all__ = ["FORMAT_VERSION", "PromptStatistics", "prompt_fingerprint", "stable_prompt_ids"]
