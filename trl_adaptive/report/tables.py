"""Tables of a run report: pure functions of ``allocations.jsonl``'s records (no file reading, no figures).

Statuses are Knapsack RL's five success-rate buckets (``allocation.status``); epochs are 0-based here and shown from 1.
An example runs in ``report``'s module docstring (whose doctests are collected).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..allocation.status import SEEN_STATUSES, STATUSES, prompts_per_status, status_index


def epoch_rates(records: list[dict[str, Any]]) -> dict[int, dict[int, float]]:
    """Per epoch (0-based), each attempted prompt's success rate in that epoch: its successes / scored completions,
    over every completion generated (as the statistics store counts), or those trained in a log that predates it."""
    totals: dict[int, dict[int, list[int]]] = {}
    for record in records:
        epoch = totals.setdefault(int(record["epoch"]), {})
        prefix = "generated_" if "generated_attempts" in record else ""
        successes, attempts = record[f"{prefix}successes"], record[f"{prefix}attempts"]
        for pid, s, a in zip(record["prompt_ids"], successes, attempts, strict=True):
            if a > 0:
                entry = epoch.setdefault(int(pid), [0, 0])
                entry[0] += s
                entry[1] += a
    return {e: {pid: s / a for pid, (s, a) in rates.items()} for e, rates in sorted(totals.items())}


def visit_staleness(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How stale the prompts a run generated for were: for every prompt draw that got completions (``generated``, or
    the trained ``counts`` in a log that predates it) and had one before, the generation batches since that prompt's
    previous one. Records in step order (as ``read_allocation_log`` returns them). The sampler shows about an epoch's
    batches; a prompt source that keeps choosing the same prompts shows fewer.

    Example:
        >>> visit_staleness([{"prompt_ids": [0, 1], "counts": [2, 2]}, {"prompt_ids": [0, 2], "counts": [2, 2]},
        ...                  {"prompt_ids": [1, 2], "counts": [2, 0]}])
        {'first_visits': 3, 'revisits': 2, 'batches_since_last_visit_mean': 1.5, 'batches_since_last_visit_max': 2}
    """
    last: dict[int, int] = {}
    gaps: list[int] = []
    for index, record in enumerate(records):
        generated = record["generated"] if "generated" in record else record["counts"]
        for pid, count in zip(record["prompt_ids"], generated, strict=True):
            if count > 0:
                if pid in last:
                    gaps.append(index - last[pid])
                last[pid] = index
    return {
        "first_visits": len(last),
        "revisits": len(gaps),
        "batches_since_last_visit_mean": float(np.mean(gaps)) if gaps else None,
        "batches_since_last_visit_max": int(max(gaps)) if gaps else None,
    }


def status_per_epoch(records: list[dict[str, Any]]) -> dict[int, dict[str, int]]:
    """Prompts per status (Knapsack RL figure 8) by the success rate they reached in each epoch."""
    return {
        e: {s: n for s, n in prompts_per_status(np.array(list(r.values()))).items() if s != "unseen"}
        for e, r in epoch_rates(records).items()
    }


def transition_matrix(records: list[dict[str, Any]]) -> tuple[np.ndarray, int, int] | None:
    """Counts ``T[i, j]`` of prompts in status i in the first epoch and j in the last (figure 7), or None.

    Only prompts attempted in both epochs count; None when fewer than two epochs were recorded.
    """
    rates = epoch_rates(records)
    if len(rates) < 2:
        return None
    first, last = min(rates), max(rates)
    both = [pid for pid in rates[first] if pid in rates[last]]
    # Rows and columns are SEEN_STATUSES: an attempted prompt has a rate, so status_index is >= 1 (0 is unseen).
    before = status_index([rates[first][pid] for pid in both]) - 1
    after = status_index([rates[last][pid] for pid in both]) - 1
    matrix = np.zeros((len(SEEN_STATUSES), len(SEEN_STATUSES)), dtype=np.int64)
    np.add.at(matrix, (before, after), 1)
    return matrix, first, last


def counts_per_epoch(records: list[dict[str, Any]]) -> dict[int, np.ndarray]:
    """Every completion count n_i given in each epoch (figure 5's histogram)."""
    out: dict[int, list[int]] = {}
    for record in records:
        out.setdefault(int(record["epoch"]), []).extend(int(c) for c in record["counts"])
    return {e: np.asarray(c) for e, c in sorted(out.items())}


def counts_by_status(records: list[dict[str, Any]]) -> dict[int, dict[str, tuple[float, int]]]:
    """Per epoch, per status of the rate the allocator saw: (mean completions per prompt, number of prompts)."""
    groups: dict[int, dict[str, list[int]]] = {}
    for record in records:
        by_status = groups.setdefault(int(record["epoch"]), {})
        # null (no rate yet) reads as NaN: unseen.
        for index, count in zip(status_index(record["success_rates"]), record["counts"], strict=True):
            by_status.setdefault(STATUSES[index], []).append(int(count))
    return {e: {s: (float(np.mean(g[s])), len(g[s])) for s in STATUSES if s in g} for e, g in sorted(groups.items())}


def ratio_from_allocations(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Effective-gradient ratio (over the completions trained on, and over every one generated) and the zero-gradient
    split per generation batch, from success counts.

    A group is mixed when 0 < successes < scored completions: exactly the trainer's non-zero-variance test for 0/1
    rewards (with graded rewards the logged metric is the reference). ``step`` is the first optimizer step that
    trains on the batch (the record's global step + 1).
    """
    out: dict[str, list[float]] = {
        "step": [],
        "effective": [],
        "effective_per_generated": [],
        "all_correct": [],
        "all_wrong": [],
    }
    for record in records:
        n = np.asarray(record["counts"], dtype=np.float64)
        s, a = np.asarray(record["successes"]), np.asarray(record["attempts"])
        total = n.sum()
        out["step"].append(int(record["step"]) + 1)
        out["effective"].append(float(n[(s > 0) & (s < a)].sum() / total))
        generated = float(np.sum(record.get("generated", record["counts"])))  # older lines: every one trained
        out["effective_per_generated"].append(float(n[(s > 0) & (s < a)].sum() / generated))
        out["all_correct"].append(float(n[(n > 0) & (s == n)].sum() / total))
        out["all_wrong"].append(float(n[(n > 0) & (s == 0)].sum() / total))
    return out


def epoch_starts(records: list[dict[str, Any]]) -> list[int]:
    """Optimizer step at which each epoch after the first begins (for the vertical lines on step plots)."""
    starts, previous = [], None
    for record in records:
        if previous is not None and record["epoch"] != previous:
            starts.append(int(record["step"]) + 1)
        previous = record["epoch"]
    return starts
