"""SuccessRateCallback: closes epochs in the statistics store and keeps the dataset's success-rate column fresh."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from transformers import TrainerCallback

if TYPE_CHECKING:
    from .trainer import AdaptiveGRPOTrainer

FINAL_STATISTICS_FILE = "prompt_statistics.json"


class SuccessRateCallback(TrainerCallback):
    """Holds the trainer (callbacks are not handed one), like TRL's ``LogCompletionsCallback``.

    - ``on_epoch_end``: the epoch's counts become each prompt's "last epoch" success rate, which the next epoch's
      allocations read, and ``trainer.train_dataset[success_rate_column]`` is rewritten from the store.
    - ``on_train_end``: the final statistics are written to ``output_dir/prompt_statistics.json`` for reports.
    """

    def __init__(self, trainer: AdaptiveGRPOTrainer) -> None:
        self.trainer = trainer

    def on_epoch_end(self, args, state, control, **kwargs):
        self.trainer.prompt_statistics.end_epoch()
        self.trainer.refresh_success_rate_column()

    def on_train_end(self, args, state, control, **kwargs):
        if args.should_save:
            self.trainer.prompt_statistics.save(os.path.join(args.output_dir, FINAL_STATISTICS_FILE))
