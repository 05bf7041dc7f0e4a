"""Learning-signal simulator benchmark: every registered allocator at EQUAL budget, paired seeds, several rules.

Prints markdown tables for docs/benchmarks.md ("Learning-signal simulator"):

1. per learning rule, on the default difficulty mix: effective-gradient ratio (all steps, and epochs >= 2 only,
   since epoch 1 has no statistics), each with its ratio to uniform measured on the same seeds; zero-gradient shares
   from all-correct / all-wrong groups; final mean true p; prompts converted from observed p = 0;
2. sensitivity: the epochs >= 2 ratio to uniform for every difficulty mix x learning rule;
3. strategies that generate more than they train, at the same TRAINING budget B = M * n: Reinforce-Ada Seq-Pos and
   Seq-Balance (rounds, then n selected per prompt) and DAPO dynamic sampling around uniform and knapsack, with the
   effective-gradient ratio per TRAINED completion and per GENERATED completion and the generated / trained ratio,
   for every learning rule, every mix, and the paper's group size n = 4;
4. fresh estimates: every strategy (plan-ahead, pilots, Pilot-Commit's rule, Seq, dynamic sampling) scored by the
   effective-gradient ratio per trained and per generated completion, mixed prompts per 1,000 generated completions
   and the value share (the paper's objective at the TRUE p over the best allocation of the same completions at the
   true p), on every difficulty mix and learning rule, plus the posterior's weak prior and half-life, and n = 4 / 16.

Tables 1, 3 and 4 end with the tokens each strategy generated against uniform on the same seeds, under the default
length model (SmolLM2-135M's shape, nothing cut: lengths change no other figure). The token budget has its own
benchmark, ``bench/bench_token_budget.py``.

Tables 1-2 list the plan-ahead allocators only (``registered_allocators()``); table 3 is where the round procedures
of Reinforce-Ada Seq (registered in ``trl_adaptive.strategies``) are compared, table 4 adds Pilot-Commit.

Usage:
    .venv/bin/python bench/bench_simulator.py                 # 2000 prompts, 256 per step, n = 8, 5 epochs, 5 seeds
    .venv/bin/python bench/bench_simulator.py --quick         # a smaller smoke run
    .venv/bin/python bench/bench_simulator.py --rounds-only   # table 3 only
    .venv/bin/python bench/bench_simulator.py --fresh-only    # table 4 only (fresh estimates)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from trl_adaptive.allocation.base import Allocator
from trl_adaptive.sampling import Procedure, Sequential
from trl_adaptive.sim import (
    MIXES,
    RULE_KINDS,
    STATUSES,
    DynamicSampling,
    LearningRule,
    Pilot,
    PilotCommit,
    compare,
)
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import (
    as_procedure,
    get_allocator,
    registered_allocators,
    registered_strategies,
    strategy,
)


@dataclass
class Args:
    num_prompts: int = 2000
    """dataset size"""
    batch_prompts: int = 256
    """M, unique prompts per step"""
    num_generations: int = 8
    """n; budget per step B = M * n for every allocator"""
    epochs: int = 5
    """passes over the dataset"""
    seeds: int = 5
    """paired seeds per allocator (same population and batches for every allocator)"""
    sensitivity_seeds: int = 3
    """seeds per cell of the mix x rule sensitivity table"""
    workers: int = min(2, os.cpu_count() or 1)
    """processes"""
    quick: bool = False
    """smoke run: 600 prompts, 64 per step, 3 epochs, 2 seeds"""
    rounds_only: bool = False
    """only table 3 (Seq and dynamic sampling at equal training budget)"""
    fresh_only: bool = False
    """only table 4 (fresh estimates: value share, mixed prompts per 1,000, pilots, Pilot-Commit)"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(Args):
        if f.type == "bool":
            parser.add_argument(f"--{f.name.replace('_', '-')}", action="store_true")
        else:
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default)
    args = Args(**vars(parser.parse_args()))
    if args.quick:
        args = dataclasses.replace(
            args, num_prompts=600, batch_prompts=64, epochs=3, seeds=2, sensitivity_seeds=2, quick=True
        )
    return args


