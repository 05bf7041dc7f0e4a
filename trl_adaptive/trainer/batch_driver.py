"""One generation batch, from the sampler's rows to the training dict, with no trainer in sight.

:class:`BatchDriver` runs the data path of a batch (T = generation_batch_size completions, U = T / num_generations
prompts, L = T / num_processes per rank) against a :class:`~trl_adaptive.trainer.port.GenerationPort`:

    sampler rows (U prompts x G copies, L per rank)
      -> gather, keep one row per prompt                            (rounds.batch_prompt_rows)
      -> main process: the prompt source composes the batch, the procedure asks for rounds (broadcast to every rank)
           one planned round, trained whole: the port's training pass generates it         (_planned)
           otherwise each round is generated across ranks, the chosen completions replayed  (_in_rounds)
      -> jobs balanced over the ranks by tokens when group sizes differ, L per rank         (dispatch.BatchDispatch)
      -> segment-wise advantages over variable groups, times the procedure's weights        (advantages.py)
      -> statistics updated on every rank with every completion generated; procedure and source state; logs

What is logged leaves as data (``metrics.py``): the port appends it to the framework's metric stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..sampling import BatchRun, Outcome
from .adaptive_state import AdaptiveState
from .advantages import group_advantages
from .allocation_log import append_allocation_record
from .completion_logs import generated_reward_metrics
from .dispatch import BatchDispatch, rank_balance_metrics, rank_slice
from .environment_data import ResetRows
from .metrics import allocation_line, allocation_metrics, completion_scale, round_metrics
from .port import BatchSettings, GenerationBatchEnd, GenerationPort
from .reward_checks import RewardChecks
from .rounds import (
    Generated,
    OutcomeMessage,
    RoundMessage,
    add_rows,
    batch_context,
    batch_prompt_rows,
    local_rows,
    next_message,
    observe_round,
    run_round,
    total_rewards,
)


@dataclass
class TrainingPass:
    """What the batch's training pass gave: this rank's training dict, the gathered ``(T, K)`` rewards of the trained
    completions (dispatch order) and, after rounds, every completion's rewards (record order; None without rounds)."""

    training_dict: dict[str, Any]
    rewards_per_func: torch.Tensor
    round_rewards: torch.Tensor | None


