"""What the statistics store, the allocators and the sampling procedures hand each other about one generation batch.

A leaf: it imports nothing of ``trl_adaptive``, so :mod:`trl_adaptive.stats` (which builds
:class:`PromptBatchStats` and counts successes), :mod:`trl_adaptive.allocation` (which reads the stats and returns an
:class:`Allocation`) and :mod:`trl_adaptive.sampling` (which drives both) all import it, and none of them imports a
layer above itself. NumPy only.

- :class:`PromptBatchStats`: per-prompt statistics of the M prompts of a batch, with :func:`as_batch_stats`;
- :class:`Allocation`: an allocator's decision for those prompts;
- :func:`is_success`: the package's one success rule;
- the default priors of the store's estimators (:data:`EST_PRIOR_ALPHA`, :data:`EST_PRIOR_BETA`,
  :data:`POSTERIOR_PRIOR_A`, :data:`POSTERIOR_PRIOR_B`), stated once, and :data:`ESTIMATOR_FIELDS`, which fields of
  :class:`PromptBatchStats` each estimator fills.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

EST_PRIOR_ALPHA = 1.0
"""alpha of Reinforce-Ada Est's Beta prior, the pseudo-successes that keep the smoothed rate off 0 (its default)."""
EST_PRIOR_BETA = 16.0
"""beta of Reinforce-Ada Est's Beta prior, the pseudo-failures (its default: an unseen prompt reads p~ = 1 / 17)."""
POSTERIOR_PRIOR_A = 1.0
"""a0 of the weak Beta prior of every prompt's posterior (default: CERO's uniform Beta(1, 1))."""
POSTERIOR_PRIOR_B = 1.0
"""b0 of the weak Beta prior of every prompt's posterior (default: CERO's uniform Beta(1, 1))."""

ESTIMATOR_FIELDS: Mapping[str, tuple[str, ...]] = {
    "epoch_rate": ("success_rate",),
    "decayed_rate": ("smoothed_rate",),
    "posterior": ("beta_a", "beta_b"),
}
"""The store's estimators, by the name an allocator lists in its ``reads``, and the fields of
:class:`PromptBatchStats` each one fills (``trl_adaptive.stats.estimators``)."""


def is_success(rewards: np.ndarray | list[float], threshold: float) -> np.ndarray:
    """``(K,)`` bool: reward >= ``threshold``; NaN (no reward function scored it) is never a success.

    The one success rule of the package (``PromptStatistics`` counts the same way), used on any float reward.

    Example:
        >>> is_success(np.array([1.0, 0.0, 0.7, float("nan"), 2.5]), threshold=0.7).tolist()
        [True, False, True, False, True]
    """
    r = np.asarray(rewards, dtype=np.float64)
    if not math.isfinite(threshold):
        raise ValueError(f"threshold={threshold!r}: the success threshold must be a finite number (e.g. 1.0).")
    with np.errstate(invalid="ignore"):
        return np.greater_equal(r, threshold) & ~np.isnan(r)


