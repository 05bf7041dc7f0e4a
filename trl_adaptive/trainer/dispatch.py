"""Expand an allocation into one job per completion and split the jobs evenly across ranks.

Pure NumPy so it can be tested without a trainer. The layout, for U = 3 prompts and counts [4, 2, 2] over 2 ranks:

    counts        [4, 2, 2]                       (sum = T = 8 = generation_batch_size)
    expand        [0 0 0 0 1 1 2 2]               prompt-major, one job per completion
    shuffle       [2 0 1 0 0 2 1 0]               seeded by (seed, step) so every rank and a resume agree
    split         rank 0: [2 0 1 0]  rank 1: [0 2 1 0]   (L = T / num_processes jobs each)

Gathering per-rank results in rank order gives back the shuffled global order, so ``group_ids = shuffled`` lines up
with TRL's gathered rewards (``rank * L + i``).
"""

from __future__ import annotations

import numpy as np

from .random_streams import DISPATCH, step_seed


def expand_counts(counts: np.ndarray, seed: int, step: int) -> np.ndarray:
    """Group id (index into the prompts) of each of the ``sum(counts)`` completions, in dispatch order.

    Equal counts keep TRL's prompt-major layout untouched (so the uniform allocator reproduces GRPOTrainer exactly);
    unequal counts are shuffled so one large group does not land on a single rank (token load balance).
    """
    jobs = np.repeat(np.arange(len(counts), dtype=np.int64), np.asarray(counts, dtype=np.int64))
    return jobs[dispatch_order(jobs, seed, step)]


def dispatch_order(jobs: np.ndarray, seed: int, step: int) -> np.ndarray:
    """The permutation that spreads prompt-major ``jobs`` (a group key per completion: a group index or a prompt
    id, any int64 value, such as a hashed string id) over the ranks.

    The identity when every group present has the same size (TRL's layout), a permutation seeded by (seed, step)
    otherwise. ``jobs[order]`` is the dispatch order; the completion generated at dispatch position i is job
    ``order[i]``.
    """
    jobs = np.asarray(jobs, dtype=np.int64)
    sizes = np.unique(jobs, return_counts=True)[1]  # not bincount: ids may be negative or 63-bit hashes
    if len(np.unique(sizes)) <= 1:
        return np.arange(len(jobs), dtype=np.int64)
    rng = np.random.default_rng(step_seed(seed, step, DISPATCH))
    return rng.permutation(len(jobs)).astype(np.int64)


def rank_slice(total: int, num_processes: int, process_index: int) -> slice:
    """The contiguous block of ``total / num_processes`` jobs that rank ``process_index`` holds."""
    if total % num_processes != 0:
        raise ValueError(
            f"{total} completions cannot be split evenly over {num_processes} processes; make generation_batch_size "
            "a multiple of the number of processes."
        )
    per_rank = total // num_processes
    return slice(process_index * per_rank, (process_index + 1) * per_rank)
