"""Pure-torch tests of the variable-group advantages (``trl_adaptive/trainer/groups.py``; no model, no trainer)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.trainer.utils import nanstd

from trl_adaptive.trainer.groups import dispatch_order, group_advantages, segment_mean_std

SCALES = ("group", "batch", "none")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
MODES = list(itertools.product(SCALES, AGGREGATIONS))


# -------------------------------------------------------------------------------------------------------------------
# References
# -------------------------------------------------------------------------------------------------------------------
def trl_advantages(rewards_per_func, reward_weights, num_generations, scale_rewards, multi_objective_aggregation):
    """TRL 1.16.0's advantage arithmetic, copied verbatim from ``GRPOTrainer._generate_and_score_completions``.

    Only the surroundings are adapted: ``self.`` attributes became arguments, ``device`` is the rewards' device and
    ``len(self.reward_funcs)`` is the number of columns. The statements themselves are TRL's, in TRL's order.
    """
    device = rewards_per_func.device
    num_reward_funcs = rewards_per_func.shape[1]
    # ---- begin verbatim (GRPOTrainer._generate_and_score_completions) ----
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)

    if multi_objective_aggregation == "sum_then_normalize":
        # Apply weights to each reward function's output and sum
        rewards = (rewards_per_func * reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        rewards[unscorable_mask] = torch.nan
        mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
        mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
        if scale_rewards in ["group", "none"]:
            # If self.scale_rewards = "none", we'll only use std_rewards to check for zero std for logging
            if num_generations > 1:
                std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
                std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
            else:  # doesn't occur during training, but could occur in eval when num_generations_eval=1
                std_rewards = torch.zeros_like(rewards)
        elif scale_rewards == "batch":
            # Compute global std
            if rewards.numel() > 1:
                std_rewards = nanstd(rewards).expand_as(rewards)
            else:  # doesn't occur during training, but could occur in eval when num_generations_eval=batch_size=1
                std_rewards = torch.zeros_like(rewards)
        else:
            raise ValueError(
                f"Invalid value for scale_rewards: {scale_rewards}. Must be one of 'batch', 'group', or 'none'."
            )

        advantages = rewards - mean_grouped_rewards
        if scale_rewards != "none":
            advantages = advantages / (std_rewards + 1e-4)

    elif multi_objective_aggregation == "normalize_then_sum":
        grouped = rewards_per_func.view(-1, num_generations, num_reward_funcs)
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
        reward_k = (grouped - mean_k) / (std_k + 1e-4)
        reward_k = reward_k.view(-1, num_reward_funcs)
        rewards = (reward_k * reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        rewards[unscorable_mask] = torch.nan
        std_rewards = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)

    else:
        raise ValueError(
            f"Invalid multi_objective_aggregation: {multi_objective_aggregation}. Must be "
            "'sum_then_normalize' or 'normalize_then_sum'."
        )

    advantages = torch.nan_to_num(advantages, nan=0.0)
    # ---- end verbatim ----
    return advantages


def loop_advantages(rewards_per_func, reward_weights, group_ids, scale_rewards, multi_objective_aggregation):
    """Independent reference for variable group sizes: one Python iteration per group, TRL's formulas inside."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    out = torch.full((len(group_ids),), float("nan"), dtype=rewards_per_func.dtype)
    if multi_objective_aggregation == "sum_then_normalize":
        total = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)
        total[unscorable] = torch.nan
        batch_std = nanstd(total) if total.numel() > 1 else torch.zeros(())
        for g in torch.unique(group_ids).tolist():
            rows = group_ids == g
            values = total[rows]
            centred = values - torch.nanmean(values)
            if scale_rewards == "group":
                centred = centred / (nanstd(values) + 1e-4)  # nanstd of one value is NaN -> advantage 0
            elif scale_rewards == "batch":
                centred = centred / (batch_std + 1e-4)
            out[rows] = centred
    else:
        normalized = torch.full((len(group_ids),), float("nan"), dtype=rewards_per_func.dtype)
        for g in torch.unique(group_ids).tolist():
            rows = group_ids == g
            block = rewards_per_func[rows]
            mean_k = torch.nanmean(block, dim=0, keepdim=True)
            std_k = nanstd(block, dim=0, keepdim=True)
            normalized[rows] = (((block - mean_k) / (std_k + 1e-4)) * reward_weights.unsqueeze(0)).nansum(dim=1)
        normalized[unscorable] = torch.nan
        out = (normalized - torch.nanmean(normalized)) / (nanstd(normalized) + 1e-4)
    return torch.nan_to_num(out, nan=0.0)


def _equal_groups(num_groups: int, size: int) -> torch.Tensor:
    return torch.arange(num_groups).repeat_interleave(size)


