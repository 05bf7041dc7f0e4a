"""The three estimators of a prompt's success probability, one per kind of evidence (NumPy only).

Each owns its columns of the shared :class:`~.table.RowTable`, its settings, how a prompt's prior (s0, t0, from
:class:`~.prior.PriorCounts`) enters its reading, and its plain-dict state. ``name`` is what an allocator lists in its
``reads`` class attribute when it reads the estimator (docs/statistics.md has the table):

==================  =====================================  ==========================================================
estimator           ``PromptBatchStats`` field             reading, with s0 = t0 = 0 without a prior
==================  =====================================  ==========================================================
``epoch_rate``      ``success_rate``                       (c_last + s0) / (t_last + t0), Knapsack RL's p_i
``decayed_rate``    ``smoothed_rate``                      (alpha + n_pos + gamma^v s0) / (alpha + beta + n_tot +
                                                           gamma^v t0), Reinforce-Ada Est's p~_i
``posterior``       ``beta_a``, ``beta_b``                 Beta(a0 + s0 + S, b0 + (t0 - s0) + F), CERO's and
                                                           ``bayes_knapsack``'s posterior
==================  =====================================  ==========================================================

Every estimator sees the same evidence: per :meth:`observe` call (one generation batch), each visited row's
successes s and scored attempts t (NaN rewards already left out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from ..batch import EST_PRIOR_ALPHA, EST_PRIOR_BETA, ESTIMATOR_FIELDS, POSTERIOR_PRIOR_A, POSTERIOR_PRIOR_B
from ._checks import DAMAGED, check_at_most, check_decay, check_half_life, check_positive
from .columns import Columns, column_values
from .table import RowTable


class EpochRate(Columns):
    """Knapsack RL's p_i: the rate of the most recent completed epoch in which the prompt was attempted.

    Keeps c, t of the epoch in progress, of that last epoch, and over the whole run (the real counts that every
    allocator's ``attempts`` / ``successes`` read), and the number of completed epochs. Without a prior the rate is
    NaN before the prompt's first completed epoch (Knapsack RL's first epoch is plain GRPO); with one, the prior's
    s0, t0 are added at full weight after every epoch: it does not fade.

    Example:
        >>> from trl_adaptive.stats.table import RowTable
        >>> rate = EpochRate(RowTable((*EpochRate.columns, "prior_successes", "prior_attempts")))
        >>> rate.observe(rate.table.rows_adding(np.array([1, 2])), np.array([3.0, 0.0]), np.array([4.0, 4.0]))
        >>> np.isnan(rate.read(rate.table.gather(np.array([1])))).tolist()  # no completed epoch yet
        [True]
        >>> rate.end_epoch()
        >>> rate.read(rate.table.gather(np.array([1, 2, 9]))).tolist(), rate.epoch
        ([0.75, 0.0, nan], 1)
    """

    name: ClassVar[str] = "epoch_rate"
    fields: ClassVar[tuple[str, ...]] = ESTIMATOR_FIELDS[name]  # of PromptBatchStats
    columns: ClassVar[tuple[str, ...]] = (
        "current_successes",  # c, t of the epoch in progress
        "current_attempts",
        "last_successes",  # c, t of the most recent completed epoch in which the prompt was attempted
        "last_attempts",
        "total_successes",  # cumulative over the whole run
        "total_attempts",
    )
    whole: ClassVar[tuple[str, ...]] = columns

    def __init__(self, table: RowTable) -> None:
        super().__init__(table)
        self.epoch = 0

    @property
    def num_seen(self) -> int:
        """Rows attempted in some completed epoch."""
        return int(np.count_nonzero(self.table.column("last_attempts") > 0))

    def observe(self, rows: np.ndarray, successes: np.ndarray, attempts: np.ndarray) -> None:
        """Add one batch's counts to the epoch in progress and to the run's totals."""
        for prefix in ("current", "total"):
            self.table.column(f"{prefix}_successes")[rows] += successes
            self.table.column(f"{prefix}_attempts")[rows] += attempts

    def end_epoch(self) -> None:
        """Rows attempted in the closing epoch get it as their last epoch; the epoch in progress restarts at 0."""
        attempted = self.table.column("current_attempts") > 0
        for kind in ("successes", "attempts"):
            self.table.column(f"last_{kind}")[attempted] = self.table.column(f"current_{kind}")[attempted]
            self.table.column(f"current_{kind}")[:] = 0.0
        self.epoch += 1

    @staticmethod
    def read(g: Mapping[str, np.ndarray]) -> np.ndarray:
        """(c_last + s0) / (t_last + t0) from a :meth:`~.table.RowTable.gather`, NaN where the denominator is 0."""
        s = g["last_successes"] + g["prior_successes"]
        t = g["last_attempts"] + g["prior_attempts"]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(t > 0, s / t, np.nan)

    def check(self, arrays: Mapping[str, np.ndarray]) -> None:
        """No count of successes above its count of attempts (a rate above 1 would follow), and the epoch in progress
        and the last completed one, disjoint parts of the run, within the run's totals (successes and failures)."""
        ids, a = self.table.ids, arrays
        for prefix in ("current", "last", "total"):
            check_at_most(
                ids, f"{prefix}_successes", a[f"{prefix}_successes"], f"{prefix}_attempts", a[f"{prefix}_attempts"]
            )
        for kind in ("attempts", "successes"):
            for prefix in ("current", "last"):
                check_at_most(ids, f"{prefix}_{kind}", a[f"{prefix}_{kind}"], f"total_{kind}", a[f"total_{kind}"])
            both = a[f"current_{kind}"] + a[f"last_{kind}"]
            check_at_most(ids, f"current_{kind} + last_{kind}", both, f"total_{kind}", a[f"total_{kind}"])
        failures = {p: a[f"{p}_attempts"] - a[f"{p}_successes"] for p in ("current", "last", "total")}
        both = failures["current"] + failures["last"]
        check_at_most(ids, "current + last failures", both, "total failures", failures["total"])

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, **super().state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        epoch = state["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"PromptStatistics state: epoch must be an integer >= 0, got {epoch!r}.")
        if epoch == 0 and np.any(column_values(state["columns"], "last_attempts") > 0):
            raise ValueError(
                "PromptStatistics state: last_attempts > 0 at epoch 0, but no epoch has been completed to be the last "
                f"one. {DAMAGED}"
            )
        super().load_state_dict(state)
        self.epoch = epoch


class DecayedRate(Columns):
    """Reinforce-Ada Est's smoothed rate p~_i, from counts decayed by gamma per visit (never 0 or 1).

    Each :meth:`observe` call that scores a prompt is one visit: n_pos <- gamma n_pos + s, n_tot <- gamma n_tot + t
    (decay first, then add; Reinforce-Ada's Est decays by 0.9). A prior seeds the decayed counts and decays
    per visit like real evidence: v counts the visits since it was set, and it weighs gamma^v.

    Args:
        table: the row table.
        decay: gamma in (0, 1]; 1.0 keeps plain cumulative counts.
        prior_alpha: alpha > 0 of Est's Beta prior (Reinforce-Ada: 1.0).
        prior_beta: beta > 0 of Est's Beta prior (Reinforce-Ada: 16.0, so an unseen prompt has p~ = 1 / 17).

    Example:
        >>> from trl_adaptive.stats.table import RowTable
        >>> est = DecayedRate(RowTable((*DecayedRate.columns, "prior_successes", "prior_attempts")), decay=0.5)
        >>> rows = est.table.rows_adding(np.array([1]))
        >>> for s in (1.0, 2.0):  # two visits of 2 completions each
        ...     est.observe(rows, np.array([s]), np.array([2.0]), with_prior=np.array([False]))
        >>> est.read(est.table.gather(np.array([1, 2]))).round(4).tolist()  # (1 + 0.5 + 2) / (17 + 1 + 2), 1 / 17
        [0.175, 0.0588]
    """

    name: ClassVar[str] = "decayed_rate"
    fields: ClassVar[tuple[str, ...]] = ESTIMATOR_FIELDS[name]
    columns: ClassVar[tuple[str, ...]] = (
        "decayed_successes",  # n_pos
        "decayed_attempts",  # n_tot
        "prior_visits",  # v, visits since the row's prior was set
    )
    whole: ClassVar[tuple[str, ...]] = ("prior_visits",)

    def __init__(
        self,
        table: RowTable,
        decay: float = 0.9,
        prior_alpha: float = EST_PRIOR_ALPHA,
        prior_beta: float = EST_PRIOR_BETA,
    ) -> None:
        super().__init__(table)
        self.decay, self.prior_alpha, self.prior_beta = self.check_settings(decay, prior_alpha, prior_beta)

    @staticmethod
    def check_settings(decay: Any, prior_alpha: Any, prior_beta: Any, prefix: str = "") -> tuple[float, float, float]:
        """The three settings as floats; a ValueError naming ``prefix + name`` (e.g. ``est_decay``) and the fix."""
        why = "a pseudo-{} of Est's Beta prior, which keeps the smoothed rate off 0 and 1 (Reinforce-Ada Est: {})."
        return (
            check_decay(f"{prefix}decay", decay),
            check_positive(f"{prefix}prior_alpha", prior_alpha, why.format("success", EST_PRIOR_ALPHA)),
            check_positive(f"{prefix}prior_beta", prior_beta, why.format("failure", EST_PRIOR_BETA)),
        )

    @property
    def config(self) -> dict[str, float | None]:
        return {"decay": self.decay, "prior_alpha": self.prior_alpha, "prior_beta": self.prior_beta}

    def observe(self, rows: np.ndarray, successes: np.ndarray, attempts: np.ndarray, with_prior: np.ndarray) -> None:
        """One visit of ``rows``: decay their counts, add the batch's; ``with_prior`` rows count one more visit v."""
        n_pos, n_tot = self.table.column("decayed_successes"), self.table.column("decayed_attempts")
        n_pos[rows] = self.decay * n_pos[rows] + successes
        n_tot[rows] = self.decay * n_tot[rows] + attempts
        self.table.column("prior_visits")[rows[with_prior]] += 1.0

    def check(self, arrays: Mapping[str, np.ndarray]) -> None:
        """n_pos <= n_tot: both decay alike and each visit adds s <= t."""
        ids = self.table.ids
        check_at_most(
            ids, "decayed_successes", arrays["decayed_successes"], "decayed_attempts", arrays["decayed_attempts"]
        )

    def restart_prior(self, rows: np.ndarray) -> None:
        """The prior of ``rows`` was replaced: it starts again at full weight (v = 0)."""
        self.table.column("prior_visits")[rows] = 0.0

    def read(self, g: Mapping[str, np.ndarray]) -> np.ndarray:
        """p~ = (alpha + n_pos + gamma^v s0) / (alpha + beta + n_tot + gamma^v t0) from a gather."""
        scale = np.power(self.decay, g["prior_visits"])
        alpha, beta = self.prior_alpha, self.prior_beta
        return (alpha + g["decayed_successes"] + scale * g["prior_successes"]) / (
            alpha + beta + g["decayed_attempts"] + scale * g["prior_attempts"]
        )


class BetaPosterior(Columns):
    """The Beta posterior of the success probability that CERO and ``bayes_knapsack`` read, with optional forgetting.

    Keeps the evidence S, F (successes and failures). Without a half-life they are the cumulative counts, so the
    posterior is exactly Beta(a0 + s0 + c, b0 + t0 - s0 + t - c). With a half-life h (in steps, one step per
    :meth:`tick`), every step first multiplies S and F of every row by 2^(-1/h), visited or not, then adds its own
    counts: a completion scored k steps ago weighs 2^(-k/h), and a prompt not seen for long returns to its prior
    Beta(a0 + s0, b0 + t0 - s0). The prior's pseudo-counts never fade.

    Args:
        table: the row table.
        posterior_half_life: h > 0, or None (default) to never forget.
        posterior_prior_a, posterior_prior_b: a0, b0 > 0, the weak prior of every prompt (1, 1: CERO's uniform
            prior; 0.5, 0.5: Jeffreys').

    Example:
        >>> from trl_adaptive.stats.table import RowTable
        >>> post = BetaPosterior(RowTable((*BetaPosterior.columns, "prior_successes", "prior_attempts")), 1.0)
        >>> post.tick(); post.observe(post.table.rows_adding(np.array([1])), np.array([2.0]), np.array([2.0]))
        >>> post.tick()  # one step later the evidence weighs half
        >>> [x.tolist() for x in post.read(post.table.gather(np.array([1])))]
        [[2.0], [1.0]]
    """

    name: ClassVar[str] = "posterior"
    fields: ClassVar[tuple[str, ...]] = ESTIMATOR_FIELDS[name]
    columns: ClassVar[tuple[str, ...]] = ("posterior_successes", "posterior_failures")

    def __init__(
        self,
        table: RowTable,
        posterior_half_life: float | None = None,
        posterior_prior_a: float = POSTERIOR_PRIOR_A,
        posterior_prior_b: float = POSTERIOR_PRIOR_B,
    ) -> None:
        super().__init__(table)
        self.half_life = check_half_life("posterior_half_life", posterior_half_life)
        why = "a Beta prior's pseudo-count (1.0: uniform, CERO's default; 0.5: Jeffreys)."
        self.prior_a = check_positive("posterior_prior_a", posterior_prior_a, why)
        self.prior_b = check_positive("posterior_prior_b", posterior_prior_b, why)

    @property
    def config(self) -> dict[str, float | None]:
        return {
            "posterior_half_life": self.half_life,
            "posterior_prior_a": self.prior_a,
            "posterior_prior_b": self.prior_b,
        }

    @property
    def decay(self) -> float:
        """2^(-1/h), the factor the evidence is multiplied by at every step (1.0: never forgets)."""
        return 1.0 if self.half_life is None else 2.0 ** (-1.0 / self.half_life)

    def tick(self) -> None:
        """One step of the posterior's clock: S, F <- 2^(-1/h) S, 2^(-1/h) F for every row (nothing without h)."""
        if self.half_life is None:
            return
        factor = self.decay
        for name in self.columns:
            self.table.column(name)[:] *= factor

    def observe(self, rows: np.ndarray, successes: np.ndarray, attempts: np.ndarray) -> None:
        """Add one batch's successes to S and its failures to F."""
        self.table.column("posterior_successes")[rows] += successes
        self.table.column("posterior_failures")[rows] += attempts - successes

    def read(self, g: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) = (a0 + s0 + S, b0 + (t0 - s0) + F) from a gather."""
        prior_s, prior_t = g["prior_successes"], g["prior_attempts"]
        return (
            self.prior_a + prior_s + g["posterior_successes"],
            self.prior_b + (prior_t - prior_s) + g["posterior_failures"],
        )

    def check_within(self, total_successes: np.ndarray, total_attempts: np.ndarray) -> None:
        """The evidence never exceeds the cumulative counts it was taken from (forgetting only shrinks it)."""
        ids, col, why = self.table.ids, self.table.column, "the posterior's evidence exceeds the cumulative counts"
        check_at_most(ids, "posterior_successes", col("posterior_successes"), "total_successes", total_successes, why)
        failures, name = total_attempts - total_successes, "total_attempts - total_successes"
        check_at_most(ids, "posterior_failures", col("posterior_failures"), name, failures, why)


def check_between(table: RowTable) -> None:
    """The invariants between the parts of a loaded store: every estimator observed the same evidence, so neither
    Est's decayed counts nor the posterior's evidence exceeds the run's cumulative counts (decay and forgetting only
    shrink them), and a row counts visits of its prior only while it has one (``prior_visits`` restarts with it).

    Raises:
        ValueError: naming the two fields and the first prompt ids where an invariant fails.
    """
    ids, col = table.ids, table.column
    for kind in ("attempts", "successes"):
        check_at_most(ids, f"decayed_{kind}", col(f"decayed_{kind}"), f"total_{kind}", col(f"total_{kind}"))
    no_prior = np.flatnonzero((col("prior_visits") > 0) & (col("prior_attempts") == 0))
    if len(no_prior):
        raise ValueError(
            f"PromptStatistics state: prior_visits > 0 for prompt ids {ids[no_prior][:5].tolist()}, which have no "
            f"prior (prior_attempts = 0). {DAMAGED}"
        )
    BetaPosterior(table).check_within(col("total_successes"), col("total_attempts"))


ESTIMATORS: tuple[type[Columns], ...] = (EpochRate, DecayedRate, BetaPosterior)
"""The estimators, by the ``name`` an allocator's ``reads`` uses."""


def check_reads(reads: Iterable[str] | None) -> tuple[str, ...]:
    """``reads`` as a tuple of estimator names, every estimator's when None; a ValueError names an unknown one.

    Example:
        >>> check_reads(None), check_reads(["posterior"])
        (('epoch_rate', 'decayed_rate', 'posterior'), ('posterior',))
    """
    known = tuple(estimator.name for estimator in ESTIMATORS)
    if reads is None:
        return known
    names = (reads,) if isinstance(reads, str) else tuple(reads)
    unknown = sorted(set(names) - set(known))
    if isinstance(reads, str) or unknown:
        raise ValueError(
            f"reads={reads!r} must be a sequence of estimator names, among {list(known)}; unknown: {unknown}."
        )
    return names
