"""A batch's groups of different sizes: their advantages, and their completions laid out over the ranks.

**Advantages.** TRL 1.16 computes group statistics with ``rewards.view(-1, num_generations)`` (in
``GRPOTrainer._generate_and_score_completions``), which silently averages across prompts once groups differ in size.
Here every completion carries the id of its prompt's group (``group_ids``) and the statistics are segment-wise, with
the same arithmetic as TRL (NaN-aware mean, Bessel corrected ``nanstd``, ``+ 1e-4`` in the divisor), so equal-size
groups give TRL's numbers (:func:`group_advantages`).

**Dispatch.** One job per completion, laid out over the ranks with the tokens balanced; :class:`BatchDispatch` holds
what one batch is laid out by. The layout, for U = 3 prompts with counts [4, 2, 2] over 2 ranks and expected lengths
of [90, 30, 30] tokens:

    counts     [4, 2, 2]                          (sum = T = 8 = generation_batch_size)
    jobs       [0 0 0 0 1 1 2 2]                  prompt-major, one job per completion
    lengths    [90 90 90 90 30 30 30 30]          tokens of each job: the prompt's expected length
    balance    rank 0: jobs [0 2 4 6]  rank 1: jobs [1 3 5 7]     L = T / num_processes jobs each, 240 | 240 tokens
    order      [0 2 4 6 1 3 5 7]                  rank 0's jobs, then rank 1's, each in job order
    dispatch   [0 0 1 2 0 0 1 2]                  jobs[order]; a shuffle can put all four 90s on one rank: 360 | 120

Gathering per-rank results in rank order gives back the dispatch order, so ``group_ids = jobs[order]`` lines up with
TRL's gathered rewards (``rank * L + i``). Equal group sizes keep TRL's prompt-major layout (uniform is GRPOTrainer,
bit for bit); one rank keeps a shuffle seeded by (seed, step), and by the round's number in a batch generated in
rounds (nothing to balance; ``state.py``'s random streams); unequal groups over several ranks are balanced, before
generation by the expected lengths of the prompts and, for the completions kept from rounds, by their actual lengths.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from trl.trainer.utils import nanstd

from ..allocation.token_budget import filled_lengths
from .state import DISPATCH, ROUND_DISPATCH, step_seed

if TYPE_CHECKING:
    from ..sampling import BatchRecord


# -------------------------------------------------------------------------------------------------------------------
# Advantages over groups of different sizes
# -------------------------------------------------------------------------------------------------------------------
@dataclass
class GroupAdvantages:
    """Output of :func:`group_advantages`, for all T completions of the generation batch (all ranks).

    Attributes:
        advantages: ``(T,)`` advantage of each completion (0 for unscorable completions).
        rewards: ``(T,)`` weighted total reward of each completion, NaN when unscorable (what TRL logs as ``reward``).
        group_std: ``(U,)`` std of each group's total reward (NaN for groups with fewer than two scored completions).
        group_mean: ``(U,)`` mean of each group's total reward.
        zero_std_fraction: TRL's ``frac_reward_zero_std`` over the real groups: the share of completions whose
            normalising std is ``isclose`` to 0 (the group's std in "group"/"none" mode, the batch std otherwise).
    """

    advantages: torch.Tensor
    rewards: torch.Tensor
    group_std: torch.Tensor
    group_mean: torch.Tensor
    zero_std_fraction: float


def weighted_total(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """Each completion's weighted total reward, ``(T, K) -> (T,)``, NaN when every reward function returned None for
    it (unscorable; TRL's ``nansum`` would make it 0)."""
    weights = reward_weights.to(device=rewards_per_func.device, dtype=rewards_per_func.dtype).unsqueeze(0)
    total = (rewards_per_func * weights).nansum(dim=1)
    total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return total


def segment_mean_std(values: torch.Tensor, group_ids: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, ...]:
    """NaN-aware per-group mean and Bessel-corrected std of ``values`` (shape ``(T,)`` or ``(T, K)``).

    Mirrors ``torch.nanmean`` and ``trl.trainer.utils.nanstd`` along the group axis: a group with no valid value has
    mean NaN, one with fewer than two has std NaN. Equal groups laid out prompt-major (TRL's own layout, e.g. the
    uniform allocator) are reduced with TRL's very operations on ``view(U, G)``: scatter-adds sum in another order on
    a GPU, and uniform must reproduce GRPOTrainer bit for bit there too.
    """
    size = values.shape[0] // num_groups if num_groups else 0
    if size and size * num_groups == values.shape[0]:
        layout = torch.arange(num_groups, device=group_ids.device).repeat_interleave(size)
        if torch.equal(group_ids, layout):
            grouped = values.view(num_groups, size, *values.shape[1:])
            return torch.nanmean(grouped, dim=1), nanstd(grouped, dim=1)
    valid = ~torch.isnan(values)
    filled = torch.where(valid, values, torch.zeros_like(values))
    shape = (num_groups, *values.shape[1:])
    count = torch.zeros(shape, dtype=values.dtype, device=values.device).index_add_(
        0, group_ids, valid.to(values.dtype)
    )
    total = torch.zeros(shape, dtype=values.dtype, device=values.device).index_add_(0, group_ids, filled)
    mean = total / count  # 0/0 -> NaN for empty groups, as torch.nanmean
    deviation = torch.where(valid, (values - mean[group_ids]) ** 2, torch.zeros_like(values))
    squared = torch.zeros(shape, dtype=values.dtype, device=values.device).index_add_(0, group_ids, deviation)
    # Same operation order as trl's nanstd: mean of squares, then the count / (count - 1) correction.
    variance = (squared / count) * torch.where(count > 1, count / (count - 1), torch.full_like(count, float("nan")))
    return mean, torch.sqrt(variance)


def group_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    scale_rewards: str = "group",
    multi_objective_aggregation: str = "sum_then_normalize",
    reference: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> GroupAdvantages:
    """GRPO advantages with variable group sizes, for every ``scale_rewards`` x ``multi_objective_aggregation`` mode.

    Args:
        rewards_per_func: ``(T, K)`` rewards of each completion under each of the K reward functions (NaN where a
            function returned None), gathered over all ranks.
        reward_weights: ``(K,)`` weights of the reward functions.
        group_ids: ``(T,)`` long, index in ``[0, num_groups)`` of each completion's prompt.
        num_groups: U, the number of prompts (groups).
        scale_rewards: ``"group"`` (divide by the group std), ``"batch"`` (by the batch std) or ``"none"``.
        multi_objective_aggregation: ``"sum_then_normalize"`` or ``"normalize_then_sum"`` (per-group, per-function
            z-score, weighted sum, then a batch z-score), as in TRL.
        reference: optional ``(rewards_per_func, group_ids)`` of a larger sample of the same groups (Reinforce-Ada
            Seq: every completion drawn); each group's mean and std then come from it instead of the trained rows.
    """
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    total_rewards = weighted_total(rewards_per_func, reward_weights)
    ref_per_func, ref_groups = reference if reference is not None else (rewards_per_func, group_ids)
    ref_total = weighted_total(ref_per_func, reward_weights)
    group_mean, group_std = segment_mean_std(ref_total, ref_groups, num_groups)

    if multi_objective_aggregation == "sum_then_normalize":
        advantages = total_rewards - group_mean[group_ids]
        std = group_std[group_ids]  # what TRL tests for zero in "group" and "none" mode
        if scale_rewards == "group":
            advantages = advantages / (std + 1e-4)
        elif scale_rewards == "batch":
            batch_std = nanstd(total_rewards) if total_rewards.numel() > 1 else torch.zeros(())
            advantages = advantages / (batch_std + 1e-4)
            std = batch_std.expand_as(total_rewards)
        elif scale_rewards != "none":
            raise ValueError(f"scale_rewards={scale_rewards!r}: must be one of 'group', 'batch' or 'none'.")
    elif multi_objective_aggregation == "normalize_then_sum":
        mean_k, std_k = segment_mean_std(ref_per_func, ref_groups, num_groups)
        reward_k = (rewards_per_func - mean_k[group_ids]) / (std_k[group_ids] + 1e-4)
        normalized = (reward_k * weights).nansum(dim=1)
        normalized[unscorable] = torch.nan
        batch_std = nanstd(normalized) if normalized.numel() > 1 else torch.zeros(())
        advantages = (normalized - torch.nanmean(normalized)) / (batch_std + 1e-4)
        std = batch_std.expand_as(normalized)
    else:
        raise ValueError(
            f"multi_objective_aggregation={multi_objective_aggregation!r}: must be 'sum_then_normalize' or "
            "'normalize_then_sum'."
        )
    zero_std = torch.isclose(std, torch.zeros_like(std)).float().mean().item()  # TRL's test, NaN std is not zero
    return GroupAdvantages(torch.nan_to_num(advantages, nan=0.0), total_rewards, group_std, group_mean, zero_std)


#: A swap must narrow the gap between two ranks by more than this share of it (float noise is not a gain).
_SWAP_TOLERANCE = 1e-9


# -------------------------------------------------------------------------------------------------------------------
# Dispatch: the jobs laid out over the ranks
# -------------------------------------------------------------------------------------------------------------------
def dispatch_order(
    jobs: np.ndarray,
    seed: int,
    step: int,
    lengths: np.ndarray | None = None,
    num_ranks: int = 1,
    round_index: int | None = None,
) -> np.ndarray:
    """The permutation that lays prompt-major ``jobs`` (a group key per completion: a group index or a prompt id,
    any int64 value, such as a hashed string id) out over ``num_ranks`` ranks.

    The identity when every group present has the same size (TRL's layout); with one rank, a permutation seeded by
    (seed, step) (:func:`shuffled_order`; ``round_index``: of that round of a batch generated in rounds); otherwise
    :func:`balanced_order` of the jobs' ``lengths`` in tokens (NaN or None: unknown, taken as equal). ``jobs[order]``
    is the dispatch order; the completion generated at dispatch position i is job ``order[i]``.
    """
    jobs = np.asarray(jobs, dtype=np.int64)
    sizes = np.unique(jobs, return_counts=True)[1]  # not bincount: ids may be negative or 63-bit hashes
    if len(np.unique(sizes)) <= 1:
        return np.arange(len(jobs), dtype=np.int64)
    if num_ranks == 1:
        return shuffled_order(len(jobs), seed, step, round_index)
    return balanced_order(known_lengths(lengths, len(jobs)), num_ranks)


def shuffled_order(size: int, seed: int, step: int, round_index: int | None = None) -> np.ndarray:
    """A permutation of ``size`` jobs seeded by (seed, step): every rank and a resumed run draw the same one. Drawn
    from the DISPATCH stream, or with ``round_index`` from ROUND_DISPATCH and the round's number
    (``state.py``)."""
    if round_index is None:
        rng_seed = step_seed(seed, step, DISPATCH)
    else:
        rng_seed = step_seed(seed, step, ROUND_DISPATCH, int(round_index))
    return np.random.default_rng(rng_seed).permutation(size).astype(np.int64)


def known_lengths(lengths: np.ndarray | Sequence[float] | None, size: int) -> np.ndarray:
    """``lengths`` as float64 with unknown (NaN) entries set to the mean of the known ones (all 1 when none is)."""
    if lengths is None:
        return np.ones(size, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape != (size,):
        raise ValueError(f"dispatch lengths: expected one length per job, shape ({size},), got {lengths.shape}.")
    if np.isinf(lengths).any() or (lengths[~np.isnan(lengths)] < 0).any():
        raise ValueError(f"dispatch lengths must be finite and >= 0 tokens (NaN for unknown); got {lengths[:8]}...")
    filled = filled_lengths(lengths)
    return np.ones(size, dtype=np.float64) if filled is None else filled


def balanced_order(lengths: np.ndarray, num_ranks: int) -> np.ndarray:
    """The dispatch order that gives each of ``num_ranks`` ranks exactly ``len(lengths) / num_ranks`` jobs and
    balances the tokens per rank: rank 0's jobs, then rank 1's, each rank's in job order. Deterministic.

    Longest job first onto the rank with the fewest tokens among those not yet full (ties: fewest jobs, then lowest
    rank, so jobs of equal length are dealt round-robin and a group is spread over the ranks), then pairwise swaps
    between the heaviest and the lightest rank while one narrows their gap. When no swap is left, the heaviest rank
    holds at most (longest job - shortest job) tokens more than the lightest, so at most that above the mean.
    """
    lengths = np.asarray(lengths, dtype=np.float64)
    per_rank = len(lengths) // num_ranks
    if per_rank * num_ranks != len(lengths):
        raise ValueError(
            f"{len(lengths)} completions cannot be split evenly over {num_ranks} processes; make "
            "generation_batch_size a multiple of the number of processes."
        )
    rank_of = _longest_first(lengths, num_ranks, per_rank)
    _swap_until_balanced(lengths, rank_of, num_ranks)
    return np.argsort(rank_of, kind="stable").astype(np.int64)


def _longest_first(lengths: np.ndarray, num_ranks: int, per_rank: int) -> np.ndarray:
    """Rank of each job under longest-processing-time-first with each rank capped at ``per_rank`` jobs."""
    rank_of = np.empty(len(lengths), dtype=np.int64)
    heap = [(0.0, 0, rank) for rank in range(num_ranks)]  # (tokens, jobs held, rank), already a heap
    values = lengths.tolist()
    for job in np.argsort(-lengths, kind="stable").tolist():
        tokens, held, rank = heapq.heappop(heap)
        rank_of[job] = rank
        if held + 1 < per_rank:  # a full rank leaves the heap
            heapq.heappush(heap, (tokens + values[job], held + 1, rank))
    return rank_of


def _swap_until_balanced(lengths: np.ndarray, rank_of: np.ndarray, num_ranks: int) -> None:
    """Exchange jobs between the heaviest and lightest rank (in place) while an exchange narrows their gap.

    Each exchange lowers the sum of squared rank loads, so the loop ends; ``len(lengths)`` exchanges bound it (a
    handful are made in practice, longest-first leaves little to fix).
    """
    loads = np.bincount(rank_of, weights=lengths, minlength=num_ranks)
    for _ in range(len(lengths)):
        heavy, light = int(np.argmax(loads)), int(np.argmin(loads))
        pair = _best_swap(lengths, np.flatnonzero(rank_of == heavy), np.flatnonzero(rank_of == light))
        if pair is None:
            return
        give, take = pair
        rank_of[give], rank_of[take] = light, heavy
        moved = lengths[give] - lengths[take]
        loads[heavy] -= moved
        loads[light] += moved


def _best_swap(lengths: np.ndarray, heavy_jobs: np.ndarray, light_jobs: np.ndarray) -> tuple[int, int] | None:
    """The jobs (one of the heavy rank's, one of the light rank's) whose exchange narrows the ranks' gap the most:
    length difference d closest to gap / 2 with 0 < d < gap. None when no exchange narrows it."""
    gap = lengths[heavy_jobs].sum() - lengths[light_jobs].sum()
    if gap <= 0:
        return None
    light_jobs = light_jobs[np.argsort(lengths[light_jobs], kind="stable")]
    light = lengths[light_jobs]
    ideal = lengths[heavy_jobs] - gap / 2  # the light job each heavy job would best be exchanged for
    above = np.clip(np.searchsorted(light, ideal), 0, len(light) - 1)
    candidates = np.stack([np.clip(above - 1, 0, None), above], axis=1)  # nearest below and above, per heavy job
    moved = lengths[heavy_jobs][:, None] - light[candidates]
    narrows = (moved > gap * _SWAP_TOLERANCE) & (moved < gap * (1 - _SWAP_TOLERANCE))
    distance = np.where(narrows, np.abs(moved - gap / 2), np.inf)
    best = int(np.argmin(distance))
    if not np.isfinite(distance.flat[best]):
        return None
    row, column = divmod(best, 2)
    return int(heavy_jobs[row]), int(light_jobs[candidates[row, column]])


def rank_tokens(tokens: np.ndarray | Sequence[float], num_ranks: int) -> np.ndarray:
    """Tokens each rank holds, from the tokens of each job in dispatch order (rank r holds ``[r*L, (r+1)*L)``)."""
    return np.asarray(tokens, dtype=np.float64).reshape(num_ranks, -1).sum(axis=1)


def max_over_mean(per_round_rank_tokens: Sequence[np.ndarray]) -> float:
    """How much longer than the average rank the busiest rank works: sum over rounds of the most tokens a rank held
    over the sum of the mean (each round waits for its slowest rank). 1.0 is perfect balance; NaN when unknown."""
    loads = np.asarray(per_round_rank_tokens, dtype=np.float64).reshape(len(per_round_rank_tokens), -1)
    mean = loads.mean(axis=1).sum()
    return float(loads.max(axis=1).sum() / mean) if mean > 0 else float("nan")


# -------------------------------------------------------------------------------------------------------------------
# One batch's dispatch: what each layout is balanced by, and how balanced the batch's tokens were
# -------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchDispatch:
    """How the jobs of one generation batch are laid out over ``num_ranks`` ranks: shuffles seeded by (``seed``,
    ``step``), balanced by ``expected_tokens`` (the store's estimate per prompt id, NaN when unknown) before
    generation and by the completions' actual tokens for the completions kept from rounds."""

    seed: int
    step: int
    num_ranks: int
    expected_tokens: Callable[[np.ndarray], np.ndarray]

    def planned_order(self, job_prompt_ids: np.ndarray) -> np.ndarray:
        """Dispatch order of a planned round (one prompt id per job, prompt-major), by the prompts' expected
        tokens."""
        lengths = self.expected_tokens_of_jobs(job_prompt_ids)
        return dispatch_order(job_prompt_ids, self.seed, self.step, lengths, self.num_ranks)

    def round_order(self, job_prompt_ids: np.ndarray, round_index: int) -> np.ndarray:
        """Dispatch order of round ``round_index`` of a batch generated in rounds, by the prompts' expected tokens."""
        lengths = self.expected_tokens_of_jobs(job_prompt_ids)
        return dispatch_order(job_prompt_ids, self.seed, self.step, lengths, self.num_ranks, round_index)

    def replay_dispatch(self, record: BatchRecord, selected: np.ndarray) -> np.ndarray:
        """The ``selected`` completions (record indices) in the dispatch order of the completions kept from rounds:
        prompt-major as TRL lays groups out, then balanced by their actual tokens."""
        groups, tokens = record.group_ids, record.completion_tokens
        selected = selected[np.argsort(groups[selected], kind="stable")]
        return selected[dispatch_order(groups[selected], self.seed, self.step, tokens[selected], self.num_ranks)]

    def expected_tokens_of_jobs(self, prompt_ids: np.ndarray) -> np.ndarray:
        """The expected completion tokens of each of ``prompt_ids`` (repeats looked up once; NaN: unknown)."""
        unique, inverse = np.unique(np.asarray(prompt_ids, dtype=np.int64), return_inverse=True)
        return self.expected_tokens(unique)[inverse]


def rank_balance_metrics(
    training_tokens: np.ndarray, num_ranks: int, generation: Sequence[np.ndarray] | None = None
) -> dict[str, float]:
    """``tokens/rank_max_over_mean_training`` (``training_tokens``: per trained completion, in dispatch order) and
    ``tokens/rank_max_over_mean_generation`` (``generation``: per round, the tokens each rank generated; None when
    the training pass generated them). A figure is left out when one of its lengths is unknown (NaN)."""
    metrics = {}
    training = [rank_tokens(training_tokens, num_ranks)]
    generation = training if generation is None else generation
    if len(generation) and np.isfinite(np.concatenate(generation)).all():
        metrics["tokens/rank_max_over_mean_generation"] = max_over_mean(generation)
    if np.isfinite(training_tokens).all():
        metrics["tokens/rank_max_over_mean_training"] = max_over_mean(training)
    return metrics


def rank_slice(total: int, num_processes: int, process_index: int) -> slice:
    """The contiguous block of ``total / num_processes`` jobs that rank ``process_index`` holds."""
    if total % num_processes != 0:
        raise ValueError(
            f"{total} completions cannot be split evenly over {num_processes} processes; make generation_batch_size "
            "a multiple of the number of processes."
        )
    per_rank = total // num_processes
    return slice(process_index * per_rank, (process_index + 1) * per_rank)
