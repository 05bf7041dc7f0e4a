"""The files of a run folder (a trainer's ``output_dir``): their names, and plain readers. Imports no torch or trl.

Every module that writes or reads these files takes the names from here: the trainer, its checkpoint logic, the Hub
helpers and ``trl-adaptive report``. A run folder holds::

    output_dir/
        allocations.jsonl         ALLOCATION_LOG_FILE    one line per generation batch (main process), for reports
        prompt_statistics.json    FINAL_STATISTICS_FILE  the statistics store when training ends
        trainer_state.json        TRAINER_STATE_FILE     HF Trainer's log_history, on ``trainer.save_state()``
        checkpoint-N/             CHECKPOINT_PREFIX      TRL / transformers' checkpoint, plus:
            adaptive_state.json   ADAPTIVE_STATE_FILE    statistics, allocator state, epoch bookkeeping
            trainer_state.json    TRAINER_STATE_FILE
        report/                   REPORT_DIR             ``trl-adaptive report``'s default output folder:
            summary.md            REPORT_SUMMARY_FILE    the markdown summary
            report.json           REPORT_DATA_FILE       its numbers

The writers stay with what they write: ``trainer/allocation_log.py`` (the log's format), ``trainer/checkpoint.py``
(``adaptive_state.json``, in a crash-safe order), ``PromptStatistics.save`` and ``report.write_report``.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

ALLOCATION_LOG_FILE = "allocations.jsonl"
FINAL_STATISTICS_FILE = "prompt_statistics.json"
TRAINER_STATE_FILE = "trainer_state.json"
ADAPTIVE_STATE_FILE = "adaptive_state.json"
CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR (tests/test_report.py checks it)
REPORT_DIR = "report"
REPORT_SUMMARY_FILE = "summary.md"
REPORT_DATA_FILE = "report.json"

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


def read_allocation_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of ``allocations.jsonl`` in step order, the last one written for each step (a resumed run appends
    again from its checkpoint's step); a line a crash cut short is skipped."""
    by_step: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line a crash cut short
            by_step[int(record["step"])] = record
    return [by_step[s] for s in sorted(by_step)]


__all__ = [
    "ADAPTIVE_STATE_FILE",
    "ALLOCATION_LOG_FILE",
    "CHECKPOINT_PREFIX",
    "FINAL_STATISTICS_FILE",
    "REPORT_DATA_FILE",
    "REPORT_DIR",
    "REPORT_SUMMARY_FILE",
    "TRAINER_STATE_FILE",
    "checkpoint_folders",
    "read_allocation_log",
    "read_json_or_none",
]
