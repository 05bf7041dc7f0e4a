"""A procedure's state is one tree over everything it holds: a user procedure with two allocators resumes exactly."""

from __future__ import annotations

import json

import pytest
from helpers.allocation import TwoAllocators, run_steps

from trl_adaptive.allocation import CeroAllocator
from trl_adaptive.sampling import (
    DynamicSampling,
    PilotCommit,
    PlanAhead,
)
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import as_procedure, build_procedure, registered_strategies


def _resumes_exactly(build) -> dict:
    """Run 6 steps; separately run 3, save the tree through JSON, load it into a fresh procedure, run 3 more."""
    full_store, full = PromptStatistics(), build()
    full_history = run_steps(full, full_store, range(6))
    store, first = PromptStatistics(), build()
    run_steps(first, store, range(3))
    saved = json.loads(json.dumps(first.state_dict(), allow_nan=False))
    resumed = build()
    resumed.load_state_dict(saved)
    assert resumed.state_dict() == saved
    assert run_steps(resumed, store, range(3, 6)) == full_history[3:]
    assert resumed.state_dict() == full.state_dict()
    return saved


def test_a_user_procedure_holding_two_allocators_resumes_exactly():
    tree = _resumes_exactly(lambda: TwoAllocators(CeroAllocator(max_rollouts=8), CeroAllocator(max_rollouts=8)))
    assert tree["type"] == "TwoAllocators" and set(tree["children"]) == {"first", "second"}
    first, second = (tree["children"][name]["state"] for name in ("first", "second"))
    # Each allocator moved with its own half only: both hold duals, of disjoint prompts.
    assert first["steps"] == second["steps"] == 3
    assert first["theta"] and second["theta"] and not set(first["theta"]) & set(second["theta"])


@pytest.mark.parametrize(
    "build",
    [
        lambda: build_procedure("cero", dynamic_sampling=True, strategy_kwargs={"max_rollouts": 16}),
        lambda: DynamicSampling(PilotCommit(pilot_rollouts=2, max_rollouts=16)),
        lambda: build_procedure("bayes_knapsack", pilot_rollouts=2),
    ],
    ids=["cero-dynamic", "pilot_commit-dynamic", "pilot"],
)
def test_every_composite_resumes_exactly_from_its_tree(build):
    _resumes_exactly(build)


@pytest.mark.parametrize("name", registered_strategies())
def test_every_registered_strategy_resumes_exactly_from_its_tree(name):
    """A new strategy is covered as soon as it is registered; the trainer's resume matrix covers those that hold
    state (``tests/trainer/test_resume.py``)."""
    _resumes_exactly(lambda: build_procedure(name))


def test_a_tree_of_other_procedures_is_refused_naming_the_node():
    tree = build_procedure("knapsack", dynamic_sampling=True).state_dict()
    with pytest.raises(ValueError, match=r"procedure\.inner\.allocator was saved as KnapsackAllocator.*CeroAllocator"):
        DynamicSampling(PlanAhead(CeroAllocator())).load_state_dict(tree)
    with pytest.raises(ValueError, match="procedure was saved as DynamicSampling but this run's is PlanAhead"):
        as_procedure("knapsack").load_state_dict(tree)
