"""The estimators (``trl_adaptive/stats/estimators.py``, ``table.py``): the posterior with forgetting, each
estimator alone on its row table, and that every allocator reads exactly the estimators it declares."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.stats import FORMAT_VERSION, PromptStatistics
from trl_adaptive.strategies import get_allocator


# ---- the posterior: one Beta for CERO and bayes_knapsack, with forgetting -------------------------------------------
def test_posterior_without_half_life_is_exactly_the_cumulative_beta():
    # posterior_half_life=None (the default): Beta(1 + s0 + c, 1 + t0 - s0 + t - c) bit for bit, as CERO always read.
    rng = np.random.default_rng(0)
    stats = PromptStatistics(success_threshold=0.5)
    stats.set_prior([3, 5], [0.25, 0.5], weight=4)
    for step in range(30):
        ids = rng.integers(0, 12, 40)
        rewards = np.where(rng.random(40) < 0.1, np.nan, rng.random(40))
        stats.update(ids, rewards)
        if step % 7 == 6:
            stats.end_epoch()
    ids = np.arange(14)
    b = stats.batch(ids)
    cols = stats.state_dict()["columns"]
    rows = {pid: i for i, pid in enumerate(stats.state_dict()["prompt_ids"])}
    c = np.array([cols["total_successes"][rows[i]] if i in rows else 0 for i in ids], dtype=float)
    t = np.array([cols["total_attempts"][rows[i]] if i in rows else 0 for i in ids], dtype=float)
    s0 = np.array([cols["prior_successes"][rows[i]] if i in rows else 0 for i in ids], dtype=float)
    t0 = np.array([cols["prior_attempts"][rows[i]] if i in rows else 0 for i in ids], dtype=float)
    np.testing.assert_array_equal(b.beta_a, 1.0 + s0 + c)
    np.testing.assert_array_equal(b.beta_b, 1.0 + (t0 - s0) + (t - c))


def test_posterior_forgets_at_the_half_life_hand_computed():
    stats = PromptStatistics(posterior_half_life=1.0)  # every update call halves all evidence, then adds its own
    assert stats.posterior_decay == 0.5
    stats.update([1, 1], [1.0, 0.0])  # prompt 1: S = 1, F = 1
    stats.update([2], [1.0])  # prompt 1: 0.5, 0.5 (not visited, still forgotten); prompt 2: 1, 0
    stats.update([], [])  # a step that scored nothing still ticks the clock: 0.25, 0.25 and 0.5, 0
    b = stats.batch([1, 2, 3])
    assert b.beta_a.tolist() == [1.25, 1.5, 1.0] and b.beta_b.tolist() == [1.25, 1.0, 1.0]
    assert b.attempts.tolist() == [2.0, 1.0, 0.0] and b.successes.tolist() == [1.0, 1.0, 0.0]  # real counts kept
    stats.update([2], [np.nan])  # an unscorable completion: no evidence, but a step
    assert stats.batch([2]).beta_a.tolist() == [1.25]


@settings(max_examples=30, deadline=None)
@given(half_life=st.floats(0.5, 100.0), steps=st.integers(0, 60))
def test_evidence_k_steps_old_weighs_two_to_the_minus_k_over_h(half_life, steps):
    stats = PromptStatistics(posterior_half_life=half_life)
    stats.update([0] * 8, [1.0] * 6 + [0.0] * 2)
    for _ in range(steps):
        stats.update([1], [1.0])
    columns = stats.state_dict()["columns"]
    weight = 2.0 ** (-steps / half_life)
    assert columns["posterior_successes"][0] == pytest.approx(6 * weight, rel=1e-12, abs=1e-300)
    assert columns["posterior_failures"][0] == pytest.approx(2 * weight, rel=1e-12, abs=1e-300)
    assert stats.batch([0]).beta_a[0] == pytest.approx(1.0 + 6 * weight, rel=1e-15)


def test_forgetting_returns_to_the_prior_not_to_nothing():
    stats = PromptStatistics(posterior_half_life=2.0, posterior_prior_a=0.5, posterior_prior_b=0.5)
    stats.set_prior([7], [0.25], weight=8)  # Beta(0.5 + 2, 0.5 + 6) before and long after any evidence
    assert (stats.batch([7]).beta_a[0], stats.batch([7]).beta_b[0]) == (2.5, 6.5)
    stats.update([7] * 10, [1.0] * 10)
    assert stats.batch([7]).beta_a[0] == 12.5
    for _ in range(200):
        stats.update([], [])
    b = stats.batch([7, 8])
    assert b.beta_a[0] == pytest.approx(2.5) and b.beta_b[0] == pytest.approx(6.5)
    assert (b.beta_a[1], b.beta_b[1]) == (0.5, 0.5)  # the weak prior of a prompt with nothing: Jeffreys here


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"posterior_half_life": 0}, "posterior_half_life=0"),
        ({"posterior_half_life": -3.0}, "posterior_half_life=-3.0"),
        ({"posterior_half_life": float("inf")}, "posterior_half_life=inf"),
        ({"posterior_half_life": float("nan")}, "posterior_half_life=nan"),
        ({"posterior_half_life": True}, "posterior_half_life=True"),
        ({"posterior_half_life": "8"}, "posterior_half_life='8'"),
        ({"posterior_prior_a": 0.0}, "posterior_prior_a=0.0"),
        ({"posterior_prior_b": -1.0}, "posterior_prior_b=-1.0"),
        ({"posterior_prior_b": float("nan")}, "posterior_prior_b"),
    ],
)
def test_invalid_posterior_config_names_the_field_and_the_fix(kwargs, field):
    with pytest.raises(ValueError, match=field) as info:
        PromptStatistics(**kwargs)
    if "half_life" in field:
        assert "None to never forget" in str(info.value)


def test_posterior_state_round_trip_is_exact_and_resumes_bit_identically(tmp_path):
    rng = np.random.default_rng(1)
    config = {"posterior_half_life": 3.7, "posterior_prior_a": 0.5, "posterior_prior_b": 0.5}
    stats = PromptStatistics(**config)
    stats.set_prior([2, 9], [0.1, 0.8], weight=8)
    for step in range(25):
        ids = rng.integers(0, 20, 30)
        stats.update(ids, (rng.random(30) < 0.4).astype(float))
        if step % 5 == 4:
            stats.end_epoch()
    state = stats.state_dict()
    assert state["version"] == FORMAT_VERSION == 4 and state["config"]["posterior_half_life"] == 3.7
    assert set(state["columns"]) >= {"posterior_successes", "posterior_failures"}
    stats.save(tmp_path / "s.json")
    loaded = PromptStatistics.load(tmp_path / "s.json", posterior_half_life=3.7)
    assert loaded.config == stats.config and loaded.state_dict() == state
    from_dataset = PromptStatistics.from_dataset(stats.to_dataset())
    assert from_dataset.state_dict() == state
    for _ in range(10):
        ids = rng.integers(0, 25, 30)
        rewards = (rng.random(30) < 0.5).astype(float)
        for s in (stats, loaded, from_dataset):
            s.update(ids, rewards)
    ids = np.arange(26)
    for s in (loaded, from_dataset):
        assert s.state_dict() == stats.state_dict()
        np.testing.assert_array_equal(s.batch(ids).beta_a, stats.batch(ids).beta_a)
        np.testing.assert_array_equal(s.batch(ids).beta_b, stats.batch(ids).beta_b)


def test_posterior_config_is_checked_on_load(tmp_path):
    stats = PromptStatistics(posterior_half_life=4.0)
    stats.update([1], [1.0])
    stats.save(tmp_path / "s.json")
    with pytest.raises(ValueError, match="posterior_half_life=4.0 but this run uses posterior_half_life=8"):
        PromptStatistics.load(tmp_path / "s.json", posterior_half_life=8)
    with pytest.raises(ValueError, match="posterior_half_life: saved 4.0, configured None"):
        PromptStatistics().load_state_dict(stats.state_dict())
    with pytest.raises(ValueError, match="posterior_prior_a: saved 1.0, configured 0.5"):
        PromptStatistics(posterior_half_life=4.0, posterior_prior_a=0.5).load_state_dict(stats.state_dict())


def test_cero_reads_the_forgetting_posterior():
    stats = PromptStatistics(posterior_half_life=1.0)
    stats.update([1] * 4, [1.0, 1.0, 0.0, 0.0])
    stats.update([], [])
    c, _ = get_allocator("cero", eta=1.0).scores(stats.batch([1]))
    a, b = 2.0, 2.0  # 1 + 2 * 0.5 each
    assert c[0] == pytest.approx(a * b / ((a + b) * (a + b + 1)))


# ---- the parts alone: the row table and each estimator --------------------------------------------------------------
def test_row_table_grows_and_gathers_zeros_for_unknown_ids():
    from trl_adaptive.stats import RowTable

    table = RowTable(("a", "b"))
    rows = table.rows_adding(np.arange(3000, dtype=np.int64) * 7)  # past the first capacity of 1024
    assert len(table) == 3000 and rows.tolist() == list(range(3000))
    table.column("a")[rows] = np.arange(3000.0)
    got = table.gather(np.array([7 * 2999, 5, 0]))
    assert got["a"].tolist() == [2999.0, 0.0, 0.0] and got["b"].tolist() == [0.0, 0.0, 0.0]
    assert table.rows(np.array([14, 15])).tolist() == [2, -1] and table.fingerprints == [""] * 3000
    assert np.array_equal(table.ids, np.arange(3000) * 7)


def _table(*parts):
    from trl_adaptive.stats import PriorCounts, RowTable

    return RowTable([name for part in (*parts, PriorCounts) for name in part.columns])


def test_epoch_rate_alone():
    from trl_adaptive.stats import EpochRate

    rate = EpochRate(_table(EpochRate))
    rows = rate.table.rows_adding(np.array([1, 2]))
    rate.observe(rows, np.array([1.0, 2.0]), np.array([4.0, 2.0]))
    rate.end_epoch()
    rate.observe(rows[:1], np.array([3.0]), np.array([3.0]))  # prompt 2 not attempted in epoch 2
    rate.end_epoch()
    np.testing.assert_array_equal(rate.read(rate.table.gather(np.array([1, 2]))), [1.0, 1.0])
    state = rate.state_dict()
    assert state["epoch"] == 2 and state["columns"]["total_attempts"] == [7, 2]
    assert all(isinstance(v, int) for col in state["columns"].values() for v in col)  # counts are written as ints
    other = EpochRate(_table(EpochRate))
    other.table.add_rows(np.array([1, 2]))
    other.load_state_dict(json.loads(json.dumps(state)))
    assert other.state_dict() == state and other.num_seen == 2


def test_decayed_rate_alone_and_its_prior_visits():
    from trl_adaptive.stats import DecayedRate, PriorCounts

    est = DecayedRate(_table(DecayedRate), decay=0.5, prior_alpha=1.0, prior_beta=3.0)
    prior = PriorCounts(est.table)
    est.restart_prior(prior.set(np.array([1]), [0.5], weight=4))  # s0 = 2, t0 = 4
    rows = est.table.rows(np.array([1]))
    est.observe(rows, np.array([2.0]), np.array([2.0]), with_prior=prior.has_prior(rows))
    # (alpha + n_pos + 0.5^1 s0) / (alpha + beta + n_tot + 0.5^1 t0) = (1 + 2 + 1) / (4 + 2 + 2)
    assert est.read(est.table.gather(np.array([1, 9]))).tolist() == [0.5, 0.25]
    columns = {"decayed_successes": [2.0], "decayed_attempts": [2.0], "prior_visits": [1]}
    assert est.state_dict() == {"columns": columns}
    assert est.config == {"decay": 0.5, "prior_alpha": 1.0, "prior_beta": 3.0}
    with pytest.raises(ValueError, match=r"est_prior_beta=0: must be > 0.*pseudo-failure"):
        DecayedRate.check_settings(0.9, 1.0, 0, prefix="est_")


def test_beta_posterior_alone():
    from trl_adaptive.stats import BetaPosterior

    post = BetaPosterior(_table(BetaPosterior), posterior_half_life=2.0, posterior_prior_a=0.5, posterior_prior_b=0.5)
    rows = post.table.rows_adding(np.array([3]))
    post.tick()
    post.observe(rows, np.array([4.0]), np.array([4.0]))
    post.tick()
    post.tick()  # two steps at a half-life of 2: half the evidence is left
    a, b = post.read(post.table.gather(np.array([3])))
    assert a[0] == pytest.approx(0.5 + 2.0, rel=1e-15) and b.tolist() == [0.5]
    assert post.decay == 2.0**-0.5 and post.config["posterior_half_life"] == 2.0
    with pytest.raises(ValueError, match="exceeds the cumulative counts"):
        post.check_within(np.array([1.0]), np.array([1.0]))


# ---- allocators declare the estimators they read --------------------------------------------------------------------
def _random_batch(rng, m):
    from trl_adaptive.allocation import PromptBatchStats

    attempts = rng.integers(0, 9, m).astype(float)
    return PromptBatchStats(
        prompt_ids=np.arange(m, dtype=np.int64),
        success_rate=np.where(rng.random(m) < 0.2, np.nan, rng.random(m)),
        attempts=attempts,
        successes=np.floor(attempts * rng.random(m)),
        smoothed_rate=rng.uniform(0.01, 0.99, m),
        beta_a=rng.uniform(0.5, 9, m),
        beta_b=rng.uniform(0.5, 9, m),
        prior_attempts=np.zeros(m),
    )


def _perturbed(rng, stats, estimator):
    import dataclasses

    fresh = _random_batch(rng, len(stats))
    return dataclasses.replace(stats, **{field: getattr(fresh, field) for field in estimator.fields})


@pytest.mark.parametrize("name", ["uniform", "knapsack", "bayes_knapsack", "reinforce_ada_est", "cero"])
def test_allocators_read_exactly_the_estimators_they_declare(name):
    from trl_adaptive.stats import ESTIMATORS
    from trl_adaptive.strategies import registered_allocators

    assert name in registered_allocators()
    reads = type(get_allocator(name)).reads
    assert set(reads) <= {e.name for e in ESTIMATORS} and "reads" in vars(type(get_allocator(name)))
    rng = np.random.default_rng(11)
    changed = dict.fromkeys(reads, False)
    for _ in range(20):
        stats = _random_batch(rng, 12)
        base = get_allocator(name).allocate(stats, 48)
        for estimator in ESTIMATORS:
            other = get_allocator(name).allocate(_perturbed(rng, stats, estimator), 48)
            same = np.array_equal(other.counts, base.counts) and (
                (other.weights is None and base.weights is None) or np.array_equal(other.weights, base.weights)
            )
            if estimator.name in reads:
                changed[estimator.name] |= not same
            else:
                assert same, f"{name} changed its allocation with {estimator.name}, which its `reads` leaves out"
    assert all(changed.values()), f"{name} declares {reads} but never reacted to {changed}"
