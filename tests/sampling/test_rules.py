"""The success rule and DAPO's dynamic-sampling filter (``trl_adaptive/sampling/rules.py``), which every procedure,
the statistics store and the simulator share."""

from __future__ import annotations

import numpy as np
import pytest

from trl_adaptive.sampling import dynamic_sampling_keep, is_success


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
