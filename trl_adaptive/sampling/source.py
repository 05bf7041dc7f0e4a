"""The prompt-source port: what decides which prompt ids enter a generation batch.

The data's sampler (TRL's ``RepeatSampler``, the simulator's epoch permutation) *offers* U prompt ids per generation
batch; a :class:`PromptSource` *composes* the batch from them, and may look at further prompts of the training data
through ``ctx.draw`` (with exclusion, deterministic per step and call, identical on every rank). A procedure's own
draws beyond the batch (CERO's pacing, Pilot-Commit's eviction, dynamic sampling's refills) go through the same
source (:meth:`PromptSource.draw_further`), so one selection idea is written once for the trainer and the simulator::

    offered             [11, 12, 13, 14]                 the sampler's ids, in sampler order
    ctx.draw            [3, 27, 40, 58]                  4 further candidates (a pool source asks for them)
    compose             SourceBatch(prompt_ids=[12, 27, 13, 58], examined=[11 .. 14, 3, 27, 40, 58],
                                    skipped={"settled_easy": [11, 14, 3, 40]})
    the procedure       runs on [12, 27, 13, 58] exactly as it ran on the sampler's ids before

The default, :class:`OfferedPrompts` (name ``"sampler"``), returns the offered ids unchanged and never draws, so
uniform stays bit-identical to GRPOTrainer.

A source's state across steps (its own per-prompt history) is :meth:`PromptSource.own_state`, JSON-able, saved with
the checkpoint and restored exactly; its randomness comes only from ``ctx.rng`` and ``ctx.draw``. Rules a source
keeps (checked by :func:`check_source_batch`): no duplicates, exactly ``len(offered)`` ids whenever that many exist,
only ids it examined.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..batch import PromptBatchStats


@dataclass(frozen=True)
class SourceContext:
    """What a prompt source sees when it composes one generation batch (identical on every rank).

    Attributes:
        offered: ``(U,)`` int64 ids the data's sampler offers for this batch, in sampler order.
        statistics: ``statistics(ids) -> PromptBatchStats``, the store's batch view as it stood before this batch
            (read with the source's ``reads``).
        draw: ``draw(exclude, number) -> ids``: up to ``number`` further prompt ids of the training data not in
            ``exclude``, sorted, deterministic per call from a named random stream (so a resumed run and every
            rank draw the same); fewer (possibly 0) when fewer are left.
        rng: seeded per step from a named stream (Thompson draws, skip coins).
        step: the global step (generation batch) index.
        group_size: G, TRL's ``num_generations``: the average completions per prompt of the batch (what a source's
            prediction of mixed groups is for).
    """

    offered: np.ndarray
    statistics: Callable[[np.ndarray], PromptBatchStats]
    draw: Callable[[np.ndarray, int], np.ndarray]
    rng: np.random.Generator
    step: int
    group_size: int


@dataclass(frozen=True)
class SourceBatch:
    """A source's answer for one generation batch.

    Attributes:
        prompt_ids: ``(U,)`` the batch's prompts (as many as offered: TRL's batch shape stays).
        examined: every candidate the source looked at (offered and drawn), ids.
        skipped: reason -> ids examined and not selected (``"settled_easy"``, ...).
        predicted_mixed: the source's predicted share of selected groups with mixed rewards, where it has one.
        revisited: ids among ``prompt_ids`` put in by a floor of visits (:class:`~.revisit.RevisitFloor`), not by
            the source's own rule.
    """

    prompt_ids: np.ndarray
    examined: np.ndarray
    skipped: Mapping[str, np.ndarray] = field(default_factory=dict)
    predicted_mixed: float | None = None
    revisited: np.ndarray | None = None


class PromptSource:
    """Decides which prompts enter a generation batch (and which further prompts a procedure may draw).

    Subclass it and implement :meth:`compose`; register it by name in :mod:`trl_adaptive.strategies`
    (``register_prompt_source``) to choose it with ``AdaptiveGRPOConfig(prompt_source=...)``.

    Attributes:
        name: the registry name.
        reads: estimators of the store :meth:`compose` reads (``ESTIMATOR_FIELDS`` keys), as an allocator's.
        needs_pool: True when :meth:`compose` draws candidates beyond ``offered`` (refused with a streaming dataset,
            whose prompts cannot be drawn by id).
    """

    name: ClassVar[str] = ""
    reads: ClassVar[tuple[str, ...]] = ()
    needs_pool: ClassVar[bool] = False

    def compose(self, ctx: SourceContext) -> SourceBatch:
        raise NotImplementedError

    def draw_further(
        self, draw: Callable[[np.ndarray, int], np.ndarray], exclude: np.ndarray, number: int
    ) -> np.ndarray:
        """The further prompts a procedure draws beyond the batch (``BatchContext.draw_prompts``), from the data's
        ``draw``: by default that draw unchanged (CERO's pacing, Pilot-Commit and dynamic sampling draw as before)."""
        return draw(exclude, number)

    def end_step(
        self, prompt_ids: np.ndarray, group_ids: np.ndarray, rewards: np.ndarray, success_threshold: float
    ) -> None:
        """Observe every completion generated this step (``prompt_ids``: the batch record's ids; ``group_ids``: per
        completion, index into ``prompt_ids``; ``rewards``: per completion, NaN where unscored). Default: nothing."""

    def own_state(self) -> dict[str, Any]:
        """The source's state across steps, JSON-able; ``{}`` by default."""
        return {}

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state but was given {sorted(state)}.")

    def check(self, num_prompts: int, batch_prompts: int) -> None:
        """Refuse settings impossible for a training set of ``num_prompts`` prompts and batches of ``batch_prompts``
        (U, ``len(offered)``): a pool of candidates larger than the data."""

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({settings})"


class OfferedPrompts(PromptSource):
    """The default: the batch is the sampler's ids unchanged (uniform stays bit-identical to GRPOTrainer)."""

    name = "sampler"

    def compose(self, ctx: SourceContext) -> SourceBatch:
        offered = np.asarray(ctx.offered, dtype=np.int64)
        return SourceBatch(prompt_ids=offered, examined=offered, skipped={})


def check_source_batch(source: PromptSource, ctx: SourceContext, batch: SourceBatch) -> np.ndarray:
    """The batch's prompt ids as int64 after checking the port's rules; a ValueError naming the source otherwise."""
    ids = np.asarray(batch.prompt_ids, dtype=np.int64)
    examined = np.asarray(batch.examined, dtype=np.int64)
    where = f"prompt source {type(source).__name__} (step {ctx.step})"
    if ids.ndim != 1 or len(np.unique(ids)) != len(ids):
        raise ValueError(f"{where} returned duplicate prompt ids: {ids.tolist()[:10]}.")
    if len(ids) != len(ctx.offered):
        raise ValueError(f"{where} returned {len(ids)} prompts for a batch of {len(ctx.offered)}; return as many.")
    if not np.isin(ids, examined).all():
        raise ValueError(f"{where} selected ids it did not list in SourceBatch.examined: {ids.tolist()[:10]}.")
    if batch.revisited is not None and not np.isin(batch.revisited, ids).all():
        raise ValueError(f"{where} listed revisited ids that are not in the batch: {batch.revisited.tolist()[:10]}.")
    return ids


def source_metrics(source: PromptSource, offered: np.ndarray, batch: SourceBatch) -> dict[str, float]:
    """What a source did to one batch, as ``prompt_source/*`` scalars (none for the default: its logs stay TRL's)."""
    if type(source) is OfferedPrompts:
        return {}
    metrics = {
        "prompt_source/examined": float(len(batch.examined)),
        "prompt_source/replaced": float(np.count_nonzero(~np.isin(batch.prompt_ids, offered))),
    }
    metrics.update({f"prompt_source/skipped_{reason}": float(len(ids)) for reason, ids in batch.skipped.items()})
    if batch.predicted_mixed is not None:
        metrics["prompt_source/predicted_mixed"] = float(batch.predicted_mixed)
    if batch.revisited is not None:
        metrics["prompt_source/revisit_forced"] = float(len(batch.revisited))
    return metrics


__all__ = ["OfferedPrompts", "PromptSource", "SourceBatch", "SourceContext", "check_source_batch", "source_metrics"]
