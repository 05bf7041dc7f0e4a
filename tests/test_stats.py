"""PromptStatistics: counting rules, epochs, Est's decay, the Beta posterior, priors, fingerprints, persistence
(JSON, versions 1 to 3, corrupt files), the datasets export, speed-sized inputs, and the posterior with forgetting."""

import hashlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation import get_allocator
from trl_adaptive.stats import FORMAT_VERSION, PromptStatistics, prompt_fingerprint


def test_update_counts_and_rates_after_epoch():
    stats = PromptStatistics()
    stats.update(np.array([5, 5, 5, 5, 6, 6]), np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]))
    assert np.isnan(stats.success_rates([5, 6])).all()  # no completed epoch yet
    stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([6, 5, 99]), [0.0, 0.75, np.nan])
    b = stats.batch([5, 6, 99])
    np.testing.assert_array_equal(b.prompt_ids, [5, 6, 99])
    np.testing.assert_array_equal(b.attempts, [4, 2, 0])
    np.testing.assert_array_equal(b.successes, [3, 0, 0])


def test_success_threshold_on_float_rewards():
    stats = PromptStatistics(success_threshold=0.5)
    stats.update([1] * 5, [-1.0, 0.49, 0.5, 2.0, float("inf")])
    stats.end_epoch()
    assert stats.success_rates([1])[0] == pytest.approx(3 / 5)


def test_nan_rewards_are_not_attempts():
    stats = PromptStatistics()
    stats.update([1, 1, 1, 2], [1.0, np.nan, 0.0, np.nan])
    assert len(stats) == 1 and 2 not in stats  # prompt 2 had no scorable completion
    b = stats.batch([1, 2])
    np.testing.assert_array_equal(b.attempts, [2, 0])
    # An all-NaN visit is not a visit: prompt 1's decayed counts do not decay.
    before = stats.batch([1]).smoothed_rate
    stats.update([1, 1], [np.nan, np.nan])
    np.testing.assert_array_equal(stats.batch([1]).smoothed_rate, before)


def test_end_epoch_keeps_older_last_epoch_for_unvisited_prompts():
    stats = PromptStatistics()
    stats.update([1, 1, 2, 2], [1, 0, 1, 1])
    stats.end_epoch()
    assert stats.epoch == 1 and stats.num_seen == 2
    stats.update([1, 1, 1, 1], [0, 0, 0, 1])  # prompt 2 not attempted in epoch 2
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.5, 1.0])  # still epoch-1 rates mid-epoch
    stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.25, 1.0])
    stats.end_epoch()  # an epoch with no attempts changes no rate
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.25, 1.0])
    assert stats.epoch == 3
    np.testing.assert_array_equal(stats.batch([1, 2]).attempts, [6, 2])  # cumulative


def test_decay_per_visit_hand_computed():
    stats = PromptStatistics(decay=0.9)
    stats.update([3, 3, 3, 3], [0, 0, 0, 0])  # n_pos = 0, n_tot = 4
    stats.update([3, 3], [1, 0])  # n_pos = 0.9 * 0 + 1 = 1, n_tot = 0.9 * 4 + 2 = 5.6
    stats.update([3, 3], [1, 1])  # n_pos = 0.9 + 2 = 2.9, n_tot = 5.04 + 2 = 7.04
    p = stats.batch([3, 4]).smoothed_rate
    np.testing.assert_allclose(p, [(1 + 2.9) / (17 + 7.04), 1 / 17])
    # Several completions of one prompt in one call are one visit, whatever their order in the arrays.
    a, b = PromptStatistics(), PromptStatistics()
    a.update([1, 2, 1, 2], [1, 0, 0, 1])
    b.update([2, 2, 1, 1], [0, 1, 0, 1])
    np.testing.assert_array_equal(a.batch([1, 2]).smoothed_rate, b.batch([1, 2]).smoothed_rate)


def test_smoothed_rate_never_zero_or_one():
    stats = PromptStatistics()
    stats.update([1] * 1000 + [2] * 1000, [0.0] * 1000 + [1.0] * 1000)
    p = stats.batch([1, 2]).smoothed_rate
    assert 0 < p[0] < p[1] < 1


def test_beta_posterior_from_cumulative_counts():
    stats = PromptStatistics(decay=0.5)
    stats.update([1, 1, 1], [1, 0, 0])
    stats.end_epoch()
    stats.update([1, 1], [1, 1])
    b = stats.batch([1, 2])
    np.testing.assert_array_equal(b.beta_a, [1 + 3, 1])
    np.testing.assert_array_equal(b.beta_b, [1 + 2, 1])


