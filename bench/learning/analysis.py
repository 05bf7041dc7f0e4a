"""Statistics over seeds: accuracy at equal generated tokens, paired against uniform, with 95% intervals.

Every run's curve is read at the same token checkpoints (linear interpolation between the evaluations around each
checkpoint; the step that crosses a checkpoint is evaluated, so the gap is at most one step's tokens). Paired
comparisons subtract uniform's value of the same seed before averaging, which removes what the seed's prompts and
streams do to both; intervals are Student-t over seeds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

# Two-sided 95% Student-t quantiles by degrees of freedom (scipy is not a dependency).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 20: 2.086, 30: 2.042}  # fmt: skip
TABLE_FRACTIONS = (0.25, 0.5, 1.0)
# Tokens to reach uniform's final accuracy, for uniform runs of these fractions of the budget (a run's trajectory
# does not depend on its budget, so uniform at 2/3 of the tokens is uniform's run of 40,000 tokens): at 2/3 a method
# that is slower than uniform is still observed up to 1.5x uniform's tokens.
REACH_FRACTIONS = (2 / 3, 1.0)
# The library's defaults (allocator="bayes_knapsack", generation_token_budget="auto" -> "uniform"): what a new method
# must beat on every task to become the default (the tables recorded before this was set compare with "knapsack").
DEFAULT_METHOD = "bayes_knapsack_uniform_tokens"
# Methods with a generation_token_budget (a number; "uniform"), each paired against the same allocator without one.
TOKEN_BUDGET_SUFFIXES = ("_token_budget", "_uniform_tokens")
# The oracle arms (oracle.py, the true success probability): every method's share of their gain is reported.
ORACLE_METHODS = ("oracle_knapsack", "oracle_pool", "oracle_both")


def interval(values) -> dict:
    """Mean and 95% t-interval half-width of ``values`` (half-width None for fewer than 2)."""
    values = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if len(values) == 0:
        return {"mean": None, "half_width": None, "n": 0}
    if len(values) < 2:
        return {"mean": float(values.mean()), "half_width": None, "n": 1}
    quantile = T95[max(k for k in T95 if k <= len(values) - 1)]
    return {
        "mean": float(values.mean()),
        "half_width": float(quantile * values.std(ddof=1) / np.sqrt(len(values))),
        "n": len(values),
    }


def accuracy_at(curve: list[list[float]], tokens: np.ndarray) -> np.ndarray:
    points = np.asarray(curve, dtype=float)
    return np.interp(tokens, points[:, 0], points[:, 1])


def accuracy_at_step(curve: list[list[float]], step: float) -> float:
    """Accuracy after ``step`` optimizer steps (curve points are [tokens, accuracy, step]; clamped at the ends)."""
    points = np.asarray(curve, dtype=float)
    return float(np.interp(step, points[:, 2], points[:, 1]))


def tokens_to_reach(curve: list[list[float]], target: float) -> float | None:
    """The first generated-token count at which the (interpolated) curve reaches ``target``; None if never."""
    points = np.asarray(curve, dtype=float)
    above = np.flatnonzero(points[:, 1] >= target)
    if len(above) == 0:
        return None
    i = above[0]
    if i == 0:
        return 0.0
    (t0, a0), (t1, a1) = points[i - 1, :2], points[i, :2]
    return float(t0 + (target - a0) / (a1 - a0) * (t1 - t0))


def _method_summary(runs: dict[int, dict], uniform: dict[int, dict], grid: np.ndarray, budget: int) -> dict:
    seeds = sorted(set(runs) & set(uniform))
    mean_accuracy = {s: float(accuracy_at(runs[s]["curve"], grid).mean()) for s in seeds}
    uniform_mean = {s: float(accuracy_at(uniform[s]["curve"], grid).mean()) for s in seeds}
    at, paired = {}, {}
    for fraction in TABLE_FRACTIONS:
        mine = {s: float(accuracy_at(runs[s]["curve"], np.array([fraction * budget]))[0]) for s in seeds}
        base = {s: float(accuracy_at(uniform[s]["curve"], np.array([fraction * budget]))[0]) for s in seeds}
        at[str(fraction)] = interval(mine.values())
        paired[str(fraction)] = interval(mine[s] - base[s] for s in seeds)
    reach = {}
    for fraction in REACH_FRACTIONS:  # uniform's final accuracy in a run of fraction x budget tokens
        ratios = []
        for s in seeds:
            target = float(accuracy_at(uniform[s]["curve"], np.array([fraction * budget]))[0])
            tokens = tokens_to_reach(runs[s]["curve"], target)
            if tokens is not None and tokens <= budget * (1 + 1e-9):  # every run is observed up to the budget
                ratios.append(tokens / (fraction * budget))
        reach[f"{fraction:.3g}"] = {**interval(ratios), "seeds_reaching": len(ratios)}
    last_step = {s: runs[s]["curve"][-1][2] for s in seeds}
    return {
        "seeds": seeds,
        "accuracy_at": at,
        "paired_difference_at": paired,
        "mean_accuracy_over_budget": interval(mean_accuracy.values()),
        "paired_mean_accuracy_over_budget": interval(mean_accuracy[s] - uniform_mean[s] for s in seeds),
        "tokens_to_uniform_final_ratio": reach,
        "paired_difference_at_equal_steps": interval(
            runs[s]["curve"][-1][1] - accuracy_at_step(uniform[s]["curve"], last_step[s]) for s in seeds
        ),
        "uniform_shorter_than_run": sum(uniform[s]["curve"][-1][2] < last_step[s] for s in seeds),
        "tokens_per_completion": interval(
            runs[s]["generated_tokens"] / runs[s]["generated_completions"] for s in seeds
        ),
        "rise": interval(runs[s]["curve"][-1][1] - runs[s]["curve"][0][1] for s in seeds),
        "effective_gradient_ratio": interval(runs[s]["effective_gradient_ratio"] for s in seeds),
        "steps": interval(runs[s]["steps"] for s in seeds),
        "generated_per_trained": interval(
            runs[s]["generated_completions"] / runs[s]["trained_completions"] for s in seeds
        ),
        "wall_seconds": interval(runs[s]["train_seconds"] for s in seeds),
    }


def oracle_share(method: dict, oracle: dict) -> dict:
    """What share of the oracle's gain over uniform a method captures (point estimates: a ratio of paired means):
    of the final-accuracy gain, and of the token saving to reach uniform's 2/3-budget accuracy (1 - the tokens
    ratio). None where the oracle's own gain is not beyond its 95% interval: there is no ceiling to share."""

    def gain(stat: dict, sign: float) -> float | None:
        if stat["mean"] is None:
            return None
        return sign * stat["mean"] + (1.0 if sign < 0 else 0.0)  # final: the gain; tokens: 1 - the ratio

    def share(mine: dict, ceiling: dict, sign: float) -> float | None:
        top, width = gain(ceiling, sign), ceiling.get("half_width")
        if top is None or width is None or top <= width or gain(mine, sign) is None:
            return None
        return gain(mine, sign) / top

    final = ("paired_difference_at", "1.0")
    tokens = ("tokens_to_uniform_final_ratio", "0.667")
    return {
        "final_accuracy": share(method[final[0]][final[1]], oracle[final[0]][final[1]], 1.0),
        "token_saving": share(method[tokens[0]][tokens[1]], oracle[tokens[0]][tokens[1]], -1.0),
    }


