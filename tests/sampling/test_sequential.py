"""Tests of Reinforce-Ada Seq's procedures (``trl_adaptive/sampling/sequential.py``).

Exit rules on scripted success sequences driven through :func:`trl_adaptive.sampling.drive`, the per-prompt maximum
and the batch's inference cap (hypothesis), the selection (exactly n per prompt, balanced where possible, uniform
within each kind, seeded), the strategy registry and the procedure contract, and the validation messages. The success
rule and DAPO's filter they share are tested in test_rules.py; the module's docstring examples run in
tests/test_doctests.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trl_adaptive.sampling.sequential as sequential
from trl_adaptive.allocation import Allocator
from trl_adaptive.sampling import (
    BatchContext,
    DynamicSampling,
    Outcome,
    Procedure,
    ReinforceAdaSeqBalance,
    ReinforceAdaSeqPos,
    Round,
    Sequential,
    drive,
    is_success,
)
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import as_procedure, registered_allocators, registered_strategies, strategy

SEQ_NAMES = ("reinforce_ada_seq_pos", "reinforce_ada_seq_balance")


def scripted(scripts: list[str]):
    """A ``generate`` for :func:`drive` reading each prompt's fixed script (prompt id i reads ``scripts[i]``, in the
    order of its completions): reward 1.0 for '1' (a success at threshold 1.0), 0.0 for '0'."""
    cursor = [0] * len(scripts)

    def generate(request: Round, jobs: np.ndarray) -> np.ndarray:
        out = []
        for i, c in zip(request.prompt_ids.tolist(), request.counts.tolist(), strict=True):
            chunk = scripts[i][cursor[i] : cursor[i] + c]
            assert len(chunk) == c, f"prompt {i} asked for more completions than its script holds"
            out += [1.0 if ch == "1" else 0.0 for ch in chunk]
            cursor[i] += c
        return np.array(out, dtype=np.float64)

    return generate


def no_draws(exclude: np.ndarray, number: int) -> np.ndarray:
    raise AssertionError("Reinforce-Ada Seq samples only the batch's own prompts")


def run(procedure: Sequential, generate, num_prompts: int, group_size: int, rng: np.random.Generator) -> Outcome:
    """One batch of prompts 0..M-1 (never seen), budget n M, success at reward >= 1.0."""
    ids = np.arange(num_prompts, dtype=np.int64)
    ctx = BatchContext(ids, group_size * num_prompts, group_size, 1.0, PromptStatistics().batch, no_draws, rng)
    return drive(procedure, ctx, generate)


def attempts_of(outcome: Outcome, num_prompts: int) -> list[int]:
    return np.bincount(outcome.record.group_ids, minlength=num_prompts).tolist()


def round_counts_of(outcome: Outcome, num_prompts: int) -> list[np.ndarray]:
    """The counts per prompt of every round, from the record's completions split by ``round_sizes``."""
    ends = np.cumsum(outcome.record.round_sizes)[:-1]
    return [np.bincount(g, minlength=num_prompts) for g in np.split(outcome.record.group_ids, ends)]


def done_of(procedure: Sequential, outcome: Outcome, group_size: int) -> np.ndarray:
    record = outcome.record
    return procedure.is_done(record.successes(), record.attempts(), group_size)


# ---- construction, registry, contract -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SEQ_NAMES)
def test_registry_names_construct(name):
    assert name in registered_strategies() and name not in registered_allocators()
    procedure = as_procedure(name, round_size=4, max_rollouts=16, inference_cap=2.5)
    assert isinstance(procedure, Sequential) and procedure.name == name and type(procedure) is strategy(name).procedure
    assert (procedure.round_size, procedure.max_rollouts, procedure.inference_cap) == (4, 16, 2.5)
    default = as_procedure(name)
    assert (default.round_size, default.max_rollouts, default.inference_cap) == (8, 32, 4.0)
    assert as_procedure("reinforce_ada_seq_pos", min_successes=3).min_successes == 3


