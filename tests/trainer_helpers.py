"""Shared builders for trainer tests: a tiny dataset, deterministic rewards and configs that run on CPU in seconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from datasets import Dataset

from trl_adaptive.allocation import Allocation, Allocator, largest_remainder

PROMPTS = [
    "What is 2 + 3?",
    "Solve x * 7 = 42.",
    "Name a fox.",
    "Count to ten.",
    "Sum 1 to 10.",
    "What is 9 - 4?",
    "Spell dog.",
    "Say the alphabet.",
]


def make_dataset(num_prompts: int = 8, conversational: bool = False) -> Dataset:
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(num_prompts)]
    if conversational:
        return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})
    return Dataset.from_dict({"prompt": prompts})


def _text(completion: Any) -> str:
    return completion if isinstance(completion, str) else completion[0]["content"]


def reward_has_vowel_e(completions, **kwargs) -> list[float]:
    """1.0 when the completion contains an 'e': a random tiny model gives a spread of success rates."""
    return [1.0 if "e" in _text(c) else 0.0 for c in completions]


def reward_length(completions, **kwargs) -> list[float]:
    """A float reward with variance inside almost every group."""
    return [len(_text(c)) / 10.0 for c in completions]


def tiny_config_kwargs(output_dir: str, **overrides: Any) -> dict[str, Any]:
    """GRPO settings for a CPU run: fp32 (exact comparisons), no saving, no reporting, 8 tokens per completion."""
    kwargs: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-2,  # large, so a few steps visibly move the tiny model's parameters
        max_steps=3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        temperature=1.0,
    )
    kwargs.update(overrides)
    return kwargs


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
