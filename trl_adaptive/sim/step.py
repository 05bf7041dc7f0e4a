"""One simulated step: a sampling procedure of :mod:`trl_adaptive.sampling`, driven with Bernoulli rewards.

The trainer and the simulator run the same procedures through the same loop (:func:`trl_adaptive.sampling.drive`);
only the world differs: here a completion of prompt i is a Bernoulli(p_i) reward at the prompt's true p_i with a length
drawn from the prompt's length distribution (:mod:`~trl_adaptive.sim.lengths`; a cut completion fails), and the further
prompts a procedure asks for are drawn uniformly from the rest of the population, through the prompt source
(:meth:`~trl_adaptive.sampling.source.PromptSource.draw_further`), which also composes each batch from the epoch's
order (:func:`compose_step`), as in the trainer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from trl_adaptive.allocation.base import Allocator, PromptBatchStats
from trl_adaptive.sampling import BatchContext, Procedure, Round, drive, is_success
from trl_adaptive.sampling.source import PromptSource, SourceContext, check_source_batch
from trl_adaptive.strategies import as_procedure, build_prompt_source

from .lengths import PromptLengths
from .population import expit, seq_advantage_weights


class StatisticsStore(Protocol):
    """The part of :class:`trl_adaptive.stats.PromptStatistics` the simulator uses."""

    def update(
        self, prompt_ids: np.ndarray, rewards: np.ndarray, completion_tokens: np.ndarray | None = None
    ) -> None: ...

    def end_epoch(self) -> None: ...

    def success_rates(self, prompt_ids: np.ndarray) -> np.ndarray: ...

    def batch(self, prompt_ids: np.ndarray) -> PromptBatchStats: ...


@dataclass
class SimulatedStep:
    """What one step generated and trained, whatever the strategy (plan-ahead, Seq rounds, dynamic sampling)."""

    # Prompts trained on, aligned: stable ids, completions trained, successes among them, advantage multipliers.
    trained_ids: np.ndarray
    trained: np.ndarray
    trained_successes: np.ndarray
    weights: np.ndarray | None
    # Prompts generated for (each once per step), aligned: ids, their store rate at allocation, completions, successes.
    generated_ids: np.ndarray
    generated_rates: np.ndarray
    generated: np.ndarray
    generated_successes: np.ndarray
    # One entry per generated completion: its prompt id, reward and generated tokens (the store sees every one).
    completion_ids: np.ndarray
    rewards: np.ndarray
    completion_tokens: np.ndarray
    trained_tokens: float
    truncated: int  # completions cut at max_completion_length (they failed)
    seconds: float
    rounds: int = 1
    filled: int = 0
    unfinished: int = 0


def simulated_procedure(spec: str | Allocator | Procedure) -> Procedure:
    """The procedure a spec runs in the simulator, a private copy (a stateful one starts from the given state).

    Resolved as the trainer resolves it (:func:`trl_adaptive.strategies.as_procedure`): a name is its registered
    strategy's procedure (``"cero"`` is CERO's pacing, as in the trainer), an allocator its strategy's default
    procedure, a procedure runs as given.
    """
    if not isinstance(spec, (str, Allocator, Procedure)):
        raise TypeError(f"Expected a strategy name, an Allocator or a Procedure, got {type(spec).__name__}.")
    return as_procedure(copy.deepcopy(spec))


def simulated_source(spec: str | PromptSource, kwargs: dict | None = None) -> PromptSource:
    """The prompt source a spec runs in the simulator: a name's (built with ``kwargs``), or a private copy."""
    if isinstance(spec, str):
        return build_prompt_source(spec, kwargs)
    if not isinstance(spec, PromptSource) or kwargs:
        raise TypeError(f"Expected a prompt source name or a PromptSource (no kwargs), got {type(spec).__name__}.")
    return copy.deepcopy(spec)


