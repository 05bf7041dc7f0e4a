"""Prompt selection in the simulator: MoPPS's and GRESO's prompt sources against the sampler's prompts, per allocator.

Prints the markdown table of docs/benchmarks.md ("Prompt selection (simulator)"). Every run trains the same
B = M * n completions per step; a source only changes WHICH M prompts enter each batch (its pool prompts cost no
completion), the allocator then splits B over them. Each (allocator, source) pair runs on the same seeds as the
sampler's prompts with the same allocator, so the differences are paired by seed: the per-seed difference of the
effective-gradient ratio per GENERATED completion (trained completions in mixed groups / completions generated) and
of the final mean true p, with Student-t 95% intervals over seeds. A diagnostic of the simulator's model, not
held-out accuracy.

Usage:
    .venv/bin/python bench/bench_selection.py            # 2000 prompts, M = 128, n = 8, 5 epochs, seeds 0-7
    .venv/bin/python bench/bench_selection.py --quick    # 600 prompts, M = 64, 3 epochs, seeds 0-2
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from learning.analysis import interval

from trl_adaptive.sim import simulate

ALLOCATORS = ("bayes_knapsack", "uniform")
SOURCES: dict[str, tuple[str, dict[str, Any] | None]] = {
    "sampler": ("sampler", None),
    "mopps": ("mopps", None),
    "mopps (pool 8)": ("mopps", {"pool_factor": 8}),
    "greso": ("greso", None),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-prompts", type=int, default=2000)
    parser.add_argument("--batch-prompts", type=int, default=128, help="M, unique prompts per step")
    parser.add_argument("--num-generations", type=int, default=8, help="n; B = M * n completions per step")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=8, help="seeds 0..N-1, paired across sources")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--quick", action="store_true", help="600 prompts, M = 64, 3 epochs, 3 seeds")
    args = parser.parse_args()
    if args.quick:
        args.num_prompts, args.batch_prompts, args.epochs, args.seeds = 600, 64, 3, 3
    return args


def summary_of(task: tuple[str, str, int, dict[str, Any]]) -> dict[str, float]:
    """One run's summary: ``(allocator name, source label, seed, simulate's keyword arguments)``."""
    allocator, label, seed, kwargs = task
    source, source_kwargs = SOURCES[label]
    result = simulate(allocator, seed=seed, prompt_source=source, prompt_source_kwargs=source_kwargs, **kwargs)
    return result.summary | {"generated_per_step": float(result.generated.mean())}


def cell(values: list[float], digits: int = 3, signed: bool = False) -> str:
    stats = interval(values)
    mean = f"{stats['mean']:+.{digits}f}" if signed else f"{stats['mean']:.{digits}f}"
    return mean if stats["half_width"] is None else f"{mean} ± {stats['half_width']:.{digits}f}"


def table(runs: dict[tuple[str, str], list[dict[str, float]]]) -> str:
    lines = [
        "| allocator | prompt source | generated per step | eff. ratio per generated | vs sampler (paired) "
        "| epochs >= 2 | vs sampler (paired) | final mean p | vs sampler (paired) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (allocator, label), summaries in runs.items():
        base = runs[allocator, "sampler"]
        cells = [f"{np.mean([r['generated_per_step'] for r in summaries]):.0f}"]
        for key in ("effective_gradient_ratio_per_generated", "effective_gradient_ratio_per_generated_after_first"):
            cells.append(cell([r[key] for r in summaries]))
            diff = [r[key] - b[key] for r, b in zip(summaries, base, strict=True)]
            cells.append("–" if label == "sampler" else cell(diff, signed=True))
        cells.append(cell([r["final_mean_p"] for r in summaries]))
        diff = [r["final_mean_p"] - b["final_mean_p"] for r, b in zip(summaries, base, strict=True)]
        cells.append("–" if label == "sampler" else cell(diff, signed=True))
        lines.append(f"| {allocator} | {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    kwargs = {
        "num_prompts": args.num_prompts,
        "batch_prompts": args.batch_prompts,
        "num_generations": args.num_generations,
        "epochs": args.epochs,
    }
    keys = [(allocator, label) for allocator in ALLOCATORS for label in SOURCES]
    tasks = [(allocator, label, seed, kwargs) for allocator, label in keys for seed in range(args.seeds)]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        summaries = list(pool.map(summary_of, tasks))
    runs = {key: summaries[k * args.seeds : (k + 1) * args.seeds] for k, key in enumerate(keys)}
    print(
        f"# Prompt selection (simulator): {args.num_prompts} prompts, M = {args.batch_prompts}, "
        f"n = {args.num_generations}, {args.epochs} epochs, seeds 0-{args.seeds - 1}, rule `per_completion`, mix "
        "`dapo`; mean ± 95% t-interval over seeds, differences paired by seed against the sampler's prompts with "
        "the same allocator\n"
    )
    print(table(runs))
    print(f"\n{len(tasks)} runs in {time.perf_counter() - start:.0f} s ({args.workers} workers)")


if __name__ == "__main__":
    main(parse_args())
