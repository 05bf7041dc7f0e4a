"""The one registry: a name means one thing everywhere, a new strategy is one class and its registration, and the
generic sampling layer names no strategy."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from helpers import REPO
from helpers.allocation import TwoAllocators

import trl_adaptive.strategies as strategies
from trl_adaptive import AdaptiveGRPOConfig
from trl_adaptive.allocation import Allocator, CeroAllocator, KnapsackAllocator, largest_remainder
from trl_adaptive.sampling import CeroPacing, PlanAhead
from trl_adaptive.strategies import (
    Strategy,
    as_procedure,
    register_allocator,
    register_strategy,
    registered_strategies,
    strategy,
)
from trl_adaptive.trainer.model_card import cited_papers


@dataclass
class EvenSplit(Allocator):
    """A user's allocator: equal counts."""

    name: ClassVar[str] = "even_split"
    reads: ClassVar[tuple[str, ...]] = ()

    def _allocate(self, stats, budget):
        return largest_remainder(np.full(len(stats), budget / len(stats)), budget)


@pytest.fixture
def registry_restored():
    saved = dict(strategies._STRATEGIES)
    yield
    strategies._STRATEGIES.clear()
    strategies._STRATEGIES.update(saved)


def test_a_users_allocator_is_one_class_and_its_registration(registry_restored, tmp_path):
    register_allocator(papers=("knapsack_rl",))(EvenSplit)
    assert "even_split" in registered_strategies() and strategy("even_split").reads == ()
    args = AdaptiveGRPOConfig(output_dir=str(tmp_path), allocator="even_split", num_generations=4, bf16=False)
    procedure = args.build_procedure()
    assert type(procedure) is PlanAhead and type(procedure.allocator) is EvenSplit
    assert [p.key for p in cited_papers("even_split")] == ["knapsack_rl"]  # the model card asks the registry
    with pytest.raises(ValueError, match=r"'even_split' takes no argument\(s\) \['token_budget'\]"):
        strategy("even_split").build(token_budget=100)


def test_a_users_round_procedure_is_a_config_name(registry_restored, tmp_path):
    register_strategy(Strategy("two_allocators", procedure=TwoAllocators))
    assert strategy("two_allocators").parameters == ["first", "second"] and not strategy("two_allocators").reads
    built = as_procedure("two_allocators", first=KnapsackAllocator(), second=CeroAllocator())
    assert type(built) is TwoAllocators


def test_one_name_means_one_thing(registry_restored):
    with pytest.raises(ValueError, match="'knapsack' is already registered to"):
        register_strategy(Strategy("knapsack", allocator=type("MyKnapsack", (KnapsackAllocator,), {})))
    with pytest.raises(ValueError, match="registers EvenSplit, whose name is 'even_split'"):
        Strategy("other_name", allocator=EvenSplit)
    register_strategy(Strategy("knapsack", allocator=KnapsackAllocator, papers=("knapsack_rl",)))  # the same: kept


NOTEBOOK_CELL = """
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trl_adaptive.allocation import Allocator, largest_remainder
from trl_adaptive.sampling.source import OfferedPrompts
from trl_adaptive.strategies import register_allocator, register_prompt_source


@register_allocator
@dataclass
class HalfAndHalf(Allocator):
    name: ClassVar[str] = "half_and_half"
    reads: ClassVar[tuple[str, ...]] = ()

    def _allocate(self, stats, budget):
        return largest_remainder(np.full(len(stats), budget / len(stats)), budget)


@register_prompt_source
class NotebookSource(OfferedPrompts):
    name: ClassVar[str] = "notebook_source"
"""


def test_re_running_a_notebook_cell_replaces_its_registrations(registry_restored):
    """The same class statement run again (same module and qualified name) replaces the name's class; another class
    under a taken name is still refused."""
    saved_sources = dict(strategies._PROMPT_SOURCES)
    try:
        first, second = {"__name__": "__main__"}, {"__name__": "__main__"}
        exec(NOTEBOOK_CELL, first)
        exec(NOTEBOOK_CELL, second)  # the cell re-run: new class objects, same definitions
        assert first["HalfAndHalf"] is not second["HalfAndHalf"]
        assert strategy("half_and_half").allocator is second["HalfAndHalf"]
        assert strategies.prompt_source("notebook_source") is second["NotebookSource"]
        with pytest.raises(ValueError, match="'half_and_half' is already registered to .*HalfAndHalf"):
            exec(NOTEBOOK_CELL.replace("class HalfAndHalf", "class Impostor"), {"__name__": "__main__"})
        with pytest.raises(ValueError, match="'notebook_source' is already registered to .*NotebookSource"):
            exec(NOTEBOOK_CELL.replace("class NotebookSource", "class Impostor"), {"__name__": "__main__"})
    finally:
        strategies._PROMPT_SOURCES.clear()
        strategies._PROMPT_SOURCES.update(saved_sources)


def test_cero_means_pacing_by_name_by_object_and_in_the_simulator():
    from trl_adaptive.sim import simulated_procedure

    for spec in ("cero", CeroAllocator()):
        assert type(as_procedure(spec)) is CeroPacing and type(simulated_procedure(spec)) is CeroPacing
    assert type(as_procedure("cero", pacing=False)) is PlanAhead
    assert as_procedure("cero", max_draw_rounds=1, max_rollouts=8).max_draw_rounds == 1
    with pytest.raises(ValueError, match="pacing is an argument of the procedure of 'cero'"):
        strategy("cero").new_allocator(pacing=False)


def test_what_the_config_refuses_comes_from_the_registry(tmp_path):
    able = [name for name in registered_strategies() if strategy(name).takes("token_budget")]
    assert able == ["bayes_knapsack", "knapsack"]
    with pytest.raises(ValueError, match="Choose one of bayes_knapsack, knapsack"):
        AdaptiveGRPOConfig(output_dir=str(tmp_path), allocator="cero", generation_token_budget=100.0, bf16=False)


# Modules of the sampling layer that any strategy uses; only a strategy's own procedure may name a strategy.
GENERIC = ("__init__.py", "base.py", "plan.py", "dynamic.py", "state.py", "rules.py")
STRATEGY_MODULES = ("cero", "bayes_knapsack", "knapsack", "reinforce_ada", "uniform")


@pytest.mark.parametrize("module", GENERIC)
def test_the_generic_sampling_layer_names_no_strategy(module):
    tree = ast.parse((REPO / "trl_adaptive" / "sampling" / module).read_text(encoding="utf-8"))
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    named = [m for m in imported if m.split(".")[-1] in STRATEGY_MODULES and "allocation" in m]
    assert not named, f"sampling/{module} imports {named}: strategy knowledge belongs to the strategy's own files"


def test_the_docs_table_of_strategies_is_the_registry():
    """docs/allocators.md's table lists every registered name with the class it builds, and nothing else."""
    text = (REPO / "docs" / "allocators.md").read_text(encoding="utf-8")
    table = text[text.index("| name | class |") :].split("\n\n")[0].splitlines()[2:]
    rows = {row.split("|")[1].strip().split("`")[1]: row.split("|")[2].split("`")[1] for row in table}
    assert sorted(rows) == registered_strategies()
    for name, cls in rows.items():
        assert cls == (strategy(name).allocator or strategy(name).procedure).__name__, name
