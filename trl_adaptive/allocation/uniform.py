"""Uniform allocation: GRPO's fixed group size, the baseline every other strategy is compared against."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..batch import PromptBatchStats
from .base import Allocator, largest_remainder


@dataclass
class UniformAllocator(Allocator):
    """N_i = B / M for every prompt, whatever its statistics (GRPO).

    Paper: Z. Shao, P. Wang, Q. Zhu, R. Xu, J. Song, M. Zhang, Y. K. Li, Y. Wu and D. Guo, "DeepSeekMath: Pushing the
    Limits of Mathematical Reasoning in Open Language Models", 2024, arXiv 2402.03300. Implements GRPO's sampling
    (Sec. 4.1): the same number of outputs for every question.

    When M does not divide B the remainder goes one unit each to the first prompts (largest-remainder rounding with
    equal remainders, so ties go to the lower index). With B = M * num_generations this is exactly GRPOTrainer's
    grouping, which ``AdaptiveGRPOTrainer(allocator="uniform")`` must reproduce bit for bit.

    Example:
        >>> UniformAllocator().allocate([0.1, float("nan"), 1.0], budget=8).counts.tolist()
        [3, 3, 2]
    """

    name = "uniform"
    reads = ()  # the same counts whatever the statistics

    def _allocate(self, stats: PromptBatchStats, budget: int) -> np.ndarray:
        num_prompts = len(stats)
        return largest_remainder(np.full(num_prompts, budget / num_prompts), budget)
