"""The adaptive part of a checkpoint: ``adaptive_state.json``, and which checkpoint folders are complete.

Crash safety rests on the order of writes in one save (``AdaptiveGRPOTrainer._save_checkpoint``):

1. ``adaptive_state.json`` (statistics, the sampling procedure's state tree, epoch bookkeeping), atomically, BEFORE
   anything else;
2. then TRL / transformers write the model, optimizer, RNG states and, last of their files, ``trainer_state.json``;
3. then the checkpoint is pushed (``hub_strategy="checkpoint"``) and older checkpoints are rotated away.

So a folder with a readable ``trainer_state.json`` and ``adaptive_state.json`` is complete, and an older complete
checkpoint is deleted only after a newer one is complete. A kill at any instant leaves a complete checkpoint to resume
from (or none yet), and ``resume_from_checkpoint=True`` resumes from the newest complete one.
"""

from __future__ import annotations

import os
from typing import Any

from .._io import read_json, write_json_atomic
from ..report.run_files import ADAPTIVE_STATE_FILE, TRAINER_STATE_FILE, checkpoint_folders, read_json_or_none

# 3: the procedure's state as one tree ("procedure"; "allocator" keeps only the strategy's name). Formats 1 and 2 were
# development formats no release wrote (the package is unreleased): refused with the error below, not read.
STATE_FORMAT_VERSION = 3
READABLE_STATE_VERSIONS = (3,)


def write_state(folder: str, state: dict[str, Any]) -> str:
    path = os.path.join(folder, ADAPTIVE_STATE_FILE)
    write_json_atomic(path, {"format_version": STATE_FORMAT_VERSION, **state})
    return path


def read_state(path: str) -> dict[str, Any]:
    """Read and check ``adaptive_state.json``; every failure names the file and what to do."""
    remedy = (
        "Resume from an earlier checkpoint (resume_from_checkpoint=True picks the newest one that loads), or delete "
        "this checkpoint folder."
    )
    state = read_json(path, "AdaptiveGRPOTrainer state file", remedy)
    if not isinstance(state, dict) or state.get("format_version") not in READABLE_STATE_VERSIONS:
        version = state.get("format_version") if isinstance(state, dict) else None
        raise ValueError(
            f"{path}: unsupported format_version {version!r} (this trl_adaptive reads "
            f"{', '.join(map(str, READABLE_STATE_VERSIONS))}). {remedy}"
        )
    missing = [key for key in ("allocator", "statistics", "procedure", "epochs_closed") if key not in state]
    if not missing and "name" not in state["allocator"]:
        missing = ["allocator.name"]
    if not missing and not isinstance(state["procedure"], dict):
        missing = ["the procedure's state tree"]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}. {remedy}")
    return state


def is_complete(folder: str) -> bool:
    """True when the save that wrote ``folder`` finished: both state files exist and parse."""
    return all(
        read_json_or_none(os.path.join(folder, name)) is not None for name in (TRAINER_STATE_FILE, ADAPTIVE_STATE_FILE)
    )


def newest_complete_checkpoint(run_dir: str) -> str | None:
    """The complete ``checkpoint-N`` folder of ``run_dir`` with the largest N (a lookup: nothing is resumed here)."""
    return next((folder for folder in checkpoint_folders(run_dir) if is_complete(folder)), None)
