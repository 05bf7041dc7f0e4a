"""``allocations.jsonl``: one line per generation batch with what the allocator decided, for reports.

TRL's logs hold per-step aggregates (``allocation/count_p90`` ...); a histogram per epoch or a prompt-status
transition matrix needs each prompt's count and rate, so the main process appends one JSON line per generation batch:

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
``generated_tokens`` the tokens of every completion generated for it in the step, all rounds (null when the
generation driver gave no counts); lines written before tokens were recorded lack both. ``engine`` is what generated
them (``vllm-server``, ``vllm-colocate`` or ``transformers``).
Each run starts its own log (:func:`start_allocation_log`, called by ``AllocationLogCallback`` on the main process):
a fresh run in a folder that already holds one moves it aside to ``allocations.previous-<k>.jsonl`` (so reports never
read two runs as one); a run resumed from ``checkpoint-N`` keeps the lines of steps before N and archives the whole
file first, so the log holds one line per generation batch of the run that went on, and nothing is lost. A reader
still keeps the LAST line written for each step (:func:`trl_adaptive.report.run_files.read_allocation_log`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import warnings
from typing import Any

from ..report.run_files import ALLOCATION_LOG_FILE


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


__all__ = ["append_allocation_record", "start_allocation_log"]
