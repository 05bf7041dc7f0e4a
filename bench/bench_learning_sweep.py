"""Accuracy per token across training settings: is the baseline the benchmark compares with a tuned one?

``bench_learning.py`` compares methods at one setting (16 prompts x 8 completions per generation batch, one
optimizer step per batch, learning rate 5e-5). A method that reaches uniform's accuracy with fewer generated tokens
there may only be compensating for a setting that is wrong for uniform too. This script runs methods at other
settings of the knobs that decide how far the optimiser moves per generated token (``prompts_per_step``: the
generation batch, hence steps in the budget; ``steps_per_generation``: optimizer steps per generation batch, TRL's
own; ``learning_rate``) and pairs every run, by seed, against

- ``uniform`` at the REFERENCE setting (bench_learning.py's, for the task): the issue's yardstick, tokens to reach
  its 2/3-budget accuracy;
- ``uniform`` at the SAME setting: what the method adds once the setting is given.

    python bench/bench_learning_sweep.py --task skills --seeds 8 --setting prompts_per_step=4 \
        --setting steps_per_generation=4 --methods uniform bayes_knapsack_uniform_tokens uniform_greso \
        --output_dir bench_out/sweep/skills

At the reference setting only ``--reference_methods`` run (uniform by default: bench_learning.py's tables hold the
other methods there); at every ``--setting`` every ``--methods``. Runs are cached per setting under
OUT/<setting>/runs (bench_learning's files: a rerun skips what is there); OUT/sweep.json holds the summary,
OUT/sweep.md the tables (``--cached_only``: from the runs on disk, nothing run). Labels are ``method@<setting>``;
the reference uniform is ``uniform``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_learning import REGIMES, run_all  # noqa: E402
from learning.analysis import DEFAULT_METHOD, _fmt, accuracy_at, interval, summarize  # noqa: E402
from learning.runs import METHODS, TASKS, RunSettings  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=list(REGIMES), default="reversal")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=["uniform"], help="At every setting.")
    parser.add_argument(
        "--reference_methods",
        nargs="+",
        choices=list(METHODS),
        default=["uniform"],
        help="At the reference setting (bench_learning.py's own tables have the rest there).",
    )
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument(
        "--setting",
        action="append",
        type=parse_setting,
        default=[],
        help=f"KEY=VALUE[,KEY=VALUE] over the reference, KEY one of {SWEPT}; repeat for several settings.",
    )
    parser.add_argument("--token_budget", type=int, default=None)
    parser.add_argument("--output_dir", default="out/bench_learning_sweep")
    parser.add_argument("--cached_only", action="store_true", help="Summarise the runs on disk; run nothing.")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (1 per queue).")
    parser.add_argument("--cache_dir", default=None, help="Pretrained model cache (default ~/.cache/trl_adaptive).")
    return parser


SWEPT = ("prompts_per_step", "steps_per_generation", "learning_rate", "num_generations")
REFERENCE = "reference"


def parse_setting(text: str) -> dict:
    """``"prompts_per_step=4,learning_rate=1e-4"`` -> ``{"prompts_per_step": 4, "learning_rate": 0.0001}``."""
    overrides = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in SWEPT or not value:
            raise argparse.ArgumentTypeError(f"{item!r}: expected KEY=VALUE with KEY one of {SWEPT}")
        overrides[key] = float(value) if key == "learning_rate" else int(value)
    return overrides


def setting_label(overrides: dict) -> str:
    return ",".join(f"{key}={value:g}" for key, value in overrides.items()) or REFERENCE


def settings_for(task: str, overrides: dict, token_budget: int | None) -> RunSettings:
    """The regime's settings with ``overrides``; the step cap scaled with the optimizer steps per token (it is a
    guard, not a budget)."""
    base = RunSettings(**REGIMES[task])
    settings = RunSettings(**{**REGIMES[task], **overrides})
    steps_per_token = settings.steps_per_generation / settings.prompts_per_step
    settings.max_steps = max(base.max_steps, round(base.max_steps * steps_per_token * base.prompts_per_step))
    if token_budget is not None:
        settings.token_budget = token_budget
    return settings


def relabel(records: list[dict], label: str, reference: bool) -> list[dict]:
    """Records renamed ``method@label``, except the reference setting's uniform, which stays ``uniform``."""
    return [
        {**r, "method": r["method"] if reference and r["method"] == "uniform" else f"{r['method']}@{label}"}
        for r in records
    ]


