"""How a generation batch is sampled: composable NumPy procedures that the trainer and the simulator both drive.

No torch, no trl. See :mod:`trl_adaptive.sampling.base` for the protocol and the data path of one batch.

=====================  ==========================================================================================
``PlanAhead(a)``       allocator ``a`` splits B over the batch's prompts; one round (every plan-ahead allocator)
``Pilot(a, k)``        k per prompt, then the rest by ``a.allocate_remaining`` on the updated posterior
``ReinforceAdaSeq*``   Reinforce-Ada Seq: rounds until each prompt's exit rule holds, then n selected per prompt
``CeroPacing(cero)``   CERO's price skips prompts and draws others in their place
``PilotCommit()``      Pilot-Commit's thresholds and eviction
``DynamicSampling(p)`` DAPO's filter around any procedure ``p`` that trains what it generates
``PromptSource``       which prompts enter a batch, composed from the sampler's (``source.py``; ``OfferedPrompts``:
                       the sampler's unchanged, the default; ``ThompsonPoolSelection``: MoPPS, ``mopps``;
                       ``SettledPromptSkipping``: GRESO, ``greso``; ``ExpectedValuePool``: bayes_knapsack's
                       expected value over a pool, ``value_pool``; ``selection.py``)
``RevisitFloor(s, k)`` source ``s``, except that a prompt passed over k epochs in a row is generated (``revisit.py``)
=====================  ==========================================================================================

Names resolve to procedures in :mod:`trl_adaptive.strategies` (``build_procedure``, ``as_procedure``), which sits
above this layer: nothing here names a strategy.
"""

from __future__ import annotations

from .base import BatchContext, BatchRecord, BatchRun, Outcome, Procedure, Round, drive, pad_round, run_rounds
from .cero_pacing import CeroPacing, cero_procedure
from .dynamic import DynamicSampling
from .pilot_commit import PilotCommit
from .plan import Pilot, PlanAhead
from .revisit import RevisitFloor
from .rules import dynamic_sampling_keep, is_success
from .selection import ExpectedValuePool, SettledPromptSkipping, ThompsonPoolSelection
from .sequential import ReinforceAdaSeqBalance, ReinforceAdaSeqPos, Sequential
from .source import OfferedPrompts, PromptSource, SourceBatch, SourceContext
from .state import state_tree

__all__ = [
    "BatchContext",
    "BatchRecord",
    "BatchRun",
    "CeroPacing",
    "DynamicSampling",
    "ExpectedValuePool",
    "OfferedPrompts",
    "Outcome",
    "Pilot",
    "PilotCommit",
    "PlanAhead",
    "Procedure",
    "PromptSource",
    "ReinforceAdaSeqBalance",
    "ReinforceAdaSeqPos",
    "RevisitFloor",
    "Round",
    "Sequential",
    "SettledPromptSkipping",
    "SourceBatch",
    "SourceContext",
    "ThompsonPoolSelection",
    "cero_procedure",
    "drive",
    "dynamic_sampling_keep",
    "is_success",
    "pad_round",
    "run_rounds",
    "state_tree",
]
