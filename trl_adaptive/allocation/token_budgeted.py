"""A token budget around an allocator: one wrapper, the one place a budget is validated and applied.

``TokenBudgeted(allocator, token_budget)`` allocates as ``allocator`` does and keeps its counts when they fit T
expected generated tokens; otherwise the prompts the allocator decides are re-solved under T (:mod:`.token_budget`:
the same number of completions, the allocator's marginal gains, each completion priced by its tokens), and the token
metrics are added (``token_budget``, ``tokens_expected``, ``token_price``, ``token_gap_bound``,
``token_budget_infeasible``). It composes as optax's wrappers do: the allocator knows nothing of tokens, and an
allocator can be budgeted when it says which prompts it decides and what one more completion of each is worth
(:class:`BudgetableAllocator`: ``knapsack`` and ``bayes_knapsack``). A pilot round's ``allocate_remaining`` is
budgeted too (T covers both rounds: the tokens expected of the pilot's completions count against it).

Example:
    >>> import dataclasses
    >>> from trl_adaptive.allocation import KnapsackAllocator
    >>> stats = PromptBatchStats.from_success_rates([0.5, 0.5])  # the second prompt's completions are 4x as long
    >>> stats = dataclasses.replace(stats, expected_tokens=np.array([10.0, 40.0]))
    >>> TokenBudgeted(KnapsackAllocator(max_rollouts=8), 140.0).allocate(stats, budget=8).counts.tolist()
    [6, 2]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._validate import check_number
from ..batch import Allocation, PromptBatchStats, as_batch_stats
from .base import Allocator
from .token_budget import UNIFORM_TOKENS, expected_lengths, within_token_budget


@runtime_checkable
class BudgetableAllocator(Protocol):
    """What an allocator tells :class:`TokenBudgeted`: the positions of the prompts it decides (the others get their
    uniform share and keep it), and the ``(len(positions), C)`` marginal gains of one more completion of each."""

    def budget_positions(self, stats: PromptBatchStats) -> np.ndarray: ...

    def budget_gains(self, stats: PromptBatchStats, positions: np.ndarray) -> np.ndarray: ...


def check_token_budget(token_budget: object, name: str = "token_budget") -> None:
    """A ValueError naming ``name`` unless ``token_budget`` is ``"uniform"`` or a finite number of tokens > 0: the one
    rule, applied by the wrapper and, at construction, by the config's ``generation_token_budget``."""
    if token_budget != UNIFORM_TOKENS:
        reason = "expected generated tokens per generation batch; 'uniform': as many as the uniform split"
        check_number(name, token_budget, above=0, finite=True, reason=reason)


@dataclass
class TokenBudgeted(Allocator):
    """``allocator``'s allocation under ``token_budget`` expected generated tokens per batch (see the module).

    Args:
        allocator: a :class:`BudgetableAllocator` (``KnapsackAllocator``, ``BayesKnapsackAllocator``).
        token_budget: T, a number of tokens > 0, or ``"uniform"`` (default): what the uniform split of the batch's
            completions expects, recomputed every batch (inert when every prompt expects the same length).

    The name, the store readings and the bounds are the allocator's; so are its pilot methods (``absorb``,
    ``check_pilot``) and its state.
    """

    allocator: Allocator | None = None
    token_budget: float | str = UNIFORM_TOKENS
    min_rollouts: int = field(default=2, init=False)  # the allocator's, set below
    max_rollouts: int = field(default=128, init=False)

    def __post_init__(self) -> None:
        inner = self.allocator
        if not isinstance(inner, Allocator) or not isinstance(inner, BudgetableAllocator):
            raise TypeError(
                f"TokenBudgeted needs an allocator that can be re-solved under a token budget (knapsack, "
                f"bayes_knapsack: budget_positions and budget_gains), got {inner!r}. Set the token budget to None, "
                "or choose one of these allocators."
            )
        if isinstance(inner, TokenBudgeted):
            raise ValueError(f"{inner!r} is under a token budget already; wrap the allocator once.")
        check_token_budget(self.token_budget)
        self.min_rollouts, self.max_rollouts = inner.min_rollouts, inner.max_rollouts
        self.name, self.reads, self.allows_zero = inner.name, inner.reads, inner.allows_zero
        super().__post_init__()

    def allocate(self, stats: PromptBatchStats | np.ndarray | list[float], budget: int) -> Allocation:
        stats = as_batch_stats(stats)
        allocation = self.allocator.allocate(stats, budget)
        readable = stats.for_reader(self.allocator.reads, self.allocator)
        positions = self.allocator.budget_positions(readable)
        fitted = self._fit(allocation.counts, readable, positions, self.min_rollouts)
        merged = dataclasses.replace(allocation, counts=fitted.counts, metrics=allocation.metrics | fitted.metrics)
        return self.checked(merged, stats, int(budget))

    @property
    def allocate_remaining(self):
        """The allocator's ``allocate_remaining`` under the budget (absent when the allocator has none, so a pilot
        round refuses a budgeted allocator it cannot run, as it refuses the bare one)."""
        if not hasattr(self.allocator, "allocate_remaining"):
            raise AttributeError(f"{type(self.allocator).__name__} has no allocate_remaining")
        return self._allocate_remaining

    def _allocate_remaining(self, stats: PromptBatchStats, budget_left: int, already: np.ndarray) -> Allocation:
        """Round two on top of ``already``: the allocator's totals kept when they fit T, else re-solved under it with
        every prompt raised to at least max(already, N_low)."""
        extra = self.allocator.allocate_remaining(stats, budget_left, already)
        already = np.asarray(already, dtype=np.int64)
        every = np.arange(len(already))
        fitted = self._fit(extra.counts + already, stats, every, np.maximum(already, self.min_rollouts))
        totals = self.checked(fitted, stats, int(already.sum()) + int(budget_left))
        metrics = extra.metrics | totals.metrics
        return dataclasses.replace(totals, counts=totals.counts - already, budget=int(budget_left), metrics=metrics)

    def _fit(self, counts: np.ndarray, stats: PromptBatchStats, positions: np.ndarray, lower) -> Allocation:
        """``counts`` kept when they fit the budget, else the prompts at ``positions`` re-solved under it (each at
        least ``lower``), with the token metrics."""
        gains = lambda: self.allocator.budget_gains(stats, positions)  # noqa: E731 (built only when T binds)
        lengths = expected_lengths(stats)
        return within_token_budget(counts, positions, lengths, self.token_budget, gains, lower, self.max_rollouts)

    def __getattr__(self, name: str) -> Any:
        # The allocator's own methods (a pilot's absorb and check_pilot); reached only for names not found here.
        if name.startswith("__") or name == "allocator":
            raise AttributeError(name)
        return getattr(self.allocator, name)

    # -- state: the allocator's ----------------------------------------------------------------------------------
    def end_step(self, allocations: Sequence[Allocation]) -> None:
        self.allocator.end_step(allocations)

    def state_dict(self) -> dict[str, Any]:
        return self.allocator.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.allocator.load_state_dict(state)


def with_token_budget(allocator: Allocator, token_budget: float | str | None) -> Allocator:
    """``allocator`` under ``token_budget``, or ``allocator`` itself when the budget is None (no budget)."""
    return allocator if token_budget is None else TokenBudgeted(allocator, token_budget)