def test_save_load_round_trip_atomic(tmp_path):
    stats = PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0)
    stats.update([10, 10, 11, 12], [0.7, 0.1, 0.9, np.nan])
    stats.end_epoch()
    stats.update([10, 11, 11], [0.6, 0.0, 0.2])
    path = tmp_path / "ckpt" / "prompt_stats.json"
    stats.save(path)
    assert os.listdir(path.parent) == ["prompt_stats.json"]  # no temporary file left behind
    raw = json.loads(path.read_text())
    assert raw["version"] == FORMAT_VERSION and raw["config"]["decay"] == 0.8 and raw["epoch"] == 1
    loaded = PromptStatistics.load(path)
    assert loaded.config == stats.config and loaded.epoch == 1 and len(loaded) == 2
    ids = [10, 11, 12]
    for field in ("success_rate", "attempts", "successes", "smoothed_rate", "beta_a", "beta_b"):
        np.testing.assert_array_equal(getattr(loaded.batch(ids), field), getattr(stats.batch(ids), field))
    assert loaded.state_dict() == stats.state_dict()
    # Both go on identically after the round trip.
    for s in (stats, loaded):
        s.update([10, 13], [1.0, 0.0])
        s.end_epoch()
    assert loaded.state_dict() == stats.state_dict()


def test_save_overwrites_atomically_and_cleans_up_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    old = PromptStatistics()
    old.update([1], [1.0])
    old.save(path)
    before = path.read_text()
    new = PromptStatistics()
    new.update([2], [0.0])

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(json, "dump", boom)
    with pytest.raises(OSError, match="disk full"):
        new.save(path)
    assert path.read_text() == before  # the old file is intact
    assert os.listdir(tmp_path) == ["s.json"]  # and no temporary file remains


def test_load_rejects_mismatched_config_and_version(tmp_path):
    path = tmp_path / "s.json"
    stats = PromptStatistics(decay=0.8)
    stats.update([1], [1.0])
    stats.save(path)
    with pytest.raises(ValueError, match="decay"):
        PromptStatistics.load(path, decay=0.9)
    with pytest.raises(TypeError, match="threshold"):
        PromptStatistics.load(path, threshold=0.9)
    with pytest.raises(ValueError, match="decay: saved 0.8"):
        PromptStatistics(decay=0.9).load_state_dict(stats.state_dict())
    bad = stats.state_dict() | {"version": FORMAT_VERSION + 1}
    with pytest.raises(ValueError, match="version"):
        PromptStatistics(decay=0.8).load_state_dict(bad)
    with pytest.raises(ValueError, match="format"):
        PromptStatistics().load_state_dict({"version": 1})
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a PromptStatistics file"):
        PromptStatistics.load(path)


def test_empty_store_round_trip_and_lookup():
    stats = PromptStatistics()
    b = stats.batch([1, 2])
    np.testing.assert_allclose(b.smoothed_rate, [1 / 17, 1 / 17])
    assert np.isnan(b.success_rate).all()
    fresh = PromptStatistics()
    fresh.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert len(fresh) == 0 and fresh.num_seen == 0
    stats.update([], [])
    assert len(stats) == 0


