"""SuccessRateCallback: closes epochs in the statistics store and keeps the dataset's success-rate column fresh."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformers import TrainerCallback

if TYPE_CHECKING:
    from .trainer import AdaptiveGRPOTrainer

FINAL_STATISTICS_FILE = "prompt_statistics.json"


class SuccessRateCallback(TrainerCallback):
    """Holds the trainer (callbacks are not handed one), like TRL's ``LogCompletionsCallback``.

    - ``on_epoch_end``: the epoch's counts become each prompt's "last epoch" success rate, which the next epoch's
      allocations read, and ``trainer.train_dataset[success_rate_column]`` is rewritten from the store. The trainer
      also closes any epoch left open when the next one starts (a checkpoint written on an epoch's last step is
      resumed without ``on_epoch_end``); an epoch is closed exactly once either way.
    - ``on_train_end``: the final statistics are written to ``output_dir/prompt_statistics.json`` for reports (the
      trainer writes them again if training stops with an exception).
    """

    def __init__(self, trainer: AdaptiveGRPOTrainer) -> None:
        self.trainer = trainer

    def on_epoch_end(self, args, state, control, **kwargs):
        self.trainer._close_epochs_through(self.trainer._current_epoch + 1)

    def on_train_end(self, args, state, control, **kwargs):
        self.trainer.save_final_statistics()
