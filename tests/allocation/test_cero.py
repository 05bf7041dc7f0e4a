"""CERO: hand-computed dual updates (once per step, in end_step), zero counts, the exact step budget, pacing, and a
state round trip."""

import json
import math

import numpy as np
import pytest

from trl_adaptive.allocation import CeroAllocator, PromptBatchStats
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import get_allocator


def _stats(ids: list[int], a: list[float], b: list[float]) -> PromptBatchStats:
    n = len(ids)
    return PromptBatchStats(
        prompt_ids=np.asarray(ids, dtype=np.int64),
        success_rate=np.full(n, np.nan),
        attempts=np.asarray(a) + np.asarray(b) - 2,
        successes=np.asarray(a) - 1,
        smoothed_rate=np.full(n, 1 / 17),
        beta_a=np.asarray(a, dtype=np.float64),
        beta_b=np.asarray(b, dtype=np.float64),
    )


def test_registered_with_documented_defaults():
    cero = get_allocator("cero")
    assert isinstance(cero, CeroAllocator) and cero.allows_zero
    defaults = (cero.min_rollouts, cero.max_rollouts, cero.eta, cero.eta_theta, cero.eta_mu, cero.num_epochs, cero.eps)
    assert defaults == (2, 16, 0.25, 1e-3, 0.005, 3, 1e-6)
    assert cero.mu == 0.0 and cero.theta == {}
    allocation = cero.allocate([0.5, 0.5], 16)
    assert allocation.weights is None  # CERO does not reweight advantages
    assert dict(allocation.metrics) == {"cero_mu": 0.0, "cero_prompts_tracked": 0.0}


def test_hand_computed_dual_updates():
    """Three steps on two prompts, every number written out. ``allocate`` decides; ``end_step`` moves the duals.

    Prompt 10 ~ Beta(1, 1): q = 1*1 / (2*3) = 1/6.   Prompt 20 ~ Beta(2, 3): q = 2*3 / (5*6) = 0.2.
    eta = 1 so c = q. K = 2, eta_theta = 0.01, eta_mu = 0.1, N_max = 4, budget B = 4 (one prompt per step).
    """
    cero = CeroAllocator(min_rollouts=2, max_rollouts=4, eta=1.0, eta_theta=0.01, eta_mu=0.1, num_epochs=2)
    stats = _stats([10, 20], a=[1, 2], b=[1, 3])

    # Step 1: fresh prompts start at theta = c: 1/6 and 0.2; mu = 0. Prompt 20 ranks first and takes the budget.
    step1 = cero.allocate(stats, 4)
    assert step1.counts.tolist() == [0, 4]
    # Deciding changes nothing: no dual, no price, no step, and the same decision when asked again.
    assert cero.theta == {} and cero.allocated == {} and cero.mu == 0.0 and cero.steps == 0
    assert cero.allocate(stats, 4).counts.tolist() == [0, 4]
    assert dict(step1.metrics) == {"cero_mu": 0.0, "cero_prompts_tracked": 0.0}  # as at decision time
    cero.end_step([step1])
    # s*(c) = ln(c / c) / c = 0 for both.
    # theta_20 = clip(0.2 - 0.01 * (4 - 0 / 2), eps, 0.2) = 0.16;  theta_10 = 1/6 - 0.01 * (0 - 0) = 1/6.
    # Demand at mu = 0: both theta > 0, D = 2 * 4 = 8;  mu = max(0, 0 + 0.1 * (8 - 4) / 4) = 0.1.
    assert cero.theta[20] == pytest.approx(0.16)
    assert cero.theta[10] == pytest.approx(1 / 6)
    assert cero.mu == pytest.approx(0.1)
    assert cero.allocated == {10: 0, 20: 4} and cero.steps == 1

    # Step 2: theta_10 = 0.1667 > theta_20 = 0.16, so prompt 10 is sampled now (diminishing returns for 20).
    step2 = cero.allocate(stats, 4)
    assert step2.counts.tolist() == [4, 0]
    assert step2.metrics["cero_mu"] == pytest.approx(0.1) and step2.metrics["cero_prompts_tracked"] == 2.0
    assert cero.theta[20] == pytest.approx(0.16) and cero.mu == pytest.approx(0.1)  # not moved by allocate
    cero.end_step([step2])
    # theta_10: s* = 0, theta = 1/6 - 0.01 * (4 - 0) = 0.126667.
    # theta_20: s* = ln(0.2 / 0.16) / 0.2 = 0.223144 / 0.2 = 1.115718;  s*/K = 0.557859;
    #           theta = 0.16 - 0.01 * (0 - 0.557859) = 0.165579 (a skipped prompt's price rises).
    # Demand: both theta > mu = 0.1, D = 8;  mu = 0.1 + 0.1 * (8 - 4) / 4 = 0.2.
    assert cero.theta[10] == pytest.approx(0.1266667, abs=1e-7)
    assert cero.theta[20] == pytest.approx(0.1655786, abs=1e-7)
    assert cero.theta[20] == pytest.approx(0.16 + 0.01 * math.log(1.25) / 0.2 / 2)
    assert cero.mu == pytest.approx(0.2)

    # Step 3: prompt 20 ranks first again. Now neither theta exceeds mu = 0.2: D = 0, and the price falls:
    # mu = max(0, 0.2 + 0.1 * (0 - 4) / 4) = 0.1.
    step3 = cero.allocate(stats, 4)
    assert step3.counts.tolist() == [0, 4]
    assert step3.metrics["cero_mu"] == pytest.approx(0.2)
    cero.end_step([step3])
    assert cero.mu == pytest.approx(0.1)
    assert cero.allocated == {10: 4, 20: 8} and cero.steps == 3


