"""The floor of visits (``trl_adaptive/sampling/revisit.py``): a prompt a selecting source passes over at k
consecutive offers is generated at the next, the wrapped source composes the rest without it, state round trips
exactly, and what cannot work is refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sampling.test_selection import NUM_PROMPTS, context, first_unexamined

from trl_adaptive.sampling import RevisitFloor, SettledPromptSkipping, ThompsonPoolSelection
from trl_adaptive.sampling.source import OfferedPrompts, check_source_batch, source_metrics
from trl_adaptive.strategies import build_prompt_source


def settled(*easy: int) -> SettledPromptSkipping:
    """GRESO with prompts ``easy`` on a 60-visit all-success streak: skipped with probability ~1."""
    greso = SettledPromptSkipping(floor=1e-12)
    greso.load_own_state(
        {"p_easy": 0.5, "p_hard": 0.5, "easy_streaks": {str(i): 60 for i in easy}, "hard_streaks": {}}
    )
    return greso


def generate(source, batch) -> None:
    """End the step with every selected prompt generated twice, all correct (so a settled prompt stays settled)."""
    ids = np.asarray(batch.prompt_ids)
    source.end_step(ids, np.repeat(np.arange(len(ids)), 2), np.ones(2 * len(ids)), 1.0)


def test_a_prompt_passed_over_k_offers_is_generated_at_the_next():
    floor = RevisitFloor(settled(0), epochs=2)
    chosen = []
    for epoch in range(4):
        batch = floor.compose(context([0, 10, 11], seed=epoch, step=epoch))
        check_source_batch(floor, context([0, 10, 11]), batch)
        chosen.append(0 in batch.prompt_ids.tolist())
        # logged at every batch, empty until a prompt was passed over twice (10 and 11 settle once generated)
        assert (0 in batch.revisited.tolist()) == (epoch == 2) and (epoch >= 2 or batch.revisited.tolist() == [])
        generate(floor, batch)
    # skipped at epochs 0 and 1 (passed over 1x, 2x), forced at epoch 2, then the count starts again
    assert chosen == [False, False, True, False]
    assert floor.passed_over(np.array([0])).tolist() == [1]


def test_the_wrapped_source_composes_the_rest_and_never_draws_the_forced_prompt():
    asked = []

    def draw(exclude, number):
        asked.append(sorted(exclude.tolist()))
        return first_unexamined(exclude, number)

    floor = RevisitFloor(settled(0, 1, 2), epochs=1)
    floor.load_own_state({"source": floor.source.own_state(), "passed_over": {"0": 1}})
    batch = floor.compose(context([0, 1, 10], draw=draw))
    assert batch.prompt_ids.tolist()[0] == 0 and batch.revisited.tolist() == [0]
    assert len(batch.prompt_ids) == 3 and 1 not in batch.prompt_ids.tolist()  # 1 is skipped, refilled from the draw
    assert all(0 in exclude for exclude in asked)  # the draw excludes the forced prompt
    assert batch.skipped["settled_easy"].tolist() == [1, 2]
    assert source_metrics(floor, np.array([0, 1, 10]), batch)["prompt_source/revisit_forced"] == 1.0


def test_every_offered_prompt_due_skips_the_wrapped_source():
    floor = RevisitFloor(settled(), epochs=1)
    floor.load_own_state({"source": floor.source.own_state(), "passed_over": {"3": 1, "4": 5}})
    batch = floor.compose(context([3, 4]))
    assert batch.prompt_ids.tolist() == [3, 4] == batch.revisited.tolist()


def test_drawn_prompts_reset_and_prompts_never_offered_are_not_counted():
    floor = RevisitFloor(settled(0), epochs=3)
    batch = floor.compose(context([0, 10]))  # 0 skipped, refilled by the first unexamined id: 1
    assert batch.prompt_ids.tolist() == [10, 1]
    generate(floor, batch)
    assert floor.own_state()["passed_over"] == {"0": 1}  # only the offered prompt passed over counts


def test_state_round_trip_is_exact_with_the_wrapped_sources_state():
    def run(source, steps, start=0):
        batches = []
        for step in range(start, start + steps):
            offered = np.random.default_rng(100 + step).choice(NUM_PROMPTS, 8, replace=False)
            batch = source.compose(context(offered, seed=step, step=step))
            generate(source, batch)
            batches.append(batch.prompt_ids.tolist())
        return batches

    straight = RevisitFloor(SettledPromptSkipping(), epochs=1)
    run(straight, 12)
    saved = json.loads(json.dumps(straight.own_state()))
    assert saved["passed_over"] and saved["source"]["easy_streaks"]
    resumed = RevisitFloor(SettledPromptSkipping(), epochs=1)
    resumed.load_own_state(saved)
    assert run(resumed, 6, start=12) == run(straight, 6, start=12)
    with pytest.raises(ValueError, match="written without revisit_epochs"):
        resumed.load_own_state(SettledPromptSkipping().own_state())


def test_the_registry_builds_the_floor_for_any_selecting_source_and_refuses_the_sampler():
    floor = build_prompt_source("mopps", {"pool_factor": 2, "revisit_epochs": 3})
    assert isinstance(floor, RevisitFloor) and isinstance(floor.source, ThompsonPoolSelection)
    assert (floor.name, floor.reads, floor.needs_pool, floor.epochs) == ("mopps", ("posterior",), True, 3)
    assert floor.source.pool_factor == 2
    with pytest.raises(ValueError, match="revisit_epochs applies to a selecting prompt source"):
        build_prompt_source("sampler", {"revisit_epochs": 2})
    with pytest.raises(ValueError, match="it takes max_pool_factor.*revisit_epochs"):
        build_prompt_source("greso", {"pool": 2})
    with pytest.raises(ValueError, match=r"revisit_epochs=0: must be an integer >= 1"):
        build_prompt_source("greso", {"revisit_epochs": 0})
    with pytest.raises(ValueError, match="revisit_epochs applies"):
        RevisitFloor(OfferedPrompts(), 1)