def group_accuracy_at(record: dict, label: str, tokens: float) -> float | None:
    """A group's held-out accuracy after ``tokens`` generated tokens (its curve shares the run's token axis)."""
    values = record.get("group_curves", {}).get(label)
    if values is None:
        return None
    return float(np.interp(tokens, [point[0] for point in record["curve"]], values))


def group_summary(by_method: dict[str, dict[int, dict]], budget: int) -> dict:
    """Per group of held-out rows (skill, length, initial difficulty) and method: the accuracy at the end of the
    budget, its change from before training, and its difference to uniform's, paired by seed. A negative change is a
    regression: what a method lets drift shows here even when its overall accuracy is level."""
    uniform = by_method["uniform"]
    records = [r for runs in by_method.values() for r in runs.values()]
    labels = sorted({label for r in records for label in r.get("group_curves", {})})
    summary: dict[str, dict] = {}
    for label in labels:
        summary[label] = {}
        for name, runs in by_method.items():
            seeds = sorted(s for s in set(runs) & set(uniform) if label in runs[s].get("group_curves", {}))
            final = {s: group_accuracy_at(runs[s], label, budget) for s in seeds}
            summary[label][name] = {
                "final": interval(final.values()),
                "change": interval(final[s] - runs[s]["group_curves"][label][0] for s in seeds),
                "paired_vs_uniform": interval(final[s] - group_accuracy_at(uniform[s], label, budget) for s in seeds),
                "rows": runs[seeds[0]]["group_sizes"][label] if seeds and "group_sizes" in runs[seeds[0]] else None,
            }
    return summary


