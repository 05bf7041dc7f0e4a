"""SuccessRateCallback: closes epochs in the statistics store and keeps the dataset's success-rate column fresh."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformers import TrainerCallback

if TYPE_CHECKING:
    from .trainer import AdaptiveGRPOTrainer


class SuccessRateCallback(TrainerCallback):
    """Holds the trainer (callbacks are not handed one), like TRL's ``LogCompletionsCallback``.

    ``on_epoch_end``: the epoch's counts become each prompt's "last epoch" success rate, which the next epoch's
    allocations read, and ``trainer.train_dataset[success_rate_column]`` is rewritten from the store. Epochs are
    closed in one place, ``AdaptiveGRPOTrainer._close_epochs_through``, which closes each exactly once: here, when the
    next epoch starts (``_run_epoch``) and after a resume (a checkpoint written on an epoch's last step is resumed
    without ``on_epoch_end``). The final statistics file is written by ``train()`` however training ends.
    """

    def __init__(self, trainer: AdaptiveGRPOTrainer) -> None:
        self.trainer = trainer

    def on_epoch_end(self, args, state, control, **kwargs):
        self.trainer._close_epochs_through(self.trainer._current_epoch + 1)


__all__ = ["SuccessRateCallback"]
