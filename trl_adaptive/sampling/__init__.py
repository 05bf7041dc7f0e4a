"""How a generation batch is sampled: composable NumPy procedures that the trainer and the simulator both drive.

No torch, no trl. See :mod:`trl_adaptive.sampling.base` for the protocol and the data path of one batch.

=====================  ==========================================================================================
``PlanAhead(a)``       allocator ``a`` splits B over the batch's prompts; one round (every plan-ahead allocator)
``Pilot(a, k)``        k per prompt, then the rest by ``a.allocate_remaining`` on the updated posterior
``ReinforceAdaSeq*``   Reinforce-Ada Seq: rounds until each prompt's exit rule holds, then n selected per prompt
``CeroPacing(cero)``   CERO's price skips prompts and draws others in their place
``PilotCommit()``      Pilot-Commit's thresholds and eviction
``DynamicSampling(p)`` DAPO's filter around any procedure ``p`` that trains what it generates
=====================  ==========================================================================================

Example:
    >>> procedure = build_procedure("knapsack", dynamic_sampling=True)
    >>> type(procedure).__name__, type(procedure.inner).__name__
    ('DynamicSampling', 'PlanAhead')
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..allocation.base import Allocator, check_allocator_kwargs, get_allocator, registered_allocators
from ..allocation.cero import CeroAllocator
from .base import BatchContext, BatchRecord, BatchRun, Outcome, Procedure, Round, drive, pad_round
from .dynamic import DynamicSampling
from .pilot_commit import PilotCommit
from .plan import CeroPacing, Pilot, PlanAhead, as_allocator
from .rules import dynamic_sampling_keep, is_success
from .sequential import ReinforceAdaSeqBalance, ReinforceAdaSeqPos, Sequential

# Strategies that are procedures of their own (no plan-ahead allocator): config names, as the allocators' names.
ROUND_PROCEDURES: dict[str, type[Procedure]] = {
    "reinforce_ada_seq_pos": ReinforceAdaSeqPos,
    "reinforce_ada_seq_balance": ReinforceAdaSeqBalance,
    "pilot_commit": PilotCommit,
}


def registered_strategies() -> list[str]:
    """Every name ``AdaptiveGRPOConfig.allocator`` accepts: the registered allocators and the round procedures."""
    return sorted([*registered_allocators(), *ROUND_PROCEDURES])


def strategy_parameters(name: str) -> list[str]:
    """The keyword arguments (``allocator_kwargs``) the strategy ``name`` is built with."""
    if name in ROUND_PROCEDURES:
        return [f.name for f in dataclasses.fields(ROUND_PROCEDURES[name]) if f.init]
    from ..allocation.base import allocator_parameters

    return allocator_parameters(name)


def as_procedure(strategy: str | Allocator | Procedure, **kwargs: Any) -> Procedure:
    """The procedure a strategy samples with: a round procedure by name, or an allocator's default procedure
    (CERO with ``pacing=True``: :class:`CeroPacing`; every other allocator: :class:`PlanAhead`)."""
    if isinstance(strategy, Procedure):
        if kwargs:
            raise ValueError(f"{type(strategy).__name__} is already built; it takes no further arguments {kwargs}.")
        return strategy
    if isinstance(strategy, str) and strategy in ROUND_PROCEDURES:
        check_allocator_kwargs(strategy, kwargs, strategy_parameters(strategy))
        return ROUND_PROCEDURES[strategy](**kwargs)
    allocator = get_allocator(strategy, **kwargs) if isinstance(strategy, str) else strategy
    if not isinstance(allocator, Allocator):
        raise TypeError(f"Expected a strategy name, an Allocator or a Procedure, got {type(strategy).__name__}.")
    if isinstance(allocator, CeroAllocator) and allocator.pacing:
        return CeroPacing(allocator)
    return PlanAhead(allocator)


def build_procedure(
    strategy: str | Allocator | Procedure,
    *,
    pilot_rollouts: int = 0,
    dynamic_sampling: bool = False,
    dynamic_sampling_max_rounds: int = 3,
    strategy_kwargs: dict[str, Any] | None = None,
) -> Procedure:
    """The procedure of a config: the strategy (built with ``strategy_kwargs``), with a pilot round
    (``pilot_rollouts > 0``) and / or dynamic sampling.

    Raises:
        ValueError: for a combination that cannot work, naming it and the alternative.
    """
    kwargs = dict(strategy_kwargs or {})
    if pilot_rollouts:
        if isinstance(strategy, Procedure) or (isinstance(strategy, str) and strategy in ROUND_PROCEDURES):
            raise ValueError(
                f"pilot_rollouts={pilot_rollouts} needs allocator='bayes_knapsack'; {strategy!r} samples in rounds of "
                "its own. Set pilot_rollouts=0, or allocator='bayes_knapsack'."
            )
        allocator = get_allocator(strategy, **kwargs) if isinstance(strategy, str) else strategy
        procedure: Procedure = Pilot(allocator, pilot_rollouts)
    else:
        procedure = as_procedure(strategy, **kwargs)
    if dynamic_sampling:
        procedure = DynamicSampling(procedure, dynamic_sampling_max_rounds)
    return procedure


__all__ = [
    "ROUND_PROCEDURES",
    "BatchContext",
    "BatchRecord",
    "BatchRun",
    "CeroPacing",
    "DynamicSampling",
    "Outcome",
    "Pilot",
    "PilotCommit",
    "PlanAhead",
    "Procedure",
    "ReinforceAdaSeqBalance",
    "ReinforceAdaSeqPos",
    "Round",
    "Sequential",
    "as_allocator",
    "as_procedure",
    "build_procedure",
    "drive",
    "dynamic_sampling_keep",
    "is_success",
    "pad_round",
    "registered_strategies",
    "strategy_parameters",
]
