"""The types stats, allocation and sampling share (``trl_adaptive/batch.py``): the estimators' default priors stated
once, ``PromptStatistics.batch(ids, reads=...)`` reading only the estimators named, and an allocator that uses a
field of an estimator its ``reads`` leaves out failing loudly, naming its ``reads``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from trl_adaptive.allocation import Allocation, Allocator, PromptBatchStats, largest_remainder
from trl_adaptive.batch import ESTIMATOR_FIELDS
from trl_adaptive.stats import ESTIMATORS, PromptStatistics
from trl_adaptive.strategies import get_allocator


def _store() -> PromptStatistics:
    store = PromptStatistics(decay=0.7)
    store.update([1, 1, 2, 2, 3], [1.0, 0.0, 1.0, 1.0, 0.0], completion_tokens=[10, 30, 5, 5, 80])
    store.end_epoch()
    store.update([1, 2, 2], [1.0, 0.0, float("nan")])
    store.set_prior([4], [0.25], weight=4)
    return store


def test_the_old_import_paths_name_the_same_objects():
    import trl_adaptive
    from trl_adaptive import allocation, batch, sampling
    from trl_adaptive.allocation import base
    from trl_adaptive.sampling import rules

    assert allocation.PromptBatchStats is base.PromptBatchStats is batch.PromptBatchStats
    assert allocation.Allocation is base.Allocation is batch.Allocation is trl_adaptive.Allocation
    assert base.as_batch_stats is batch.as_batch_stats
    assert sampling.is_success is rules.is_success is batch.is_success is trl_adaptive.is_success


def test_each_estimator_fills_the_fields_the_leaf_names():
    assert {e.name: e.fields for e in ESTIMATORS} == dict(ESTIMATOR_FIELDS)
    assert tuple(ESTIMATOR_FIELDS) == Allocator.reads  # an allocator that declares nothing reads every estimator
    every = {f.name for f in dataclasses.fields(PromptBatchStats)}
    assert {name for fields in ESTIMATOR_FIELDS.values() for name in fields} <= every


@pytest.mark.parametrize("rates", [[0.0, 0.25, 0.5, 1.0, float("nan")], [0.125] * 3])
def test_from_success_rates_is_the_stores_reading_with_its_default_priors(rates):
    """One store update of 8 completions per seen prompt and no decay reads exactly what ``from_success_rates`` says:
    Est's prior and the posterior's weak prior are the same numbers in both places."""
    stats = PromptBatchStats.from_success_rates(rates)
    store = PromptStatistics(decay=1.0)
    seen = ~np.isnan(rates)
    ids = np.flatnonzero(seen)
    store.update(np.repeat(ids, 8), np.concatenate([np.arange(8) < 8 * r for r in np.asarray(rates)[seen]]))
    store.end_epoch()
    read = store.batch(np.arange(len(rates)))
    for field in ("success_rate", "attempts", "successes", "smoothed_rate", "beta_a", "beta_b"):
        np.testing.assert_array_equal(getattr(read, field), getattr(stats, field), err_msg=field)


def test_batch_reads_only_the_estimators_named():
    store, ids = _store(), [1, 2, 3, 4, 99]
    full = store.batch(ids)
    for name in ("prompt_ids", "success_rate", "attempts", "successes", "smoothed_rate", "beta_a", "beta_b"):
        np.testing.assert_array_equal(getattr(store.batch(ids, reads=None), name), getattr(full, name))
    for reads in [(), ("epoch_rate",), ("decayed_rate",), ("posterior",), ("decayed_rate", "posterior")]:
        some = store.batch(ids, reads=reads)
        for field in dataclasses.fields(PromptBatchStats):
            got, want = getattr(some, field.name), getattr(full, field.name)
            owner = next((e for e, fields in ESTIMATOR_FIELDS.items() if field.name in fields), None)
            if owner in (None, "epoch_rate") or owner in reads:  # always read, or named
                np.testing.assert_array_equal(got, want, err_msg=f"{field.name} with reads={reads}")
            else:
                assert got is None, (field.name, reads)


def test_batch_refuses_an_unknown_estimator():
    with pytest.raises(ValueError, match=r"unknown: \['posterior_rate'\]"):
        _store().batch([1], reads=("posterior_rate",))
    with pytest.raises(ValueError, match="sequence of estimator names"):
        _store().batch([1], reads="posterior")


@dataclass
class _Sneaky(Allocator):
    """Declares the epoch rate, uses Est's smoothed rate too."""

    name: ClassVar[str] = "sneaky-test"
    reads: ClassVar[tuple[str, ...]] = ("epoch_rate",)

    def _allocate(self, stats, budget):
        shares = np.asarray(stats.smoothed_rate, dtype=np.float64)
        return largest_remainder(budget * shares / shares.sum(), budget, self.min_rollouts, self.max_rollouts)