def allocator_specs(epochs: int) -> dict[str, str | Allocator]:
    """Every registered plan-ahead allocator with its defaults, plus Knapsack without its fallback when supported.

    Each runs its registered strategy's procedure, as the trainer does (``"cero"`` is CERO's pacing; its fixed
    mapping is the extra row ``cero (pacing=False)``). CERO is told the run's number of epochs (its K, TRL's
    ``num_train_epochs``), as the trainer would. Round procedures (Reinforce-Ada Seq, Pilot-Commit) are not
    allocators: they are left to :func:`rounds_specs` and :func:`fresh_specs`.
    """
    plan_ahead = registered_allocators()
    names = ["uniform"] + [name for name in plan_ahead if name != "uniform"]
    specs: dict[str, str | Allocator | Procedure] = {name: name for name in names}
    if "cero" in specs and "num_epochs" in inspect.signature(type(get_allocator("cero"))).parameters:
        specs["cero"] = get_allocator("cero", num_epochs=epochs)
        specs["cero (pacing=False)"] = as_procedure("cero", num_epochs=epochs, pacing=False)
    if "knapsack" in specs:
        knapsack = get_allocator("knapsack")
        if "fallback" in inspect.signature(type(knapsack)).parameters:
            specs["knapsack (fallback=False)"] = get_allocator("knapsack", fallback=False)
    return specs


def rounds_specs() -> dict[str, str | Allocator | Procedure]:
    """Table 3: the references, every Reinforce-Ada Seq procedure, and dynamic sampling around uniform and knapsack."""
    specs: dict[str, str | Allocator | Procedure] = {"uniform": "uniform"}
    plan = ["knapsack"] if "knapsack" in registered_allocators() else []
    specs.update({name: name for name in plan})
    sequential = [name for name in registered_strategies() if _is_sequential(strategy(name).procedure)]
    specs.update({name: name for name in sequential})
    for name in ["uniform", *plan]:
        specs[f"{name} + dynamic sampling"] = DynamicSampling(as_procedure(name))
    return specs


def _is_sequential(procedure: Any) -> bool:
    return isinstance(procedure, type) and issubclass(procedure, Sequential)


def fmt_ratio(row: dict[str, Any], key: str) -> str:
    return f"{row[key + '_vs_baseline']:.3f} ± {row[key + '_vs_baseline_std']:.3f}"


def main_table(rows: list[dict[str, Any]]) -> str:
    header = (
        "| allocator | eff.-grad. ratio | vs uniform | eff.-grad. ratio, epochs ≥ 2 | vs uniform, epochs ≥ 2 "
        "| zero-grad all-correct | zero-grad all-wrong | eff. prompt ratio | final mean p | converted from p=0 "
        "| initially-hard final p | alloc ms | tokens vs uniform |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['allocator']} | {r['effective_gradient_ratio']:.3f} | {fmt_ratio(r, 'effective_gradient_ratio')} "
            f"| {r['effective_gradient_ratio_after_first']:.3f} "
            f"| {fmt_ratio(r, 'effective_gradient_ratio_after_first')} "
            f"| {r['zero_grad_all_correct']:.3f} | {r['zero_grad_all_wrong']:.3f} | {r['effective_prompt_ratio']:.3f} "
            f"| {r['final_mean_p']:.3f} | {r['converted_from_zero']:.0f} | {r['hard_final_mean_p']:.4f} "
            f"| {r['allocate_ms']:.1f} | {fmt_ratio(r, 'tokens_generated')} |"
        )
    return "\n".join(lines)


def epoch_table(rows: list[dict[str, Any]], epochs: int) -> str:
    header = "| allocator | " + " | ".join(f"epoch {e}" for e in range(1, epochs + 1)) + " |"
    lines = [header, "|---|" + "---|" * epochs]
    for r in rows:
        cells = " | ".join(f"{r[f'effective_gradient_ratio_epoch{e}']:.3f}" for e in range(1, epochs + 1))
        lines.append(f"| {r['allocator']} | {cells} |")
    return "\n".join(lines)


