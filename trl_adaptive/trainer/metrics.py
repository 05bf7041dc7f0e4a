"""What a generation batch logs, as data: every metric (``{name: value}``, which ``generation_batch.py`` appends to
TRL's metric stream) and one line of ``allocations.jsonl``.

GRPOTrainer's own figures are computed here once per batch, with TRL 1.16's formulas, over the real groups:
``reward``, ``reward_std``, ``rewards/<func>/mean|std`` and ``frac_reward_zero_std`` over the completions trained on;
``completions/*`` and ``tools/*`` over every completion generated (every round; TRL logs them per ``_generate`` call,
which for a batch in rounds would be a mean of round means); ``generated/*`` repeat the reward figures over every
completion generated. With one round trained whole (uniform), each equals GRPOTrainer's. Metric names of our own
(``allocation/*``, ``prompt_status/*``, ``rounds/*``, ``tokens/*``, the procedure's) are listed in docs/trainer.md.
Nothing here changes training or reads a trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from trl.trainer.utils import nanstd

from ..allocation import prompts_per_status
from ..sampling import Outcome
from ..sampling.rules import is_success
from .groups import weighted_total

if TYPE_CHECKING:
    from .generation_batch import Lengths
    from .groups import GroupAdvantages


def reward_metrics(
    rewards_per_func: torch.Tensor, names: list[str], weights: torch.Tensor, zero_std_fraction: float
) -> dict[str, float]:
    """TRL's ``rewards/<func>/mean|std``, ``reward``, ``reward_std`` over ``rewards_per_func`` (the gathered ``(T, K)``
    rewards of the trained completions; NaN where a function scored nothing) and ``frac_reward_zero_std``
    (``zero_std_fraction``: over the real groups, ``advantages.group_advantages``)."""
    metrics = {}
    for i, name in enumerate(names):
        metrics[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, i]).item()
        metrics[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, i]).item()
    rewards = weighted_total(rewards_per_func, weights)
    metrics["reward"] = torch.nanmean(rewards).item()
    metrics["reward_std"] = nanstd(rewards).item()
    metrics["frac_reward_zero_std"] = zero_std_fraction
    return metrics


def generated_reward_metrics(
    rewards_per_func: torch.Tensor, names: list[str], weights: torch.Tensor
) -> dict[str, float]:
    """``generated/rewards/<func>/mean``, ``generated/reward_mean`` and ``generated/reward_std``: the figures of
    :func:`reward_metrics` over the gathered ``(N, K)`` rewards of every completion generated in the step (every
    round, every rank)."""
    figures = reward_metrics(rewards_per_func, names, weights, zero_std_fraction=float("nan"))
    metrics = {f"generated/rewards/{name}/mean": figures[f"rewards/{name}/mean"] for name in names}
    metrics["generated/reward_mean"] = figures["reward"]
    metrics["generated/reward_std"] = figures["reward_std"]
    return metrics


def completion_length_metrics(lengths: list[Lengths]) -> dict[str, float]:
    """TRL's ``completions/*`` over ``lengths``, every completion generated in the batch: the mean, min and max of the
    model's tokens (tool responses not counted), the share cut at max_completion_length (``clipped_ratio``), and the
    mean, min and max of the completions that ended (0 when none did)."""
    tokens = torch.tensor([length.model_tokens for length in lengths])
    truncated = torch.tensor([length.truncated for length in lengths], dtype=torch.bool)
    metrics = {
        "completions/mean_length": tokens.float().mean().item(),
        "completions/min_length": tokens.float().min().item(),
        "completions/max_length": tokens.float().max().item(),
        "completions/clipped_ratio": truncated.float().mean().item(),
    }
    ended = tokens[~truncated]
    if len(ended) == 0:  # TRL's edge case: no completion ended
        ended = torch.zeros(1)
    metrics["completions/mean_terminated_length"] = ended.float().mean().item()
    metrics["completions/min_terminated_length"] = ended.float().min().item()
    metrics["completions/max_terminated_length"] = ended.float().max().item()
    return metrics


def tool_metrics(rounds: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """``tools/call_frequency`` (calls per completion) and ``tools/failure_frequency`` (failures per call) over every
    round, from TRL's figures of each (``rounds``: per round, its completions over every rank and TRL's figures)."""
    if len(rounds) <= 1:
        return dict(rounds[0][1]) if rounds else {}
    completions = sum(size for size, _ in rounds)
    calls = [size * figures.get("tools/call_frequency", 0.0) for size, figures in rounds]
    fails = [figures.get("tools/failure_frequency", 0.0) for _, figures in rounds]
    failures = sum(c * f for c, f in zip(calls, fails, strict=True))
    return {
        "tools/call_frequency": sum(calls) / completions,
        "tools/failure_frequency": failures / sum(calls) if sum(calls) > 0 else 0.0,
    }


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


def allocation_metrics(
    outcome: Outcome,
    group_ids: np.ndarray,
    rewards: np.ndarray,
    result: GroupAdvantages,
    budget: int,
    success_threshold: float,
    generation_seconds: float,
) -> dict[str, float]:
    """The batch's ``allocation/*``, ``prompt_status/*``, ``tokens/*`` and ``generation/seconds`` metrics
    (``generation_seconds``: this rank's time in generation for the batch; ``budget``: generation_batch_size)."""
    counts = outcome.trained_counts
    sampled = counts > 0
    has_signal = np.nan_to_num(result.group_std.cpu().numpy()) > 1e-6  # TRL: torch.isclose(std, 0)
    successes = np.bincount(group_ids, weights=is_success(rewards, success_threshold), minlength=len(counts))
    all_correct = sampled & ~has_signal & (successes == counts)
    all_wrong = sampled & ~has_signal & (successes == 0)
    total = counts.sum()
    metrics = {"allocation/effective_gradient_ratio": float(counts[has_signal].sum() / total)}
    # the same completions over every completion GENERATED (rounds, dropped groups): what the step's generation bought
    generated = len(outcome.record.rewards)
    metrics["allocation/effective_gradient_ratio_per_generated"] = float(counts[has_signal].sum() / generated)
    metrics["allocation/zero_gradient_ratio_all_correct"] = float(counts[all_correct].sum() / total)
    metrics["allocation/zero_gradient_ratio_all_wrong"] = float(counts[all_wrong].sum() / total)
    metrics["allocation/effective_prompt_ratio"] = float(has_signal[sampled].mean())
    metrics["allocation/prompts_skipped"] = float((~sampled).sum())
    spread = {"min": counts.min(), "mean": counts.mean(), "max": counts.max()}
    spread |= {"p50": np.quantile(counts, 0.5), "p90": np.quantile(counts, 0.9)}
    metrics |= {f"allocation/count_{name}": float(value) for name, value in spread.items()}
    metrics["allocation/budget_used"] = float(total)
    metrics["allocation/budget"] = float(budget)
    metrics["allocation/solve_time_s"] = float(outcome.seconds)
    metrics["generation/seconds"] = generation_seconds
    for bucket, number in prompts_per_status(outcome.record.success_rates).items():
        metrics[f"prompt_status/{bucket}"] = float(number)
    return metrics | token_metrics(outcome, float(counts[has_signal].sum()))


# tokens/* names of what a token-budgeted allocation reports (Allocation.metrics, logged as allocation/<name> too)
_PLANNED_TOKENS = {"tokens/budget": "allocation/token_budget", "tokens/expected": "allocation/tokens_expected"}


def token_metrics(outcome: Outcome, effective_completions: float) -> dict[str, float]:
    """``tokens/*``: tokens generated in the step (every completion, round and rank), tokens of the completions trained
    on, and generated tokens per trained completion in a group with a reward spread (NaN when there is none: the
    step's tokens bought no gradient). None of these when the driver gave no token counts. Under a token budget, also
    the budget and the expected tokens of the allocation's counts (``tokens/budget``, ``tokens/expected``)."""
    metrics = {}
    for name, key in _PLANNED_TOKENS.items():  # the batch's first allocation, under a token budget
        value = outcome.record.metrics.get(key, float("nan"))
        if not np.isnan(value):  # NaN: no prompt had a length estimate yet
            metrics[name] = float(value)
    tokens = outcome.record.completion_tokens
    if np.isnan(tokens).any():
        return metrics
    generated = float(tokens.sum())
    metrics["tokens/generated"] = generated
    metrics["tokens/trained"] = float(tokens[outcome.selected].sum())
    metrics["tokens/per_effective_completion"] = (
        generated / effective_completions if effective_completions else float("nan")
    )
    return metrics


def round_metrics(outcome: Outcome) -> dict[str, float]:
    """The procedure's metrics and, for batches sampled in rounds, what was generated against what was trained."""
    record = outcome.record
    metrics = dict(record.metrics)
    generated, trained = len(record.rewards), len(outcome.selected)
    if len(record.round_sizes) > 1 or generated != trained:
        metrics["rounds/per_step"] = float(len(record.round_sizes))
        metrics["rounds/generated"] = float(generated)
        metrics["rounds/trained"] = float(trained)
        metrics["rounds/inference_ratio"] = generated / trained
    return metrics


def allocation_line(
    outcome: Outcome,
    group_ids: np.ndarray,
    rewards: np.ndarray,
    *,
    step: int,
    epoch: int,
    success_threshold: float,
    expected_tokens: np.ndarray,
    engine: str,
) -> dict:
    """The batch's line of ``allocations.jsonl``, read by the run report (``expected_tokens``: the store's estimate
    per prompt of the record BEFORE this step's update, what the allocation planned on)."""
    record, counts = outcome.record, outcome.trained_counts
    return {
        "step": step,
        "epoch": epoch,
        "prompt_ids": record.prompt_ids,
        "counts": counts,
        "success_rates": record.success_rates,
        **_tally(group_ids, rewards, len(counts), success_threshold, ""),
        "generated": np.bincount(record.group_ids, minlength=len(counts)),
        **_tally(record.group_ids, record.rewards, len(counts), success_threshold, "generated_"),
        "expected_tokens": expected_tokens,
        "generated_tokens": _tokens_per_prompt(record.group_ids, record.completion_tokens, len(counts)),
        "engine": engine,
    }


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
