"""Run reports: what a run wrote, turned into Knapsack RL's figures 5 to 8 and a short markdown summary.

A run's ``output_dir`` holds (all written by the main process only, so a run over several processes reads the same):

- ``allocations.jsonl``: one line per generation batch (prompt ids, counts, the rate each prompt was allocated
  from, this batch's successes); always there, even when the run was interrupted. The allocation histogram, the
  prompt-status counts and the transition matrix come from it.
- ``trainer_state.json``: TRL's ``log_history``, with ``allocation/effective_gradient_ratio`` and the all-correct /
  all-wrong split. HF Trainer writes it in each ``checkpoint-N`` folder, and at the top only on
  ``trainer.save_state()``; the newest one is read.
- ``prompt_statistics.json``: the statistics store at the end of training, else the newest checkpoint's
  ``adaptive_state.json``.

Reading (``load_run``) is separate from the tables (pure functions of a :class:`RunData`) and from the figures
(``report_plots``, data in, figure out). ``write_report`` ties them together; ``trl-adaptive report`` calls it.

Example:
    >>> records = [{"step": 0, "epoch": 0, "prompt_ids": [0, 1], "counts": [4, 4], "success_rates": [None, None],
    ...             "successes": [4, 1], "attempts": [4, 4]}]
    >>> status_per_epoch(records)[0]["p1"], ratio_from_allocations(records)["effective"]
    (1, [0.5])
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .allocation.status import SEEN_STATUSES, STATUS_LABELS, STATUSES, prompts_per_status, status_index
from .run_files import (
    ADAPTIVE_STATE_FILE,
    ALLOCATION_LOG_FILE,
    FINAL_STATISTICS_FILE,
    REPORT_DATA_FILE,
    REPORT_SUMMARY_FILE,
    TRAINER_STATE_FILE,
    adaptive_state_problem,
    checkpoint_folders,
    read_json_checked,
    scan_allocation_log,
    statistics_problem,
    trainer_state_problem,
)

RATIO_KEYS = {
    "effective": "allocation/effective_gradient_ratio",
    "all_correct": "allocation/zero_gradient_ratio_all_correct",
    "all_wrong": "allocation/zero_gradient_ratio_all_wrong",
}

REWARD_KEYS = {"trained": "reward", "generated": "generated/reward_mean"}


@dataclass
class RunData:
    """Everything read from one run folder; ``notes`` says what was missing and what stood in for it."""

    label: str
    path: Path
    records: list[dict[str, Any]] | None = None
    log_history: list[dict[str, Any]] | None = None
    log_source: str | None = None
    statistics: dict[str, Any] | None = None
    statistics_source: str | None = None
    allocator: str | None = None
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------------
# Reading a run folder
# ---------------------------------------------------------------------------------------------------------------------
def load_run(run_dir: str | Path, label: str | None = None) -> RunData:
    """Read a run's ``output_dir``. Missing or damaged files become notes that say what could not be read and why.

    Raises:
        FileNotFoundError: when ``run_dir`` is not a folder, or holds neither file to report from.
        ValueError: when ``allocations.jsonl`` holds lines but none of them can be read, or nothing readable is left.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder: pass the output_dir of an AdaptiveGRPOTrainer run.")
    run = RunData(label=label or path.name, path=path)
    checkpoints = [Path(folder) for folder in checkpoint_folders(path)]
    _read_allocations(run)
    _read_trainer_logs(run, checkpoints)
    _read_statistics(run, checkpoints)
    if run.records is None and run.log_history is None:
        damaged = any("could not be read" in note for note in run.notes)
        raise (ValueError if damaged else FileNotFoundError)(
            f"Nothing to report in {path}: no readable {ALLOCATION_LOG_FILE} and no readable {TRAINER_STATE_FILE}. "
            + " ".join(run.notes)
        )
    return run


