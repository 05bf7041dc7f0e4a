"""The dispatch layout (``trl_adaptive/trainer/dispatch.py``): an allocation's counts expanded into one job per
completion, shuffled by seed and step, and split evenly over the ranks. NumPy only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.stats import stable_prompt_ids
from trl_adaptive.trainer.dispatch import dispatch_order, expand_counts, rank_slice


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=10), st.integers(0, 2**40), st.integers(0, 10_000))
def test_expand_counts_conserves_counts_and_is_deterministic(counts, seed, step):
    counts = np.array(counts)
    jobs = expand_counts(counts, seed, step)
    assert jobs.dtype == np.int64 and len(jobs) == counts.sum()
    np.testing.assert_array_equal(np.bincount(jobs, minlength=len(counts)), counts)
    np.testing.assert_array_equal(expand_counts(counts, seed, step), jobs)


def test_expand_counts_shuffle_depends_on_seed_and_step():
    counts = np.array([10, 2, 2, 2])
    base = expand_counts(counts, seed=0, step=0)
    assert not np.array_equal(base, np.repeat(np.arange(4), counts))  # unequal counts are shuffled
    assert not np.array_equal(expand_counts(counts, seed=0, step=1), base)
    assert not np.array_equal(expand_counts(counts, seed=1, step=0), base)
    np.testing.assert_array_equal(expand_counts(counts, seed=0, step=0), base)


@pytest.mark.parametrize("counts", [[4, 4, 4], [2, 2], [1], [3, 3, 3, 3]])
def test_expand_counts_keeps_prompt_major_order_for_equal_counts(counts):
    for step in (0, 5):
        np.testing.assert_array_equal(
            expand_counts(np.array(counts), seed=42, step=step), np.repeat(np.arange(len(counts)), counts)
        )


@pytest.mark.parametrize(
    "keys",
    [np.arange(3), np.array([-1, -2, -3]), stable_prompt_ids(["uuid-0", "uuid-1", "uuid-2"])],
    ids=["indices", "negative-ids", "hashed-string-ids"],
)
def test_dispatch_order_takes_any_int64_group_keys(keys):
    """Rounds dispatch by prompt id, which may be negative or a 63-bit hash: only the group sizes matter."""
    equal = np.repeat(keys, 4)
    np.testing.assert_array_equal(dispatch_order(equal, seed=0, step=3), np.arange(12))  # TRL's layout kept
    skewed = np.repeat(keys, [6, 3, 3])
    order = dispatch_order(skewed, seed=0, step=3)
    assert sorted(order.tolist()) == list(range(12)) and not np.array_equal(order, np.arange(12))
    np.testing.assert_array_equal(order, dispatch_order(np.repeat(np.arange(3), [6, 3, 3]), seed=0, step=3))


def test_rank_slice_splits_evenly():
    jobs = expand_counts(np.array([10, 2, 2, 2]), seed=0, step=3)
    for num_processes in (1, 2, 4, 8, 16):
        pieces = [jobs[rank_slice(16, num_processes, r)] for r in range(num_processes)]
        assert all(len(piece) == 16 // num_processes for piece in pieces)
        np.testing.assert_array_equal(np.concatenate(pieces), jobs)
    assert rank_slice(16, 2, 1) == slice(8, 16)


@pytest.mark.parametrize("total,num_processes", [(15, 2), (16, 3), (1, 2)])
def test_rank_slice_rejects_indivisible_totals(total, num_processes):
    with pytest.raises(ValueError, match="evenly"):
        rank_slice(total, num_processes, 0)
