"""Tests of the round-based allocators (``trl_adaptive/allocation/sequential.py``): Reinforce-Ada Seq, DAPO filter.

Exit rules on scripted success sequences, the per-prompt maximum and the batch's inference cap (hypothesis), the
selection (exactly n per prompt, balanced where possible, uniform within each kind, seeded), the registry and the
plan-ahead contract, the validation messages, and the module's doctests.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trl_adaptive.allocation.sequential as sequential
from trl_adaptive.allocation import (
    ReinforceAdaSeqBalanceAllocator,
    ReinforceAdaSeqPosAllocator,
    SequentialAllocator,
    dynamic_sampling_keep,
    get_allocator,
    is_success,
    registered_allocators,
)
from trl_adaptive.sim import sample_in_rounds

SEQ_NAMES = ("reinforce_ada_seq_pos", "reinforce_ada_seq_balance")


def scripted(scripts: list[str]):
    """A ``draw`` for :func:`sample_in_rounds` reading each prompt's fixed script: '1' correct, '0' wrong."""
    cursor = [0] * len(scripts)

    def draw(counts: np.ndarray) -> np.ndarray:
        out = []
        for i, c in enumerate(counts.tolist()):
            chunk = scripts[i][cursor[i] : cursor[i] + c]
            assert len(chunk) == c, f"prompt {i} asked for more completions than its script holds"
            out += [ch == "1" for ch in chunk]
            cursor[i] += c
        return np.array(out, dtype=bool)

    return draw


def attempts_of(outcome, num_prompts: int) -> list[int]:
    return np.bincount(outcome.group_ids, minlength=num_prompts).tolist()


# ---- the success rule and DAPO's filter -----------------------------------------------------------------------------
def test_is_success_on_float_rewards():
    rewards = np.array([1.0, 0.999, 2.0, -1.0, float("nan"), 0.5, float("inf")])
    assert is_success(rewards, 1.0).tolist() == [True, False, True, False, False, False, True]
    assert is_success(rewards, 0.5).tolist() == [True, True, True, False, False, True, True]
    assert is_success([], 1.0).dtype == bool
    with pytest.raises(ValueError, match="threshold"):
        is_success(rewards, float("nan"))


def test_dynamic_sampling_keep_uses_the_success_rule_not_the_std():
    # Group 0: shaped rewards with noise but no success: std != 0, yet all wrong by the rule -> dropped.
    rewards = np.array([0.1, 0.2, 0.3, 1.0, 0.0, 1.0, 1.0, 1.0])
    groups = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    keep = dynamic_sampling_keep(is_success(rewards, 1.0), groups, num_groups=4)
    assert keep.tolist() == [False, True, False, False]  # group 3 has no completion
    with pytest.raises(ValueError, match="is_success"):
        dynamic_sampling_keep(rewards, groups, 4)
    with pytest.raises(ValueError, match="group_ids"):
        dynamic_sampling_keep(np.ones(8, dtype=bool), groups + 2, 4)


# ---- construction, registry, contract -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SEQ_NAMES)
def test_registry_names_construct(name):
    assert name in registered_allocators()
    allocator = get_allocator(name, round_size=4, max_rollouts=16, inference_cap=2.5)
    assert isinstance(allocator, SequentialAllocator) and allocator.name == name and not allocator.allows_zero
    assert (allocator.round_size, allocator.max_rollouts, allocator.inference_cap) == (4, 16, 2.5)
    default = get_allocator(name)
    assert (default.round_size, default.max_rollouts, default.inference_cap) == (8, 32, 4.0)
    assert get_allocator("reinforce_ada_seq_pos", min_successes=3).min_successes == 3


@pytest.mark.parametrize("name", SEQ_NAMES)
def test_allocate_is_the_uniform_contract(name):
    counts = get_allocator(name).allocate([0.0, float("nan"), 0.5, 1.0, 0.2], budget=43)
    assert counts.dtype == np.int64 and counts.sum() == 43 and counts.tolist() == [9, 9, 9, 8, 8]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"round_size": 0}, "round_size"),
        ({"round_size": 2.5}, "round_size"),
        ({"round_size": True}, "round_size"),
        ({"round_size": 16, "max_rollouts": 8}, "max_rollouts"),
        ({"inference_cap": 0.5}, "inference_cap"),
        ({"inference_cap": float("nan")}, "inference_cap"),
        ({"inference_cap": float("inf")}, "inference_cap"),
        ({"min_successes": 0}, "min_successes"),
        ({"min_rollouts": 1}, "min_rollouts"),
    ],
)
def test_constructor_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ReinforceAdaSeqPosAllocator(**kwargs)


