"""Run reports: what a run wrote, turned into Knapsack RL's figures 5 to 8 and a short markdown summary.

A run's ``output_dir`` holds (all written by the main process only, so a run over several processes reads the same):

- ``allocations.jsonl``: one line per generation batch (prompt ids, counts, the rate each prompt was allocated
  from, this batch's successes, its expected and generated tokens); always there, even when the run was interrupted.
  The allocation histogram, the prompt-status counts, the transition matrix and the tokens axis come from it.
- ``trainer_state.json``: TRL's ``log_history``, with ``allocation/effective_gradient_ratio`` and the all-correct /
  all-wrong split. HF Trainer writes it in each ``checkpoint-N`` folder, and at the top only on
  ``trainer.save_state()``; the newest one is read.
- ``prompt_statistics.json``: the statistics store at the end of training, else the newest checkpoint's
  ``adaptive_state.json``.

Reading (``load_run``, here) is separate from the tables (``tables`` and ``tokens``: pure functions of the records
and logs), from the figures (``plots``, data in, figure out) and from the markdown page (``summary``).
``write_report`` ties them together; ``trl-adaptive report`` calls it. The tables' names are importable from
``trl_adaptive.report``.

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

from ..allocation.status import STATUS_LABELS  # examples/demo.py imports it from here
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
from .summary import summary_markdown
from .tables import (
    counts_by_status,
    counts_per_epoch,
    epoch_rates,
    epoch_starts,
    ratio_from_allocations,
    status_per_epoch,
    transition_matrix,
    visit_staleness,
)
from .tokens import (
    TOKEN_KEYS,
    cumulative_tokens_at,
    expected_vs_actual,
    logged_mean,
    token_summary,
    tokens_missing,
)

RATIO_KEYS = {
    "effective": "allocation/effective_gradient_ratio",
    "effective_per_generated": "allocation/effective_gradient_ratio_per_generated",
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
            "by status, prompt-status counts, transition matrix and the tokens axis."
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
        per_generated = np.asarray(series["effective_per_generated"], dtype=np.float64)  # NaN: logged before it was
        known = per_generated[~np.isnan(per_generated)]
        out["effective_gradient_ratio_per_generated_mean"] = float(known.mean()) if len(known) else None
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
        out["staleness"] = visit_staleness(run.records)
        out["counts_by_status"] = {str(e + 1): v for e, v in counts_by_status(run.records).items()}
        out["status_per_epoch"] = {str(e + 1): v for e, v in status_per_epoch(run.records).items()}
        transition = transition_matrix(run.records)
        if transition is not None:
            matrix, first, last = transition
            out["transition"] = {"first_epoch": first + 1, "last_epoch": last + 1, "counts": matrix.tolist()}
            out["converted_from_p0"] = int(matrix[0, 1:].sum())
            out["p0_in_first_epoch"] = int(matrix[0].sum())
    out |= _summarize_tokens(run, out["missing"])
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


def _summarize_tokens(run: RunData, missing: list[str]) -> dict[str, Any]:
    """The summary's token figures (``tokens.token_summary``, and the logged trained tokens per batch); a note
    in ``missing`` when the records cannot give them."""
    out: dict[str, Any] = {}
    trained = logged_mean(run.log_history, TOKEN_KEYS["trained"])
    if trained is not None:
        out["trained_tokens_per_batch"] = trained
    if run.records:
        why = tokens_missing(run.records)
        if why is None:
            out |= token_summary(run.records)
        else:
            missing.append(why)
    return out


def token_series(run: RunData) -> tuple[dict[str, list[float]], dict[str, list[float]]] | None:
    """The ratio series and the reward series, each with ``tokens``: the cumulative generated tokens at its steps
    (``tokens.cumulative_tokens_at``); None when the records cannot give them (``tokens_missing``)."""
    if not run.records or tokens_missing(run.records) is not None:
        return None
    ratios, rewards = ratio_series(run)[0], reward_series(run)
    ratios["tokens"] = cumulative_tokens_at(run.records, ratios["step"]).tolist()
    rewards["tokens"] = cumulative_tokens_at(run.records, rewards["step"]).tolist()
    return ratios, rewards


# ---------------------------------------------------------------------------------------------------------------------
# Writing the report
# ---------------------------------------------------------------------------------------------------------------------


def write_report(runs: list[RunData], output_dir: str | Path, dpi: int = 90) -> dict[str, Any]:
    """Render every figure the runs' files allow, plus ``summary.md`` and ``report.json``; return the summary."""
    from . import plots

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
    figures |= _token_figures(runs, plots)
    for name, figure in figures.items():
        plots.save(figure, output_dir / name, dpi=dpi)
    summaries = [summarize(r) for r in runs]
    report = {"runs": summaries, "figures": sorted(figures)}
    (output_dir / REPORT_DATA_FILE).write_text(json.dumps(report, indent=1, default=float), encoding="utf-8")
    (output_dir / REPORT_SUMMARY_FILE).write_text(summary_markdown(summaries, list(figures)), encoding="utf-8")
    return report


def _token_figures(runs: list[RunData], plots) -> dict[str, Any]:
    """``tokens.png`` (ratio and reward against cumulative generated tokens) and ``expected_tokens.png`` for the runs
    whose records have token counts; a run without them is named in its summary's notes (``_summarize_tokens``)."""
    series = {r.label: found for r in runs if (found := token_series(r)) is not None}
    if not series:
        return {}
    rewards = {label: s[1] for label, s in series.items() if s[1]["step"]}
    figures = {"tokens.png": plots.plot_tokens_axis({label: s[0] for label, s in series.items()}, rewards)}
    pairs = {r.label: pair for r in runs if r.label in series and (pair := expected_vs_actual(r.records))[0]}
    if pairs:
        figures["expected_tokens.png"] = plots.plot_expected_tokens(pairs)
    return figures


__all__ = [
    "RATIO_KEYS",
    "REWARD_KEYS",
    "RunData",
    "STATUS_LABELS",
    "counts_by_status",
    "counts_per_epoch",
    "epoch_rates",
    "epoch_starts",
    "load_run",
    "ratio_from_allocations",
    "ratio_series",
    "reward_series",
    "status_per_epoch",
    "summarize",
    "summary_markdown",
    "token_series",
    "transition_matrix",
    "visit_staleness",
    "write_report",
]
