"""Sampling in rounds inside one generation batch: Reinforce-Ada Seq and DAPO dynamic sampling.

A plan-ahead allocator decides every count before sampling. Here the trainer samples, scores, and decides what to
sample next, until it has a training batch of exactly ``generation_batch_size`` completions:

- **Seq** (``reinforce_ada_seq_pos`` / ``reinforce_ada_seq_balance``, a :class:`SequentialAllocator`): round 1 gives
  every prompt ``max(round_size, num_generations)`` completions; each later round gives the prompts that have not met
  the exit rule ``round_size`` more, within the per-prompt maximum and the batch's inference cap. Then
  ``num_generations`` completions per prompt are selected (balanced correct / incorrect, seeded), and each prompt's
  baseline (mean, std) comes from ALL its completions.
- **Pilot** (``pilot_rollouts=k`` with ``bayes_knapsack``): round 1 gives every prompt k completions; the posterior
  absorbs them; round 2 spends the rest of the step's budget by the knapsack on the posterior
  (``allocate_remaining``). Every completion of both rounds is trained on: the batch is exactly the step's budget.
- **Dynamic sampling** (``dynamic_sampling=True``, any plan-ahead allocator): round 1 is the allocator's plan; groups
  whose completions are all successes or all failures are dropped, further prompts are drawn from the training data
  (seeded by seed and step, so a resume draws the same ones; the epoch's sampler is not touched), allocated with the
  same allocator for the missing completions, generated, and kept if mixed, for at most
  ``dynamic_sampling_max_rounds`` extra rounds. If the batch is still short, it is filled with completions of dropped
  groups (zero advantage: they add no gradient, as in plain GRPO), the fill is logged and a warning is given once.

Every round is one generation call on every rank in lockstep (one ``/v1/completions`` request in vLLM server mode).
Its jobs are spread evenly over the ranks; a round whose job count is not a multiple of the number of processes gets
the few extra completions it needs (real samples, never duplicated rows). Every completion generated is evidence:
the statistics are updated once per step with all of them.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from trl import GRPOTrainer

from ..allocation.bayes_knapsack import absorb
from ..allocation.sequential import SequentialAllocator, dynamic_sampling_keep, is_success
from .dispatch import expand_counts, rank_slice

if TYPE_CHECKING:
    from .trainer import AdaptiveGRPOTrainer


@dataclass
class Generated:
    """Everything generated in the rounds of one batch, in global dispatch order (identical on every rank)."""

    group_ids: list[np.ndarray] = field(default_factory=list)  # per round: prompt index of each completion
    rewards_per_func: list[torch.Tensor] = field(default_factory=list)  # per round: (J, K) gathered rewards
    samples: list[tuple] = field(default_factory=list)  # per completion: what _generate returned for its row

    @property
    def all_group_ids(self) -> np.ndarray:
        return np.concatenate(self.group_ids) if self.group_ids else np.zeros(0, dtype=np.int64)

    @property
    def all_rewards_per_func(self) -> torch.Tensor:
        return torch.cat(self.rewards_per_func)


@dataclass
class TrainingPlan:
    """What the rounds hand to the training pass."""

    prompt_rows: list[dict[str, Any]]
    prompt_ids: np.ndarray
    counts: np.ndarray  # completions trained per prompt
    group_ids: np.ndarray  # (T,) prompt index of each trained completion, dispatch order
    selected: np.ndarray  # (T,) index into the generated completions, dispatch order
    generated: Generated
    baseline_from_all: bool  # Seq: group statistics from every completion drawn, not only the trained ones
    metrics: dict[str, float]

    def replay(self, local: slice) -> tuple:
        """The ``_generate`` return value for this rank's trained rows, from completions already generated."""
        samples = [self.generated.samples[i] for i in self.selected[local]]
        prompt_ids, completion_ids, tool_mask, completions, logps = (
            list(column) for column in zip(*samples, strict=True)
        )
        tool_mask = None if all(m is None for m in tool_mask) else tool_mask
        logps = None if all(x is None for x in logps) else logps
        return prompt_ids, completion_ids, tool_mask, completions, logps, {}, None, []

    def rewards_per_func(self) -> torch.Tensor:
        return self.generated.all_rewards_per_func[torch.as_tensor(self.selected)]