@pytest.mark.parametrize("name", SEQ_NAMES)
def test_group_size_above_max_rollouts_is_refused(name):
    allocator = get_allocator(name, round_size=4, max_rollouts=8)
    with pytest.raises(ValueError, match="group_size=16 exceeds max_rollouts=8"):
        allocator.round_counts(np.zeros(2), np.zeros(2), 16, 0, 32)
    with pytest.raises(ValueError, match="group_size=16 exceeds max_rollouts=8"):
        allocator.select(np.ones(32, dtype=bool), np.repeat([0, 1], 16), 2, 16, np.random.default_rng(0))


def test_round_counts_validates_its_inputs():
    seq = ReinforceAdaSeqBalanceAllocator()
    with pytest.raises(ValueError, match="successes <= attempts"):
        seq.round_counts(np.array([3, 0]), np.array([2, 8]), 4, 10, 8)
    with pytest.raises(ValueError, match="same shape"):
        seq.round_counts(np.zeros(2), np.zeros(3), 4, 0, 8)
    with pytest.raises(ValueError, match="generated_so_far=0"):
        seq.round_counts(np.zeros(2), np.array([8, 8]), 4, 0, 8)
    with pytest.raises(ValueError, match="budget"):
        seq.round_counts(np.zeros(2), np.zeros(2), 4, 0, 0)


# ---- exit rules on scripted sequences -------------------------------------------------------------------------------
def test_seq_pos_exit_rule_on_scripts():
    pos = ReinforceAdaSeqPosAllocator(round_size=4, max_rollouts=16)
    scripts = [
        "1000" + "0" * 12,  # success in round 1: done after 4
        "0000" + "0010" + "0" * 8,  # success in round 2: done after 8
        "0" * 16,  # never: stops at max_rollouts = 16 unfinished
        "1" * 16,  # solved: done after round 1
        "0000" + "0000" + "0001" + "0000",  # success at the last position of round 3: done after 12
    ]
    out = sample_in_rounds(pos, scripted(scripts), 5, 4, np.random.default_rng(0))
    assert attempts_of(out, 5) == [4, 8, 16, 4, 12]
    assert out.done.tolist() == [True, True, False, True, True]
    assert [c.tolist() for c in out.round_counts] == [
        [4, 4, 4, 4, 4],
        [0, 4, 4, 0, 4],
        [0, 0, 4, 0, 4],
        [0, 0, 4, 0, 0],
    ]


def test_seq_pos_with_k_successes():
    pos = ReinforceAdaSeqPosAllocator(round_size=4, max_rollouts=16, min_successes=2)
    scripts = ["0100" + "0000" + "1000" + "0000", "1100" + "0" * 12, "1000" + "0" * 12]
    out = sample_in_rounds(pos, scripted(scripts), 3, 4, np.random.default_rng(0))
    assert attempts_of(out, 3) == [12, 4, 16]
    assert out.done.tolist() == [True, True, False]


def test_seq_balance_exit_rule_on_scripts():
    bal = ReinforceAdaSeqBalanceAllocator(round_size=4, max_rollouts=16)  # n = 4: done at >= 2 and >= 2
    scripts = [
        "1010" + "1" * 12,  # 2 + 2 in round 1
        "1" * 16,  # never fails: N_max, unfinished
        "0" * 16,  # never succeeds: N_max, unfinished
        "0000" + "0100" + "0100" + "0000",  # second success in round 3
        "1110" + "1110" + "0000",  # second failure in round 2
    ]
    out = sample_in_rounds(bal, scripted([s.ljust(16, "0") for s in scripts]), 5, 4, np.random.default_rng(0))
    assert attempts_of(out, 5) == [4, 16, 16, 12, 8]
    assert out.done.tolist() == [True, False, False, True, True]


def test_seq_balance_threshold_is_floor_half_at_least_one():
    bal = ReinforceAdaSeqBalanceAllocator()
    s, a = np.array([2, 2, 1, 1]), np.array([4, 5, 2, 3])
    assert bal.is_done(s, a, group_size=5).tolist() == [True, True, False, False]  # floor(5/2) = 2 of each
    assert bal.is_done(s, a, group_size=1).tolist() == [True, True, True, True]  # at least 1 of each
    assert bal.is_done(np.array([1]), np.array([1]), group_size=1).tolist() == [False]


def test_first_round_is_full_even_above_the_cap_and_covers_the_group():
    seq = ReinforceAdaSeqPosAllocator(round_size=2, max_rollouts=8, inference_cap=1.0)
    first = seq.round_counts(np.zeros(3), np.zeros(3), 4, 0, 12)
    assert first.tolist() == [4, 4, 4]  # max(round_size, group_size)
    assert seq.round_counts(np.zeros(3), first, 4, 12, 12).tolist() == [0, 0, 0]  # cap 1.0 x 12 reached
    wide = ReinforceAdaSeqPosAllocator(round_size=8, max_rollouts=8, inference_cap=1.0)
    assert wide.round_counts(np.zeros(2), np.zeros(2), 4, 0, 8).tolist() == [8, 8]  # 16 > cap 8: still full