@pytest.mark.parametrize("name", SEQ_NAMES)
def test_seq_is_a_procedure_that_selects_not_an_allocator(name):
    # Seq plans nothing ahead: it is a round procedure that trains a selection, baselined on all it generated.
    procedure = as_procedure(name)
    assert isinstance(procedure, Procedure) and not isinstance(procedure, Allocator)
    assert not hasattr(procedure, "allocate") and procedure.allocator is None
    assert not procedure.trains_all_generated and procedure.baseline_from_all
    with pytest.raises(ValueError, match="dynamic_sampling"):
        DynamicSampling(as_procedure(name))


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
        ({"max_rollouts": 1, "round_size": 1}, "max_rollouts"),
        ({"min_successes": 0}, "min_successes"),
        ({"min_rollouts": 1}, "min_rollouts"),  # no such field: refused by name, not with a bare TypeError
    ],
)
def test_constructor_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        as_procedure("reinforce_ada_seq_pos", **kwargs)


@pytest.mark.parametrize("name", SEQ_NAMES)
def test_group_size_above_max_rollouts_is_refused(name):
    procedure = as_procedure(name, round_size=4, max_rollouts=8)
    with pytest.raises(ValueError, match="group_size=16 exceeds max_rollouts=8"):
        procedure.check(2, 32, 16)  # at config time
    with pytest.raises(ValueError, match="group_size=16 exceeds max_rollouts=8"):
        procedure.round_counts(np.zeros(2), np.zeros(2), 16, 0, 32)
    with pytest.raises(ValueError, match="group_size=16 exceeds max_rollouts=8"):
        procedure.select(np.ones(32, dtype=bool), np.repeat([0, 1], 16), 2, 16, np.random.default_rng(0))


def test_round_counts_validates_its_inputs():
    seq = ReinforceAdaSeqBalance()
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
    pos = ReinforceAdaSeqPos(round_size=4, max_rollouts=16)
    scripts = [
        "1000" + "0" * 12,  # success in round 1: done after 4
        "0000" + "0010" + "0" * 8,  # success in round 2: done after 8
        "0" * 16,  # never: stops at max_rollouts = 16 unfinished
        "1" * 16,  # solved: done after round 1
        "0000" + "0000" + "0001" + "0000",  # success at the last position of round 3: done after 12
    ]
    out = run(pos, scripted(scripts), 5, 4, np.random.default_rng(0))
    assert attempts_of(out, 5) == [4, 8, 16, 4, 12]
    assert done_of(pos, out, 4).tolist() == [True, True, False, True, True]
    assert out.record.metrics["rounds/prompts_unfinished"] == 1.0
    assert out.record.metrics["rounds/prompts_finished"] == 4.0
    assert out.record.round_sizes == [20, 12, 8, 4]
    assert [c.tolist() for c in round_counts_of(out, 5)] == [
        [4, 4, 4, 4, 4],
        [0, 4, 4, 0, 4],
        [0, 0, 4, 0, 4],
        [0, 0, 4, 0, 0],
    ]


def test_seq_pos_with_k_successes():
    pos = ReinforceAdaSeqPos(round_size=4, max_rollouts=16, min_successes=2)
    scripts = ["0100" + "0000" + "1000" + "0000", "1100" + "0" * 12, "1000" + "0" * 12]
    out = run(pos, scripted(scripts), 3, 4, np.random.default_rng(0))
    assert attempts_of(out, 3) == [12, 4, 16]
    assert done_of(pos, out, 4).tolist() == [True, True, False]


def test_seq_balance_exit_rule_on_scripts():
    bal = ReinforceAdaSeqBalance(round_size=4, max_rollouts=16)  # n = 4: done at >= 2 and >= 2
    scripts = [
        "1010" + "1" * 12,  # 2 + 2 in round 1
        "1" * 16,  # never fails: N_max, unfinished
        "0" * 16,  # never succeeds: N_max, unfinished
        "0000" + "0100" + "0100" + "0000",  # second success in round 3
        "1110" + "1110" + "0000",  # second failure in round 2
    ]
    out = run(bal, scripted([s.ljust(16, "0") for s in scripts]), 5, 4, np.random.default_rng(0))
    assert attempts_of(out, 5) == [4, 16, 16, 12, 8]
    assert done_of(bal, out, 4).tolist() == [True, False, False, True, True]
    assert out.record.metrics["rounds/prompts_unfinished"] == 2.0