def run_rounds(
    trainer: AdaptiveGRPOTrainer, prompt_rows: list[dict[str, Any]], prompt_ids: np.ndarray
) -> TrainingPlan:
    if isinstance(trainer.allocator, SequentialAllocator):
        return _sequential(trainer, prompt_rows, prompt_ids)
    if trainer.args.pilot_rollouts > 0:
        return _pilot(trainer, prompt_rows, prompt_ids)
    return _dynamic_sampling(trainer, prompt_rows, prompt_ids)


# ---------------------------------------------------------------------------------------------------------------------
def _pilot(trainer: AdaptiveGRPOTrainer, prompt_rows: list[dict], prompt_ids: np.ndarray) -> TrainingPlan:
    """Pilot-Commit's two rounds with the knapsack on the posterior as the commit: k per prompt, then the rest of
    the step's budget by ``allocate_remaining`` on the posterior that has absorbed the pilot. Everything is trained."""
    total, num_prompts = trainer.args.generation_batch_size, len(prompt_rows)
    generated = Generated()
    pilot = np.full(num_prompts, trainer.args.pilot_rollouts, dtype=np.int64)
    success, scored, group_ids = _run_round(trainer, prompt_rows, prompt_ids, pilot, generated)
    already = np.bincount(group_ids, minlength=num_prompts)  # k each, plus any completions rounding to ranks added
    payload: list[Any] = [None]
    if trainer.accelerator.is_main_process:
        successes = np.bincount(group_ids, weights=success, minlength=num_prompts)
        attempts = np.bincount(group_ids, weights=scored, minlength=num_prompts)
        stats = absorb(trainer.prompt_statistics.batch(prompt_ids), successes, attempts)
        payload = [trainer.allocator.allocate_remaining(stats, total - int(already.sum()), already)]
    if trainer.accelerator.num_processes > 1:
        broadcast_object_list(payload, from_process=0)
    extra = payload[0]
    if extra.sum() > 0:
        _run_round(trainer, prompt_rows, prompt_ids, extra, generated)
    all_groups = generated.all_group_ids
    counts = np.bincount(all_groups, minlength=num_prompts).astype(np.int64)
    metrics = {"rounds/per_step": float(len(generated.group_ids)), "pilot/completions": float(already.sum())}
    selected = np.arange(len(all_groups), dtype=np.int64)
    return TrainingPlan(prompt_rows, prompt_ids, counts, all_groups, selected, generated, False, metrics)


# ---------------------------------------------------------------------------------------------------------------------
def _sequential(trainer: AdaptiveGRPOTrainer, prompt_rows: list[dict], prompt_ids: np.ndarray) -> TrainingPlan:
    allocator: SequentialAllocator = trainer.allocator
    n, total = trainer.num_generations, trainer.args.generation_batch_size
    num_prompts = len(prompt_rows)
    successes, attempts = np.zeros(num_prompts), np.zeros(num_prompts)
    generated = Generated()
    while True:
        counts = allocator.round_counts(successes, attempts, n, len(generated.samples), total)
        if counts.sum() == 0:
            break
        success, scored, group_ids = _run_round(trainer, prompt_rows, prompt_ids, counts, generated)
        attempts += np.bincount(group_ids, weights=scored, minlength=num_prompts)
        successes += np.bincount(group_ids, weights=success, minlength=num_prompts)
    all_success = is_success(
        total_rewards(generated.all_rewards_per_func, trainer.reward_weights), trainer.args.success_threshold
    )
    rng = np.random.default_rng([int(trainer.args.seed) & 0xFFFFFFFF, int(trainer.state.global_step), 1])
    selected = allocator.select(all_success, generated.all_group_ids, num_prompts, n, rng)
    if len(selected) != total:
        raise AssertionError(f"{allocator!r} selected {len(selected)} completions, expected {total}.")
    done = allocator.is_done(successes, attempts, n)
    metrics = {
        "rounds/per_step": float(len(generated.group_ids)),
        "rounds/prompts_finished": float(done.sum()),
        "rounds/prompts_unfinished": float((~done).sum()),
        "rounds/inference_cap": float(allocator.inference_cap * total),  # completions a batch may generate
    }
    order = np.argsort(generated.all_group_ids[selected], kind="stable")  # prompt-major, like TRL's layout
    selected = selected[order]
    counts = np.full(num_prompts, n, dtype=np.int64)
    return TrainingPlan(
        prompt_rows, prompt_ids, counts, generated.all_group_ids[selected], selected, generated, True, metrics
    )


