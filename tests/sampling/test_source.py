"""The prompt-source port (sampling/source.py): the default takes the sampler's prompts unchanged, a source's batch is
checked against the port's rules, the simulator composes through it, and the epoch rate of a prompt a source skips
for a whole epoch is the rate of the last epoch it was attempted in (docs/statistics.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.prompt_sources import LeastPickedPool

from trl_adaptive.batch import PromptBatchStats
from trl_adaptive.sampling import DynamicSampling, PlanAhead
from trl_adaptive.sampling.source import (
    OfferedPrompts,
    PromptSource,
    SourceBatch,
    SourceContext,
    check_source_batch,
    source_metrics,
)
from trl_adaptive.sim import simulate
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import get_allocator


def _ctx(offered, num_prompts=20, step=0, seed=0) -> SourceContext:
    def draw(exclude, number):
        rest = np.setdiff1d(np.arange(num_prompts), exclude)
        rng = np.random.default_rng([seed, step])
        return np.sort(rng.choice(rest, size=min(number, len(rest)), replace=False))

    return SourceContext(
        np.asarray(offered, dtype=np.int64),
        lambda ids: PromptBatchStats.from_success_rates(np.full(len(ids), 0.5)),
        draw,
        np.random.default_rng([seed, step, 1]),
        step,
        group_size=4,
    )


def test_the_default_source_returns_the_sampler_ids_unchanged():
    ctx = _ctx([7, 3, 11])
    source = OfferedPrompts()
    batch = source.compose(ctx)
    np.testing.assert_array_equal(check_source_batch(source, ctx, batch), [7, 3, 11])  # sampler order kept
    np.testing.assert_array_equal(batch.examined, [7, 3, 11])
    assert batch.skipped == {} and source_metrics(source, ctx.offered, batch) == {}  # logs stay TRL's
    assert source.own_state() == {} and source.name == "sampler" and not source.needs_pool
    source.load_own_state({})
    with pytest.raises(ValueError, match="OfferedPrompts keeps no state"):
        source.load_own_state({"picked": {}})


@pytest.mark.parametrize(
    ("ids", "examined", "match"),
    [
        ([1, 1, 2], [1, 2], "duplicate prompt ids"),
        ([1, 2], [1, 2], "returned 2 prompts for a batch of 3"),
        ([1, 2, 9], [1, 2, 3], "did not list in SourceBatch.examined"),
    ],
)
def test_a_batch_that_breaks_the_ports_rules_is_refused_naming_the_source(ids, examined, match):
    ctx = _ctx([1, 2, 3], step=4)
    with pytest.raises(ValueError, match=rf"prompt source OfferedPrompts \(step 4\).*{match}"):
        check_source_batch(OfferedPrompts(), ctx, SourceBatch(np.array(ids), np.array(examined)))


def test_a_pool_source_composes_from_drawn_candidates_and_its_state_survives_json():
    source = LeastPickedPool(pool_factor=3)
    source.check(20, 4)
    with pytest.raises(ValueError, match=r"pool_factor=30 must be an integer in \[1, 20\]"):
        LeastPickedPool(pool_factor=30).check(20, 4)
    ctx = _ctx([0, 1, 2, 3])
    batch = source.compose(ctx)
    ids = check_source_batch(source, ctx, batch)
    assert len(batch.examined) == 12 and set(ids) <= set(batch.examined.tolist())
    metrics = source_metrics(source, ctx.offered, batch)
    assert metrics["prompt_source/examined"] == 12 and metrics["prompt_source/skipped_picked_more"] == 8
    assert metrics["prompt_source/replaced"] == np.count_nonzero(~np.isin(ids, [0, 1, 2, 3]))
    source.end_step(ids, np.array([0, 0, 1, 2, 3]), np.ones(5), 1.0)
    restored = LeastPickedPool(pool_factor=3)
    restored.load_own_state(json.loads(json.dumps(source.own_state())))
    assert restored.own_state() == source.own_state() and restored.picked == {int(i): 1 for i in ids}
    # the same context gives the same batch (its randomness is ctx's), and the picked prompts go last next time
    again = restored.compose(_ctx([0, 1, 2, 3], step=1))
    assert not set(again.prompt_ids.tolist()) & set(ids.tolist())


def test_draw_further_defaults_to_the_datas_draw():
    calls = []

    def draw(exclude, number):
        calls.append((list(exclude), number))
        return np.arange(number)

    np.testing.assert_array_equal(PromptSource().draw_further(draw, np.array([5]), 2), [0, 1])
    assert calls == [([5], 2)]


# -- the simulator composes through the port ---------------------------------------------------------------------
SIM = dict(num_prompts=64, batch_prompts=8, num_generations=4, epochs=2, seed=1)


def test_the_simulators_default_source_is_the_sampler():
    plain = simulate("knapsack", **SIM)
    named = simulate("knapsack", prompt_source="sampler", **SIM)
    np.testing.assert_array_equal(plain.p_final, named.p_final)


def test_the_simulator_trains_on_the_sources_prompts_and_procedures_draw_through_it():
    source = LeastPickedPool(pool_factor=2)
    result = simulate("knapsack", prompt_source=source, **SIM)
    assert source.picked == {}  # the simulator ran a private copy
    offered_run = simulate("knapsack", **SIM)
    assert not np.array_equal(result.p_final, offered_run.p_final)  # other prompts were trained

    class CountingDraws(OfferedPrompts):
        calls = 0

        def draw_further(self, draw, exclude, number):
            type(self).calls += 1
            return draw(exclude, number)

    simulate(DynamicSampling(PlanAhead(get_allocator("knapsack"))), prompt_source=CountingDraws(), **SIM)
    assert CountingDraws.calls > 0  # dynamic sampling's refills went through the source


def test_a_prompt_skipped_for_a_whole_epoch_keeps_the_rate_of_the_last_epoch_it_was_attempted_in():
    """docs/statistics.md: the epoch rate (the success-rate column) is per prompt, from its last attempted epoch."""
    skipped = np.arange(8)  # kept out of every batch of epoch 2 (steps 8..15: 64 prompts, 8 per batch)

    class SkipInSecondEpoch(PromptSource):
        name = "skip_in_second_epoch"
        needs_pool = True

        def compose(self, ctx):
            if ctx.step < 8:
                return SourceBatch(ctx.offered, ctx.offered)
            kept = ctx.offered[~np.isin(ctx.offered, skipped)]
            fill = ctx.draw(np.concatenate([ctx.offered, skipped]), len(ctx.offered) - len(kept))
            return SourceBatch(np.concatenate([kept, fill]), np.concatenate([ctx.offered, fill]), {"held": skipped})

    stores, rates_after_epoch = [], []

    class Recording(PromptStatistics):
        def end_epoch(self):
            super().end_epoch()
            rates_after_epoch.append(self.success_rates(np.arange(64)).copy())

    simulate(
        "uniform",
        prompt_source=SkipInSecondEpoch(),
        statistics_factory=lambda: stores.append(Recording()) or stores[-1],
        **SIM,
    )
    first, second = rates_after_epoch
    assert not np.isnan(first).any()  # every prompt attempted in epoch 1 (the sampler offers each once)
    np.testing.assert_array_equal(second[skipped], first[skipped])  # epoch 2 skipped them: epoch 1's rate stays
    attempted = np.setdiff1d(np.arange(64), skipped)
    assert not np.array_equal(second[attempted], first[attempted])  # the others carry epoch 2's counts
    assert stores[0].batch(skipped).attempts.sum() == 8 * 4  # one batch each in epoch 1, none in epoch 2