class BatchDriver:
    """Runs each training generation batch of one run (see the module docstring).

    Args:
        port: the framework's side (``trl_port.TrlPort`` for TRL 1.16).
        state: the run's adaptive state (procedure, prompt source, statistics, training prompts).
        reset_rows: when environments make the prompts, what the framework sees of each row; else None.
        reward_checks: the once-only reward warnings of the run.
    """

    def __init__(
        self, port: GenerationPort, state: AdaptiveState, reset_rows: ResetRows | None, reward_checks: RewardChecks
    ) -> None:
        self.port, self.state, self.reset_rows, self.reward_checks = port, state, reset_rows, reward_checks
        self.settings: BatchSettings | None = None  # the running batch's, read once from the port

    def run(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The training dict for this rank, from this rank's sampler ``inputs``."""
        port, state = self.port, self.state
        settings = self.settings = port.settings()
        batch_ids, prompt_rows = batch_prompt_rows(port.gather(inputs), settings)
        state.training_prompts.observe(state.prompt_statistics, batch_ids, prompt_rows)
        rows = dict(zip(batch_ids.tolist(), prompt_rows, strict=True))
        run = None
        if port.is_main_process:  # the prompt source composes the batch from the sampler's ids
            batch_ids, composed = state.compose_batch(batch_ids, settings.seed, settings.step)
            run = BatchRun(state.procedure, batch_context(settings, state, batch_ids), port.num_processes)
            run.record.metrics.update(composed)  # prompt_source/* (none for the default source)
        message = port.share(next_message(run) if run else None)
        dispatch = BatchDispatch(
            settings.seed, settings.step, port.num_processes, state.prompt_statistics.expected_tokens
        )
        if message.request.final:  # one planned round, trained whole: the training pass generates it
            passed, outcome, dispatched = self._planned(dispatch, run, rows, message)
        else:
            passed, outcome, dispatched = self._in_rounds(dispatch, run, rows, message)
        return self.finish(passed, outcome, dispatched)

    def _rows(self, rows: dict, prompt_ids: np.ndarray) -> list[dict]:
        """This rank's rows of ``prompt_ids``, as the framework's reward functions see them."""
        store, column = self.state.prompt_statistics, self.settings.success_rate_column
        return local_rows(rows, prompt_ids, store, column, self.reset_rows)

    def _local(self, total: int) -> slice:
        return rank_slice(total, self.port.num_processes, self.port.process_index)

    def _planned(self, dispatch: BatchDispatch, run: BatchRun | None, rows: dict, message: RoundMessage):
        """The port's own generation and scoring of the round's jobs (balanced over ranks when sizes differ)."""
        port, jobs, record_ids = self.port, message.jobs, message.record_ids
        add_rows(self.state.training_prompts, rows, record_ids)  # CERO's pacing may plan prompts drawn beyond it
        order = dispatch.planned_order(jobs, record_ids)
        row_ids = record_ids[jobs[order]]
        output, rewards_per_func, tokens = port.training_pass(
            self._rows(rows, row_ids[self._local(len(row_ids))]), len(row_ids), replay=None
        )
        port.log(rank_balance_metrics(tokens, port.num_processes))  # every rank's, in dispatch order
        back = np.argsort(order)
        rewards = total_rewards(rewards_per_func, self.settings.reward_weights)[back]
        message = port.share(observe_round(run, jobs, rewards, tokens[back]) if run else None)
        if not isinstance(message, OutcomeMessage) or len(message.outcome.selected) != len(jobs):
            procedure = type(self.state.procedure).__name__
            raise AssertionError(f"{procedure} asked for a final round but did not train it all.")
        return TrainingPass(output, rewards_per_func, None), message.outcome, order  # baseline: the trained ones

    def _in_rounds(
        self, dispatch: BatchDispatch, run: BatchRun | None, rows: dict, message: RoundMessage | OutcomeMessage
    ):
        """Every round generated across ranks until the procedure finishes; then the training pass replays the
        completions it chose, spread over the ranks."""
        port, generated, prompts = self.port, Generated(), self.state.training_prompts
        while isinstance(message, RoundMessage):
            jobs, record_ids = message.jobs, message.record_ids
            add_rows(prompts, rows, record_ids)
            job_ids = record_ids[jobs]
            order = dispatch.round_order(job_ids, len(generated.rewards_per_func))
            mine = self._rows(rows, job_ids[order[self._local(len(order))]])
            rewards, tokens = run_round(port, order, mine, self.settings.reward_weights, generated)
            message = port.share(observe_round(run, jobs, rewards, tokens) if run else None)
        outcome: Outcome = message.outcome
        record = outcome.record
        add_rows(prompts, rows, record.prompt_ids)
        dispatched = dispatch.replay_dispatch(record, outcome.selected)
        training_tokens = record.completion_tokens[dispatched]
        port.log(rank_balance_metrics(training_tokens, port.num_processes, generated.rank_tokens))
        local = self._local(len(dispatched))
        row_ids = record.prompt_ids[record.group_ids[dispatched]]
        replay = generated.replay_pass(dispatched, local)
        output, rewards_per_func, _ = port.training_pass(self._rows(rows, row_ids[local]), len(dispatched), replay)
        return TrainingPass(output, rewards_per_func, generated.all_rewards_per_func), outcome, dispatched

    def finish(self, passed: TrainingPass, outcome: Outcome, dispatched: np.ndarray) -> dict[str, Any]:
        """Advantages over the real groups, scaled by the procedure's weights; statistics; state; logs. Returns
        this rank's training dict (``dispatched``: the record index of each trained completion, dispatch order)."""
        output, rewards_per_func, round_rewards = passed.training_dict, passed.rewards_per_func, passed.round_rewards
        port, settings, record, store = self.port, self.settings, outcome.record, self.state.prompt_statistics
        group_ids = record.group_ids[dispatched]
        device = rewards_per_func.device
        reference = None
        if outcome.baseline_from_all:  # Seq: each baseline from every completion drawn
            reference = (round_rewards.to(rewards_per_func), torch.as_tensor(record.group_ids, device=device))
        result = group_advantages(
            rewards_per_func,
            settings.reward_weights.to(device),
            torch.as_tensor(group_ids, device=device),
            len(record.prompt_ids),
            settings.scale_rewards,
            settings.multi_objective_aggregation,
            reference=reference,
        )
        counts = outcome.trained_counts
        scale = completion_scale(counts, record.weights, group_ids, settings.equal_prompt_weighting)
        advantages = result.advantages * scale.to(result.advantages)
        output["advantages"] = advantages[self._local(len(group_ids))]

        rewards = result.rewards.cpu().numpy().astype(np.float64)
        expected_tokens = store.expected_tokens(record.prompt_ids)  # before this step's update, as dispatched
        if settings.allocation_log_dir is not None:
            line = allocation_line(
                outcome,
                group_ids,
                rewards,
                step=settings.step,
                epoch=store.epoch,
                success_threshold=settings.success_threshold,
                expected_tokens=expected_tokens,
                engine=settings.engine,
            )
            append_allocation_record(settings.allocation_log_dir, line)
        store.update(record.prompt_ids[record.group_ids], record.rewards, record.completion_tokens)
        if port.is_main_process:
            self.state.end_step(outcome, settings.success_threshold)  # procedure's and source's state
            self.reward_checks.observe(record.rewards, record.prompt_ids[record.group_ids], store)
        self.reward_checks.dynamic_fill(
            record.metrics, record.notes, len(outcome.selected), settings.dynamic_sampling_max_rounds
        )
        generated = (rewards_per_func if round_rewards is None else round_rewards).to(device)
        port.log(generated_reward_metrics(generated, settings.reward_func_names, settings.reward_weights))
        port.log(round_metrics(outcome) | self.state.visits.visit(record.prompt_ids, record.counts()))
        budget, threshold = settings.generation_batch_size, settings.success_threshold
        seconds = port.take_generation_seconds()
        port.log(allocation_metrics(outcome, group_ids, rewards, result, budget, threshold, seconds))
        port.replace_group_logs(result.zero_std_fraction, advantages.tolist(), counts[group_ids].tolist())
        port.batch_end(GenerationBatchEnd(outcome, dispatched, output, expected_tokens))
        return output
