"""The training prompts as the trainer sees them: store ids, rows, fingerprints and the success-rate column.

Two kinds of training data, one interface:

- :class:`DatasetPrompts`, a map-style ``datasets.Dataset``: every prompt is known at construction. Ids come from
  the id column (integers, or strings hashed by :func:`~trl_adaptive.stats.stable_prompt_ids`) or are the row
  numbers; further prompts can be drawn by id (dynamic sampling, CERO's pacing); the success-rate column is read as
  a prior at construction and rewritten from the store after every epoch.
- :class:`StreamPrompts`, a streaming ``datasets.IterableDataset``: prompts are known as the stream yields them.
  Ids come from the id column or, without one, from the prompt (:func:`derived_prompt_id`: its text and images;
  the same prompt is the same prompt in every pass and every process). A prompt's fingerprint and its success-rate
  prior are recorded when it is first seen. A stream cannot be drawn from by id, and there is no column to rewrite: the
  success rates live in the store (``trainer.prompt_statistics``, saved with every checkpoint).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from datasets import Dataset, IterableDataset

from ..stats import PromptStatistics, prompt_fingerprint, stable_prompt_ids

DERIVED_ID_PREFIX = "prompt-sha256:"


IMAGE_COLUMNS = ("image", "images")  # TRL's two image columns: one image, or a list of them


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
