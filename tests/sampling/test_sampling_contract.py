"""One contract, every sampling procedure the trainer can build (``trl_adaptive/sampling``), on NumPy only.

Every registered allocator planned ahead and under dynamic sampling, CERO's pacing, the pilot round, Reinforce-Ada
Seq, Pilot-Commit, each driven by :class:`BatchRun` as the trainer drives it (1, 2 and 4 ranks, so rounds get padded),
on binary and on shaped rewards. Per step: exactly the budget is trained, no prompt gets more than max_rollouts in a
batch, indices are valid and distinct; the same seeds give the same batch; state moves only in ``end_step`` and a
JSON round trip of it reproduces the next step; an allocator's weights reach every prompt it allocated; completions
that fill a dynamic-sampling batch carry weight 0.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from helpers.allocation import WeightedUniform

from trl_adaptive.allocation import Allocation, BayesKnapsackAllocator
from trl_adaptive.sampling import (
    BatchContext,
    BatchRecord,
    BatchRun,
    CeroPacing,
    DynamicSampling,
    Pilot,
    PilotCommit,
    PlanAhead,
    Procedure,
    Round,
    dynamic_sampling_keep,
    is_success,
    pad_round,
)
from trl_adaptive.sampling.dynamic import STOP_OUT_OF_PROMPTS, STOP_ROUND_LIMIT
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import as_procedure, get_allocator, registered_allocators, registered_strategies

NUM_PROMPTS, BATCH, N = 96, 8, 8
BUDGET = BATCH * N
SMALL = {"cero": {"max_rollouts": 16}}  # every allocator with its defaults, bounded for a batch of 8 x 8


def _plan(name: str) -> Procedure:
    return PlanAhead(get_allocator(name, **SMALL.get(name, {})))


PROCEDURES: dict[str, Callable[[], Procedure]] = {}
for _name in registered_allocators():
    PROCEDURES[f"plan:{_name}"] = lambda name=_name: _plan(name)
    PROCEDURES[f"dynamic:{_name}"] = lambda name=_name: DynamicSampling(_plan(name), 3)
for _name in registered_strategies():  # every name as the config builds it: a new strategy is in the contract
    PROCEDURES[f"name:{_name}"] = lambda name=_name: as_procedure(name, **SMALL.get(name, {}))
PROCEDURES |= {
    "cero_pacing": lambda: CeroPacing(get_allocator("cero", max_rollouts=16, eta_mu=0.5)),
    "dynamic:cero_pacing": lambda: DynamicSampling(CeroPacing(get_allocator("cero", max_rollouts=16, eta_mu=0.5))),
    "pilot": lambda: Pilot(get_allocator("bayes_knapsack"), 2),
    "dynamic:pilot": lambda: DynamicSampling(Pilot(get_allocator("bayes_knapsack"), 2)),
    "seq_pos": lambda: as_procedure("reinforce_ada_seq_pos", round_size=4, max_rollouts=16),
    "seq_balance": lambda: as_procedure("reinforce_ada_seq_balance", round_size=4, max_rollouts=16),
    "pilot_commit": lambda: PilotCommit(pilot_rollouts=2, max_rollouts=16),
    "dynamic:pilot_commit": lambda: DynamicSampling(PilotCommit(pilot_rollouts=2, max_rollouts=16)),
}


class World:
    """A prompt population and a store: rewards are Bernoulli(p_i), or shaped (0.5 + noise for a success)."""

    def __init__(self, seed: int, shaped: bool = False) -> None:
        rng = np.random.default_rng(seed)
        self.p = np.concatenate([np.zeros(24), np.ones(24), rng.uniform(0.1, 0.9, NUM_PROMPTS - 48)])[
            rng.permutation(NUM_PROMPTS)
        ]
        self.ids = np.arange(1000, 1000 + NUM_PROMPTS)  # sparse ids: positions are not ids
        self.shaped, self.seed = shaped, seed
        self.store = PromptStatistics(success_threshold=0.5)
        self.reward_rng = np.random.default_rng([seed, 1])

    def context(self, step: int) -> BatchContext:
        batch = self.ids[(step * BATCH) % NUM_PROMPTS :][:BATCH]
        calls = iter(range(100))

        def draw_prompts(exclude: np.ndarray, number: int) -> np.ndarray:
            candidates = self.ids[~np.isin(self.ids, exclude)]
            rng = np.random.default_rng([self.seed, step, 7, next(calls)])
            return np.sort(rng.choice(candidates, size=min(number, len(candidates)), replace=False))

        rng = np.random.default_rng([self.seed, step, 1])
        return BatchContext(batch, BUDGET, N, 0.5, self.store.batch, draw_prompts, rng)

    def rewards(self, request: Round) -> np.ndarray:
        p = self.p[np.repeat(request.prompt_ids, request.counts) - 1000]
        success = self.reward_rng.random(len(p)) < p
        if not self.shaped:
            return success.astype(np.float64)
        return np.where(success, 0.5, 0.0) + 0.25 * self.reward_rng.random(len(p))  # variance inside each kind


def run_step(procedure: Procedure, world: World, step: int, ranks: int, end: bool = True):
    run = BatchRun(procedure, world.context(step), round_multiple=ranks)
    while not run.finished:
        request, jobs = run.next_round()
        assert len(jobs) % ranks == 0  # every rank generates as many
        run.observe(jobs, world.rewards(request))
    outcome = run.outcome()
    if end:
        procedure.end_step(outcome)
        world.store.update(outcome.record.prompt_ids[outcome.record.group_ids], outcome.record.rewards)
    return outcome


def state_of(procedure: Procedure) -> str:
    """The procedure's state tree (its allocators' included), as the trainer writes it."""
    return json.dumps(procedure.state_dict(), sort_keys=True, allow_nan=False)


def load_state(procedure: Procedure, text: str) -> None:
    procedure.load_state_dict(json.loads(text))


def same(a, b) -> None:
    for field in ("prompt_ids", "group_ids", "rewards", "success_rates"):
        np.testing.assert_array_equal(getattr(a.record, field), getattr(b.record, field))
    np.testing.assert_array_equal(a.selected, b.selected)
    assert (a.record.weights is None) == (b.record.weights is None)
    if a.record.weights is not None:
        np.testing.assert_array_equal(a.record.weights, b.record.weights)


@pytest.mark.parametrize("ranks", [1, 4])
@pytest.mark.parametrize("shaped", [False, True], ids=["binary", "shaped"])
@pytest.mark.parametrize("name", sorted(PROCEDURES))
def test_procedure_contract(name, shaped, ranks):
    procedure, world = PROCEDURES[name](), World(seed=3, shaped=shaped)
    procedure.check(BATCH, BUDGET, N)
    for step in range(5):
        before = state_of(procedure)
        outcome = run_step(procedure, world, step, ranks, end=False)
        assert state_of(procedure) == before  # sampling a batch moves no state ...
        record = outcome.record
        assert len(outcome.selected) == BUDGET and len(np.unique(outcome.selected)) == BUDGET
        assert 0 <= outcome.selected.min() and outcome.selected.max() < len(record.rewards)
        assert np.all(record.counts() <= procedure.max_rollouts)
        assert np.all(outcome.trained_counts <= record.counts())
        np.testing.assert_array_equal(record.prompt_ids[:BATCH], world.context(step).prompt_ids)
        assert sum(record.round_sizes) == len(record.rewards)
        if isinstance(procedure, DynamicSampling):
            mixed = dynamic_sampling_keep(is_success(record.rewards, 0.5), record.group_ids, len(record.prompt_ids))
            filled = np.unique(outcome.trained_group_ids[~mixed[outcome.trained_group_ids]])
            if len(filled):  # filling completions add no gradient, whatever the reward's variance
                np.testing.assert_array_equal(record.weights[filled], 0.0)
        procedure.end_step(outcome)  # ... the step's end does, once
        world.store.update(record.prompt_ids[record.group_ids], record.rewards)


@pytest.mark.parametrize("name", sorted(PROCEDURES))
def test_same_seeds_same_batches_and_json_state_resumes_exactly(name):
    a, b = PROCEDURES[name](), PROCEDURES[name]()
    world_a, world_b = World(seed=5), World(seed=5)
    for step in range(3):
        same(run_step(a, world_a, step, 2), run_step(b, world_b, step, 2))
    resumed, world_c = PROCEDURES[name](), World(seed=5)
    load_state(resumed, state_of(a))
    world_c.store.load_state_dict(json.loads(json.dumps(world_a.store.state_dict())))
    world_c.reward_rng = copy.deepcopy(world_a.reward_rng)
    same(run_step(a, world_a, 3, 2), run_step(resumed, world_c, 3, 2))
    assert state_of(a) == state_of(resumed)


def test_round_procedures_are_config_names():
    for name in ("reinforce_ada_seq_pos", "reinforce_ada_seq_balance", "pilot_commit"):
        assert name in registered_strategies()
        assert type(as_procedure(name)).name == name


# -- weights: an allocator's weights scale its prompts' advantages under every procedure ------------------------------
@dataclass
class WeightedBayes(BayesKnapsackAllocator):
    """bayes_knapsack whose round two carries weights 1 + (prompt id mod 3)."""

    name: ClassVar[str] = "weighted-bayes-test"

    def allocate_remaining(self, stats, budget_left, already):
        allocation = super().allocate_remaining(stats, budget_left, already)
        return Allocation(allocation.counts, 1.0 + stats.prompt_ids % 3, prompt_ids=stats.prompt_ids)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PlanAhead(WeightedUniform(max_rollouts=16)),
        lambda: DynamicSampling(PlanAhead(WeightedUniform(max_rollouts=16))),
        lambda: Pilot(WeightedBayes(max_rollouts=16), 2),
        lambda: DynamicSampling(Pilot(WeightedBayes(max_rollouts=16), 2)),
    ],
    ids=["plan", "dynamic", "pilot", "dynamic-pilot"],
)
def test_allocator_weights_reach_every_allocated_prompt(make):
    procedure, world = make(), World(seed=11)
    for step in range(4):
        outcome = run_step(procedure, world, step, 2)
        record = outcome.record
        allocated = np.concatenate([a.prompt_ids for a in record.allocations])
        weights = record.weights[record.index_of(allocated)]
        expected = 1.0 + allocated % 3
        if isinstance(procedure, DynamicSampling):  # a filled group is zeroed on top
            trained = outcome.trained_counts[record.index_of(allocated)] > 0
            mixed = dynamic_sampling_keep(is_success(record.rewards, 0.5), record.group_ids, len(record.prompt_ids))
            expected = np.where(trained & ~mixed[record.index_of(allocated)], 0.0, expected)
        np.testing.assert_array_equal(weights, expected)


# -- rounds rounded up to the ranks -----------------------------------------------------------------------------------
def test_padding_goes_to_the_smallest_groups_within_max_rollouts():
    record = BatchRecord(0.5)
    counts = pad_round(Round(np.array([1, 2, 3]), np.array([8, 2, 4])), record, short=2, max_rollouts=8)
    assert counts.tolist() == [8, 4, 4]  # the old rule gave [9, 3, 4]: above N_max, and not the smallest first
    record.join(np.array([1, 2, 3]), PromptStatistics().batch)
    record.add(np.array([1] * 6), np.zeros(6))  # prompt 2 already has 6 in this batch
    counts = pad_round(Round(np.array([1, 2, 3]), np.array([4, 2, 2])), record, short=4, max_rollouts=8)
    assert counts.tolist() == [5, 2, 5]  # totals 4, 8, 2 -> the fewest first, prompt 2 is full
    with pytest.raises(RuntimeError, match="max_rollouts=8"):
        pad_round(Round(np.array([1]), np.array([8])), BatchRecord(0.5), short=1, max_rollouts=8)


# -- the guards: every path that hands counts to a sampler is checked -------------------------------------------------
class AsksTooMuch(Procedure):
    max_rollouts = 4

    def rounds(self, ctx, record):
        yield Round(ctx.prompt_ids, np.full(len(ctx.prompt_ids), 5))
        return record.completions_of(ctx.prompt_ids)


class TrainsTooLittle(Procedure):
    max_rollouts = 16

    def rounds(self, ctx, record):
        yield Round(ctx.prompt_ids, np.full(len(ctx.prompt_ids), N), final=True)
        return record.completions_of(ctx.prompt_ids)[:-1]


@pytest.mark.parametrize(("procedure", "message"), [(AsksTooMuch(), "above max_rollouts"), (TrainsTooLittle(), "63")])
def test_a_procedure_outside_the_contract_fails_at_the_boundary(procedure, message):
    with pytest.raises(AssertionError, match=message):
        run_step(procedure, World(seed=0), 0, 1)


def test_allocate_remaining_and_allocate_paced_pass_the_guard(monkeypatch):
    stats = PromptStatistics().batch(np.arange(4))
    bayes = BayesKnapsackAllocator(max_rollouts=8)
    monkeypatch.setattr(bayes, "_solve", lambda a, b, total, lower: np.array([9, 5, 1, 1]))  # 9 > N_up, 1 < N_low
    with pytest.raises(AssertionError, match="outside its bounds"):
        bayes.allocate_remaining(stats, 8, np.full(4, 2))
    cero = get_allocator("cero", max_rollouts=8)
    monkeypatch.setattr(cero, "_fill", lambda order, budget: np.array([16, 0, 0, 0]))
    with pytest.raises(AssertionError, match="outside its bounds"):
        cero.allocate_paced(stats, 16, num_sampled=4)


@pytest.mark.parametrize("name", ["dynamic:uniform", "dynamic:knapsack", "dynamic:reinforce_ada_est", "dynamic:pilot"])
def test_filled_completions_carry_weight_zero_even_with_shaped_rewards(name):
    """Every prompt always solved, rewards shaped: each group is 'all correct' yet has reward variance, so only a
    zero weight (not the success rule) keeps the filling completions from moving the policy."""
    procedure, world = PROCEDURES[name](), World(seed=2, shaped=True)
    world.p[:] = 1.0
    outcome = run_step(procedure, world, 0, 2)
    trained = np.unique(outcome.trained_group_ids)
    assert outcome.record.metrics["dynamic_sampling/filled"] == BUDGET
    assert np.ptp(outcome.record.rewards) > 0  # the fill has reward variance
    np.testing.assert_array_equal(outcome.record.weights[trained], 0.0)


@pytest.mark.parametrize(
    ("max_rounds", "stop"), [(100_000, STOP_OUT_OF_PROMPTS), (2, STOP_ROUND_LIMIT)], ids=["out_of_prompts", "limit"]
)
def test_dynamic_sampling_logs_the_rounds_it_took_and_why_it_stopped(max_rounds, stop):
    """Every prompt solved: every group is dropped and prompts are drawn until the data runs out (96 prompts, about 8
    drawn a round) or the round limit is reached; the rounds that ran are logged, not the limit."""
    procedure, world = DynamicSampling(_plan("uniform"), max_rounds), World(seed=3)
    world.p[:] = 1.0
    outcome = run_step(procedure, world, 0, 1)
    extra = outcome.record.metrics["dynamic_sampling/extra_rounds"]
    assert extra == (2 if max_rounds == 2 else (NUM_PROMPTS - BATCH) // BATCH)
    assert outcome.record.notes["dynamic_sampling_stop"] == stop
    assert outcome.record.metrics["dynamic_sampling/filled"] == BUDGET


def test_pilot_commit_under_dynamic_sampling_evicts_the_batchs_solved_prompts():
    """The drawn prompts' pilot must not overwrite the batch's evictions: every solved prompt of the step goes."""
    procedure, world = DynamicSampling(PilotCommit(pilot_rollouts=2, max_rollouts=16)), World(seed=4)
    world.p[:] = 1.0  # every prompt solved: the batch is dropped, prompts are drawn, and all are evicted
    outcome = run_step(procedure, world, 0, 1)
    assert len(outcome.record.round_sizes) > 2  # extra rounds happened
    batch = world.context(0).prompt_ids
    assert set(batch.tolist()) <= procedure.inner.evicted
    inner = json.loads(state_of(procedure))["children"]["inner"]
    assert inner["type"] == "PilotCommit" and inner["state"]["evicted"] == sorted(procedure.inner.evicted)