def test_17k_prompts_batch_lookup():
    rng = np.random.default_rng(0)
    num_prompts = 17_917  # DAPO-Math-17k
    ids = rng.permutation(10 * num_prompts)[:num_prompts]  # sparse ids
    stats = PromptStatistics()
    true_p = rng.random(num_prompts)
    for start in range(0, num_prompts, 4096):
        batch = np.repeat(ids[start : start + 4096], 8)
        stats.update(batch, (rng.random(len(batch)) < np.repeat(true_p[start : start + 4096], 8)).astype(float))
    stats.end_epoch()
    assert len(stats) == num_prompts == stats.num_seen
    pick = rng.choice(num_prompts, 1024, replace=False)
    b = stats.batch(ids[pick])
    assert len(b) == 1024 and not np.isnan(b.success_rate).any()
    assert np.corrcoef(b.success_rate, true_p[pick])[0, 1] > 0.8


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"decay": 0.0}, "decay"),
        ({"decay": 1.5}, "decay"),
        ({"decay": float("nan")}, "decay"),
        ({"prior_alpha": 0.0}, "prior_alpha"),
        ({"prior_beta": -1.0}, "prior_beta"),
        ({"success_threshold": float("nan")}, "success_threshold"),
        ({"success_threshold": "1"}, "success_threshold"),
        ({"success_threshold": True}, "success_threshold"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PromptStatistics(**kwargs)


def test_invalid_update_arguments():
    stats = PromptStatistics()
    with pytest.raises(ValueError, match="equal length"):
        stats.update([1, 2], [1.0])
    with pytest.raises(ValueError, match="integer prompt ids"):
        stats.update([1.5], [1.0])
    with pytest.raises(ValueError, match="integer prompt ids"):
        stats.batch(["a"])
    with pytest.raises(ValueError, match="1-D"):
        stats.update([[1]], [[1.0]])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.sampled_from([0.0, 0.3, 1.0, 2.0, math.nan])), max_size=12),
        max_size=6,
    ),
    st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_matches_a_plain_reference(calls, epoch_ends):
    """Against a dict-of-lists reference that applies the documented rules one completion at a time."""
    stats = PromptStatistics(success_threshold=1.0, decay=0.9)
    cur, last, tot, dec = {}, {}, {}, {}
    for call, end in zip(calls, epoch_ends, strict=False):
        stats.update(np.array([i for i, _ in call], dtype=np.int64), np.array([r for _, r in call]))
        visit = {}
        for i, r in call:
            if not math.isnan(r):
                s, t = visit.get(i, (0, 0))
                visit[i] = (s + (r >= 1.0), t + 1)
        for i, (s, t) in visit.items():
            for d in (cur, tot):
                c0, t0 = d.get(i, (0, 0))
                d[i] = (c0 + s, t0 + t)
            p0, n0 = dec.get(i, (0.0, 0.0))
            dec[i] = (0.9 * p0 + s, 0.9 * n0 + t)
        if end:
            stats.end_epoch()
            last.update(cur)
            cur = {}
    ids = list(range(8))
    b = stats.batch(ids)
    want_rate = [last[i][0] / last[i][1] if i in last else math.nan for i in ids]
    np.testing.assert_allclose(b.success_rate, want_rate)
    np.testing.assert_array_equal(b.attempts, [tot.get(i, (0, 0))[1] for i in ids])
    np.testing.assert_array_equal(b.beta_a, [1 + tot.get(i, (0, 0))[0] for i in ids])
    np.testing.assert_allclose(
        b.smoothed_rate, [(1 + dec.get(i, (0, 0))[0]) / (17 + dec.get(i, (0, 0))[1]) for i in ids]
    )
    assert len(stats) == len(tot) and stats.num_seen == len(last)
    restored = PromptStatistics()
    restored.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert restored.state_dict() == stats.state_dict()


# ==== priors =========================================================================================================
def test_prior_gives_a_first_epoch_rate_then_blends_without_fading():
    stats = PromptStatistics()
    stats.set_prior([1, 2, 3], [0.25, 1.0, np.nan], weight=4)
    assert len(stats) == 2 and 3 not in stats and stats.num_with_prior == 2 and stats.num_seen == 0
    np.testing.assert_allclose(stats.success_rates([1, 2, 3, 4]), [0.25, 1.0, np.nan, np.nan])
    stats.update([1] * 4 + [2] * 4, [1, 1, 1, 1] + [0, 0, 0, 0])
    np.testing.assert_allclose(stats.success_rates([1, 2]), [0.25, 1.0])  # mid-epoch: still the prior alone
    stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([1, 2]), [(1 + 4) / (4 + 4), (4 + 0) / (4 + 4)])
    for _ in range(3):  # the same evidence epoch after epoch: the prior keeps its full weight
        stats.update([1] * 4, [1, 1, 1, 1])
        stats.end_epoch()
    np.testing.assert_allclose(stats.success_rates([1]), [(1 + 4) / (4 + 4)])
    np.testing.assert_array_equal(stats.batch([1, 2]).success_rate, stats.success_rates([1, 2]))


def test_prior_seeds_est_decayed_counts_and_decays_per_visit():
    stats = PromptStatistics(decay=0.5)
    stats.set_prior([1], [0.25], weight=8)  # s0 = 2, t0 = 8
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + 2) / (17 + 8)])
    stats.update([1, 1], [1.0, 0.0])  # v = 1: n_pos = 1, n_tot = 2
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + 0.5 * 2 + 1) / (17 + 0.5 * 8 + 2)])
    stats.update([1, 1], [1.0, 1.0])  # v = 2: n_pos = 0.5 + 2, n_tot = 1 + 2
    stats.update([1, 1], [np.nan, np.nan])  # not a visit
    stats.end_epoch()  # priors and decay untouched by epochs
    want = (1 + 0.25 * 2 + 2.5) / (17 + 0.25 * 8 + 3)
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [want])
    # The prior decays exactly like pseudo-counts added to the decayed columns at set_prior time.
    alt = PromptStatistics(decay=0.5)
    alt.update([1] * 8, [1.0] * 2 + [0.0] * 6)  # a real visit worth the prior
    alt.update([1, 1], [1.0, 0.0])
    alt.update([1, 1], [1.0, 1.0])
    np.testing.assert_allclose(alt.batch([1]).smoothed_rate, [want])


