"""The oracle ceiling, do no harm, and a map of where allocation pays, at the tuned setting (docs/benchmarks.md).

Every run trains at ``steps_per_generation=4`` (the same generation batch of 128 completions in four optimizer steps:
uniform GRPO's best steps per generated token on all three tasks, docs/benchmarks.md "Steps per token") and is paired
by seed against UNIFORM AT THE SAME SETTING, the tuned reference. The oracle arms (bench/learning/oracle.py) know every
training prompt's true success probability before each generation batch: what they gain over tuned uniform bounds
what any estimate of p gains with Knapsack RL's objective (the ceiling), and every method's share of it is reported.

Tables (``TABLES``): the three tasks with the default, the oracle arms and the do-no-harm candidates (a floor of 4
completions; a posterior that forgets in one epoch); the regime map: average completions per prompt G = 32 at the
same 128 completions per batch (4 prompts), and a difficulty mix where 80% of prompts start unsolved (``hard_mix``).

    python bench/bench_oracle.py --output_dir out/oracle                  # every table: hours on 2 cores, resumable
    python bench/bench_oracle.py --output_dir out/oracle --only skills     # one table
    python bench/bench_oracle.py --output_dir out/oracle --cached_only    # the tables and plot from the runs on disk

Writes OUT/oracle.md (the tables) and OUT/oracle_ceiling.png (accuracy against generated tokens per task: tuned
uniform, the default, the never-forgetting bayes_knapsack it replaced and the oracle knapsack, with 95% bands).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_learning import build_parser as learning_parser  # noqa: E402
from bench_learning import run_all, settings_from  # noqa: E402
from learning.analysis import DEFAULT_METHOD, T95, _fmt, accuracy_at, interval, summarize  # noqa: E402

CORE = ["uniform", DEFAULT_METHOD, "oracle_knapsack"]
FLOOR = ["bayes_knapsack_uniform_tokens_floor4", "oracle_knapsack_floor4"]
FORGET = ["bayes_knapsack_uniform_tokens_forget"]
# out subfolder -> (bench_learning arguments, methods, seeds)
TABLES: dict[str, tuple[list[str], list[str], int]] = {
    "skills": (["--task", "skills"], [*CORE, "oracle_both", *FLOOR, *FORGET], 8),
    "reversal": (["--task", "reversal"], [*CORE, "oracle_both", *FORGET], 8),
    "large_pool": (["--task", "large_pool"], [*CORE, *FORGET], 8),
    "skills_g32": (["--task", "skills", "--num_generations", "32"], CORE, 6),
    "hard_mix": (["--task", "hard_mix"], CORE, 6),
}
TUNED = ["--steps_per_generation", "4"]
# Held-out groups reported beside the overall accuracy: the initial-difficulty bins and the skills task's skills.
GROUPS = ("p0<0.2", "0.2<=p0<0.8", "p0>=0.8", "skill=reverse", "skill=shift", "skill=sort", "skill=swap")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="out/oracle")
    parser.add_argument("--only", nargs="+", choices=list(TABLES), default=list(TABLES))
    parser.add_argument("--cached_only", action="store_true", help="Summarise the runs on disk; run nothing.")
    parser.add_argument("--threads", type=int, default=1)
    return parser


def table_settings(name: str):
    arguments, _, _ = TABLES[name]
    return settings_from(learning_parser().parse_args([*arguments, *TUNED]))


def method_table(summary: dict) -> str:
    """Per method, paired against tuned uniform: final and mean accuracy, tokens to uniform's 2/3-budget accuracy,
    the effective-gradient ratio and the share of the oracle knapsack's gain."""
    lines = [
        "| method | final acc., paired vs tuned uniform | mean acc. over the budget, paired | tokens to tuned "
        "uniform's 2/3-budget acc. (ratio; seeds reaching) | eff.-grad. ratio | share of the oracle's gain: final "
        "acc. / tokens |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in summary["methods"].items():
        reach = m["tokens_to_uniform_final_ratio"]["0.667"]
        share = m.get("share_of_oracle_knapsack", {})
        shares = " / ".join(
            "n/a" if share.get(key) is None else f"{share[key]:.2f}" for key in ("final_accuracy", "token_saving")
        )
        lines.append(
            f"| {name} | {_fmt(m['paired_difference_at']['1.0'], signed=True)} | "
            f"{_fmt(m['paired_mean_accuracy_over_budget'], signed=True)} | "
            f"{_fmt(reach, digits=2)} ({reach['seeds_reaching']}/{len(m['seeds'])}) | "
            f"{_fmt(m['effective_gradient_ratio'])} | {shares if name != 'uniform' else ''} |"
        )
    return "\n".join(lines)


def group_table(summary: dict) -> str:
    """Per held-out group: tuned uniform's accuracy before -> after, each method's paired difference at the end."""
    labels = [label for label in GROUPS if label in summary["groups"]]
    lines = ["| method | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for name in summary["methods"]:
        cells = []
        for label in labels:
            entry = summary["groups"][label][name]
            if name == "uniform":
                start = entry["final"]["mean"] - entry["change"]["mean"]
                cells.append(f"{start:.3f} -> {entry['final']['mean']:.3f}")
            else:
                cells.append(_fmt(entry["paired_vs_uniform"], signed=True))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def map_table(by_table: dict[str, list[dict]], budget: int) -> str:
    """The regime map: each point's tuned uniform (final accuracy), the default's and the oracle's paired gains over
    it, and each arm against the best uniform over G on the same task (paired by seed: same prompts, same held-out)."""
    points = {"skills": ("skills", 8), "skills_g32": ("skills", 32), "reversal": ("reversal", 8),
              "large_pool": ("large_pool", 8), "hard_mix": ("hard_mix", 8)}  # fmt: skip
    final = {
        name: {(r["method"], r["seed"]): float(accuracy_at(r["curve"], [budget])[0]) for r in records}
        for name, records in by_table.items()
    }
    best_uniform = {}
    for name, (task, _) in points.items():
        if name in final:
            mean = np.mean([v for (m, _), v in final[name].items() if m == "uniform"])
            best_uniform[task] = max(best_uniform.get(task, (None, -1.0)), (name, mean), key=lambda item: item[1])
    lines = [
        "| task, G | tuned uniform, final acc. | default, paired vs uniform at this G | oracle knapsack, same | "
        "best uniform over G (its G) | default, paired vs that | oracle knapsack, paired vs that |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (task, g) in points.items():
        if name not in final:
            continue
        here, (best, _) = final[name], best_uniform[task]
        seeds = sorted(s for (m, s) in here if m == "uniform")
        cells = [f"{task}, {g}", _fmt(interval(here["uniform", s] for s in seeds))]
        for method in (DEFAULT_METHOD, "oracle_knapsack"):
            paired = [here[method, s] - here["uniform", s] for s in seeds if (method, s) in here]
            cells.append(_fmt(interval(paired), signed=True))
        cells.append(f"{best} (G={points[best][1]})")
        for method in (DEFAULT_METHOD, "oracle_knapsack"):
            pairs = [(method, s) in here and ("uniform", s) in final[best] for s in seeds]
            paired = [here[method, s] - final[best]["uniform", s] for s, ok in zip(seeds, pairs, strict=True) if ok]
            cells.append(_fmt(interval(paired), signed=True))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(by_table: dict[str, list[dict]], budget: int, path: Path) -> None:
    """Accuracy against generated tokens per task: tuned uniform, the default, the oracle knapsack (95% bands)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [name for name in ("skills", "reversal", "large_pool", "hard_mix") if name in by_table]
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False)
    grid = np.linspace(0, budget, 21)
    styles = {"uniform": ("tuned uniform", "k", "-"),
              "bayes_knapsack_uniform_tokens_forget": ("default (posterior forgets in one epoch)", "tab:blue", "-"),
              DEFAULT_METHOD: ("bayes_knapsack, never forgetting (old default)", "tab:blue", ":"),
              "oracle_knapsack": ("oracle knapsack (true p)", "tab:red", "-")}  # fmt: skip
    for axis, name in zip(axes[0], names, strict=True):
        for method, (label, color, line) in styles.items():
            curves = np.array([accuracy_at(r["curve"], grid) for r in by_table[name] if r["method"] == method])
            if len(curves) < 2:
                continue
            mean = curves.mean(0)
            half = T95[max(k for k in T95 if k <= len(curves) - 1)] * curves.std(0, ddof=1) / np.sqrt(len(curves))
            axis.plot(grid / 1000, mean, color=color, lw=1.6, ls=line, label=label)
            if line == "-":
                axis.fill_between(grid / 1000, mean - half, mean + half, color=color, alpha=0.15)
        axis.set_title(f"{name} ({len(curves)} seeds)")
        axis.set_xlabel("generated tokens (thousands)")
    axes[0][0].set_ylabel("held-out accuracy")
    axes[0][0].legend(fontsize=8, loc="lower right")
    figure.suptitle("At the tuned setting (steps_per_generation=4): the oracle's band is the ceiling", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    from learning.model import pretrained_model
    from learning.runs import TASKS

    torch.set_num_threads(args.threads)
    out, by_table, sections = Path(args.output_dir), {}, []
    for name in args.only:
        _, methods, seeds = TABLES[name]
        settings = table_settings(name)
        model = "" if args.cached_only else str(pretrained_model(corpus=TASKS[settings.task]))
        records = run_all(methods, list(range(seeds)), settings, model, out / name, args.cached_only)
        if not any(r["method"] == "uniform" for r in records):
            continue
        by_table[name] = records
        summary = summarize(records, settings)
        sections.append(f"### {name}\n\n{method_table(summary)}\n\n{group_table(summary)}")
    budget = table_settings(args.only[0]).token_budget
    sections.append("### The regime map\n\n" + map_table(by_table, budget))
    out.mkdir(parents=True, exist_ok=True)
    (out / "oracle.md").write_text("\n\n".join(sections) + "\n")
    plot(by_table, budget, out / "oracle_ceiling.png")
    print("\n\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