def _rewards(num_rows: int, num_funcs: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    binary = torch.randint(0, 2, (num_rows, 1), generator=generator).float()  # a 0/1 accuracy reward
    other = torch.rand(num_rows, num_funcs - 1, generator=generator)  # float rewards
    return torch.cat([binary, other], dim=1)


# -------------------------------------------------------------------------------------------------------------------
# Equal-size groups: exactly TRL
# -------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale_rewards,aggregation", MODES)
@pytest.mark.parametrize("num_funcs", [1, 2])
def test_equal_groups_match_trl(scale_rewards, aggregation, num_funcs):
    num_groups, size = 6, 4
    rewards = _rewards(num_groups * size, num_funcs, seed=num_funcs)
    weights = torch.tensor([1.0, 0.5][:num_funcs])
    result = group_advantages(
        rewards, weights, _equal_groups(num_groups, size), num_groups, scale_rewards, aggregation
    )
    expected = trl_advantages(rewards, weights, size, scale_rewards, aggregation)
    torch.testing.assert_close(result.advantages, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("scale_rewards,aggregation", MODES)
def test_equal_groups_with_nan_rewards_match_trl(scale_rewards, aggregation):
    """One function returns None for some rows; for other rows every function does (unscorable -> advantage 0)."""
    num_groups, size = 5, 4
    rewards = _rewards(num_groups * size, 2, seed=7)
    rewards[[1, 6, 13], 1] = float("nan")  # second function None for some completions
    rewards[[2, 9], :] = float("nan")  # every function None: unscorable
    rewards[16:20, :] = float("nan")  # a whole group unscorable
    weights = torch.tensor([1.0, 2.0])
    groups = _equal_groups(num_groups, size)
    result = group_advantages(rewards, weights, groups, num_groups, scale_rewards, aggregation)
    expected = trl_advantages(rewards, weights, size, scale_rewards, aggregation)
    torch.testing.assert_close(result.advantages, expected, rtol=0, atol=1e-6)
    assert torch.isfinite(result.advantages).all()
    assert (result.advantages[[2, 9]] == 0).all()
    assert (result.advantages[16:20] == 0).all()
    assert torch.isnan(result.rewards[[2, 9, 16, 17, 18, 19]]).all()
    assert not torch.isnan(result.rewards[[1, 6, 13]]).any()  # partially scored rows keep a reward
    assert torch.isnan(result.group_mean[4])


def test_equal_groups_in_permuted_order_match_trl():
    """Segment statistics do not care where a group's rows are: shuffling rows permutes the advantages."""
    num_groups, size = 4, 6
    rewards = _rewards(num_groups * size, 2, seed=3)
    weights = torch.tensor([1.0, 1.0])
    expected = trl_advantages(rewards, weights, size, "group", "sum_then_normalize")
    perm = torch.randperm(len(rewards), generator=torch.Generator().manual_seed(0))
    result = group_advantages(rewards[perm], weights, _equal_groups(num_groups, size)[perm], num_groups)
    torch.testing.assert_close(result.advantages, expected[perm], rtol=0, atol=1e-6)


# -------------------------------------------------------------------------------------------------------------------
# Variable-size groups
# -------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale_rewards,aggregation", MODES)
def test_variable_groups_match_per_group_loop(scale_rewards, aggregation):
    counts = [10, 2, 3, 1, 6]  # one group of one
    groups = torch.arange(len(counts)).repeat_interleave(torch.tensor(counts))
    groups = groups[torch.randperm(len(groups), generator=torch.Generator().manual_seed(1))]
    rewards = _rewards(len(groups), 2, seed=11)
    rewards[3, 1] = float("nan")
    rewards[5, :] = float("nan")
    weights = torch.tensor([1.0, 0.3])
    result = group_advantages(rewards, weights, groups, len(counts), scale_rewards, aggregation)
    expected = loop_advantages(rewards, weights, groups, scale_rewards, aggregation)
    torch.testing.assert_close(result.advantages, expected, rtol=1e-5, atol=1e-5)
    if aggregation == "sum_then_normalize":
        assert (result.advantages[groups == 3] == 0).all()  # the group of one has no baseline
        assert torch.isnan(result.group_std[3])


def test_variable_groups_are_not_averaged_across_prompts():
    """The bug this module exists for: view(-1, G) would mix a 6-group and a 2-group into two groups of 4."""
    rewards = torch.tensor([[1.0], [1.0], [1.0], [1.0], [1.0], [1.0], [0.0], [1.0]])
    groups = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1])
    result = group_advantages(rewards, torch.ones(1), groups, 2)
    assert (result.advantages[:6] == 0).all()  # all-correct group: no signal
    assert result.advantages[6] < 0 < result.advantages[7]
    wrong = trl_advantages(rewards, torch.ones(1), 4, "group", "sum_then_normalize")
    assert (wrong[4:6] != 0).all()  # TRL's fixed grouping leaks prompt 1's failure into prompt 0's completions


