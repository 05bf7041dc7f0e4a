"""The trainer's own state across checkpoints: the statistics store, the allocator's and procedure's state, and the
epoch bookkeeping, in ``adaptive_state.json`` (written atomically by ``checkpoint.py``, before TRL's files)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..allocation import Allocator
from ..run_files import ADAPTIVE_STATE_FILE, TRAINER_STATE_FILE
from ..stats import PromptStatistics
from .checkpoint import is_complete, newest_complete_checkpoint, read_state, write_state
from .config import STORE_SETTING_FIELDS, AdaptiveGRPOConfig

if TYPE_CHECKING:
    from .trainer import AdaptiveGRPOTrainer


def initial_statistics(statistics: PromptStatistics | None, args: AdaptiveGRPOConfig) -> PromptStatistics:
    """A fresh store with the config's settings, or the one passed in if its settings are the config's."""
    if statistics is None:
        return PromptStatistics(**args.statistics_config)
    mismatched = {k: v for k, v in args.statistics_config.items() if getattr(statistics, k) != v}
    if mismatched:
        store = ", ".join(f"{k}={getattr(statistics, k)!r}" for k in mismatched)
        config = ", ".join(f"{STORE_SETTING_FIELDS[k]}={v!r}" for k, v in mismatched.items())
        wanted = ", ".join(f"{STORE_SETTING_FIELDS[k]}={getattr(statistics, k)!r}" for k in mismatched)
        raise ValueError(
            f"The statistics passed to AdaptiveGRPOTrainer were built with {store}, but the config has {config}: "
            f"the counts would mean something else. Set {wanted} in the config, or pass a store built with the "
            "config's settings."
        )
    return statistics


def save_adaptive_state(trainer: AdaptiveGRPOTrainer, folder: str) -> str:
    """Write statistics, allocator and procedure state and epoch bookkeeping to ``folder/adaptive_state.json``."""
    allocator = trainer.allocator
    state = {
        "allocator": {
            "name": allocator.name,
            "state": allocator.state_dict() if isinstance(allocator, Allocator) else {},
        },
        "procedure": trainer.procedure.state_dict(),
        "statistics": trainer.prompt_statistics.state_dict(),
        "epochs_closed": trainer._epochs_closed,
        # where in the data the run is: a stream resumes here (transformers cannot tell a stream's passes apart)
        "epoch_position": {
            "epoch": trainer._current_epoch,
            "steps_in_epoch": int(trainer.state.global_step - trainer._epoch_start_step),
        },
    }
    return write_state(folder, state)


def stream_resume_position(checkpoint: str, args: AdaptiveGRPOConfig) -> tuple[int, int] | None:
    """``(epochs_trained, batches to skip)`` for a stream resumed from ``checkpoint``, as transformers'
    ``_init_training_state`` returns them; None for a checkpoint written before positions were saved."""
    path = os.path.join(checkpoint, ADAPTIVE_STATE_FILE)
    if not os.path.isfile(path):
        return None  # not ours: load_checkpoint_state refuses it with the remedy
    position = read_state(path).get("epoch_position")
    if position is None:
        return None
    skip = 0 if args.ignore_data_skip else int(position["steps_in_epoch"]) * args.gradient_accumulation_steps
    return int(position["epoch"]), skip


def load_adaptive_state(trainer: AdaptiveGRPOTrainer, path: str) -> None:
    """Restore what :func:`save_adaptive_state` wrote; refuses statistics of other prompts (fingerprints)."""
    state: dict[str, Any] = read_state(path)
    if state["allocator"]["name"] != trainer.allocator.name:
        raise ValueError(
            f"{path} was written with allocator {state['allocator']['name']!r} but this run uses "
            f"{trainer.allocator.name!r}; resume with the same allocator."
        )
    try:
        trainer.prompt_statistics.load_state_dict(state["statistics"])
        if isinstance(trainer.allocator, Allocator):
            trainer.allocator.load_state_dict(state["allocator"]["state"])
        trainer.procedure.load_state_dict(state.get("procedure", {}))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: cannot restore the per-prompt statistics ({error}). Resume from an earlier checkpoint, or "
            f"check that this run's statistics settings ({', '.join(STORE_SETTING_FIELDS.values())}) match the "
            "saved run's."
        ) from None
    trainer.training_prompts.attach(trainer.prompt_statistics, path)
    trainer._epochs_closed = int(state.get("epochs_closed", trainer.prompt_statistics.epoch))
    trainer.refresh_success_rate_column()


def load_checkpoint_state(trainer: AdaptiveGRPOTrainer, checkpoint: str) -> None:
    """Restore ``checkpoint``'s adaptive state, refusing an incomplete checkpoint; a checkpoint written on an epoch's
    last step precedes ``on_epoch_end``, so that epoch is closed now."""
    if not is_complete(checkpoint):
        newest = newest_complete_checkpoint(os.path.dirname(os.path.abspath(checkpoint)))
        raise FileNotFoundError(
            f"Resuming from {checkpoint}, which is incomplete or was not written by AdaptiveGRPOTrainer "
            f"({ADAPTIVE_STATE_FILE} or {TRAINER_STATE_FILE} is missing or unreadable), so the per-prompt statistics "
            "cannot be restored. "
            + (f"Resume from {newest} instead, or " if newest else "")
            + "pass resume_from_checkpoint=True to pick the newest complete checkpoint."
        )
    load_adaptive_state(trainer, os.path.join(checkpoint, ADAPTIVE_STATE_FILE))
    trainer._close_epochs_through(trainer._resumed_epochs_trained)
