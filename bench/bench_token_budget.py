"""Tokens as the budget, in the simulator: token-budgeted knapsack and bayes_knapsack against completion-budgeted.

Prints the markdown table of docs/benchmarks.md ("Tokens: value per generated token (simulator)"). Every strategy
trains the same B = M * n completions per step; a token-budgeted one also keeps the expected tokens of its counts
(the statistics store's per-prompt mean lengths) within T per step. T is uniform's own mean generated tokens per step
on the same seed (``--fractions`` scales it), so a token-budgeted allocator spends at most what uniform spends, and
what each strategy bought is compared per 1,000 generated tokens: at equal generated tokens.

For each length population (``small_spread``: +-8% between prompts as SmolLM2-135M measured, cut at 96 tokens;
``several_fold``: prompts' means 4.7-fold apart, cut at 4096) and each allocator, the token-budgeted run is paired by
seed with the completion-budgeted one: the per-seed ratio budgeted / completion-budgeted of the effective completions
and of the objective at the true p per 1,000 generated tokens, and of the tokens generated, with Student-t 95%
intervals over seeds. Figures are over epochs >= 2: epoch 1 has no statistics, so every allocator is uniform there.

Usage:
    .venv/bin/python bench/bench_token_budget.py            # 2000 prompts, M = 256, n = 8, 5 epochs, seeds 0-9
    .venv/bin/python bench/bench_token_budget.py --quick    # 600 prompts, M = 64, 3 epochs, seeds 0-2
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

import numpy as np
from learning.analysis import interval

from trl_adaptive.sim import simulate
from trl_adaptive.strategies import get_allocator

LENGTH_POPULATIONS = ("small_spread", "several_fold")
ALLOCATORS = ("knapsack", "bayes_knapsack")
# Paired figures: summary key -> column title. Ratios budgeted / completion-budgeted, same seed.
PAIRED = {
    "effective_per_1k_tokens_after_first": "effective completions per 1k tokens",
    "value_per_1k_tokens_after_first": "objective per 1k tokens",
    "tokens_generated_after_first": "tokens generated",
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-prompts", type=int, default=2000)
    parser.add_argument("--batch-prompts", type=int, default=256, help="M, unique prompts per step")
    parser.add_argument("--num-generations", type=int, default=8, help="n; B = M * n completions per step")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1, paired across strategies")
    parser.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.9], help="T as fractions of uniform's")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--quick", action="store_true", help="600 prompts, M = 64, 3 epochs, 3 seeds")
    args = parser.parse_args()
    if args.quick:
        args.num_prompts, args.batch_prompts, args.epochs, args.seeds = 600, 64, 3, 3
    return args


def summary_of(task: tuple[str, float | None, int, dict[str, Any]]) -> dict[str, float]:
    """One run's summary: ``(allocator name, token budget or None, seed, simulate's keyword arguments)``."""
    name, token_budget, seed, kwargs = task
    allocator = get_allocator(name) if token_budget is None else get_allocator(name, token_budget=token_budget)
    return simulate(allocator, seed=seed, **kwargs).summary


def run_population(args: argparse.Namespace, lengths: str, pool: Executor) -> dict[tuple[str, float | None], list]:
    """Every strategy on every seed of one length population: (allocator, fraction of T or None) -> summaries."""
    kwargs = {
        "num_prompts": args.num_prompts,
        "batch_prompts": args.batch_prompts,
        "num_generations": args.num_generations,
        "epochs": args.epochs,
        "lengths": lengths,
    }
    seeds = range(args.seeds)
    uniform = list(pool.map(summary_of, [("uniform", None, s, kwargs) for s in seeds]))
    budgets = [run["tokens_generated"] for run in uniform]  # T of each seed: uniform's mean tokens per step
    keys = [(name, fraction) for name in ALLOCATORS for fraction in (None, *args.fractions)]
    tasks = [
        (name, None if fraction is None else fraction * budgets[s], s, kwargs)
        for name, fraction in keys
        for s in seeds
    ]
    summaries = list(pool.map(summary_of, tasks))
    runs = {("uniform", None): uniform}
    for k, key in enumerate(keys):
        runs[key] = summaries[k * args.seeds : (k + 1) * args.seeds]
    return runs


def cell(values: list[float], digits: int = 3) -> str:
    stats = interval(values)
    if stats["half_width"] is None:
        return f"{stats['mean']:.{digits}f}"
    return f"{stats['mean']:.{digits}f} ± {stats['half_width']:.{digits}f}"


def table(all_runs: dict[str, dict[tuple[str, float | None], list]]) -> str:
    header = (
        "| lengths | strategy | T / uniform's tokens | tokens per completion | tokens vs uniform | value share "
        "| effective per 1k tokens | "
        + " | ".join(f"{title}: budgeted / completion-budgeted" for title in PAIRED.values())
        + " | final mean p |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for lengths, runs in all_runs.items():
        uniform = runs["uniform", None]
        for (name, fraction), summaries in runs.items():
            plain = runs.get((name, None), summaries)
            paired = [
                "–"
                if fraction is None
                else cell([run[key] / base[key] for run, base in zip(summaries, plain, strict=True)])
                for key in PAIRED
            ]
            tokens = [
                run["tokens_generated"] / base["tokens_generated"]
                for run, base in zip(summaries, uniform, strict=True)
            ]
            lines.append(
                f"| {lengths} | {name} | {'none' if fraction is None else f'{fraction:g}'} "
                f"| {np.mean([r['tokens_per_completion'] for r in summaries]):.1f} | {cell(tokens)} "
                f"| {cell([r['value_share_after_first'] for r in summaries])} "
                f"| {cell([r['effective_per_1k_tokens_after_first'] for r in summaries], _digits(lengths))} "
                f"| {' | '.join(paired)} | {np.mean([r['final_mean_p'] for r in summaries]):.3f} |"
            )
    return "\n".join(lines)


def _digits(lengths: str) -> int:
    return 2 if lengths == "small_spread" else 4


def main(args: argparse.Namespace) -> None:
    print(
        f"# Token budget: {args.num_prompts} prompts, M = {args.batch_prompts}, n = {args.num_generations}, "
        f"{args.epochs} epochs, seeds 0-{args.seeds - 1}, rule `per_completion`, mix `dapo`; figures over epochs "
        ">= 2, mean ± 95% t-interval over seeds\n"
    )
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        all_runs = {lengths: run_population(args, lengths, pool) for lengths in LENGTH_POPULATIONS}
    print(table(all_runs))
    print(f"\nTotal wall time: {time.perf_counter() - start:.1f} s on {args.workers} worker(s).")


if __name__ == "__main__":
    main(parse_args())