def test_set_prior_again_replaces_without_double_counting():
    stats = PromptStatistics(decay=0.5)
    stats.update([1, 1], [1.0, 0.0])
    stats.set_prior([1], [0.5], weight=4)
    stats.update([1, 1], [0.0, 0.0])  # v = 1
    before = stats.state_dict()
    stats.set_prior([1], [0.5], weight=4)  # the same prior again: nothing changes (v stays 1)
    assert stats.state_dict() == before
    stats.set_prior([1], [1.0], weight=2)  # another prior: replaces the old one and starts at v = 0
    n_pos, n_tot = 0.5 * 1 + 0, 0.5 * 2 + 2
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + 2 + n_pos) / (17 + 2 + n_tot)])
    assert stats.state_dict()["columns"]["prior_visits"] == [0]
    stats.set_prior([1], [np.nan], weight=2)  # NaN clears it
    np.testing.assert_allclose(stats.batch([1]).smoothed_rate, [(1 + n_pos) / (17 + n_tot)])
    assert stats.num_with_prior == 0 and len(stats) == 1
    stats.set_prior([1], [0.5], weight=3)
    stats.set_prior([1], [0.5], weight=0)  # weight 0 clears it too
    assert stats.num_with_prior == 0
    np.testing.assert_array_equal(stats.batch([1]).prior_attempts, [0.0])


def test_prior_in_cero_beta_and_counts_stay_real():
    stats = PromptStatistics()
    stats.set_prior([1, 2], [0.75, 0.0], weight=4)
    stats.update([1, 1, 1], [1.0, 0.0, 0.0])
    b = stats.batch([1, 2, 3])
    np.testing.assert_array_equal(b.beta_a, [1 + 3 + 1, 1 + 0, 1])
    np.testing.assert_array_equal(b.beta_b, [1 + 1 + 2, 1 + 4, 1])
    np.testing.assert_array_equal(b.attempts, [3, 0, 0])  # real counts only
    np.testing.assert_array_equal(b.successes, [1, 0, 0])
    np.testing.assert_array_equal(b.prior_attempts, [4, 4, 0])
    np.testing.assert_array_equal(b.evidence > 0, [True, True, False])  # a prior makes a prompt "seen" for Est


def test_est_does_not_treat_a_prompt_with_prior_as_unseen():
    stats = PromptStatistics()
    stats.update([1] * 8, [0.0] * 7 + [1.0])
    stats.end_epoch()
    est = get_allocator("reinforce_ada_est", max_rollouts=64)
    w_before = est.prompt_weights(stats.batch([1, 2, 3]))
    assert w_before[1] == w_before[2] == w_before[0]  # unseen prompts 2 and 3 get the seen prompt's weight
    stats.set_prior([2], [0.9], weight=8)  # an easy prompt: weighted by its own p~, below the others
    w = est.prompt_weights(stats.batch([1, 2, 3]))
    assert w[1] < w[0] and w[2] == pytest.approx(np.mean(w[:2]))


def test_end_epoch_leaves_priors_untouched():
    stats = PromptStatistics()
    stats.set_prior([1], [0.5], weight=2)
    stats.update([1], [1.0])
    columns = stats.state_dict()["columns"]
    stats.end_epoch()
    after = stats.state_dict()["columns"]
    assert all(after[k] == columns[k] for k in ("prior_successes", "prior_attempts", "prior_visits"))


@pytest.mark.parametrize(
    "rates, weight, match",
    [
        ([1.5], 1.0, r"success_rates must lie in \[0, 1\].*\[1.5\].*\[0\]"),
        ([-0.1], 1.0, "success_rates must lie in"),
        ([float("inf")], 1.0, "success_rates must lie in"),
        ([0.5], -1.0, "weight=-1.0: must be >= 0"),
        ([0.5], float("nan"), "weight=nan: must be finite"),
        ([0.5], float("inf"), "weight=inf: must be finite"),
        ([0.5], "8", "weight='8': must be a real number"),
        ([0.5, 0.5], 1.0, "one rate per prompt id"),
        (["a"], 1.0, "success_rates must hold numbers"),
    ],
)
def test_invalid_priors_are_rejected(rates, weight, match):
    stats = PromptStatistics()
    with pytest.raises(ValueError, match=match):
        stats.set_prior([0], rates, weight)
    assert len(stats) == 0


