"""The run's adaptive state: what AdaptiveGRPOTrainer keeps beside GRPOTrainer's own state, in one object.

The trainer holds one :class:`AdaptiveState` (``trainer.adaptive_state``) and hands it to the modules that read or
write it (``persistence.py``, ``generation_batch.py``, the callbacks in ``trainer.py``); its public attributes
``prompt_statistics``, ``procedure``, ``allocator``, ``training_prompts`` and ``statistics_hold_the_run`` are this
object's. It holds

- the training prompts: :class:`DatasetPrompts` (a map-style dataset: every prompt known at construction, ids from
  the id column or the row numbers, drawable by id, a success-rate column read as a prior and rewritten after every
  epoch) or :class:`StreamPrompts` (a streaming dataset: prompts known as they come, ids from the id column or
  derived from the prompt's text and images by :func:`derived_prompt_id`, no column to rewrite);
- the sampling procedure (``trl_adaptive.sampling``) and the allocator, the strategy by name;
- the prompt source, which composes each generation batch from the sampler's ids on the main process
  (:func:`compose_batch`) and through which a procedure's own draws go (:func:`procedure_draw`);
- the statistics store, and whether it holds the run's statistics (a resume's are restored with its checkpoint);
- the epoch bookkeeping: which trainer epochs are closed in the store, which one runs and where it began;
- how stale each batch's prompts are (:class:`VisitClock`, logged as ``prompts/*``; the live form of the run
  report's ``visit_staleness``).

Every random draw of a step is seeded by ``(seed, step, *stream, *call)`` with the named streams below: a resumed run
and every rank draw exactly what the uninterrupted run drew, and no stream touches another's (or the epoch
sampler's) state. Changing a stream's value changes every run's draws. Nothing here touches the trainer: closing an
epoch changes the store, and the trainer refreshes its dataset's success-rate column when
:meth:`AdaptiveState.close_epochs_through` says an epoch was closed.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from datasets import Dataset, IterableDataset

from ..allocation import Allocator
from ..sampling import Outcome, Procedure
from ..sampling.source import OfferedPrompts, PromptSource, SourceContext, check_source_batch, source_metrics
from ..stats import PromptStatistics, prompt_fingerprint, stable_prompt_ids
from .config import AUTO_HALF_LIFE, STORE_SETTING_FIELDS, AdaptiveGRPOConfig
from .inputs import check_dataset_holds_a_batch, check_procedure_reads_the_data, innermost
from .output_files import FINAL_STATISTICS_FILE

# The named random streams of a training step (the module docstring).
#: The order a batch's completions are dispatched over the ranks when group sizes differ (``groups.py``): a planned
#: round, and the completions kept from rounds.
DISPATCH: tuple[int, ...] = ()
#: The generator handed to the sampling procedure (Reinforce-Ada Seq's selection, a user procedure's draws).
PROCEDURE: tuple[int, ...] = (1,)
#: Prompts drawn beyond the batch (dynamic sampling, CERO's pacing), followed by the call's number within the step.
DRAW_PROMPTS: tuple[int, ...] = (2,)
#: The dispatch order of each round of a batch generated in rounds (one rank, group sizes unequal), followed by the
#: round's number within the step.
ROUND_DISPATCH: tuple[int, ...] = (3,)
#: The generator handed to the prompt source when it composes a batch (``sampling/source.py``: Thompson draws).
PROMPT_SOURCE: tuple[int, ...] = (4,)
#: Candidates the prompt source draws beyond the sampler's ids, followed by the call's number within the step.
SOURCE_DRAW: tuple[int, ...] = (5,)


def step_seed(seed: int, step: int, stream: tuple[int, ...], *call: int) -> list[int]:
    """The ``numpy.random.default_rng`` seed of ``stream`` at ``step`` (``seed`` reduced to 32 bits, as TRL's)."""
    return [int(seed) & 0xFFFFFFFF, int(step), *stream, *call]


# -------------------------------------------------------------------------------------------------------------------
# The run's state
# -------------------------------------------------------------------------------------------------------------------
class AdaptiveState:
    """The training prompts, the sampling procedure, the statistics store and the epoch bookkeeping of one run.

    Attributes:
        training_prompts: :class:`~trl_adaptive.trainer.state.DatasetPrompts` or ``StreamPrompts``.
        procedure: the sampling procedure; ``allocator`` is its plan-ahead allocator, or the round procedure that
            takes its place (Seq).
        prompt_statistics: the statistics store.
        group_size: TRL's ``num_generations``, the average completions per prompt (the prompt source's context).
        prompt_source: which prompts enter each generation batch (``AdaptiveGRPOConfig.prompt_source``); composes
            and observes on the main process, as the procedure does.
        statistics_hold_the_run: False from a resume's start until its checkpoint is restored (the store is then
            not the run's: the final statistics file is not written from it).
        epochs_closed: trainer epochs whose statistics have been closed (``end_epoch``) in this run.
        current_epoch: the trainer epoch running.
        epoch_start_step: the global step at which the current epoch began (where a stream resumes).
        resumed_epochs_trained: the epochs a resumed run had completed at its checkpoint (0 for a fresh run).
        visits: how stale each batch's prompts are (``state.py``; logged as ``prompts/*``).
    """

    def __init__(
        self,
        training_prompts: Any,
        procedure: Procedure,
        prompt_statistics: PromptStatistics,
        group_size: int,
        prompt_source: PromptSource | None = None,
    ) -> None:
        self.training_prompts = training_prompts
        self.procedure = procedure
        self.allocator = _strategy(procedure)
        self.prompt_statistics = prompt_statistics
        self.group_size = group_size
        self.prompt_source = prompt_source if prompt_source is not None else OfferedPrompts()
        self.statistics_hold_the_run = True
        self.epochs_closed = 0
        self.current_epoch = 0
        self.epoch_start_step = 0
        self.resumed_epochs_trained = 0
        self.visits = VisitClock()

    @classmethod
    def for_run(
        cls, prompts: Any, procedure: Procedure, statistics: PromptStatistics | None, args: AdaptiveGRPOConfig
    ) -> AdaptiveState:
        """The state a run starts from: ``procedure`` checked against the config's batch and the data, and
        ``statistics`` (or a fresh store with the config's settings) bound to ``prompts``, with their prior."""
        procedure.check(
            args.generation_batch_size // args.num_generations, args.generation_batch_size, args.num_generations
        )
        check_procedure_reads_the_data(procedure, prompts.streaming)
        source = args.build_prompt_source()
        num_prompts = None if prompts.streaming else len(prompts)
        batch_prompts = args.generation_batch_size // args.num_generations
        check_source_reads_the_data(source, prompts.streaming, num_prompts, batch_prompts)
        store = initial_statistics(statistics, args, num_prompts)
        prompts.attach(store, "statistics passed to AdaptiveGRPOTrainer")
        prompts.apply_prior(store)
        return cls(prompts, procedure, store, args.num_generations, source)

    def compose_batch(self, offered: np.ndarray, seed: int, step: int) -> tuple[np.ndarray, dict[str, float]]:
        """Main process: the batch's prompt ids as the prompt source composes them from the sampler's ``offered``
        ids, and its ``prompt_source/*`` metrics (``prompt_source.compose_batch``)."""
        store, prompts = self.prompt_statistics, self.training_prompts
        return compose_batch(self.prompt_source, offered, store, prompts, seed, step, self.group_size)

    def end_step(self, outcome: Outcome, success_threshold: float) -> None:
        """Main process: the procedure's and the prompt source's state move once per step, the source observing
        every completion the batch generated."""
        self.procedure.end_step(outcome)
        record = outcome.record
        self.prompt_source.end_step(record.prompt_ids, record.group_ids, record.rewards, success_threshold)

    def close_epochs_through(self, epoch: int) -> bool:
        """Close trainer epochs ``[epochs_closed, epoch)`` in the store (closing an epoch twice is impossible);
        True when one was closed (the success rates changed)."""
        closed_any = self.epochs_closed < epoch
        while self.epochs_closed < epoch:
            self.prompt_statistics.end_epoch()
            self.epochs_closed += 1
        return closed_any

    def begin_epoch(self, epoch: int, global_step: int) -> bool:
        """Trainer epoch ``epoch`` starts at ``global_step``: every earlier one is closed; True when one was closed."""
        closed_any = self.close_epochs_through(epoch)
        self.current_epoch = epoch
        if epoch > self.resumed_epochs_trained:  # the epoch a run resumed into began before its checkpoint
            self.epoch_start_step = global_step
        return closed_any

    def start_another_run(self) -> bool:
        """``train()`` called again on the same trainer, without resuming: the epoch the last run left open (an
        interrupted run's) is closed, and the new run's trainer epochs, numbered from 0 again, are counted from 0.
        The statistics carry over, as they do into a trainer built with ``statistics=``. True when an epoch was
        closed."""
        closed_any = self.close_epochs_through(max(self.epochs_closed, self.current_epoch + 1))
        self.epochs_closed = self.current_epoch = self.epoch_start_step = self.resumed_epochs_trained = 0
        return closed_any

    def epoch_position(self, global_step: int) -> dict[str, int]:
        """Where in the data the run is at ``global_step``: the epoch, and the steps made in it."""
        return {"epoch": self.current_epoch, "steps_in_epoch": int(global_step - self.epoch_start_step)}

    def save_final_statistics(self, output_dir: str) -> None:
        """The store in ``output_dir/prompt_statistics.json``, atomically; nothing while it does not hold the run's
        statistics (the file keeps the run's, not an empty store)."""
        if self.statistics_hold_the_run:
            self.prompt_statistics.save(os.path.join(output_dir, FINAL_STATISTICS_FILE))


def checked_training_prompts(train_dataset: Any, args: AdaptiveGRPOConfig) -> Any:
    """``train_dataset``'s training prompts (``state.py``); refused when a dataset cannot fill one batch."""
    prompts = training_prompts(
        train_dataset, args.prompt_id_column, args.success_rate_column, args.success_rate_prior_weight
    )
    if not prompts.streaming:
        check_dataset_holds_a_batch(len(prompts.dataset), args)
    return prompts


def _strategy(procedure: Procedure) -> Allocator | Procedure:
    """The strategy by name: the plan-ahead allocator, or the round procedure that takes its place (Seq)."""
    return procedure.allocator if procedure.allocator is not None else innermost(procedure)


def initial_statistics(
    statistics: PromptStatistics | None, args: AdaptiveGRPOConfig, num_prompts: int | None = None
) -> PromptStatistics:
    """A fresh store with the config's settings for ``num_prompts`` training prompts (None: a stream), or the one
    passed in if its settings are the config's (``posterior_half_life="auto"`` takes the passed store's)."""
    config = args.statistics_config_for(num_prompts)
    if statistics is None:
        return PromptStatistics(**config)
    if args.posterior_half_life == AUTO_HALF_LIFE:
        config["posterior_half_life"] = statistics.posterior_half_life
    mismatched = {k: v for k, v in config.items() if getattr(statistics, k) != v}
    if mismatched:
        store = ", ".join(f"{k}={getattr(statistics, k)!r}" for k in mismatched)
        config = ", ".join(f"{STORE_SETTING_FIELDS[k]}={v!r}" for k, v in mismatched.items())
        wanted = ", ".join(f"{STORE_SETTING_FIELDS[k]}={getattr(statistics, k)!r}" for k in mismatched)
        raise ValueError(
            f"The statistics passed to AdaptiveGRPOTrainer were built with {store}, but the config has {config}: "
            f"the counts would mean something else. Set {wanted} in the config, or pass a store built with the "
            "config's settings."
        )
    return statistics


DERIVED_ID_PREFIX = "prompt-sha256:"


IMAGE_COLUMNS = ("image", "images")  # TRL's two image columns: one image, or a list of them


# -------------------------------------------------------------------------------------------------------------------
# The training prompts: a dataset's or a stream's
# -------------------------------------------------------------------------------------------------------------------
def row_fingerprint(row: dict[str, Any]) -> str:
    """The fingerprint of a dataset row's prompt: its text, the images inside its messages and those of its ``image``
    or ``images`` column (as TRL reads them: ``images`` first), so that "What is in this picture?" asked of two
    pictures is two prompts."""
    images = row.get("images")
    if images is None and row.get("image") is not None:
        images = [row["image"]]
    return prompt_fingerprint(row["prompt"], images=images)


def derived_prompt_id(row: dict[str, Any]) -> str:
    """A prompt's id derived from its row (its fingerprint), for a stream without an id column."""
    return DERIVED_ID_PREFIX + row_fingerprint(row)


def dataset_fingerprints(dataset: Dataset, batch_size: int = 256) -> list[str]:
    """Every row's :func:`row_fingerprint`, reading the prompt and image columns a batch of rows at a time (a
    vision dataset's images are decoded once here, never all at once)."""
    columns = ["prompt", *(c for c in IMAGE_COLUMNS if c in dataset.column_names)]
    fingerprints = []
    for batch in dataset.select_columns(columns).iter(batch_size=batch_size):
        rows = (dict(zip(columns, values, strict=True)) for values in zip(*(batch[c] for c in columns), strict=True))
        fingerprints.extend(row_fingerprint(row) for row in rows)
    return fingerprints


def read_prior_rates(values: Sequence[Any], column: str) -> np.ndarray:
    """A success-rate column as float64 rates in [0, 1] (NaN = unknown), or a clear error naming ``column``."""
    rates = np.asarray([np.nan if v is None else v for v in values])
    if len(rates) and rates.dtype.kind != "f":
        raise TypeError(
            f"train_dataset column {column!r} is read as each prompt's prior success rate and must hold floats "
            f"in [0, 1] (NaN or None = unknown), got values like {next(v for v in values if v is not None)!r} "
            f"(dtype {rates.dtype}). Convert it "
            f"(e.g. dataset.cast_column({column!r}, Value('float64'))), or set success_rate_column to another name."
        )
    rates = rates.astype(np.float64)
    bad = np.flatnonzero(~np.isnan(rates) & ((rates < 0) | (rates > 1)))
    if len(bad):
        raise ValueError(
            f"train_dataset column {column!r} holds success rates outside [0, 1], e.g. "
            f"{rates[bad[:3]].tolist()} at rows {bad[:3].tolist()}. It is read as each prompt's prior success rate: "
            "rescale it to [0, 1] (NaN = unknown), or set success_rate_column to another name."
        )
    return rates


def _check_fingerprints(store: PromptStatistics, ids: np.ndarray, fingerprints: list[str], source: str) -> None:
    mismatched = store.fingerprint_mismatches(ids, fingerprints)
    if len(mismatched):
        raise ValueError(
            f"{source} holds statistics for {len(mismatched)} prompt id(s) whose prompt (text or images) differs in "
            f"this train_dataset (e.g. ids {np.asarray(mismatched)[:5].tolist()}): they were measured on other "
            "prompts. Use the dataset the statistics came from, give the new prompts new ids (prompt_id_column), "
            "or start with fresh statistics (a new output_dir, no resume_from_checkpoint)."
        )


def _warn_if_stored_under_other_ids(store: PromptStatistics, ids: np.ndarray, fingerprints: list[str], column: str):
    """Statistics passed in for these very prompts but under other ids (a map-style run numbers its rows, a stream
    derives ids from the prompts) are not used: say so rather than train as if they were."""
    stored = {fp: i for i, fp in zip(store.prompt_ids.tolist(), store.fingerprints, strict=True) if fp}
    moved = [(stored[fp], i) for i, fp in zip(ids.tolist(), fingerprints, strict=True) if stored.get(fp, i) != i]
    if moved:
        warnings.warn(
            f"The statistics store holds {len(moved)} of this batch's prompts under other ids (e.g. stored as id "
            f"{moved[0][0]}, here id {moved[0][1]}): their statistics are not used. Statistics from a map-style run "
            f"are keyed by row number; give both runs the same {column!r} column to carry them over.",
            stacklevel=2,
        )


class DatasetPrompts:
    """The prompts of a map-style dataset, all known up front (see the module docstring)."""

    streaming = False

    def __init__(self, dataset: Dataset, id_column: str, rate_column: str, prior_weight: float) -> None:
        if "prompt" not in dataset.column_names:
            raise ValueError(f"train_dataset has no 'prompt' column (columns: {dataset.column_names}). Rename yours.")
        if id_column in dataset.column_names:
            ids = stable_prompt_ids(dataset[id_column], id_column)  # integers, or strings (hashes, UUIDs) mapped
            unique, counts = np.unique(ids, return_counts=True)
            if len(unique) != len(ids):
                duplicated = np.asarray(dataset[id_column], dtype=object)[np.isin(ids, unique[counts > 1])][:5]
                raise ValueError(
                    f"train_dataset column {id_column!r} has duplicate ids, e.g. {duplicated.tolist()}: each row "
                    "needs its own id (repeated prompt texts are fine, repeated ids are not)."
                )
        else:  # row numbers: two rows with the same text stay two prompts; fingerprints catch a reordered dataset
            dataset = dataset.add_column(id_column, list(range(len(dataset))))
            ids = np.arange(len(dataset), dtype=np.int64)
        self.id_column, self.rate_column, self.prior_weight = id_column, rate_column, prior_weight
        self.dataset = dataset
        self.ids = ids
        self.fingerprints = dataset_fingerprints(dataset)
        read_prior = rate_column in dataset.column_names and prior_weight > 0  # weight 0: the column is not input
        self.prior_rates = read_prior_rates(dataset[rate_column], rate_column) if read_prior else None
        self._row_of_id: dict[int, int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def known_ids(self, store: PromptStatistics) -> np.ndarray:
        """Every training prompt's store id, in row order."""
        return self.ids

    def attach(self, store: PromptStatistics, source: str) -> None:
        """Bind ``store`` to these prompts: refuse statistics ``source`` measured on other prompts, record the
        fingerprints."""
        _check_fingerprints(store, self.ids, self.fingerprints, source)
        store.set_fingerprints(self.ids, self.fingerprints)

    def apply_prior(self, store: PromptStatistics) -> None:
        """The success-rate column as a prior of the prompts the store has no evidence for (a store passed in
        already holds what it knows, and a refreshed column repeats it)."""
        if self.prior_rates is not None and self.prior_weight > 0:
            unknown = store.batch(self.ids).evidence == 0
            store.set_prior(self.ids[unknown], self.prior_rates[unknown], self.prior_weight)

    def observe(self, store: PromptStatistics, ids: np.ndarray, rows: list[dict[str, Any]]) -> None:
        """Nothing to learn from a batch: every prompt was attached at construction."""

    def rows(self, ids: np.ndarray) -> list[dict[str, Any]]:
        """The dataset rows of these prompt ids (every column, as the sampler would give them)."""
        if self._row_of_id is None:
            self._row_of_id = {int(i): row for row, i in enumerate(self.ids.tolist())}
        return [dict(self.dataset[self._row_of_id[int(i)]]) for i in ids]

    def draw(self, exclude: np.ndarray, number: int, seed: Sequence[int]) -> np.ndarray:
        """Up to ``number`` prompt ids not in ``exclude``, drawn by a generator seeded with ``seed``, in row order."""
        candidates = self.ids[~np.isin(self.ids, exclude)]
        picked = np.random.default_rng(list(seed)).choice(
            len(candidates), size=min(number, len(candidates)), replace=False
        )
        return candidates[np.sort(picked)]

    def with_success_rates(self, dataset: Dataset, store: PromptStatistics) -> Dataset:
        """``dataset`` (these prompts' rows) with its success-rate column rewritten from the store (NaN for prompts
        not yet seen); drawn rows are read from it from now on."""
        rates = store.success_rates(self.ids).astype(np.float64)
        if self.rate_column in dataset.column_names:
            dataset = dataset.remove_columns(self.rate_column)
        self.dataset = dataset.add_column(self.rate_column, rates.tolist())
        return self.dataset


class StreamPrompts:
    """The prompts of a streaming dataset, known as they come (see the module docstring)."""

    streaming = True

    def __init__(self, dataset: IterableDataset, id_column: str, rate_column: str, prior_weight: float) -> None:
        columns = dataset.column_names  # None when the stream's features are not declared
        if columns is not None and "prompt" not in columns:
            raise ValueError(f"train_dataset has no 'prompt' column (columns: {columns}). Rename yours.")
        self.id_column, self.rate_column, self.prior_weight = id_column, rate_column, prior_weight

        def with_prompt_id(row: dict[str, Any]) -> dict[str, Any]:
            if id_column not in row:  # no id column: the prompt is its own id
                return {id_column: derived_prompt_id(row)}
            if row[id_column] is None:  # refused here, as it comes, naming the stream rather than a batch position
                raise ValueError(
                    f"train_dataset (a stream) yielded a row whose {id_column!r} is None (prompt "
                    f"{str(row.get('prompt'))[:60]!r}): give every row an id, or none (drop the column, or set "
                    "prompt_id_column to a name the stream does not have) so that each prompt's id is derived from "
                    "its text and images."
                )
            return {}

        self.dataset = dataset.map(with_prompt_id)
        self._looked_for_other_ids = False

    def known_ids(self, store: PromptStatistics) -> np.ndarray:
        """The ids of the prompts seen so far (the store's)."""
        return store.prompt_ids

    def attach(self, store: PromptStatistics, source: str) -> None:
        """Nothing to check up front: each prompt is checked against the store when the stream yields it."""

    def apply_prior(self, store: PromptStatistics) -> None:
        """Nothing up front: each prompt's success-rate key is read when the stream first yields it."""

    def observe(self, store: PromptStatistics, ids: np.ndarray, rows: list[dict[str, Any]]) -> None:
        """Check and record the fingerprints of a batch's prompts; prior the new ones from their success-rate key."""
        fingerprints = [row_fingerprint(row) for row in rows]
        if not self._looked_for_other_ids:  # once: a warm start keyed otherwise would silently not count
            self._looked_for_other_ids = True
            _warn_if_stored_under_other_ids(store, ids, fingerprints, self.id_column)
        _check_fingerprints(store, ids, fingerprints, "the statistics store")
        store.set_fingerprints(ids, fingerprints)
        if self.prior_weight > 0 and any(self.rate_column in row for row in rows):
            rates = read_prior_rates([row.get(self.rate_column) for row in rows], self.rate_column)
            new = (store.batch(ids).evidence == 0) & ~np.isnan(rates)
            if new.any():
                store.set_prior(ids[new], rates[new], self.prior_weight)

    def rows(self, ids: np.ndarray) -> list[dict[str, Any]]:
        raise RuntimeError("A streaming train_dataset cannot be read by prompt id.")  # refused at construction

    def draw(self, exclude: np.ndarray, number: int, seed: Sequence[int]) -> np.ndarray:
        raise RuntimeError("A streaming train_dataset cannot be drawn from.")  # refused at construction

    def with_success_rates(self, dataset: IterableDataset, store: PromptStatistics) -> IterableDataset:
        """The stream as it is: its rates live in the store."""
        return dataset


def training_prompts(dataset: Any, id_column: str, rate_column: str, prior_weight: float):
    """:class:`DatasetPrompts` or :class:`StreamPrompts` for ``dataset``."""
    if isinstance(dataset, IterableDataset):
        return StreamPrompts(dataset, id_column, rate_column, prior_weight)
    return DatasetPrompts(dataset, id_column, rate_column, prior_weight)


Draw = Callable[[np.ndarray, int], np.ndarray]  # draw(exclude, number) -> further prompt ids


# -------------------------------------------------------------------------------------------------------------------
# The prompt source's view of the training data
# -------------------------------------------------------------------------------------------------------------------
def data_draw(prompts: Any, seed: int, step: int, stream: tuple[int, ...]) -> Draw:
    """``draw(exclude, number)`` over the training prompts, call ``c`` of the step seeded by ``(seed, step, stream,
    c)``: the epoch's sampler is not touched, and a resumed run draws the same ones."""
    calls = itertools.count()

    def draw(exclude: np.ndarray, number: int) -> np.ndarray:
        return prompts.draw(exclude, number, step_seed(seed, step, stream, next(calls)))

    return draw


def procedure_draw(source: PromptSource, prompts: Any, seed: int, step: int) -> Draw:
    """The procedure's ``BatchContext.draw_prompts``: the source's :meth:`~PromptSource.draw_further` over the data's
    draw (for the default source, the data's draw itself: the prompts drawn before the port existed)."""
    draw = data_draw(prompts, seed, step, DRAW_PROMPTS)
    return lambda exclude, number: source.draw_further(draw, exclude, number)


def compose_batch(
    source: PromptSource,
    offered: np.ndarray,
    store: PromptStatistics,
    prompts: Any,
    seed: int,
    step: int,
    group_size: int,
) -> tuple[np.ndarray, dict[str, float]]:
    """Main process: the batch's prompt ids as the source composes them from the sampler's ``offered`` ids (checked:
    ``check_source_batch``), and its ``prompt_source/*`` metrics."""
    ctx = SourceContext(
        offered=np.asarray(offered, dtype=np.int64),
        statistics=lambda ids: store.batch(ids, reads=source.reads),
        draw=data_draw(prompts, seed, step, SOURCE_DRAW),
        rng=np.random.default_rng(step_seed(seed, step, PROMPT_SOURCE)),
        step=step,
        group_size=group_size,
    )
    batch = source.compose(ctx)
    return check_source_batch(source, ctx, batch), source_metrics(source, ctx.offered, batch)


def check_source_reads_the_data(
    source: PromptSource, streaming: bool, num_prompts: int | None, batch_prompts: int
) -> None:
    """A source that draws candidates beyond the sampler's ids needs data it can draw from by id: not a stream; and
    its own settings checked against the data's size (``PromptSource.check``)."""
    if streaming and source.needs_pool:
        raise ValueError(
            f"prompt_source={source.name!r} draws candidates beyond the sampler's prompts, but train_dataset is a "
            "streaming IterableDataset, which cannot be drawn from by prompt id. Set prompt_source='sampler', or "
            "materialise the stream: Dataset.from_list(list(stream.take(n)))."
        )
    if num_prompts is not None:
        source.check(num_prompts, batch_prompts)


# -------------------------------------------------------------------------------------------------------------------
# How stale each batch's prompts are
# -------------------------------------------------------------------------------------------------------------------
class VisitClock:
    """Generation batches so far, and the batch of each prompt's latest completions."""

    def __init__(self) -> None:
        self.batches = 0
        self.last_visit: dict[int, int] = {}

    def visit(self, prompt_ids: np.ndarray, generated: np.ndarray) -> dict[str, float]:
        """Record one batch (``generated``: completions per prompt of ``prompt_ids``); its ``prompts/*`` metrics:
        ``revisited`` (prompts seen in an earlier batch) and, when there is one, the mean and max of
        ``batches_since_last_visit`` over them.

        Example:
            >>> clock = VisitClock()
            >>> clock.visit(np.array([0, 1]), np.array([2, 2]))
            {'prompts/revisited': 0.0}
            >>> clock.visit(np.array([0, 2]), np.array([2, 2]))["prompts/batches_since_last_visit_max"]
            1.0
        """
        gaps = []
        for prompt_id, count in zip(np.asarray(prompt_ids).tolist(), np.asarray(generated).tolist(), strict=True):
            if count > 0:
                if prompt_id in self.last_visit:
                    gaps.append(self.batches - self.last_visit[prompt_id])
                self.last_visit[prompt_id] = self.batches
        self.batches += 1
        metrics = {"prompts/revisited": float(len(gaps))}
        if gaps:
            metrics["prompts/batches_since_last_visit_mean"] = float(np.mean(gaps))
            metrics["prompts/batches_since_last_visit_max"] = float(max(gaps))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        ids = list(self.last_visit)
        return {"batches": self.batches, "prompt_ids": ids, "last_visit": [self.last_visit[i] for i in ids]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ids, batches = state["prompt_ids"], state["last_visit"]
        if len(ids) != len(batches):
            raise ValueError(f"visits: {len(ids)} prompt ids but {len(batches)} last visits.")
        self.batches = int(state["batches"])
        self.last_visit = {int(i): int(b) for i, b in zip(ids, batches, strict=True)}