def status_table(rows: list[dict[str, Any]]) -> str:
    header = "| allocator | " + " | ".join(STATUS_LABELS[name] for name in STATUSES) + " |"
    lines = [header, "|---|" + "---|" * len(STATUSES)]
    for r in rows:
        cells = " | ".join(_cell(r[f"mean_count_{name}"]) for name in STATUSES)
        lines.append(f"| {r['allocator']} | {cells} |")
    return "\n".join(lines)


STATUS_LABELS = {
    "unseen": "unseen",
    "p0": "p̂ = 0",
    "p0_0.2": "(0, 0.2]",
    "p0.2_0.8": "(0.2, 0.8)",
    "p0.8_1": "[0.8, 1)",
    "p1": "p̂ = 1",
}


def _cell(value: float) -> str:
    return "–" if value != value else f"{value:.1f}"


# Sensitivity rows: the four rules at their defaults, plus a 3x faster learner (p moves more within an epoch, so the
# previous epoch's p̂ is staler) and a learner without transfer between prompts.
SENSITIVITY_RULES: dict[str, LearningRule] = {kind: LearningRule(kind=kind) for kind in RULE_KINDS}
SENSITIVITY_RULES["per_completion, lr x3"] = LearningRule(kind="per_completion", lr=0.9)
SENSITIVITY_RULES["per_completion, transfer 0"] = LearningRule(kind="per_completion", transfer=0.0)


def rounds_table(rows: list[dict[str, Any]]) -> str:
    header = (
        "| strategy | generated / trained | eff.-grad. per trained | vs uniform | vs uniform, epochs ≥ 2 "
        "| eff.-grad. per generated | vs uniform | vs uniform, epochs ≥ 2 | zero-grad all-correct "
        "| zero-grad all-wrong | rounds / step | DS fill share | Seq unfinished / step | final mean p "
        "| converted from p=0 | initially-hard final p | tokens vs uniform |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['allocator']} | {r['generated_over_trained']:.2f} | {r['effective_gradient_ratio']:.3f} "
            f"| {fmt_ratio(r, 'effective_gradient_ratio')} | {fmt_ratio(r, 'effective_gradient_ratio_after_first')} "
            f"| {r['effective_gradient_ratio_per_generated']:.3f} "
            f"| {fmt_ratio(r, 'effective_gradient_ratio_per_generated')} "
            f"| {fmt_ratio(r, 'effective_gradient_ratio_per_generated_after_first')} "
            f"| {r['zero_grad_all_correct']:.3f} | {r['zero_grad_all_wrong']:.3f} | {r['rounds_per_step']:.2f} "
            f"| {r['filled_share']:.3f} | {r['unfinished_prompts']:.1f} | {r['final_mean_p']:.3f} "
            f"| {r['converted_from_zero']:.0f} | {r['hard_final_mean_p']:.4f} | {fmt_ratio(r, 'tokens_generated')} |"
        )
    return "\n".join(lines)


def rounds_cell(row: dict[str, Any]) -> str:
    """per trained vs uniform / per generated vs uniform / generated over trained / final mean p (epochs >= 2)."""
    return (
        f"{row['effective_gradient_ratio_after_first_vs_baseline']:.2f} / "
        f"{row['effective_gradient_ratio_per_generated_after_first_vs_baseline']:.2f} / "
        f"{row['generated_over_trained']:.2f} / {row['final_mean_p']:.3f}"
    )


