"""The prompt selection sources (``trl_adaptive/sampling/selection.py``): MoPPS's Thompson rule and GRESO's skip rule
against hand-computed cases, the port's rules (exact size, no duplicates, determinism), exact state round trips and
the refusal messages."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trl_adaptive.allocation.value import expected_value_table
from trl_adaptive.sampling.selection import (
    ExpectedValuePool,
    SettledPromptSkipping,
    ThompsonPoolSelection,
    adapt_skip_base,
    expected_mixed_share,
    skip_probability,
    thompson_nearest,
    zero_variance_groups,
)
from trl_adaptive.sampling.source import SourceContext
from trl_adaptive.stats import PromptStatistics

NUM_PROMPTS = 40


def first_unexamined(exclude: np.ndarray, number: int) -> np.ndarray:
    """A deterministic ``ctx.draw``: the lowest ids not excluded."""
    return np.setdiff1d(np.arange(NUM_PROMPTS), exclude)[:number]


def context(offered, store=None, seed=0, draw=first_unexamined, group_size=8, step=0) -> SourceContext:
    store = store if store is not None else PromptStatistics()
    return SourceContext(
        offered=np.asarray(offered, dtype=np.int64),
        statistics=lambda ids: store.batch(ids, reads=("posterior",)),
        draw=draw,
        rng=np.random.default_rng(seed),
        step=step,
        group_size=group_size,
    )


def observe(store: PromptStatistics, prompt: int, successes: int, failures: int) -> None:
    store.update(np.full(successes + failures, prompt), np.r_[np.ones(successes), np.zeros(failures)])


# ---- MoPPS --------------------------------------------------------------------------------------------------------
def test_thompson_keeps_the_posterior_near_one_half_over_settled_prompts():
    beta_a, beta_b = np.array([200.0, 60.0, 1.0, 1.0]), np.array([1.0, 60.0, 200.0, 1.0])
    for seed in range(20):
        kept, draws = thompson_nearest(beta_a, beta_b, 2, 0.5, np.random.default_rng(seed))
        assert draws.tolist() == np.random.default_rng(seed).beta(beta_a, beta_b).tolist()  # one draw each
        assert 1 in kept.tolist() and kept.tolist() == sorted(kept.tolist())
    # the target moves the choice: at 0.99 the easy prompt wins (among the three settled ones)
    assert thompson_nearest(beta_a[:3], beta_b[:3], 1, 0.99, np.random.default_rng(0))[0].tolist() == [0]


def test_expected_mixed_share_by_hand():
    assert expected_mixed_share(np.array([1.0]), np.array([1.0]), 8) == pytest.approx(7 / 9)  # 1 - 2 / (G + 1)
    # Beta(2, 1), G = 2: E[p^2] = 2/3 * 3/4 = 1/2, E[(1-p)^2] = 1/3 * 2/4 = 1/6
    assert expected_mixed_share(np.array([2.0]), np.array([1.0]), 2) == pytest.approx(1 / 3)
    settled = expected_mixed_share(np.array([500.0, 1.0]), np.array([1.0, 500.0]), 8)
    assert settled < 0.02


def test_mopps_selects_from_its_pool_and_reports_why():
    store = PromptStatistics()
    observe(store, 0, 40, 0)  # offered, settled easy
    observe(store, 1, 0, 40)  # offered, settled hard
    for prompt in (2, 3):  # drawn, posterior mass near 0.5
        observe(store, prompt, 20, 20)
    for prompt in range(4, NUM_PROMPTS):
        observe(store, prompt, 0, 40)
    batch = ThompsonPoolSelection(pool_factor=2).compose(context([0, 1], store))
    assert batch.prompt_ids.tolist() == [2, 3]
    assert batch.examined.tolist() == [0, 1, 2, 3]
    assert batch.skipped["easy_draw"].tolist() == [0] and batch.skipped["hard_draw"].tolist() == [1]
    assert batch.predicted_mixed == pytest.approx(expected_mixed_share(np.full(2, 21.0), np.full(2, 21.0), 8))


def test_mopps_unseen_prompts_draw_from_the_prior_and_the_pool_is_asked_for():
    asked = []

    def draw(exclude, number):
        asked.append((exclude.tolist(), number))
        return first_unexamined(exclude, number)

    batch = ThompsonPoolSelection(pool_factor=3).compose(context([5, 9], draw=draw, seed=4))
    assert asked == [([5, 9], 4)]
    pool = np.array([5, 9, 0, 1, 2, 3])
    expected, _ = thompson_nearest(np.ones(6), np.ones(6), 2, 0.5, np.random.default_rng(4))
    assert batch.prompt_ids.tolist() == pool[expected].tolist()


def test_mopps_pool_factor_one_keeps_the_offer():
    batch = ThompsonPoolSelection(pool_factor=1).compose(context([7, 3, 5], draw=lambda ex, n: ex[:0]))
    assert batch.prompt_ids.tolist() == [7, 3, 5] and batch.examined.tolist() == [7, 3, 5]


@pytest.mark.parametrize(
    "source", [ThompsonPoolSelection(pool_factor=4), SettledPromptSkipping(), ExpectedValuePool(pool_factor=3)]
)
def test_exact_size_no_duplicates_and_determinism(source):
    store = PromptStatistics()
    rng = np.random.default_rng(1)
    for step in range(6):
        offered = rng.choice(NUM_PROMPTS, 8, replace=False)
        a = source.compose(context(offered, store, seed=step, step=step))
        b = source.compose(context(offered, store, seed=step, step=step))
        assert a.prompt_ids.tolist() == b.prompt_ids.tolist() and a.examined.tolist() == b.examined.tolist()
        assert len(a.prompt_ids) == 8 and len(np.unique(a.prompt_ids)) == 8
        assert np.isin(a.prompt_ids, a.examined).all() and len(np.unique(a.examined)) == len(a.examined)
        skipped = np.concatenate(list(a.skipped.values()))
        assert not np.isin(skipped, a.prompt_ids).any()
        completions = np.repeat(a.prompt_ids, 4)
        rewards = (rng.random(len(completions)) < 0.3 + 0.6 * (completions % 2)).astype(float)
        store.update(completions, rewards)
        source.end_step(a.prompt_ids, np.repeat(np.arange(8), 4), rewards, 1.0)


def test_a_short_draw_selects_from_what_there_is():
    def none_left(exclude, number):
        return np.zeros(0, dtype=np.int64)

    assert ThompsonPoolSelection(pool_factor=8).compose(context([4, 2], draw=none_left)).prompt_ids.tolist() == [4, 2]
    greso = SettledPromptSkipping(floor=1e-9)
    greso.load_own_state({"p_easy": 0.05, "p_hard": 0.5, "easy_streaks": {"4": 50}, "hard_streaks": {}})
    batch = greso.compose(context([4, 2], draw=none_left))
    assert batch.prompt_ids.tolist() == [4, 2] and batch.skipped["settled_easy"].tolist() == []


# ---- the pool by expected value -----------------------------------------------------------------------------------
def test_value_pool_keeps_the_candidates_of_highest_expected_value():
    store = PromptStatistics()
    observe(store, 0, 40, 0)  # offered, solved: E[Value] ~ 0
    observe(store, 1, 3, 5)  # offered, p ~ 0.4: near the peak of p (1 - p)^2
    observe(store, 2, 0, 40)  # drawn, hopeless
    # 3 drawn and never seen: Beta(1, 1)
    batch = ExpectedValuePool(pool_factor=2).compose(context([0, 1], store))
    assert batch.examined.tolist() == [0, 1, 2, 3]
    assert batch.prompt_ids.tolist() == [1, 3] and batch.skipped["lower_value"].tolist() == [0, 2]
    a, b = np.array([4.0, 1.0]), np.array([6.0, 1.0])  # the kept prompts' posteriors under the Beta(1, 1) prior
    values = expected_value_table(np.array([41.0, 4.0, 1.0, 1.0]), np.array([1.0, 6.0, 41.0, 1.0]), 8)[:, 8]
    assert values[1] > values[3] > max(values[0], values[2])  # the order the rule followed, by hand
    assert batch.predicted_mixed == pytest.approx(expected_mixed_share(a, b, 8))


def test_value_pool_is_deterministic_and_ties_go_to_the_offer():
    batch = ExpectedValuePool(pool_factor=3).compose(context([9, 4]))  # six unseen candidates: all tied
    assert batch.prompt_ids.tolist() == [9, 4] and len(batch.examined) == 6
    assert ExpectedValuePool(pool_factor=3).compose(context([9, 4], seed=5)).prompt_ids.tolist() == [9, 4]


# ---- GRESO --------------------------------------------------------------------------------------------------------
def test_skip_probability_and_its_floor():
    assert skip_probability(np.array([0, 1, 3]), 0.5, 0.01).tolist() == [0.0, 0.5, 0.875]
    # 0.5^6 = 0.0156 is above the floor, 0.5^7 = 0.0078 below it: every prompt is kept with probability >= 0.01
    assert skip_probability(np.array([6, 7, 50]), 0.5, 0.01).tolist() == pytest.approx([1 - 0.5**6, 0.99, 0.99])
    assert skip_probability(np.array([2]), 0.5, 0.5).tolist() == [0.5]


def test_p_adaptation_and_its_clip():
    assert adapt_skip_base(0.5, 0.25 / 3, 0.25 / 3, 0.01) == 0.49  # at the target: skip more
    assert adapt_skip_base(0.5, 0.0, 0.25 / 3, 0.01) == 0.51
    assert adapt_skip_base(0.05, 1.0, 0.1, 0.01) == 0.05 and adapt_skip_base(0.95, 0.0, 0.1, 0.01) == 0.95


def test_zero_variance_groups_ignore_unscored_completions():
    rewards = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, np.nan, np.nan, 1.0, np.nan])
    groups = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    ids, easy, hard = zero_variance_groups(np.array([10, 11, 12, 13, 14, 15]), groups, rewards, 1.0)
    assert ids.tolist() == [10, 11, 12, 14] and easy.tolist() == [True, False, False, True]
    assert hard.tolist() == [False, False, True, False]


def test_greso_streaks_and_p_step_by_step():
    greso = SettledPromptSkipping()
    # step 1: prompt 5 all correct, 6 mixed, 7 all wrong -> easy and hard shares 1/3, both >= their targets
    greso.end_step(np.array([5, 6, 7]), np.repeat([0, 1, 2], 2), np.array([1.0, 1, 1, 0, 0, 0]), 1.0)
    assert (greso.p_easy, greso.p_hard) == (0.49, 0.49)
    # step 2: 5 all correct, 6 mixed -> easy share 1/2 (down), hard share 0 < 1/6 (up); 7 not visited keeps k = 1
    greso.end_step(np.array([5, 6]), np.repeat([0, 1], 2), np.array([1.0, 1, 0, 1]), 1.0)
    assert greso.p_easy == pytest.approx(0.48) and greso.p_hard == pytest.approx(0.50)
    assert [s.tolist() for s in greso.streaks(np.array([5, 6, 7]))] == [[2, 0, 0], [0, 0, 1]]
    assert greso.skip_probabilities(np.array([5, 6, 7, 8])) == pytest.approx([1 - 0.48**2, 0.0, 0.5, 0.0])
    # a mixed visit resets the streak; a hard visit of an easy prompt starts a hard one
    greso.end_step(np.array([5, 7]), np.repeat([0, 1], 2), np.array([0.0, 1, 1, 1]), 1.0)
    assert [s.tolist() for s in greso.streaks(np.array([5, 7]))] == [[0, 1], [0, 0]]
    # nothing visited (every completion unscored): p stays
    p = (greso.p_easy, greso.p_hard)
    greso.end_step(np.array([5]), np.array([0, 0]), np.array([np.nan, np.nan]), 1.0)
    assert (greso.p_easy, greso.p_hard) == p


def test_greso_skips_settled_prompts_and_refills_from_the_draw():
    asked = []

    def draw(exclude, number):
        asked.append((exclude.tolist(), number))
        return first_unexamined(exclude, number)

    greso = SettledPromptSkipping(floor=1e-12)  # settled prompts skipped with probability 1 - 0.5^60 ~ 1
    streaks = {"0": 60, "1": 60, "2": 60}  # 0 and 1 offered, 2 the first drawn
    greso.load_own_state({"p_easy": 0.5, "p_hard": 0.5, "easy_streaks": streaks, "hard_streaks": {"3": 60}})
    batch = greso.compose(context([0, 1, 10, 11], draw=draw))
    assert asked == [([0, 1, 10, 11], 2), ([0, 1, 10, 11, 2, 3], 2)]
    assert batch.prompt_ids.tolist() == [10, 11, 4, 5] and batch.examined.tolist() == [0, 1, 10, 11, 2, 3, 4, 5]
    assert batch.skipped["settled_easy"].tolist() == [0, 1, 2] and batch.skipped["settled_hard"].tolist() == [3]


def test_greso_coins_are_one_per_candidate_from_ctx_rng():
    greso = SettledPromptSkipping(max_pool_factor=2)
    greso.load_own_state({"p_easy": 0.5, "p_hard": 0.5, "easy_streaks": {"0": 1, "1": 3}, "hard_streaks": {"2": 2}})
    for seed in range(10):
        kept = np.random.default_rng(seed).random(4) >= np.array([0.5, 0.875, 0.75, 0.0])  # 3 is never skipped
        refill = np.arange(4, 4 + 4 - kept.sum())  # unseen drawn prompts are always kept
        batch = greso.compose(context([0, 1, 2, 3], seed=seed))
        assert batch.prompt_ids.tolist() == [*np.flatnonzero(kept).tolist(), *refill.tolist()]
        assert batch.skipped["settled_easy"].tolist() == [i for i in (0, 1) if not kept[i]]
        assert batch.skipped["settled_hard"].tolist() == ([] if kept[2] else [2])


def test_greso_fill_takes_the_least_likely_to_be_skipped():
    greso = SettledPromptSkipping(max_pool_factor=2, floor=1e-12)
    streaks = {"0": 60, "1": 1, "2": 2, "3": 60}  # P(skip) ~1, 0.5, 0.75, ~1; 2 and 3 are the first drawn
    greso.load_own_state({"p_easy": 0.5, "p_hard": 0.5, "easy_streaks": streaks, "hard_streaks": {}})
    seeds = []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        offered_coins, drawn_coins = rng.random(2), rng.random(2)
        if offered_coins[1] < 0.5 and drawn_coins[0] < 0.75:  # every candidate skipped: the fill decides
            seeds.append(seed)
            batch = greso.compose(context([0, 1], seed=seed))
            assert batch.examined.tolist() == [0, 1, 2, 3]
            assert batch.prompt_ids.tolist() == [1, 2] and batch.skipped["settled_easy"].tolist() == [0, 3]
    assert seeds  # the case occurred


def test_greso_state_round_trip_is_exact():
    def run(source, steps, start=0):
        rng = np.random.default_rng(start)
        batches = []
        for step in range(start, start + steps):
            offered = np.random.default_rng(100 + step).choice(NUM_PROMPTS, 8, replace=False)
            batch = source.compose(context(offered, seed=step, step=step))
            rewards = (rng.random(32) < 0.9 * (batch.prompt_ids[np.repeat(np.arange(8), 4)] % 3 > 0)).astype(float)
            source.end_step(batch.prompt_ids, np.repeat(np.arange(8), 4), rewards, 1.0)
            batches.append(batch.prompt_ids.tolist())
        return batches

    straight = SettledPromptSkipping()
    run(straight, 6)
    saved = json.loads(json.dumps(straight.own_state()))
    resumed = SettledPromptSkipping()
    resumed.load_own_state(saved)
    assert resumed.own_state() == straight.own_state()
    assert run(resumed, 5, start=6) == run(straight, 5, start=6)
    assert saved["easy_streaks"] or saved["hard_streaks"]
    with pytest.raises(ValueError, match="expected"):
        resumed.load_own_state({"p_easy": 0.5})


# ---- refusals -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ThompsonPoolSelection(pool_factor=0), r"pool_factor=0: must be an integer >= 1"),
        (lambda: ThompsonPoolSelection(pool_factor=2.5), r"pool_factor=2.5: must be an integer"),
        (lambda: ThompsonPoolSelection(target=1.0), r"target=1.0: must be a number in \(0, 1\)"),
        (lambda: ThompsonPoolSelection(target=0), r"target=0: must be a number in \(0, 1\)"),
        (lambda: ExpectedValuePool(pool_factor=0), r"pool_factor=0: must be an integer >= 1"),
        (lambda: SettledPromptSkipping(floor=0), r"floor=0: must be a number > 0"),
        (lambda: SettledPromptSkipping(max_pool_factor=0), r"max_pool_factor=0: must be an integer >= 1"),
        (lambda: SettledPromptSkipping(p_initial=0.99), r"p_initial=0.99: must be a number in \[0.05, 0.95\]"),
        (lambda: SettledPromptSkipping(target_hard=1.5), r"target_hard=1.5: must be a number in \[0.0, 1.0\]"),
    ],
)
def test_bad_settings_are_refused_by_name(build, message):
    with pytest.raises(ValueError, match=message) as error:
        build()
    assert "prompt_source_kwargs" in str(error.value)


def test_a_pool_larger_than_the_data_is_refused():
    ThompsonPoolSelection(pool_factor=4).check(num_prompts=128, batch_prompts=32)
    with pytest.raises(ValueError, match=r"pool_factor=4: a pool of 4 x 32 .* 100 prompts.*'pool_factor': 3"):
        ThompsonPoolSelection(pool_factor=4).check(num_prompts=100, batch_prompts=32)
    with pytest.raises(ValueError, match=r"max_pool_factor=4: .*'max_pool_factor': 1"):
        SettledPromptSkipping().check(num_prompts=60, batch_prompts=32)