def test_seq_balance_threshold_is_floor_half_at_least_one():
    bal = ReinforceAdaSeqBalance()
    s, a = np.array([2, 2, 1, 1]), np.array([4, 5, 2, 3])
    assert bal.is_done(s, a, group_size=5).tolist() == [True, True, False, False]  # floor(5/2) = 2 of each
    assert bal.is_done(s, a, group_size=1).tolist() == [True, True, True, True]  # at least 1 of each
    assert bal.is_done(np.array([1]), np.array([1]), group_size=1).tolist() == [False]


def test_first_round_is_full_even_above_the_cap_and_covers_the_group():
    seq = ReinforceAdaSeqPos(round_size=2, max_rollouts=8, inference_cap=1.0)
    first = seq.round_counts(np.zeros(3), np.zeros(3), 4, 0, 12)
    assert first.tolist() == [4, 4, 4]  # max(round_size, group_size)
    assert seq.round_counts(np.zeros(3), first, 4, 12, 12).tolist() == [0, 0, 0]  # cap 1.0 x 12 reached
    wide = ReinforceAdaSeqPos(round_size=8, max_rollouts=8, inference_cap=1.0)
    assert wide.round_counts(np.zeros(2), np.zeros(2), 4, 0, 8).tolist() == [8, 8]  # 16 > cap 8: still full


def test_round_counts_respects_max_rollouts():
    seq = ReinforceAdaSeqPos(round_size=8, max_rollouts=20)
    counts = seq.round_counts(np.zeros(3), np.array([16, 19, 20]), 8, 55, 24)
    assert counts.tolist() == [4, 1, 0]


def test_trim_order_unmixed_then_fewer_successes_then_fewer_attempts_then_index():
    bal = ReinforceAdaSeqBalance(round_size=4, max_rollouts=32, inference_cap=2.0)
    # n = 8: done at 4 + 4. Prompt 0 mixed (1 of 8), 1 all-correct, 2 all-wrong (16 tries), 3 all-wrong (8 tries).
    s, a = np.array([1, 8, 0, 0]), np.array([8, 8, 16, 8])
    generated, budget = 40, 32  # room 64 - 40 = 24 would hold every round; 10 does not
    assert bal.round_counts(s, a, 8, generated, budget).tolist() == [4, 4, 4, 4]
    assert bal.round_counts(s, a, 8, 54, budget).tolist() == [0, 2, 4, 4]  # room 10: 3, then 2, then 1, then 0
    assert bal.round_counts(s, a, 8, 61, budget).tolist() == [0, 0, 0, 3]