def test_prior_duplicates_and_none():
    stats = PromptStatistics()
    stats.set_prior([1, 1, 2], [0.5, 0.5, None], weight=2)  # a repeated id with the same rate is fine
    assert len(stats) == 1 and stats.num_with_prior == 1
    with pytest.raises(ValueError, match="prompt id 3 is given two different"):
        stats.set_prior([3, 3], [0.5, 0.25], weight=2)
    stats.set_prior([], [], weight=2)
    assert len(stats) == 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("update"), st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 1.0])), max_size=8)
            ),
            st.tuples(st.just("epoch"), st.none()),
            st.tuples(
                st.just("prior"),
                st.tuples(
                    st.integers(0, 4),
                    st.one_of(st.just(math.nan), st.floats(0.0, 1.0)),
                    st.sampled_from([0.0, 0.5, 2.0, 8.0]),
                ),
            ),
        ),
        max_size=12,
    )
)
def test_prior_rules_match_a_plain_reference(ops):
    """Every reading against a reference that keeps the prior apart and applies the documented formulas."""
    gamma = 0.8
    stats = PromptStatistics(decay=gamma)
    cur, last, tot, dec, prior = {}, {}, {}, {}, {}  # prior: id -> [s0, t0, v]
    for kind, arg in ops:
        if kind == "update":
            stats.update(np.array([i for i, _ in arg], dtype=np.int64), np.array([r for _, r in arg]))
            visit = {}
            for i, r in arg:
                s, t = visit.get(i, (0, 0))
                visit[i] = (s + r, t + 1)
            for i, (s, t) in visit.items():
                for d in (cur, tot):
                    d[i] = tuple(a + b for a, b in zip(d.get(i, (0, 0)), (s, t), strict=True))
                p0, n0 = dec.get(i, (0.0, 0.0))
                dec[i] = (gamma * p0 + s, gamma * n0 + t)
                if i in prior:
                    prior[i][2] += 1
        elif kind == "epoch":
            stats.end_epoch()
            last.update(cur)
            cur = {}
        else:
            i, p, w = arg
            stats.set_prior([i], [p], w)
            if math.isnan(p) or w == 0:
                prior.pop(i, None)
            elif i not in prior or prior[i][:2] != [w * p, w]:
                prior[i] = [w * p, w, 0]
    ids = list(range(6))
    b = stats.batch(ids)
    want_rate, want_smooth, want_a, want_b = [], [], [], []
    for i in ids:
        s0, t0, v = prior.get(i, (0.0, 0.0, 0))
        c_last, t_last = last.get(i, (0, 0))
        c, t = tot.get(i, (0, 0))
        n_pos, n_tot = dec.get(i, (0.0, 0.0))
        want_rate.append((c_last + s0) / (t_last + t0) if t_last + t0 > 0 else math.nan)
        want_smooth.append((1 + gamma**v * s0 + n_pos) / (17 + gamma**v * t0 + n_tot))
        want_a.append(1 + s0 + c)
        want_b.append(1 + (t0 - s0) + (t - c))
    np.testing.assert_allclose(b.success_rate, want_rate, rtol=1e-12)
    np.testing.assert_allclose(b.smoothed_rate, want_smooth, rtol=1e-12)
    np.testing.assert_allclose(b.beta_a, want_a, rtol=1e-12)
    np.testing.assert_allclose(b.beta_b, want_b, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(b.attempts, [tot.get(i, (0, 0))[1] for i in ids])
    np.testing.assert_array_equal(b.prior_attempts, [prior.get(i, (0, 0))[1] for i in ids])
    assert stats.num_with_prior == len(prior)
    restored = PromptStatistics(decay=gamma)
    restored.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert restored.state_dict() == stats.state_dict()
    assert PromptStatistics.from_dataset(stats.to_dataset()).state_dict() == stats.state_dict()


# ==== fingerprints ===================================================================================================
def test_prompt_fingerprint_known_values():
    text = "Solve 2x + 3 = 7. Put the answer in \\boxed{}."
    assert prompt_fingerprint(text) == hashlib.sha256(json.dumps(text).encode("utf-8")).hexdigest()[:16]
    unicode_text = "Café: ∫ x dx ="  # ensure_ascii=False: hashed as UTF-8, not as \\u escapes
    assert prompt_fingerprint(unicode_text) == hashlib.sha256(f'"{unicode_text}"'.encode()).hexdigest()[:16]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
    canonical = '[{"content":"Be brief.","role":"system"},{"content":"2 + 2?","role":"user"}]'
    assert prompt_fingerprint(messages) == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    reordered = [{"content": m["content"], "role": m["role"]} for m in messages]
    assert prompt_fingerprint(reordered) == prompt_fingerprint(messages) == prompt_fingerprint(tuple(messages))
    fp = prompt_fingerprint(text)
    assert len(fp) == 16 and all(ch in "0123456789abcdef" for ch in fp)
    # Whitespace, the plain-vs-conversational format and message contents all count.
    assert len({prompt_fingerprint(p) for p in (text, text + " ", [{"role": "user", "content": text}])}) == 3


def test_prompt_fingerprint_is_stable_across_processes():
    code = (
        "from trl_adaptive.stats import prompt_fingerprint as f; "
        "print(f('abc'), f([{'role': 'user', 'content': 'x'}]))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1")
    }
    assert outputs == {f"{prompt_fingerprint('abc')} {prompt_fingerprint([{'role': 'user', 'content': 'x'}])}\n"}


