"""Group-relative advantages for groups of different sizes.

TRL 1.16 computes group statistics with ``rewards.view(-1, num_generations)`` (in
``GRPOTrainer._generate_and_score_completions``), which silently averages across prompts once groups differ in size.
Here every completion carries the id of its prompt's group (``group_ids``) and the statistics are segment-wise, with
the same arithmetic as TRL (NaN-aware mean, Bessel corrected ``nanstd``, ``+ 1e-4`` in the divisor), so equal-size
groups give TRL's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from trl.trainer.utils import nanstd


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
    total_rewards = (rewards_per_func * weights).nansum(dim=1)
    total_rewards[unscorable] = torch.nan
    ref_per_func, ref_groups = reference if reference is not None else (rewards_per_func, group_ids)
    ref_total = (ref_per_func * weights).nansum(dim=1)
    ref_total[torch.isnan(ref_per_func).all(dim=1)] = torch.nan
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