def _read_allocations(run: RunData) -> None:
    log_path = run.path / ALLOCATION_LOG_FILE
    if log_path.exists():
        log = scan_allocation_log(log_path)
        if log.lines and not log.records:
            raise ValueError(
                f"{log_path} could not be read: none of its {log.lines} lines is a usable record. {log.describe()} "
                f"Repair the file, or move it away to report from {TRAINER_STATE_FILE} alone."
            )
        if log.unreadable:
            run.notes.append(log.describe())
        run.records = log.records or None
    if run.records is None:
        run.notes.append(
            f"No {ALLOCATION_LOG_FILE} (or it is empty) in {run.path}: the run was made with log_allocations=False "
            "or by an older trl_adaptive, or this is not its output_dir. Skipped: allocation histogram, completions "
            "by status, prompt-status counts and transition matrix."
        )


def _read_checked(run: RunData, path: Path, problem: Callable[[Any], str | None]) -> Any:
    """The parsed file, or None when it is missing or fails ``problem`` (then a note says why)."""
    value, why = read_json_checked(path)
    if why is None and value is not None:
        why = problem(value)
    if why is not None:
        run.notes.append(f"{path.relative_to(run.path)} could not be read and was left out: {why}.")
        return None
    return value


def _read_trainer_logs(run: RunData, checkpoints: list[Path]) -> None:
    """The newest readable ``trainer_state.json`` (largest global step) of the run folder and its checkpoints."""
    keys = (*RATIO_KEYS.values(), "generation/seconds", *REWARD_KEYS.values())
    paths = [folder / TRAINER_STATE_FILE for folder in [run.path, *checkpoints]]
    check = partial(trainer_state_problem, metric_keys=keys)
    loaded = [(p, state) for p in paths if (state := _read_checked(run, p, check)) is not None]
    if not loaded:
        run.notes.append(
            f"No {'readable ' * any(p.exists() for p in paths)}{TRAINER_STATE_FILE} in {run.path} or its "
            "checkpoint-* folders (HF Trainer writes it at each checkpoint and on trainer.save_state()): the run "
            "stopped before its first checkpoint, or saved none and never called trainer.save_state(). The "
            f"gradient-ratio figure is computed from {ALLOCATION_LOG_FILE} instead (exact for 0/1 rewards)."
        )
        return
    source, state = max(loaded, key=lambda item: item[1].get("global_step", 0))
    run.log_history, run.log_source = state.get("log_history", []), str(source.relative_to(run.path))
    last_logged = int(state.get("global_step", 0))
    last_allocated = run.records[-1]["step"] + 1 if run.records else 0
    if last_allocated > last_logged:
        run.notes.append(
            f"Trainer logs ({run.log_source}) end at step {last_logged}, {ALLOCATION_LOG_FILE} at step "
            f"{last_allocated}: the run was interrupted after that checkpoint, or ended without "
            f"trainer.save_state(). Logged metrics stop at step {last_logged}; the gradient-ratio figure goes on "
            f"from {ALLOCATION_LOG_FILE} (exact for 0/1 rewards) and the allocation figures use every step."
        )


def _read_statistics(run: RunData, checkpoints: list[Path]) -> None:
    """The final statistics, else the newest checkpoint's, each through PromptStatistics' own checks (a file that
    loading refuses is named, not used); the allocator's name from the newest readable checkpoint."""
    stats = _read_checked(run, run.path / FINAL_STATISTICS_FILE, statistics_problem)
    if stats is not None:
        run.statistics, run.statistics_source = stats, FINAL_STATISTICS_FILE
    for checkpoint in checkpoints:
        adaptive = _read_checked(run, checkpoint / ADAPTIVE_STATE_FILE, adaptive_state_problem)
        if adaptive is None:
            continue
        run.allocator = adaptive["allocator"]["name"]
        if run.statistics is None:
            run.statistics = adaptive["statistics"]
            run.statistics_source = str((checkpoint / ADAPTIVE_STATE_FILE).relative_to(run.path))
        break
    unreadable = (run.path / FINAL_STATISTICS_FILE).exists()
    final = f"{FINAL_STATISTICS_FILE} unreadable" if unreadable else f"No {FINAL_STATISTICS_FILE}"
    if run.statistics is None:
        run.notes.append(
            f"{final} (written when training ends) and no readable checkpoint {ADAPTIVE_STATE_FILE} in {run.path}: "
            "the final per-prompt statistics are not in the summary."
        )
    elif run.statistics_source != FINAL_STATISTICS_FILE:
        run.notes.append(f"{final} (written when training ends): final statistics taken from {run.statistics_source}.")


