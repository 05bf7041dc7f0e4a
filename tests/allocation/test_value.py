"""Knapsack RL's value function (trl_adaptive/allocation/value.py) against its closed forms."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation.value import (
    info_gain,
    marginal_gains,
    mixed_group_demand,
    prob_nonzero_gradient,
    value,
    value_table,
)

rates = st.floats(0.0, 1.0, allow_nan=False)
rate_lists = st.lists(rates, min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(1e-3, 1 - 1e-3), n=st.integers(0, 64))
def test_prob_nonzero_gradient_matches_the_formula(p, n):
    expected = 0.0 if n <= 1 else 1 - p**n - (1 - p) ** n
    assert prob_nonzero_gradient(n, p) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(0, 1024).map(lambda k: k / 1024), n=st.integers(0, 300))  # dyadic: 1 - (1 - p) == p
def test_prob_nonzero_gradient_is_a_symmetric_probability_increasing_in_n(p, n):
    prob = float(prob_nonzero_gradient(n, p))
    assert 0.0 <= prob <= 1.0
    assert prob == float(prob_nonzero_gradient(n, 1 - p))
    assert float(prob_nonzero_gradient(n + 1, p)) >= prob - 1e-15


def test_prob_nonzero_gradient_edge_cases():
    assert prob_nonzero_gradient([0, 1, 2, 128], 0.0).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert prob_nonzero_gradient([0, 1, 2, 128], 1.0).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert prob_nonzero_gradient([0, 1, 2], 0.5).tolist() == [0.0, 0.0, 0.5]
    # Full relative precision where 1 - (1 - p)**N would cancel to nothing.
    assert prob_nonzero_gradient(8, 1e-12) == pytest.approx(8e-12, rel=1e-9)
    assert prob_nonzero_gradient(8, 1 - 1e-12) == pytest.approx(8e-12, rel=1e-3)


def test_info_gain_peaks_at_one_third_and_vanishes_at_the_ends():
    grid = np.linspace(0, 1, 3001)
    assert grid[np.argmax(info_gain(grid))] == pytest.approx(1 / 3, abs=1e-3)
    assert float(info_gain(1 / 3)) == pytest.approx(4 / 27)
    assert info_gain([0.0, 1.0]).tolist() == [0.0, 0.0]


@settings(max_examples=40, deadline=None)
@given(p=rate_lists, n_up=st.integers(0, 40))
def test_value_table_holds_value_for_every_n(p, n_up):
    table = value_table(p, n_up)
    assert table.shape == (len(p), n_up + 1)
    expected = value(np.arange(n_up + 1)[None, :], np.asarray(p)[:, None])
    np.testing.assert_array_equal(table, expected)
    assert np.all(np.isfinite(table)) and np.all(table >= 0)


@settings(max_examples=40, deadline=None)
@given(p=rate_lists, n_up=st.integers(1, 130))
def test_marginal_gains_are_the_differences_and_concave_from_n1(p, n_up):
    gains = marginal_gains(p, n_up)
    assert gains.shape == (len(p), n_up)
    np.testing.assert_allclose(gains, np.diff(value_table(p, n_up), axis=1), rtol=0, atol=1e-15)
    assert np.all(gains >= 0)
    # Value is concave from N = 1 on: the gains never increase after column 1 ...
    assert np.all(np.diff(gains[:, 1:], axis=1) <= 1e-18)
    # ... and the one non-concave step 0 -> 1 -> 2 has the per-unit gain of the next step.
    if n_up >= 3:
        np.testing.assert_allclose((gains[:, 0] + gains[:, 1]) / 2, gains[:, 2], rtol=1e-12, atol=1e-18)


def test_mixed_group_demand_examples():
    assert mixed_group_demand([0.0, 0.5, 0.9, 0.99, 1.0]).tolist() == [128, 4, 22, 128, 128]
    assert mixed_group_demand([0.1, 0.9]).tolist() == [22, 22]  # symmetric in p <-> 1 - p
    assert mixed_group_demand([0.5], n_low=6).tolist() == [6]  # clipped up to N_low
    assert mixed_group_demand([0.9], n_up=16).tolist() == [16]  # clipped down to N_up
    assert mixed_group_demand([0.5], confidence=0.75).tolist() == [2]  # ln 0.25 / ln 0.5 = 2 exactly, not 3


@settings(max_examples=60, deadline=None)
@given(p=st.floats(1e-3, 1 - 1e-3))
def test_mixed_group_demand_is_the_smallest_n_meeting_the_bound(p):
    demand = int(mixed_group_demand([p], n_low=1, n_up=10**4)[0])
    a = max(p, 1 - p)
    assert a**demand <= 0.1 * (1 + 1e-9)
    assert demand == 1 or a ** (demand - 1) > 0.1 * (1 - 1e-9)
    assert demand == math.ceil(math.log(0.1) / math.log(a) - 1e-9)


@pytest.mark.parametrize("bad", [[float("nan")], [-0.1], [1.5]])
def test_invalid_rates_raise(bad):
    with pytest.raises(ValueError, match="success rates"):
        value_table(bad, 8)
    with pytest.raises(ValueError, match="success rates"):
        mixed_group_demand(bad)


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="n_up"):
        value_table([0.5], -1)
    with pytest.raises(ValueError, match="confidence"):
        mixed_group_demand([0.5], confidence=1.0)
    with pytest.raises(ValueError, match="n_low"):
        mixed_group_demand([0.5], n_low=9, n_up=8)
