"""A RepeatSampler whose shuffle order is a function of the epoch, so that resuming restores the prompt order."""

from __future__ import annotations

import torch
from trl.trainer.utils import RepeatSampler


class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's RepeatSampler plus ``set_epoch``, which the HF Trainer calls at the start of every epoch.

    TRL's sampler draws one permutation per epoch from a generator seeded once, so a run resumed in epoch e starts
    again from epoch 0's permutation. Here ``set_epoch(e)`` reseeds and skips e permutations: an uninterrupted run sees
    exactly TRL's order, and a resumed run sees the order it would have seen (needed for exact resume of the per-prompt
    allocation).
    """

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle and self.seed is not None:
            self.generator.manual_seed(self.seed)
            for _ in range(epoch):
                torch.randperm(self.num_samples, generator=self.generator)
