"""The trainer's side of a sampling procedure: its context, and one round generated across ranks.

The procedure (``trl_adaptive.sampling``) runs on the main process only; each round it asks for is broadcast (a
:class:`RoundMessage`, and an :class:`OutcomeMessage` once it finished), every rank generates its share in lockstep
(one ``/v1/completions`` request in vLLM server mode), and the gathered rewards go back to it. A round runs
GRPOTrainer's own ``_generate_and_score_completions`` up to its ``_generate`` call (so the per-row set-up TRL does
there, tool dicts and images, is TRL's), scores what came back with the row's extra fields (a ``rollout_func``'s),
and stops there: nothing before that call talks across ranks, and no forward pass is spent on completions that may
not be trained. A round's jobs (one per completion, prompt-major) are laid out over the
ranks, tokens balanced, when group sizes differ (``dispatch.round_order``) and put back in the procedure's order
afterwards, so the batch's record, the completions kept for the training pass and the rewards all line up. The
training pass then replays the chosen completions through GRPOTrainer (``_generate`` / ``_calculate_rewards`` hand
them back instead of generating again), laid out by their actual tokens (``dispatch.replay_dispatch``).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from trl import GRPOTrainer

from ..sampling import BatchContext, BatchRun, Outcome, Round
from ..stats import stable_prompt_ids
from .completion_logs import replay_extras, take_round_extras
from .dispatch import rank_slice, rank_tokens, round_order
from .hook_state import HookState, Replay
from .prompt_source import procedure_draw
from .random_streams import PROCEDURE, step_seed

if TYPE_CHECKING:
    from .trainer import AdaptiveGRPOTrainer


class RoundCaptured(Exception):
    """Raised by the trainer's ``_generate`` once a round's completions are captured (never escapes ``run_round``)."""


@dataclass(frozen=True)
class RoundMessage:
    """The main process's next round, broadcast to every rank: the procedure's ``request``, its ``jobs`` (one per
    completion, prompt-major: indices into ``record_ids``) and ``record_ids``, the prompt ids of the batch's record."""

    request: Round
    jobs: np.ndarray
    record_ids: np.ndarray


@dataclass(frozen=True)
class OutcomeMessage:
    """The main process's word that the procedure finished the batch, broadcast to every rank, with its outcome."""

    outcome: Outcome


def next_message(run: BatchRun) -> RoundMessage | OutcomeMessage:
    """Main process: the procedure's outcome once it finished, else its next round."""
    if run.finished:
        return OutcomeMessage(run.outcome())
    return RoundMessage(*run.next_round(), run.record.prompt_ids)


def observe_round(
    run: BatchRun, jobs: np.ndarray, rewards: np.ndarray, tokens: np.ndarray
) -> RoundMessage | OutcomeMessage:
    """Main process: hand a round's rewards and lengths to the procedure; its next round, or the outcome."""
    run.observe(jobs, rewards, tokens)
    return next_message(run)


@dataclass
class Generated:
    """What the rounds of one batch generated, in the procedure's record order (identical on every rank)."""

    # per completion: what _generate returned for its row (ids, completion ids, tool mask, completion, logprobs,
    # images, tool images), and the log_extra values its scoring logged ({column: value})
    samples: list[tuple] = field(default_factory=list)
    rewards_per_func: list[torch.Tensor] = field(default_factory=list)  # per round: (K_r, J) gathered rewards
    rank_tokens: list[np.ndarray] = field(default_factory=list)  # per round: (R,) tokens each rank generated

    @property
    def all_rewards_per_func(self) -> torch.Tensor:
        return torch.cat(self.rewards_per_func)

    def replay(self, completions: np.ndarray) -> tuple:
        """The ``_generate`` return value for these completions (this rank's trained rows)."""
        samples = [self.samples[i] for i in completions]
        columns = (list(column) for column in zip(*samples, strict=True))
        prompt_ids, completion_ids, tool_mask, texts, logps, images, tool_images, _ = columns
        tool_mask = None if all(m is None for m in tool_mask) else tool_mask
        logps = None if all(x is None for x in logps) else logps
        images = None if all(x is None for x in images) else images
        tool_images = tool_images if any(tool_images) else []
        return prompt_ids, completion_ids, tool_mask, texts, logps, {}, images, tool_images

    def replay_pass(self, dispatched: np.ndarray, local: slice) -> Replay:
        """What the training pass hands back in place of generating and scoring: this rank's ``_generate`` output,
        every rank's rewards (gathered, in dispatch order), this rank's ``log_extra`` columns."""
        rewards = self.all_rewards_per_func[torch.as_tensor(dispatched)]
        extras = replay_extras([s[7] for s in self.samples], dispatched[local])
        return Replay(self.replay(dispatched[local]), rewards, extras)


