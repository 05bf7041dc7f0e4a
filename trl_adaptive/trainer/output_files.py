"""The files of a run folder (a trainer's ``output_dir``): their names, and how the trainer writes the adaptive ones.
Imports no torch or trl (``trl-adaptive report`` reads the names from here).

    output_dir/
        allocations.jsonl         ALLOCATION_LOG_FILE    one line per generation batch (main process), for reports
        allocations.previous-<k>.jsonl                   an earlier run's log, set aside (start_allocation_log)
        prompt_statistics.json    FINAL_STATISTICS_FILE  the statistics store when training ends
        trainer_state.json        TRAINER_STATE_FILE     HF Trainer's log_history, on ``trainer.save_state()``
        checkpoint-N/             CHECKPOINT_PREFIX      TRL / transformers' checkpoint, plus:
            adaptive_state.json   ADAPTIVE_STATE_FILE    statistics, procedure state tree, epoch bookkeeping
            trainer_state.json    TRAINER_STATE_FILE
        report/                                          ``trl-adaptive report`` (trl_adaptive/report/run_files.py)

**Checkpoints.** Crash safety rests on the order of writes in one save (``AdaptiveGRPOTrainer._save_checkpoint``):
1. ``adaptive_state.json`` (statistics, the sampling procedure's state tree, epoch bookkeeping), atomically, BEFORE
anything else; 2. then TRL / transformers write the model, optimizer, RNG states and, last of their files,
``trainer_state.json``; 3. then the checkpoint is pushed (``hub_strategy="checkpoint"``) and older checkpoints are
rotated away. So a folder with a readable ``trainer_state.json`` and ``adaptive_state.json`` is complete, and an
older complete checkpoint is deleted only after a newer one is complete. A kill at any instant leaves a complete
checkpoint to resume from (or none yet), and ``resume_from_checkpoint=True`` resumes from the newest complete one.

**allocations.jsonl.** TRL's logs hold per-step aggregates (``allocation/count_p90`` ...); a histogram per epoch or a
prompt-status transition matrix needs each prompt's count and rate, so the main process appends one JSON line per
generation batch:

    {"step": 12, "epoch": 1, "prompt_ids": [...], "counts": [...], "success_rates": [... null for NaN],
     "successes": [...], "attempts": [...], "generated": [...], "generated_successes": [...],
     "generated_attempts": [...], "expected_tokens": [... null when unknown], "generated_tokens": [...],
     "engine": "vllm-colocate"}

``epoch`` is the statistics store's epoch (0-based, the epoch being trained). Per prompt: ``counts`` is the number of
completions TRAINED on, and ``successes`` / ``attempts`` the successes and scored completions among them (what the
gradient saw); ``generated`` is the number of completions GENERATED for it in the step, every round included, and
``generated_successes`` / ``generated_attempts`` count those (what the statistics store counted). The two agree
when every completion generated is trained (one planned round); under Seq and dynamic sampling the generated ones
are more. Lines written before the generated counts existed lack the three ``generated*`` keys; readers take the
trained counts then. Tokens, per prompt: ``expected_tokens`` is the statistics store's expected tokens PER COMPLETION
before this step's update (what a token budget planned on; null when no prompt had length evidence yet), and
``generated_tokens`` the tokens of every completion generated for it in the step, all rounds; lines written before
tokens were recorded lack both. ``engine`` is what generated them (``vllm-server``, ``vllm-colocate`` or
``transformers``). Each run starts its own log (:func:`start_allocation_log`, called by ``AllocationLogCallback`` on
the main process): a fresh run in a folder that already holds one moves it aside to
``allocations.previous-<k>.jsonl`` (so reports never read two runs as one); a run resumed from ``checkpoint-N``
keeps the lines of steps before N and archives the whole file first, so the log holds one line per generation batch
of the run that went on, and nothing is lost. A reader keeps the LAST line written for each step
(:func:`trl_adaptive.report.run_files.read_allocation_log`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import warnings
from typing import Any

from .._io import read_json, write_json_atomic

# -------------------------------------------------------------------------------------------------------------------
# The run files' names
# -------------------------------------------------------------------------------------------------------------------
ALLOCATION_LOG_FILE = "allocations.jsonl"
FINAL_STATISTICS_FILE = "prompt_statistics.json"
TRAINER_STATE_FILE = "trainer_state.json"
ADAPTIVE_STATE_FILE = "adaptive_state.json"
CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR (tests/test_report.py checks it)

_CHECKPOINT_RE = re.compile(rf"^{CHECKPOINT_PREFIX}-(\d+)$")


def checkpoint_folders(run_dir: str | os.PathLike[str]) -> list[str]:
    """The ``checkpoint-N`` folders of ``run_dir``, newest (largest N) first; none when ``run_dir`` is not a folder."""
    if not os.path.isdir(run_dir):
        return []
    found = [
        (int(m.group(1)), os.path.join(run_dir, name))
        for name in os.listdir(run_dir)
        if (m := _CHECKPOINT_RE.match(name)) and os.path.isdir(os.path.join(run_dir, name))
    ]
    return [folder for _, folder in sorted(found, reverse=True)]


def read_json_or_none(path: str | os.PathLike[str]) -> Any:
    """The parsed file, or None when it is missing, unreadable or not JSON (a save cut short, say)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):  # ValueError: JSONDecodeError and UnicodeDecodeError
        return None


