"""One simulation: a sampling procedure trained on a simulated prompt population for a number of epochs.

Each step offers the next M prompts of the epoch's shuffled order to the prompt source, which composes the batch
(:func:`~trl_adaptive.sim.step.compose_step`; the default takes them unchanged), lets the procedure sample them from
the statistics store (:func:`~trl_adaptive.sim.step.run_step`), logs what it generated and trained
(:class:`~trl_adaptive.sim.results.StepLog`), then updates the store with every scored completion and the prompts'
true p with the trained ones (:class:`~trl_adaptive.sim.population.LearningRule`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trl_adaptive.allocation.base import Allocator
from trl_adaptive.sampling import Procedure
from trl_adaptive.sampling.source import PromptSource
from trl_adaptive.stats import PromptStatistics

from .lengths import LENGTHS, LengthModel, PromptLengths
from .population import MIXES, DifficultyMix, LearningRule, RuleKind, expit, logit
from .results import SimulationResult, StepLog, summarize
from .step import StatisticsStore, compose_step, run_step, simulated_procedure, simulated_source


def simulate(
    allocator: str | Allocator | Procedure,
    *,
    num_prompts: int = 2000,
    batch_prompts: int = 256,
    num_generations: int = 8,
    epochs: int = 5,
    seed: int = 0,
    learning_rule: RuleKind | LearningRule = "per_completion",
    mix: str | DifficultyMix = "dapo",
    lengths: str | LengthModel = "default",
    hard_threshold: float = 0.01,
    statistics_factory: Callable[[], StatisticsStore] | None = None,
    prompt_source: str | PromptSource = "sampler",
    prompt_source_kwargs: dict | None = None,
) -> SimulationResult:
    """Run one allocator on a simulated prompt population at training budget B = batch_prompts * num_generations.

    Every strategy is a sampling procedure of :mod:`trl_adaptive.sampling`, driven as the trainer drives it (one
    implementation, two drivers), each training exactly B completions per step:

    - a registered strategy by name, or an :class:`Allocator` (its strategy's procedure: uniform, knapsack, Est
      planned ahead in one round, every completion trains; ``"cero"`` is CERO's pacing, as in the trainer);
    - Reinforce-Ada Seq-Pos / Seq-Balance (by name): rounds, then n = ``num_generations`` selected per prompt; the
      baseline is computed from all of a prompt's completions, which only the ``"advantage"`` rule models (see
      :func:`seq_advantage_weights`);
    - :class:`~trl_adaptive.sampling.DynamicSampling` around a plan-ahead allocator (DAPO);
    - two rounds per step: :class:`~trl_adaptive.sampling.Pilot` (k per prompt, then ``allocate_remaining`` on the
      updated posterior) or :class:`~trl_adaptive.sampling.PilotCommit` (Pilot-Commit's thresholds);
    - any other :class:`~trl_adaptive.sampling.Procedure` (e.g. ``PlanAhead(get_allocator("cero"))``, CERO's fixed
      mapping).

    Args:
        allocator: a registered name, an :class:`Allocator` or a :class:`~trl_adaptive.sampling.Procedure`; it is
            deep-copied (:func:`simulated_procedure`), so a stateful one (CERO's duals, Pilot-Commit's evictions)
            starts from the given state and the caller's object is not mutated.
        num_prompts: size of the dataset.
        batch_prompts: M, unique prompts per step.
        num_generations: n; the training budget per step is B = M * n, as for GRPO with ``num_generations = n``.
        epochs: passes over the dataset; each has ``num_prompts // batch_prompts`` steps (the incomplete last batch
            is dropped, as TRL's ``RepeatSampler`` does). Prompts drawn by dynamic sampling come on top.
        seed: seeds independent generators (population, sampling order, rewards, dynamic sampling's draws, Seq's
            selection). Two allocators run with the same seed see the same population and the same batches, so their
            differences are paired.
        learning_rule: a :class:`LearningRule` or the ``kind`` of one with default ``lr`` / ``transfer``.
        mix: a :class:`DifficultyMix` or a key of :data:`MIXES`.
        lengths: a :class:`~trl_adaptive.sim.lengths.LengthModel` or a key of
            :data:`~trl_adaptive.sim.lengths.LENGTHS`: how many tokens each completion generates. The default cuts
            nothing, so it changes no reward and no allocation made without a token budget.
        hard_threshold: prompts with initial true p below it count as "initially hard" in the summary.
        statistics_factory: builds the statistics store the allocator reads; default
            ``trl_adaptive.stats.PromptStatistics()``, the trainer's store. It is updated once per step with every
            completion generated and its length (as the trainer's round loop does), so a token-budgeted allocator
            reads lengths learned as the trainer's are.
        prompt_source: which prompts enter each batch, as ``AdaptiveGRPOConfig.prompt_source`` (a registered name
            built with ``prompt_source_kwargs``, or a :class:`~trl_adaptive.sampling.source.PromptSource`,
            deep-copied); it composes each batch from the epoch order's M prompts. The default takes them unchanged.

    Returns:
        a :class:`SimulationResult`.
    """
    _check_sizes(num_prompts, batch_prompts, num_generations, epochs)
    procedure = simulated_procedure(allocator)
    procedure.check(batch_prompts, batch_prompts * num_generations, num_generations)
    source = simulated_source(prompt_source, prompt_source_kwargs)
    source.check(num_prompts, batch_prompts)
    rule = LearningRule(kind=learning_rule) if isinstance(learning_rule, str) else learning_rule
    difficulty = MIXES[mix] if isinstance(mix, str) else mix
    length_model = _length_model(lengths)
    store = (statistics_factory or PromptStatistics)()

    # The first three generators are those of a plan-ahead run, so adding strategies changed none of its numbers;
    # lengths draw from a sixth, so adding them changed no reward either; the prompt source from a seventh and eighth.
    streams = np.random.default_rng(seed).spawn(8)
    population_rng, order_rng, reward_rng, draw_rng, select_rng, length_rng, source_rng, source_draw_rng = streams
    p_initial = difficulty.sample(num_prompts, population_rng)
    prompt_lengths = PromptLengths.draw(length_model, num_prompts, length_rng)
    logits = logit(p_initial)
    steps_per_epoch = num_prompts // batch_prompts
    log = StepLog(num_prompts, steps_per_epoch * epochs)
    for epoch in range(epochs):
        order = order_rng.permutation(num_prompts)
        for s in range(steps_per_epoch):
            offered = order[s * batch_prompts : (s + 1) * batch_prompts]
            step = epoch * steps_per_epoch + s
            ids = compose_step(source, offered, store, num_prompts, step, source_rng, source_draw_rng, num_generations)
            # The procedure samples from the store's statistics only (what the trainer sees).
            out = run_step(
                procedure,
                ids,
                store,
                logits,
                prompt_lengths,
                num_generations,
                reward_rng,
                draw_rng,
                select_rng,
                source,
            )
            log.record(epoch, out, p_true=expit(logits[out.generated_ids]))
            # The store sees every scored completion and its length; learning, only the trained ones.
            store.update(out.completion_ids, out.rewards, out.completion_tokens)
            rule.apply(logits, out.trained_ids, out.trained, out.trained_successes, num_generations, out.weights)
            log.learned(logits)
        store.end_epoch()

    result = log.result(p_initial, expit(logits))
    result.summary = summarize(result, hard_threshold=hard_threshold)
    return result


def _length_model(lengths: str | LengthModel) -> LengthModel:
    if isinstance(lengths, LengthModel):
        return lengths
    if lengths not in LENGTHS:
        raise ValueError(f"Unknown lengths={lengths!r}; pass a LengthModel or one of {', '.join(LENGTHS)}.")
    return LENGTHS[lengths]


def _check_sizes(num_prompts: int, batch_prompts: int, num_generations: int, epochs: int) -> None:
    if batch_prompts <= 0 or num_prompts < batch_prompts:
        raise ValueError(f"Need 0 < batch_prompts <= num_prompts, got {batch_prompts} and {num_prompts}.")
    if num_generations < 2 or epochs < 1:
        raise ValueError(f"Need num_generations >= 2 and epochs >= 1, got {num_generations} and {epochs}.")


__all__ = ["simulate"]
