"""CERO: hand-computed dual updates, zero counts, the exact step budget, and a state round trip."""

import json
import math

import numpy as np
import pytest

from trl_adaptive.allocation import CeroAllocator, PromptBatchStats, get_allocator
from trl_adaptive.stats import PromptStatistics


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
    assert cero.mu == 0.0 and cero.theta == {} and cero.completion_weights(np.ones(1), None) is None


def test_hand_computed_dual_updates():
    """Three steps on two prompts, every number written out.

    Prompt 10 ~ Beta(1, 1): q = 1*1 / (2*3) = 1/6.   Prompt 20 ~ Beta(2, 3): q = 2*3 / (5*6) = 0.2.
    eta = 1 so c = q. K = 2, eta_theta = 0.01, eta_mu = 0.1, N_max = 4, budget B = 4 (one prompt per step).
    """
    cero = CeroAllocator(min_rollouts=2, max_rollouts=4, eta=1.0, eta_theta=0.01, eta_mu=0.1, num_epochs=2)
    stats = _stats([10, 20], a=[1, 2], b=[1, 3])

    # Step 1: fresh prompts start at theta = c: 1/6 and 0.2; mu = 0. Prompt 20 ranks first and takes the budget.
    assert cero.allocate([np.nan, np.nan], 4, stats=stats).tolist() == [0, 4]
    # s*(c) = ln(c / c) / c = 0 for both.
    # theta_20 = clip(0.2 - 0.01 * (4 - 0 / 2), eps, 0.2) = 0.16;  theta_10 = 1/6 - 0.01 * (0 - 0) = 1/6.
    # Demand at mu = 0: both theta > 0, D = 2 * 4 = 8;  mu = max(0, 0 + 0.1 * (8 - 4) / 4) = 0.1.
    assert cero.theta[20] == pytest.approx(0.16)
    assert cero.theta[10] == pytest.approx(1 / 6)
    assert cero.mu == pytest.approx(0.1)
    assert cero.allocated == {10: 0, 20: 4}

    # Step 2: theta_10 = 0.1667 > theta_20 = 0.16, so prompt 10 is sampled now (diminishing returns for 20).
    assert cero.allocate([np.nan, np.nan], 4, stats=stats).tolist() == [4, 0]
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
    assert cero.allocate([np.nan, np.nan], 4, stats=stats).tolist() == [0, 4]
    assert cero.mu == pytest.approx(0.1)
    assert cero.allocated == {10: 4, 20: 8} and cero.steps == 3


def test_prompts_can_get_zero_and_budget_is_exact():
    cero = CeroAllocator(min_rollouts=4, max_rollouts=8)
    rates = np.full(6, 0.5)
    counts = cero.allocate(rates, 17)
    # ceil(17 / 8) = 3 prompts; the excess 24 - 17 = 7 comes off the last two, none below 4: 8, 5, 4.
    assert counts.tolist() == [8, 5, 4, 0, 0, 0]
    assert cero.allocate(rates, 0).tolist() == [0] * 6


def test_infeasible_budget_is_rejected_clearly():
    cero = CeroAllocator(min_rollouts=2, max_rollouts=2)
    with pytest.raises(ValueError, match="cannot be split"):
        cero.allocate([0.5, 0.5, 0.5], 3)
    with pytest.raises(ValueError, match="below min_rollouts"):
        CeroAllocator().allocate([0.5, 0.5], 1)


def test_uninformative_prompts_are_skipped():
    # Prompts 1 and 2 are well understood and solved / unsolvable (q ~ 0.005); 3 and 4 are 50/50.
    stats = _stats([1, 2, 3, 4], a=[200, 1, 20, 20], b=[1, 200, 20, 20])
    counts = CeroAllocator(max_rollouts=8).allocate(stats.success_rate, 16, stats=stats)
    assert counts.tolist() == [0, 0, 8, 8]


def test_diminishing_returns_rotate_equal_prompts():
    cero = CeroAllocator(max_rollouts=8)
    stats = _stats(list(range(8)), a=[3] * 8, b=[3] * 8)
    for _ in range(16):
        cero.allocate(stats.success_rate, 16, stats=stats)
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
        counts = cero.allocate(store.success_rates(ids), 96, stats=store.batch(ids))
        comp = np.repeat(ids, counts)
        store.update(comp, (rng.random(len(comp)) < 0.4).astype(float))
    state = json.loads(json.dumps(cero.state_dict()))
    assert all(isinstance(k, str) for k in state["theta"])
    restored = CeroAllocator()
    restored.load_state_dict(state)
    assert restored.state_dict() == cero.state_dict()
    ids = rng.choice(ids_all, 12, replace=False)
    batch = store.batch(ids)
    np.testing.assert_array_equal(
        cero.allocate(batch.success_rate, 96, stats=batch), restored.allocate(batch.success_rate, 96, stats=batch)
    )
    assert restored.state_dict() == cero.state_dict()
    restored.load_state_dict({})
    assert restored.theta == {} and restored.mu == 0.0
    with pytest.raises(ValueError, match="version"):
        restored.load_state_dict({"version": 99})


def test_duplicate_prompt_ids_get_one_update():
    cero = CeroAllocator(max_rollouts=4, eta=1.0, eta_theta=0.01)
    stats = _stats([7, 7, 8], a=[1, 1, 1], b=[1, 1, 1])
    counts = cero.allocate(stats.success_rate, 8, stats=stats)
    assert counts.tolist() == [4, 4, 0]
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
        CeroAllocator().allocate([0.5, 0.5], 16, stats=_stats([1, 2], a=[0, 1], b=[1, 1]))
