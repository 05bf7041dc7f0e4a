"""Reinforce-Ada Est (arXiv 2510.04996, Sec. 3.1): completions proportional to a power of 1 / p~, capped per prompt.

The paper's log objective f(p) = log p weights each prompt's gradient by 1 / p (Sec. 2.2). Est realises that weight
with an online pass-rate estimate p~ (decayed counts plus a Beta prior, so p~ is never 0 or 1), either fully by the
allocation (*implicit* weighting, N_i proportional to 1 / p~_i) or, the paper's *hybrid* (Sec. 2.2, Sec. 3.1, App.
C.2), half by the allocation (N_i proportional to 1 / sqrt(p~_i)) and half by a residual 1 / sqrt(p~_i) weight on
each completion's advantage. The smoothed rate comes from :class:`trl_adaptive.stats.PromptStatistics` (official
``hanze`` branch: p~ = (1 + n_pos) / (17 + n_tot), counts decayed by 0.9 per visit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from .base import Allocator, PromptBatchStats, largest_remainder, register_allocator


def water_fill(weights: np.ndarray, total: int, low: int, high: int) -> np.ndarray:
    """Real shares x_i = min(high, low + lambda * w_i) with sum_i x_i = total (lambda >= 0 found by water-filling).

    Every prompt first gets ``low``; the remainder R = total - M * low is split in proportion to ``weights``; a share
    above ``high`` is cut to ``high`` and what the cut removes is split again over the uncut prompts, in proportion to
    their weights, until no share exceeds ``high``. Requires M * low <= total <= M * high and positive weights.

    Example:
        >>> water_fill(np.array([1.0, 1.0, 8.0]), total=20, low=2, high=10).tolist()
        [5.0, 5.0, 10.0]
    """
    w = np.asarray(weights, dtype=np.float64)
    extra = np.zeros(len(w))
    free = np.ones(len(w), dtype=bool)
    room = float(high - low)
    remaining = float(total - len(w) * low)
    while remaining > 0 and free.any():
        share = remaining * w / w[free].sum()
        over = free & (share >= room)
        if not over.any():
            extra[free] = share[free]
            break
        extra[over] = room
        free &= ~over
        remaining = float(total - len(w) * low) - extra[~free].sum()
    return low + extra


@register_allocator
@dataclass
class ReinforceAdaEstAllocator(Allocator):
    """Reinforce-Ada Est: N_i = min(N_up, N_low + lambda * w_i), w_i = p~_i^(-1/2) (hybrid) or p~_i^(-1) (inverse).

    Each prompt first gets ``min_rollouts``; the rest of the budget is split in proportion to w_i, every prompt capped
    at ``max_rollouts`` with what the cap removes redistributed over the others (water-filling, :func:`water_fill`);
    largest-remainder rounding then makes the counts integers summing exactly to B. p~_i is
    ``stats.smoothed_rate`` (Est's (alpha + n_pos) / (alpha + beta + n_tot), never 0 or 1).

    With ``weighting="hybrid"`` (the paper's Est, Sec. 2.2 / 3.1) :meth:`completion_weights` returns the residual
    1 / sqrt(p~_i) advantage weight, so allocation x weight gives the log objective's 1 / p_i; with
    ``weighting="inverse"`` (implicit weighting) the allocation carries all of it and the weights are None. App. C.2
    of the paper reports implicit weighting over-samples the hardest prompts; hybrid is the default.

    Args:
        min_rollouts: N_low, completions every prompt gets first (>= 2).
        max_rollouts: N_up, the per-prompt cap (default 32: the most completions Reinforce-Ada's Seq draws per prompt,
            4 rounds of 8, and 4x the usual num_generations of 8). The official ``hanze`` branch has no cap, and a
            never-solved prompt's 1 / p~ (about 97 after 80 failures) can take the batch; the cap prevents that.
        weighting: ``"hybrid"`` (w = p~^(-1/2) plus residual weights) or ``"inverse"`` (w = p~^(-1), no weights).
        unseen_weight: how prompts without any scored completion (``stats.attempts == 0``) are weighted.
            ``"batch_mean"`` (default) gives them the mean w of the batch's seen prompts, so an unseen prompt gets
            about the uniform share B / M, neither hard nor easy (DESIGN 2.2: unseen prompts are not hard). A batch
            of unseen prompts only (the first epoch) is split uniformly. ``"prior"`` uses the prior's p~ = 1 / 17
            like the official code, which treats every new prompt as a hard one.

    Warning:
        Departs from the official code: a cap per prompt, no "+1 for everyone then trim", unseen prompts weighted
        as average by default, and the residual weight of the hybrid is not raised to make up for a cap (a capped
        prompt's total weight N_i w_i falls short of 1 / p~_i; compensating would bring back the variance the cap
        removes).

    Example:
        >>> from trl_adaptive.allocation import PromptBatchStats
        >>> est = ReinforceAdaEstAllocator(weighting="inverse")
        >>> stats = PromptBatchStats.from_success_rates([0.5, 0.5, 0.0])  # p~ = 5/25, 5/25, 1/25
        >>> est.allocate([0.5, 0.5, 0.0], budget=20, stats=stats).tolist()  # 2 + 14 * (5, 5, 25) / 35
        [4, 4, 12]
        >>> hybrid = ReinforceAdaEstAllocator()  # w = p~^(-1/2) = 2.236, 2.236, 5
        >>> counts = hybrid.allocate([0.5, 0.5, 0.0], budget=20, stats=stats); counts.tolist()
        [5, 5, 10]
        >>> hybrid.completion_weights(counts, stats).round(3).tolist()  # w * 20 / (5 * 2.236 * 2 + 10 * 5)
        [0.618, 0.618, 1.382]
    """

    name: ClassVar[str] = "reinforce_ada_est"

    max_rollouts: int = 32
    weighting: Literal["hybrid", "inverse"] = "hybrid"
    unseen_weight: Literal["batch_mean", "prior"] = "batch_mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weighting not in ("hybrid", "inverse"):
            raise ValueError(
                f"weighting={self.weighting!r}: use 'hybrid' (N ~ 1/sqrt(p), the paper's Est) or 'inverse' (N ~ 1/p)."
            )
        if self.unseen_weight not in ("batch_mean", "prior"):
            raise ValueError(
                f"unseen_weight={self.unseen_weight!r}: use 'batch_mean' (unseen prompts get an average share) or "
                "'prior' (unseen prompts weighted by the prior's p~, as the official code)."
            )

    def prompt_weights(self, stats: PromptBatchStats) -> np.ndarray:
        """w_i = p~_i^(-1/2) (hybrid) or p~_i^(-1) (inverse), with unseen prompts handled by ``unseen_weight``."""
        p = np.asarray(stats.smoothed_rate, dtype=np.float64)
        if np.any(~np.isfinite(p) | (p <= 0) | (p > 1)):
            raise ValueError("stats.smoothed_rate must lie in (0, 1]; Est's prior keeps it away from 0.")
        w = p ** (-0.5 if self.weighting == "hybrid" else -1.0)
        if self.unseen_weight == "batch_mean":
            unseen = np.asarray(stats.attempts) <= 0
            if unseen.all():
                w = np.ones_like(w)
            elif unseen.any():
                w[unseen] = w[~unseen].mean()
        return w

    def _allocate(self, success_rates: np.ndarray, budget: int, stats: PromptBatchStats) -> np.ndarray:
        shares = water_fill(self.prompt_weights(stats), budget, self.min_rollouts, self.max_rollouts)
        return largest_remainder(shares, budget, self.min_rollouts, self.max_rollouts)

    def completion_weights(self, counts: np.ndarray, stats: PromptBatchStats) -> np.ndarray | None:
        """Hybrid's residual weight v_i = w_i / (sum_j N_j w_j / sum_j N_j), w_i = p~_i^(-1/2); None for inverse.

        Normalised so that the mean weight over the batch's completions is 1 (sum_i N_i v_i = sum_i N_i): the weights
        move gradient between prompts without changing the loss scale, so the learning rate keeps its meaning.
        Use the same ``stats`` as the allocation (before this batch's rewards update them).

        Returns:
            ``(M,)`` float64 multiplier for the advantage of every completion of prompt i, or None.
        """
        if self.weighting == "inverse":
            return None
        counts = np.asarray(counts, dtype=np.float64)
        if counts.shape != (len(stats),):
            raise ValueError(f"counts has shape {counts.shape}, expected ({len(stats)},) to match stats.")
        w = self.prompt_weights(stats)
        total = counts.sum()
        if total <= 0:
            return np.ones_like(w)
        return w * total / float(np.dot(counts, w))


__all__ = ["ReinforceAdaEstAllocator", "water_fill"]