def test_round_counts_respects_max_rollouts():
    seq = ReinforceAdaSeqPosAllocator(round_size=8, max_rollouts=20)
    counts = seq.round_counts(np.zeros(3), np.array([16, 19, 20]), 8, 55, 24)
    assert counts.tolist() == [4, 1, 0]


def test_trim_order_unmixed_then_fewer_successes_then_fewer_attempts_then_index():
    bal = ReinforceAdaSeqBalanceAllocator(round_size=4, max_rollouts=32, inference_cap=2.0)
    # n = 8: done at 4 + 4. Prompt 0 mixed (1 of 8), 1 all-correct, 2 all-wrong (16 tries), 3 all-wrong (8 tries).
    s, a = np.array([1, 8, 0, 0]), np.array([8, 8, 16, 8])
    generated, budget = 40, 32  # room 64 - 40 = 24 would hold every round; 10 does not
    assert bal.round_counts(s, a, 8, generated, budget).tolist() == [4, 4, 4, 4]
    assert bal.round_counts(s, a, 8, 54, budget).tolist() == [0, 2, 4, 4]  # room 10: 3, then 2, then 1, then 0
    assert bal.round_counts(s, a, 8, 61, budget).tolist() == [0, 0, 0, 3]


def test_rounds_stop_when_nothing_can_be_scored():
    # NaN rewards leave attempts at 0: the loop must still end, by the cap.
    seq = ReinforceAdaSeqBalanceAllocator(round_size=4, max_rollouts=64, inference_cap=3.0)
    generated, rounds = 0, 0
    while (counts := seq.round_counts(np.zeros(2), np.zeros(2), 4, generated, 8)).sum() > 0:
        generated += int(counts.sum())
        rounds += 1
    assert generated == 24 and rounds == 3


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(SEQ_NAMES),
    round_size=st.integers(1, 8),
    extra=st.integers(0, 24),
    cap=st.floats(1.0, 5.0),
    num_prompts=st.integers(1, 12),
    data=st.data(),
)
def test_caps_are_never_exceeded(name, round_size, extra, cap, num_prompts, data):
    max_rollouts = max(2, round_size + extra)  # the base class asks max_rollouts >= min_rollouts = 2
    group_size = data.draw(st.integers(1, max_rollouts), label="group_size")
    rates = st.lists(st.sampled_from([0.0, 0.05, 0.3, 0.5, 0.9, 1.0]), min_size=num_prompts, max_size=num_prompts)
    p = np.array(data.draw(rates, label="p"))
    seed = data.draw(st.integers(0, 2**16), label="seed")
    allocator = get_allocator(name, round_size=round_size, max_rollouts=max_rollouts, inference_cap=cap)
    reward_rng = np.random.default_rng(seed)
    out = sample_in_rounds(
        allocator,
        lambda c: reward_rng.random(int(c.sum())) < np.repeat(p, c),
        num_prompts,
        group_size,
        np.random.default_rng(seed + 1),
    )
    budget = group_size * num_prompts
    first = max(round_size, group_size) * num_prompts
    attempts = np.bincount(out.group_ids, minlength=num_prompts)
    assert np.all(attempts <= max_rollouts) and np.all(attempts >= max(round_size, group_size))
    assert len(out.group_ids) <= max(first, math.floor(cap * budget + 1e-9))
    for later in out.round_counts[1:]:
        assert np.all(later <= round_size)
    # Prompts that stopped early met their exit rule; the others hit N_max or the cap.
    assert np.all(out.done | (attempts == max_rollouts) | (len(out.group_ids) + 1 > cap * budget))
    # Selection: exactly n per prompt, distinct, sorted by prompt then index.
    picked = out.group_ids[out.selected]
    assert np.bincount(picked, minlength=num_prompts).tolist() == [group_size] * num_prompts
    assert len(np.unique(out.selected)) == len(out.selected)
    assert np.all(np.diff(picked) >= 0) and np.all(np.diff(out.selected)[np.diff(picked) == 0] > 0)


