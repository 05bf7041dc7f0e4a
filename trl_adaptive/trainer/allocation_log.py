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
A resumed run appends again from its checkpoint's step, so a reader keeps the LAST line written for each step
(:func:`trl_adaptive.run_files.read_allocation_log`, importable from here too), which is the record of the run that
went on.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from ..run_files import ALLOCATION_LOG_FILE, read_allocation_log


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


__all__ = ["ALLOCATION_LOG_FILE", "append_allocation_record", "read_allocation_log"]