@pytest.mark.parametrize(
    "prompt", [3, None, ["not a dict"], {"role": "user", "content": "x"}, [{"content": object()}]]
)
def test_prompt_fingerprint_rejects_other_types(prompt):
    with pytest.raises(TypeError, match="prompt"):
        prompt_fingerprint(prompt)


def test_fingerprint_mismatches():
    stats = PromptStatistics()
    stats.update([1, 1], [1.0, 0.0])
    fps = {i: prompt_fingerprint(f"prompt {i}") for i in range(5)}
    stats.set_fingerprints([0, 1, 2], [fps[0], fps[1], fps[2]])
    assert len(stats) == 3 and 0 in stats  # rows for new ids
    assert stats.fingerprint_mismatches([0, 1, 2, 3], [fps[i] for i in range(4)]).tolist() == []
    got = stats.fingerprint_mismatches([2, 3, 1, 2], [fps[4], fps[4], fps[0], fps[4]])
    assert got.dtype == np.int64 and got.tolist() == [1, 2]  # 3 has no stored fingerprint: not a mismatch
    stats.set_fingerprints([2], [fps[4]])  # overwrites
    assert stats.fingerprint_mismatches([2], [fps[4]]).tolist() == []
    with pytest.raises(ValueError, match="non-empty strings"):
        stats.set_fingerprints([0], [""])
    with pytest.raises(ValueError, match="non-empty strings"):
        stats.fingerprint_mismatches([0], [None])
    with pytest.raises(ValueError, match="one each"):
        stats.set_fingerprints([0, 1], [fps[0]])
    with pytest.raises(ValueError, match="prompt id 7 is given two different fingerprints"):
        stats.set_fingerprints([7, 7], [fps[0], fps[1]])


# ==== persistence: versions and damaged files ========================================================================
def _full_store() -> PromptStatistics:
    stats = PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0)
    stats.update([10, 10, 11, 12], [0.7, 0.1, 0.9, np.nan])
    stats.set_prior([10, 13], [0.3, 0.9], weight=3.0)
    stats.set_fingerprints([10, 11, 14], ["a" * 16, "b" * 16, "c" * 16])
    stats.end_epoch()
    stats.update([10, 11, 11, 13], [0.6, 0.0, 0.2, 1.0])
    return stats


def test_version_2_round_trip_with_priors_and_fingerprints(tmp_path):
    stats = _full_store()
    state = stats.state_dict()
    assert state["version"] == FORMAT_VERSION == 3  # version 3 adds the posterior columns
    assert state["prompt_ids"] == [10, 11, 13, 14]  # 12 only had a NaN reward: no row
    assert state["fingerprints"] == ["a" * 16, "b" * 16, "", "c" * 16]
    assert state["columns"]["prior_attempts"] == [3.0, 0.0, 3.0, 0.0]
    assert state["columns"]["prior_visits"] == [1, 0, 1, 0]
    stats.save(tmp_path / "s.json")
    loaded = PromptStatistics.load(tmp_path / "s.json")
    assert loaded.state_dict() == state
    ids = [10, 11, 12, 13, 14, 15]
    for field in ("success_rate", "smoothed_rate", "beta_a", "beta_b", "attempts", "prior_attempts"):
        np.testing.assert_array_equal(getattr(loaded.batch(ids), field), getattr(stats.batch(ids), field))
    for s in (stats, loaded):
        s.update([10, 13], [1.0, 0.0])
    assert loaded.state_dict() == stats.state_dict()


def test_version_1_state_loads_without_priors_or_fingerprints(tmp_path):
    v1 = {
        "format": "trl_adaptive.PromptStatistics",
        "version": 1,
        "config": {"success_threshold": 1.0, "decay": 0.9, "prior_alpha": 1.0, "prior_beta": 16.0},
        "epoch": 1,
        "prompt_ids": [7, 9],
        "columns": {
            "current_successes": [0, 0],
            "current_attempts": [0, 0],
            "last_successes": [1, 0],
            "last_attempts": [2, 1],
            "total_successes": [1, 0],
            "total_attempts": [2, 1],
            "decayed_successes": [1.0, 0.0],
            "decayed_attempts": [2.0, 1.0],
        },
    }
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    stats = PromptStatistics.load(tmp_path / "v1.json", decay=0.9)
    assert stats.epoch == 1 and len(stats) == 2 and stats.num_with_prior == 0
    np.testing.assert_allclose(stats.success_rates([7, 9]), [0.5, 0.0])
    np.testing.assert_allclose(stats.batch([7]).smoothed_rate, [2 / 19])
    assert stats.fingerprint_mismatches([7], ["f" * 16]).tolist() == []  # no stored fingerprint
    state = stats.state_dict()
    assert state["version"] == FORMAT_VERSION and state["fingerprints"] == ["", ""]
    assert state["columns"]["prior_attempts"] == [0.0, 0.0] and state["columns"]["prior_visits"] == [0, 0]
    fresh = PromptStatistics()
    fresh.load_state_dict(v1)
    assert fresh.state_dict() == state


