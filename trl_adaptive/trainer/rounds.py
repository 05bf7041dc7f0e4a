"""The batch driver's side of a sampling procedure: its context, the prompts' rows, and one round across ranks.

The procedure (``trl_adaptive.sampling``) runs on the main process only; each round it asks for is broadcast (a
:class:`RoundMessage`, and an :class:`OutcomeMessage` once it finished), every rank generates its share in lockstep
through the generation port (``trl_port.TrlPort.generate_round``; one ``/v1/completions`` request in vLLM server
mode), and the gathered rewards go back to it. A round's jobs (one per completion, prompt-major) are laid out over the
ranks, tokens balanced, when group sizes differ (``dispatch.BatchDispatch.round_order``) and put back in the
procedure's order afterwards, so the batch's record, the completions kept for the training pass and the rewards all
line up. The training pass then replays the chosen completions (:meth:`Generated.replay_pass`), laid out by their
actual tokens (``dispatch.BatchDispatch.replay_dispatch``). Nothing here reads a trainer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..sampling import BatchContext, BatchRun, Outcome, Round
from ..stats import PromptStatistics, stable_prompt_ids
from .completion_logs import replay_extras
from .dispatch import rank_tokens
from .hook_state import Replay
from .prompt_source import procedure_draw
from .random_streams import PROCEDURE, step_seed

if TYPE_CHECKING:
    from .adaptive_state import AdaptiveState
    from .environment_data import ResetRows
    from .port import BatchSettings, GenerationPort


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


def batch_context(settings: BatchSettings, state: AdaptiveState, prompt_ids: np.ndarray) -> BatchContext:
    """The procedure's view of this step: the store, prompts drawn through the prompt source by (seed, step, call),
    a seeded generator."""
    seed, step = settings.seed, settings.step
    return BatchContext(
        prompt_ids=prompt_ids,
        budget=settings.generation_batch_size,
        group_size=settings.num_generations,
        success_threshold=settings.success_threshold,
        statistics=state.prompt_statistics.batch,
        draw_prompts=procedure_draw(state.prompt_source, state.training_prompts, seed, step),
        rng=np.random.default_rng(step_seed(seed, step, PROCEDURE)),
    )


def batch_prompt_rows(rows: list[dict[str, Any]], settings: BatchSettings) -> tuple[np.ndarray, list[dict]]:
    """The store ids and one row per prompt of the global generation batch (``rows``: every rank's sampler rows, in
    sampler order; TRL repeats each prompt G times in a row)."""
    if len(rows) != settings.generation_batch_size:
        raise RuntimeError(f"Expected {settings.generation_batch_size} rows in the generation batch, got {len(rows)}.")
    column, group_size = settings.prompt_id_column, settings.num_generations
    ids = np.array([row[column] for row in rows]).reshape(-1, group_size)
    if not (ids == ids[:, :1]).all():
        raise RuntimeError(
            "TRL's sampler no longer repeats each prompt num_generations times in a row; trl_adaptive is pinned "
            "to trl 1.16's RepeatSampler layout."
        )
    rows = rows[::group_size]
    batch_ids = stable_prompt_ids([row[column] for row in rows], column)
    if len(np.unique(batch_ids)) != len(batch_ids):
        raise ValueError(
            f"A generation batch holds the same prompt id twice (column {column!r}): a streaming dataset yielded one "
            "prompt twice within a batch. Deduplicate the stream, or give its rows distinct ids in that column."
        )
    return batch_ids, rows


def add_rows(training_prompts: Any, rows: dict[int, dict], prompt_ids: np.ndarray) -> None:
    """Rows of prompts the procedure drew beyond the batch (from the training data)."""
    missing = [i for i in prompt_ids.tolist() if i not in rows]
    if missing:
        new = training_prompts.rows(np.asarray(missing, dtype=np.int64))
        rows.update(zip(missing, new, strict=True))


def local_rows(
    rows: dict[int, dict],
    prompt_ids: np.ndarray,
    store: PromptStatistics,
    success_rate_column: str,
    reset_rows: ResetRows | None,
) -> list[dict]:
    """Copies of the rows of ``prompt_ids`` (TRL mutates them), with the live success rate for reward functions; when
    environments make the prompts, the rows as GRPOTrainer gives them (reset() and the reward functions get the
    user's columns only, or the placeholder's prompt)."""
    if reset_rows is not None:
        return [reset_rows.as_trl_sees(rows[prompt_id]) for prompt_id in prompt_ids.tolist()]
    local = []
    for prompt_id, rate in zip(prompt_ids.tolist(), store.success_rates(prompt_ids).tolist(), strict=True):
        row = copy.copy(rows[prompt_id])
        row[success_rate_column] = float(rate)
        local.append(row)
    return local


def run_round(
    port: GenerationPort, order: np.ndarray, rows: list[dict], reward_weights: torch.Tensor, generated: Generated
) -> tuple[np.ndarray, np.ndarray]:
    """Generate and score one completion per job through ``port``: ``order`` is the round's dispatch order (this
    rank's block of it is ``rows``); append every rank's samples and rewards to ``generated`` in job order.

    Returns the total reward of each job's completion (NaN when unscorable) and its generated tokens, in job order.
    """
    local_samples, rewards = port.generate_round(rows)
    samples = port.gather(local_samples)
    back = np.argsort(order)  # dispatch position of each job
    generated.samples.extend(samples[i] for i in back)
    rewards = rewards[torch.as_tensor(back)]
    generated.rewards_per_func.append(rewards)
    tokens = np.array([len(samples[i][1]) for i in back], dtype=np.float64)
    generated.rank_tokens.append(rank_tokens(tokens[order], port.num_processes))
    return total_rewards(rewards, reward_weights), tokens


def total_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> np.ndarray:
    """The weighted total reward of each completion, NaN when every reward function returned None (as TRL)."""
    rewards_per_func = rewards_per_func.detach().cpu()
    weights = reward_weights.detach().cpu().to(rewards_per_func.dtype)
    total = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return total.numpy().astype(np.float64)
