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

from ..batch import Allocation, PromptBatchStats
from .base import Allocator, largest_remainder


def water_fill(weights: np.ndarray, total: float, low: float, high: float) -> np.ndarray:
    """Real shares x_i = clip(lambda * w_i, low, high) with sum_i x_i = total: proportional to w_i within the bounds.

    Water-filling on both bounds: a prompt whose proportional share lambda * w_i is below ``low`` is raised to
    ``low``, one above ``high`` is cut to ``high``, and every other prompt gets exactly lambda * w_i, with one common
    lambda > 0 chosen so that the shares sum to ``total``. So x_i / w_i is the same constant for every prompt strictly
    inside the bounds. g(lambda) = sum_i clip(lambda * w_i, low, high) is continuous, non-decreasing and linear
    between the breakpoints low / w_i and high / w_i; the solution is found exactly by evaluating g at the sorted
    breakpoints (prefix sums over the sorted weights), locating the segment that reaches ``total`` and solving the
    linear equation on it, in O(M log M).

    Args:
        weights: ``(M,)`` finite, strictly positive prompt weights.
        total: the sum the shares must reach, with M * low <= total <= M * high.
        low, high: the bounds of every share, 0 <= low <= high.

    Returns:
        ``(M,)`` float64 shares within ``[low, high]`` summing to ``total`` (to floating-point rounding).

    Raises:
        ValueError: on NaN, infinite, zero or negative weights, on ``low > high`` or ``low < 0``, and when ``total``
            is out of reach of the bounds, naming the numbers.

    Example:
        >>> water_fill(np.array([1.0, 1.0, 8.0]), total=20, low=2, high=10).tolist()  # lambda = 5, 8 * 5 cut to 10
        [5.0, 5.0, 10.0]
        >>> water_fill(np.array([1.0, 4.0, 5.0]), total=20, low=3, high=10).tolist()  # 1 * lambda < 3: raised to 3
        [3.0, 7.555555555555555, 9.444444444444445]
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1:
        raise ValueError(f"weights must be a 1-D array, got shape {w.shape}.")
    bad = ~np.isfinite(w) | (w <= 0)
    if bad.any():
        raise ValueError(
            f"weights must be finite and > 0; got {w[bad][:5].tolist()} at positions "
            f"{np.flatnonzero(bad)[:5].tolist()}. Fix the prompt weights (Est's come from p~ in (0, 1], never 0)."
        )
    if not (np.isfinite(total) and np.isfinite(low) and np.isfinite(high)) or not 0 <= low <= high:
        raise ValueError(f"water_fill needs finite bounds with 0 <= low <= high; got low={low}, high={high}.")
    m = len(w)
    if not m * low <= total <= m * high:
        raise ValueError(
            f"water_fill: total={total} cannot be split over M={m} prompts with low={low} and high={high}: it must "
            f"lie in [M * low, M * high] = [{m * low}, {m * high}]. Change the total (budget) or the bounds "
            "(min_rollouts / max_rollouts)."
        )
    if total <= m * low:  # also covers M = 0 and low == high
        return np.full(m, float(low))
    if total >= m * high:
        return np.full(m, float(high))

    # g at every breakpoint, from the sorted weights: prompts with w <= low / lam sit at low, w >= high / lam at high.
    ws = np.sort(w)
    prefix = np.concatenate(([0.0], np.cumsum(ws)))
    lams = np.unique(np.concatenate((low / w, high / w)))
    lams = lams[lams > 0]  # with low = 0 the low breakpoints are all 0; g(0) = M * low is prepended below
    with np.errstate(over="ignore"):  # bound / a tiny breakpoint may overflow to inf, which sorts last: correct
        n_low = np.searchsorted(ws, low / lams, side="right")
        n_not_high = np.maximum(np.searchsorted(ws, high / lams, side="left"), n_low)
    g = n_low * low + lams * (prefix[n_not_high] - prefix[n_low]) + (m - n_not_high) * high
    lams, g = np.concatenate(([0.0], lams)), np.concatenate(([m * low], g))
    g = np.maximum.accumulate(g)  # g is non-decreasing; remove rounding wiggles before the search
    # g(0) = M * low < total < M * high = g(lams[-1]): the solution lies in (lams[k - 1], lams[k]].
    k = int(np.clip(np.searchsorted(g, total, side="left"), 1, len(lams) - 1))
    # Inside the open segment no prompt sits on a breakpoint, so its midpoint classifies every prompt exactly.
    mid = 0.5 * (lams[k - 1] + lams[k])
    at_low = mid * w <= low
    at_high = mid * w >= high
    free = ~(at_low | at_high)
    free_weight = float(w[free].sum())
    fixed = at_low.sum() * low + at_high.sum() * high
    lam = (total - fixed) / free_weight if free_weight > 0 else mid
    x = np.where(at_low, float(low), np.where(at_high, float(high), np.clip(lam * w, low, high)))
    if not abs(float(x.sum()) - total) <= 1e-9 * max(1.0, abs(total)):  # a guard, not a expected path
        raise AssertionError(f"water_fill: shares sum to {x.sum()!r}, expected {total}; weights {w.tolist()}.")
    return x


@dataclass
class ReinforceAdaEstAllocator(Allocator):
    """Reinforce-Ada Est: N_i = clip(lambda * w_i, N_low, N_up), w_i = p~_i^(-1/2) (hybrid) or p~_i^(-1) (inverse).

    Paper: W. Xiong, C. Ye, B. Liao, H. Dong, X. Xu, C. Monz, J. Bian, N. Jiang and T. Zhang, "Reinforce-Ada: An
    Adaptive Sampling Framework under Non-linear RL Objectives", 2025, arXiv 2510.04996. Implements Sec. 3.1
    (Reinforce-Ada-Est), with the log objective's 1 / p weight of Sec. 2.2.

    The budget is split in proportion to w_i, as the paper's allocation N_i proportional to w_i, within the bounds:
    a prompt whose proportional share is below ``min_rollouts`` is raised to it, one above ``max_rollouts`` is cut to
    it, and the others get lambda * w_i with one common lambda chosen so that the shares sum to B (water-filling on
    both bounds, :func:`water_fill`); largest-remainder rounding then makes the counts integers summing exactly to B
    (each the floor or ceiling of its share). p~_i is ``stats.smoothed_rate`` (Est's (alpha + n_pos) /
    (alpha + beta + n_tot), never 0 or 1).

    With ``weighting="hybrid"`` (the paper's Est, Sec. 2.2 / 3.1) the allocation's ``weights`` are the residual
    1 / sqrt(p~_i) advantage weight, so that for every prompt strictly inside the bounds allocation x weight is
    proportional to the log objective's 1 / p~_i (exactly on the real shares, within rounding on the integer counts);
    with ``weighting="inverse"`` (implicit weighting) the allocation carries all of it and the weights are None.
    App. C.2 of the paper reports implicit weighting over-samples the hardest prompts; hybrid is the default.

    Args:
        min_rollouts: N_low, the fewest completions of a prompt (>= 2); easy prompts whose proportional share falls
            below it are raised to it.
        max_rollouts: N_up, the per-prompt cap (default 32: the most completions Reinforce-Ada's Seq draws per prompt,
            4 rounds of 8, and 4x the usual num_generations of 8). The official ``hanze`` branch has no cap, and a
            never-solved prompt's 1 / p~ (about 97 after 80 failures) can take the batch; the cap prevents that.
        weighting: ``"hybrid"`` (w = p~^(-1/2) plus residual weights) or ``"inverse"`` (w = p~^(-1), no weights).
        unseen_weight: how prompts nothing is known of (no scored completion and no prior, ``stats.evidence == 0``)
            are weighted. ``"batch_mean"`` (default) gives them the mean w of the batch's seen prompts, so an unseen
            prompt gets about the uniform share B / M, neither hard nor easy: an unseen prompt is not a hard one. A
            batch of unseen prompts only (the first epoch) is split uniformly. ``"prior"`` uses the prior's
            p~ = 1 / 17 like the official code, which treats every new prompt as a hard one.

    Warning:
        Departs from the official code: a cap per prompt, no "+1 for everyone then trim", unseen prompts weighted
        as average by default, and the residual weight of the hybrid is not adjusted for a clamped prompt: a capped
        prompt's total weight N_i w_i falls short of 1 / p~_i (compensating would bring back the variance the cap
        removes), and a prompt raised to N_low gets more than its proportional share (a group of one has no
        baseline, so N_low is a floor, not a target).

    Example:
        >>> from trl_adaptive.allocation import PromptBatchStats
        >>> est = ReinforceAdaEstAllocator(weighting="inverse")
        >>> stats = PromptBatchStats.from_success_rates([0.5, 0.5, 0.0, 1.0])  # p~ = 5/25, 5/25, 1/25, 9/25
        >>> est.prompt_weights(stats).round(2).tolist()  # w = 1 / p~
        [5.0, 5.0, 25.0, 2.78]
        >>> est.allocate(stats, budget=24).counts.tolist()  # 22 * (5, 5, 25) / 35, 2.78 * lam < 2
        [3, 3, 16, 2]
        >>> hybrid = ReinforceAdaEstAllocator()  # w = p~^(-1/2) = 2.24, 2.24, 5, 1.67; shares 4.82, 4.82, 10.77, 3.59
        >>> allocation = hybrid.allocate(stats, budget=24); allocation.counts.tolist()
        [5, 5, 11, 3]
        >>> allocation.weights.round(3).tolist()  # w * 24 / sum_j N_j w_j
        [0.652, 0.652, 1.457, 0.486]
    """

    name: ClassVar[str] = "reinforce_ada_est"
    reads: ClassVar[tuple[str, ...]] = ("decayed_rate",)  # smoothed_rate (and the real counts' evidence)

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
            unseen = np.asarray(stats.evidence) <= 0
            if unseen.all():
                w = np.ones_like(w)
            elif unseen.any():
                w[unseen] = w[~unseen].mean()
        return w

    def _allocate(self, stats: PromptBatchStats, budget: int) -> Allocation:
        shares = water_fill(self.prompt_weights(stats), budget, self.min_rollouts, self.max_rollouts)
        counts = largest_remainder(shares, budget, self.min_rollouts, self.max_rollouts)
        return Allocation(counts, weights=self.residual_weights(counts, stats))

    def residual_weights(self, counts: np.ndarray, stats: PromptBatchStats) -> np.ndarray | None:
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
