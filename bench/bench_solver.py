"""Exact knapsack solver benchmark: KnapsackAllocator against the paper's dynamic programme, in one process.

The reference is the DP as Knapsack RL describes it (dp[i][w] = max_{N in [N_low, N_up]} dp[i-1][w - N] + V(N, p_i),
w = 0..B, backtracking; O(M * B * (N_up - N_low))), compiled with numba and timed warm (compile excluded), together
with building its value table. Ours is the public call ``KnapsackAllocator(...).allocate(p, B)``, validation included.
Success rates mimic a DAPO-like batch (many prompts near 0, many near 1, the rest spread), observed from 8 rollouts
each, from a seeded numpy Generator. Medians over repeats; the pure-knapsack objective (fallback=False) of ours and of
the reference must agree.

A second table times ``bayes_knapsack`` (the knapsack over the expected value under each prompt's Beta posterior,
here Beta(1 + c, 1 + 8 - c) from the same 8 observed rollouts): the public ``allocate`` call, and the pilot's round
two ``allocate_remaining`` after 2 completions per prompt, with its objective checked against our exact DP. A third
table times both under a token budget (``token_budget``, 80% of the tokens their counts expect without one) against
the same call without it.

Usage:
    .venv/bin/python bench/bench_solver.py                      # 256 x 8 and 4096 x 8 (large reference: ~30 s)
    .venv/bin/python bench/bench_solver.py --extrapolate-large  # estimate the 4096 x 8 reference, do not run it
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from trl_adaptive.allocation import (
    BayesKnapsackAllocator,
    KnapsackAllocator,
    PromptBatchStats,
    TokenBudgeted,
    absorb,
    expected_value_table,
    knapsack_objective,
    solve_dp,
    value_table,
)


@dataclass
class Args:
    seed: int = 0
    """seed of the numpy Generator that draws the success rates"""
    num_generations: int = 8
    """n; budget B = M * n"""
    min_rollouts: int = 2
    """N_low"""
    max_rollouts: int = 128
    """N_up"""
    repeats: int = 200
    """timed repeats of our allocator (median reported)"""
    reference_repeats: int = 7
    """timed repeats of the reference DP at 256 prompts"""
    large_reference_repeats: int = 1
    """timed repeats of the reference DP at 4096 prompts (about 25 s each on a 2-core CPU)"""
    extrapolate_large: bool = False
    """do not run the 4096-prompt reference; scale the 256-prompt time by M * B instead (marked as extrapolated)"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Args):
        flag = f"--{field.name.replace('_', '-')}"
        if field.type == "bool":
            parser.add_argument(flag, action="store_true", help=field.name)
        else:
            parser.add_argument(flag, type=int, default=field.default)
    return Args(**vars(parser.parse_args()))


# -- the reference: the paper's DP, written as described --------------------------------------------------------------
@numba.njit
def reference_dp(values: np.ndarray, budget: int, n_low: int, n_up: int) -> tuple[float, np.ndarray]:
    """dp[i][w] = max_{N in [N_low, N_up]} dp[i-1][w - N] + values[i, N]; dp[0][0] = 0, dp[0][w > 0] = -inf."""
    num_prompts = values.shape[0]
    prev = np.full(budget + 1, -np.inf)
    prev[0] = 0.0
    cur = np.empty(budget + 1)
    choice = np.zeros((num_prompts, budget + 1), dtype=np.uint8)  # N <= 255
    for i in range(num_prompts):
        for w in range(budget + 1):
            best = -np.inf
            best_n = 0
            for n in range(n_low, min(n_up, w) + 1):
                candidate = prev[w - n] + values[i, n]
                if candidate > best:
                    best = candidate
                    best_n = n
            cur[w] = best
            choice[i, w] = best_n
        prev, cur = cur, prev
    counts = np.empty(num_prompts, dtype=np.int64)
    w = budget
    for i in range(num_prompts - 1, -1, -1):
        counts[i] = choice[i, w]
        w -= choice[i, w]
    return prev[budget], counts


def reference_solve(rates: np.ndarray, budget: int, n_low: int, n_up: int) -> tuple[float, np.ndarray]:
    return reference_dp(value_table(rates, n_up), budget, n_low, n_up)


