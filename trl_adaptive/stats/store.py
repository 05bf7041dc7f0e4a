"""PromptStatistics: the one store of per-prompt success statistics that every allocator reads (NumPy only).

A facade over a :class:`~.table.RowTable` and its parts: the three estimators of :mod:`.estimators` (the epoch rate,
Est's decayed rate, the Beta posterior), the prior of :mod:`.prior`, the fingerprints of :mod:`.fingerprints`, the
file format of :mod:`.serialization` and the ``datasets`` export of :mod:`.dataset`. It saves to a plain JSON file
atomically, so it survives checkpoint and resume bit for bit.

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

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import read_json, write_json_atomic
from ..batch import EST_PRIOR_ALPHA, EST_PRIOR_BETA, POSTERIOR_PRIOR_A, POSTERIOR_PRIOR_B, PromptBatchStats, is_success
from . import dataset as _dataset
from ._checks import check_real
from .estimators import BetaPosterior, DecayedRate, EpochRate, check_between, check_reads
from .fingerprints import fingerprint_mismatches, record_fingerprints
from .lengths import CompletionLength, as_completion_tokens
from .prior import PriorCounts
from .serialization import COLUMNS, check_config_names, config_to_load, read_state, write_state
from .table import RowTable, as_ids

if TYPE_CHECKING:  # imported lazily at run time: the store imports without it
    import datasets

Ids = np.ndarray | Sequence[int]
Numbers = np.ndarray | Sequence[float]


class PromptStatistics:
    """Success statistics per prompt id: the epoch rate, Reinforce-Ada Est's decayed rate, the Beta posterior.

    A completion is a *success* when its reward is ``>= success_threshold``
    (:func:`trl_adaptive.batch.is_success`); rewards may be any float. A NaN reward marks an unscorable
    completion: neither a success nor an attempt, and a prompt whose completions in one :meth:`update` call are all
    NaN is not visited by that call. Each prompt may carry a prior (:meth:`set_prior`) and a fingerprint of its text
    (:meth:`set_fingerprints`). The readings, per prompt (s0 = t0 = 0 without a prior; docs/statistics.md):

    ==================================  ==============================================================================
    reading (estimator; allocators)     value
    ==================================  ==============================================================================
    ``success_rate`` (``epoch_rate``;   (c_last + s0) / (t_last + t0) of the most recent completed epoch in which the
    Knapsack RL)                        prompt was attempted; NaN when t_last + t0 = 0. Call :meth:`end_epoch` at
                                        every epoch boundary. The prior does not fade.
    ``smoothed_rate`` (``decayed_rate``; (alpha + n_pos + gamma^v s0) / (alpha + beta + n_tot + gamma^v t0), counts
    Reinforce-Ada Est)                  decayed by gamma = ``decay`` per visit; the prior decays like evidence.
    ``beta_a``, ``beta_b``              a0 + s0 + S, b0 + (t0 - s0) + F: the weak prior, the prior's pseudo-counts
    (``posterior``; CERO,               (never fading) and the evidence S, F (cumulative unless
    ``bayes_knapsack``)                 ``posterior_half_life`` is set).
    ``attempts``, ``successes``         real cumulative counts only; ``prior_attempts`` carries t0, so a prompt with
                                        a prior is not "unseen".
    ``expected_tokens``                 L / W, the prompt's generated tokens per completion, decayed by
    (``completion_length``; token       gamma_L = ``length_decay`` per visit; the population's mean estimate for
    budgets, dispatch)                  prompts never measured, NaN when none is (:mod:`.lengths`).
    ==================================  ==============================================================================

    Args:
        success_threshold: tau; a completion with reward r counts as a success when r >= tau.
        decay: gamma in (0, 1]; Est's per-visit decay of n_pos and n_tot (1.0 keeps plain cumulative counts).
        prior_alpha: alpha > 0 of Est's Beta prior (Reinforce-Ada: 1.0).
        prior_beta: beta > 0 of Est's Beta prior (Reinforce-Ada: 16.0, so an unseen prompt has p~ = 1 / 17).
        posterior_half_life: h > 0, the half-life of the posterior's evidence in steps (:meth:`update` calls), or
            None (default) to never forget.
        posterior_prior_a, posterior_prior_b: a0, b0 > 0, the weak Beta prior of every prompt's posterior (default
            1, 1: CERO's Beta(1, 1); 0.5, 0.5 is Jeffreys' prior).
        length_decay: gamma_L in (0, 1]; the per-visit decay of each prompt's measured completion lengths.

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
        prior_alpha: float = EST_PRIOR_ALPHA,
        prior_beta: float = EST_PRIOR_BETA,
        posterior_half_life: float | None = None,
        posterior_prior_a: float = POSTERIOR_PRIOR_A,
        posterior_prior_b: float = POSTERIOR_PRIOR_B,
        length_decay: float = 0.9,
    ) -> None:
        self.success_threshold = check_real("success_threshold", success_threshold)
        self._table = RowTable(COLUMNS)
        self._counts = EpochRate(self._table)
        self._decayed = DecayedRate(self._table, decay, prior_alpha, prior_beta)
        self._posterior = BetaPosterior(self._table, posterior_half_life, posterior_prior_a, posterior_prior_b)
        self._prior = PriorCounts(self._table)
        self._lengths = CompletionLength(self._table, length_decay)

    @property
    def _parts(self) -> tuple[EpochRate, DecayedRate, BetaPosterior, PriorCounts, CompletionLength]:
        return self._counts, self._decayed, self._posterior, self._prior, self._lengths

    # -- settings and sizes -----------------------------------------------------------------------------------------
    decay = property(lambda self: self._decayed.decay, doc="Est's per-visit decay gamma.")
    prior_alpha = property(lambda self: self._decayed.prior_alpha, doc="alpha of Est's Beta prior.")
    prior_beta = property(lambda self: self._decayed.prior_beta, doc="beta of Est's Beta prior.")
    posterior_half_life = property(lambda self: self._posterior.half_life, doc="The posterior's half-life, or None.")
    posterior_prior_a = property(lambda self: self._posterior.prior_a, doc="a0 of the posterior's weak prior.")
    posterior_prior_b = property(lambda self: self._posterior.prior_b, doc="b0 of the posterior's weak prior.")
    length_decay = property(lambda self: self._lengths.decay, doc="The length estimate's per-visit decay.")
    posterior_decay = property(lambda self: self._posterior.decay, doc="2^(-1/h) per update call (1.0: never).")

    @property
    def config(self) -> dict[str, float | None]:
        """The eight constructor arguments; saved with the statistics and checked on load."""
        config = {"success_threshold": self.success_threshold, **self._decayed.config, **self._posterior.config}
        return config | self._lengths.config

    @property
    def epoch(self) -> int:
        """Number of completed epochs (:meth:`end_epoch` calls)."""
        return self._counts.epoch

    @property
    def num_seen(self) -> int:
        """Number of prompts attempted in some completed epoch (real evidence; priors do not count here)."""
        return self._counts.num_seen

    @property
    def num_with_prior(self) -> int:
        """Number of prompts that carry a prior (:meth:`set_prior` with a finite rate and weight > 0)."""
        return self._prior.count

    @property
    def prompt_ids(self) -> np.ndarray:
        """``(len(self),)`` int64: the id of every prompt with a row, in the order rows were added (a copy)."""
        return self._table.ids

    @property
    def fingerprints(self) -> list[str]:
        """The fingerprint of each prompt in :attr:`prompt_ids`' order (``""`` when unknown), a copy."""
        return list(self._table.fingerprints)

    def __len__(self) -> int:
        """Number of prompts with a row: scored at least once, given a prior, or given a fingerprint."""
        return len(self._table)

    def __contains__(self, prompt_id: object) -> bool:
        return prompt_id in self._table

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.config.items())
        return f"PromptStatistics({settings}; {len(self)} prompts, epoch {self.epoch})"

    # -- writing ----------------------------------------------------------------------------------------------------
    def update(self, prompt_ids: Ids, rewards: Numbers, completion_tokens: Numbers | None = None) -> None:
        """Record one generation batch: one entry per completion, grouped here by prompt id.

        For each prompt with at least one scorable (non-NaN) reward, with s successes among t scored completions,
        every estimator observes (s, t): the epoch's and the run's counts grow, Est's decayed counts decay once and
        grow (one visit; a prior's visit count v grows by one), the posterior's evidence grows. Each call is also one
        step of the posterior's clock, also when nothing is scored. Call it once per generation batch: two calls
        decay a prompt's counts twice. A step whose completions come in rounds should still make one call; a later
        round's allocator reads the earlier rounds through ``bayes_knapsack.absorb``. With ``completion_tokens``, each
        prompt's length estimate is visited once too (scored completions of known length only).

        Args:
            prompt_ids: ``(C,)`` integer prompt id of each completion.
            rewards: ``(C,)`` float reward of each completion; NaN for unscorable ones (not counted).
            completion_tokens: ``(C,)`` generated tokens of each completion, NaN where unknown; None: none measured.

        Example:
            >>> s = PromptStatistics(decay=0.5)
            >>> s.update([1, 1], [1.0, 0.0]); s.update([1, 1], [1.0, 1.0])
            >>> s.batch([1]).smoothed_rate.round(4).tolist()  # (1 + 0.5 * 1 + 2) / (17 + 0.5 * 2 + 2)
            [0.175]
        """
        ids = as_ids(prompt_ids)
        r = np.asarray(rewards, dtype=np.float64)
        if r.ndim != 1 or len(r) != len(ids):
            raise ValueError(
                f"prompt_ids and rewards must be 1-D arrays of equal length (one entry per completion), got shapes "
                f"{ids.shape} and {r.shape}."
            )
        tokens = as_completion_tokens(completion_tokens, len(r))
        self._posterior.tick()
        scored = ~np.isnan(r)
        ids, r, tokens = ids[scored], r[scored], tokens[scored]
        if len(ids) == 0:
            return
        unique, inverse = np.unique(ids, return_inverse=True)
        attempts = np.bincount(inverse, minlength=len(unique)).astype(np.float64)
        hits = is_success(r, self.success_threshold).astype(np.float64)
        successes = np.bincount(inverse, weights=hits, minlength=len(unique))
        rows = self._table.rows_adding(unique)
        self._counts.observe(rows, successes, attempts)
        self._decayed.observe(rows, successes, attempts, with_prior=self._prior.has_prior(rows))
        self._posterior.observe(rows, successes, attempts)
        measured = ~np.isnan(tokens)
        lengths = np.bincount(inverse[measured], weights=tokens[measured], minlength=len(unique))
        self._lengths.observe(rows, lengths, np.bincount(inverse[measured], minlength=len(unique)).astype(np.float64))

    def end_epoch(self) -> None:
        """Close the epoch: prompts attempted in it get it as their "last epoch"; current counts reset to 0.

        Prompts not attempted in the closing epoch keep their older last-epoch rate. Priors are left untouched.
        Increments :attr:`epoch`.
        """
        self._counts.end_epoch()

    def set_prior(self, prompt_ids: Ids, success_rates: Numbers, weight: float) -> None:
        """Give prompts a prior success rate worth ``weight`` pseudo-completions, e.g. a dataset's pass-rate column.

        For each id with a finite rate p in [0, 1] (and weight w > 0) the prior is s0 = w p pseudo-successes among
        t0 = w pseudo-attempts; ids without a row get one. A NaN (or None) rate, or ``weight == 0``, removes the
        prior of that id (no row is added). Setting the same prior again changes nothing; a different one replaces
        the old one (no double counting) and restarts its Est decay (v = 0). Real counts are never changed.

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
        changed = self._prior.set(as_ids(prompt_ids), success_rates, weight)
        self._decayed.restart_prior(changed)

    def set_fingerprints(self, prompt_ids: Ids, fingerprints: Sequence[str]) -> None:
        """Record the fingerprint of each prompt's text (from :func:`.prompt_fingerprint`); adds rows for new ids.

        A stored fingerprint is overwritten: call :meth:`fingerprint_mismatches` first to refuse statistics that were
        measured on other prompts. Fingerprints are saved with the statistics and exported by :meth:`to_dataset`.

        Args:
            prompt_ids: ``(M,)`` integer prompt ids (an id may repeat only with the same fingerprint).
            fingerprints: ``M`` non-empty strings.
        """
        record_fingerprints(self._table, as_ids(prompt_ids), fingerprints)

    # -- reading ----------------------------------------------------------------------------------------------------
    def fingerprint_mismatches(self, prompt_ids: Ids, fingerprints: Sequence[str]) -> np.ndarray:
        """The ids whose stored fingerprint exists and differs from the given one: statistics of another prompt.

        Args:
            prompt_ids: ``(M,)`` integer prompt ids.
            fingerprints: ``M`` non-empty strings, the fingerprints of the prompts these ids stand for now.

        Returns:
            sorted unique ``int64`` ids, empty when all agree (ids without a stored fingerprint never mismatch).

        Example:
            >>> from trl_adaptive.stats import prompt_fingerprint
            >>> s = PromptStatistics()
            >>> s.set_fingerprints([0, 1], [prompt_fingerprint("1 + 1?"), prompt_fingerprint("2 + 2?")])
            >>> s.fingerprint_mismatches([0, 1, 2], [prompt_fingerprint(p) for p in ("1 + 1?", "3 + 3?", "x")])
            array([1])
        """
        return fingerprint_mismatches(self._table, as_ids(prompt_ids), fingerprints)

    def success_rates(self, prompt_ids: Ids) -> np.ndarray:
        """Knapsack RL's p_i per id: (c_last + s0) / (t_last + t0), last completed epoch's counts plus the prior.

        Returns:
            ``(M,)`` float64, aligned with ``prompt_ids``; NaN for ids with neither evidence nor prior.
        """
        return self._counts.read(self._table.gather(as_ids(prompt_ids)))

    def expected_tokens(self, prompt_ids: Ids) -> np.ndarray:
        """``(M,)`` expected generated tokens per completion of each prompt (:mod:`.lengths`): its own estimate, the
        population's for prompts never measured, NaN when no prompt has been measured.

        Example:
            >>> s = PromptStatistics(); s.update([1, 1, 2], [1.0, 0.0, 1.0], completion_tokens=[10, 20, 40])
            >>> s.expected_tokens([1, 2, 3]).tolist()  # 3 is unseen: the mean of 15 and 40
            [15.0, 40.0, 27.5]
        """
        return self._lengths.read(self._table.gather(as_ids(prompt_ids)))

    def batch(self, prompt_ids: Ids, reads: Iterable[str] | None = None) -> PromptBatchStats:
        """The statistics the allocators read, for the M prompts of one generation batch (ids may repeat).

        ``success_rate``, ``smoothed_rate`` and ``beta_a`` / ``beta_b`` as in the class docstring; ``attempts`` and
        ``successes`` the real cumulative counts; ``prior_attempts`` t0. Unknown ids get zero counts: NaN rate,
        p~ = alpha / (alpha + beta), Beta(a0, b0). ``reads``, estimator names (an allocator's ``reads``; None: all),
        reads only those: the fields of the others are None (``success_rate`` and the counts are always read).
        """
        names = check_reads(reads)
        ids = as_ids(prompt_ids)
        g = self._table.gather(ids)
        beta_a, beta_b = self._posterior.read(g) if BetaPosterior.name in names else (None, None)
        return PromptBatchStats(
            prompt_ids=ids.copy(),
            success_rate=self._counts.read(g),
            attempts=g["total_attempts"],
            successes=g["total_successes"],
            smoothed_rate=self._decayed.read(g) if DecayedRate.name in names else None,
            beta_a=beta_a,
            beta_b=beta_b,
            prior_attempts=g["prior_attempts"],
            expected_tokens=self._lengths.read(g),
        )

    # -- persistence ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable snapshot (format version 4, :mod:`.serialization`).

        Counts and ``prior_visits`` are written as integers, the other columns as floats (``json`` writes floats with
        ``repr``, so a round trip is exact and a resumed run continues bit-identically).
        """
        return write_state(self.config, self._table, self._parts)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with ``state`` (from :meth:`state_dict`, version 4). Nothing changes when a check
        fails.

        Raises:
            ValueError: when the format or version is unknown, a key or column is missing (named), the saved config
                differs from this store's (the counts would mean something else), or the arrays are inconsistent.
        """
        loaded = read_state(state, self.config)
        table = RowTable.with_rows(COLUMNS, loaded["prompt_ids"], loaded["fingerprints"])
        parts = tuple(part.bind(table) for part in self._parts)
        for part in parts:
            part.load_state_dict(loaded)
        check_between(table)
        self._table = table
        self._counts, self._decayed, self._posterior, self._prior, self._lengths = parts

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` as JSON to ``path`` atomically (a crash leaves the old file or the new one)."""
        write_json_atomic(path, self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str], **expected_config: float | None) -> PromptStatistics:
        """Read a store written by :meth:`save` (format version 4); its config comes from the file.

        Args:
            path: the JSON file.
            **expected_config: optional constructor arguments this run is configured with; each given value must
                equal the saved one, or a ValueError names the field.

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
        check_config_names(expected_config)
        state = read_json(
            path,
            "PromptStatistics JSON file",
            "save() replaces the file atomically, so it was damaged afterwards or written by something else: use an "
            "intact copy (e.g. from an earlier checkpoint), or delete it and start with fresh statistics.",
        )
        return cls._from_state(state, str(path), expected_config)

    @classmethod
    def from_state_dict(cls, state: Any, source: str = "state", **expected_config: float | None) -> PromptStatistics:
        """A store built from a :meth:`state_dict` (e.g. a checkpoint's ``adaptive_state.json["statistics"]``) with
        the config saved in it, through every check of :meth:`load`; errors name ``source``."""
        check_config_names(expected_config)
        return cls._from_state(state, source, expected_config)

    @classmethod
    def _from_state(cls, state: Any, source: str, expected_config: dict[str, float | None]) -> PromptStatistics:
        config = config_to_load(state, source, expected_config)
        try:
            store = cls(**config)
            store.load_state_dict(state)
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from error
        return store

    # -- datasets export / import -----------------------------------------------------------------------------------
    def to_dataset(self) -> datasets.Dataset:
        """The whole store as a ``datasets.Dataset``, one row per prompt (columns and metadata: :mod:`.dataset`).

        Example:
            >>> s = PromptStatistics(); s.update([4, 4], [1.0, 0.0]); s.end_epoch()
            >>> ds = s.to_dataset()
            >>> ds.num_rows, ds[0]["prompt_id"], ds[0]["success_rate"], ds[0]["total_attempts"]
            (1, 4, 0.5, 2)
            >>> PromptStatistics.from_dataset(ds).state_dict() == s.state_dict()
            True
        """
        g = self._table.gather(self._table.ids)
        whole = {name for part in self._parts for name in part.whole}
        return _dataset.to_dataset(
            self._table, self.config, self.epoch, self._counts.read(g), self._lengths.read(g), whole
        )

    @classmethod
    def from_dataset(cls, dataset: datasets.Dataset, **expected_config: float | None) -> PromptStatistics:
        """The exact inverse of :meth:`to_dataset`: ``from_dataset(s.to_dataset()).state_dict() == s.state_dict()``.

        Rows may have been reordered or selected; ``success_rate`` is not read. A dataset of prompt ids and pass rates
        only is not saved statistics: give it to :meth:`set_prior` instead.

        Args:
            dataset: a ``datasets.Dataset`` written by :meth:`to_dataset` (possibly via ``save_to_disk``, parquet or
                the Hub).
            **expected_config: as in :meth:`load`: each given value must equal the saved one.

        Raises:
            ValueError: naming the missing columns, when the metadata is gone, or as :meth:`load` does.
            TypeError: for a ``DatasetDict`` (pick a split) or something that is not a ``datasets.Dataset``.
        """
        check_config_names(expected_config)
        return cls._from_state(_dataset.state_from_dataset(dataset), "dataset", expected_config)
