"""The knapsack under a token budget: exact up to its reported gap, feasible, and a no-op when the budget is off."""

import dataclasses
import itertools

import numpy as np
import pytest

from trl_adaptive.allocation import BayesKnapsackAllocator, KnapsackAllocator, PromptBatchStats, UniformAllocator
from trl_adaptive.allocation.knapsack import tiered_gains
from trl_adaptive.allocation.token_budget import rounding_slack, solve_token_budget, within_token_budget
from trl_adaptive.allocation.token_budgeted import TokenBudgeted, with_token_budget
from trl_adaptive.allocation.value import marginal_gains


def _brute_force(gains, lengths, budget, token_budget, n_low, n_up):
    """max sum of gains over every count vector with sum = budget and tokens <= token_budget (None: none fits)."""
    values = np.concatenate([np.zeros((len(gains), 1)), np.cumsum(gains, axis=1)], axis=1)
    best = None
    for counts in itertools.product(range(n_low, n_up + 1), repeat=len(gains)):
        counts = np.array(counts)
        if counts.sum() == budget and counts @ lengths <= token_budget + rounding_slack(token_budget):
            value = values[np.arange(len(counts)), counts].sum()
            best = value if best is None else max(best, value)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_answer_fits_and_misses_the_optimum_by_at_most_its_gap_bound(seed):
    rng = np.random.default_rng(seed)
    rates = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], 4)
    lengths = rng.integers(5, 60, 4).astype(float)
    gains = marginal_gains(rates, n_up=8)
    budget = 18
    unconstrained = solve_token_budget(gains, lengths, budget, 1e12, 2, 8)
    token_budget = float(rng.uniform(0.55, 1.0) * unconstrained.expected_tokens)
    solution = solve_token_budget(gains, lengths, budget, token_budget, 2, 8)
    optimum = _brute_force(gains, lengths, budget, token_budget, 2, 8)
    values = np.concatenate([np.zeros((4, 1)), np.cumsum(gains, axis=1)], axis=1)
    achieved = values[np.arange(4), solution.counts].sum()
    if optimum is None:
        assert not solution.feasible and solution.expected_tokens > token_budget
        return
    assert solution.feasible and solution.counts.sum() == budget
    assert (
        solution.expected_tokens <= token_budget + 1e-9 and solution.counts.min() >= 2 and solution.counts.max() <= 8
    )
    assert achieved <= optimum + 1e-12
    assert achieved >= optimum - solution.gap_bound - 1e-12


def test_a_budget_that_does_not_bind_changes_nothing_and_one_below_the_fewest_tokens_is_reported():
    gains = marginal_gains([0.5, 0.5, 0.2], n_up=10)
    lengths = np.array([10.0, 40.0, 20.0])
    free = solve_token_budget(gains, lengths, 15, 1e9, 2, 10)
    assert free.price == 0.0 and free.gap_bound == 0.0 and free.feasible
    fewest = solve_token_budget(gains, lengths, 15, 10.0, 2, 10)  # 15 completions of >= 10 tokens cannot fit 10
    assert not fewest.feasible and np.isnan(fewest.gap_bound)
    assert fewest.counts.tolist() == [10, 2, 3]  # N_low each, the rest to the shortest prompts first
    with pytest.raises(ValueError, match="lengths must be 3 finite"):
        solve_token_budget(gains, np.array([1.0, np.nan, 2.0]), 15, 100.0, 2, 10)


def _stats(rates, lengths):
    return dataclasses.replace(PromptBatchStats.from_success_rates(rates), expected_tokens=np.asarray(lengths))


@pytest.mark.parametrize("cls", [KnapsackAllocator, BayesKnapsackAllocator])
def test_allocators_keep_their_counts_without_a_binding_budget_and_fit_a_binding_one(cls):
    rng = np.random.default_rng(3)
    rates = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0, np.nan], 24)
    lengths = np.where(rates < 0.3, 300.0, 100.0) * rng.uniform(0.8, 1.2, 24)
    stats, budget = _stats(rates, lengths), 24 * 8
    plain = cls().allocate(stats, budget)
    tokens = float(plain.counts @ lengths)
    loose = TokenBudgeted(cls(), tokens * 1.01).allocate(stats, budget)
    np.testing.assert_array_equal(loose.counts, plain.counts)
    assert loose.metrics["tokens_expected"] == pytest.approx(tokens) and loose.metrics["token_price"] == 0.0
    tight = TokenBudgeted(cls(), tokens * 0.7).allocate(stats, budget)
    assert tight.counts.sum() == budget and tight.counts.min() >= 2
    assert float(tight.counts @ lengths) <= tokens * 0.7 + 1e-6
    assert tight.metrics["token_price"] > 0 and tight.metrics["token_budget_infeasible"] == 0.0
    unseen = np.isnan(rates) if cls is KnapsackAllocator else np.zeros(24, dtype=bool)
    np.testing.assert_array_equal(tight.counts[unseen], plain.counts[unseen])  # nothing known: the uniform share
    unknown = TokenBudgeted(cls(), 1.0).allocate(dataclasses.replace(stats, expected_tokens=None), budget)
    np.testing.assert_array_equal(unknown.counts, plain.counts)  # no length measured yet: nothing to plan on
    assert "tokens_expected" not in unknown.metrics