# -- workload and timing ----------------------------------------------------------------------------------------------
def dapo_like_rates(num_prompts: int, rng: np.random.Generator, num_generations: int = 8) -> np.ndarray:
    """Observed success rates c_i / t_i from 8 rollouts of true rates: 35% near 0, 35% near 1, 30% spread."""
    kind = rng.choice(3, size=num_prompts, p=[0.35, 0.35, 0.30])
    true_p = np.where(
        kind == 0,
        rng.beta(0.3, 6.0, num_prompts),
        np.where(kind == 1, rng.beta(6.0, 0.3, num_prompts), rng.random(num_prompts)),
    )
    return rng.binomial(num_generations, true_p) / num_generations


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``fn()`` over ``repeats`` runs, in ms, and the last result."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times)), result


def main(args: Args) -> None:
    rng = np.random.default_rng(args.seed)
    n_low, n_up = args.min_rollouts, args.max_rollouts
    default = KnapsackAllocator(min_rollouts=n_low, max_rollouts=n_up)
    pure = KnapsackAllocator(min_rollouts=n_low, max_rollouts=n_up, fallback=False)
    pure_dp = KnapsackAllocator(min_rollouts=n_low, max_rollouts=n_up, fallback=False, solver="dp")

    # Warm every compiled path on a small instance: compile time is excluded from every figure.
    warm = dapo_like_rates(16, rng)
    for allocator in (default, pure, pure_dp):
        allocator.allocate(warm, 16 * args.num_generations)
    reference_solve(warm, 16 * args.num_generations, n_low, n_up)

    print(f"numpy {np.__version__}, numba {numba.__version__}, {platform.processor() or platform.machine()}")
    print(f"N in [{n_low}, {n_up}], B = M x {args.num_generations}, DAPO-like rates (seed {args.seed})\n")
    rows, mismatches = [], []
    base_ms = 0.0
    for num_prompts in (256, 4096):
        rates = dapo_like_rates(num_prompts, rng, args.num_generations)
        budget = num_prompts * args.num_generations
        large = num_prompts > 256
        ours_ms, _ = timed(lambda: default.allocate(rates, budget), args.repeats)  # noqa: B023
        pure_ms, pure_allocation = timed(lambda: pure.allocate(rates, budget), args.repeats)  # noqa: B023
        pure_counts = pure_allocation.counts
        ours_dp = "not run" if large else f"{timed(lambda: pure_dp.allocate(rates, budget), 3)[0]:.1f}"  # noqa: B023
        if large and args.extrapolate_large:
            # The reference's work is proportional to M * (B + 1) at fixed N_up - N_low.
            ref_ms = base_ms * (num_prompts * (budget + 1)) / (256 * (256 * args.num_generations + 1))
            ref_note, objective = "extrapolated from 256 x n", "not run"
        else:
            repeats = args.large_reference_repeats if large else args.reference_repeats
            ref_ms, (ref_value, _) = timed(lambda: reference_solve(rates, budget, n_low, n_up), repeats)  # noqa: B023
            ref_note = f"measured, median of {repeats}" if repeats > 1 else "measured, 1 run"
            pure_value = knapsack_objective(value_table(rates, n_up), pure_counts)
            objective = f"{pure_value:.12f} vs {ref_value:.12f} (diff {abs(pure_value - ref_value):.1e})"
            if abs(pure_value - ref_value) > 1e-9 * max(1.0, abs(ref_value)):
                mismatches.append(f"{num_prompts} x {args.num_generations}: {objective}")
        base_ms = base_ms or ref_ms
        mix = " / ".join(str(int(m.sum())) for m in (rates == 0, (rates > 0) & (rates < 1), rates == 1))
        rows.append(
            [
                f"{num_prompts} x {args.num_generations}",
                mix,
                f"{ref_ms:,.1f} ({ref_note})",
                f"{ours_ms:.2f}",
                f"{pure_ms:.2f}",
                ours_dp,
                f"{ref_ms / ours_ms:,.0f}x / {ref_ms / pure_ms:,.0f}x",
                objective,
            ]
        )
    header = (
        "| M x n | p=0 / mid / p=1 | reference DP, ms | ours (default, fallback), ms | ours (pure knapsack), ms "
        "| ours (solver=dp, pure), ms | speed-up vs reference (default / pure) | pure objective: ours vs reference |"
    )
    print(header)
    print("|---" * 8 + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    bayes_table(args, rng)
    token_budget_table(args, rng)
    if mismatches:
        raise SystemExit("objective mismatch between ours and the reference DP: " + "; ".join(mismatches))


def bayes_table(args: Args, rng: np.random.Generator) -> None:
    """``bayes_knapsack``: allocate, and allocate_remaining after a pilot of 2, timed; objective vs our exact DP."""
    n_low, n_up, n = args.min_rollouts, args.max_rollouts, args.num_generations
    greedy = BayesKnapsackAllocator(min_rollouts=n_low, max_rollouts=n_up)
    greedy.allocate([0.5] * 4, 4 * n)  # compile / load the kernels
    print(f"\nbayes_knapsack (greedy on E[Value] under Beta(1 + c, 1 + {n} - c)), N in [{n_low}, {n_up}]\n")
    print("| M x n | allocate, ms | allocate_remaining after a pilot of 2, ms | objective vs exact DP |")
    print("|---|---|---|---|")
    for num_prompts in (256, 4096):
        rates = dapo_like_rates(num_prompts, rng, n)
        stats = PromptBatchStats.from_success_rates(rates, attempts=float(n))
        budget = num_prompts * n
        ms, allocation = timed(lambda: greedy.allocate(stats, budget), args.repeats)  # noqa: B023
        counts = allocation.counts
        pilot = np.full(num_prompts, 2)
        after = absorb(stats, rng.binomial(2, rates).astype(float), pilot.astype(float))
        left = budget - 2 * num_prompts
        remaining_ms, _ = timed(lambda: greedy.allocate_remaining(after, left, pilot), args.repeats)  # noqa: B023
        if num_prompts <= 256:
            table = expected_value_table(stats.beta_a, stats.beta_b, n_up)
            ours, best = (
                knapsack_objective(table, counts),
                knapsack_objective(table, solve_dp(table, budget, n_low, n_up)),
            )
            check = f"{ours:.12f} vs {best:.12f} (diff {abs(ours - best):.1e})"
            if abs(ours - best) > 1e-9 * max(1.0, abs(best)):
                raise SystemExit(f"bayes_knapsack is not exact at {num_prompts} x {n}: {check}")
        else:
            check = "not run"
        print(f"| {num_prompts} x {n} | {ms:.2f} | {remaining_ms:.2f} | {check} |")


def token_budget_table(args: Args, rng: np.random.Generator) -> None:
    """knapsack and bayes_knapsack under a token budget of 80% of what their counts expect without one: timed against
    the same call without a budget, with the reported gap bound relative to the objective."""
    n_low, n_up, n = args.min_rollouts, args.max_rollouts, args.num_generations
    print(f"\nUnder a token budget (80% of the unbudgeted counts' expected tokens), N in [{n_low}, {n_up}]\n")
    print("| allocator | M x n | no budget, ms | token budget, ms | ratio | tokens / budget | gap bound / objective |")
    print("|---|---|---|---|---|---|---|")
    for name, cls in (("knapsack", KnapsackAllocator), ("bayes_knapsack", BayesKnapsackAllocator)):
        for num_prompts in (256, 4096):
            rates = dapo_like_rates(num_prompts, rng, n)
            # Hard prompts answer longer (failures run on): a 3x spread by rate, times a lognormal per prompt.
            lengths = 200.0 * (1.0 + 2.0 * (1.0 - rates)) * rng.lognormal(0.0, 0.3, num_prompts)
            stats = dataclasses.replace(PromptBatchStats.from_success_rates(rates, float(n)), expected_tokens=lengths)
            budget = num_prompts * n
            plain = cls(min_rollouts=n_low, max_rollouts=n_up)
            plain_ms, allocation = timed(lambda: plain.allocate(stats, budget), args.repeats)  # noqa: B023
            limit = 0.8 * float(allocation.counts @ lengths)
            capped = TokenBudgeted(cls(min_rollouts=n_low, max_rollouts=n_up), limit)
            capped_ms, result = timed(lambda: capped.allocate(stats, budget), args.repeats)  # noqa: B023
            if name == "knapsack":
                table = value_table(rates, n_up)
            else:
                table = expected_value_table(stats.beta_a, stats.beta_b, n_up)
            objective = knapsack_objective(table, result.counts)
            gap = result.metrics["token_gap_bound"]
            print(
                f"| {name} | {num_prompts} x {n} | {plain_ms:.2f} | {capped_ms:.2f} | {capped_ms / plain_ms:.1f}x "
                f"| {float(result.counts @ lengths) / limit:.4f} | {gap / max(objective, 1e-300):.1e} |"
            )


if __name__ == "__main__":
    main(parse_args())