def test_end_step_moves_the_batch_then_only_sampled_later_prompts_and_mu_once():
    """One step, two allocations: the batch (prompts 10, 20) and prompts drawn later in the step (30, 40).

    Same constants as the hand-computed test. Every batch prompt moves (10 with its 0 completions); of the later
    prompts only 30, which was sampled, moves; 40 was drawn and given nothing, so it was never in the step. mu moves
    once, with the batch's demand D = 8 against its budget 4: mu = 0.1 * (8 - 4) / 4 = 0.1.
    """
    cero = CeroAllocator(min_rollouts=2, max_rollouts=4, eta=1.0, eta_theta=0.01, eta_mu=0.1, num_epochs=2)
    batch = cero.allocate(_stats([10, 20], a=[1, 2], b=[1, 3]), 4)
    later = cero.allocate(_stats([30, 40], a=[1, 1], b=[1, 1]), 4)  # equal duals: the lower position first
    assert batch.counts.tolist() == [0, 4] and later.counts.tolist() == [4, 0]
    assert batch.internals["demand"] == 8 and batch.budget == 4 and batch.prompt_ids.tolist() == [10, 20]
    cero.end_step([])  # a step without allocations changes nothing
    assert cero.steps == 0 and cero.theta == {}
    cero.end_step([batch, later])
    assert cero.allocated == {10: 0, 20: 4, 30: 4}  # 40 is not tracked
    assert cero.theta[10] == pytest.approx(1 / 6) and cero.theta[20] == pytest.approx(0.16)
    assert cero.theta[30] == pytest.approx(1 / 6 - 0.01 * 4)
    assert cero.mu == pytest.approx(0.1) and cero.steps == 1  # one update of mu for the whole step


def test_paced_allocation_changes_no_state_and_skipped_drawn_prompts_do_not_move():
    # Four prompts at 4/8 (Beta(5, 5): c = 0.25 * 25 / 110 = 0.0568), the sampler's two first, then two drawn ones.
    cero = CeroAllocator(max_rollouts=8)
    cero.mu = 0.01  # every prompt is wanted (theta = c > mu)
    stats = PromptBatchStats.from_success_rates([0.5] * 4)
    paced = cero.allocate_paced(stats, 24, num_sampled=2)
    assert paced.counts.tolist() == [8, 8, 8, 0]  # the sampler's first, then the first drawn one
    assert paced.weights is None and paced.budget == 24 and paced.metrics["cero_mu"] == 0.01
    assert cero.theta == {} and cero.mu == 0.01 and cero.steps == 0  # deciding changes nothing
    assert cero.allocate_paced(stats, 24, num_sampled=2).counts.tolist() == [8, 8, 8, 0]
    cero.end_step([paced])
    # The drawn prompt 3 was skipped: it was never in the step and gets no dual.
    assert cero.allocated == {0: 8, 1: 8, 2: 8}
    # mu moves with the demand of the sampler's prompts only, D = 2 * 8 = 16 < B = 24: it falls.
    assert cero.mu == pytest.approx(0.01 + 0.005 * (16 - 24) / 24)
    # Nobody wanted: the sampler's prompts still spend the budget (every step spends exactly B).
    cero.mu = 1.0
    assert cero.allocate_paced(stats, 16, num_sampled=2).counts.tolist() == [8, 8, 0, 0]


def test_cero_paced_allocation_prefers_wanted_prompts():
    cero = CeroAllocator(max_rollouts=8)
    stats = PromptBatchStats.from_success_rates([0.0, 1.0, 0.5, 0.5])  # q = 0 for the first two: c tiny
    cero.mu = 0.04  # c = 0.25 q: 0.020 for Beta(1, 9) and Beta(9, 1), 0.057 for Beta(5, 5)
    assert cero.wanted(stats).tolist() == [False, False, True, True]
    allocation = cero.allocate_paced(stats, 16, num_sampled=2)  # the sampler's two prompts are priced out
    assert allocation.counts.tolist() == [0, 0, 8, 8]
    assert cero.mu == 0.04  # allocating changes no state ...
    cero.end_step([allocation])
    assert cero.mu < 0.04  # ... the step's update does: the sampler's prompts asked for nothing, the price falls


