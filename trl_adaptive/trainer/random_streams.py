"""The named random streams of a training step.

Every random draw the trainer makes is seeded by ``(seed, step, *stream, *call)``: a resumed run draws exactly what
the uninterrupted run drew, and no stream touches another's (or the epoch sampler's) state. The values are part of
the run's reproducibility: changing one changes every run's draws.
"""

from __future__ import annotations

#: The order a batch's completions are dispatched over the ranks when group sizes differ (``dispatch.py``): a planned
#: round, and the training pass after rounds.
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
