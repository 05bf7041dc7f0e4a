"""The named random streams of a training step.

Every random draw the trainer makes is seeded by ``(seed, step, *stream, *call)``: a resumed run draws exactly what
the uninterrupted run drew, and no stream touches another's (or the epoch sampler's) state. The values are part of
the run's reproducibility: changing one changes every run's draws.
"""

from __future__ import annotations

#: The order a batch's completions are dispatched over the ranks when group sizes differ (``dispatch.py``).
DISPATCH: tuple[int, ...] = ()
#: The generator handed to the sampling procedure (Reinforce-Ada Seq's selection, a user procedure's draws).
PROCEDURE: tuple[int, ...] = (1,)
#: Prompts drawn beyond the batch (dynamic sampling, CERO's pacing), followed by the call's number within the step.
DRAW_PROMPTS: tuple[int, ...] = (2,)

#: Rounds per step the ``step`` of a round's DISPATCH draw leaves room for (see ``round_step``).
ROUNDS_PER_STEP = 1000


def step_seed(seed: int, step: int, stream: tuple[int, ...], *call: int) -> list[int]:
    """The ``numpy.random.default_rng`` seed of ``stream`` at ``step`` (``seed`` reduced to 32 bits, as TRL's)."""
    return [int(seed) & 0xFFFFFFFF, int(step), *stream, *call]


def round_step(step: int, round_index: int) -> int:
    """The ``step`` that DISPATCH is drawn at for round ``round_index`` of ``step`` (one rank, group sizes unequal).

    Kept as the trainer always drew it, so a single-process run generating in rounds reproduces earlier runs; distinct
    for every (step, round) while a step has fewer than ``ROUNDS_PER_STEP`` rounds (beyond, two rounds share a
    shuffle: harmless, each is still a permutation).
    """
    return int(step) * ROUNDS_PER_STEP + int(round_index)
