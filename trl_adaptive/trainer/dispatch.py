"""Expand an allocation into one job per completion and lay the jobs out over the ranks, tokens balanced.

Pure NumPy, tested without a trainer; :class:`BatchDispatch` holds what one batch is laid out by. The
layout, for U = 3 prompts with counts [4, 2, 2] over 2 ranks and expected lengths of [90, 30, 30] tokens:

    counts     [4, 2, 2]                          (sum = T = 8 = generation_batch_size)
    expand     [0 0 0 0 1 1 2 2]                  prompt-major, one job per completion
    lengths    [90 90 90 90 30 30 30 30]          tokens of each job: the prompt's expected length
    balance    rank 0: jobs [0 2 4 6]  rank 1: jobs [1 3 5 7]     L = T / num_processes jobs each, 240 | 240 tokens
    order      [0 2 4 6 1 3 5 7]                  rank 0's jobs, then rank 1's, each in job order
    dispatch   [0 0 1 2 0 0 1 2]                  jobs[order]; a shuffle can put all four 90s on one rank: 360 | 120

Gathering per-rank results in rank order gives back the dispatch order, so ``group_ids = jobs[order]`` lines up with
TRL's gathered rewards (``rank * L + i``). Equal group sizes keep TRL's prompt-major layout (uniform is GRPOTrainer,
bit for bit); one rank keeps a shuffle seeded by (seed, step), and by the round's number in a batch generated in
rounds (nothing to balance; ``random_streams.py``); unequal groups over several ranks are balanced, before generation
by the expected lengths of the prompts and, for the training pass after rounds, by the actual lengths of the
completions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..allocation.token_budget import filled_lengths
from .random_streams import DISPATCH, ROUND_DISPATCH, step_seed

if TYPE_CHECKING:
    from ..sampling import BatchRecord

#: A swap must narrow the gap between two ranks by more than this share of it (float noise is not a gain).
_SWAP_TOLERANCE = 1e-9


def dispatch_order(
    jobs: np.ndarray,
    seed: int,
    step: int,
    lengths: np.ndarray | None = None,
    num_ranks: int = 1,
    round_index: int | None = None,
) -> np.ndarray:
    """The permutation that lays prompt-major ``jobs`` (a group key per completion: a group index or a prompt id,
    any int64 value, such as a hashed string id) out over ``num_ranks`` ranks.

    The identity when every group present has the same size (TRL's layout); with one rank, a permutation seeded by
    (seed, step) (:func:`shuffled_order`; ``round_index``: of that round of a batch generated in rounds); otherwise
    :func:`balanced_order` of the jobs' ``lengths`` in tokens (NaN or None: unknown, taken as equal). ``jobs[order]``
    is the dispatch order; the completion generated at dispatch position i is job ``order[i]``.
    """
    jobs = np.asarray(jobs, dtype=np.int64)
    sizes = np.unique(jobs, return_counts=True)[1]  # not bincount: ids may be negative or 63-bit hashes
    if len(np.unique(sizes)) <= 1:
        return np.arange(len(jobs), dtype=np.int64)
    if num_ranks == 1:
        return shuffled_order(len(jobs), seed, step, round_index)
    return balanced_order(known_lengths(lengths, len(jobs)), num_ranks)


def shuffled_order(size: int, seed: int, step: int, round_index: int | None = None) -> np.ndarray:
    """A permutation of ``size`` jobs seeded by (seed, step): every rank and a resumed run draw the same one. Drawn
    from the DISPATCH stream, or with ``round_index`` from ROUND_DISPATCH and the round's number
    (``random_streams.py``)."""
    if round_index is None:
        rng_seed = step_seed(seed, step, DISPATCH)
    else:
        rng_seed = step_seed(seed, step, ROUND_DISPATCH, int(round_index))
    return np.random.default_rng(rng_seed).permutation(size).astype(np.int64)


def known_lengths(lengths: np.ndarray | Sequence[float] | None, size: int) -> np.ndarray:
    """``lengths`` as float64 with unknown (NaN) entries set to the mean of the known ones (all 1 when none is)."""
    if lengths is None:
        return np.ones(size, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape != (size,):
        raise ValueError(f"dispatch lengths: expected one length per job, shape ({size},), got {lengths.shape}.")
    if np.isinf(lengths).any() or (lengths[~np.isnan(lengths)] < 0).any():
        raise ValueError(f"dispatch lengths must be finite and >= 0 tokens (NaN for unknown); got {lengths[:8]}...")
    filled = filled_lengths(lengths)
    return np.ones(size, dtype=np.float64) if filled is None else filled


def balanced_order(lengths: np.ndarray, num_ranks: int) -> np.ndarray:
    """The dispatch order that gives each of ``num_ranks`` ranks exactly ``len(lengths) / num_ranks`` jobs and
    balances the tokens per rank: rank 0's jobs, then rank 1's, each rank's in job order. Deterministic.

    Longest job first onto the rank with the fewest tokens among those not yet full (ties: fewest jobs, then lowest
    rank, so jobs of equal length are dealt round-robin and a group is spread over the ranks), then pairwise swaps
    between the heaviest and the lightest rank while one narrows their gap. When no swap is left, the heaviest rank
    holds at most (longest job - shortest job) tokens more than the lightest, so at most that above the mean.
    """
    lengths = np.asarray(lengths, dtype=np.float64)
    per_rank = len(lengths) // num_ranks
    if per_rank * num_ranks != len(lengths):
        raise ValueError(
            f"{len(lengths)} completions cannot be split evenly over {num_ranks} processes; make "
            "generation_batch_size a multiple of the number of processes."
        )
    rank_of = _longest_first(lengths, num_ranks, per_rank)
    _swap_until_balanced(lengths, rank_of, num_ranks)
    return np.argsort(rank_of, kind="stable").astype(np.int64)


def _longest_first(lengths: np.ndarray, num_ranks: int, per_rank: int) -> np.ndarray:
    """Rank of each job under longest-processing-time-first with each rank capped at ``per_rank`` jobs."""
    rank_of = np.empty(len(lengths), dtype=np.int64)
    heap = [(0.0, 0, rank) for rank in range(num_ranks)]  # (tokens, jobs held, rank), already a heap
    values = lengths.tolist()
    for job in np.argsort(-lengths, kind="stable").tolist():
        tokens, held, rank = heapq.heappop(heap)
        rank_of[job] = rank
        if held + 1 < per_rank:  # a full rank leaves the heap
            heapq.heappush(heap, (tokens + values[job], held + 1, rank))
    return rank_of


def _swap_until_balanced(lengths: np.ndarray, rank_of: np.ndarray, num_ranks: int) -> None:
    """Exchange jobs between the heaviest and lightest rank (in place) while an exchange narrows their gap.

    Each exchange lowers the sum of squared rank loads, so the loop ends; ``len(lengths)`` exchanges bound it (a
    handful are made in practice, longest-first leaves little to fix).
    """
    loads = np.bincount(rank_of, weights=lengths, minlength=num_ranks)
    for _ in range(len(lengths)):
        heavy, light = int(np.argmax(loads)), int(np.argmin(loads))
        pair = _best_swap(lengths, np.flatnonzero(rank_of == heavy), np.flatnonzero(rank_of == light))
        if pair is None:
            return
        give, take = pair
        rank_of[give], rank_of[take] = light, heavy
        moved = lengths[give] - lengths[take]
        loads[heavy] -= moved
        loads[light] += moved


def _best_swap(lengths: np.ndarray, heavy_jobs: np.ndarray, light_jobs: np.ndarray) -> tuple[int, int] | None:
    """The jobs (one of the heavy rank's, one of the light rank's) whose exchange narrows the ranks' gap the most:
    length difference d closest to gap / 2 with 0 < d < gap. None when no exchange narrows it."""
    gap = lengths[heavy_jobs].sum() - lengths[light_jobs].sum()
    if gap <= 0:
        return None
    light_jobs = light_jobs[np.argsort(lengths[light_jobs], kind="stable")]
    light = lengths[light_jobs]
    ideal = lengths[heavy_jobs] - gap / 2  # the light job each heavy job would best be exchanged for
    above = np.clip(np.searchsorted(light, ideal), 0, len(light) - 1)
    candidates = np.stack([np.clip(above - 1, 0, None), above], axis=1)  # nearest below and above, per heavy job
    moved = lengths[heavy_jobs][:, None] - light[candidates]
    narrows = (moved > gap * _SWAP_TOLERANCE) & (moved < gap * (1 - _SWAP_TOLERANCE))
    distance = np.where(narrows, np.abs(moved - gap / 2), np.inf)
    best = int(np.argmin(distance))
    if not np.isfinite(distance.flat[best]):
        return None
    row, column = divmod(best, 2)
    return int(heavy_jobs[row]), int(light_jobs[candidates[row, column]])


def rank_tokens(tokens: np.ndarray | Sequence[float], num_ranks: int) -> np.ndarray:
    """Tokens each rank holds, from the tokens of each job in dispatch order (rank r holds ``[r*L, (r+1)*L)``)."""
    return np.asarray(tokens, dtype=np.float64).reshape(num_ranks, -1).sum(axis=1)


def max_over_mean(per_round_rank_tokens: Sequence[np.ndarray]) -> float:
    """How much longer than the average rank the busiest rank works: sum over rounds of the most tokens a rank held
    over the sum of the mean (each round waits for its slowest rank). 1.0 is perfect balance; NaN when unknown."""
    loads = np.asarray(per_round_rank_tokens, dtype=np.float64).reshape(len(per_round_rank_tokens), -1)
    mean = loads.mean(axis=1).sum()
    return float(loads.max(axis=1).sum() / mean) if mean > 0 else float("nan")


# -------------------------------------------------------------------------------------------------------------------
# One batch's dispatch: what each layout is balanced by, and how balanced the batch's tokens were
# -------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchDispatch:
    """How the jobs of one generation batch are laid out over ``num_ranks`` ranks: shuffles seeded by (``seed``,
    ``step``), balanced by ``expected_tokens`` (the store's estimate per prompt id, NaN when unknown) before
    generation and by the completions' actual tokens for the training pass after rounds."""

    seed: int
    step: int
    num_ranks: int
    expected_tokens: Callable[[np.ndarray], np.ndarray]

    def planned_order(self, job_prompt_ids: np.ndarray) -> np.ndarray:
        """Dispatch order of a planned round (one prompt id per job, prompt-major), by the prompts' expected
        tokens."""
        lengths = self.expected_tokens_of_jobs(job_prompt_ids)
        return dispatch_order(job_prompt_ids, self.seed, self.step, lengths, self.num_ranks)

    def round_order(self, job_prompt_ids: np.ndarray, round_index: int) -> np.ndarray:
        """Dispatch order of round ``round_index`` of a batch generated in rounds, by the prompts' expected tokens."""
        lengths = self.expected_tokens_of_jobs(job_prompt_ids)
        return dispatch_order(job_prompt_ids, self.seed, self.step, lengths, self.num_ranks, round_index)

    def replay_dispatch(self, record: BatchRecord, selected: np.ndarray) -> np.ndarray:
        """The ``selected`` completions (record indices) in the dispatch order of the training pass after rounds:
        prompt-major as TRL lays groups out, then balanced by their actual tokens."""
        groups, tokens = record.group_ids, record.completion_tokens
        selected = selected[np.argsort(groups[selected], kind="stable")]
        return selected[dispatch_order(groups[selected], self.seed, self.step, tokens[selected], self.num_ranks)]

    def expected_tokens_of_jobs(self, prompt_ids: np.ndarray) -> np.ndarray:
        """The expected completion tokens of each of ``prompt_ids`` (repeats looked up once; NaN: unknown)."""
        unique, inverse = np.unique(np.asarray(prompt_ids, dtype=np.int64), return_inverse=True)
        return self.expected_tokens(unique)[inverse]


def rank_balance_metrics(
    training_tokens: np.ndarray, num_ranks: int, generation: Sequence[np.ndarray] | None = None
) -> dict[str, float]:
    """``tokens/rank_max_over_mean_training`` (``training_tokens``: per trained completion, in dispatch order) and
    ``tokens/rank_max_over_mean_generation`` (``generation``: per round, the tokens each rank generated; None when
    the training pass generated them). A figure is left out when one of its lengths is unknown (NaN)."""
    metrics = {}
    training = [rank_tokens(training_tokens, num_ranks)]
    generation = training if generation is None else generation
    if len(generation) and np.isfinite(np.concatenate(generation)).all():
        metrics["tokens/rank_max_over_mean_generation"] = max_over_mean(generation)
    if np.isfinite(training_tokens).all():
        metrics["tokens/rank_max_over_mean_training"] = max_over_mean(training)
    return metrics


def rank_slice(total: int, num_processes: int, process_index: int) -> slice:
    """The contiguous block of ``total / num_processes`` jobs that rank ``process_index`` holds."""
    if total % num_processes != 0:
        raise ValueError(
            f"{total} completions cannot be split evenly over {num_processes} processes; make generation_batch_size "
            "a multiple of the number of processes."
        )
    per_rank = total // num_processes
    return slice(process_index * per_rank, (process_index + 1) * per_rank)