@pytest.mark.parametrize("scale_rewards,aggregation", MODES)
def test_groups_of_size_one_get_zero_advantage(scale_rewards, aggregation):
    rewards = torch.tensor([[0.2, 1.0], [0.9, 0.0], [0.5, 0.5]])
    result = group_advantages(rewards, torch.ones(2), torch.tensor([0, 1, 2]), 3, scale_rewards, aggregation)
    assert torch.equal(result.advantages, torch.zeros(3))
    assert torch.isnan(result.group_std).all()


def test_empty_group_has_nan_statistics():
    """A prompt allocated zero completions (CERO may skip one) gets NaN statistics and touches nothing else."""
    rewards = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    result = group_advantages(rewards, torch.ones(1), torch.tensor([0, 0, 2, 2]), 3)
    assert torch.isnan(result.group_mean[1]) and torch.isnan(result.group_std[1])
    assert result.advantages[2] == result.advantages[3] == 0
    assert result.advantages[0] > 0 > result.advantages[1]


def test_segment_mean_std_matches_torch():
    values = torch.tensor([[1.0, 2.0], [3.0, float("nan")], [5.0, 4.0], [7.0, 1.0]])
    groups = torch.tensor([0, 0, 1, 1])
    mean, std = segment_mean_std(values, groups, 2)
    for g in range(2):
        block = values[groups == g]
        torch.testing.assert_close(mean[g], torch.nanmean(block, dim=0), equal_nan=True)
        torch.testing.assert_close(std[g], nanstd(block, dim=0), equal_nan=True)


def test_invalid_modes_raise():
    rewards, groups = torch.ones(4, 1), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(rewards, torch.ones(1), groups, 2, scale_rewards="global")
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        group_advantages(rewards, torch.ones(1), groups, 2, multi_objective_aggregation="max")


@st.composite
def _variable_batches(draw):
    counts = draw(st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=6))
    num_funcs = draw(st.integers(min_value=1, max_value=3))
    total = sum(counts)
    # Rewards on a coarse grid (ties and zero-std groups are common) with some None (NaN) entries.
    cell = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(-2, 2), st.just(float("nan")))
    flat = draw(st.lists(cell, min_size=total * num_funcs, max_size=total * num_funcs))
    weights = draw(st.lists(st.floats(0.0, 2.0), min_size=num_funcs, max_size=num_funcs))
    seed = draw(st.integers(0, 2**16))
    # float64: random rewards can make a group's std tiny but non-zero, and dividing by (std + 1e-4) would turn float32
    # summation-order differences (index_add_ vs nanmean) into spurious mismatches. The float32 path is pinned by the
    # deterministic tests above.
    return (
        counts,
        torch.tensor(flat, dtype=torch.float64).view(total, num_funcs),
        torch.tensor(weights, dtype=torch.float64),
        seed,
    )


@settings(max_examples=60, deadline=None)
@given(_variable_batches(), st.sampled_from(MODES))
def test_hypothesis_variable_groups_match_loop(batch, mode):
    counts, rewards, weights, seed = batch
    scale_rewards, aggregation = mode
    jobs = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    groups = torch.as_tensor(jobs[dispatch_order(jobs, seed, 0)])  # shuffled as a batch's completions are
    result = group_advantages(rewards, weights, groups, len(counts), scale_rewards, aggregation)
    expected = loop_advantages(rewards, weights, groups, scale_rewards, aggregation)
    assert torch.isfinite(result.advantages).all()
    # Near-zero stds divide by ~1e-4, so compare relative to the largest advantage.
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(result.advantages, expected, rtol=1e-4, atol=1e-5 * scale)
    unscorable = torch.isnan(rewards).all(dim=1)
    assert (result.advantages[unscorable] == 0).all()
    if aggregation == "sum_then_normalize":
        singletons = torch.tensor([counts[g] == 1 for g in groups.tolist()], dtype=torch.bool)
        assert (result.advantages[singletons] == 0).all()


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(2, 6),
    st.sampled_from(MODES),
    st.integers(0, 2**16),
)
def test_hypothesis_equal_groups_match_trl(num_groups, size, mode, seed):
    scale_rewards, aggregation = mode
    rewards = _rewards(num_groups * size, 2, seed=seed).double()  # float64: see _variable_batches
    weights = torch.tensor([1.0, 0.7])
    result = group_advantages(
        rewards, weights, _equal_groups(num_groups, size), num_groups, scale_rewards, aggregation
    )
    expected = trl_advantages(rewards, weights, size, scale_rewards, aggregation)
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(result.advantages, expected, rtol=0, atol=1e-6 * scale)