def run_rounds(args: Args, sizes: dict[str, int], pool: Executor) -> None:
    """Table 3: equal TRAINING budget, strategies that generate more than they train."""
    specs = rounds_specs()
    seeds = list(range(args.seeds))
    print(
        "\n## Equal training budget: Reinforce-Ada Seq and dynamic sampling (learning rule `per_completion`, mix "
        f"`dapo`, {args.seeds} seeds)\n"
    )
    rows = compare(specs, seeds, executor=pool, learning_rule="per_completion", mix="dapo", **sizes)
    print(rounds_table(rows))
    print("\nMean N_i GENERATED by the prompt's status in the store when allocated (epochs ≥ 2):\n")
    print(status_table(rows))

    labels = list(specs)
    cell_doc = "per trained vs uniform / per generated vs uniform / generated over trained / final mean p"
    print(f"\nEvery learning rule, mix `dapo`, {args.seeds} seeds; epochs ≥ 2; each cell: {cell_doc}\n")
    lines = ["| strategy | " + " | ".join(f"`{rule}`" for rule in RULE_KINDS) + " |", "|---|" + "---|" * 4]
    by_rule = {
        rule: {r["allocator"]: r for r in compare(specs, seeds, executor=pool, learning_rule=rule, **sizes)}
        for rule in RULE_KINDS
    }
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(rounds_cell(by_rule[rule][label]) for rule in RULE_KINDS) + " |")
    print("\n".join(lines))

    sens_seeds = list(range(args.sensitivity_seeds))
    print(f"\nEvery mix, rule `per_completion`, {args.sensitivity_seeds} seeds; epochs ≥ 2; each cell: {cell_doc}\n")
    lines = ["| strategy | " + " | ".join(f"`{mix}`" for mix in MIXES) + " |", "|---|" + "---|" * len(MIXES)]
    by_mix = {
        mix: {r["allocator"]: r for r in compare(specs, sens_seeds, executor=pool, mix=mix, **sizes)} for mix in MIXES
    }
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(rounds_cell(by_mix[mix][label]) for mix in MIXES) + " |")
    print("\n".join(lines))

    paper = {**sizes, "num_generations": 4}
    print(
        f"\n## The paper's group size: n = 4 (B = {args.batch_prompts * 4} per step), rule `per_completion`, mix "
        f"`dapo`, {args.seeds} seeds\n"
    )
    print(rounds_table(compare(specs, seeds, executor=pool, learning_rule="per_completion", mix="dapo", **paper)))


def main(args: Args) -> None:
    specs = allocator_specs(args.epochs)
    sizes = {
        "num_prompts": args.num_prompts,
        "batch_prompts": args.batch_prompts,
        "num_generations": args.num_generations,
        "epochs": args.epochs,
    }
    budget = args.batch_prompts * args.num_generations
    print(
        f"# Simulator: {args.num_prompts} prompts, M={args.batch_prompts}, n={args.num_generations} "
        f"(B={budget} per step), {args.epochs} epochs x {args.num_prompts // args.batch_prompts} steps, "
        f"seeds 0..{args.seeds - 1}; allocators: {', '.join(specs)}"
    )
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        if not (args.rounds_only or args.fresh_only):
            run(args, specs, sizes, pool)
        if not args.fresh_only:
            run_rounds(args, sizes, pool)
        if not args.rounds_only:
            run_fresh(args, sizes, pool)
    print(f"\nTotal wall time: {time.perf_counter() - start:.1f} s on {args.workers} worker(s).")


def run(args: Args, specs: dict[str, str | Allocator], sizes: dict[str, int], pool: Executor) -> None:
    seeds = list(range(args.seeds))
    for rule in RULE_KINDS:
        rows = compare(specs, seeds, executor=pool, learning_rule=rule, mix="dapo", **sizes)
        print(f"\n## learning rule `{rule}`, mix `dapo` (mean over {args.seeds} seeds; ratio ± std over seeds)\n")
        print(main_table(rows))
        if rule == "per_completion":
            print("\nEffective-gradient ratio per epoch:\n")
            print(epoch_table(rows, args.epochs))
            print("\nMean N_i by the prompt's status in the store when allocated (epochs ≥ 2):\n")
            print(status_table(rows))

    print(
        f"\n## Sensitivity: effective-gradient ratio vs uniform, epochs ≥ 2 ({args.sensitivity_seeds} seeds); "
        "in brackets the final mean p minus uniform's\n"
    )
    labels = [label for label in specs if label != "uniform"]
    header = "| mix | rule | " + " | ".join(labels) + " |"
    lines = [header, "|---|---|" + "---|" * len(labels)]
    sens_seeds = list(range(args.sensitivity_seeds))
    for mix in MIXES:
        for rule_label, rule in SENSITIVITY_RULES.items():
            rows = {
                r["allocator"]: r
                for r in compare(specs, sens_seeds, executor=pool, learning_rule=rule, mix=mix, **sizes)
            }
            base_p = rows["uniform"]["final_mean_p"]
            cells = " | ".join(
                f"{rows[label]['effective_gradient_ratio_after_first_vs_baseline']:.3f} "
                f"({rows[label]['final_mean_p'] - base_p:+.3f})"
                for label in labels
            )
            lines.append(f"| {mix} | {rule_label} | {cells} |")
    print("\n".join(lines))


