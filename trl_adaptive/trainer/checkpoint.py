"""The adaptive part of a checkpoint: ``adaptive_state.json``, and which checkpoint folders are complete.

Crash safety rests on the order of writes in one save (``AdaptiveGRPOTrainer._save_checkpoint``):

1. ``adaptive_state.json`` (statistics, allocator state, epoch bookkeeping), atomically, BEFORE anything else;
2. then TRL / transformers write the model, optimizer, RNG states and, last of their files, ``trainer_state.json``;
3. then the checkpoint is pushed (``hub_strategy="checkpoint"``) and older checkpoints are rotated away.

So a folder with a readable ``trainer_state.json`` and ``adaptive_state.json`` is complete, and an older complete
checkpoint is deleted only after a newer one is complete. A kill at any instant leaves a complete checkpoint to resume
from (or none yet), and ``resume_from_checkpoint=True`` resumes from the newest complete one.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .._io import read_json, write_json_atomic

STATE_FILE = "adaptive_state.json"
STATE_FORMAT_VERSION = 2  # 2 adds "epochs_closed"; version 1 files are still read
TRAINER_STATE_FILE = "trainer_state.json"
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def write_state(folder: str, state: dict[str, Any]) -> str:
    path = os.path.join(folder, STATE_FILE)
    write_json_atomic(path, {"format_version": STATE_FORMAT_VERSION, **state})
    return path


def read_state(path: str) -> dict[str, Any]:
    """Read and check ``adaptive_state.json``; every failure names the file and what to do."""
    remedy = (
        "Resume from an earlier checkpoint (resume_from_checkpoint=True picks the newest complete one), or delete "
        "this checkpoint folder."
    )
    state = read_json(path, "AdaptiveGRPOTrainer state file", remedy)
    if not isinstance(state, dict) or state.get("format_version") not in (1, STATE_FORMAT_VERSION):
        version = state.get("format_version") if isinstance(state, dict) else None
        raise ValueError(
            f"{path}: unsupported format_version {version!r} (this trl_adaptive reads 1 and {STATE_FORMAT_VERSION}). "
            f"{remedy}"
        )
    missing = [key for key in ("allocator", "statistics") if key not in state]
    if not missing and not {"name", "state"} <= set(state["allocator"]):
        missing = ["allocator.name / allocator.state"]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}. {remedy}")
    return state


def is_complete(folder: str) -> bool:
    """True when the save that wrote ``folder`` finished: both state files exist and parse."""
    for name in (TRAINER_STATE_FILE, STATE_FILE):
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                json.load(f)
        except (OSError, ValueError):
            return False
    return True


def newest_complete_checkpoint(run_dir: str) -> str | None:
    """The complete ``checkpoint-N`` folder of ``run_dir`` with the largest N; warns about newer incomplete ones."""
    if not os.path.isdir(run_dir):
        return None
    steps = sorted(
        (int(m.group(1)), name)
        for name in os.listdir(run_dir)
        if (m := _CHECKPOINT_RE.match(name)) and os.path.isdir(os.path.join(run_dir, name))
    )
    skipped = []
    for _, name in reversed(steps):
        folder = os.path.join(run_dir, name)
        if is_complete(folder):
            if skipped:
                warnings.warn(
                    f"Skipping incomplete checkpoint(s) {', '.join(skipped)} (a save was interrupted: "
                    f"{TRAINER_STATE_FILE} or {STATE_FILE} is missing or unreadable); resuming from {folder}. "
                    "The incomplete folders can be deleted.",
                    stacklevel=3,
                )
            return folder
        skipped.append(name)
    return None
