"""Many simulations: every strategy on the same seeds (paired populations and batches), aggregated over seeds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

import numpy as np

from trl_adaptive.allocation.base import Allocator
from trl_adaptive.sampling import Procedure

from .run import simulate

AllocatorSpec = str | Allocator | Procedure

_RATIO_KEYS: tuple[str, ...] = (
    "effective_gradient_ratio",
    "effective_gradient_ratio_after_first",
    "effective_gradient_ratio_per_generated",
    "effective_gradient_ratio_per_generated_after_first",
    "value_share",
    "value_share_after_first",
    "mixed_per_1000_generated",
    "tokens_generated",
    "tokens_generated_after_first",
    "effective_per_1k_tokens",
    "effective_per_1k_tokens_after_first",
    "value_per_1k_tokens",
    "value_per_1k_tokens_after_first",
)


def _run_one(task: tuple[str, AllocatorSpec, int, dict[str, Any]]) -> tuple[str, int, dict[str, float]]:
    label, spec, seed, kwargs = task
    return label, seed, simulate(spec, seed=seed, **kwargs).summary


def compare(
    allocators: Sequence[str] | Mapping[str, AllocatorSpec],
    seeds: Sequence[int],
    *,
    baseline: str = "uniform",
    workers: int = 1,
    executor: Executor | None = None,
    **simulate_kwargs: Any,
) -> list[dict[str, Any]]:
    """Run every allocator on the same seeds (paired populations and batches) and aggregate over seeds.

    Args:
        allocators: names, or a mapping label -> name, instance or :class:`DynamicSampling` (e.g.
            ``{"knapsack (no fallback)": KnapsackAllocator(fallback=False), "knapsack + DS":
            DynamicSampling(as_procedure("knapsack"))}``).
        seeds: one run per allocator and seed.
        baseline: label of the reference allocator; ``"uniform"`` is added when missing.
        workers: processes to run the simulations in (1 = in this process); ignored when ``executor`` is given.
        executor: an executor to reuse across calls (saves starting processes and recompiling numba kernels).
        **simulate_kwargs: forwarded to :func:`simulate` (``learning_rule``, ``mix``, sizes...).

    Returns:
        one row per allocator, in input order: ``allocator``, ``seeds``, the seed mean of every summary key, its
        seed standard deviation as ``<key>_std``, for the effective-gradient ratios, the value share and the token
        figures ``<key>_vs_baseline``, the mean over seeds of the per-seed ratio allocator / baseline (paired by seed),
        with ``_vs_baseline_std``, and ``per_seed``: each seed's summary, for other paired statistics.
    """
    specs: dict[str, AllocatorSpec] = (
        dict(allocators) if isinstance(allocators, Mapping) else {name: name for name in allocators}
    )
    if baseline not in specs:
        if baseline != "uniform":
            raise ValueError(f"baseline {baseline!r} is not among the allocators {sorted(specs)}.")
        specs = {"uniform": "uniform", **specs}
    tasks = [(label, spec, int(seed), simulate_kwargs) for label, spec in specs.items() for seed in seeds]
    if executor is not None:
        outcomes = list(executor.map(_run_one, tasks))
    elif workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(_run_one, tasks))
    else:
        outcomes = [_run_one(task) for task in tasks]
    by_label: dict[str, dict[int, dict[str, float]]] = {label: {} for label in specs}
    for label, seed, summary in outcomes:
        by_label[label][seed] = summary

    rows: list[dict[str, Any]] = []
    for label, runs in by_label.items():
        ordered = [runs[int(seed)] for seed in seeds]
        row: dict[str, Any] = {"allocator": label, "seeds": len(ordered), "per_seed": dict(runs)}
        for key in ordered[0]:
            values = np.array([run[key] for run in ordered])
            row[key] = float(values.mean())
            row[f"{key}_std"] = float(values.std())
        for key in _RATIO_KEYS:
            ratios = np.array([runs[int(s)][key] / by_label[baseline][int(s)][key] for s in seeds])
            row[f"{key}_vs_baseline"] = float(ratios.mean())
            row[f"{key}_vs_baseline_std"] = float(ratios.std())
        rows.append(row)
    return rows


__all__ = ["AllocatorSpec", "compare"]