# ---------------------------------------------------------------------------------------------------------------------
def _dynamic_sampling(trainer: AdaptiveGRPOTrainer, prompt_rows: list[dict], prompt_ids: np.ndarray) -> TrainingPlan:
    total, threshold = trainer.args.generation_batch_size, trainer.args.success_threshold
    prompt_rows, prompt_ids = list(prompt_rows), prompt_ids.copy()
    generated = Generated()
    counts = trainer._allocate(prompt_ids, total)[0]
    kept: list[int] = []  # prompt indices whose group is mixed
    dropped: list[int] = []
    drawn, extra_round = 0, 0
    while True:
        _run_round(trainer, prompt_rows, prompt_ids, _pad_counts(counts, len(prompt_ids)), generated)
        round_groups = generated.group_ids[-1]
        success = is_success(total_rewards(generated.rewards_per_func[-1], trainer.reward_weights), threshold)
        mixed = dynamic_sampling_keep(success, round_groups, len(prompt_ids))
        new = np.unique(round_groups)
        kept += [int(g) for g in new if mixed[g]]
        dropped += [int(g) for g in new if not mixed[g]]
        # Rounding a round up to the ranks can give a kept group a completion or two more than was missing.
        trained = min(total, int(np.isin(generated.all_group_ids, kept).sum()))
        missing = total - trained
        if missing == 0 or extra_round >= trainer.args.dynamic_sampling_max_rounds:
            break
        extra_round += 1
        rows, ids = _draw_prompts(trainer, prompt_ids, missing, extra_round)
        if not rows:
            break
        prompt_rows += rows
        prompt_ids = np.concatenate([prompt_ids, ids])
        drawn += len(rows)
        counts = trainer._allocate(ids, missing)[0]
    all_groups = generated.all_group_ids
    selected = np.flatnonzero(np.isin(all_groups, kept))[:total].tolist()
    filled = total - len(selected)
    if filled:
        pool = np.flatnonzero(np.isin(all_groups, dropped)).tolist()
        selected += pool[:filled]
        if len(selected) < total:
            raise RuntimeError(f"Dynamic sampling generated {len(all_groups)} completions, fewer than {total}.")
        if not trainer._warned_dynamic_fill:
            warnings.warn(
                f"Dynamic sampling: after {trainer.args.dynamic_sampling_max_rounds} extra round(s) the batch still "
                f"lacked {filled} of {total} completions with signal; they were filled with completions of dropped "
                "(all-correct or all-wrong) groups, which carry zero advantage. Logged as dynamic_sampling/filled; "
                "raise dynamic_sampling_max_rounds if this happens often. (Warned once.)",
                stacklevel=4,
            )
            trainer._warned_dynamic_fill = True
    selected = np.asarray(selected, dtype=np.int64)
    trained_counts = np.bincount(all_groups[selected], minlength=len(prompt_ids)).astype(np.int64)
    # Spread the trained groups over the ranks as a plan-ahead allocation would be (seeded by step).
    slots = expand_counts(trained_counts, trainer.args.seed, trainer.state.global_step)
    queues = {g: list(selected[all_groups[selected] == g]) for g in np.unique(all_groups[selected])}
    dispatched = np.array([queues[g].pop(0) for g in slots], dtype=np.int64)
    metrics = {
        "rounds/per_step": float(len(generated.group_ids)),
        "dynamic_sampling/groups_dropped": float(len(dropped)),
        "dynamic_sampling/prompts_drawn": float(drawn),
        "dynamic_sampling/filled": float(filled),
    }
    return TrainingPlan(prompt_rows, prompt_ids, trained_counts, slots, dispatched, generated, False, metrics)


def _pad_counts(counts: np.ndarray, num_prompts: int) -> np.ndarray:
    """Counts of the newest prompts, as a vector over all prompts so far (0 for earlier ones)."""
    padded = np.zeros(num_prompts, dtype=np.int64)
    padded[num_prompts - len(counts) :] = counts
    return padded