def test_tiered_gains_rank_every_value_unit_above_the_fallback_tiers_in_their_order():
    gains = tiered_gains(np.array([0.0, 0.5, 1.0]), n_low=2, n_up=16)
    demand = 4  # 90%-mixed demand at p = 0.5
    value_units = gains[1, 2:demand]
    hard_units, beyond_units, solved_units = gains[0, 2:], gains[1, demand:], gains[2, 2:]
    assert value_units.min() > hard_units.max() > 0
    assert hard_units.min() > beyond_units.max() > beyond_units.min() > solved_units.max() > 0
    assert np.all(np.diff(hard_units) < 0)  # decreasing: equal prompts are filled evenly


def test_the_pilots_second_round_counts_the_first_rounds_tokens():
    stats = _stats([0.2, 0.5, 0.8, 0.5], [100.0, 20.0, 20.0, 200.0])
    already = np.array([2, 2, 2, 2])
    plain = BayesKnapsackAllocator().allocate_remaining(stats, 24, already)
    tokens = float((already + plain.counts) @ stats.expected_tokens)
    capped = TokenBudgeted(BayesKnapsackAllocator(), 0.6 * tokens).allocate_remaining(stats, 24, already)
    assert capped.counts.sum() == 24 and capped.counts.min() >= 0
    assert float((already + capped.counts) @ stats.expected_tokens) <= 0.6 * tokens + 1e-6


@pytest.mark.parametrize("bad", [0, -5.0, float("nan"), float("inf"), "many"])
def test_a_token_budget_that_is_no_number_of_tokens_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="token_budget"):
        TokenBudgeted(KnapsackAllocator(), bad)


def test_the_budget_wraps_an_allocator_that_can_be_re_solved_once_and_keeps_its_name_bounds_and_pilot():
    with pytest.raises(TypeError, match="budget_positions and budget_gains"):
        TokenBudgeted(UniformAllocator(), 100.0)
    budgeted = TokenBudgeted(BayesKnapsackAllocator(min_rollouts=3, max_rollouts=9), "uniform")
    with pytest.raises(ValueError, match="wrap the allocator once"):
        TokenBudgeted(budgeted, 100.0)
    assert (budgeted.name, budgeted.reads, budgeted.min_rollouts, budgeted.max_rollouts) == (
        "bayes_knapsack",
        BayesKnapsackAllocator.reads,
        3,
        9,
    )
    assert all(hasattr(budgeted, m) for m in ("absorb", "allocate_remaining", "check_pilot"))  # a pilot can run it
    assert not hasattr(TokenBudgeted(KnapsackAllocator(), 100.0), "allocate_remaining")  # and refuses knapsack
    assert with_token_budget(KnapsackAllocator(), None) == KnapsackAllocator()


@pytest.mark.parametrize("cls", [KnapsackAllocator, BayesKnapsackAllocator])
def test_a_uniform_token_budget_expects_what_the_uniform_split_of_the_batch_expects(cls):
    rng = np.random.default_rng(5)
    rates = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], 16)
    lengths = np.where(rates < 0.3, 300.0, 100.0) * rng.uniform(0.8, 1.2, 16)
    allocation = TokenBudgeted(cls(), "uniform").allocate(_stats(rates, lengths), 16 * 8)
    uniform_tokens = 16 * 8 * lengths.mean()
    assert allocation.metrics["token_budget"] == pytest.approx(uniform_tokens)
    assert float(allocation.counts @ lengths) <= uniform_tokens + rounding_slack(uniform_tokens)
    assert cls().allocate(_stats(rates, lengths), 16 * 8).counts @ lengths > uniform_tokens  # it binds here
    fresh = TokenBudgeted(cls(), "uniform").allocate(
        dataclasses.replace(_stats(rates, lengths), expected_tokens=None), 128
    )
    assert "token_budget" not in fresh.metrics  # nothing measured: no number yet


@pytest.mark.parametrize("seed", range(20))
def test_the_uniform_budget_is_inert_when_every_prompt_expects_the_same_length(seed):
    """Every split of the same completions then expects the same tokens: the allocator's counts stay, at price 0,
    though each length is a mean whose last bits differ (what a statistics store hands over)."""
    rng = np.random.default_rng(seed)
    length = rng.uniform(50.0, 900.0)
    # the same length reached as means of different numbers of completions: equal up to the last bits
    lengths = np.array([np.mean(np.full(int(rng.integers(1, 9)), length / 3.0)) * 3.0 for _ in range(16)])
    counts = rng.integers(2, 17, size=16)

    def gains():  # a value that would move completions if the budget bound
        return np.tile(np.linspace(1.0, 0.0, 16), (16, 1))

    allocation = within_token_budget(counts, np.arange(16), lengths, "uniform", gains, 2, 16)
    assert allocation.counts.tolist() == counts.tolist()
    assert allocation.metrics["token_price"] == 0.0 and allocation.metrics["token_budget_infeasible"] == 0.0
    assert abs(allocation.metrics["tokens_expected"] - allocation.metrics["token_budget"]) < 1e-6 * length


def test_half_a_token_over_the_budget_fits_and_more_binds():
    gains = marginal_gains([0.5, 0.5], n_up=8)
    lengths = np.array([10.0, 10.2])
    free = solve_token_budget(gains, lengths, 8, 80.0, 2, 8)  # [4, 4] expects 80.8: within half a token? no
    assert free.price > 0.0 and free.expected_tokens <= 80.5
    loose = solve_token_budget(gains, lengths, 8, 80.4, 2, 8)  # 80.8 is within half a token of 80.4
    assert loose.price == 0.0 and loose.counts.tolist() == [4, 4]