def batch_context(trainer: AdaptiveGRPOTrainer, prompt_ids: np.ndarray) -> BatchContext:
    """The procedure's view of this step: the store, prompts drawn through the prompt source by (seed, step, call),
    a seeded generator."""
    seed, step = trainer.args.seed, trainer.state.global_step
    draw_prompts = procedure_draw(trainer.adaptive_state.prompt_source, trainer.training_prompts, seed, step)
    return BatchContext(
        prompt_ids=prompt_ids,
        budget=trainer.args.generation_batch_size,
        group_size=trainer.num_generations,
        success_threshold=trainer.args.success_threshold,
        statistics=trainer.prompt_statistics.batch,
        draw_prompts=draw_prompts,
        rng=np.random.default_rng(step_seed(seed, step, PROCEDURE)),
    )


def batch_prompt_rows(trainer: AdaptiveGRPOTrainer, inputs: list[dict[str, Any]]) -> tuple[np.ndarray, list[dict]]:
    """The store ids and one row per prompt of the global generation batch, in sampler order (TRL repeats each
    prompt G times in a row)."""
    rows = gather_object(inputs) if trainer.accelerator.num_processes > 1 else list(inputs)
    if len(rows) != trainer.args.generation_batch_size:
        raise RuntimeError(
            f"Expected {trainer.args.generation_batch_size} rows in the generation batch, got {len(rows)}."
        )
    column = trainer.args.prompt_id_column
    ids = np.array([row[column] for row in rows]).reshape(-1, trainer.num_generations)
    if not (ids == ids[:, :1]).all():
        raise RuntimeError(
            "TRL's sampler no longer repeats each prompt num_generations times in a row; trl_adaptive is pinned "
            "to trl 1.16's RepeatSampler layout."
        )
    rows = rows[:: trainer.num_generations]
    batch_ids = stable_prompt_ids([row[column] for row in rows], column)
    if len(np.unique(batch_ids)) != len(batch_ids):
        raise ValueError(
            f"A generation batch holds the same prompt id twice (column {column!r}): a streaming dataset yielded one "
            "prompt twice within a batch. Deduplicate the stream, or give its rows distinct ids in that column."
        )
    return batch_ids, rows


def share(trainer: AdaptiveGRPOTrainer, value: Any) -> Any:
    """``value`` of the main process, on every rank."""
    if trainer.accelerator.num_processes == 1:
        return value
    payload = [value]
    broadcast_object_list(payload, from_process=0)
    return payload[0]


def add_rows(trainer: AdaptiveGRPOTrainer, rows: dict[int, dict], prompt_ids: np.ndarray) -> None:
    """Rows of prompts the procedure drew beyond the batch (from the training data)."""
    missing = [i for i in prompt_ids.tolist() if i not in rows]
    if missing:
        new = trainer.training_prompts.rows(np.asarray(missing, dtype=np.int64))
        rows.update(zip(missing, new, strict=True))


def local_rows(trainer: AdaptiveGRPOTrainer, rows: dict[int, dict], prompt_ids: np.ndarray) -> list[dict]:
    """Copies of this rank's rows (the parent mutates them), with the live success rate for reward functions; when
    environments make the prompts, the rows as GRPOTrainer gives them (reset() and the reward functions get the
    user's columns only, or the placeholder's prompt)."""
    if trainer.reset_rows is not None:
        return [trainer.reset_rows.as_trl_sees(rows[prompt_id]) for prompt_id in prompt_ids.tolist()]
    rates = trainer.prompt_statistics.success_rates(prompt_ids)
    local = []
    for prompt_id, rate in zip(prompt_ids.tolist(), rates.tolist(), strict=True):
        row = copy.copy(rows[prompt_id])
        row[trainer.args.success_rate_column] = float(rate)
        local.append(row)
    return local