def same_setting_pairs(by_setting: dict[str, list[dict]], budget: int, checkpoints: int) -> dict[str, dict]:
    """Each method against uniform, and against the library's default (DEFAULT_METHOD) where it ran, at its own
    setting, paired by seed: final accuracy and mean accuracy over the budget."""
    grid = [budget * i / checkpoints for i in range(checkpoints + 1)]
    pairs: dict[str, dict[str, list[float]]] = {}
    for label, records in by_setting.items():
        bases = {base: {r["seed"]: r for r in records if r["method"] == base} for base in ("uniform", DEFAULT_METHOD)}
        for r in records:
            entry = pairs.setdefault(f"{r['method']}@{label}", {})
            for base, runs in bases.items():
                if r["method"] == base or r["seed"] not in runs:
                    continue
                b = runs[r["seed"]]["curve"]
                final = accuracy_at(r["curve"], [budget])[0] - accuracy_at(b, [budget])[0]
                mean = accuracy_at(r["curve"], grid).mean() - accuracy_at(b, grid).mean()
                entry.setdefault(f"final_vs_{base}", []).append(float(final))
                entry.setdefault(f"mean_vs_{base}", []).append(float(mean))
    return {name: {k: interval(v) for k, v in entry.items()} for name, entry in pairs.items() if entry}


def same_setting_table(pairs: dict[str, dict]) -> str:
    columns = [f"{what}_vs_{base}" for base in ("uniform", DEFAULT_METHOD) for what in ("final", "mean")]
    lines = [
        "| method@setting | final acc., paired vs uniform at the same setting | mean acc. over the budget, same | "
        f"final acc., paired vs {DEFAULT_METHOD} (the default) at the same setting | mean acc., same |",
        "|---|---|---|---|---|",
    ]
    for name, entry in pairs.items():
        cells = [_fmt(entry.get(column, {"mean": None}), signed=True) for column in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    from learning.model import pretrained_model

    methods = args.methods if "uniform" in args.methods else ["uniform", *args.methods]
    order = list(METHODS)
    seeds = list(range(args.seeds))
    out = Path(args.output_dir)
    torch.set_num_threads(args.threads)
    corpus = TASKS[REGIMES[args.task]["task"]]
    model_path = "" if args.cached_only else str(pretrained_model(cache_dir=args.cache_dir, corpus=corpus))
    by_setting: dict[str, list[dict]] = {}
    records: list[dict] = []
    for overrides in [{}, *args.setting]:
        settings, label = settings_for(args.task, overrides, args.token_budget), setting_label(overrides)
        reference = label == REFERENCE
        here = sorted(set(args.reference_methods) | {"uniform"}, key=order.index) if reference else methods
        by_setting[label] = run_all(here, seeds, settings, model_path, out / label, args.cached_only)
        records += relabel(by_setting[label], label, reference=reference)
    if not any(r["method"] == "uniform" for r in records):
        raise SystemExit(f"no uniform run at the reference setting in {out / REFERENCE}: run without --cached_only.")
    summary = summarize(records, settings)
    pairs = same_setting_pairs(by_setting, settings.token_budget, settings.checkpoints)
    text = summary["table"] + "\n\n" + same_setting_table(pairs)
    out.mkdir(parents=True, exist_ok=True)
    temporary = out / "sweep.json.tmp"
    temporary.write_text(json.dumps({"summary": summary, "same_setting": pairs}, indent=1))
    os.replace(temporary, out / "sweep.json")
    (out / "sweep.md").write_text(text + "\n")
    print(text)
    return 0


__all__ = ["build_parser", "parse_setting", "relabel", "same_setting_pairs", "setting_label", "settings_for"]

if __name__ == "__main__":
    sys.exit(main())
