"""The trainer's side of the prompt-source port (``sampling/source.py``): the source's view of the training data.

On the main process, at each generation batch, the source composes the batch from the sampler's ids
(:func:`compose_batch`); the composed ids go to the sampling procedure and every rank gets them with the round
message, so TRL's sampler keeps running unchanged (its epoch, its resume position) and only what enters the batch
changes. Rows of composed prompts the sampler did not offer are read from the training data as those a procedure
draws are (``rounds.add_rows``, ``DatasetPrompts.rows``). A procedure's own draws (CERO's pacing, Pilot-Commit,
dynamic sampling) go through the source too (:func:`procedure_draw`). Every draw is seeded by
``(seed, step, stream, call)`` (``random_streams.py``): a resumed run and every rank draw the same prompts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..sampling.source import PromptSource, SourceContext, check_source_batch, source_metrics
from ..stats import PromptStatistics
from .random_streams import DRAW_PROMPTS, PROMPT_SOURCE, SOURCE_DRAW, step_seed

Draw = Callable[[np.ndarray, int], np.ndarray]  # draw(exclude, number) -> further prompt ids


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
