"""Accuracy per token: which allocator gives the better model for the same generated tokens?

A 0.86M-parameter Llama, pretrained here on a task's corpus, trains with each method through ``AdaptiveGRPOTrainer``
until it has generated the same number of completion tokens; its exact held-out accuracy is recorded at fixed token
checkpoints. Seeds pair the runs: a seed fixes the training prompts, the held-out prompts, the data order and the
sampling streams, and every run starts from the same weights.
Three regimes (``--task``), so that no single task chooses a default:

- ``reversal``: reverse a string (bench/learning/task.py); failed completions are longer, difficulty tied to length;
- ``skills``: four string skills (skills.py); every answer as long as its prompt, difficulty within each skill;
- ``large_pool``: the reversal task with 4x the training prompts, each rolled out about twice within the budget.

Held-out accuracy is also reported per group: the task's skills (or lengths) and the pretrained policy's own
initial accuracy bins, so a method that lets solved prompts drift shows it.

    make bench-learning                      # every method x 8 seeds, about 45 minutes on 2 idle CPU cores
    make bench-learning QUICK=1 OUT=out/q    # seed 0, uniform and knapsack: 1 minute, 5 with the pretraining
    make bench-learning TASK=skills OUT=out/bench_learning/skills   # the second task (TASK=large_pool: the third)
    python bench/bench_learning.py --gpu     # the same on a lent GPU: 4x the batch and the token budget

Each finished run is written to OUT/runs/ at once, and a rerun skips the runs found there (resumable; a changed
setting starts afresh, since the settings are part of the file). OUT/results.json holds every run (``curve``:
[[generated_tokens, heldout_accuracy, step], ...]) and the summary over seeds; OUT/accuracy_per_token.png the plot.
Exits non-zero when uniform's held-out accuracy does not rise by --min_rise: the benchmark can fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning.runs import METHODS, TASKS, RunSettings  # noqa: E402

QUICK_METHODS = ["uniform", "knapsack"]
# The benchmark's regimes: a task and how much of it a run sees. "large_pool": 4x the reversal task's training
# prompts, so that within the token budget each prompt is rolled out about twice (uniform: ~860 prompt visits of
# 16 x 8 completions for 512 prompts), where estimates from a prompt's own history are scarce and stale.
REGIMES: dict[str, dict] = {
    "reversal": {"task": "reversal"},
    "skills": {"task": "skills"},
    "large_pool": {"task": "reversal", "train_prompts": 512},
    # Most prompts start unsolved (9 and 10 letters: p0 0.02 and 0.005), a fifth solved (1 and 2 letters: 0.97, 0.93).
    "hard_mix": {"task": "reversal", "lengths": [9, 9, 10, 10, 9, 9, 10, 10, 1, 2]},
}
assert all(regime["task"] in TASKS for regime in REGIMES.values())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=list(REGIMES), default="reversal", help="The task and regime (REGIMES).")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--seeds", type=int, default=8, help="Seeds 0..N-1 per method (paired across methods).")
    parser.add_argument("--quick", action="store_true", help="One seed, uniform and knapsack (overrides both).")
    parser.add_argument("--output_dir", default="out/bench_learning")
    parser.add_argument("--token_budget", type=int, default=None, help="Generated tokens per run.")
    parser.add_argument("--learning_rate", type=float, default=None)
    parser.add_argument(
        "--num_generations",
        type=int,
        default=None,
        help="Average completions per prompt G; the generation batch keeps its completions (prompts = 128 / G).",
    )
    parser.add_argument(
        "--steps_per_generation",
        type=int,
        default=None,
        help="Optimizer steps per generation batch (4: the tuned setting of docs/benchmarks.md); the step cap scales.",
    )
    parser.add_argument("--gpu", action="store_true", help="On a CUDA device: 4x prompts per step and token budget.")
    parser.add_argument("--cache_dir", default=None, help="Pretrained model cache (default ~/.cache/trl_adaptive).")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (1 per queue).")
    parser.add_argument("--min_rise", type=float, default=0.15, help="Fail unless uniform rises by this much.")
    return parser


def settings_from(args: argparse.Namespace) -> RunSettings:
    settings = RunSettings(**REGIMES[args.task])
    if args.gpu:
        settings.device = "cuda"
        settings.prompts_per_step *= 4
        settings.train_prompts *= 4
        settings.token_budget *= 4
        settings.learning_rate *= 2  # 4x the batch: a larger step for the same noise
    if args.token_budget is not None:
        settings.token_budget = args.token_budget
    if args.learning_rate is not None:
        settings.learning_rate = args.learning_rate
    if args.num_generations is not None:  # equal completions per generation batch: fewer prompts at a larger G
        completions = settings.prompts_per_step * settings.num_generations
        if completions % args.num_generations:
            raise SystemExit(f"--num_generations {args.num_generations} must divide the batch's {completions}.")
        settings = replace(
            settings, num_generations=args.num_generations, prompts_per_step=completions // args.num_generations
        )
    if args.steps_per_generation is not None:
        # the step cap is a guard, not a budget: the same number of generation batches
        settings = replace(
            settings,
            steps_per_generation=args.steps_per_generation,
            max_steps=settings.max_steps * args.steps_per_generation,
        )
    return settings


def same_settings(saved: dict | None, settings: RunSettings) -> bool:
    """Whether a cached run's settings are ``settings``; a field added since it ran reads as its default (the
    behaviour the run had)."""
    return saved is not None and {**asdict(RunSettings()), **saved} == asdict(settings)


def run_all(
    methods: list[str], seeds: list[int], settings: RunSettings, model_path: str, out: Path, cached_only: bool = False
) -> list[dict]:
    """Every (seed, method) not already in ``out/runs`` under the same settings; all records, in order
    (``cached_only``: only those found there, nothing run)."""
    from learning.runs import run

    (out / "runs").mkdir(parents=True, exist_ok=True)
    records = []
    for seed in seeds:  # seed-major: an interrupted benchmark leaves complete pairs
        for method in methods:
            path = out / "runs" / f"{method}-seed{seed}.json"
            found = json.loads(path.read_text()) if path.is_file() else None
            if found is not None and same_settings(found.get("settings"), settings):
                records.append(found)
                continue
            if cached_only:
                continue
            start = time.perf_counter()
            trainer_dir = str(
                out / "trainer" / f"{method}-seed{seed}"
            )  # its own: a run's allocations.jsonl is its own
            record = {**run(method, seed, settings, model_path, trainer_dir), "settings": asdict(settings)}
            record["wall_seconds"] = time.perf_counter() - start
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(record))
            os.replace(temporary, path)
            records.append(record)
            print(
                f"[bench-learning] seed {seed} {method}: held-out {record['curve'][0][1]:.3f} -> "
                f"{record['final_heldout_accuracy']:.3f} after {record['generated_tokens']} tokens, "
                f"{record['steps']} steps, {record['wall_seconds']:.0f} s",
                flush=True,
            )
    return records


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    from learning.analysis import summarize, write_outputs
    from learning.model import pretrained_model

    methods, seeds = (QUICK_METHODS, [0]) if args.quick else (args.methods, list(range(args.seeds)))
    if "uniform" not in methods:
        methods = ["uniform", *methods]  # every comparison is paired against uniform
    settings = settings_from(args)
    if settings.device == "cpu":
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model_path = str(pretrained_model(cache_dir=args.cache_dir, corpus=TASKS[settings.task]))
    out = Path(args.output_dir)
    records = run_all(methods, seeds, settings, model_path, out)
    summary = summarize(records, settings)
    summary["wall_seconds"] = time.perf_counter() - start  # this invocation (runs found on disk are not redone)
    summary["runs_wall_seconds"] = sum(r["wall_seconds"] for r in records)  # every run's, whenever it ran
    write_outputs(records, summary, out)
    print(summary["table"])
    rise = summary["methods"]["uniform"]["rise"]["mean"]
    if rise < args.min_rise:
        print(f"[bench-learning] FAILED: uniform's held-out accuracy rose by {rise:.3f} < {args.min_rise}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