@dataclass(frozen=True)
class PromptBatchStats:
    """Per-prompt statistics for the M prompts of one generation batch, aligned by position.

    Produced by :meth:`trl_adaptive.stats.PromptStatistics.batch`; allocators only read it. ``prompt_ids``,
    ``success_rate``, ``attempts`` and ``successes`` are always there. The fields of an estimator
    (:data:`ESTIMATOR_FIELDS`) are None when the batch was read without it, e.g. by
    ``PromptStatistics.batch(ids, reads=allocator.reads)``; an allocator that uses a field of an estimator its
    ``reads`` leaves out fails loudly (:meth:`for_reader`).

    Attributes:
        prompt_ids: ``(M,)`` int64, the stable prompt id of each prompt.
        success_rate: ``(M,)`` float64, success rate c_i / t_i from the most recent completed epoch in which the
            prompt was attempted; NaN if never seen (Knapsack RL's p_i; the ``epoch_rate`` estimator).
        attempts: ``(M,)`` float64, cumulative number of completions scored for the prompt.
        successes: ``(M,)`` float64, cumulative number of successful completions.
        smoothed_rate: ``(M,)`` float64, Reinforce-Ada Est's pass rate (alpha + decayed successes) /
            (alpha + beta + decayed attempts), never 0 or 1 (the ``decayed_rate`` estimator); None when not read.
        beta_a, beta_b: ``(M,)`` float64, the Beta posterior of the success probability (CERO, ``bayes_knapsack``),
            Beta(1, 1) before any data (the ``posterior`` estimator); None when not read.
        prior_attempts: ``(M,)`` float64 pseudo-observations of each prompt's prior success rate (e.g. a dataset's
            pass-rate column), 0 where there is none; ``None`` when the source has no priors at all. A prompt with a
            prior is not "unseen" even before its first scored completion.
        expected_tokens: ``(M,)`` float64 expected generated tokens per completion of each prompt (the store's
            length estimate; the population's for prompts never measured; NaN when unknown), or ``None``: what a
            token budget and token-balanced dispatch read.
    """

    prompt_ids: np.ndarray
    success_rate: np.ndarray
    attempts: np.ndarray
    successes: np.ndarray
    smoothed_rate: np.ndarray | None = None
    beta_a: np.ndarray | None = None
    beta_b: np.ndarray | None = None
    prior_attempts: np.ndarray | None = None
    expected_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.prompt_ids)

    @property
    def evidence(self) -> np.ndarray:
        """``(M,)`` scored completions plus prior pseudo-observations: 0 exactly for prompts nothing is known of."""
        if self.prior_attempts is None:
            return self.attempts
        return self.attempts + self.prior_attempts

    @classmethod
    def from_success_rates(cls, success_rates: np.ndarray, attempts: float = 8.0) -> PromptBatchStats:
        """Stats for prompts known only by a success rate, as if each had ``attempts`` scored completions.

        Lets stat-hungry allocators (Est, CERO) run from rates alone, e.g. in the simulator or a quick experiment:
        the estimators' readings with their default priors and no decay or forgetting.
        """
        rate = np.asarray(success_rates, dtype=np.float64)
        seen = ~np.isnan(rate)
        t = np.where(seen, attempts, 0.0)
        c = np.where(seen, np.nan_to_num(rate) * attempts, 0.0)
        return cls(
            prompt_ids=np.arange(len(rate), dtype=np.int64),
            success_rate=rate,
            attempts=t,
            successes=c,
            smoothed_rate=(EST_PRIOR_ALPHA + c) / (EST_PRIOR_ALPHA + EST_PRIOR_BETA + t),
            beta_a=POSTERIOR_PRIOR_A + c,
            beta_b=POSTERIOR_PRIOR_B + t - c,
        )

    def for_reader(self, reads: Iterable[str], reader: object) -> PromptBatchStats:
        """These stats as ``reader`` (an allocator declaring ``reads``) may read them: the fields of every estimator
        it does not declare stand in for values that raise an AssertionError naming ``reads`` when used.

        Raises:
            ValueError: when an estimator in ``reads`` was not read (its fields are None), naming the fix.

        Example:
            >>> stats = PromptBatchStats.from_success_rates([0.5]).for_reader(("epoch_rate",), "my allocator")
            >>> stats.success_rate.tolist()
            [0.5]
            >>> np.asarray(stats.smoothed_rate)
            Traceback (most recent call last):
            AssertionError: my allocator used stats.smoothed_rate, a reading of the 'decayed_rate' estimator, ...
        """
        reads = tuple(reads)
        hidden = {}
        for estimator, fields in ESTIMATOR_FIELDS.items():
            missing = [name for name in fields if getattr(self, name) is None]
            if estimator in reads and missing:
                raise ValueError(
                    f"{reader} reads {reads}, but these statistics were read without {estimator!r} "
                    f"({', '.join(missing)} is None): read them with PromptStatistics.batch(ids, reads={reads}), or "
                    f"give {', '.join(fields)} when building PromptBatchStats."
                )
            if estimator not in reads:
                hidden |= {name: _Undeclared(name, estimator, reads, reader) for name in fields}
        return dataclasses.replace(self, **hidden) if hidden else self


