"""What a generation batch logs: allocation metrics in TRL's metric stream, and one line of ``allocations.jsonl``.

Metric names (``allocation/*``, ``prompt_status/*``, ``rounds/*``, the procedure's own) are listed in
docs/trainer.md. Everything here reads the batch's outcome; nothing changes training.
"""

from __future__ import annotations

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
    generation_seconds: float,
) -> None:
    """Allocation metrics into TRL's metric stream, and fixes to what TRL logged per fixed-size group;
    ``generation_seconds``: this rank's time in generation for the batch."""
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
    # the same completions over every completion GENERATED (rounds, dropped groups): what the step's generation bought
    generated = len(outcome.record.rewards)
    metrics["allocation/effective_gradient_ratio_per_generated"].append(float(counts[has_signal].sum() / generated))
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
    metrics["generation/seconds"].append(generation_seconds)
    for bucket, number in prompts_per_status(outcome.record.success_rates).items():
        metrics[f"prompt_status/{bucket}"].append(float(number))
    log_tokens(metrics, outcome, float(counts[has_signal].sum()))
    # TRL grouped by view(-1, G); replace its figure by the same quantity over the real groups.
    metrics["frac_reward_zero_std"][-1] = result.zero_std_fraction
    trainer._logs["advantages"].clear()
    trainer._logs["advantages"].extend(advantages.tolist())
    trainer._logs["extra"]["group_size"].extend(counts[group_ids].tolist())


# tokens/* names of what a token-budgeted allocation reports (Allocation.metrics, logged as allocation/<name> too)
_PLANNED_TOKENS = {"tokens/budget": "allocation/token_budget", "tokens/expected": "allocation/tokens_expected"}


def log_tokens(metrics, outcome: Outcome, effective_completions: float) -> None:
    """``tokens/*``: tokens generated in the step (every completion, round and rank), tokens of the completions trained
    on, and generated tokens per trained completion in a group with a reward spread (NaN when there is none: the
    step's tokens bought no gradient). Nothing when the driver gave no token counts. Under a token budget, also the
    budget and the expected tokens of the allocation's counts (``tokens/budget``, ``tokens/expected``)."""
    for name, key in _PLANNED_TOKENS.items():  # the batch's first allocation, under a token budget
        value = outcome.record.metrics.get(key, float("nan"))
        if not np.isnan(value):  # NaN: no prompt had a length estimate yet
            metrics[name].append(float(value))
    tokens = outcome.record.completion_tokens
    if np.isnan(tokens).any():
        return
    generated = float(tokens.sum())
    metrics["tokens/generated"].append(generated)
    metrics["tokens/trained"].append(float(tokens[outcome.selected].sum()))
    per_effective = generated / effective_completions if effective_completions else float("nan")
    metrics["tokens/per_effective_completion"].append(per_effective)


def log_rounds(trainer: AdaptiveGRPOTrainer, outcome: Outcome, generated_rewards: torch.Tensor) -> None:
    """The procedure's metrics; the reward of every completion generated (``generated/*``; ``generated_rewards``: their
    gathered ``(N, K)`` rewards); for batches sampled in rounds, what was generated against what was trained."""
    metrics = trainer._metrics["train"]
    record = outcome.record
    log_generated_rewards(trainer, generated_rewards)
    for name, value in record.metrics.items():
        metrics[name].append(value)
    generated, trained = len(record.rewards), len(outcome.selected)
    if len(record.round_sizes) > 1 or generated != trained:
        metrics["rounds/per_step"].append(float(len(record.round_sizes)))
        metrics["rounds/generated"].append(float(generated))
        metrics["rounds/trained"].append(float(trained))
        metrics["rounds/inference_ratio"].append(generated / trained)


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
        # the store's estimate per completion before this step's update (what the allocation planned on)
        "expected_tokens": trainer.prompt_statistics.expected_tokens(record.prompt_ids),
        "generated_tokens": _tokens_per_prompt(record.group_ids, record.completion_tokens, len(counts)),
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


def _tokens_per_prompt(group_ids: np.ndarray, tokens: np.ndarray, groups: int) -> list[int | None]:
    """Per prompt, the tokens of every completion ``group_ids`` lists; None where one of them has no count (NaN)."""
    unknown = np.bincount(group_ids, weights=np.isnan(tokens), minlength=groups) > 0
    totals = np.bincount(group_ids, weights=np.nan_to_num(tokens), minlength=groups)
    return [None if u else round(t) for u, t in zip(unknown.tolist(), totals.tolist(), strict=True)]