def test_prompts_can_get_zero_and_budget_is_exact():
    cero = CeroAllocator(min_rollouts=4, max_rollouts=8)
    rates = np.full(6, 0.5)
    counts = cero.allocate(rates, 17).counts
    # ceil(17 / 8) = 3 prompts; the excess 24 - 17 = 7 comes off the last two, none below 4: 8, 5, 4.
    assert counts.tolist() == [8, 5, 4, 0, 0, 0]
    assert cero.allocate(rates, 0).counts.tolist() == [0] * 6


def test_infeasible_budget_is_rejected_clearly():
    cero = CeroAllocator(min_rollouts=2, max_rollouts=2)
    with pytest.raises(ValueError, match="cannot be split"):
        cero.allocate([0.5, 0.5, 0.5], 3)
    with pytest.raises(ValueError, match="below min_rollouts"):
        CeroAllocator().allocate([0.5, 0.5], 1)


def test_uninformative_prompts_are_skipped():
    # Prompts 1 and 2 are well understood and solved / unsolvable (q ~ 0.005); 3 and 4 are 50/50.
    stats = _stats([1, 2, 3, 4], a=[200, 1, 20, 20], b=[1, 200, 20, 20])
    counts = CeroAllocator(max_rollouts=8).allocate(stats, 16).counts
    assert counts.tolist() == [0, 0, 8, 8]


def test_diminishing_returns_rotate_equal_prompts():
    cero = CeroAllocator(max_rollouts=8)
    stats = _stats(list(range(8)), a=[3] * 8, b=[3] * 8)
    for _ in range(16):
        cero.end_step([cero.allocate(stats, 16)])
    # Two prompts per step, 16 steps: every prompt gets its turn, about 32 each.
    given = np.array([cero.allocated[i] for i in range(8)])
    assert given.sum() == 16 * 16 and given.min() >= 24 and given.max() <= 40


def test_state_round_trip_gives_identical_next_allocation():
    rng = np.random.default_rng(0)
    store = PromptStatistics()
    cero = CeroAllocator()
    ids_all = np.arange(40)
    for _ in range(6):
        ids = rng.choice(ids_all, 12, replace=False)
        allocation = cero.allocate(store.batch(ids), 96)
        cero.end_step([allocation])
        comp = np.repeat(ids, allocation.counts)
        store.update(comp, (rng.random(len(comp)) < 0.4).astype(float))
    state = json.loads(json.dumps(cero.state_dict()))
    assert all(isinstance(k, str) for k in state["theta"])
    restored = CeroAllocator()
    restored.load_state_dict(state)
    assert restored.state_dict() == cero.state_dict()
    ids = rng.choice(ids_all, 12, replace=False)
    batch = store.batch(ids)
    ours, theirs = cero.allocate(batch, 96), restored.allocate(batch, 96)
    np.testing.assert_array_equal(ours.counts, theirs.counts)
    assert dict(ours.metrics) == dict(theirs.metrics)
    cero.end_step([ours])
    restored.end_step([theirs])
    assert restored.state_dict() == cero.state_dict()
    restored.load_state_dict({})
    assert restored.theta == {} and restored.mu == 0.0
    with pytest.raises(ValueError, match="version"):
        restored.load_state_dict({"version": 99})


def test_duplicate_prompt_ids_get_one_update():
    cero = CeroAllocator(max_rollouts=4, eta=1.0, eta_theta=0.01)
    stats = _stats([7, 7, 8], a=[1, 1, 1], b=[1, 1, 1])
    allocation = cero.allocate(stats, 8)
    assert allocation.counts.tolist() == [4, 4, 0]
    cero.end_step([allocation])
    assert cero.allocated == {7: 8, 8: 0}
    assert cero.theta[7] == pytest.approx(1 / 6 - 0.01 * 8)


@pytest.mark.parametrize("field", ["eta", "eta_theta", "eta_mu", "eps"])
def test_invalid_hyperparameters(field):
    with pytest.raises(ValueError, match=field):
        CeroAllocator(**{field: 0.0})
    with pytest.raises(ValueError, match=field):
        CeroAllocator(**{field: float("nan")})


def test_invalid_num_epochs():
    with pytest.raises(ValueError, match="num_epochs"):
        CeroAllocator(num_epochs=0)


def test_invalid_posterior_is_rejected():
    with pytest.raises(ValueError, match="beta_a"):
        CeroAllocator().allocate(_stats([1, 2], a=[0, 1], b=[1, 1]), 16)