@pytest.mark.parametrize("reads", [None, ("epoch_rate",)])
def test_an_allocator_using_a_field_it_does_not_declare_fails_naming_its_reads(reads):
    """From every estimator or from its own ``reads`` alike: never a NaN (``np.asarray(None, float)`` is one)."""
    with pytest.raises(AssertionError, match=r"stats\.smoothed_rate.*'decayed_rate'.*reads = \('epoch_rate',\)"):
        _Sneaky().allocate(_store().batch([1, 2, 3], reads=reads), 12)
    with pytest.raises(AssertionError, match="smoothed_rate"):
        _Sneaky().allocate([0.5, 0.25], 8)


def test_every_use_of_an_undeclared_field_raises():
    stats = PromptBatchStats.from_success_rates([0.5, 0.25]).for_reader(("decayed_rate",), "A()")
    uses = [
        lambda a: np.asarray(a, dtype=np.float64),
        lambda a: a[0],
        lambda a: len(a),
        lambda a: list(a),
        lambda a: a + 1.0,
        lambda a: 1.0 - a,
        lambda a: a > 0,
        lambda a: a.tolist(),
        lambda a: np.isnan(a),
        lambda a: bool(a),
        lambda a: np.where(np.array([True, False]), a, 0.0),
    ]
    for field in ("success_rate", "beta_a", "beta_b"):
        for use in uses:
            with pytest.raises(AssertionError, match=rf"A\(\) used stats\.{field}.*reads = \('decayed_rate',\)"):
                use(getattr(stats, field))
    assert np.array_equal(stats.smoothed_rate, [(1 + 4) / 25, (1 + 2) / 25]) and "not in reads" in repr(stats)
    assert len(stats) == 2 and stats.evidence.tolist() == [8.0, 8.0]


def test_an_allocator_given_stats_without_what_it_declares_names_the_fix():
    partial = _store().batch([1, 2], reads=("epoch_rate",))
    for name, field in [("reinforce_ada_est", "smoothed_rate"), ("bayes_knapsack", "beta_a"), ("cero", "beta_a")]:
        allocator = get_allocator(name)
        with pytest.raises(ValueError, match=rf"reads \(.*\), but these statistics were read without.*{field}"):
            allocator.allocate(partial, 8)
    with pytest.raises(ValueError, match="read without the 'posterior' estimator"):
        get_allocator("bayes_knapsack").allocate_remaining(partial, 4, np.array([2, 2]))


def test_a_user_allocator_without_reads_sees_everything():
    @dataclass
    class Everything(Allocator):
        name: ClassVar[str] = "everything-test"

        def _allocate(self, stats, budget):
            assert stats.smoothed_rate is not None and stats.beta_a is not None
            counts = largest_remainder(np.full(len(stats), budget / len(stats)), budget)
            return Allocation(counts, metrics={"b": float(np.sum(stats.beta_a + stats.success_rate))})

    assert Everything().allocate([0.5, 0.25], 8).metrics == {"b": 1 + 4 + 1 + 2 + 0.75}
