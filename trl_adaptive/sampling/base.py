"""The sampling protocol: a procedure asks for rounds of completions and finishes with what is trained.

A *procedure* samples one generation batch. Given what has been observed so far in this batch it either asks for the
next :class:`Round` (which prompts, how many completions each, prompts drawn beyond the batch included) or finishes
with the indices of the completions to train on. Everything else it decides (per-prompt advantage weights, the
allocations it made, metrics) it writes on the batch's :class:`BatchRecord`. A procedure is written as a generator::

    def rounds(self, ctx, record):
        allocation = self.allocator.allocate(ctx.statistics(ctx.prompt_ids), ctx.budget)
        record.note_allocation(allocation)
        yield Round(ctx.prompt_ids, allocation.counts, final=True)   # the driver generates and scores it
        return record.completions_of(ctx.prompt_ids)                 # train on all of them

Two drivers run the same procedures: :class:`BatchRun` (step by step; ``AdaptiveGRPOTrainer`` generates each round
with vLLM or transformers across ranks) and :func:`drive` (with a ``generate`` callback; the simulator draws
Bernoulli rewards). Both check every round and the outcome against the contract: counts within [0, max_rollouts] per
prompt over the batch, trained completions == the step's budget, indices valid and distinct.

The data path of one generation batch, drawn for dynamic sampling around knapsack, M = 2 prompts, B = 8::

    ctx.prompt_ids      [11, 12]                         the sampler's prompts
    round 1             Round([11, 12], [6, 2])          knapsack's plan; record: prompts [11, 12]
    generated           group_ids [0 0 0 0 0 0 1 1]      rewards [1 0 1 1 0 0 | 1 1]: 12 is all correct
    round 2             Round([47], [2])                 2 missing: prompt 47 drawn (ctx.draw_prompts)
    generated           group_ids [... 2 2]              rewards [... 1 0]: mixed, kept
    outcome             selected [0..5, 8, 9]            prompts [11, 12, 47], trained counts [6, 0, 2]

State a procedure keeps across steps (Pilot-Commit's evicted prompts; an allocator's duals through
``Allocator.end_step``) moves once per step in :meth:`Procedure.end_step` and is saved as one tree over the procedure
and everything it holds (:mod:`~trl_adaptive.sampling.state`), which survives a JSON round trip.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..allocation.base import Allocator, fill_evenly
from ..batch import Allocation, PromptBatchStats, is_success
from .state import children_of, load_state_tree, state_tree


@dataclass(frozen=True)
class Round:
    """A request: generate ``counts[i]`` completions of prompt ``prompt_ids[i]``.

    Attributes:
        prompt_ids: ``(R,)`` int64 prompt ids; ids new to the batch join its record (count 0 included: an examined,
            skipped prompt is still one of the batch's groups).
        counts: ``(R,)`` int64 >= 0.
        final: True when the procedure finishes right after this round without reading its rewards (it trains
            every completion of the batch): a driver may then generate it inside the training pass itself.
    """

    prompt_ids: np.ndarray
    counts: np.ndarray
    final: bool = False


@dataclass(frozen=True)
class BatchContext:
    """What a driver tells a procedure about one generation batch.

    Attributes:
        prompt_ids: ``(M,)`` the sampler's prompts for this batch.
        budget: B, completions to train on (``generation_batch_size``).
        group_size: n, TRL's ``num_generations`` (the average completions per prompt).
        success_threshold: a completion succeeds when its reward is >= this (:func:`~.rules.is_success`).
        statistics: ``statistics(ids) -> PromptBatchStats`` from the store, as it stood before this batch.
        draw_prompts: ``draw_prompts(exclude, number) -> ids``, up to ``number`` further prompt ids of the training
            data not in ``exclude``, deterministic for the same step and call order (so a resume draws the same).
        rng: the generator of the procedure's own random choices (Seq's selection), seeded per step.
    """

    prompt_ids: np.ndarray
    budget: int
    group_size: int
    success_threshold: float
    statistics: Callable[[np.ndarray], PromptBatchStats]
    draw_prompts: Callable[[np.ndarray, int], np.ndarray]
    rng: np.random.Generator

    def replace(self, **changes: Any) -> BatchContext:
        return dataclasses.replace(self, **changes)


@dataclass
class BatchRecord:
    """Everything one batch has generated so far, and what the procedure decided about it.

    Attributes:
        prompt_ids: ``(U,)`` every prompt of the batch, in the order rounds first named them.
        success_rates: ``(U,)`` the store's success rate of each prompt when it joined (what was decided on).
        group_ids: ``(K,)`` index into ``prompt_ids`` of every completion generated, in generation order.
        rewards: ``(K,)`` total reward of each completion, NaN when no reward function scored it.
        completion_tokens: ``(K,)`` generated tokens of each completion, NaN where the driver did not measure them.
        round_sizes: completions generated per round.
        weight_of: advantage multiplier per prompt id, where a procedure set one (see :attr:`weights`).
        allocations: every :class:`Allocation` made in the batch, the batch's own first (``Allocator.end_step``).
        metrics: scalars the procedure reports (logged by the trainer under these names).
    """

    success_threshold: float
    prompt_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    success_rates: np.ndarray = field(default_factory=lambda: np.zeros(0))
    group_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rewards: np.ndarray = field(default_factory=lambda: np.zeros(0))
    completion_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))
    round_sizes: list[int] = field(default_factory=list)
    weight_of: dict[int, float] = field(default_factory=dict)
    allocations: list[Allocation] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)  # what the procedure's end_step reads back

    # -- reading -----------------------------------------------------------------------------------------------------
    @property
    def weights(self) -> np.ndarray | None:
        """``(U,)`` advantage multiplier per prompt (1 where none was set), or None when no procedure set any."""
        if not self.weight_of:
            return None
        return np.array([self.weight_of.get(i, 1.0) for i in self.prompt_ids.tolist()], dtype=np.float64)

    def index_of(self, prompt_ids: np.ndarray) -> np.ndarray:
        """Positions of ``prompt_ids`` in the record (each must have joined)."""
        order = np.argsort(self.prompt_ids, kind="stable")
        ids = np.asarray(prompt_ids, dtype=np.int64)
        pos = np.searchsorted(self.prompt_ids[order], ids)
        pos = np.minimum(pos, len(order) - 1) if len(order) else pos
        if len(ids) and (len(order) == 0 or np.any(self.prompt_ids[order][pos] != ids)):
            raise KeyError(f"prompt ids {ids.tolist()[:5]} are not in this batch's record.")
        return order[pos]

    def counts(self, prompt_ids: np.ndarray | None = None) -> np.ndarray:
        """Completions generated per prompt (of ``prompt_ids``, or of the whole record)."""
        counts = np.bincount(self.group_ids, minlength=len(self.prompt_ids)).astype(np.int64)
        return counts if prompt_ids is None else counts[self.index_of(prompt_ids)]

    def successes(self, prompt_ids: np.ndarray | None = None) -> np.ndarray:
        """Successful completions per prompt (of ``prompt_ids``, or of the whole record)."""
        success = is_success(self.rewards, self.success_threshold).astype(np.float64)
        successes = np.bincount(self.group_ids, weights=success, minlength=len(self.prompt_ids))
        return successes if prompt_ids is None else successes[self.index_of(prompt_ids)]

    def attempts(self, prompt_ids: np.ndarray | None = None) -> np.ndarray:
        """Scored completions per prompt (NaN rewards excluded)."""
        scored = (~np.isnan(self.rewards)).astype(np.float64)
        attempts = np.bincount(self.group_ids, weights=scored, minlength=len(self.prompt_ids))
        return attempts if prompt_ids is None else attempts[self.index_of(prompt_ids)]

    def completions_of(self, prompt_ids: np.ndarray) -> np.ndarray:
        """Indices of every completion generated for ``prompt_ids``, in generation order."""
        return np.flatnonzero(np.isin(self.group_ids, self.index_of(prompt_ids))).astype(np.int64)

    # -- writing (procedures) ---------------------------------------------------------------------------------------
    def note_allocation(self, allocation: Allocation) -> None:
        """Keep ``allocation`` for the allocator's ``end_step`` and apply its weights to its prompts."""
        self.allocations.append(allocation)
        if allocation.weights is not None:
            self.set_weights(allocation.prompt_ids, allocation.weights)
        for name, value in allocation.metrics.items():
            self.metrics.setdefault(f"allocation/{name}", float(value))

    def set_weights(self, prompt_ids: np.ndarray, weights: np.ndarray | float) -> None:
        ids = np.asarray(prompt_ids, dtype=np.int64)
        values = np.broadcast_to(np.asarray(weights, dtype=np.float64), ids.shape)
        self.weight_of.update(zip(ids.tolist(), values.tolist(), strict=True))

    # -- writing (drivers) ------------------------------------------------------------------------------------------
    def join(self, prompt_ids: np.ndarray, statistics: Callable[[np.ndarray], PromptBatchStats]) -> np.ndarray:
        """Add the ids new to the batch (with their current success rate); return every id's position."""
        ids = np.asarray(prompt_ids, dtype=np.int64)
        new = ids[~np.isin(ids, self.prompt_ids)]
        if len(np.unique(ids)) != len(ids):
            raise ValueError(f"a round names a prompt twice: {ids.tolist()[:8]}.")
        if len(new):
            self.prompt_ids = np.concatenate([self.prompt_ids, new])
            self.success_rates = np.concatenate([self.success_rates, statistics(new).success_rate])
        return self.index_of(ids)

    def add(self, group_ids: np.ndarray, rewards: np.ndarray, completion_tokens: np.ndarray | None = None) -> None:
        tokens = np.full(len(group_ids), np.nan) if completion_tokens is None else completion_tokens
        self.group_ids = np.concatenate([self.group_ids, np.asarray(group_ids, dtype=np.int64)])
        self.rewards = np.concatenate([self.rewards, np.asarray(rewards, dtype=np.float64)])
        self.completion_tokens = np.concatenate([self.completion_tokens, np.asarray(tokens, dtype=np.float64)])
        self.round_sizes.append(len(group_ids))


