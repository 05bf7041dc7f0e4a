"""The dispatch layout (``trl_adaptive/trainer/groups.py``): an allocation's counts expanded into one job per
completion, laid out over the ranks (shuffled by seed and step on one rank, tokens balanced on several) and split
evenly. NumPy only."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.stats import stable_prompt_ids
from trl_adaptive.trainer.groups import (
    BatchDispatch,
    balanced_order,
    dispatch_order,
    known_lengths,
    max_over_mean,
    rank_balance_metrics,
    rank_slice,
    rank_tokens,
    shuffled_order,
)
from trl_adaptive.trainer.state import DISPATCH, ROUND_DISPATCH, step_seed

RANK_COUNTS = (1, 2, 3, 4, 8)


def _expanded(counts: np.ndarray, seed: int, step: int) -> np.ndarray:
    """The group id of each completion, prompt-major, in one rank's dispatch order."""
    jobs = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return jobs[dispatch_order(jobs, seed, step)]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=10), st.integers(0, 2**40), st.integers(0, 10_000))
def test_the_dispatch_order_conserves_counts_and_is_deterministic(counts, seed, step):
    counts = np.array(counts)
    jobs = _expanded(counts, seed, step)
    assert jobs.dtype == np.int64 and len(jobs) == counts.sum()
    np.testing.assert_array_equal(np.bincount(jobs, minlength=len(counts)), counts)
    np.testing.assert_array_equal(_expanded(counts, seed, step), jobs)


def test_the_dispatch_shuffle_of_unequal_counts_depends_on_seed_and_step():
    counts = np.array([10, 2, 2, 2])
    base = _expanded(counts, seed=0, step=0)
    assert not np.array_equal(base, np.repeat(np.arange(4), counts))  # unequal counts are shuffled
    assert not np.array_equal(_expanded(counts, seed=0, step=1), base)
    assert not np.array_equal(_expanded(counts, seed=1, step=0), base)
    np.testing.assert_array_equal(_expanded(counts, seed=0, step=0), base)


@pytest.mark.parametrize("counts", [[4, 4, 4], [2, 2], [1], [3, 3, 3, 3]])
def test_equal_counts_keep_prompt_major_order(counts):
    for step in (0, 5):
        np.testing.assert_array_equal(
            _expanded(np.array(counts), seed=42, step=step), np.repeat(np.arange(len(counts)), counts)
        )


@pytest.mark.parametrize(
    "keys",
    [np.arange(3), np.array([-1, -2, -3]), stable_prompt_ids(["uuid-0", "uuid-1", "uuid-2"])],
    ids=["indices", "negative-ids", "hashed-string-ids"],
)
def test_dispatch_order_takes_any_int64_group_keys(keys):
    """Rounds dispatch by prompt id, which may be negative or a 63-bit hash: only the group sizes matter."""
    equal = np.repeat(keys, 4)
    np.testing.assert_array_equal(dispatch_order(equal, seed=0, step=3), np.arange(12))  # TRL's layout kept
    skewed = np.repeat(keys, [6, 3, 3])
    order = dispatch_order(skewed, seed=0, step=3)
    assert sorted(order.tolist()) == list(range(12)) and not np.array_equal(order, np.arange(12))
    np.testing.assert_array_equal(order, dispatch_order(np.repeat(np.arange(3), [6, 3, 3]), seed=0, step=3))


