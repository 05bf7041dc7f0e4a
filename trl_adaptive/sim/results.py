"""What a simulation reports: Knapsack RL's per-step diagnostics, the value share at the true p, tokens, a summary.

The definitions are in the package's docstring (:mod:`trl_adaptive.sim`): every ratio is a share of the step's
completions, and the value share scores an allocation by the paper's own objective at the true p. Value per token
divides what a run bought (effective completions, mixed groups, the objective at the true p) by the tokens generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trl_adaptive.allocation.solvers import solve_greedy
from trl_adaptive.allocation.status import STATUSES, status_index
from trl_adaptive.allocation.value import marginal_gains
from trl_adaptive.allocation.value import value as value_of

from .population import expit

if TYPE_CHECKING:
    from .step import SimulatedStep


def group_metrics(counts: np.ndarray, successes: np.ndarray) -> dict[str, float]:
    """Knapsack RL's section-3.1 diagnostics for one step, as shares of the step's completions.

    Args:
        counts: ``(M,)`` N_i (0 = prompt not sampled this step).
        successes: ``(M,)`` k_i with ``0 <= k_i <= N_i``.

    Returns:
        ``effective_gradient_ratio`` (Eq. 4: completions in groups with 0 < k_i < N_i), ``zero_grad_all_correct``
        (completions in groups with k_i = N_i), ``zero_grad_all_wrong`` (k_i = 0), each divided by sum_i N_i, and
        ``effective_prompt_ratio``: mixed groups / M, where M counts the batch's prompts including skipped ones.

    Example:
        >>> group_metrics(np.array([4, 2, 2]), np.array([1, 2, 0]))["effective_gradient_ratio"]
        0.5
    """
    counts = np.asarray(counts, dtype=np.int64)
    successes = np.asarray(successes, dtype=np.int64)
    if np.any(successes < 0) or np.any(successes > counts):
        raise ValueError("successes must satisfy 0 <= k_i <= N_i.")
    total = counts.sum()
    if total <= 0:
        raise ValueError("group_metrics needs at least one completion.")
    sampled = counts > 0
    mixed = sampled & (successes > 0) & (successes < counts)
    all_correct = sampled & (successes == counts)
    all_wrong = sampled & (successes == 0)
    return {
        "effective_gradient_ratio": float(counts[mixed].sum() / total),
        "zero_grad_all_correct": float(counts[all_correct].sum() / total),
        "zero_grad_all_wrong": float(counts[all_wrong].sum() / total),
        "effective_prompt_ratio": float(mixed.sum() / len(counts)),
    }


REFERENCE_BOUNDS: tuple[int, int] = (2, 128)  # N_low, N_up of the value share's best allocation (the paper's defaults)


def value_share(counts: np.ndarray, p: np.ndarray, bounds: tuple[int, int] = REFERENCE_BOUNDS) -> float:
    """sum_i Value(N_i, p_i) / max_{N*} sum_i Value(N*_i, p_i), at the TRUE p_i (Knapsack RL's Eq. 5 objective).

    The best allocation N* spends the same total, sum_i N_i, on the same prompts, within ``bounds`` = (N_low, N_up),
    exactly (greedy on the concave Value, :func:`~trl_adaptive.allocation.solvers.solve_greedy`). A prompt given 0
    completions scores 0; since the reference gives every prompt at least N_low, a strategy that skips prompts (CERO,
    Pilot-Commit's eviction) could in principle exceed 1. 1.0 when the best objective is 0.

    Args:
        counts: ``(M,)`` N_i, completions generated per prompt in the step.
        p: ``(M,)`` true success probabilities at the time of the step.

    Example:
        >>> round(value_share(np.array([8, 8]), np.array([0.5, 0.999])), 3)  # the best moves 6 units to p = 0.5
        0.992
    """
    counts = np.asarray(counts, dtype=np.int64)
    p = np.asarray(p, dtype=np.float64)
    low, high = bounds
    high = max(high, int(counts.max()), -(-int(counts.sum()) // len(counts)))
    total = max(int(counts.sum()), low * len(counts))
    best = solve_greedy(None, total, low, high, gains=marginal_gains(p, high))
    optimum = float(value_of(best, p).sum())
    achieved = float(value_of(counts, p).sum())
    return achieved / optimum if optimum > 0 else 1.0


STEP_METRICS: tuple[str, ...] = (
    "effective_gradient_ratio",
    "zero_grad_all_correct",
    "zero_grad_all_wrong",
    "effective_prompt_ratio",
)


@dataclass
class SimulationResult:
    """Per-step metrics of one run (arrays of shape ``(steps,)``) and a summary.

    Attributes:
        epoch: epoch index (0-based) of each step.
        effective_gradient_ratio, zero_grad_all_correct, zero_grad_all_wrong, effective_prompt_ratio: see
            :func:`group_metrics`, over the step's TRAINED completions (all of them for a plan-ahead allocator; the
            selected n per prompt for Seq; kept plus filled groups for dynamic sampling).
        effective_gradient_ratio_per_generated: completions trained in mixed groups / completions generated in the
            step; equals ``effective_gradient_ratio`` for a plan-ahead allocator, which trains all it generates.
        budget_used: completions trained in the step (always B).
        generated: completions generated in the step (B for a plan-ahead allocator, B to 4B for Seq, B plus the
            extra rounds for dynamic sampling).
        rounds: generation rounds in the step (1 for a plan-ahead allocator).
        filled: dynamic sampling only: completions of dropped (zero-gradient) groups used to fill the batch.
        unfinished: Seq only: prompts whose exit rule did not hold when the rounds stopped.
        max_count: the largest N_i generated for one prompt in the step; skipped_prompts: prompts of the batch given
            N_i = 0.
        converted_from_zero: cumulative number of prompts that had been scored at least once with no success ever
            (the store's p = 0 status) and have now produced a success.
        value_share: the step's :func:`value_share`: the objective of the generated counts at the true p over the
            best allocation of the same completions at the true p.
        mixed_prompts: trained groups with 0 < k_i < N_i in the step.
        mean_p: mean true p_i over the whole population after the step's update.
        generated_tokens, trained_tokens: tokens of the step's generated and of its trained completions.
        truncated: completions of the step cut at the length model's ``max_completion_length`` (they failed).
        effective_completions: trained completions in mixed groups (the effective-gradient ratio's numerator).
        value: sum_i Value(N_i, p_i) of the generated counts at the true p (the value share's numerator).
        allocate_seconds: wall time of the allocator's calls (``allocate``; ``round_counts`` and ``select`` for Seq),
            not deterministic and excluded from comparisons.
        mean_count_by_status: mean N_i generated per observed status of the prompt when it was allocated (keys of
            :data:`~trl_adaptive.allocation.status.STATUSES`: unseen, p = 0, (0, 0.2], (0.2, 0.8), [0.8, 1), p = 1
            by the store's last-epoch rate), over epochs >= 2; NaN for a status that never occurred.
        p_initial, p_final: ``(num_prompts,)`` true p_i before the first and after the last step.
        summary: scalar summary, see :func:`summarize`.
    """

    epoch: np.ndarray
    effective_gradient_ratio: np.ndarray
    zero_grad_all_correct: np.ndarray
    zero_grad_all_wrong: np.ndarray
    effective_prompt_ratio: np.ndarray
    budget_used: np.ndarray
    max_count: np.ndarray
    skipped_prompts: np.ndarray
    converted_from_zero: np.ndarray
    mean_p: np.ndarray
    allocate_seconds: np.ndarray
    p_initial: np.ndarray
    p_final: np.ndarray
    effective_gradient_ratio_per_generated: np.ndarray
    generated: np.ndarray
    rounds: np.ndarray
    filled: np.ndarray
    unfinished: np.ndarray
    value_share: np.ndarray
    mixed_prompts: np.ndarray
    generated_tokens: np.ndarray
    trained_tokens: np.ndarray
    truncated: np.ndarray
    effective_completions: np.ndarray
    value: np.ndarray
    mean_count_by_status: dict[str, float] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)


def summarize(result: SimulationResult, *, hard_threshold: float = 0.01) -> dict[str, float]:
    """Scalar summary of a run: step means of every metric, plus

    - ``effective_gradient_ratio_after_first``: mean over epochs >= 2 (epoch 1 has no statistics, so every allocator
      that follows Knapsack RL's "first epoch uniform" is uniform there), and ``effective_gradient_ratio_epoch<e>``
      per (1-based) epoch;
    - ``final_mean_p``, ``converted_from_zero`` (final cumulative count), ``hard_prompts`` (initial p below
      ``hard_threshold``) and ``hard_final_mean_p`` (their mean true p at the end), ``allocate_ms`` (median, so a
      one-off JIT compile does not count), ``mean_count_<status>`` (see ``SimulationResult.mean_count_by_status``);
    - for strategies that generate more than they train (Seq, dynamic sampling): ``generated_over_trained`` (all
      completions generated / all trained, 1 for a plan-ahead allocator), ``effective_gradient_ratio_per_generated``
      and its ``_after_first`` (step means of trained completions in mixed groups / completions generated),
      ``rounds_per_step``, ``filled_share`` (dynamic sampling's fill / trained) and ``unfinished_prompts`` (Seq,
      per step);
    - ``value_share`` and ``value_share_after_first``: step means of :func:`value_share` (the objective at the true
      p over the best allocation of the same completions at the true p), and ``mixed_per_1000_generated``: mixed
      trained groups per 1,000 completions generated over the run;
    - tokens (:func:`token_summary`): ``tokens_generated`` and ``tokens_trained`` per step, ``tokens_per_completion``,
      ``truncated_share``, and per 1,000 generated tokens ``effective_per_1k_tokens`` (trained completions in mixed
      groups), ``mixed_per_1k_tokens`` and ``value_per_1k_tokens`` (the objective at the true p), each also
      ``_after_first`` (epochs >= 2).
    """
    later = result.epoch >= 1
    hard = result.p_initial < hard_threshold
    summary = {name: float(getattr(result, name).mean()) for name in STEP_METRICS}
    summary["effective_gradient_ratio_after_first"] = (
        float(result.effective_gradient_ratio[later].mean()) if later.any() else float("nan")
    )
    for epoch in np.unique(result.epoch):
        summary[f"effective_gradient_ratio_epoch{epoch + 1}"] = float(
            result.effective_gradient_ratio[result.epoch == epoch].mean()
        )
    summary["initial_mean_p"] = float(result.p_initial.mean())
    summary["final_mean_p"] = float(result.p_final.mean())
    summary["converted_from_zero"] = float(result.converted_from_zero[-1])
    summary["hard_prompts"] = float(hard.sum())
    summary["hard_final_mean_p"] = float(result.p_final[hard].mean()) if hard.any() else float("nan")
    summary["skipped_prompts"] = float(result.skipped_prompts.mean())
    summary["max_count"] = float(result.max_count.max())
    summary["allocate_ms"] = 1000.0 * float(np.median(result.allocate_seconds))
    for name, value in result.mean_count_by_status.items():
        summary[f"mean_count_{name}"] = value
    per_generated = result.effective_gradient_ratio_per_generated
    summary["effective_gradient_ratio_per_generated"] = float(per_generated.mean())
    summary["effective_gradient_ratio_per_generated_after_first"] = (
        float(per_generated[later].mean()) if later.any() else float("nan")
    )
    summary["generated_over_trained"] = float(result.generated.sum() / result.budget_used.sum())
    summary["rounds_per_step"] = float(result.rounds.mean())
    summary["filled_share"] = float(result.filled.sum() / result.budget_used.sum())
    summary["unfinished_prompts"] = float(result.unfinished.mean())
    summary["value_share"] = float(result.value_share.mean())
    summary["value_share_after_first"] = float(result.value_share[later].mean()) if later.any() else float("nan")
    summary["mixed_per_1000_generated"] = float(1000.0 * result.mixed_prompts.sum() / result.generated.sum())
    summary.update(token_summary(result))
    return summary


def token_summary(result: SimulationResult) -> dict[str, float]:
    """The token figures of :func:`summarize`: what a run generated in tokens, and what it bought per 1,000 of them."""
    tokens = result.generated_tokens
    summary = {
        "tokens_generated": float(tokens.mean()),
        "tokens_trained": float(result.trained_tokens.mean()),
        "tokens_per_completion": float(tokens.sum() / result.generated.sum()),
        "truncated_share": float(result.truncated.sum() / result.generated.sum()),
    }
    later = result.epoch >= 1
    for name, bought in (
        ("effective", result.effective_completions),
        ("mixed", result.mixed_prompts),
        ("value", result.value),
    ):
        summary[f"{name}_per_1k_tokens"] = _per_1k(bought, tokens)
        summary[f"{name}_per_1k_tokens_after_first"] = _per_1k(bought[later], tokens[later])
    summary["tokens_generated_after_first"] = float(tokens[later].mean()) if later.any() else float("nan")
    return summary


def _per_1k(bought: np.ndarray, tokens: np.ndarray) -> float:
    total = float(tokens.sum())
    return 1000.0 * float(bought.sum()) / total if total > 0 else float("nan")


_INT_COLUMNS: tuple[str, ...] = (
    "epoch",
    "budget_used",
    "generated",
    "rounds",
    "filled",
    "unfinished",
    "max_count",
    "skipped_prompts",
    "converted_from_zero",
    "mixed_prompts",
    "truncated",
    "effective_completions",
)
_FLOAT_COLUMNS: tuple[str, ...] = (
    *STEP_METRICS,
    "effective_gradient_ratio_per_generated",
    "value_share",
    "mean_p",
    "allocate_seconds",
    "generated_tokens",
    "trained_tokens",
    "value",
)


class StepLog:
    """The per-step columns of one run, filled a step at a time, and the running counts two of them need."""

    def __init__(self, num_prompts: int, total_steps: int) -> None:
        self.columns = {name: np.zeros(total_steps, dtype=np.int64) for name in _INT_COLUMNS}
        self.columns.update({name: np.zeros(total_steps) for name in _FLOAT_COLUMNS})
        self.step = 0
        # Observed history for the conversion metric (what the trainer could log too).
        self.attempts_seen = np.zeros(num_prompts, dtype=np.int64)
        self.successes_seen = np.zeros(num_prompts, dtype=np.int64)
        self.converted = 0
        self.status_counts = np.zeros(len(STATUSES))  # sum of N_i per status, epochs >= 2
        self.status_prompts = np.zeros(len(STATUSES))  # prompts allocated per status, epochs >= 2

    def record(self, epoch: int, out: SimulatedStep, p_true: np.ndarray) -> None:
        """Log a step before it learns; ``p_true``: the true p of ``out.generated_ids`` when they were sampled."""
        row: dict[str, float] = dict(group_metrics(out.trained, out.trained_successes))  # over trained completions
        mixed = (out.trained_successes > 0) & (out.trained_successes < out.trained)
        row["effective_gradient_ratio_per_generated"] = float(out.trained[mixed].sum() / out.generated.sum())
        row["mixed_prompts"] = int(mixed.sum())
        row["effective_completions"] = int(out.trained[mixed].sum())
        row["value_share"] = value_share(out.generated, p_true)
        row["value"] = float(value_of(out.generated, p_true).sum())
        row["generated_tokens"] = float(out.completion_tokens.sum())
        row["trained_tokens"] = out.trained_tokens
        row["truncated"] = out.truncated
        row["converted_from_zero"] = self._count_conversions(out)
        row["epoch"] = epoch
        row["budget_used"] = int(out.trained.sum())
        row["generated"] = int(out.generated.sum())
        row["rounds"], row["filled"], row["unfinished"] = out.rounds, out.filled, out.unfinished
        row["max_count"] = int(out.generated.max())
        row["skipped_prompts"] = int(np.sum(out.generated == 0))
        row["allocate_seconds"] = out.seconds
        for name, value in row.items():
            self.columns[name][self.step] = value
        if epoch >= 1:  # mean_count_by_status is over epochs >= 2 (the first one has no statistics)
            status = status_index(out.generated_rates)
            self.status_counts += np.bincount(status, weights=out.generated, minlength=len(STATUSES))
            self.status_prompts += np.bincount(status, minlength=len(STATUSES))

    def learned(self, logits: np.ndarray) -> None:
        """Log the population's mean true p after the step's update, and move on to the next step."""
        self.columns["mean_p"][self.step] = float(expit(logits).mean())
        self.step += 1

    def result(self, p_initial: np.ndarray, p_final: np.ndarray) -> SimulationResult:
        """The run's :class:`SimulationResult`, without its summary."""
        by_status = {
            name: float(total / prompts) if prompts else float("nan")
            for name, total, prompts in zip(STATUSES, self.status_counts, self.status_prompts, strict=True)
        }
        return SimulationResult(p_initial=p_initial, p_final=p_final, mean_count_by_status=by_status, **self.columns)

    def _count_conversions(self, out: SimulatedStep) -> int:
        """Prompts ever scored with no success that now have one, cumulated over the run."""
        ids = out.generated_ids
        was_zero = (self.attempts_seen[ids] > 0) & (self.successes_seen[ids] == 0)
        self.converted += int(np.sum(was_zero & (out.generated_successes > 0)))
        self.attempts_seen[ids] += out.generated
        self.successes_seen[ids] += out.generated_successes
        return self.converted


__all__ = [
    "REFERENCE_BOUNDS",
    "STEP_METRICS",
    "SimulationResult",
    "StepLog",
    "group_metrics",
    "summarize",
    "token_summary",
    "value_share",
]