# ---------------------------------------------------------------------------------------------------------------------
# Tables: pure functions of the records / logs
# ---------------------------------------------------------------------------------------------------------------------
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
    """Effective-gradient ratio and the zero-gradient split per generation batch, from success counts.

    A group is mixed when 0 < successes < scored completions: exactly the trainer's non-zero-variance test for 0/1
    rewards (with graded rewards the logged metric is the reference). ``step`` is the first optimizer step that
    trains on the batch (the record's global step + 1).
    """
    out: dict[str, list[float]] = {"step": [], "effective": [], "all_correct": [], "all_wrong": []}
    for record in records:
        n = np.asarray(record["counts"], dtype=np.float64)
        s, a = np.asarray(record["successes"]), np.asarray(record["attempts"])
        total = n.sum()
        out["step"].append(int(record["step"]) + 1)
        out["effective"].append(float(n[(s > 0) & (s < a)].sum() / total))
        out["all_correct"].append(float(n[(n > 0) & (s == n)].sum() / total))
        out["all_wrong"].append(float(n[(n > 0) & (s == 0)].sum() / total))
    return out


def ratio_series(run: RunData) -> tuple[dict[str, list[float]], str]:
    """Per-step ratios from the trainer logs, continued from ``allocations.jsonl`` past the last log (an interrupted
    run), or from ``allocations.jsonl`` alone without logs; and where they came from."""
    rows = [h for h in run.log_history or [] if RATIO_KEYS["effective"] in h]
    if not rows:
        if run.records:
            return ratio_from_allocations(run.records), ALLOCATION_LOG_FILE
        return {"step": [], **{k: [] for k in RATIO_KEYS}}, "none"
    series = {"step": [int(h["step"]) for h in rows]}
    series |= {name: [float(h.get(key, np.nan)) for h in rows] for name, key in RATIO_KEYS.items()}
    source = run.log_source or TRAINER_STATE_FILE
    later = [r for r in run.records or [] if int(r["step"]) + 1 > series["step"][-1]]
    if later:
        last = series["step"][-1]
        for name, values in ratio_from_allocations(later).items():
            series[name] += values
        source = f"{source} to step {last}, then {ALLOCATION_LOG_FILE}"
    return series, source


def reward_series(run: RunData) -> dict[str, list[float]]:
    """Per logged step, the mean reward of the completions trained on and of every completion generated (NaN where a
    row lacks it; older logs lack the generated): they differ under Seq and dynamic sampling, which train a subset."""
    rows = [h for h in run.log_history or [] if any(key in h for key in REWARD_KEYS.values())]
    return {"step": [int(h["step"]) for h in rows]} | {
        name: [float(h.get(key, np.nan)) for h in rows] for name, key in REWARD_KEYS.items()
    }


def epoch_starts(records: list[dict[str, Any]]) -> list[int]:
    """Optimizer step at which each epoch after the first begins (for the vertical lines on step plots)."""
    starts, previous = [], None
    for record in records:
        if previous is not None and record["epoch"] != previous:
            starts.append(int(record["step"]) + 1)
        previous = record["epoch"]
    return starts