# ==== table 4: fresh estimates ======================================================================================
# The posterior's weak prior: Beta(1, 1) is the store's default (CERO's); Jeffreys' Beta(0.5, 0.5) is the alternative.
JEFFREYS = functools.partial(PromptStatistics, posterior_prior_a=0.5, posterior_prior_b=0.5)
Spec = str | Allocator | Procedure


def fresh_specs() -> dict[str, tuple[Spec, Any]]:
    """label -> (strategy, statistics factory or None for the default store). Every strategy at the same budget."""
    specs: dict[str, tuple[Spec, Any]] = {
        "uniform": ("uniform", None),
        "knapsack": ("knapsack", None),
        "knapsack (fallback=False)": (get_allocator("knapsack", fallback=False), None),
        "bayes_knapsack": ("bayes_knapsack", None),
        "bayes_knapsack + pilot 2": (Pilot(get_allocator("bayes_knapsack"), 2), None),
        "bayes_knapsack + pilot 4": (Pilot(get_allocator("bayes_knapsack"), 4), None),
        "bayes_knapsack, Jeffreys prior": ("bayes_knapsack", JEFFREYS),
        "bayes_knapsack, Jeffreys + pilot 2": (Pilot(get_allocator("bayes_knapsack"), 2), JEFFREYS),
        "Pilot-Commit rule (pilot 4)": (PilotCommit(pilot_rollouts=4), None),
        "cero": ("cero", None),
        "reinforce_ada_est": ("reinforce_ada_est", None),
        "reinforce_ada_seq_pos": ("reinforce_ada_seq_pos", None),
        "reinforce_ada_seq_balance": ("reinforce_ada_seq_balance", None),
        "uniform + dynamic sampling": (DynamicSampling(as_procedure("uniform")), None),
        "knapsack + dynamic sampling": (DynamicSampling(as_procedure("knapsack")), None),
    }
    return specs


def compare_stores(
    specs: dict[str, tuple[Spec, Any]], seeds: list[int], pool: Executor, **kwargs: Any
) -> dict[str, dict[str, Any]]:
    """:func:`compare` per statistics store (each call pairs with uniform on the same seeds); rows by label."""
    rows: dict[str, dict[str, Any]] = {}
    for factory in dict.fromkeys(factory for _, factory in specs.values()):
        group = {label: spec for label, (spec, f) in specs.items() if f is factory}
        extra = {} if factory is None else {"statistics_factory": factory}
        for row in compare(group, seeds, executor=pool, **kwargs, **extra):
            rows.setdefault(row["allocator"], row)
    return {label: rows[label] for label in specs}


def fresh_table(rows: dict[str, dict[str, Any]]) -> str:
    header = (
        "| strategy | generated / trained | eff.-grad. per trained | vs uniform | eff.-grad. per generated "
        "| vs uniform | vs uniform, epochs ≥ 2 | mixed prompts per 1,000 generated | value share "
        "| value share, epochs ≥ 2 "
        "| final mean p | alloc ms | tokens vs uniform |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {r['generated_over_trained']:.2f} | {r['effective_gradient_ratio']:.3f} "
            f"| {r['effective_gradient_ratio_vs_baseline']:.3f} | {r['effective_gradient_ratio_per_generated']:.3f} "
            f"| {fmt_ratio(r, 'effective_gradient_ratio_per_generated')} "
            f"| {r['effective_gradient_ratio_per_generated_after_first_vs_baseline']:.3f} "
            f"| {r['mixed_per_1000_generated']:.1f} | {r['value_share']:.3f} ± {r['value_share_std']:.3f} "
            f"| {r['value_share_after_first']:.3f} | {r['final_mean_p']:.3f} | {r['allocate_ms']:.2f} "
            f"| {fmt_ratio(r, 'tokens_generated')} |"
        )
    return "\n".join(lines)


