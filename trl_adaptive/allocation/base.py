"""The allocator interface shared by every strategy (names are registered in ``trl_adaptive.strategies``).

An allocator answers one question: how many completions does each prompt of this generation batch get, so that the
counts sum exactly to the budget? Everything here is NumPy; nothing imports torch or trl.

Contract (checked for every registered allocator by ``tests/allocation/test_allocator_contract.py``):

- ``allocate(stats, budget)`` returns an :class:`Allocation`: ``counts``, an ``int64`` array of shape ``(M,)`` with
  ``sum == budget``, every entry ``0`` or in ``[min_rollouts, max_rollouts]`` (only allocators with
  ``allows_zero = True`` may return ``0``: a prompt skipped this step); ``weights``, a per-prompt multiplier of each
  completion's advantage, or ``None``; ``metrics`` to log. ``stats`` may be plain success rates (NaN = never seen).
- The result is a deterministic function of the inputs and the allocator's state; ``allocate`` changes no state.
  State moves once per training step in ``end_step(allocations)``.
- ``state_dict()`` is JSON-serialisable and ``load_state_dict(state_dict())`` restores the allocator exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._validate import check_int, is_int
from ..batch import Allocation, PromptBatchStats, as_batch_stats


@dataclass
class Allocator:
    """Base class of allocation strategies. Subclasses set ``name`` and implement :meth:`_allocate`.

    ``_allocate(stats, budget)`` returns the counts, or an :class:`Allocation` to add per-prompt advantage weights or
    metrics; :meth:`allocate` checks the result against the bounds. Register the class
    (``trl_adaptive.strategies.register_allocator``) to make it a config name.

    Example (a user-written allocator; its weights scale the advantages under every sampling procedure):
        >>> @dataclass
        ... class HalfAndHalf(Allocator):
        ...     name: ClassVar[str] = "half_and_half"  # strategies.register_allocator makes it a config name
        ...     def _allocate(self, stats, budget):
        ...         counts = largest_remainder(np.full(len(stats), budget / len(stats)), budget)
        ...         hard = np.nan_to_num(stats.success_rate, nan=0.5) < 0.5
        ...         return Allocation(counts, weights=np.where(hard, 1.5, 0.5))
        >>> HalfAndHalf().allocate([0.1, 0.9], budget=8).weights.tolist()
        [1.5, 0.5]

    Args:
        min_rollouts: N_low, the fewest completions a prompt that is sampled at all receives (>= 2: a group of one
            has no baseline).
        max_rollouts: N_up, the most completions one prompt may receive in one generation batch.
    """

    name: ClassVar[str] = ""
    # True for strategies that may skip a prompt in a step (CERO); others give every prompt >= min_rollouts.
    allows_zero: ClassVar[bool] = False
    # The store's estimators the allocation reads (trl_adaptive/stats/estimators.py: "epoch_rate", "decayed_rate",
    # "posterior"), so the config can tell which store settings matter and the store reads only these. Undeclared:
    # assumed to read all three. `allocate` hands `_allocate` no other estimator's field (PromptBatchStats.for_reader).
    reads: ClassVar[tuple[str, ...]] = ("epoch_rate", "decayed_rate", "posterior")

    min_rollouts: int = 2
    max_rollouts: int = 128

    def __post_init__(self) -> None:
        check_rollout_bounds(self.min_rollouts, self.max_rollouts)

    # -- the public entry point -------------------------------------------------------------------------------------
    def allocate(self, stats: PromptBatchStats | np.ndarray | list[float], budget: int) -> Allocation:
        """Counts per prompt for this generation batch, with any per-prompt advantage weights and metrics.

        Args:
            stats: the per-prompt statistics of the M prompts (``PromptStatistics.batch(ids, reads=self.reads)``:
                the estimators of ``reads`` must be there), or just their success rates p_i (NaN for prompts never
                seen), read as :meth:`PromptBatchStats.from_success_rates`.
            budget: B, total completions of the generation batch; the counts sum to exactly B.

        Returns:
            an :class:`Allocation`: ``counts`` ``(M,)`` int64 with ``sum == budget`` within the bounds, ``weights``
            ``(M,)`` or None, ``metrics``. Calling ``allocate`` changes no state: a stateful strategy (CERO) moves
            its state in :meth:`end_step`, once per step.
        """
        stats = as_batch_stats(stats)
        self.check_budget(len(stats), budget)
        result = self._allocate(stats.for_reader(self.reads, self), int(budget))
        if not isinstance(result, Allocation):
            result = Allocation(counts=result)
        return self.checked(result, stats, int(budget))

    def checked(self, allocation: Allocation, stats: PromptBatchStats, budget: int) -> Allocation:
        """``allocation`` bound to ``stats`` and ``budget`` after the contract's guard: every path that hands counts to
        a sampler (``allocate``, ``allocate_remaining``, ``allocate_paced``) passes here, so a strategy bug fails at
        the boundary, not as a hang across ranks."""
        counts = np.asarray(allocation.counts)
        if counts.shape != (len(stats),) or counts.dtype.kind not in "iu":
            raise AssertionError(
                f"{self!r} returned counts of shape {counts.shape} and dtype {counts.dtype}; expected ({len(stats)},) "
                "integers, one per prompt."
            )
        counts = counts.astype(np.int64)
        _check_counts(counts, budget, self)
        weights = allocation.weights
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64)
            if weights.shape != counts.shape or np.any(~np.isfinite(weights) | (weights < 0)):
                raise AssertionError(
                    f"{self!r} returned advantage weights {weights.tolist()[:8]}: they must be finite, >= 0 and one "
                    "per prompt."
                )
        return dataclasses.replace(
            allocation,
            counts=counts,
            weights=weights,
            prompt_ids=np.asarray(stats.prompt_ids),
            budget=budget,
            made_by=id(self),
        )

    def check_budget(self, num_prompts: int, budget: int) -> None:
        """Raise a ValueError naming the numbers when ``budget`` cannot be split over ``num_prompts`` prompts."""
        if not is_int(budget):
            raise ValueError(f"budget must be an integer number of completions, got {budget!r}.")
        low = 0 if self.allows_zero else num_prompts * self.min_rollouts
        high = num_prompts * self.max_rollouts
        if self.allows_zero and budget > 0 and budget < self.min_rollouts:
            raise ValueError(f"budget={budget} is below min_rollouts={self.min_rollouts}: no prompt can be sampled.")
        if not low <= budget <= high:
            raise ValueError(
                f"budget={budget} cannot be split over {num_prompts} prompts with min_rollouts={self.min_rollouts} "
                f"and max_rollouts={self.max_rollouts}: it must lie in [{low}, {high}]. Change the budget "
                "(num_generations x prompts per batch) or the min_rollouts / max_rollouts bounds."
            )

    def _allocate(self, stats: PromptBatchStats, budget: int) -> np.ndarray | Allocation:
        """The strategy: ``(M,)`` integer counts summing to ``budget``, or an :class:`Allocation` to add weights."""
        raise NotImplementedError

    # -- state ------------------------------------------------------------------------------------------------------
    def end_step(self, allocations: Sequence[Allocation]) -> None:
        """Move the strategy's state once per training step, from every allocation the step made (the batch's first,
        then those of prompts drawn later in the step). Stateless strategies do nothing."""

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable strategy state (empty for stateless strategies)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} is stateless but got state keys {sorted(state)}.")


def _check_counts(counts: np.ndarray, budget: int, allocator: Allocator) -> None:
    """Guard the contract at the boundary: a strategy bug must fail here, not as a hang across ranks."""
    if counts.ndim != 1 or int(counts.sum()) != budget:
        raise AssertionError(f"{allocator!r} returned counts summing to {int(counts.sum())}, expected {budget}.")
    sampled = counts[counts != 0]
    zero_ok = allocator.allows_zero or not np.any(counts == 0)
    if not zero_ok or np.any(sampled < allocator.min_rollouts) or np.any(sampled > allocator.max_rollouts):
        raise AssertionError(f"{allocator!r} returned counts outside its bounds: {counts.tolist()}.")


def check_rollout_bounds(min_rollouts: int, max_rollouts: int) -> None:
    """The one rule for N_low and N_up: integers with 2 <= N_low <= N_up."""
    check_int(
        "min_rollouts",
        min_rollouts,
        minimum=2,
        reason="a group of one completion has no baseline and gets zero advantage",
        fix="Set min_rollouts=2 or more.",
    )
    check_int(
        "max_rollouts",
        max_rollouts,
        minimum=min_rollouts,
        minimum_name="min_rollouts",
        fix="Raise max_rollouts or lower min_rollouts.",
    )


def largest_remainder(shares: np.ndarray, total: int, low: int = 0, high: int | None = None) -> np.ndarray:
    """Round real ``shares`` (summing to ``total``, within ``[low, high]``) to integers with the same sum and bounds.

    Hamilton's method with the bounds enforced: floor and clip, then give the leftover units one each to the largest
    fractional parts still below ``high`` (ties to the lower index, so the result is deterministic), or take them from
    the smallest fractional parts above ``low`` when floating error overshoots. When the shares sum to ``total`` and
    lie within the bounds, every count is the floor or the ceiling of its share (``|N_i - x_i| < 1``).

    Raises:
        ValueError: if a share is NaN, infinite or negative, if ``total`` is not a whole number, if ``low > high``,
            or if ``total`` is out of reach of the bounds (``M * low <= total <= M * high`` must hold), checked
            before any rounding, so no input can make it loop.

    Example:
        >>> largest_remainder(np.array([2.5, 2.5, 3.0]), 8).tolist()
        [3, 2, 3]
    """
    shares = np.asarray(shares, dtype=np.float64)
    if shares.ndim != 1:
        raise ValueError(f"shares must be a 1-D array, got shape {shares.shape}.")
    bad = ~np.isfinite(shares) | (shares < 0)
    if bad.any():
        raise ValueError(
            f"shares must be finite and >= 0; got {shares[bad][:5].tolist()} at positions "
            f"{np.flatnonzero(bad)[:5].tolist()}. Fix the strategy that produced them."
        )
    if not np.isfinite(total) or total != int(total):
        raise ValueError(f"total={total!r} must be a whole number of completions.")
    total = int(total)
    if high is not None and low > high:
        raise ValueError(f"low={low} > high={high}: no count can satisfy both bounds; swap or widen them.")
    num = len(shares)
    reach_high = num * high if high is not None else (float("inf") if num else 0)
    if not num * low <= total <= reach_high:
        raise ValueError(
            f"largest_remainder: total={total} cannot be split over M={num} prompts with low={low} and high={high}: "
            f"it must lie in [M * low, M * high] = [{num * low}, {reach_high}]. Change the total or the bounds "
            "(e.g. the budget or min_rollouts / max_rollouts)."
        )
    upper = np.iinfo(np.int64).max if high is None else high
    counts = np.clip(np.floor(shares + 1e-9), low, upper).astype(np.int64)
    frac = shares - counts
    leftover = total - int(counts.sum())
    # Each pass moves at least one unit: the feasibility check above guarantees a count below ``upper`` while
    # leftover > 0 (sum < total <= M * upper) and one above ``low`` while leftover < 0 (sum > total >= M * low).
    while leftover > 0:
        order = np.argsort(-frac, kind="stable")
        order = order[counts[order] < upper][:leftover]
        counts[order] += 1
        frac[order] -= 1.0
        leftover -= len(order)
    while leftover < 0:
        order = np.argsort(frac, kind="stable")
        order = order[counts[order] > low][:-leftover]
        counts[order] -= 1
        frac[order] += 1.0
        leftover += len(order)
    return counts


def fill_evenly(counts: np.ndarray, extra: int, n_up: int) -> tuple[np.ndarray, int]:
    """Water-fill ``extra`` units into ``counts``: raise the lowest counts first, never above ``n_up``.

    Ties at the final level go to the lower index. Returns the new counts and the units that did not fit.
    """
    counts = np.asarray(counts, dtype=np.int64)
    room = int((n_up - counts).sum())
    if extra >= room:
        return np.full_like(counts, n_up), extra - room
    # Highest level L with sum(clip(L - counts, 0, n_up - counts)) <= extra, found by bisection.
    low, high = int(counts.min()), n_up
    while low < high:
        level = (low + high + 1) // 2
        if int(np.clip(level - counts, 0, None).sum()) <= extra:
            low = level
        else:
            high = level - 1
    filled = np.maximum(counts, low)
    remainder = extra - int((filled - counts).sum())
    filled[np.flatnonzero(filled == low)[:remainder]] += 1
    return filled, 0


__all__ = [
    "Allocation",
    "Allocator",
    "PromptBatchStats",
    "as_batch_stats",
    "fill_evenly",
    "largest_remainder",
]