def test_rounds_stop_when_nothing_can_be_scored():
    # NaN rewards leave attempts at 0: the loop must still end, by the cap.
    seq = ReinforceAdaSeqBalance(round_size=4, max_rollouts=64, inference_cap=3.0)
    generated, rounds = 0, 0
    while (counts := seq.round_counts(np.zeros(2), np.zeros(2), 4, generated, 8)).sum() > 0:
        generated += int(counts.sum())
        rounds += 1
    assert generated == 24 and rounds == 3
    # The same through the driver: unscored (NaN) completions, three rounds up to the cap 3 x 8, n selected each.
    out = run(seq, lambda request, jobs: np.full(len(jobs), np.nan), 2, 4, np.random.default_rng(0))
    assert out.record.round_sizes == [8, 8, 8] and out.trained_counts.tolist() == [4, 4]
    assert out.record.metrics["rounds/prompts_unfinished"] == 2.0


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
    max_rollouts = max(2, round_size + extra)  # Seq asks max_rollouts >= 2
    group_size = data.draw(st.integers(1, max_rollouts), label="group_size")
    rates = st.lists(st.sampled_from([0.0, 0.05, 0.3, 0.5, 0.9, 1.0]), min_size=num_prompts, max_size=num_prompts)
    p = np.array(data.draw(rates, label="p"))
    seed = data.draw(st.integers(0, 2**16), label="seed")
    procedure = as_procedure(name, round_size=round_size, max_rollouts=max_rollouts, inference_cap=cap)
    reward_rng = np.random.default_rng(seed)

    def generate(request: Round, jobs: np.ndarray) -> np.ndarray:
        p_jobs = np.repeat(p[request.prompt_ids], request.counts)
        return (reward_rng.random(len(p_jobs)) < p_jobs).astype(np.float64)

    out = run(procedure, generate, num_prompts, group_size, np.random.default_rng(seed + 1))
    record = out.record
    budget = group_size * num_prompts
    first = max(round_size, group_size) * num_prompts
    attempts = np.bincount(record.group_ids, minlength=num_prompts)
    assert np.all(attempts <= max_rollouts) and np.all(attempts >= max(round_size, group_size))
    assert len(record.group_ids) <= max(first, math.floor(cap * budget + 1e-9))
    for later in round_counts_of(out, num_prompts)[1:]:
        assert np.all(later <= round_size)
    # Prompts that stopped early met their exit rule; the others hit N_max or the cap.
    done = done_of(procedure, out, group_size)
    assert np.all(done | (attempts == max_rollouts) | (len(record.group_ids) + 1 > cap * budget))
    assert record.metrics["rounds/prompts_unfinished"] == float((~done).sum())
    # Selection: exactly n per prompt, distinct; the outcome is Seq's select over all the batch's completions.
    assert out.trained_counts.tolist() == [group_size] * num_prompts
    assert len(out.selected) == budget and np.all(np.diff(out.selected) > 0)
    success = is_success(record.rewards, 1.0)
    again = procedure.select(success, record.group_ids, num_prompts, group_size, np.random.default_rng(seed + 1))
    np.testing.assert_array_equal(np.sort(again), out.selected)
    # select itself returns them sorted by prompt, then index.
    picked = record.group_ids[again]
    assert np.all(np.diff(picked) >= 0) and np.all(np.diff(again)[np.diff(picked) == 0] > 0)


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
    seq = ReinforceAdaSeqBalance(round_size=round_size, max_rollouts=max_rollouts, inference_cap=cap)
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
    seq = ReinforceAdaSeqBalance(max_rollouts=64)
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
    seq = ReinforceAdaSeqPos()
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
    seq = ReinforceAdaSeqBalance()
    with pytest.raises(ValueError, match=r"prompts \[1\] have \[2\] completions, fewer than group_size=4"):
        seq.select(np.ones(6, dtype=bool), np.array([0, 0, 0, 0, 1, 1]), 2, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="is_success"):
        seq.select(np.array([1.0, 0.0, 1.0, 0.0]), np.array([0, 0, 0, 0]), 1, 2, np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        seq.select(np.ones(4, dtype=bool), np.zeros(4, dtype=np.int64), 1, 2, 0)


def test_select_balanced_subset_of_a_seq_balance_batch():
    # A hard prompt (1 success in 32) keeps its one success; a mid one gets 2 + 2.
    bal = ReinforceAdaSeqBalance()
    success, groups = _pool([(1, 31), (9, 7)])
    picked = bal.select(success, groups, 2, 4, np.random.default_rng(0))
    assert [int(success[picked][groups[picked] == g].sum()) for g in (0, 1)] == [1, 2]


def test_exports():
    import trl_adaptive.sampling as sampling
    import trl_adaptive.sampling.rules as rules

    assert {"Sequential", "ReinforceAdaSeqPos", "ReinforceAdaSeqBalance"} <= set(sequential.__all__)
    assert {"is_success", "dynamic_sampling_keep"} <= set(rules.__all__)
    assert {
        "Sequential",
        "ReinforceAdaSeqPos",
        "ReinforceAdaSeqBalance",
        "is_success",
        "dynamic_sampling_keep",
    } <= set(sampling.__all__)
    assert ReinforceAdaSeqPos.name == "reinforce_ada_seq_pos"
    assert ReinforceAdaSeqBalance.name == "reinforce_ada_seq_balance"
    assert {strategy(name).procedure for name in SEQ_NAMES} == {ReinforceAdaSeqPos, ReinforceAdaSeqBalance}