def fresh_cell(row: dict[str, Any]) -> str:
    """value share / eff.-grad. per generated vs uniform / mixed prompts per 1,000 generated."""
    return (
        f"{row['value_share']:.3f} / {row['effective_gradient_ratio_per_generated_vs_baseline']:.2f} / "
        f"{row['mixed_per_1000_generated']:.1f}"
    )


FRESH_GRID = (
    "uniform",
    "knapsack",
    "bayes_knapsack",
    "bayes_knapsack + pilot 2",
    "bayes_knapsack, Jeffreys prior",
    "Pilot-Commit rule (pilot 4)",
    "knapsack + dynamic sampling",
)


def run_fresh(args: Args, sizes: dict[str, int], pool: Executor) -> None:
    """Table 4: fresh estimates, every strategy on every mix and learning rule."""
    specs = fresh_specs()
    seeds = list(range(args.seeds))
    print(f"\n## Fresh estimates: learning rule `per_completion`, mix `dapo`, {args.seeds} seeds\n")
    print(fresh_table(compare_stores(specs, seeds, pool, learning_rule="per_completion", mix="dapo", **sizes)))

    sens_seeds = list(range(args.sensitivity_seeds))
    grid = {label: specs[label] for label in FRESH_GRID}
    cell_doc = "value share / eff.-grad. per generated vs uniform / mixed prompts per 1,000 generated (all steps)"
    print(f"\nEvery mix and learning rule ({args.sensitivity_seeds} seeds); each cell: {cell_doc}\n")
    columns = [(mix, rule) for mix in MIXES for rule in RULE_KINDS]
    by_cell = {
        (mix, rule): compare_stores(grid, sens_seeds, pool, learning_rule=rule, mix=mix, **sizes)
        for mix, rule in columns
    }
    lines = ["| mix | rule | " + " | ".join(FRESH_GRID) + " |", "|---|---|" + "---|" * len(FRESH_GRID)]
    for mix, rule in columns:
        lines.append(
            f"| {mix} | `{rule}` | " + " | ".join(fresh_cell(by_cell[mix, rule][g]) for g in FRESH_GRID) + " |"
        )
    print("\n".join(lines))

    print(
        f"\nThe posterior's half-life (steps; {sizes['num_prompts'] // sizes['batch_prompts']} steps per epoch), mix "
        f"`dapo`, {args.sensitivity_seeds} seeds; each cell: {cell_doc}\n"
    )
    lines = ["| half-life | rule | bayes_knapsack | bayes_knapsack + pilot 2 |", "|---|---|---|---|"]
    for half_life in (None, 3.5, 7.0, 14.0, 35.0):
        factory = functools.partial(PromptStatistics, posterior_half_life=half_life)
        for rule_label, rule in (
            ("per_completion", "per_completion"),
            ("per_completion, lr x3", LearningRule(lr=0.9)),
        ):
            rows = compare_stores(
                {
                    "bayes_knapsack": ("bayes_knapsack", factory),
                    "pilot": (Pilot(get_allocator("bayes_knapsack"), 2), factory),
                },
                sens_seeds,
                pool,
                learning_rule=rule,
                mix="dapo",
                **sizes,
            )
            lines.append(
                f"| {'never (None)' if half_life is None else half_life} | `{rule_label}` "
                f"| {fresh_cell(rows['bayes_knapsack'])} | {fresh_cell(rows['pilot'])} |"
            )
    print("\n".join(lines))

    for n in (4, 16):
        print(
            f"\n## Fresh estimates at n = {n} (B = {args.batch_prompts * n} per step), `per_completion`, `dapo`, "
            f"{args.seeds} seeds\n"
        )
        n_specs = {label: specs[label] for label in FRESH_GRID}
        if n == 4:  # a pilot of 4 would leave nothing at n = 4
            n_specs["Pilot-Commit rule (pilot 2)"] = (PilotCommit(pilot_rollouts=2), None)
            del n_specs["Pilot-Commit rule (pilot 4)"]
        n_sizes = {**sizes, "num_generations": n}
        print(fresh_table(compare_stores(n_specs, seeds, pool, learning_rule="per_completion", mix="dapo", **n_sizes)))


if __name__ == "__main__":
    main(parse_args())
