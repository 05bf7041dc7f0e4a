"""Tests of the simulator's completion lengths (trl_adaptive/sim/lengths.py) and of the tokens a run reports."""

from __future__ import annotations

import numpy as np
import pytest

from trl_adaptive.sim import LENGTHS, LengthModel, PromptLengths, simulate
from trl_adaptive.sim.results import STEP_METRICS
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import get_allocator

SMALL = {"num_prompts": 256, "batch_prompts": 64, "num_generations": 8, "epochs": 2}


# ---- the length model -----------------------------------------------------------------------------------------------
def test_failed_attempts_are_longer_by_the_ratio_and_the_mean_is_the_mean():
    model = LengthModel(solved_tokens=200.0, failed_ratio=1.5, completion_sigma=0.4)
    rng = np.random.default_rng(0)
    means = np.full(200_000, 200.0)
    solved, _ = model.sample(means, np.ones(len(means), dtype=bool), rng)
    failed, cut = model.sample(means, np.zeros(len(means), dtype=bool), rng)
    assert solved.mean() == pytest.approx(200.0, rel=0.01)  # lognormal around the mean, not the median
    assert failed.mean() == pytest.approx(300.0, rel=0.01)
    assert np.log(solved).std() == pytest.approx(0.4, rel=0.03)
    assert not cut.any() and np.all(solved == np.rint(solved)) and solved.min() >= 1


def test_prompt_means_spread_around_the_median():
    model = LengthModel(solved_tokens=1000.0, prompt_spread=0.6)
    means = model.prompt_means(100_000, np.random.default_rng(1))
    assert np.median(means) == pytest.approx(1000.0, rel=0.02)
    assert np.log(means).std() == pytest.approx(0.6, rel=0.02)
    # "several-fold": the 90th percentile prompt is ~4.7x as long as the 10th
    assert np.percentile(means, 90) / np.percentile(means, 10) == pytest.approx(4.66, rel=0.05)


def test_expected_tokens_mixes_solved_and_failed_lengths():
    model = LengthModel(failed_ratio=2.0)
    np.testing.assert_allclose(
        model.expected_tokens(np.array([10.0, 10.0, 10.0]), np.array([1.0, 0.5, 0.0])), [10, 15, 20]
    )


def test_truncation_cuts_at_the_limit_and_the_cut_completions_fail():
    model = LengthModel(solved_tokens=80.0, completion_sigma=0.5, max_completion_length=96)
    lengths = PromptLengths.draw(model, 4, np.random.default_rng(2))
    ids = np.repeat(np.arange(4), 5000)
    solved = np.ones(len(ids))
    rewards, tokens, cut = lengths.complete(ids, solved)
    assert tokens.max() == 96 and cut.any() and not cut.all()
    np.testing.assert_array_equal(rewards, np.where(cut, 0.0, 1.0))
    assert np.all(tokens[cut] == 96)
    # A failed attempt is longer, so more of them reach the limit.
    _, _, cut_failed = lengths.complete(ids, np.zeros(len(ids)))
    assert cut_failed.mean() > cut.mean()


def test_no_truncation_leaves_every_reward_as_scored():
    lengths = PromptLengths.draw(LENGTHS["default"], 10, np.random.default_rng(3))
    scored = np.random.default_rng(4).integers(0, 2, 1000).astype(np.float64)
    rewards, tokens, cut = lengths.complete(np.random.default_rng(5).integers(0, 10, 1000), scored)
    np.testing.assert_array_equal(rewards, scored)
    assert not cut.any() and tokens.min() >= 1


def test_the_default_is_smollm2s_shape_without_a_cut():
    model = LengthModel()
    assert (model.solved_tokens, model.prompt_spread, model.max_completion_length) == (54.0, 0.08, None)
    assert model.failed_ratio == pytest.approx(71 / 54)
    assert LENGTHS["small_spread"].max_completion_length == 96
    assert LENGTHS["several_fold"].prompt_spread == 0.6


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"solved_tokens": 0.5}, "solved_tokens"),
        ({"solved_tokens": float("nan")}, "solved_tokens"),
        ({"prompt_spread": -0.1}, "prompt_spread"),
        ({"completion_sigma": 5.0}, "completion_sigma"),
        ({"failed_ratio": 0.0}, "failed_ratio"),
        ({"max_completion_length": 0}, "max_completion_length"),
        ({"max_completion_length": 96.5}, "max_completion_length"),
        ({"max_completion_length": True}, "max_completion_length"),
    ],
)
def test_length_model_rejects_bad_settings_by_name(kwargs, field):
    with pytest.raises(ValueError, match=f"LengthModel.{field}"):
        LengthModel(**kwargs)


def test_simulate_rejects_an_unknown_length_preset():
    with pytest.raises(ValueError, match="lengths='long'.*default, small_spread, several_fold"):
        simulate("uniform", lengths="long", **SMALL)