def group_table(groups: dict[str, dict]) -> str:
    """Markdown: per group (a column), uniform's accuracy before -> at the end of the budget, then each method's
    paired difference to uniform at the end of the budget."""
    if not groups:
        return ""
    labels = list(groups)
    methods = list(next(iter(groups.values())))
    header = "| method | " + " | ".join(labels) + " |"
    lines = [header, "|---" * (len(labels) + 1) + "|"]
    cells = []
    for label in labels:
        u = groups[label]["uniform"]
        start = (u["final"]["mean"] or 0.0) - (u["change"]["mean"] or 0.0)
        cells.append(f"{start:.3f} -> {_fmt(u['final'])}")
    lines.append("| uniform (before -> after) | " + " | ".join(cells) + " |")
    for name in methods:
        if name != "uniform":
            row = [_fmt(groups[label][name]["paired_vs_uniform"], signed=True) for label in labels]
            lines.append(f"| {name} (paired vs uniform) | " + " | ".join(row) + " |")
    return "\n".join(lines)


def summarize(records: list[dict], settings) -> dict:
    """Per method: the statistics above, and the markdown table of docs/benchmarks.md."""
    by_method: dict[str, dict[int, dict]] = {}
    for record in records:
        by_method.setdefault(record["method"], {})[record["seed"]] = record
    budget = settings.token_budget
    grid = np.linspace(0, budget, settings.checkpoints + 1)
    methods = {m: _method_summary(runs, by_method["uniform"], grid, budget) for m, runs in by_method.items()}
    if DEFAULT_METHOD in by_method:  # the evidence a change of default needs: each method against today's default
        default = by_method[DEFAULT_METHOD]
        for name, runs in by_method.items():
            seeds = sorted(set(runs) & set(default))
            methods[name]["paired_mean_accuracy_vs_default"] = interval(
                accuracy_at(runs[s]["curve"], grid).mean() - accuracy_at(default[s]["curve"], grid).mean()
                for s in seeds
            )
    for name, runs in by_method.items():  # a token budget on against the same allocator without one
        suffix = next((end for end in TOKEN_BUDGET_SUFFIXES if name.endswith(end)), None)
        base = by_method.get(name.removesuffix(suffix)) if suffix else None
        if base is not None:
            seeds = sorted(set(runs) & set(base))
            methods[name]["paired_vs_without_token_budget"] = {
                "mean_accuracy_over_budget": interval(
                    accuracy_at(runs[s]["curve"], grid).mean() - accuracy_at(base[s]["curve"], grid).mean()
                    for s in seeds
                ),
                "final_accuracy": interval(runs[s]["curve"][-1][1] - base[s]["curve"][-1][1] for s in seeds),
            }
    for oracle in ORACLE_METHODS:  # each method's share of the oracle's gain over uniform
        if oracle in methods:
            for m in methods.values():
                m[f"share_of_{oracle}"] = oracle_share(m, methods[oracle])
    groups = group_summary(by_method, budget)
    return {
        "token_budget": budget,
        "token_grid": grid.tolist(),
        "methods": methods,
        "groups": groups,
        "table": table(methods) + ("\n\n" + group_table(groups) if groups else ""),
    }


