"""Tests of the prompt-population simulator (the package trl_adaptive/sim/; its docstring examples run in
tests/test_doctests.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from trl_adaptive.allocation.base import Allocator, PromptBatchStats, largest_remainder
from trl_adaptive.sampling import CeroPacing, PlanAhead, ReinforceAdaSeqBalance, ReinforceAdaSeqPos
from trl_adaptive.sim import (
    RULE_KINDS,
    DifficultyMix,
    DynamicSampling,
    LearningRule,
    Pilot,
    PilotCommit,
    compare,
    group_metrics,
    seq_advantage_weights,
    simulate,
    simulated_procedure,
    value_share,
)
from trl_adaptive.strategies import as_procedure, get_allocator, registered_allocators, registered_strategies

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


@pytest.mark.parametrize("name", registered_strategies())
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

    def _allocate(self, stats: PromptBatchStats, budget: int) -> np.ndarray:
        counts = np.zeros(len(stats), dtype=np.int64)
        counts[::2] = largest_remainder(np.full(len(counts[::2]), budget / len(counts[::2])), budget)
        return counts


def test_simulated_procedure_resolves_every_spec_to_a_private_procedure():
    assert type(simulated_procedure("reinforce_ada_seq_pos")) is ReinforceAdaSeqPos
    assert type(simulated_procedure("reinforce_ada_seq_balance")) is ReinforceAdaSeqBalance
    for name in registered_allocators():  # an allocator's name runs its strategy's procedure, as in the trainer
        procedure = simulated_procedure(name)
        assert type(procedure) is (CeroPacing if name == "cero" else PlanAhead) and procedure.allocator.name == name
        assert type(simulated_procedure(get_allocator(name))) is type(procedure)
    skipper = _HalfSkipping()
    planned = simulated_procedure(skipper)
    assert type(planned) is PlanAhead and planned.allocator is not skipper  # a copy: the caller's state is untouched
    wrapped = DynamicSampling(as_procedure("uniform"))
    assert simulated_procedure(wrapped) is not wrapped and type(simulated_procedure(wrapped)) is DynamicSampling
    with pytest.raises(TypeError, match="Procedure"):
        simulated_procedure(3)


def test_simulate_runs_any_procedure():
    # CERO with pacing (the trainer's default) may draw prompts beyond the batch; it still trains exactly B.
    result = simulate(as_procedure("cero"), seed=0, **SMALL)
    assert isinstance(as_procedure("cero"), CeroPacing)
    np.testing.assert_array_equal(result.budget_used, SMALL["batch_prompts"] * SMALL["num_generations"])
    np.testing.assert_array_equal(result.rounds, 1)


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
def test_the_simulated_strategies_are_registered():
    # The tests below name these strategies; a broken registration must fail here, not skip or pass vacuously.
    assert {"uniform", "knapsack", "bayes_knapsack", "cero", "reinforce_ada_est"} <= set(registered_allocators())
    assert {"reinforce_ada_seq_pos", "reinforce_ada_seq_balance", "pilot_commit"} <= set(registered_strategies())


def test_knapsack_beats_uniform_after_first_epoch():
    # Epoch 1 has no statistics (both allocators are uniform there), so compare epochs >= 2, paired by seed.
    # Measured: the per-seed ratio knapsack / uniform lies in [1.10, 1.38] over seeds 0-19 (mean 1.25), so the mean
    # over seeds 0-4 clears 1.12 with room; an allocator no better than uniform gives ~1.0 and fails.
    sizes = {"num_prompts": 512, "batch_prompts": 64, "num_generations": 8, "epochs": 3}
    key = "effective_gradient_ratio_after_first"
    uniform = np.mean([simulate("uniform", seed=seed, **sizes).summary[key] for seed in range(5)])
    knapsack = np.mean([simulate("knapsack", seed=seed, **sizes).summary[key] for seed in range(5)])
    assert knapsack > 1.12 * uniform, (knapsack, uniform)


# ---- strategies that generate more than they train: Reinforce-Ada Seq and DAPO dynamic sampling ---------------------
SEQ = ("reinforce_ada_seq_pos", "reinforce_ada_seq_balance")


@pytest.mark.parametrize("name", SEQ)
def test_seq_trains_the_budget_and_generates_within_the_cap(name):
    result = simulate(name, seed=2, **SMALL)
    budget = SMALL["batch_prompts"] * SMALL["num_generations"]
    cap = as_procedure(name).inference_cap
    np.testing.assert_array_equal(result.budget_used, budget)
    assert np.all(result.generated >= budget) and np.all(result.generated <= cap * budget)
    assert np.all(result.max_count <= 32) and np.all(result.rounds >= 2)
    # Per generated = completions trained in mixed groups / completions generated.
    np.testing.assert_allclose(
        result.effective_gradient_ratio_per_generated, result.effective_gradient_ratio * budget / result.generated
    )
    total = result.effective_gradient_ratio + result.zero_grad_all_correct + result.zero_grad_all_wrong
    np.testing.assert_allclose(total, 1.0)
    assert result.summary["generated_over_trained"] == pytest.approx(result.generated.sum() / (budget * len(total)))
    # A balanced selection is mixed exactly when the prompt's pool is: n completions per prompt, mixed or not.
    np.testing.assert_allclose(result.effective_prompt_ratio, result.effective_gradient_ratio)


def test_seq_with_one_round_is_uniform():
    # inference_cap = 1 with round_size = n: one round of n, all selected, the same draws as uniform.
    seq = as_procedure("reinforce_ada_seq_balance", inference_cap=1.0)
    a, b = simulate("uniform", seed=5, **SMALL), simulate(seq, seed=5, **SMALL)
    np.testing.assert_array_equal(b.generated, a.budget_used)
    np.testing.assert_array_equal(a.effective_gradient_ratio, b.effective_gradient_ratio)
    np.testing.assert_allclose(a.p_final, b.p_final)


def test_seq_beats_uniform_per_trained_completion_and_pays_in_generation():
    key = "effective_gradient_ratio"
    uniform = simulate("uniform", seed=0, **SMALL).summary
    for name in SEQ:
        seq = simulate(name, seed=0, **SMALL).summary
        assert seq[key] > 1.1 * uniform[key], (name, seq[key], uniform[key])
        assert seq["generated_over_trained"] > 1.2
        assert seq["effective_gradient_ratio_per_generated"] < seq[key]


def test_dynamic_sampling_without_extra_rounds_is_the_plain_allocator():
    for name in ("uniform", "knapsack"):
        plain, wrapped = (
            simulate(name, seed=3, **SMALL),
            simulate(DynamicSampling(as_procedure(name), max_rounds=0), seed=3, **SMALL),
        )
        for key in ("effective_gradient_ratio", "zero_grad_all_wrong", "p_final", "converted_from_zero"):
            np.testing.assert_array_equal(getattr(plain, key), getattr(wrapped, key))
        np.testing.assert_array_equal(wrapped.generated, wrapped.budget_used)


@pytest.mark.parametrize("name", ["uniform", "knapsack"])
def test_dynamic_sampling_trains_the_budget_and_keeps_mixed_groups(name):
    budget = SMALL["batch_prompts"] * SMALL["num_generations"]
    plain = simulate(name, seed=4, **SMALL)
    result = simulate(DynamicSampling(as_procedure(name), max_rounds=3), seed=4, **SMALL)
    np.testing.assert_array_equal(result.budget_used, budget)
    assert np.all(result.generated >= budget) and np.all(result.rounds <= 4)
    # Everything trained is a kept (mixed) group or fill: the fill is exactly the zero-gradient share.
    np.testing.assert_allclose(
        result.zero_grad_all_correct + result.zero_grad_all_wrong, result.filled / budget, atol=1e-12
    )
    assert result.summary["effective_gradient_ratio"] > 1.5 * plain.summary["effective_gradient_ratio"]
    assert result.summary["generated_over_trained"] > 1.2
    again = simulate(DynamicSampling(as_procedure(name), max_rounds=3), seed=4, **SMALL)
    np.testing.assert_array_equal(result.p_final, again.p_final)


def test_dynamic_sampling_refuses_a_round_based_allocator():
    with pytest.raises(ValueError, match="plan-ahead"):
        DynamicSampling(as_procedure("reinforce_ada_seq_pos"))  # refused at construction, before any simulation
    with pytest.raises(ValueError, match="max_rounds"):
        DynamicSampling(as_procedure("uniform"), max_rounds=-1)


def test_compare_reports_both_ratios_against_uniform():
    rows = compare(
        {"seq": "reinforce_ada_seq_pos", "ds": DynamicSampling(as_procedure("uniform"))}, seeds=[0, 1], **SMALL
    )
    by = {r["allocator"]: r for r in rows}
    assert by["uniform"]["effective_gradient_ratio_per_generated_vs_baseline"] == pytest.approx(1.0)
    assert by["uniform"]["generated_over_trained"] == pytest.approx(1.0)
    for label in ("seq", "ds"):
        row = by[label]
        assert row["generated_over_trained"] > 1.0
        assert row["effective_gradient_ratio_per_generated"] < row["effective_gradient_ratio"]


def test_seq_advantage_weights_reduce_to_one_without_downsampling():
    counts, k, p = np.array([8, 8, 8, 8]), np.array([1, 4, 7, 0]), np.array([0.1, 0.5, 0.9, 0.2])
    np.testing.assert_allclose(seq_advantage_weights(counts, k, counts, k, p), 1.0)
    # A balanced subset of a hard pool: the pool baseline gives a larger push than the subset's own mean would.
    w = seq_advantage_weights(np.array([4]), np.array([2]), np.array([32]), np.array([1]), np.array([1 / 32]))
    assert w[0] > 2.0


# ---- fresh estimates: the value share at the true p, mixed prompts per 1,000, pilots --------------------------------
def test_value_share_is_one_for_the_best_allocation_and_below_otherwise():
    from trl_adaptive.allocation.solvers import solve_greedy
    from trl_adaptive.allocation.value import marginal_gains

    p = np.array([0.001, 0.2, 0.5, 0.97, 0.9999])
    best = solve_greedy(None, 40, 2, 128, gains=marginal_gains(p, 128))
    assert value_share(best, p) == pytest.approx(1.0)
    assert value_share(np.full(5, 8), p) < 1.0
    # Hand check: two prompts, 16 completions; the best puts 14 on p = 0.5 and 2 on the solved one.
    v = lambda n, q: (1 - q**n - (1 - q) ** n) * q * (1 - q) ** 2  # noqa: E731
    expected = (v(8, 0.5) + v(8, 0.999)) / (v(14, 0.5) + v(2, 0.999))
    assert value_share(np.array([8, 8]), np.array([0.5, 0.999])) == pytest.approx(expected)
    assert value_share(np.array([8, 8]), np.array([0.0, 1.0])) == 1.0  # nothing to gain anywhere


def test_every_run_reports_the_value_share_and_mixed_prompts_per_1000():
    result = simulate("uniform", seed=0, **SMALL)
    assert np.all((result.value_share > 0) & (result.value_share <= 1 + 1e-12))
    summary = result.summary
    budget = SMALL["batch_prompts"] * SMALL["num_generations"]
    # Uniform groups: mixed prompts per 1,000 generated = effective prompt ratio x M / B x 1000.
    expected = 1000 * result.effective_prompt_ratio.mean() * SMALL["batch_prompts"] / budget
    assert summary["mixed_per_1000_generated"] == pytest.approx(expected)
    assert summary["value_share"] == pytest.approx(result.value_share.mean())
    rows = compare({"bayes": "bayes_knapsack"}, seeds=[0], **SMALL)
    assert rows[0]["value_share_vs_baseline"] == pytest.approx(1.0)
    assert {"value_share", "value_share_after_first", "mixed_per_1000_generated_vs_baseline"} <= set(rows[1])


@pytest.mark.parametrize("k", [1, 2, 4])
def test_pilot_spends_the_budget_in_two_rounds(k):
    result = simulate(Pilot(get_allocator("bayes_knapsack"), k), seed=0, **SMALL)
    budget = SMALL["batch_prompts"] * SMALL["num_generations"]
    np.testing.assert_array_equal(result.budget_used, budget)
    np.testing.assert_array_equal(result.generated, budget)  # pilot completions are trained on
    np.testing.assert_array_equal(result.rounds, 2)
    np.testing.assert_array_equal(result.skipped_prompts, 0)
    again = simulate(Pilot(get_allocator("bayes_knapsack"), k), seed=0, **SMALL)
    np.testing.assert_array_equal(result.p_final, again.p_final)
    # With a pilot even the first epoch is adaptive: it differs from the plain allocator there.
    plain = simulate("bayes_knapsack", seed=0, **SMALL)
    assert not np.array_equal(result.effective_gradient_ratio[:4], plain.effective_gradient_ratio[:4])


def test_pilot_rejects_what_cannot_work():
    with pytest.raises(ValueError, match="pilot_rollouts=8 x 64 prompts .*leaves nothing"):
        simulate(Pilot(get_allocator("bayes_knapsack"), 8), seed=0, **SMALL)  # the procedure's check, before any step
    with pytest.raises(ValueError, match="pilot_rollouts=0"):
        Pilot(get_allocator("bayes_knapsack"), 0)
    with pytest.raises(ValueError, match="allocate_remaining"):
        Pilot(get_allocator("uniform"), 2)  # refused at construction


def test_pilot_commit_evicts_solved_prompts_and_spends_the_budget():
    easy = DifficultyMix(weight_hard=0.1, weight_easy=0.6, weight_spread=0.3)
    sizes = {**SMALL, "epochs": 3}
    result = simulate(PilotCommit(pilot_rollouts=4), seed=0, mix=easy, **sizes)
    budget = SMALL["batch_prompts"] * SMALL["num_generations"]
    np.testing.assert_array_equal(result.budget_used, budget)
    np.testing.assert_array_equal(result.rounds, 2)
    steps = SMALL["num_prompts"] // SMALL["batch_prompts"]
    assert np.all(result.skipped_prompts[:steps] == 0)  # nobody is evicted before its first pilot
    assert result.skipped_prompts[steps:].min() > 0  # solved prompts get nothing from epoch 2 on
    kept = simulate(PilotCommit(pilot_rollouts=4, evict_at=None), seed=0, mix=easy, **sizes)
    np.testing.assert_array_equal(kept.skipped_prompts, 0)
    with pytest.raises(ValueError, match="pilot_rollouts=8 leaves nothing"):
        simulate(PilotCommit(pilot_rollouts=8), seed=0, **SMALL)
    with pytest.raises(ValueError, match="lower"):
        PilotCommit(lower=0.9, upper=0.5)


def test_bayes_knapsack_beats_uniform_and_knapsack_on_the_value_share():
    # The claim of the fresh-estimates work, on a small population (3 seeds, paired): scored by the paper's own
    # objective at the TRUE p, the posterior's knapsack beats uniform, which beats the plug-in knapsack; and it
    # still puts more completions into mixed groups than uniform. Measured (seeds 0-4): value share 0.919-0.931 vs
    # uniform 0.894-0.914 vs knapsack 0.881-0.898; effective-gradient ratio 1.05-1.11x uniform.
    sizes = {"num_prompts": 512, "batch_prompts": 64, "num_generations": 8, "epochs": 3}
    runs = {
        n: [simulate(n, seed=s, **sizes).summary for s in range(3)] for n in ("uniform", "knapsack", "bayes_knapsack")
    }
    share = {n: np.mean([r["value_share"] for r in rs]) for n, rs in runs.items()}
    ratio = {n: np.mean([r["effective_gradient_ratio"] for r in rs]) for n, rs in runs.items()}
    assert share["bayes_knapsack"] > share["uniform"] + 0.01 > share["knapsack"] + 0.01, share
    assert ratio["bayes_knapsack"] > 1.03 * ratio["uniform"], ratio
