"""The files of a run folder (a trainer's ``output_dir``), read: plain readers and checks. Imports no torch or trl.

The names of what the trainer writes are the trainer's (``trl_adaptive/trainer/output_files.py``), re-exported here
for the readers: ``trl-adaptive report``, the Hub helpers. A run folder holds::

    output_dir/
        allocations.jsonl         ALLOCATION_LOG_FILE    one line per generation batch (main process), for reports
        allocations.previous-<k>.jsonl                   an earlier run's log, set aside (trainer/output_files.py)
        prompt_statistics.json    FINAL_STATISTICS_FILE  the statistics store when training ends
        trainer_state.json        TRAINER_STATE_FILE     HF Trainer's log_history, on ``trainer.save_state()``
        checkpoint-N/             CHECKPOINT_PREFIX      TRL / transformers' checkpoint, plus:
            adaptive_state.json   ADAPTIVE_STATE_FILE    statistics, procedure state tree, epoch bookkeeping
            trainer_state.json    TRAINER_STATE_FILE
        report/                   REPORT_DIR             ``trl-adaptive report``'s default output folder:
            summary.md            REPORT_SUMMARY_FILE    the markdown summary
            report.json           REPORT_DATA_FILE       its numbers

The writers stay with what they write: ``trainer/output_files.py`` (the log's format, ``adaptive_state.json`` in a
crash-safe order), ``PromptStatistics.save`` and ``report.write_report``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..trainer.output_files import (  # the trainer owns the names of what it writes (no torch there)
    ADAPTIVE_STATE_FILE,
    ALLOCATION_LOG_FILE,
    CHECKPOINT_PREFIX,
    FINAL_STATISTICS_FILE,
    TRAINER_STATE_FILE,
    checkpoint_folders,
    read_json_or_none,
)

REPORT_DIR = "report"
REPORT_SUMMARY_FILE = "summary.md"
REPORT_DATA_FILE = "report.json"


def read_json_checked(path: str | os.PathLike[str]) -> tuple[Any, str | None]:
    """``(the parsed file, None)``; ``(None, None)`` when it is missing; ``(None, why)`` when it cannot be read."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"unreadable: {error.strerror or error}"
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "truncated or corrupt: not UTF-8 text"
    except ValueError as error:
        return None, f"truncated or corrupt: not JSON ({error})"