@dataclass(frozen=True)
class Outcome:
    """What a batch trains on: the record, plus the selected completions.

    Attributes:
        record: the :class:`BatchRecord` (prompts, every completion generated, weights, allocations, metrics).
        selected: ``(B,)`` int64 indices into the record's completions, ascending: the completions trained on.
        baseline_from_all: each group's mean and std come from every completion generated for it (Seq), not only
            the trained ones.
        seconds: wall time spent in the procedure (allocation, selection), not in generation.
    """

    record: BatchRecord
    selected: np.ndarray
    baseline_from_all: bool
    seconds: float

    @property
    def trained_group_ids(self) -> np.ndarray:
        return self.record.group_ids[self.selected]

    @property
    def trained_counts(self) -> np.ndarray:
        """``(U,)`` completions trained per prompt of the record."""
        return np.bincount(self.trained_group_ids, minlength=len(self.record.prompt_ids)).astype(np.int64)


class Procedure:
    """Base class of sampling procedures. Subclasses implement :meth:`rounds`; see the module docstring.

    Class attributes:
        trains_all_generated: the outcome trains every completion the procedure generated (dynamic sampling can
            wrap only such procedures; Seq selects a subset).
        baseline_from_all: groups' baselines come from every completion generated (Seq).
        draws_prompts: the procedure may call ``ctx.draw_prompts`` (prompts beyond the batch); a trainer whose data
            cannot be drawn from by id (a streaming dataset) refuses such a procedure at construction.
    """

    name: ClassVar[str] = ""  # the config name of a procedure that is a strategy of its own (Seq, pilot_commit)
    trains_all_generated: ClassVar[bool] = True
    baseline_from_all: ClassVar[bool] = False
    draws_prompts: ClassVar[bool] = False
    allocator: Any = None  # the plan-ahead allocator the procedure drives, if any

    @property
    def max_rollouts(self) -> int:
        """The most completions one prompt may get over a batch's rounds."""
        raise NotImplementedError

    @property
    def min_rollouts(self) -> int:
        """The fewest completions a prompt sampled in a batch gets (1 where the procedure promises nothing more)."""
        return 1

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        raise NotImplementedError

    def end_step(self, outcome: Outcome) -> None:
        """Move state once per step. By default every procedure this one holds moves from the outcome, and every
        allocator it holds from the step's allocations (the batch's first): all of them when it holds one allocator,
        else those each made (``Allocation.made_by``)."""
        children = children_of(self).values()
        allocations = outcome.record.allocations
        several = sum(isinstance(child, Allocator) for child in children) > 1
        for child in children:
            if isinstance(child, Procedure):
                child.end_step(outcome)
            else:
                child.end_step([a for a in allocations if a.made_by == id(child)] if several else allocations)

    def check(self, num_prompts: int, budget: int, group_size: int) -> None:
        """Raise a ValueError naming the setting when a batch of this shape cannot be sampled (the trainer calls it
        at construction, before any step)."""

    # -- state: one tree over the procedure and everything it holds (sampling/state.py) ---------------------------
    def own_state(self) -> dict[str, Any]:
        """JSON-serialisable state of this procedure alone (what it holds is saved in its own nodes)."""
        return {}

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state of its own but got keys {sorted(state)}.")

    def state_dict(self) -> dict[str, Any]:
        """The whole procedure's state as one JSON tree: its own and every held procedure's and allocator's."""
        return state_tree(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` exactly (a ValueError naming the node that does not match)."""
        load_state_tree(self, state)


class BatchRun:
    """Drive one procedure over one batch, round by round: ``next_round`` / ``observe`` until ``finished``.

    Args:
        procedure: the :class:`Procedure`.
        ctx: the batch's :class:`BatchContext`.
        round_multiple: every round's total is raised to a multiple of this (the number of ranks that generate it
            in lockstep) by giving the smallest groups of the round one more completion each, within max_rollouts.
    """

    def __init__(self, procedure: Procedure, ctx: BatchContext, round_multiple: int = 1) -> None:
        self.procedure, self.ctx, self.round_multiple = procedure, ctx, int(round_multiple)
        self.record = BatchRecord(ctx.success_threshold)
        self.seconds = 0.0
        self._rounds = procedure.rounds(ctx, self.record)
        self._request: Round | None = None
        self._selected: np.ndarray | None = None
        self._advance(None)

    @property
    def finished(self) -> bool:
        return self._selected is not None

    def next_round(self) -> tuple[Round, np.ndarray]:
        """The round to generate, checked and padded, and its jobs: the record index of each completion, in order.

        Rewards passed to :meth:`observe` must follow the jobs' order.
        """
        if self._request is None:
            raise RuntimeError("the procedure has finished; call outcome().")
        request = self._padded(self._checked(self._request))
        positions = self.record.join(request.prompt_ids, self.ctx.statistics)
        return request, np.repeat(positions, request.counts)

    def observe(self, jobs: np.ndarray, rewards: np.ndarray, completion_tokens: np.ndarray | None = None) -> None:
        """Record the round's completions (``jobs`` from :meth:`next_round`, their total rewards and, when measured,
        their generated tokens) and go on."""
        rewards = np.asarray(rewards, dtype=np.float64)
        if rewards.shape != (len(jobs),):
            raise ValueError(f"observe: {rewards.shape} rewards for {len(jobs)} completions of the round.")
        if completion_tokens is not None and np.shape(completion_tokens) != (len(jobs),):
            raise ValueError(f"observe: {np.shape(completion_tokens)} lengths for {len(jobs)} completions.")
        self.record.add(jobs, rewards, completion_tokens)
        self._advance(None)

    def outcome(self) -> Outcome:
        if self._selected is None:
            raise RuntimeError("the procedure still asks for rounds.")
        return Outcome(self.record, self._selected, self.procedure.baseline_from_all, self.seconds)

    # -- internals --------------------------------------------------------------------------------------------------
    def _advance(self, value: None) -> None:
        start = time.perf_counter()
        try:
            self._request = self._rounds.send(value)
        except StopIteration as stop:
            self._request = None
            self._selected = self._checked_selection(stop.value)
        finally:
            self.seconds += time.perf_counter() - start

    def _checked(self, request: Round) -> Round:
        ids = np.asarray(request.prompt_ids, dtype=np.int64)
        counts = np.asarray(request.counts)
        name = type(self.procedure).__name__
        if ids.ndim != 1 or counts.shape != ids.shape or counts.dtype.kind not in "iu" or np.any(counts < 0):
            raise AssertionError(f"{name} asked for a malformed round: ids {ids.tolist()[:8]}, counts {counts}.")
        counts = counts.astype(np.int64)
        if int(counts.sum()) == 0:
            raise AssertionError(f"{name} asked for an empty round; a procedure finishes instead.")
        known = np.isin(ids, self.record.prompt_ids)
        total = counts.copy()
        total[known] += self.record.counts(ids[known])
        if np.any(total > self.procedure.max_rollouts):
            raise AssertionError(
                f"{name} asked for {total.max()} completions of one prompt in a batch, above max_rollouts="
                f"{self.procedure.max_rollouts}."
            )
        return Round(ids, counts, request.final)

    def _padded(self, request: Round) -> Round:
        short = -int(request.counts.sum()) % self.round_multiple
        if short == 0:
            return request
        return dataclasses.replace(request, counts=pad_round(request, self.record, short, self.procedure.max_rollouts))

    def _checked_selection(self, selected: np.ndarray) -> np.ndarray:
        name = type(self.procedure).__name__
        selected = np.asarray(selected)
        if selected.ndim != 1 or (len(selected) and selected.dtype.kind not in "iu"):
            raise AssertionError(f"{name} finished with malformed indices {selected!r}.")
        selected = np.sort(selected.astype(np.int64))
        if len(selected) != self.ctx.budget:
            raise AssertionError(
                f"{name} selected {len(selected)} completions; the step's budget is {self.ctx.budget}."
            )
        if len(selected) and (selected[0] < 0 or selected[-1] >= len(self.record.rewards)):
            raise AssertionError(f"{name} selected completions outside the {len(self.record.rewards)} generated.")
        if len(np.unique(selected)) != len(selected):
            raise AssertionError(f"{name} selected a completion twice.")
        return selected


def relay(rounds: Generator[Round, None, np.ndarray]) -> Generator[Round, None, np.ndarray]:
    """An inner procedure's rounds, passed on by a wrapping one: never ``final`` (the wrapper reads the rewards)."""
    try:
        request = next(rounds)
        while True:
            yield dataclasses.replace(request, final=False)
            request = next(rounds)
    except StopIteration as stop:
        return stop.value


def pad_round(request: Round, record: BatchRecord, short: int, max_rollouts: int) -> np.ndarray:
    """The round's counts with ``short`` more completions, one at a time to the prompts of the round with the fewest
    completions in the batch so far (this round included), never above ``max_rollouts``; a sampled prompt is
    preferred, a prompt of the round given 0 (e.g. a skipped prompt) is used only when the sampled ones are full.

    Example:
        >>> record = BatchRecord(1.0)
        >>> pad_round(Round(np.array([1, 2, 3]), np.array([8, 2, 4])), record, short=2, max_rollouts=8).tolist()
        [8, 4, 4]
    """
    known = np.isin(request.prompt_ids, record.prompt_ids)
    totals = request.counts.copy()
    totals[known] += record.counts(request.prompt_ids[known])
    counts = request.counts.copy()
    for pool in (np.flatnonzero(request.counts > 0), np.flatnonzero(request.counts == 0)):
        if short == 0 or len(pool) == 0:
            continue
        raised, short = fill_evenly(totals[pool], short, max_rollouts)
        counts[pool] += raised - totals[pool]
        totals[pool] = raised
    if short:
        raise RuntimeError(
            f"cannot spread {short} more completion(s) over the round's prompts within max_rollouts={max_rollouts} "
            "so that every rank generates as many; raise max_rollouts or make the budget a multiple of the number "
            "of processes."
        )
    return counts


def drive(
    procedure: Procedure,
    ctx: BatchContext,
    generate: Callable[[Round, np.ndarray], np.ndarray | tuple[np.ndarray, np.ndarray]],
    round_multiple: int = 1,
) -> Outcome:
    """Run ``procedure`` on one batch in one process (the simulator's driver): :func:`run_rounds` of a new
    :class:`BatchRun`."""
    return run_rounds(BatchRun(procedure, ctx, round_multiple), generate)


def run_rounds(
    run: BatchRun | None,
    generate: Callable[[Round, np.ndarray], np.ndarray | tuple[np.ndarray, np.ndarray]],
    share: Callable[[Any], Any] | None = None,
) -> Outcome:
    """The loop of one batch, as the trainer and the simulator run it: ``generate(round, jobs) -> rewards`` (one per
    job, in order) each round, or ``-> (rewards, completion_tokens)`` when the generator measures lengths, until the
    procedure finishes; its :class:`Outcome`.

    Over several processes that generate each round together: ``run`` on the main process and None on the others,
    ``share(value)`` returning the main process's value on every rank; every rank calls ``generate`` with the same
    round and gets the outcome. ``generate`` must return every rank's rewards (gathered) on every rank.
    """
    share = share or (lambda value: value)
    message = share(_next_message(run))
    while not isinstance(message, Outcome):
        request, jobs = message
        generated = generate(request, jobs)
        if run is not None:
            run.observe(jobs, *generated) if isinstance(generated, tuple) else run.observe(jobs, generated)
        message = share(_next_message(run))
    return message


def _next_message(run: BatchRun | None) -> Outcome | tuple[Round, np.ndarray] | None:
    """The main process's word to every rank: the next round and its jobs, or the outcome (None elsewhere)."""
    if run is None:
        return None
    return run.outcome() if run.finished else run.next_round()