def compose_step(
    source: PromptSource,
    offered: np.ndarray,
    store: StatisticsStore,
    num_prompts: int,
    step: int,
    rng: np.random.Generator,
    draw_rng: np.random.Generator,
    group_size: int,
) -> np.ndarray:
    """The batch's prompt ids as ``source`` composes them from the epoch order's ``offered`` ids; its candidates
    beyond them drawn uniformly from the rest of the population (fewer when fewer are left)."""

    def draw(exclude: np.ndarray, number: int) -> np.ndarray:
        candidates = np.setdiff1d(np.arange(num_prompts), exclude)
        return np.sort(draw_rng.choice(candidates, size=min(int(number), len(candidates)), replace=False))

    ctx = SourceContext(np.asarray(offered, dtype=np.int64), store.batch, draw, rng, step, group_size)
    return check_source_batch(source, ctx, source.compose(ctx))


def run_step(
    procedure: Procedure,
    ids: np.ndarray,
    store: StatisticsStore,
    logits: np.ndarray,
    lengths: PromptLengths,
    num_generations: int,
    reward_rng: np.random.Generator,
    draw_rng: np.random.Generator,
    select_rng: np.random.Generator,
    source: PromptSource | None = None,
) -> SimulatedStep:
    """One batch of ``procedure`` with r ~ Bernoulli(p_i) and lengths from ``lengths``, as the trainer drives it
    (``sampling.drive``); the procedure's further prompts go through ``source``, which then observes the batch."""

    def draw_prompts(exclude: np.ndarray, number: int) -> np.ndarray:
        candidates = np.setdiff1d(np.arange(len(logits)), exclude)
        if len(candidates) < number:
            return candidates[:0]
        return np.sort(draw_rng.choice(candidates, size=number, replace=False))

    truncated = 0

    def generate(request: Round, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nonlocal truncated
        completion_prompts = np.repeat(request.prompt_ids, request.counts)
        p = expit(logits[completion_prompts])
        solved = (reward_rng.random(len(p)) < p).astype(np.float64)
        rewards, tokens, cut = lengths.complete(completion_prompts, solved)
        truncated += int(cut.sum())
        return rewards, tokens

    budget = len(ids) * num_generations
    draw = (
        draw_prompts
        if source is None
        else (lambda exclude, number: source.draw_further(draw_prompts, exclude, number))
    )
    ctx = BatchContext(ids, budget, num_generations, 1.0, store.batch, draw, select_rng)
    outcome = drive(procedure, ctx, generate)
    procedure.end_step(outcome)
    record = outcome.record
    if source is not None:
        source.end_step(record.prompt_ids, record.group_ids, record.rewards, ctx.success_threshold)
    generated, successes = record.counts(), record.successes().astype(np.int64)
    trained = outcome.trained_counts
    success = is_success(record.rewards[outcome.selected], ctx.success_threshold)
    trained_successes = np.bincount(outcome.trained_group_ids, weights=success, minlength=len(trained)).astype(
        np.int64
    )
    # The trained groups: every prompt trained on, and the batch's own prompts a plan skipped (count 0).
    keep = (trained > 0) | (np.isin(record.prompt_ids, ids) & (generated == 0))
    weights = record.weights
    if outcome.baseline_from_all:  # Seq: the baseline of all its completions (the "advantage" rule's model)
        p = expit(logits[record.prompt_ids])
        seq = seq_advantage_weights(trained, trained_successes, generated, successes, p)
        weights = seq if weights is None else weights * seq
    return SimulatedStep(
        trained_ids=record.prompt_ids[keep],
        trained=trained[keep],
        trained_successes=trained_successes[keep],
        weights=None if weights is None else weights[keep],
        generated_ids=record.prompt_ids,
        generated_rates=record.success_rates,
        generated=generated,
        generated_successes=successes,
        completion_ids=record.prompt_ids[record.group_ids],
        rewards=record.rewards,
        completion_tokens=record.completion_tokens,
        trained_tokens=float(record.completion_tokens[outcome.selected].sum()),
        truncated=truncated,
        seconds=outcome.seconds,
        rounds=len(record.round_sizes),
        filled=int(record.metrics.get("dynamic_sampling/filled", 0)),
        unfinished=int(record.metrics.get("rounds/prompts_unfinished", 0)),
    )


__all__ = ["SimulatedStep", "StatisticsStore", "compose_step", "run_step", "simulated_procedure", "simulated_source"]