def _whole(value: Any, minimum: int | None = 0) -> bool:
    """A JSON whole number (not a bool), at least ``minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return float(value).is_integer() and (minimum is None or value >= minimum)


def allocation_record_problem(record: Any) -> str | None:
    """Why one parsed line of ``allocations.jsonl`` cannot be used (None when it can): the keys the trainer writes
    (``trainer/output_files.py``), their types, one entry per prompt in every list, successes <= attempts, no tokens
    for a prompt without completions."""
    if not isinstance(record, dict):
        return "not a JSON object"
    missing = [key for key in ("step", "epoch", *_RECORD_LISTS) if key not in record]
    if missing:
        return f"key {missing[0]!r} is missing"
    for key in ("step", "epoch"):
        if not _whole(record[key]):
            return f"{key!r} must be a whole number >= 0, got {record[key]!r}"
    generated = [key for key in _GENERATED_LISTS if key in record]
    if generated and len(generated) != len(_GENERATED_LISTS):  # older files have none of them
        return f"key {next(k for k in _GENERATED_LISTS if k not in record)!r} is missing (its companions are there)"
    tokens = [key for key in _TOKEN_LISTS if key in record]
    if tokens and len(tokens) != len(_TOKEN_LISTS):  # older files have neither
        return f"key {next(k for k in _TOKEN_LISTS if k not in record)!r} is missing (its companion is there)"
    lists = {key: record[key] for key in (*_RECORD_LISTS, *generated, *tokens)}
    for key, values in lists.items():
        if not isinstance(values, list) or len(values) != len(lists["prompt_ids"]):
            return f"{key!r} must be a list with one entry per prompt id ({len(lists['prompt_ids'])})"
        fits = [_fits(key, v) for v in values]
        if not all(fits):
            return f"{key!r} holds {values[fits.index(False)]!r}, not {_RECORD_KINDS[key]}"
    if tokens and generated:
        for pid, n, t in zip(lists["prompt_ids"], lists["generated"], lists["generated_tokens"], strict=True):
            if n == 0 and t not in (0, None):
                return f"generated_tokens is {t} for prompt {pid}, which had no completion generated"
    for prefix in ("", "generated_") if generated else ("",):
        successes, attempts = lists[f"{prefix}successes"], lists[f"{prefix}attempts"]
        for pid, s, a in zip(lists["prompt_ids"], successes, attempts, strict=True):
            if s > a:
                return (
                    f"{prefix}successes above {prefix}attempts for prompt {pid} ({s} > {a}), which loading the "
                    "statistics refuses"
                )
    return None


def _fits(key: str, value: Any) -> bool:
    """One entry of the list ``key`` of a record has the kind ``_RECORD_KINDS[key]`` names."""
    if key in ("success_rates", "expected_tokens"):
        number = not isinstance(value, bool) and isinstance(value, (int, float)) and value >= 0
        return value is None or (number and (key == "expected_tokens" or value <= 1))
    if key == "generated_tokens":
        return value is None or _whole(value)
    return _whole(value, None if key == "prompt_ids" else 0)


_RECORD_LISTS = ("prompt_ids", "counts", "success_rates", "successes", "attempts")
_GENERATED_LISTS = ("generated", "generated_successes", "generated_attempts")  # optional: absent from older files
_TOKEN_LISTS = ("expected_tokens", "generated_tokens")  # optional: absent from files written before tokens counted
_RECORD_KINDS = {
    **dict.fromkeys(_GENERATED_LISTS, "a whole number >= 0"),
    "expected_tokens": "a number of tokens >= 0 or null",
    "generated_tokens": "a whole number of tokens >= 0 or null",
    "prompt_ids": "an integer id",
    "counts": "a whole number >= 0",
    "success_rates": "a rate in [0, 1] or null",
    "successes": "a whole number >= 0",
    "attempts": "a whole number >= 0",
}


@dataclass
class AllocationLog:
    """What :func:`scan_allocation_log` read: the records it kept and the lines it could not use."""

    records: list[dict[str, Any]]  # the last record of each step, in step order
    lines: int  # non-blank lines in the file
    unreadable: list[tuple[int, str]] = field(default_factory=list)  # (line number from 1, why)

    def describe(self, name: str = ALLOCATION_LOG_FILE) -> str:
        """One sentence: how many lines were left out, their numbers and why (the first few reasons)."""
        numbers = [str(n) for n, _ in self.unreadable]
        shown = ", ".join(numbers[:20]) + (f" and {len(numbers) - 20} more" if len(numbers) > 20 else "")
        reasons = "; ".join(f"line {n}: {why}" for n, why in self.unreadable[:5])
        return (
            f"{name}: {len(self.unreadable)} of {self.lines} lines could not be read and were left out "
            f"(line{'s' if len(numbers) > 1 else ''} {shown}). {reasons}{'; ...' if len(numbers) > 5 else ''}. "
            "A crash cuts at most the line being written short; other bad lines mean the file was damaged or "
            "edited, and the figures from it lack those generation batches."
        )


def scan_allocation_log(path: str | os.PathLike[str]) -> AllocationLog:
    """Every line of ``allocations.jsonl`` checked (:func:`allocation_record_problem`): the usable records, the last
    one written for each step (a resumed run appends again from its checkpoint's step), and the lines left out."""
    with open(path, "rb") as f:
        raw_lines = f.read().split(b"\n")
    by_step: dict[int, dict[str, Any]] = {}
    log = AllocationLog(records=[], lines=0)
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        log.lines += 1
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            log.unreadable.append((number, "not UTF-8 text"))
            continue
        except ValueError:
            log.unreadable.append((number, "not JSON"))
            continue
        if (why := allocation_record_problem(record)) is not None:
            log.unreadable.append((number, why))
            continue
        by_step[int(record["step"])] = record
    log.records = [by_step[s] for s in sorted(by_step)]
    return log


def trainer_state_problem(state: Any, metric_keys: tuple[str, ...]) -> str | None:
    """Why a parsed ``trainer_state.json`` cannot be used (None when it can): a dict, a whole ``global_step``, a
    ``log_history`` list of dicts, and in each row that logs one of ``metric_keys``, a whole ``step`` and numbers."""
    if not isinstance(state, dict):
        return "not a JSON object"
    if not _whole(state.get("global_step", 0)):
        return f"'global_step' must be a whole number >= 0, got {state['global_step']!r}"
    history = state.get("log_history", [])
    if not isinstance(history, list) or not all(isinstance(row, dict) for row in history):
        return "'log_history' must be a list of objects"
    for number, row in enumerate(history):
        logged = [key for key in metric_keys if key in row]
        if logged and not _whole(row.get("step")):
            return f"log_history[{number}] logs {logged[0]!r} without a whole 'step'"
        for key in logged:
            if isinstance(row[key], bool) or not isinstance(row[key], (int, float)):
                return f"log_history[{number}][{key!r}] is {row[key]!r}, not a number"
    return None


def statistics_problem(state: Any) -> str | None:
    """What loading a statistics state would refuse (every check of ``PromptStatistics.load``, with the config saved
    in it), or None."""
    from ..stats import PromptStatistics  # NumPy only; imported when a report reads statistics

    try:
        PromptStatistics.from_state_dict(state)
    except ValueError as error:
        return str(error).removeprefix("state: ")
    return None


def adaptive_state_problem(state: Any) -> str | None:
    """Why a checkpoint's parsed ``adaptive_state.json`` cannot be reported from: no allocator name, or statistics
    that loading refuses."""
    allocator = state.get("allocator") if isinstance(state, dict) else None
    if not isinstance(allocator, dict) or not isinstance(allocator.get("name"), str):
        return "no allocator name: not a state file AdaptiveGRPOTrainer wrote"
    return statistics_problem(state.get("statistics"))


def read_allocation_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of ``allocations.jsonl`` in step order, the last one written for each step (a resumed run appends
    again from its checkpoint's step); lines that cannot be used (a line a crash cut short, say) are skipped:
    :func:`scan_allocation_log` says which."""
    return scan_allocation_log(path).records


__all__ = [
    "ADAPTIVE_STATE_FILE",
    "ALLOCATION_LOG_FILE",
    "CHECKPOINT_PREFIX",
    "AllocationLog",
    "FINAL_STATISTICS_FILE",
    "REPORT_DATA_FILE",
    "REPORT_DIR",
    "REPORT_SUMMARY_FILE",
    "TRAINER_STATE_FILE",
    "adaptive_state_problem",
    "allocation_record_problem",
    "checkpoint_folders",
    "read_allocation_log",
    "read_json_checked",
    "read_json_or_none",
    "scan_allocation_log",
    "statistics_problem",
    "trainer_state_problem",
]