def _draw_prompts(
    trainer: AdaptiveGRPOTrainer, in_batch: np.ndarray, missing: int, extra_round: int
) -> tuple[list[dict], np.ndarray]:
    """Further prompts for dynamic sampling, enough to hold ``missing`` completions within the allocator's bounds."""
    allocator = trainer.allocator
    low = max(allocator.min_rollouts, 1)
    number = min(max(1, missing // trainer.num_generations), missing // low)
    number = max(number, -(-missing // allocator.max_rollouts))  # enough prompts to hold `missing` within N_up
    if number * low > missing:
        return [], np.zeros(0, dtype=np.int64)
    ids = draw_prompt_ids(trainer, in_batch, number, salt=(2, extra_round))
    if len(ids) < number:
        return [], np.zeros(0, dtype=np.int64)
    return rows_for_ids(trainer, ids), ids


def draw_prompt_ids(
    trainer: AdaptiveGRPOTrainer, exclude: np.ndarray, number: int, salt: tuple[int, ...]
) -> np.ndarray:
    """Up to ``number`` prompt ids of the training data not in ``exclude``, drawn with a generator seeded by (seed,
    step, salt): a resumed run draws the same ones, and the epoch's sampler is not touched."""
    all_ids = trainer._all_prompt_ids()
    candidates = all_ids[~np.isin(all_ids, exclude)]
    seed = [int(trainer.args.seed) & 0xFFFFFFFF, int(trainer.state.global_step), *salt]
    picked = np.random.default_rng(seed).choice(len(candidates), size=min(number, len(candidates)), replace=False)
    return candidates[np.sort(picked)]


def rows_for_ids(trainer: AdaptiveGRPOTrainer, ids: np.ndarray) -> list[dict]:
    """The training-data rows of these prompt ids (every column, as the sampler would give them)."""
    row_of = trainer._row_of_prompt_id()
    return [dict(trainer.train_dataset[row_of[int(i)]]) for i in ids]


# ---------------------------------------------------------------------------------------------------------------------
def _run_round(
    trainer: AdaptiveGRPOTrainer,
    prompt_rows: list[dict],
    prompt_ids: np.ndarray,
    counts: np.ndarray,
    generated: Generated,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One generation call on every rank for ``counts`` completions per prompt; appends to ``generated``.

    Returns this round's per-completion success and scored flags and group ids (global dispatch order).
    """
    num_processes = trainer.accelerator.num_processes
    counts = _round_up_to_ranks(counts, num_processes, trainer.allocator.max_rollouts)
    step_seed = int(trainer.state.global_step) * 1000 + len(generated.group_ids)
    group_ids = expand_counts(counts, trainer.args.seed, step_seed)
    local = rank_slice(len(group_ids), num_processes, trainer.accelerator.process_index)
    rates = trainer.prompt_statistics.success_rates(prompt_ids)
    rows = []
    for g in group_ids[local]:
        row = copy.copy(prompt_rows[g])
        row[trainer.args.success_rate_column] = float(rates[g])
        rows.append(row)
    prompts = [row["prompt"] for row in rows]
    prompt_token_ids, completion_ids, tool_mask, completions, logps, _, _, _ = trainer._generate(prompts)
    rewards = GRPOTrainer._calculate_rewards(trainer, rows, prompts, completions, completion_ids)
    tool_mask = tool_mask if tool_mask is not None else [None] * len(rows)
    logps = logps if logps is not None else [None] * len(rows)
    local_samples = list(zip(prompt_token_ids, completion_ids, tool_mask, completions, logps, strict=True))
    samples = gather_object(local_samples) if num_processes > 1 else local_samples
    generated.group_ids.append(group_ids)
    generated.rewards_per_func.append(rewards.detach().cpu())
    generated.samples.extend(samples)
    total = total_rewards(rewards, trainer.reward_weights)
    return is_success(total, trainer.args.success_threshold), ~np.isnan(total), group_ids


def _round_up_to_ranks(counts: np.ndarray, num_processes: int, max_rollouts: int) -> np.ndarray:
    """Add the fewest completions (to the active prompts with the fewest) so every rank gets as many jobs."""
    counts = counts.copy()
    short = -int(counts.sum()) % num_processes
    active = np.flatnonzero(counts > 0)
    for i in range(short):
        counts[active[i % len(active)]] += 1
    return counts


def total_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> np.ndarray:
    """The weighted total reward of each completion, NaN when every reward function returned None (as TRL)."""
    rewards_per_func = rewards_per_func.detach().cpu()
    weights = reward_weights.detach().cpu().to(rewards_per_func.dtype)
    total = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return total.numpy().astype(np.float64)
