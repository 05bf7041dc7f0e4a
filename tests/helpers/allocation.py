"""Allocators with a known behaviour, for the procedure and trainer tests, and the brute-force knapsack optimum the
solvers are checked against. NumPy only."""

from __future__ import annotations

import itertools
from collections.abc import Generator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trl_adaptive.allocation import Allocation, Allocator, largest_remainder
from trl_adaptive.sampling import BatchContext, BatchRecord, Procedure, Round, drive
from trl_adaptive.stats import PromptStatistics


def brute_force(table: np.ndarray, total: int, lo: np.ndarray, hi: np.ndarray) -> float:
    """The best objective ``sum_i table[i, n_i]`` over every allocation with ``lo <= n <= hi`` and ``sum(n) == total``,
    by enumeration."""
    ranges = [range(int(a), int(b) + 1) for a, b in zip(lo, hi, strict=True)]
    return max(
        sum(table[i, n] for i, n in enumerate(choice)) for choice in itertools.product(*ranges) if sum(choice) == total
    )


class RecordingAllocator(Allocator):
    """Wraps an allocator and records every (prompt ids, counts) it is asked for."""

    def __init__(self, inner: Allocator) -> None:
        self.inner = inner
        self.name = inner.name
        self.min_rollouts, self.max_rollouts = inner.min_rollouts, inner.max_rollouts
        self.allows_zero = inner.allows_zero
        self.history: list[tuple[list[int], list[int]]] = []

    def allocate(self, stats, budget):
        allocation = self.inner.allocate(stats, budget)
        self.history.append((allocation.prompt_ids.tolist(), allocation.counts.tolist()))
        return allocation

    def end_step(self, allocations):
        self.inner.end_step(allocations)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)


class SkewedAllocator(Allocator):
    """Gives the first prompt of every batch most of the budget: a deliberately skewed allocation."""

    name = "skewed-test"

    def _allocate(self, stats, budget):
        counts = np.full(len(stats), self.min_rollouts, dtype=np.int64)
        counts[0] += budget - counts.sum()
        return counts


@dataclass
class WeightedUniform(Allocator):
    """Uniform counts with advantage weights 1 + (prompt id mod 3): a user allocator that returns weights."""

    name: ClassVar[str] = "weighted-uniform-test"

    def _allocate(self, stats, budget):
        counts = largest_remainder(np.full(len(stats), budget / len(stats)), budget, self.min_rollouts)
        return Allocation(counts, weights=1.0 + stats.prompt_ids % 3)


@dataclass
class TwoAllocators(Procedure):
    """A user's procedure holding two allocators: the batch's first half of prompts by ``first``, the rest by
    ``second``, half the budget each, one planned round (what the state tree must save and restore whole)."""

    first: Allocator
    second: Allocator
    name: ClassVar[str] = "two_allocators"

    @property
    def max_rollouts(self) -> int:
        return max(self.first.max_rollouts, self.second.max_rollouts)

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        half = len(ctx.prompt_ids) // 2
        counts = []
        for allocator, ids in ((self.first, ctx.prompt_ids[:half]), (self.second, ctx.prompt_ids[half:])):
            allocation = allocator.allocate(ctx.statistics(ids), ctx.budget // 2)
            record.note_allocation(allocation)
            counts.append(allocation.counts)
        yield Round(ctx.prompt_ids, np.concatenate(counts), final=True)
        return record.completions_of(ctx.prompt_ids)


# ---- a procedure over several steps, as the trainer runs it (no model) ---------------------------------------------
BUDGET, PROMPTS, NUM_IDS = 32, 4, 40


def run_steps(procedure: Procedure, store: PromptStatistics, steps: range) -> list[tuple[list[int], list[int]]]:
    """Run ``steps`` of ``procedure``; each step's prompts and counts (store and procedure move as in training)."""
    p = np.random.default_rng(0).uniform(0, 1, NUM_IDS)
    history = []
    for step in steps:
        rng = np.random.default_rng(step)
        ids = np.sort(rng.choice(NUM_IDS, PROMPTS, replace=False))

        def draw(exclude: np.ndarray, number: int, rng=rng) -> np.ndarray:
            free = np.setdiff1d(np.arange(NUM_IDS), exclude)
            return np.sort(rng.choice(free, min(number, len(free)), replace=False))

        def generate(request: Round, jobs: np.ndarray, rng=rng) -> np.ndarray:
            return (rng.random(len(jobs)) < p[np.repeat(request.prompt_ids, request.counts)]).astype(float)

        ctx = BatchContext(ids, BUDGET, BUDGET // PROMPTS, 1.0, store.batch, draw, rng)
        outcome = drive(procedure, ctx, generate)
        procedure.end_step(outcome)
        record = outcome.record
        store.update(record.prompt_ids[record.group_ids], record.rewards)
        if step % 3 == 2:
            store.end_epoch()
        history.append((record.prompt_ids.tolist(), record.counts().tolist()))
    return history


def holds_state(tree: dict) -> bool:
    """Whether a procedure's state tree (``Procedure.state_dict()``) holds anything in any node."""
    return bool(tree.get("state")) or any(holds_state(child) for child in tree.get("children", {}).values())