def summarize(run: RunData) -> dict[str, Any]:
    """The summary's numbers for one run (also written to ``report.json``)."""
    series, source = ratio_series(run)
    out: dict[str, Any] = {"label": run.label, "path": str(run.path), "allocator": run.allocator}
    out["ratio_source"] = source
    out["missing"] = list(run.notes)
    if run.records and transition_matrix(run.records) is None:
        out["missing"].append("Only one epoch recorded: no transition matrix (it compares the first and last epoch).")
    if series["step"]:
        effective = np.asarray(series["effective"])
        out["steps"] = int(series["step"][-1])
        out["effective_gradient_ratio_mean"] = float(np.nanmean(effective))
        out["zero_gradient_all_correct_mean"] = float(np.nanmean(series["all_correct"]))
        out["zero_gradient_all_wrong_mean"] = float(np.nanmean(series["all_wrong"]))
        if run.records:
            starts = epoch_starts(run.records)
            after = effective[np.asarray(series["step"]) >= starts[0]] if starts else effective[:0]
            out["effective_gradient_ratio_after_epoch_1"] = float(np.nanmean(after)) if len(after) else None
    if run.records:
        counts = counts_per_epoch(run.records)
        out["generation_batches"] = len(run.records)
        out["epochs"] = len(counts)
        out["completions_per_batch"] = int(np.sum(run.records[0]["counts"]))
        out["engine"] = run.records[-1].get("engine")  # None: written before the engine was recorded
        out["prompts_per_batch"] = len(run.records[0]["counts"])
        out["prompts"] = len({pid for r in run.records for pid in r["prompt_ids"]})
        out["max_count"] = int(max(c.max() for c in counts.values()))
        out["counts_by_status"] = {str(e + 1): v for e, v in counts_by_status(run.records).items()}
        out["status_per_epoch"] = {str(e + 1): v for e, v in status_per_epoch(run.records).items()}
        transition = transition_matrix(run.records)
        if transition is not None:
            matrix, first, last = transition
            out["transition"] = {"first_epoch": first + 1, "last_epoch": last + 1, "counts": matrix.tolist()}
            out["converted_from_p0"] = int(matrix[0, 1:].sum())
            out["p0_in_first_epoch"] = int(matrix[0].sum())
    generation = [log["generation/seconds"] for log in run.log_history or [] if "generation/seconds" in log]
    if generation:
        out["generation_seconds_per_batch"] = float(np.mean(generation))
    if run.statistics:
        columns = run.statistics.get("columns", {})
        total = np.asarray(columns.get("total_successes", []))
        attempted = np.asarray(columns.get("total_attempts", np.ones_like(total))) > 0
        out["statistics_source"] = run.statistics_source
        out["never_solved"] = int(((total == 0) & attempted).sum())  # a prompt never tried is not "never solved"
        out["prompts_attempted"] = int(attempted.sum())
        out["prompts_in_statistics"] = len(total)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Writing the report