class _Undeclared:
    """Stands in for a field of an estimator an allocator's ``reads`` leaves out: any use of it raises."""

    __slots__ = ("_message",)

    def __init__(self, name: str, estimator: str, reads: tuple[str, ...], reader: object) -> None:
        self._message = (
            f"{reader} used stats.{name}, a reading of the {estimator!r} estimator, but its reads = {reads} does not "
            f"list it: add {estimator!r} to the allocator's `reads` (the store reads only the estimators declared)."
        )

    def __repr__(self) -> str:
        return "<not in reads>"

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(self._message)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # NumPy's and copy's probes for optional protocols: absent
            raise AttributeError(name)
        return self._fail()

    __array__ = __len__ = __iter__ = __getitem__ = __bool__ = __float__ = __int__ = __index__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail
    __pow__ = __rpow__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _fail


@dataclass(frozen=True)
class Allocation:
    """What an allocator decides for one set of prompts, in one value.

    Attributes:
        counts: ``(M,)`` int64 completions per prompt, summing to ``budget``.
        weights: ``(M,)`` float64 multiplier of the advantage of every completion of each prompt (Reinforce-Ada
            Est's hybrid weights), or None for none. Every sampling procedure applies it to every completion it
            trains for that prompt.
        metrics: scalars logged as ``allocation/<name>`` (e.g. CERO's price ``cero_mu``).
        prompt_ids: ``(M,)`` the prompt ids the counts belong to (set by ``Allocator.allocate``).
        budget: B the counts sum to (set by ``Allocator.allocate``).
        internals: what the allocator's own ``Allocator.end_step`` reads back (CERO's duals at decision time);
            not for users.
        made_by: ``id()`` of the allocator that made it (set by ``Allocator.checked``): a procedure holding
            several hands each its own allocations at ``end_step``. An id, not the object: the outcome is broadcast
            to every rank each step, and the allocator's state (CERO's duals per prompt) must not travel with it.
    """

    counts: np.ndarray
    weights: np.ndarray | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    prompt_ids: np.ndarray | None = None
    budget: int = 0
    internals: Mapping[str, Any] = field(default_factory=dict, repr=False)
    made_by: int | None = field(default=None, repr=False, compare=False)


def as_batch_stats(stats: PromptBatchStats | np.ndarray | list[float]) -> PromptBatchStats:
    """``stats`` itself, or success rates turned into stats (:meth:`PromptBatchStats.from_success_rates`), checked."""
    if not isinstance(stats, PromptBatchStats):
        rates = np.asarray(stats, dtype=np.float64)
        if rates.ndim != 1 or len(rates) == 0:
            raise ValueError(f"success_rates must be a non-empty 1-D array, got shape {rates.shape}.")
        stats = PromptBatchStats.from_success_rates(rates)
    if len(stats) == 0:
        raise ValueError("allocate needs at least one prompt; got empty stats.")
    finite = np.asarray(stats.success_rate)[~np.isnan(stats.success_rate)]
    if np.any((finite < 0) | (finite > 1)):
        raise ValueError("success_rates must lie in [0, 1] (NaN for unseen prompts); got values outside.")
    return stats


__all__ = [
    "ESTIMATOR_FIELDS",
    "EST_PRIOR_ALPHA",
    "EST_PRIOR_BETA",
    "POSTERIOR_PRIOR_A",
    "POSTERIOR_PRIOR_B",
    "Allocation",
    "PromptBatchStats",
    "as_batch_stats",
    "is_success",
]