@pytest.mark.parametrize("key", ["version", "config", "epoch", "prompt_ids", "columns", "fingerprints"])
def test_missing_keys_are_named(key, tmp_path):
    state = _full_store().state_dict()
    del state[key]
    target = PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0)
    with pytest.raises(ValueError, match=f"lacks the key '{key}'" if key != "config" else "config"):
        target.load_state_dict(state)
    assert len(target) == 0  # nothing half-loaded
    path = tmp_path / "s.json"
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=str(path)):
        PromptStatistics.load(path)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda s: s["columns"].pop("prior_visits"), r"lacks columns \['prior_visits'\]"),
        (lambda s: s["columns"]["prior_successes"].__setitem__(0, 99.0), "prior_successes exceeds prior_attempts"),
        (lambda s: s["columns"]["total_attempts"].__setitem__(0, 1.5), "whole numbers"),
        (lambda s: s["columns"]["total_attempts"].__setitem__(0, "x"), "must be a list of numbers"),
        (lambda s: s["fingerprints"].pop(), "fingerprints and prompt_ids differ in length"),
        (lambda s: s["fingerprints"].__setitem__(0, None), "fingerprints must be a list of strings"),
        (lambda s: s.__setitem__("epoch", -1), "epoch must be an integer"),
        (lambda s: s.__setitem__("version", 4), "format version 4"),
    ],
)
def test_inconsistent_states_are_rejected(change, match):
    state = json.loads(json.dumps(_full_store().state_dict()))
    change(state)
    with pytest.raises(ValueError, match=match):
        PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0).load_state_dict(state)


