"""What a generation batch logs: allocation metrics in TRL's metric stream, and one line of ``allocations.jsonl``.

Metric names (``allocation/*``, ``prompt_status/*``, ``rounds/*``, the procedure's own) are listed in
docs/trainer.md. Everything here reads the batch's outcome; nothing changes training.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..allocation import prompts_per_status
from ..sampling import Outcome
from ..sampling.rules import is_success
from .allocation_log import append_allocation_record
from .completion_logs import log_generated_rewards

if TYPE_CHECKING:
    from .advantages import GroupAdvantages
    from .trainer import AdaptiveGRPOTrainer


def completion_scale(
    counts: np.ndarray, weights: np.ndarray | None, group_ids: np.ndarray, equal_prompt_weighting: bool
) -> torch.Tensor:
    """Per-completion advantage multiplier: the procedure's weights and, optionally, equal weight per prompt."""
    scale = np.ones(len(counts), dtype=np.float64)
    if weights is not None:
        scale *= np.asarray(weights, dtype=np.float64)
    if equal_prompt_weighting:
        sampled = counts > 0
        scale[sampled] *= counts.sum() / sampled.sum() / counts[sampled]
    return torch.as_tensor(scale[group_ids], dtype=torch.float32)


def log_allocation(
    trainer: AdaptiveGRPOTrainer,
    outcome: Outcome,
    group_ids: np.ndarray,
    rewards: np.ndarray,
    result: GroupAdvantages,
    advantages: torch.Tensor,
) -> None:
    """Allocation metrics into TRL's metric stream, and fixes to what TRL logged per fixed-size group."""
    metrics = trainer._metrics["train"]
    counts = outcome.trained_counts
    sampled = counts > 0
    has_signal = np.nan_to_num(result.group_std.cpu().numpy()) > 1e-6  # TRL: torch.isclose(std, 0)
    successes = np.bincount(
        group_ids, weights=is_success(rewards, trainer.args.success_threshold), minlength=len(counts)
    )
    all_correct = sampled & ~has_signal & (successes == counts)
    all_wrong = sampled & ~has_signal & (successes == 0)
    total = counts.sum()
    metrics["allocation/effective_gradient_ratio"].append(float(counts[has_signal].sum() / total))
    metrics["allocation/zero_gradient_ratio_all_correct"].append(float(counts[all_correct].sum() / total))
    metrics["allocation/zero_gradient_ratio_all_wrong"].append(float(counts[all_wrong].sum() / total))
    metrics["allocation/effective_prompt_ratio"].append(float(has_signal[sampled].mean()))
    metrics["allocation/prompts_skipped"].append(float((~sampled).sum()))
    spread = {"min": counts.min(), "mean": counts.mean(), "max": counts.max()}
    spread |= {"p50": np.quantile(counts, 0.5), "p90": np.quantile(counts, 0.9)}
    for name, value in spread.items():
        metrics[f"allocation/count_{name}"].append(float(value))
    metrics["allocation/budget_used"].append(float(total))
    metrics["allocation/budget"].append(float(trainer.args.generation_batch_size))
    metrics["allocation/solve_time_s"].append(float(outcome.seconds))
    metrics["generation/seconds"].append(trainer._generation_seconds)
    trainer._generation_seconds = 0.0
    for bucket, number in prompts_per_status(outcome.record.success_rates).items():
        metrics[f"prompt_status/{bucket}"].append(float(number))
    # TRL grouped by view(-1, G); replace its figure by the same quantity over the real groups.
    metrics["frac_reward_zero_std"][-1] = result.zero_std_fraction
    trainer._logs["advantages"].clear()
    trainer._logs["advantages"].extend(advantages.tolist())
    trainer._logs["extra"]["group_size"].extend(counts[group_ids].tolist())


def log_rounds(trainer: AdaptiveGRPOTrainer, outcome: Outcome) -> None:
    """The procedure's metrics; the reward of every completion generated (``generated/*``); for batches sampled in
    rounds, what was generated against what was trained."""
    metrics = trainer._metrics["train"]
    record = outcome.record
    rounds = trainer._round_rewards  # None: one planned round, every completion generated was trained
    log_generated_rewards(trainer, trainer._rewards_per_func if rounds is None else rounds)
    for name, value in record.metrics.items():
        metrics[name].append(value)
    generated, trained = len(record.rewards), len(outcome.selected)
    if len(record.round_sizes) > 1 or generated != trained:
        metrics["rounds/per_step"].append(float(len(record.round_sizes)))
        metrics["rounds/generated"].append(float(generated))
        metrics["rounds/trained"].append(float(trained))
        metrics["rounds/inference_ratio"].append(generated / trained)
    if record.metrics.get("dynamic_sampling/filled", 0) and not trainer._warned_dynamic_fill:
        warnings.warn(
            f"Dynamic sampling: after {trainer.args.dynamic_sampling_max_rounds} extra round(s) the batch still "
            f"lacked {int(record.metrics['dynamic_sampling/filled'])} of {trained} completions with signal; they "
            "were filled with completions of dropped (all-correct or all-wrong) groups with advantage weight 0, "
            "so they add no gradient. Logged as dynamic_sampling/filled; raise dynamic_sampling_max_rounds if "
            "this happens often. (Warned once.)",
            stacklevel=4,
        )
        trainer._warned_dynamic_fill = True


def record_allocation(trainer: AdaptiveGRPOTrainer, outcome: Outcome, group_ids: np.ndarray, rewards: np.ndarray):
    """One line of ``allocations.jsonl`` per generation batch (main process), read by the run report."""
    if not (trainer.args.should_save and trainer.args.log_allocations):
        return
    record, counts = outcome.record, outcome.trained_counts
    line = {
        "step": trainer.state.global_step,
        "epoch": trainer.prompt_statistics.epoch,
        "prompt_ids": record.prompt_ids,
        "counts": counts,
        "success_rates": record.success_rates,
        **_tally(group_ids, rewards, len(counts), trainer.args.success_threshold, ""),
        "generated": np.bincount(record.group_ids, minlength=len(counts)),
        **_tally(record.group_ids, record.rewards, len(counts), trainer.args.success_threshold, "generated_"),
        "engine": f"vllm-{trainer.args.vllm_mode}" if trainer.args.use_vllm else "transformers",
    }
    append_allocation_record(trainer.args.output_dir, line)


def _tally(group_ids: np.ndarray, rewards: np.ndarray, groups: int, threshold: float, prefix: str) -> dict:
    """Per prompt: ``successes`` and ``attempts`` (scored completions) among the completions ``group_ids`` lists."""
    scored = ~np.isnan(rewards)
    success = is_success(rewards, threshold)
    return {
        f"{prefix}successes": np.bincount(group_ids, weights=success, minlength=groups).astype(np.int64),
        f"{prefix}attempts": np.bincount(group_ids, weights=scored, minlength=groups).astype(np.int64),
    }