def test_rank_slice_splits_evenly():
    jobs = _expanded(np.array([10, 2, 2, 2]), seed=0, step=3)
    for num_processes in (1, 2, 4, 8, 16):
        pieces = [jobs[rank_slice(16, num_processes, r)] for r in range(num_processes)]
        assert all(len(piece) == 16 // num_processes for piece in pieces)
        np.testing.assert_array_equal(np.concatenate(pieces), jobs)
    assert rank_slice(16, 2, 1) == slice(8, 16)


@pytest.mark.parametrize("total,num_processes", [(15, 2), (16, 3), (1, 2)])
def test_rank_slice_rejects_indivisible_totals(total, num_processes):
    with pytest.raises(ValueError, match="evenly"):
        rank_slice(total, num_processes, 0)


@st.composite
def batches(draw):
    """A rank count, prompt-major jobs of random group sizes summing to a multiple of it, and a length per job (a
    per-prompt expected length or a per-completion actual one, some unknown)."""
    num_ranks = draw(st.sampled_from(RANK_COUNTS))
    counts = draw(st.lists(st.integers(1, 12), min_size=1, max_size=12))
    counts[-1] += -sum(counts) % num_ranks  # TRL's shape: the batch splits evenly
    jobs = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    per_prompt = draw(st.booleans())
    values = st.one_of(st.floats(0, 4096), st.just(float("nan")))
    lengths = draw(st.lists(values, min_size=len(counts) if per_prompt else len(jobs), max_size=len(jobs)))
    lengths = np.array(lengths)[jobs] if per_prompt else np.array(lengths[: len(jobs)])
    return num_ranks, jobs, lengths


@settings(max_examples=300, deadline=None)
@given(batches(), st.integers(0, 2**32 - 1), st.integers(0, 10_000))
def test_dispatch_contract_over_rank_counts(batch, seed, step):
    """Every rank gets the same number of completions; the order is a permutation; equal groups keep TRL's layout;
    one rank keeps the seeded shuffle; several ranks balance the tokens: once no exchange is left, the busiest rank
    holds at most (longest - shortest job) tokens more than the idlest."""
    num_ranks, jobs, lengths = batch
    order = dispatch_order(jobs, seed, step, lengths, num_ranks)
    assert order.dtype == np.int64 and sorted(order.tolist()) == list(range(len(jobs)))
    per_rank = [jobs[order][rank_slice(len(jobs), num_ranks, r)] for r in range(num_ranks)]
    assert {len(piece) for piece in per_rank} == {len(jobs) // num_ranks}
    np.testing.assert_array_equal(order, dispatch_order(jobs, seed, step, lengths, num_ranks))  # deterministic
    equal_sizes = len(set(np.bincount(jobs).tolist())) == 1
    if equal_sizes:
        np.testing.assert_array_equal(order, np.arange(len(jobs)))
    elif num_ranks == 1:
        np.testing.assert_array_equal(order, shuffled_order(len(jobs), seed, step))
    else:
        filled = known_lengths(lengths, len(jobs))
        loads = rank_tokens(filled[order], num_ranks)
        assert loads.max() - loads.min() <= np.ptp(filled) * (1 + 1e-9) + 1e-9
        for r in range(num_ranks):  # each rank's jobs in job order (prompt-major within the rank)
            block = order[rank_slice(len(jobs), num_ranks, r)]
            assert (np.diff(block) > 0).all()


def _best_max_load(lengths: np.ndarray, num_ranks: int) -> float:
    """The smallest possible load of the busiest rank with equal job counts per rank, by enumeration."""
    labels = np.repeat(np.arange(num_ranks), len(lengths) // num_ranks)
    return min(
        np.bincount(perm, weights=lengths, minlength=num_ranks).max()
        for perm in set(itertools.permutations(labels.tolist()))
    )


@pytest.mark.parametrize("num_ranks,per_rank", [(2, 2), (2, 3), (2, 4), (3, 2), (4, 2)])
def test_balanced_is_within_four_thirds_of_the_optimum_and_so_of_any_shuffle(num_ranks, per_rank):
    rng = np.random.default_rng(num_ranks * 10 + per_rank)
    for trial in range(30):
        lengths = rng.integers(1, 200, num_ranks * per_rank).astype(np.float64)
        best = _best_max_load(lengths, num_ranks)
        balanced = rank_tokens(lengths[balanced_order(lengths, num_ranks)], num_ranks).max()
        shuffled = rank_tokens(lengths[shuffled_order(len(lengths), 0, trial)], num_ranks).max()
        assert best <= balanced <= 4 / 3 * best
        assert balanced <= 4 / 3 * shuffled  # no layout beats the optimum, a shuffle included


@pytest.mark.parametrize("num_ranks", [2, 8, 64])
def test_balanced_beats_the_shuffle_on_long_tailed_lengths(num_ranks):
    """Long-tailed completion lengths (log-normal, a few very long): the balanced layout's busiest rank is within 2%
    of a lower bound on the optimum's and below the shuffle's."""
    rng = np.random.default_rng(num_ranks)
    per_rank = 16
    for trial in range(5):
        lengths = np.minimum(rng.lognormal(5.0, 1.0, per_rank * num_ranks), 4096.0)
        ascending = np.sort(lengths)
        # the optimum's busiest rank holds at least the mean, and the longest job with the shortest others beside it
        at_least = max(lengths.sum() / num_ranks, ascending[-1] + ascending[: per_rank - 1].sum())
        balanced = rank_tokens(lengths[balanced_order(lengths, num_ranks)], num_ranks).max()
        shuffled = rank_tokens(lengths[shuffled_order(len(lengths), 0, trial)], num_ranks).max()
        assert balanced < shuffled and balanced <= 1.02 * at_least


def test_docstring_example_and_groups_spread_when_lengths_are_unknown():
    lengths = np.repeat([90.0, 30.0, 30.0], [4, 2, 2])
    order = balanced_order(lengths, 2)
    np.testing.assert_array_equal(order, [0, 2, 4, 6, 1, 3, 5, 7])
    np.testing.assert_array_equal(rank_tokens(lengths[order], 2), [240, 240])
    # Nothing known: every job counts the same, jobs are dealt round-robin, so each group is spread over the ranks.
    jobs = np.repeat(np.arange(3), [8, 4, 4])
    order = dispatch_order(jobs, seed=0, step=0, lengths=np.full(16, np.nan), num_ranks=4)
    for r in range(4):
        np.testing.assert_array_equal(np.bincount(jobs[order][rank_slice(16, 4, r)], minlength=3), [2, 1, 1])
    np.testing.assert_array_equal(order, dispatch_order(jobs, seed=0, step=0, lengths=None, num_ranks=4))


def test_unknown_lengths_count_as_the_mean_of_the_known_ones():
    np.testing.assert_array_equal(known_lengths(np.array([10.0, np.nan, 30.0]), 3), [10.0, 20.0, 30.0])
    np.testing.assert_array_equal(known_lengths(np.full(2, np.nan), 2), [1.0, 1.0])
    np.testing.assert_array_equal(known_lengths(None, 3), [1.0, 1.0, 1.0])


@pytest.mark.parametrize(
    "lengths,match",
    [([1.0, 1.0, -1.0, 1.0], "finite and >= 0"), ([1.0, np.inf, 1.0, 1.0], "finite and >= 0"), ([1.0], "per job")],
)
def test_bad_lengths_are_refused(lengths, match):
    with pytest.raises(ValueError, match=match):
        dispatch_order(np.array([0, 0, 0, 1]), 0, 0, np.array(lengths), num_ranks=2)


def test_balanced_order_refuses_an_uneven_split():
    with pytest.raises(ValueError, match="evenly"):
        balanced_order(np.ones(5), 2)


def test_a_round_on_one_rank_draws_its_own_named_stream():
    """Single-process runs that generate in rounds: round r of step s shuffles from ROUND_DISPATCH, r; a planned
    round and the training pass after rounds keep DISPATCH, (seed, step)."""
    jobs = np.repeat(np.array([-5, 7, 9]), [6, 3, 3])
    assert step_seed(42, 3, ROUND_DISPATCH, 2) == [42, 3, 3, 2]
    drawn = np.random.default_rng([42, 3, 3, 2]).permutation(12)
    np.testing.assert_array_equal(dispatch_order(jobs, 42, 3, np.arange(12.0), num_ranks=1, round_index=2), drawn)
    np.testing.assert_array_equal(shuffled_order(12, 42, 3, round_index=2), drawn)
    planned = np.random.default_rng(step_seed(42, 3, DISPATCH)).permutation(12)
    np.testing.assert_array_equal(dispatch_order(jobs, 42, 3, np.arange(12.0), num_ranks=1), planned)
    rounds = {tuple(shuffled_order(12, 42, 3, round_index=r)) for r in range(4)} | {tuple(planned)}
    assert len(rounds) == 5  # every round of the step, and its planned layout, draw their own shuffle


def test_a_round_keeps_equal_groups_and_balances_several_ranks_without_a_seed():
    equal = np.repeat(np.arange(3), 4)
    np.testing.assert_array_equal(dispatch_order(equal, 42, 3, num_ranks=1, round_index=2), np.arange(12))
    skewed, lengths = np.repeat(np.arange(3), [6, 3, 3]), np.arange(12.0)
    np.testing.assert_array_equal(
        dispatch_order(skewed, 42, 3, lengths, num_ranks=2, round_index=2), balanced_order(lengths, 2)
    )


def test_max_over_mean_waits_for_each_rounds_slowest_rank():
    assert max_over_mean([np.array([10.0, 10.0])]) == 1.0
    # round 1: ranks hold 30 | 10, round 2: 10 | 30; the totals balance, the waits do not: (30 + 30) / (20 + 20)
    assert max_over_mean([np.array([30.0, 10.0]), np.array([10.0, 30.0])]) == 1.5
    assert np.isnan(max_over_mean([np.zeros(2)]))


def test_rank_balance_metrics_gives_both_figures_and_leaves_out_unknown_lengths():
    metrics = rank_balance_metrics(np.array([5.0, 5.0, 1.0, 1.0]), 2, [np.array([30.0, 10.0]), np.array([20.0, 20.0])])
    assert metrics == {
        "tokens/rank_max_over_mean_generation": (30 + 20) / (20 + 20),
        "tokens/rank_max_over_mean_training": 10 / 6,
    }
    metrics = rank_balance_metrics(np.array([1.0, 3.0, 1.0, 1.0]), 2)  # one planned pass: generated as trained
    assert metrics == {"tokens/rank_max_over_mean_generation": 4 / 3, "tokens/rank_max_over_mean_training": 4 / 3}
    assert (
        rank_balance_metrics(np.array([np.nan, 1.0]), 2, [np.array([np.nan, 1.0])]) == {}
    )  # a driver counting nothing


def test_batch_dispatch_balances_a_planned_round_by_the_expected_tokens_and_keeps_equal_groups_in_place():
    lengths = {0: 90.0, 1: 30.0, 2: 30.0}
    dispatch = BatchDispatch(
        seed=0, step=3, num_ranks=2, expected_tokens=lambda ids: np.array([lengths[i] for i in ids])
    )
    jobs, record_ids = np.array([0, 0, 0, 0, 1, 1, 2, 2]), np.array([0, 1, 2])
    order = dispatch.planned_order(record_ids[jobs])
    assert sorted(order.tolist()) == list(range(8))
    per_rank = np.array([lengths[i] for i in record_ids[jobs[order]]]).reshape(2, -1).sum(axis=1)
    assert per_rank.tolist() == [240.0, 240.0]  # the module docstring's example, balanced
    equal = np.array([0, 0, 1, 1, 2, 2])
    assert dispatch.planned_order(record_ids[equal]).tolist() == list(range(6))  # GRPOTrainer's layout