# ---- tokens in a run ------------------------------------------------------------------------------------------------
def test_a_plan_ahead_run_trains_every_token_it_generates():
    result = simulate("knapsack", lengths="small_spread", seed=0, **SMALL)
    np.testing.assert_array_equal(result.trained_tokens, result.generated_tokens)
    s = result.summary
    assert 54 < s["tokens_per_completion"] < 96  # failed ones are longer; the cut keeps every one within 96
    assert s["tokens_generated"] == pytest.approx(result.generated_tokens.mean())
    np.testing.assert_allclose(result.effective_completions, result.effective_gradient_ratio * result.budget_used)
    assert s["effective_per_1k_tokens"] == pytest.approx(
        1000 * result.effective_completions.sum() / result.generated_tokens.sum()
    )
    assert s["value_per_1k_tokens"] == pytest.approx(1000 * result.value.sum() / result.generated_tokens.sum())
    assert 0 < s["truncated_share"] < 0.2


def test_seq_generates_more_tokens_than_it_trains():
    result = simulate("reinforce_ada_seq_balance", seed=0, **SMALL)
    assert np.all(result.trained_tokens <= result.generated_tokens)
    assert result.generated_tokens.sum() > result.trained_tokens.sum()
    assert result.summary["tokens_generated"] / result.summary["tokens_trained"] == pytest.approx(
        result.summary["generated_over_trained"], rel=0.05
    )


@pytest.mark.parametrize("spec", ["uniform", "knapsack", "bayes_knapsack", "reinforce_ada_seq_pos"])
def test_lengths_without_a_cut_change_no_learning_and_no_allocation(spec):
    # Without a cut or a token budget, lengths are bookkeeping only: every figure but the tokens is the same.
    short = simulate(spec, seed=1, lengths=LengthModel(), **SMALL)
    long = simulate(spec, seed=1, lengths=LengthModel(solved_tokens=900, prompt_spread=1.0, failed_ratio=3.0), **SMALL)
    for name in (*STEP_METRICS, "generated", "max_count", "value", "mean_p"):
        np.testing.assert_array_equal(getattr(short, name), getattr(long, name))
    np.testing.assert_array_equal(short.p_final, long.p_final)
    assert long.summary["tokens_per_completion"] > 10 * short.summary["tokens_per_completion"]


def test_truncation_costs_successes():
    free = simulate("uniform", seed=2, lengths=LengthModel(), **SMALL)
    cut = simulate("uniform", seed=2, lengths=LengthModel(max_completion_length=60), **SMALL)
    assert cut.summary["truncated_share"] > 0.2
    assert cut.zero_grad_all_wrong.mean() > free.zero_grad_all_wrong.mean()
    assert cut.zero_grad_all_correct.mean() < free.zero_grad_all_correct.mean()
    assert cut.generated_tokens.max() <= 60 * 64 * 8


# ---- the store learns lengths; the token budget ---------------------------------------------------------------------
def test_the_store_learns_each_prompts_length_from_the_simulated_completions():
    stores: list[PromptStatistics] = []

    def factory() -> PromptStatistics:
        stores.append(PromptStatistics())
        return stores[-1]

    model = LengthModel(solved_tokens=500, prompt_spread=0.6, completion_sigma=0.2)
    result = simulate("uniform", seed=3, lengths=model, statistics_factory=factory, **SMALL)
    ids = np.arange(SMALL["num_prompts"])
    learned = stores[0].expected_tokens(ids)
    # The truth at the end: each prompt's mean solved length (drawn as simulate draws it) and its final true p.
    length_rng = np.random.default_rng(3).spawn(6)[5]
    truth = model.expected_tokens(model.prompt_means(len(ids), length_rng), result.p_final)
    assert np.all(np.isfinite(learned))
    assert np.corrcoef(np.log(learned), np.log(truth))[0, 1] > 0.95  # the 4.7-fold spread is learned prompt by prompt
    assert np.median(np.abs(learned / truth - 1)) < 0.15


def _uniform_tokens_per_step(lengths: str, seed: int) -> float:
    return simulate("uniform", seed=seed, lengths=lengths, **SMALL).summary["tokens_generated"]


@pytest.mark.parametrize("name", ["knapsack", "bayes_knapsack"])
def test_a_budget_that_never_binds_changes_nothing(name):
    plain = simulate(name, seed=4, lengths="several_fold", **SMALL)
    loose = simulate(get_allocator(name, token_budget=1e12), seed=4, lengths="several_fold", **SMALL)
    for field in ("generated", "generated_tokens", "effective_completions", "value", "mean_p"):
        np.testing.assert_array_equal(getattr(plain, field), getattr(loose, field))


@pytest.mark.parametrize("name", ["knapsack", "bayes_knapsack"])
def test_a_binding_token_budget_spends_fewer_tokens_on_the_same_completions(name):
    budget = 0.9 * _uniform_tokens_per_step("several_fold", seed=5)
    plain = simulate(name, seed=5, lengths="several_fold", **SMALL)
    capped = simulate(get_allocator(name, token_budget=budget), seed=5, lengths="several_fold", **SMALL)
    later = capped.epoch >= 1  # epoch 1 has no length statistics: every allocator is uniform there
    np.testing.assert_array_equal(capped.budget_used, plain.budget_used)
    assert capped.generated_tokens[later].mean() < plain.generated_tokens[later].mean()
    # The budget holds the EXPECTED tokens (the store's estimates); what is generated is a draw around them.
    assert capped.generated_tokens[later].mean() <= 1.03 * budget