@pytest.mark.parametrize("damage", ["truncate", "empty", "binary"])
def test_corrupt_file_gives_a_clear_error(tmp_path, damage):
    path = tmp_path / "prompt_stats.json"
    _full_store().save(path)
    raw = path.read_bytes()
    path.write_bytes({"truncate": raw[: len(raw) // 2], "empty": b"", "binary": b"\xff\xfe\x00garbage"}[damage])
    with pytest.raises(ValueError, match="truncated or corrupt") as info:
        PromptStatistics.load(path)
    assert str(path) in str(info.value) and "earlier checkpoint" in str(info.value)


# ==== datasets export / import =======================================================================================
def test_to_dataset_columns_and_metadata():
    stats = _full_store()
    ds = stats.to_dataset()
    assert ds.column_names[:3] == ["prompt_id", "prompt_fingerprint", "success_rate"]
    assert {
        f: ds.features[f].dtype for f in ("prompt_id", "prompt_fingerprint", "total_attempts", "prior_visits")
    } == {
        "prompt_id": "int64",
        "prompt_fingerprint": "string",
        "total_attempts": "int64",
        "prior_visits": "int64",
    }
    assert ds.features["decayed_successes"].dtype == ds.features["prior_attempts"].dtype == "float64"
    ids = ds["prompt_id"][:]
    np.testing.assert_array_equal(np.asarray(ds["success_rate"][:]), stats.success_rates(ids))
    assert list(ds["prompt_fingerprint"][:]) == stats.state_dict()["fingerprints"]
    meta = json.loads(ds.info.description)
    assert meta == json.loads(ds.features["prompt_id"].id)
    assert meta == {"format": "trl_adaptive.PromptStatistics", "version": 3, "config": stats.config, "epoch": 1}


def test_dataset_round_trips(tmp_path):
    import datasets

    stats = _full_store()
    want = stats.state_dict()
    ds = stats.to_dataset()
    assert PromptStatistics.from_dataset(ds, decay=0.8).state_dict() == want
    ds.save_to_disk(str(tmp_path / "disk"))
    assert PromptStatistics.from_dataset(datasets.load_from_disk(str(tmp_path / "disk"))).state_dict() == want
    ds.to_parquet(str(tmp_path / "stats.parquet"))
    from_parquet = datasets.Dataset.from_parquet(str(tmp_path / "stats.parquet"))
    assert from_parquet.info.description in ("", None)  # parquet drops the description: the feature id carries it
    assert PromptStatistics.from_dataset(from_parquet).state_dict() == want
    # Reordered / selected rows: same statistics per id.
    shuffled = PromptStatistics.from_dataset(ds.shuffle(seed=0))
    ids = [10, 11, 12, 13, 14, 15]
    for field in ("success_rate", "smoothed_rate", "beta_a", "beta_b", "attempts", "prior_attempts"):
        np.testing.assert_array_equal(getattr(shuffled.batch(ids), field), getattr(stats.batch(ids), field))
    assert shuffled.fingerprint_mismatches([10, 11, 14], ["a" * 16, "b" * 16, "c" * 16]).tolist() == []
    assert len(PromptStatistics.from_dataset(ds.select([0, 2]))) == 2
    empty = PromptStatistics()
    assert PromptStatistics.from_dataset(empty.to_dataset()).state_dict() == empty.state_dict()


def test_from_dataset_errors():
    import datasets

    ds = _full_store().to_dataset()
    with pytest.raises(ValueError, match="decay=0.8 but this run uses decay=0.9"):
        PromptStatistics.from_dataset(ds, decay=0.9)
    with pytest.raises(TypeError, match="Unknown PromptStatistics config"):
        PromptStatistics.from_dataset(ds, threshold=1.0)
    rates_only = datasets.Dataset.from_dict({"prompt_id": [0, 1], "success_rate": [0.5, float("nan")]})
    with pytest.raises(ValueError, match=r"lacks the columns \['prompt_fingerprint', 'current_successes'.*set_prior"):
        PromptStatistics.from_dataset(rates_only)
    with pytest.raises(ValueError, match="lacks the columns.*'prior_visits'"):
        PromptStatistics.from_dataset(ds.remove_columns("prior_visits"))
    with pytest.raises(TypeError, match="pass e.g. dataset\\['train'\\]"):
        PromptStatistics.from_dataset(datasets.DatasetDict({"train": ds}))
    with pytest.raises(TypeError, match="datasets.Dataset"):
        PromptStatistics.from_dataset(ds.to_dict())
    stripped = datasets.Dataset.from_dict(ds.to_dict())  # rebuilt: no metadata
    with pytest.raises(ValueError, match="no PromptStatistics metadata"):
        PromptStatistics.from_dataset(stripped)
    bad = ds.map(lambda row: {"prior_successes": 100.0})
    with pytest.raises(ValueError, match="dataset: PromptStatistics state: prior_successes exceeds"):
        PromptStatistics.from_dataset(bad)


# ==== the posterior: one Beta for CERO and bayes_knapsack, with forgetting ===========================================
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
    assert state["version"] == FORMAT_VERSION == 3 and state["config"]["posterior_half_life"] == 3.7
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


def test_version_2_state_loads_with_the_cumulative_posterior(tmp_path):
    # A version-2 file predates the posterior columns: the posterior starts from the cumulative counts, and the
    # configured half-life (and weak prior) of the loading store apply from there on.
    v3 = _full_store().state_dict()
    v2 = json.loads(json.dumps(v3))
    v2["version"] = 2
    for key in ("posterior_half_life", "posterior_prior_a", "posterior_prior_b"):
        del v2["config"][key]
    for key in ("posterior_successes", "posterior_failures"):
        del v2["columns"][key]
    config = {"success_threshold": 0.5, "decay": 0.8, "prior_alpha": 0.5, "prior_beta": 4.0}
    plain = PromptStatistics(**config)
    plain.load_state_dict(v2)
    assert plain.state_dict() == v3  # without forgetting nothing is lost
    forgetting = PromptStatistics(**config, posterior_half_life=1.0)
    forgetting.load_state_dict(v2)
    np.testing.assert_array_equal(forgetting.batch([10, 11]).beta_a, plain.batch([10, 11]).beta_a)
    forgetting.update([], [])
    ids = [10, 11]
    np.testing.assert_allclose(forgetting.batch(ids).beta_a - 1 - np.array([0.9, 0]), 0.5 * np.array([2, 1]))
    (tmp_path / "v2.json").write_text(json.dumps(v2))
    loaded = PromptStatistics.load(tmp_path / "v2.json", posterior_half_life=6.0)
    assert loaded.posterior_half_life == 6.0 and loaded.config["decay"] == 0.8
    assert PromptStatistics.load(tmp_path / "v2.json").posterior_half_life is None


def test_posterior_evidence_above_the_counts_is_rejected():
    state = json.loads(json.dumps(_full_store().state_dict()))
    state["columns"]["posterior_successes"][0] = 99.0
    with pytest.raises(ValueError, match="posterior's evidence exceeds the cumulative counts"):
        PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0).load_state_dict(state)
    state = json.loads(json.dumps(_full_store().state_dict()))
    del state["columns"]["posterior_failures"]
    with pytest.raises(ValueError, match=r"lacks columns \['posterior_failures'\]"):
        PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0).load_state_dict(state)


def test_cero_reads_the_forgetting_posterior():
    stats = PromptStatistics(posterior_half_life=1.0)
    stats.update([1] * 4, [1.0, 1.0, 0.0, 0.0])
    stats.update([], [])
    c, _ = get_allocator("cero", eta=1.0).scores(stats.batch([1]))
    a, b = 2.0, 2.0  # 1 + 2 * 0.5 each
    assert c[0] == pytest.approx(a * b / ((a + b) * (a + b + 1)))
