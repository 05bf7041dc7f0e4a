"""SuccessRateCallback: closes epochs in the statistics store and keeps the dataset's success-rate column fresh."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from transformers import TrainerCallback

if TYPE_CHECKING:
    from .adaptive_state import AdaptiveState


class SuccessRateCallback(TrainerCallback):
    """Holds the run's adaptive state and the trainer's ``refresh_success_rate_column`` (callbacks are not handed the
    trainer).

    ``on_epoch_end``: the epoch's counts become each prompt's "last epoch" success rate, which the next epoch's
    allocations read, and ``trainer.train_dataset[success_rate_column]`` is rewritten from the store. Epochs are
    closed in one place, ``AdaptiveState.close_epochs_through``, which closes each exactly once: here, when the next
    epoch starts (``AdaptiveGRPOTrainer._run_epoch``) and after a resume (a checkpoint written on an epoch's last step
    is resumed without ``on_epoch_end``). The final statistics file is written by ``train()`` however training ends.
    """

    def __init__(self, adaptive_state: AdaptiveState, refresh: Callable[[], None]) -> None:
        self.adaptive_state = adaptive_state
        self.refresh = refresh

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.adaptive_state.close_epochs_through(self.adaptive_state.current_epoch + 1):
            self.refresh()


__all__ = ["SuccessRateCallback"]
