"""The one registry of sampling strategies: every name ``AdaptiveGRPOConfig.allocator`` accepts, resolved here.

A strategy is registered once, as a :class:`Strategy`: its name, the allocator class or round procedure that is it,
the procedure an allocator samples with by default, the papers it implements and the store estimators it reads. The
config, the trainer, the simulator, the model card, the contract tests and the docs' tables all resolve names through
:func:`strategy`, so a name means the same procedure everywhere (``"cero"`` is CERO's pacing in the trainer and in
the simulator alike). A new strategy is one file and its registration (:func:`register_strategy`, or the
:func:`register_allocator` decorator for an allocator class).

The allocation math (``allocation/``) and the procedures (``sampling/``) import nothing from here: this module sits
above both and names the built-in strategies in one table at its end.

Example:
    >>> strategy("cero").build().__class__.__name__, strategy("knapsack").build().__class__.__name__
    ('CeroPacing', 'PlanAhead')
    >>> strategy("reinforce_ada_seq_pos").papers, strategy("knapsack").reads
    (('reinforce_ada',), ('epoch_rate',))
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .allocation import (
    Allocator,
    BayesKnapsackAllocator,
    CeroAllocator,
    KnapsackAllocator,
    ReinforceAdaEstAllocator,
    UniformAllocator,
)
from .allocation.token_budgeted import with_token_budget
from .sampling import (
    DynamicSampling,
    Pilot,
    PilotCommit,
    PlanAhead,
    Procedure,
    ReinforceAdaSeqBalance,
    ReinforceAdaSeqPos,
    cero_procedure,
)
from .sampling.revisit import RevisitFloor
from .sampling.selection import ExpectedValuePool, SettledPromptSkipping, ThompsonPoolSelection
from .sampling.source import OfferedPrompts, PromptSource


@dataclass(frozen=True)
class Strategy:
    """One registered strategy: an allocator planned by a procedure, or a round procedure of its own.

    Attributes:
        name: the config name (``AdaptiveGRPOConfig.allocator``).
        allocator: the allocator class (plan-ahead strategies), or None for a round procedure.
        procedure: for an allocator, ``procedure(allocator, **procedure_kwargs) -> Procedure``, how it samples by
            default (:class:`PlanAhead` when not given); for a round procedure, its class, built with the kwargs.
        procedure_parameters: the ``allocator_kwargs`` that go to ``procedure`` rather than the allocator (CERO's
            ``pacing``, ``max_draw_rounds``).
        papers: keys of the papers it implements (``trainer.model_card.PAPERS``); empty for none (uniform is GRPO).

    An allocator with ``budget_positions`` and ``budget_gains`` (a
    :class:`~trl_adaptive.allocation.token_budgeted.BudgetableAllocator`) also takes ``token_budget``: it is then built
    inside :class:`~trl_adaptive.allocation.token_budgeted.TokenBudgeted` (None: no budget).
    """

    name: str
    allocator: type[Allocator] | None = None
    procedure: Callable[..., Procedure] | None = None
    procedure_parameters: tuple[str, ...] = ()
    papers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.allocator is None and not (isinstance(self.procedure, type) and issubclass(self.procedure, Procedure)):
            raise ValueError(f"Strategy {self.name!r} needs an allocator class or a round procedure class.")
        owner = self.allocator or self.procedure
        if getattr(owner, "name", "") not in ("", self.name):
            raise ValueError(f"Strategy {self.name!r} registers {owner.__name__}, whose name is {owner.name!r}.")

    @property
    def is_allocator(self) -> bool:
        """True for a plan-ahead allocator (procedures such as a pilot round and dynamic sampling wrap it)."""
        return self.allocator is not None

    @property
    def parameters(self) -> list[str]:
        """The keyword arguments (``allocator_kwargs``) it is built with."""
        if self.allocator is None:
            return [f.name for f in dataclasses.fields(self.procedure) if f.init]
        signature = inspect.signature(self.allocator)
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        own = [p.name for p in signature.parameters.values() if p.kind in kinds]
        return own + (["token_budget"] if self.budgetable else []) + list(self.procedure_parameters)

    @property
    def budgetable(self) -> bool:
        """Whether its allocator can be re-solved under a token budget (``budget_positions``, ``budget_gains``)."""
        return self.allocator is not None and all(
            hasattr(self.allocator, method) for method in ("budget_positions", "budget_gains")
        )

    @property
    def reads(self) -> tuple[str, ...]:
        """The store estimators it decides from (``Allocator.reads``; a round procedure's own rounds: none)."""
        owner = self.allocator if self.allocator is not None else self.procedure
        return tuple(getattr(owner, "reads", ()))

    def takes(self, parameter: str) -> bool:
        """Whether ``parameter`` is one of its arguments (e.g. ``"token_budget"``: allocation under a token budget)."""
        return parameter in self.parameters

    def check_kwargs(self, kwargs: Mapping[str, Any]) -> None:
        """Refuse keyword arguments it does not take, naming them and the ones it takes."""
        unknown = sorted(set(kwargs) - set(self.parameters))
        if unknown:
            raise ValueError(
                f"allocator={self.name!r} takes no argument(s) {unknown}; it takes {', '.join(self.parameters)}. "
                "Remove them from allocator_kwargs, or choose the allocator they belong to."
            )

    def new_allocator(self, **kwargs: Any) -> Allocator:
        """Its allocator built with ``kwargs`` (procedure arguments refused: they do not make an allocator)."""
        if self.allocator is None:
            raise ValueError(f"{self.name!r} samples in rounds of its own; it has no allocator.")
        self.check_kwargs(kwargs)
        for name in self.procedure_parameters:
            if name in kwargs:
                raise ValueError(f"{name} is an argument of the procedure of {self.name!r}, not of its allocator.")
        token_budget = kwargs.pop("token_budget", None)
        return with_token_budget(self.allocator(**kwargs), token_budget)

    def procedure_for(self, allocator: Allocator, **procedure_kwargs: Any) -> Procedure:
        """The procedure ``allocator`` (one of this strategy's) samples with by default."""
        return (self.procedure or PlanAhead)(allocator, **procedure_kwargs)

    def build(self, **kwargs: Any) -> Procedure:
        """The procedure the name stands for, built with ``kwargs`` (``allocator_kwargs``)."""
        self.check_kwargs(kwargs)
        if self.allocator is None:
            return self.procedure(**kwargs)
        extra = {k: kwargs.pop(k) for k in self.procedure_parameters if k in kwargs}
        return self.procedure_for(self.new_allocator(**kwargs), **extra)


_STRATEGIES: dict[str, Strategy] = {}


def _same_definition(held: Any, new: Any) -> bool:
    """Whether ``new`` is ``held`` or the same class statement run again (its module and qualified name): a notebook
    cell re-run, or a module reloaded, defines a new class object that replaces the old one."""
    if held is new:
        return True
    return all(isinstance(c, type) for c in (held, new)) and (held.__module__, held.__qualname__) == (
        new.__module__,
        new.__qualname__,
    )


def register_strategy(entry: Strategy) -> Strategy:
    """Make ``entry.name`` a config name. A name registered to another class is refused: one name, one thing; the
    same class defined again (a re-run notebook cell, a reloaded module) replaces it."""
    held = _STRATEGIES.get(entry.name)
    same = held is not None and all(
        _same_definition(a, b) for a, b in ((held.allocator, entry.allocator), (held.procedure, entry.procedure))
    )
    if held is not None and not same:
        raise ValueError(
            f"strategy {entry.name!r} is already registered to {held.allocator or held.procedure}; give "
            f"{entry.allocator or entry.procedure} another name."
        )
    _STRATEGIES[entry.name] = entry
    return entry


def register_allocator(cls: type[Allocator] | None = None, *, papers: tuple[str, ...] = (), procedure=None):
    """Class decorator: register an :class:`Allocator` subclass under its ``name`` (planned ahead unless
    ``procedure`` says otherwise); ``@register_allocator`` or ``@register_allocator(papers=(...))``. An allocator
    with ``budget_positions`` and ``budget_gains`` (a ``BudgetableAllocator``) takes a token budget."""

    def register(allocator: type[Allocator]) -> type[Allocator]:
        if not getattr(allocator, "name", ""):
            raise ValueError(f"{allocator.__name__} must set a class attribute `name` to be registered.")
        register_strategy(Strategy(allocator.name, allocator=allocator, procedure=procedure, papers=papers))
        return allocator

    return register if cls is None else register(cls)


def strategy(name: str) -> Strategy:
    """The registered strategy ``name``; a ValueError listing the registered names otherwise."""
    if name not in _STRATEGIES:
        raise ValueError(f"Unknown allocator {name!r}. Registered strategies: {', '.join(registered_strategies())}.")
    return _STRATEGIES[name]


def registered_strategies() -> list[str]:
    """Every name ``AdaptiveGRPOConfig.allocator`` accepts."""
    return sorted(_STRATEGIES)


def registered_allocators() -> list[str]:
    """The names of the plan-ahead allocators (the strategies a pilot round or dynamic sampling can wrap)."""
    return [name for name in registered_strategies() if _STRATEGIES[name].is_allocator]


def get_allocator(name: str, **kwargs: Any) -> Allocator:
    """A registered allocator by name, e.g. ``get_allocator("knapsack", max_rollouts=64)``.

    Raises:
        ValueError: for an unknown name, a round procedure's name, or a keyword the allocator does not take (named,
            with the ones it does take).
    """
    return strategy(name).new_allocator(**kwargs)


def strategy_of(thing: Allocator | Procedure) -> Strategy | None:
    """The registered strategy an allocator or procedure object is an instance of (None: unregistered)."""
    for entry in _STRATEGIES.values():
        if type(thing) in (entry.allocator, entry.procedure):
            return entry
    return None


def as_procedure(spec: str | Allocator | Procedure, **kwargs: Any) -> Procedure:
    """The procedure a spec samples with: a name's (built with ``kwargs``), an allocator's registered default
    (:class:`PlanAhead` for an unregistered one), or the procedure itself."""
    if isinstance(spec, str):
        return strategy(spec).build(**kwargs)
    if kwargs:
        raise ValueError(f"{type(spec).__name__} is already built; it takes no further arguments {kwargs}.")
    if isinstance(spec, Procedure):
        return spec
    if isinstance(spec, Allocator):
        entry = strategy_of(spec)
        return entry.procedure_for(spec) if entry is not None else PlanAhead(spec)
    raise TypeError(f"Expected a strategy name, an Allocator or a Procedure, got {type(spec).__name__}.")


def build_procedure(
    spec: str | Allocator | Procedure,
    *,
    pilot_rollouts: int = 0,
    dynamic_sampling: bool = False,
    dynamic_sampling_max_rounds: int = 3,
    strategy_kwargs: Mapping[str, Any] | None = None,
) -> Procedure:
    """The procedure of a config: the strategy (built with ``strategy_kwargs``), with a pilot round
    (``pilot_rollouts > 0``) and / or dynamic sampling around it.

    Raises:
        ValueError: for a combination that cannot work, naming it and the alternative.

    Example:
        >>> procedure = build_procedure("knapsack", dynamic_sampling=True)
        >>> type(procedure).__name__, type(procedure.inner).__name__
        ('DynamicSampling', 'PlanAhead')
    """
    kwargs = dict(strategy_kwargs or {})
    if pilot_rollouts:
        if isinstance(spec, Procedure) or (isinstance(spec, str) and not strategy(spec).is_allocator):
            raise ValueError(
                f"pilot_rollouts={pilot_rollouts} needs allocator='bayes_knapsack'; {spec!r} samples in rounds of "
                "its own. Set pilot_rollouts=0, or allocator='bayes_knapsack'."
            )
        allocator = get_allocator(spec, **kwargs) if isinstance(spec, str) else spec
        procedure: Procedure = Pilot(allocator, pilot_rollouts)
    else:
        procedure = as_procedure(spec, **kwargs)
    if dynamic_sampling:
        procedure = DynamicSampling(procedure, dynamic_sampling_max_rounds)
    return procedure


# -- prompt sources: which prompts enter a generation batch (AdaptiveGRPOConfig.prompt_source) ---------------------
_PROMPT_SOURCES: dict[str, type[PromptSource]] = {}


def register_prompt_source(cls: type[PromptSource]) -> type[PromptSource]:
    """Make ``cls.name`` a ``prompt_source`` name (usable as a class decorator); one name, one class (the same class
    defined again, as by a re-run notebook cell, replaces it)."""
    if not (isinstance(cls, type) and issubclass(cls, PromptSource)) or not getattr(cls, "name", ""):
        raise ValueError(f"{cls!r} must be a PromptSource subclass with a class attribute `name` to be registered.")
    held = _PROMPT_SOURCES.get(cls.name)
    if held is not None and not _same_definition(held, cls):
        raise ValueError(f"prompt source {cls.name!r} is already registered to {held}; give {cls} another name.")
    _PROMPT_SOURCES[cls.name] = cls
    return cls


def prompt_source(name: str) -> type[PromptSource]:
    """The registered prompt source class ``name``; a ValueError listing the registered names otherwise."""
    if name not in _PROMPT_SOURCES:
        raise ValueError(
            f"Unknown prompt_source {name!r}. Registered prompt sources: {', '.join(registered_prompt_sources())}."
        )
    return _PROMPT_SOURCES[name]


def registered_prompt_sources() -> list[str]:
    """Every name ``AdaptiveGRPOConfig.prompt_source`` accepts."""
    return sorted(_PROMPT_SOURCES)


def build_prompt_source(name: str, kwargs: Mapping[str, Any] | None = None) -> PromptSource:
    """The source ``name`` built with ``kwargs`` (``prompt_source_kwargs``); unknown arguments refused by name.

    ``revisit_epochs`` (any selecting source) wraps it in a floor of visits (:class:`~.sampling.RevisitFloor`)."""
    cls = prompt_source(name)
    kwargs = dict(kwargs or {})
    revisit_epochs = kwargs.pop("revisit_epochs", None)
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    accepted = [p.name for p in inspect.signature(cls).parameters.values() if p.kind in kinds]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        accepted += [] if cls is OfferedPrompts else ["revisit_epochs"]
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes none"
        raise ValueError(
            f"prompt_source={name!r} takes no argument(s) {unknown}; {takes}. Remove them from prompt_source_kwargs."
        )
    source = cls(**kwargs)
    return source if revisit_epochs is None else RevisitFloor(source, revisit_epochs)


# the default, then prompt selection before rollout (sampling/selection.py: MoPPS's Thompson rule, GRESO's skipping,
# the pool by bayes_knapsack's expected value)
for _source in (OfferedPrompts, ThompsonPoolSelection, SettledPromptSkipping, ExpectedValuePool):
    register_prompt_source(_source)


# -- the built-in strategies ----------------------------------------------------------------------------------------
for _entry in (
    Strategy("uniform", allocator=UniformAllocator),
    Strategy("knapsack", allocator=KnapsackAllocator, papers=("knapsack_rl",)),
    # Knapsack RL's objective in expectation under a posterior (this package's; docs/allocators.md)
    Strategy("bayes_knapsack", allocator=BayesKnapsackAllocator, papers=("knapsack_rl",)),
    Strategy("reinforce_ada_est", allocator=ReinforceAdaEstAllocator, papers=("reinforce_ada",)),
    Strategy(
        "cero",
        allocator=CeroAllocator,
        procedure=cero_procedure,
        procedure_parameters=("pacing", "max_draw_rounds"),
        papers=("cero",),
    ),
    Strategy("reinforce_ada_seq_pos", procedure=ReinforceAdaSeqPos, papers=("reinforce_ada",)),
    Strategy("reinforce_ada_seq_balance", procedure=ReinforceAdaSeqBalance, papers=("reinforce_ada",)),
    Strategy("pilot_commit", procedure=PilotCommit),  # databricks/pilot-commit's rule: code, no paper
):
    register_strategy(_entry)

__all__ = [
    "Strategy",
    "as_procedure",
    "build_procedure",
    "build_prompt_source",
    "get_allocator",
    "prompt_source",
    "register_allocator",
    "register_prompt_source",
    "register_strategy",
    "registered_allocators",
    "registered_prompt_sources",
    "registered_strategies",
    "strategy",
    "strategy_of",
]
