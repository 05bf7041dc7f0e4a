"""Tests of the prompt-population simulator (trl_adaptive/sim.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from trl_adaptive.allocation import registered_allocators
from trl_adaptive.allocation.base import Allocator, PromptBatchStats, largest_remainder
from trl_adaptive.sim import RULE_KINDS, DifficultyMix, LearningRule, compare, group_metrics, simulate

SMALL = {"num_prompts": 256, "batch_prompts": 64, "num_generations": 8, "epochs": 2}


# ---- metrics --------------------------------------------------------------------------------------------------------
def test_group_metrics_on_hand_built_step():
    # One mixed group of 4, one all-correct group of 2, one all-wrong group of 2, one skipped prompt.
    counts = np.array([4, 2, 2, 0])
    successes = np.array([1, 2, 0, 0])
    metrics = group_metrics(counts, successes)
    assert metrics["effective_gradient_ratio"] == pytest.approx(4 / 8)
    assert metrics["zero_grad_all_correct"] == pytest.approx(2 / 8)
    assert metrics["zero_grad_all_wrong"] == pytest.approx(2 / 8)
    assert metrics["effective_prompt_ratio"] == pytest.approx(1 / 4)  # the skipped prompt counts as not effective


def test_group_metrics_all_correct_batch():
    metrics = group_metrics(np.array([8, 8]), np.array([8, 8]))
    assert metrics == {
        "effective_gradient_ratio": 0.0,
        "zero_grad_all_correct": 1.0,
        "zero_grad_all_wrong": 0.0,
        "effective_prompt_ratio": 0.0,
    }


def test_group_metrics_rejects_impossible_counts():
    with pytest.raises(ValueError, match="k_i <= N_i"):
        group_metrics(np.array([2, 2]), np.array([3, 0]))


# ---- learning rule --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", RULE_KINDS)
def test_learning_rule_ignores_all_equal_groups(kind):
    rule = LearningRule(kind=kind, lr=1.0, transfer=0.5)
    counts = np.array([8, 8, 2, 30, 0])
    successes = np.array([8, 0, 2, 0, 0])  # all correct, all wrong, all correct, all wrong, skipped
    assert np.all(rule.signal(counts, successes, 8, weights=np.full(5, 3.0)) == 0.0)
    logits = np.linspace(-3.0, 3.0, 10)
    before = logits.copy()
    rule.apply(logits, np.array([0, 3, 5, 7, 9]), counts, successes, 8)
    np.testing.assert_array_equal(logits, before)  # transfer is proportional to local progress, here none


def test_learning_rule_signals_on_mixed_groups():
    counts = np.array([8, 32, 2])
    successes = np.array([4, 1, 1])
    np.testing.assert_allclose(LearningRule("per_completion").signal(counts, successes, 8), [1.0, 4.0, 0.25])
    np.testing.assert_allclose(LearningRule("per_group").signal(counts, successes, 8), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(LearningRule("sqrt").signal(counts, successes, 8), [1.0, 2.0, 0.5])
    # advantage: N sqrt(q (1 - q)) / (n / 2), the tabular GRPO gradient; q = 1/2 with N = n gives 1.
    expected = np.array([8 * 0.5, 32 * np.sqrt(1 / 32 * 31 / 32), 2 * 0.5]) / 4.0
    np.testing.assert_allclose(LearningRule("advantage").signal(counts, successes, 8), expected)
    # Only the advantage rule reads the allocator's per-completion weights.
    weights = np.array([2.0, 1.0, 0.5])
    np.testing.assert_allclose(LearningRule("advantage").signal(counts, successes, 8, weights), expected * weights)
    np.testing.assert_allclose(LearningRule("per_group").signal(counts, successes, 8, weights), [1.0, 1.0, 1.0])


def test_learning_rule_transfer_moves_every_prompt():
    rule = LearningRule("per_group", lr=0.5, transfer=1.0)
    logits = np.zeros(10)
    rule.apply(logits, np.array([0, 1]), np.array([8, 8]), np.array([4, 8]), 8)
    # Prompt 0 (mixed) gets lr; everyone gets transfer * total local step / num_prompts = 0.5 / 10.
    np.testing.assert_allclose(logits, [0.55] + [0.05] * 9)


# ---- whole runs -----------------------------------------------------------------------------------------------------
def test_simulate_is_deterministic_for_a_seed():
    first = simulate("uniform", seed=3, **SMALL)
    second = simulate("uniform", seed=3, **SMALL)
    other = simulate("uniform", seed=4, **SMALL)
    for name in ("effective_gradient_ratio", "zero_grad_all_wrong", "mean_p", "converted_from_zero", "p_final"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    assert not np.array_equal(first.p_final, other.p_final)


def test_simulate_metrics_partition_the_budget():
    result = simulate("uniform", seed=0, learning_rule="advantage", **SMALL)
    steps = SMALL["epochs"] * (SMALL["num_prompts"] // SMALL["batch_prompts"])
    assert result.effective_gradient_ratio.shape == (steps,)
    total = result.effective_gradient_ratio + result.zero_grad_all_correct + result.zero_grad_all_wrong
    np.testing.assert_allclose(total, 1.0)
    # Uniform groups: the share of completions equals the share of prompts.
    np.testing.assert_allclose(result.effective_gradient_ratio, result.effective_prompt_ratio)
    assert result.summary["final_mean_p"] > result.summary["initial_mean_p"]  # only mixed groups, always upwards
    # From epoch 2 on the store knows the prompts; uniform gives 8 whatever their status.
    seen = [v for v in result.mean_count_by_status.values() if not np.isnan(v)]
    assert len(seen) >= 4 and np.allclose(seen, 8.0)


def test_same_seed_gives_every_allocator_the_same_population():
    a = simulate("uniform", seed=7, **SMALL)
    b = simulate(_HalfSkipping(), seed=7, **SMALL)
    np.testing.assert_array_equal(a.p_initial, b.p_initial)


@pytest.mark.parametrize("name", registered_allocators())
def test_every_allocator_spends_exactly_the_budget(name):
    result = simulate(name, seed=1, **SMALL)
    budget = SMALL["batch_prompts"] * SMALL["num_generations"]
    np.testing.assert_array_equal(result.budget_used, budget)
    total = result.effective_gradient_ratio + result.zero_grad_all_correct + result.zero_grad_all_wrong
    np.testing.assert_allclose(total, 1.0)
    again = simulate(name, seed=1, **SMALL)  # stateful allocators are copied, so a rerun starts afresh
    np.testing.assert_array_equal(result.effective_gradient_ratio, again.effective_gradient_ratio)
    np.testing.assert_array_equal(result.p_final, again.p_final)


@dataclass
class _HalfSkipping(Allocator):
    """Test double for allocators that may return 0 (CERO): skips every other prompt."""

    name = ""
    allows_zero = True

    def _allocate(self, success_rates: np.ndarray, budget: int, stats: PromptBatchStats) -> np.ndarray:
        counts = np.zeros(len(success_rates), dtype=np.int64)
        counts[::2] = largest_remainder(np.full(len(counts[::2]), budget / len(counts[::2])), budget)
        return counts


def test_simulate_handles_prompts_given_zero_completions():
    result = simulate(_HalfSkipping(), seed=0, **SMALL)
    np.testing.assert_array_equal(result.skipped_prompts, SMALL["batch_prompts"] // 2)
    np.testing.assert_array_equal(result.budget_used, SMALL["batch_prompts"] * SMALL["num_generations"])
    assert np.all(result.effective_prompt_ratio <= 0.5)


def test_compare_pairs_seeds_against_uniform():
    rows = compare(["uniform"], seeds=[0, 1], **SMALL)
    assert [row["allocator"] for row in rows] == ["uniform"]
    assert rows[0]["effective_gradient_ratio_vs_baseline"] == pytest.approx(1.0)
    rows = compare({"skip half": _HalfSkipping()}, seeds=[0, 1], **SMALL)
    assert [row["allocator"] for row in rows] == ["uniform", "skip half"]


def test_difficulty_mix_rejects_bad_weights():
    with pytest.raises(ValueError, match="sum to 1"):
        DifficultyMix(weight_hard=0.5, weight_easy=0.5, weight_spread=0.5)


# ---- the claim the simulator exists to check ------------------------------------------------------------------------
@pytest.mark.skipif("knapsack" not in registered_allocators(), reason="knapsack allocator not available")
def test_knapsack_beats_uniform_after_first_epoch():
    # Epoch 1 has no statistics (both allocators are uniform there), so compare epochs >= 2, paired by seed.
    # Measured: the per-seed ratio knapsack / uniform lies in [1.10, 1.38] over seeds 0-19 (mean 1.25), so the mean
    # over seeds 0-4 clears 1.12 with room; an allocator no better than uniform gives ~1.0 and fails.
    sizes = {"num_prompts": 512, "batch_prompts": 64, "num_generations": 8, "epochs": 3}
    key = "effective_gradient_ratio_after_first"
    uniform = np.mean([simulate("uniform", seed=seed, **sizes).summary[key] for seed in range(5)])
    knapsack = np.mean([simulate("knapsack", seed=seed, **sizes).summary[key] for seed in range(5)])
    assert knapsack > 1.12 * uniform, (knapsack, uniform)
