"""The markdown page of a run report (``summary.md``), from the summaries ``report.summarize`` returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..allocation.status import SEEN_STATUSES, STATUS_LABELS, STATUSES


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _staleness_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """One line per run with revisits: how many generation batches earlier a prompt had last been generated for."""
    lines = []
    for s in summaries:
        stale = s.get("staleness")
        if stale and stale["revisits"]:
            lines.append(
                f"- {s['label']}: a prompt generated for again had last been generated for "
                f"{stale['batches_since_last_visit_mean']:.1f} generation batches earlier on average (at most "
                f"{stale['batches_since_last_visit_max']}; {stale['revisits']} revisits, {stale['first_visits']} "
                "prompts)."
            )
    return lines


def summary_markdown(summaries: list[dict[str, Any]], images: list[str]) -> str:
    """A short markdown page: one table over the runs, their tokens, completions by status, status counts, notes,
    figures."""
    lines = ["# Run report", ""]
    lines += [
        "| run | engine | steps | epochs | completions / batch | generation s / batch | eff.-grad. ratio | "
        "after epoch 1 | per generated | zero-grad all-correct | zero-grad all-wrong | max n_i | "
        "p=0 prompts converted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
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
            f"{_fmt(s.get('effective_gradient_ratio_per_generated_mean'))} | "
            f"{_fmt(s.get('zero_gradient_all_correct_mean'))} | {_fmt(s.get('zero_gradient_all_wrong_mean'))} | "
            f"{s.get('max_count', 'n/a')} | {converted} |"
        )
    lines += ["", "Ratios: mean over logged steps (source per run below); the effective-gradient ratio counts the"]
    lines += ['completions trained on, "per generated" the same ones over every completion generated (they differ']
    lines += ['under Seq and dynamic sampling). "Converted": p = 0 in the first epoch,']
    lines += ["p > 0 in the last.", ""]
    lines += [*_staleness_lines(summaries), ""]
    lines += _token_table(summaries)
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


def _token_table(summaries: list[dict[str, Any]]) -> list[str]:
    """The tokens table (runs whose records have token counts; none when no run has them)."""
    with_tokens = [s for s in summaries if "generated_tokens" in s]
    if not with_tokens:
        return []
    lines = [
        "## Tokens",
        "",
        "| run | generated tokens | generated / batch | trained / batch | per completion generated | "
        "per effective completion | actual / expected per completion |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in with_tokens:
        lines.append(
            f"| {s['label']} | {s['generated_tokens']:.0f} | {_fmt(s['generated_tokens_per_batch'], 1)} | "
            f"{_fmt(s.get('trained_tokens_per_batch'), 1)} | {_fmt(s['generated_tokens_per_completion'], 1)} | "
            f"{_fmt(s['tokens_per_effective_completion'], 1)} | {_fmt(s.get('actual_over_expected_tokens'), 2)} |"
        )
    lines += ["", "Per effective completion: every token generated over the completions trained on in groups with"]
    lines += ["a reward spread (0/1 rewards). Actual / expected: over the prompt draws the store had an estimate for."]
    return lines + [""]