def run_round(
    trainer: AdaptiveGRPOTrainer,
    hooks: HookState,
    rows: dict[int, dict],
    job_prompt_ids: np.ndarray,
    round_index: int,
    generated: Generated,
) -> tuple[np.ndarray, np.ndarray]:
    """Generate and score one completion per job on every rank; append to ``generated`` in job order. The
    trainer's ``_generate`` hands the round's completions over through ``hooks.capture`` and stops the pass there.

    Returns the total reward of each job's completion (NaN when unscorable) and its generated tokens, in job order.
    """
    num_processes = trainer.accelerator.num_processes
    order = round_order(trainer, job_prompt_ids, round_index)
    local = rank_slice(len(order), num_processes, trainer.accelerator.process_index)
    mine = local_rows(trainer, rows, job_prompt_ids[order[local]])
    hooks.capture = []
    try:
        with contextlib.suppress(RoundCaptured):
            GRPOTrainer._generate_and_score_completions(trainer, mine)
    finally:
        captured, hooks.capture = hooks.capture, None
    if len(captured) != 1:
        raise RuntimeError("GRPOTrainer._generate_and_score_completions did not call _generate once (trl 1.16 does).")
    prompts, output = captured[0]
    prompt_token_ids, completion_ids, tool_mask, completions, logps, extra, images, tool_images = output
    _merge_extra_fields(mine, extra)
    rewards = GRPOTrainer._calculate_rewards(trainer, mine, prompts, completions, completion_ids)
    size = len(mine)
    extras = take_round_extras(trainer, size)  # log_extra values travel with their completions (completion_logs.py)
    tool_mask = tool_mask if tool_mask is not None else [None] * size
    logps = logps if logps is not None else [None] * size
    images = images if images is not None else [None] * size  # None: the replay pass reads the rows' columns
    tool_images = tool_images if tool_images else [[] for _ in range(size)]
    columns = (prompt_token_ids, completion_ids, tool_mask, completions, logps, images, tool_images, extras)
    local_samples = list(zip(*columns, strict=True))
    samples = gather_object(local_samples) if num_processes > 1 else local_samples
    back = np.argsort(order)  # dispatch position of each job
    generated.samples.extend(samples[i] for i in back)
    rewards = rewards.detach().cpu()[torch.as_tensor(back)]
    generated.rewards_per_func.append(rewards)
    tokens = np.array([len(samples[i][1]) for i in back], dtype=np.float64)
    generated.rank_tokens.append(rank_tokens(tokens[order], num_processes))
    return total_rewards(rewards, trainer.reward_weights), tokens


def gathered_lengths(trainer: AdaptiveGRPOTrainer, completion_ids: list) -> np.ndarray:
    """Generated tokens of every rank's completions (this rank's ``completion_ids``), in rank order."""
    lengths = [len(ids) for ids in completion_ids]
    if trainer.accelerator.num_processes > 1:
        lengths = gather_object(lengths)
    return np.asarray(lengths, dtype=np.float64)


def _merge_extra_fields(rows: list[dict], extra_fields: dict) -> None:
    """A ``rollout_func``'s extra fields onto the rows reward functions read, as GRPOTrainer does before scoring."""
    for i, row in enumerate(rows):
        for key, values in extra_fields.items():
            if isinstance(values, list) and i < len(values):
                row[key] = values[i]
            elif not isinstance(values, list):
                row[key] = values


def total_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> np.ndarray:
    """The weighted total reward of each completion, NaN when every reward function returned None (as TRL)."""
    rewards_per_func = rewards_per_func.detach().cpu()
    weights = reward_weights.detach().cpu().to(rewards_per_func.dtype)
    total = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return total.numpy().astype(np.float64)