# ---------------------------------------------------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def summary_markdown(summaries: list[dict[str, Any]], images: list[str]) -> str:
    """A short markdown page: one table over the runs, completions by status, status counts, notes, figures."""
    lines = ["# Run report", ""]
    lines += [
        "| run | engine | steps | epochs | completions / batch | generation s / batch | eff.-grad. ratio | "
        "after epoch 1 | zero-grad all-correct | zero-grad all-wrong | max n_i | p=0 prompts converted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        converted = f"{s['converted_from_p0']} of {s['p0_in_first_epoch']}" if "converted_from_p0" in s else "n/a"
        name = s["label"] if s.get("allocator") in (None, s["label"]) else f"{s['label']} ({s['allocator']})"
        lines.append(
            f"| {name} | {s.get('engine') or 'n/a'} | {s.get('steps', 'n/a')} | "
            f"{s.get('epochs', 'n/a')} | {s.get('completions_per_batch', 'n/a')} | "
            f"{_fmt(s.get('generation_seconds_per_batch'), 2)} | "
            f"{_fmt(s.get('effective_gradient_ratio_mean'))} | "
            f"{_fmt(s.get('effective_gradient_ratio_after_epoch_1'))} | "
            f"{_fmt(s.get('zero_gradient_all_correct_mean'))} | {_fmt(s.get('zero_gradient_all_wrong_mean'))} | "
            f"{s.get('max_count', 'n/a')} | {converted} |"
        )
    lines += ["", 'Ratios: mean over logged steps (source per run below). "Converted": p = 0 in the first epoch,']
    lines += ["p > 0 in the last.", ""]
    for s in summaries:
        if "counts_by_status" not in s:
            continue
        lines += [f"## {s['label']}: mean completions per prompt, by the success rate the allocator saw", ""]
        header = ["epoch", *(STATUS_LABELS[k] for k in STATUSES)]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for epoch, by_status in s["counts_by_status"].items():
            cells = [f"{by_status[k][0]:.1f} ({by_status[k][1]})" if k in by_status else "" for k in STATUSES]
            lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
        lines += ["", "(number of prompt draws in brackets)", ""]
        lines += [f"Prompts per status, by their success rate in each epoch ({s['label']}):", ""]
        lines += ["| epoch | " + " | ".join(STATUS_LABELS[k] for k in SEEN_STATUSES) + " |"]
        lines += ["|" + "---|" * (len(SEEN_STATUSES) + 1)]
        for epoch, counts in s["status_per_epoch"].items():
            lines.append(f"| {epoch} | " + " | ".join(str(counts[k]) for k in SEEN_STATUSES) + " |")
        lines.append("")
    lines += ["## Sources and what is missing", ""]
    for s in summaries:
        lines.append(
            f"- **{s['label']}** ({s['path']}): ratios from `{s['ratio_source']}`; statistics from "
            f"`{s.get('statistics_source', 'none')}`."
        )
        lines += [f"  - {note}" for note in s["missing"]]
    lines += ["", "## Figures", ""]
    lines += [f"![{Path(name).stem}]({name})" for name in images]
    return "\n".join(lines) + "\n"


def write_report(runs: list[RunData], output_dir: str | Path, dpi: int = 90) -> dict[str, Any]:
    """Render every figure the runs' files allow, plus ``summary.md`` and ``report.json``; return the summary."""
    from . import report_plots as plots

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with_records = [r for r in runs if r.records]
    figures = {}
    if with_records:
        figures["allocation_histogram.png"] = plots.plot_allocation_histogram(
            {r.label: counts_per_epoch(r.records) for r in with_records}
        )
        figures["allocation_by_status.png"] = plots.plot_counts_by_status(
            {r.label: counts_by_status(r.records) for r in with_records}
        )
    series = {r.label: ratio_series(r)[0] for r in runs}
    starts = epoch_starts(with_records[0].records) if with_records else []
    figures["gradient_ratios.png"] = plots.plot_gradient_ratios(series, starts)
    if with_records:
        figures["prompt_status.png"] = plots.plot_prompt_status(
            {r.label: status_per_epoch(r.records) for r in with_records}
        )
        matrices = {r.label: m for r in with_records if (m := transition_matrix(r.records)) is not None}
        if matrices:
            figures["transition_matrix.png"] = plots.plot_transition_matrix(matrices)
    rewards = {r.label: reward_series(r) for r in runs}
    if any(not np.isnan(s["generated"]).all() for s in rewards.values() if s["step"]):  # logged by this version on
        figures["reward.png"] = plots.plot_rewards(rewards, starts)
    for name, figure in figures.items():
        plots.save(figure, output_dir / name, dpi=dpi)
    summaries = [summarize(r) for r in runs]
    report = {"runs": summaries, "figures": sorted(figures)}
    (output_dir / REPORT_DATA_FILE).write_text(json.dumps(report, indent=1, default=float), encoding="utf-8")
    (output_dir / REPORT_SUMMARY_FILE).write_text(summary_markdown(summaries, list(figures)), encoding="utf-8")
    return report
