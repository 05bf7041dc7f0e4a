"""The trainer's own state across checkpoints: the statistics store, the sampling procedure's state (one tree over
the procedure and every allocator it holds: ``sampling/state.py``) and the epoch bookkeeping, in
``adaptive_state.json`` (written atomically by ``output_files.py``, before TRL's files).

Every function reads and writes the run's :class:`~trl_adaptive.trainer.state.AdaptiveState`; none refreshes
the trainer's dataset column (the trainer does, after a load).
"""

from __future__ import annotations

import copy
import os
import warnings
from typing import Any

from ..stats import PromptStatistics
from .config import STORE_SETTING_FIELDS, AdaptiveGRPOConfig
from .output_files import (
    ADAPTIVE_STATE_FILE,
    TRAINER_STATE_FILE,
    checkpoint_folders,
    is_complete,
    newest_complete_checkpoint,
    read_json_or_none,
    read_state,
    write_state,
)
from .state import AdaptiveState, VisitClock

#: What ``adaptive_state.json`` holds besides its format version.
SAVED_KEYS = frozenset(
    {"allocator", "procedure", "prompt_source", "statistics", "epochs_closed", "epoch_position", "visits"}
)


def save_adaptive_state(state: AdaptiveState, folder: str, global_step: int) -> str:
    """Write statistics, the procedure's state tree and epoch bookkeeping to ``folder/adaptive_state.json``."""
    saved = {
        "allocator": {"name": state.allocator.name},  # the strategy's name: for reports and a clear refusal
        "procedure": state.procedure.state_dict(),
        "prompt_source": {"name": state.prompt_source.name, "state": state.prompt_source.own_state()},
        "statistics": state.prompt_statistics.state_dict(),
        "epochs_closed": state.epochs_closed,
        # where in the data the run is: a stream resumes here (transformers cannot tell a stream's passes apart)
        "epoch_position": state.epoch_position(global_step),
        "visits": state.visits.state_dict(),  # for the prompts/* staleness metrics only
    }
    return write_state(folder, saved)


def _check_procedure_name(state: AdaptiveState, saved: dict[str, Any], path: str) -> None:
    """The saved ``"allocator"`` entry names this run's strategy."""
    if saved["allocator"]["name"] != state.allocator.name:
        raise ValueError(
            f"{path} was written with allocator {saved['allocator']['name']!r} but this run uses "
            f"{state.allocator.name!r}; resume with the same allocator."
        )


def _check_saved_keys(saved: dict[str, Any], path: str) -> None:
    """Every entry :func:`save_adaptive_state` writes is there (no release wrote another layout)."""
    missing = sorted(SAVED_KEYS - set(saved))
    if missing:
        raise ValueError(
            f"{path} lacks {missing}: it was not written by this version of trl_adaptive (its state file holds "
            f"{sorted(SAVED_KEYS)}). Start without resume_from_checkpoint (fresh statistics)."
        )


def _check_prompt_source_name(state: AdaptiveState, saved: dict[str, Any], path: str) -> None:
    """The saved prompt source is this run's."""
    if saved["prompt_source"].get("name") != state.prompt_source.name:
        raise ValueError(
            f"{path} was written with prompt_source {saved['prompt_source'].get('name')!r} but this run uses "
            f"{state.prompt_source.name!r}; resume with the same prompt_source."
        )


def resume_position(
    state: AdaptiveState, args: AdaptiveGRPOConfig, global_step: int, position: tuple[int, int], checkpoint: str | None
) -> tuple[int, int]:
    """transformers' ``(epochs_trained, batches to skip)``, or a stream's own from its checkpoint; records where the
    resumed epoch began (the next checkpoint's ``epoch_position``).

    transformers takes a stream's epoch to be ``max_steps`` long: resumed in a later pass, it would skip batches of
    the first pass and replay the wrong ones.
    """
    saved = None
    if state.training_prompts.streaming and checkpoint is not None and is_complete(checkpoint):
        saved = read_state(os.path.join(checkpoint, ADAPTIVE_STATE_FILE))["epoch_position"]
    if saved is not None:
        skip = 0 if args.ignore_data_skip else int(saved["steps_in_epoch"])
        position = (int(saved["epoch"]), skip * args.gradient_accumulation_steps)
    state.resumed_epochs_trained, steps_in_epoch = position
    state.epoch_start_step = global_step - steps_in_epoch // args.gradient_accumulation_steps
    return position