def _fmt(stat: dict, digits: int = 3, signed: bool = False) -> str:
    if stat["mean"] is None:
        return "n/a"
    sign = "+" if signed else ""
    text = f"{stat['mean']:{sign}.{digits}f}"
    return text + (f" ± {stat['half_width']:.{digits}f}" if stat["half_width"] is not None else "")


def table(methods: dict[str, dict]) -> str:
    """Two markdown tables: the outcome at equal generated tokens, then what explains it."""
    outcome = [
        "| method | held-out acc. at 25% / 100% of the tokens | paired vs uniform at 25% | at 50% | at 100% | "
        "mean acc. over the budget, paired vs uniform | tokens to reach uniform's final acc., uniform run of 2/3 "
        "of the budget (ratio; seeds reaching) | of the whole budget | "
        f"mean acc. over the budget, paired vs {DEFAULT_METHOD} (the default) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    why = [
        "| method | steps in the budget | generated / trained completions | tokens per generated completion | "
        "eff.-grad. ratio | paired vs uniform at equal steps | s / run |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in methods.items():
        reached = " | ".join(
            f"{_fmt(r, digits=2)} ({r['seeds_reaching']}/{len(m['seeds'])})"
            for r in m["tokens_to_uniform_final_ratio"].values()
        )
        outcome.append(
            f"| {name} | {_fmt(m['accuracy_at']['0.25'])} / {_fmt(m['accuracy_at']['1.0'])} | "
            f"{_fmt(m['paired_difference_at']['0.25'], signed=True)} | "
            f"{_fmt(m['paired_difference_at']['0.5'], signed=True)} | "
            f"{_fmt(m['paired_difference_at']['1.0'], signed=True)} | "
            f"{_fmt(m['paired_mean_accuracy_over_budget'], signed=True)} | {reached} | "
            f"{_fmt(m.get('paired_mean_accuracy_vs_default', {'mean': None}), signed=True)} |"
        )
        short = f" ({m['uniform_shorter_than_run']} clamped)" if m["uniform_shorter_than_run"] else ""
        why.append(
            f"| {name} | {_fmt(m['steps'], digits=1)} | {_fmt(m['generated_per_trained'], digits=2)} | "
            f"{_fmt(m['tokens_per_completion'], digits=2)} | {_fmt(m['effective_gradient_ratio'])} | "
            f"{_fmt(m['paired_difference_at_equal_steps'], signed=True)}{short} | {m['wall_seconds']['mean']:.0f} |"
        )
    return "\n".join(outcome) + "\n\n" + "\n".join(why)


def write_outputs(records: list[dict], summary: dict, out: Path) -> None:
    """OUT/results.json (runs and summary, written atomically) and OUT/accuracy_per_token.png."""
    out.mkdir(parents=True, exist_ok=True)
    temporary = out / "results.json.tmp"
    temporary.write_text(json.dumps({"runs": records, "summary": summary}, indent=1))
    os.replace(temporary, out / "results.json")
    plot(records, summary, out / "accuracy_per_token.png")


def plot(records: list[dict], summary: dict, path: Path) -> None:
    """Mean held-out accuracy against generated tokens, one line per method, with its 95% band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.asarray(summary["token_grid"])
    figure, axis = plt.subplots(figsize=(9, 5.5))
    for method in summary["methods"]:
        curves = np.array([accuracy_at(r["curve"], grid) for r in records if r["method"] == method])
        mean = curves.mean(0)
        line = axis.plot(grid / 1000, mean, label=method, lw=2.2 if method == "uniform" else 1.4)[0]
        if len(curves) > 1:
            half = T95[max(k for k in T95 if k <= len(curves) - 1)] * curves.std(0, ddof=1) / np.sqrt(len(curves))
            axis.fill_between(grid / 1000, mean - half, mean + half, color=line.get_color(), alpha=0.12)
    axis.set_xlabel("generated completion tokens (thousands)")
    axis.set_ylabel("held-out accuracy (exact expected, temperature 1)")
    axis.set_title(
        f"Accuracy per token: mean of {len(next(iter(summary['methods'].values()))['seeds'])} seeds, 95% bands"
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
