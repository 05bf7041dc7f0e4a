"""``allocations.jsonl``: one line per generation batch with what the allocator decided, for reports.

TRL's logs hold per-step aggregates (``allocation/count_p90`` ...); a histogram per epoch or a prompt-status
transition matrix needs each prompt's count and rate, so the main process appends one JSON line per generation batch:

    {"step": 12, "epoch": 1, "prompt_ids": [...], "counts": [...], "success_rates": [... null for NaN],
     "successes": [...], "attempts": [...], "engine": "vllm-colocate"}

``epoch`` is the statistics store's epoch (0-based, the epoch being trained); ``successes`` / ``attempts`` are this
batch's scored completions per prompt; ``engine`` is what generated them (``vllm-server``,
``vllm-colocate`` or ``transformers``). A resumed run appends again from its checkpoint's step, so a reader keeps the
LAST line written for each step (:func:`trl_adaptive.run_files.read_allocation_log`, importable from here too), which
is the record of the run that went on.
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
    """Append one record as a JSON line (flushed; a crash loses at most the line being written)."""
    os.makedirs(output_dir, exist_ok=True)
    line = {k: _jsonable(v) if isinstance(v, (list, tuple)) or hasattr(v, "tolist") else v for k, v in record.items()}
    with open(os.path.join(output_dir, ALLOCATION_LOG_FILE), "a", encoding="utf-8") as f:
        f.write(json.dumps(line, allow_nan=False) + "\n")


__all__ = ["ALLOCATION_LOG_FILE", "append_allocation_record", "read_allocation_log"]