@settings(max_examples=200, deadline=None)
@given(
    successes=st.lists(st.integers(0, 40), min_size=1, max_size=10),
    data=st.data(),
)
def test_round_counts_direct_bounds(successes, data):
    s = np.array(successes)
    a = s + np.array(data.draw(st.lists(st.integers(0, 40), min_size=len(s), max_size=len(s))))
    round_size = data.draw(st.integers(1, 8))
    max_rollouts = max(2, round_size, data.draw(st.integers(1, 48)))
    group_size = data.draw(st.integers(1, max_rollouts))
    cap = data.draw(st.floats(1.0, 4.0))
    generated = int(a.sum()) if a.sum() > 0 else 1
    budget = group_size * len(s)
    seq = ReinforceAdaSeqBalanceAllocator(round_size=round_size, max_rollouts=max_rollouts, inference_cap=cap)
    counts = seq.round_counts(s, a, group_size, generated, budget)
    assert counts.dtype == np.int64 and np.all(counts >= 0)
    assert np.all(counts <= round_size) and np.all(a + counts <= np.maximum(a, max_rollouts))
    assert np.all(counts[seq.is_done(s, a, group_size)] == 0)
    assert generated + counts.sum() <= max(generated, math.floor(cap * budget + 1e-9))


# ---- selection ------------------------------------------------------------------------------------------------------
def _pool(kinds: list[tuple[int, int]], rng_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Completions for prompts with (correct, incorrect) counts, shuffled so order carries no information."""
    success, groups = [], []
    for g, (c, f) in enumerate(kinds):
        success += [True] * c + [False] * f
        groups += [g] * (c + f)
    perm = np.random.default_rng(rng_seed).permutation(len(success))
    return np.array(success)[perm], np.array(groups)[perm]


@settings(max_examples=200, deadline=None)
@given(
    group_size=st.integers(1, 9),
    kinds=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_select_exactly_n_and_balanced_when_possible(group_size, kinds, seed):
    kinds = [(c, f + max(0, group_size - c - f)) for c, f in kinds]  # every prompt has >= n completions
    success, groups = _pool(kinds, seed)
    seq = ReinforceAdaSeqBalanceAllocator(max_rollouts=64)
    picked = seq.select(success, groups, len(kinds), group_size, np.random.default_rng(seed))
    for g, (c, f) in enumerate(kinds):
        mine = picked[groups[picked] == g]
        assert len(mine) == group_size
        k = int(success[mine].sum())
        want = min(c, max(group_size // 2, group_size - f))
        assert k == want
        if c >= group_size // 2 and f >= group_size - group_size // 2:  # both kinds suffice: floor / ceil half
            assert k == group_size // 2
    assert np.all(np.diff(groups[picked]) >= 0)


def test_select_is_seeded_and_not_first_come():
    success, groups = _pool([(10, 10), (3, 17), (17, 3)])
    seq = ReinforceAdaSeqPosAllocator()
    a = seq.select(success, groups, 3, 4, np.random.default_rng(7))
    b = seq.select(success, groups, 3, 4, np.random.default_rng(7))
    c = seq.select(success, groups, 3, 4, np.random.default_rng(8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Uniform within each kind: over many seeds every correct completion of prompt 0 is picked ~2/10 of the time.
    correct0 = np.flatnonzero(success & (groups == 0))
    hits = np.zeros(len(success))
    trials = 2000
    for seed in range(trials):
        hits[seq.select(success, groups, 3, 4, np.random.default_rng(seed))] += 1
    freq = hits[correct0] / trials
    assert np.all(np.abs(freq - 0.2) < 0.04), freq  # first-come would give [1, 1, 0, ...]


def test_select_refuses_short_prompts_and_float_success():
    seq = ReinforceAdaSeqBalanceAllocator()
    with pytest.raises(ValueError, match=r"prompts \[1\] have \[2\] completions, fewer than group_size=4"):
        seq.select(np.ones(6, dtype=bool), np.array([0, 0, 0, 0, 1, 1]), 2, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="is_success"):
        seq.select(np.array([1.0, 0.0, 1.0, 0.0]), np.array([0, 0, 0, 0]), 1, 2, np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        seq.select(np.ones(4, dtype=bool), np.zeros(4, dtype=np.int64), 1, 2, 0)


def test_select_balanced_subset_of_a_seq_balance_batch():
    # A hard prompt (1 success in 32) keeps its one success; a mid one gets 2 + 2.
    bal = ReinforceAdaSeqBalanceAllocator()
    success, groups = _pool([(1, 31), (9, 7)])
    picked = bal.select(success, groups, 2, 4, np.random.default_rng(0))
    assert [int(success[picked][groups[picked] == g].sum()) for g in (0, 1)] == [1, 2]


# ---- doctests -------------------------------------------------------------------------------------------------------
def test_doctests():
    result = doctest.testmod(sequential, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_exports():
    assert {
        "SequentialAllocator",
        "ReinforceAdaSeqPosAllocator",
        "ReinforceAdaSeqBalanceAllocator",
        "is_success",
        "dynamic_sampling_keep",
    } <= set(sequential.__all__)
    assert ReinforceAdaSeqPosAllocator.name == "reinforce_ada_seq_pos"
    assert ReinforceAdaSeqBalanceAllocator.name == "reinforce_ada_seq_balance"
