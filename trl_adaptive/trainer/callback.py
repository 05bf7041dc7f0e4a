"""SuccessRateCallback: closes epochs in the statistics store and keeps the dataset's success-rate column fresh.
AllocationLogCallback: each run starts its own ``allocations.jsonl``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from transformers import TrainerCallback

from .allocation_log import start_allocation_log

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


class AllocationLogCallback(TrainerCallback):
    """``on_train_begin`` (main process): a fresh run moves an earlier run's ``allocations.jsonl`` aside, a run resumed
    from ``checkpoint-N`` keeps the lines of steps before N (``allocation_log.start_allocation_log``).

    transformers calls it after the checkpoint is restored (``state.global_step`` is then the checkpoint's, > 0), so
    a resume that fails changes no file.
    """

    def on_train_begin(self, args, state, control, **kwargs):
        if args.should_save and getattr(args, "log_allocations", False):
            start_allocation_log(args.output_dir, resume_step=state.global_step or None)


__all__ = ["AllocationLogCallback", "SuccessRateCallback"]