# -------------------------------------------------------------------------------------------------------------------
# The adaptive state of a checkpoint
# -------------------------------------------------------------------------------------------------------------------
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


# -------------------------------------------------------------------------------------------------------------------
# allocations.jsonl
# -------------------------------------------------------------------------------------------------------------------
def _jsonable(values: Any) -> list[Any]:
    """A list of plain ints / floats, NaN written as null (strict JSON)."""
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    return [None if isinstance(v, float) and math.isnan(v) else v for v in values]


def append_allocation_record(output_dir: str, record: dict[str, Any]) -> None:
    """Append one record as a JSON line (flushed; a crash loses at most the line being written, which the reader
    skips)."""
    os.makedirs(output_dir, exist_ok=True)
    line = {k: _jsonable(v) if isinstance(v, (list, tuple)) or hasattr(v, "tolist") else v for k, v in record.items()}
    path = os.path.join(output_dir, ALLOCATION_LOG_FILE)
    with open(path, "a+b") as f:
        f.seek(0, os.SEEK_END)
        torn = f.tell() > 0 and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n"
        # a line a crash cut short gets its own line end, so this record does not join (and vanish with) it
        f.write((b"\n" if torn else b"") + (json.dumps(line, allow_nan=False) + "\n").encode("utf-8"))


def start_allocation_log(output_dir: str, resume_step: int | None) -> str | None:
    """Make ``output_dir/allocations.jsonl`` this run's log before its first step; returns the archive written, or
    None when there was nothing to set aside.

    ``resume_step`` None (a fresh run): an existing log is moved to ``allocations.previous-<k>.jsonl`` (the first free
    k), with a warning naming it. ``resume_step`` N (resumed from ``checkpoint-N``): the lines of steps >= N (the
    abandoned run's batches, which the resumed run generates again) and lines a crash cut short are dropped, after the
    whole file is copied to the archive; the kept lines are written to a temporary file and renamed over the log.
    """
    path = os.path.join(output_dir, ALLOCATION_LOG_FILE)
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    archive = _free_archive_path(output_dir)
    if resume_step is None:
        os.replace(path, archive)
        warnings.warn(
            f"output_dir={output_dir!r} already held {ALLOCATION_LOG_FILE} of an earlier run: moved to {archive}, so "
            "this run's log and report hold this run alone. Use a new output_dir to keep runs apart, or "
            "resume_from_checkpoint to continue that run.",
            stacklevel=2,
        )
        return archive
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    kept = [line for line in lines if (step := _step_of(line)) is not None and step < resume_step]
    if len(kept) == sum(1 for line in lines if line.strip()):
        return None  # every line is of a step before the checkpoint: append to it as it is
    shutil.copyfile(path, archive)
    temporary = path + ".tmp"
    with open(temporary, "wb") as f:
        f.write(b"".join(line + b"\n" for line in kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    return archive


def _step_of(line: bytes) -> int | None:
    """The ``step`` of one log line, or None for a blank, torn or foreign line."""
    try:
        step = json.loads(line.decode("utf-8")).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _free_archive_path(output_dir: str) -> str:
    stem, extension = os.path.splitext(ALLOCATION_LOG_FILE)
    k = 1
    while os.path.exists(path := os.path.join(output_dir, f"{stem}.previous-{k}{extension}")):
        k += 1
    return path