def restorable_state(state: AdaptiveState, path: str, remedy: str = "") -> dict[str, Any]:
    """The saved state of ``path`` (its procedure state as one tree), checked by loading it into copies of the run's
    store and procedure (``state`` is not changed); a ValueError that says what cannot be restored, then ``remedy``."""
    saved: dict[str, Any] = read_state(path)
    _check_saved_keys(saved, path)
    _check_procedure_name(state, saved, path)
    _check_prompt_source_name(state, saved, path)
    _check_saved_settings(saved["statistics"], state.prompt_statistics.config, path)
    store = PromptStatistics(**state.prompt_statistics.config)
    try:
        store.load_state_dict(saved["statistics"])
        copy.deepcopy(state.procedure).load_state_dict(saved["procedure"])
        copy.deepcopy(state.prompt_source).load_own_state(saved["prompt_source"]["state"])
        VisitClock().load_state_dict(saved["visits"])
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: cannot restore the per-prompt statistics or the procedure state ({error}).{remedy}"
        ) from None
    state.training_prompts.attach(store, path)  # refuses statistics of other prompts
    return saved


def _check_saved_settings(statistics: Any, config: dict[str, Any], path: str) -> None:
    """The statistics settings the checkpoint was written with are this run's, named as the config names them."""
    saved = statistics.get("config") if isinstance(statistics, dict) else None
    if not isinstance(saved, dict):
        return  # load_state_dict names what is wrong
    differ = [(STORE_SETTING_FIELDS[k], saved[k], v) for k, v in config.items() if k in saved and saved[k] != v]
    if differ:
        raise ValueError(
            f"{path} was written with "
            + ", ".join(f"{field}={old!r}" for field, old, _ in differ)
            + " but this run has "
            + ", ".join(f"{field}={new!r}" for field, _, new in differ)
            + ": the saved counts would mean something else. Set "
            + ", ".join(f"{field}={old!r}" for field, old, _ in differ)
            + " to resume this run, or start without resume_from_checkpoint (fresh statistics)."
        )


def load_adaptive_state(state: AdaptiveState, path: str) -> None:
    """Restore what :func:`save_adaptive_state` wrote; refuses statistics of other prompts (fingerprints). Nothing
    changes when a check fails (:func:`restorable_state` checks everything first)."""
    remedy = (
        " Resume from an earlier checkpoint, or check that this run's statistics settings "
        f"({', '.join(STORE_SETTING_FIELDS.values())}) match the saved run's."
    )
    saved = restorable_state(state, path, remedy)
    state.prompt_statistics.load_state_dict(saved["statistics"])
    state.procedure.load_state_dict(saved["procedure"])
    state.prompt_source.load_own_state(saved["prompt_source"]["state"])
    state.training_prompts.attach(state.prompt_statistics, path)
    state.epochs_closed = int(saved["epochs_closed"])
    state.visits.load_state_dict(saved["visits"])


def checkpoint_to_resume(state: AdaptiveState, output_dir: str) -> str:
    """``resume_from_checkpoint=True``: the newest checkpoint of ``output_dir`` whose state this run can restore.

    Newer checkpoints that are incomplete (a save was interrupted) or whose ``adaptive_state.json`` does not load
    are skipped with one warning that names each and why; a ValueError with every reason when none can be resumed.
    """
    skipped: dict[str, list[str]] = {}  # reason -> checkpoint names, newest first
    folders = checkpoint_folders(output_dir)
    for folder in folders:
        name = os.path.basename(folder)
        if not is_complete(folder):
            reason = (
                f"an incomplete checkpoint: a save was interrupted, {TRAINER_STATE_FILE} or {ADAPTIVE_STATE_FILE} "
                "is missing or unreadable"
            )
            skipped.setdefault(reason, []).append(name)
            continue
        path = os.path.join(folder, ADAPTIVE_STATE_FILE)
        try:
            restorable_state(state, path)
        except ValueError as error:
            skipped.setdefault(str(error).replace(path, ADAPTIVE_STATE_FILE).rstrip("."), []).append(name)
            continue
        if skipped:
            warnings.warn(
                f"Skipping checkpoint(s) that cannot be resumed: {_listed(skipped)}; resuming from {folder}. "
                "The skipped folders can be deleted.",
                stacklevel=3,
            )
        return folder
    if folders and all(_written_by_another_trainer(folder) for folder in folders):
        raise ValueError(
            f"resume_from_checkpoint=True but the checkpoints of {output_dir} were written by GRPOTrainer (or another "
            f"Trainer): they have no {ADAPTIVE_STATE_FILE}, so there is no per-prompt state to resume. "
            + _start_from_weights(folders[0])
        )
    if not any(is_complete(folder) for folder in folders):
        raise ValueError(
            f"resume_from_checkpoint=True but {output_dir} holds no complete checkpoint-N folder "
            f"(one with {TRAINER_STATE_FILE} and {ADAPTIVE_STATE_FILE}). Start without resume_from_checkpoint."
        )
    raise ValueError(
        f"resume_from_checkpoint=True but no checkpoint of {output_dir} can be resumed by this run: "
        f"{_listed(skipped)}. No older checkpoint is left to fall back to: make this run's settings match the "
        "saved run's where a reason names them, or start without resume_from_checkpoint (fresh statistics)."
    )


def _listed(skipped: dict[str, list[str]]) -> str:
    """``checkpoint-4, checkpoint-3 (why); checkpoint-2 (why)``: each reason once, after the checkpoints it fits."""
    return "; ".join(f"{', '.join(names)} ({reason})" for reason, names in skipped.items())


def _written_by_another_trainer(folder: str) -> bool:
    """A checkpoint transformers wrote completely (``trainer_state.json``) with no ``adaptive_state.json`` at all: a
    plain GRPOTrainer's (or any Trainer's), not an interrupted save of ours (which writes our file first)."""
    return read_json_or_none(os.path.join(folder, TRAINER_STATE_FILE)) is not None and not os.path.exists(
        os.path.join(folder, ADAPTIVE_STATE_FILE)
    )


def _start_from_weights(folder: str) -> str:
    return (
        f"To continue from its weights, start a fresh run from them: AdaptiveGRPOTrainer(model={folder!r}, ...) "
        "without resume_from_checkpoint (the optimizer, the learning-rate schedule, the step count and the per-prompt "
        "statistics start over)."
    )


def check_checkpoint_to_resume(state: AdaptiveState, checkpoint: str) -> None:
    """``resume_from_checkpoint=<path>``: a ValueError (another trainer's checkpoint) or FileNotFoundError (an
    incomplete one) that says what can be done, before transformers loads anything; the saved state is checked
    against this run (:func:`restorable_state`)."""
    _check_folder(checkpoint)
    restorable_state(state, os.path.join(checkpoint, ADAPTIVE_STATE_FILE), " Resume from another checkpoint.")


def _check_folder(checkpoint: str) -> None:
    """``checkpoint`` exists, was written by AdaptiveGRPOTrainer and is complete; else an error saying what to do."""
    if not os.path.isdir(checkpoint):
        newest = newest_complete_checkpoint(os.path.dirname(os.path.abspath(checkpoint)))
        raise FileNotFoundError(
            f"Cannot resume from {checkpoint}: no such folder. "
            + (f"The newest complete checkpoint beside it is {newest}." if newest else "")
            + " Pass a checkpoint-N folder, or resume_from_checkpoint=True to pick the newest one this run can "
            "restore."
        )
    if _written_by_another_trainer(checkpoint):
        raise ValueError(
            f"Cannot resume from {checkpoint}: it was written by GRPOTrainer (or another Trainer), not "
            f"AdaptiveGRPOTrainer. It has {TRAINER_STATE_FILE} but no {ADAPTIVE_STATE_FILE}, so there are no "
            f"per-prompt statistics or sampling state to resume. {_start_from_weights(checkpoint)}"
        )
    if not is_complete(checkpoint):
        newest = newest_complete_checkpoint(os.path.dirname(os.path.abspath(checkpoint)))
        raise FileNotFoundError(
            f"Cannot resume from {checkpoint}: it is incomplete ({ADAPTIVE_STATE_FILE} or {TRAINER_STATE_FILE} is "
            "missing or unreadable: a save was interrupted), so the per-prompt statistics cannot be restored. "
            + (
                f"Resume from {newest}, the newest complete checkpoint beside it, or pass resume_from_checkpoint=True "
                "to pick the newest one this run can restore."
                if newest
                else "No complete checkpoint is beside it: start without resume_from_checkpoint."
            )
        )


def load_checkpoint_state(state: AdaptiveState, checkpoint: str) -> None:
    """Restore ``checkpoint``'s adaptive state (:func:`check_checkpoint_to_resume` refuses what cannot be); a
    checkpoint written on an epoch's last step precedes ``on_epoch_end``, so that epoch is closed now. The trainer
    refreshes its dataset column."""
    _check_folder(checkpoint)  # load_adaptive_state checks what it restores itself
    load_adaptive_state(state, os.path.join(checkpoint, ADAPTIVE_STATE_FILE))
    state.close_epochs_through(state.resumed_epochs_trained)
    state.statistics_hold_the_run = True
