"""Every numba kernel of trl_adaptive, and nothing else.

Each kernel is written as a plain Python function (``_name_py``) and compiled explicitly below
(``name = numba.njit(cache=True)(_name_py)``), so the plain body stays importable and testable against the compiled
one. Kernels neither validate their inputs nor allocate arrays: the wrappers in :mod:`.solvers` do both and hand over
C-contiguous ``float64`` / ``int64`` arrays (``int16`` for the DP choice table). :func:`warmup` compiles (or loads from
the on-disk cache) every kernel once, with exactly those types, so no solver call pays a JIT compile.

Notation follows Knapsack RL (arXiv 2509.25849): row i is prompt i, column n of ``values`` is N_i = n rollouts, and
``values[i, n]`` = Value(n, p_i). Bounds are per row: N_i in [lo[i], hi[i]].
"""

from __future__ import annotations

import numba
import numpy as np


# -- exact multiple-choice knapsack DP --------------------------------------------------------------------------------
def _mckp_dp_py(
    values: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    capacity: int,
    dp_prev: np.ndarray,
    dp_cur: np.ndarray,
    choice: np.ndarray,
    counts: np.ndarray,
) -> float:
    """Exact DP for max sum_i values[i, N_i] s.t. sum_i N_i = sum_i lo[i] + capacity, lo[i] <= N_i <= hi[i].

    The paper's recurrence dp[i][w] = max_{N_i} dp[i-1][w - N_i] + Value(N_i, p_i) (Knapsack RL, Eq. 5 solved by
    dynamic programming), written over the extra units k_i = N_i - lo[i], so w runs over ``0..capacity`` instead of
    ``0..B`` and only over budgets the first i rows can reach. Every w up to the reach is feasible (the choices are
    contiguous), so no -inf state is ever read. Ties keep the smallest k (the first maximum), which makes the
    backtracked solution deterministic.

    Args:
        values: ``(M, >= max(hi) + 1)`` float64, finite.
        lo, hi: ``(M,)`` int64 bounds.
        capacity: B - sum(lo), with 0 <= capacity <= sum(hi - lo).
        dp_prev, dp_cur: ``(capacity + 1,)`` float64 scratch.
        choice: ``(M, capacity + 1)`` int16 scratch, the argmax k of each state.
        counts: ``(M,)`` int64 output, the optimal N_i.

    Returns:
        The optimal objective sum_i values[i, N_i].
    """
    num_rows = values.shape[0]
    total = 0.0
    for i in range(num_rows):
        total += values[i, lo[i]]
    for w in range(capacity + 1):
        dp_prev[w] = -np.inf
    dp_prev[0] = 0.0
    reach = 0
    for i in range(num_rows):
        base = lo[i]
        width = hi[i] - lo[i]
        new_reach = min(capacity, reach + width)
        offset = values[i, base]
        for w in range(new_reach + 1):
            k_min = max(0, w - reach)
            k_max = min(width, w)
            best = -np.inf
            best_k = k_min
            for k in range(k_min, k_max + 1):
                candidate = dp_prev[w - k] + (values[i, base + k] - offset)
                if candidate > best:
                    best = candidate
                    best_k = k
            dp_cur[w] = best
            choice[i, w] = best_k
        dp_prev, dp_cur = dp_cur, dp_prev
        reach = new_reach
    w = capacity
    for i in range(num_rows - 1, -1, -1):
        k = choice[i, w]
        counts[i] = lo[i] + k
        w -= k
    return total + dp_prev[capacity]


# -- greedy on marginal gains -----------------------------------------------------------------------------------------
def _concave_envelope_py(
    gains: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    env: np.ndarray,
    block_end: np.ndarray,
    pooled: np.ndarray,
    stack_start: np.ndarray,
    stack_sum: np.ndarray,
) -> int:
    """Per-unit gains of each row's least concave majorant over [lo[i], hi[i]], by pool-adjacent-violators.

    ``gains[i, n]`` = V_i(n + 1) - V_i(n). The slopes of the least concave majorant of V_i are the non-increasing
    (antitonic) regression of these gains: adjacent blocks are pooled while a later block's mean gain exceeds the
    earlier one's. At a block boundary the majorant touches V_i, so any N_i that ends a block has its true value.

    A row whose gains already do not increase (a concave row) is left alone: ``pooled[i] = False`` and the greedy
    reads ``gains`` directly. For the other rows, ``pooled[i] = True`` and the kernel writes ``env[i, n]`` (the pooled
    per-unit gain of the unit n -> n + 1) and ``block_end[i, n]`` (the exclusive end of the block containing n) for n
    in [lo[i], hi[i]). ``stack_start`` / ``stack_sum`` are scratch of length >= max(hi - lo). Returns the number of
    pooled rows.
    """
    pooled_rows = 0
    for i in range(gains.shape[0]):
        concave = True
        for n in range(lo[i] + 1, hi[i]):
            if gains[i, n] > gains[i, n - 1]:
                concave = False
                break
        pooled[i] = not concave
        if concave:
            continue
        pooled_rows += 1
        top = -1
        for n in range(lo[i], hi[i]):
            top += 1
            stack_start[top] = n
            stack_sum[top] = gains[i, n]
            # Pool while the mean of the newer block exceeds that of the older one (means compared by cross-products).
            while top > 0:
                len_new = n + 1 - stack_start[top]
                len_old = stack_start[top] - stack_start[top - 1]
                if stack_sum[top] * len_old > stack_sum[top - 1] * len_new:
                    stack_sum[top - 1] += stack_sum[top]
                    top -= 1
                else:
                    break
        end = hi[i]
        for t in range(top, -1, -1):
            start = stack_start[t]
            mean = stack_sum[t] / (end - start)
            for n in range(start, end):
                env[i, n] = mean
                block_end[i, n] = end
            end = start
    return pooled_rows


def _heap_better_py(gain_a: float, count_a: int, row_a: int, gain_b: float, count_b: int, row_b: int) -> bool:
    """Heap order of the greedy: larger next gain first, then fewer rollouts so far, then the lower row index."""
    if gain_a != gain_b:
        return gain_a > gain_b
    if count_a != count_b:
        return count_a < count_b
    return row_a < row_b


_heap_better = numba.njit(cache=True)(_heap_better_py)


def _sift_down_py(heap_gain: np.ndarray, heap_count: np.ndarray, heap_row: np.ndarray, size: int, pos: int) -> None:
    """Restore the binary max-heap property of ``heap_*[:size]`` below position ``pos``."""
    gain, count, row = heap_gain[pos], heap_count[pos], heap_row[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _heap_better(
            heap_gain[right], heap_count[right], heap_row[right], heap_gain[child], heap_count[child], heap_row[child]
        ):
            child = right
        if not _heap_better(heap_gain[child], heap_count[child], heap_row[child], gain, count, row):
            break
        heap_gain[pos], heap_count[pos], heap_row[pos] = heap_gain[child], heap_count[child], heap_row[child]
        pos = child
    heap_gain[pos], heap_count[pos], heap_row[pos] = gain, count, row


_sift_down = numba.njit(cache=True)(_sift_down_py)


def _greedy_py(
    gains: np.ndarray,
    env: np.ndarray,
    block_end: np.ndarray,
    pooled: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    extra: int,
    counts: np.ndarray,
    heap_gain: np.ndarray,
    heap_count: np.ndarray,
    heap_row: np.ndarray,
) -> tuple[int, int]:
    """Greedy on marginal gains with a heap: hand out ``extra`` units above ``lo``, best next block first.

    Each row offers its next block at its per-unit gain: one unit of ``gains`` for a concave row, one block of the
    concave envelope for a pooled row. The heap pops the best offer (ties: fewer rollouts so far, then lower index,
    so equal prompts end up within one unit of each other). A block that does not fit in what is left is skipped and
    its row closed, keeping every N_i on a block boundary. With no skip the result takes the ``extra`` best envelope
    units, so it is optimal; after a skip the wrapper certifies it against the fractional bound or runs the DP.

    Args:
        gains: ``(M, C - 1)`` float64 marginal gains.
        env, block_end, pooled: from :func:`_concave_envelope_py`.
        lo, hi: ``(M,)`` int64 bounds.
        extra: B - sum(lo) units to hand out.
        counts: ``(M,)`` int64 output, N_i.
        heap_gain, heap_count, heap_row: ``(M,)`` float64 / int64 / int64 scratch holding the heap's keys.

    Returns:
        ``(units left unassigned, blocks skipped)``; both are 0 on the exact fast path.
    """
    size = 0
    for i in range(gains.shape[0]):
        counts[i] = lo[i]
        if hi[i] > lo[i]:
            heap_gain[size] = env[i, lo[i]] if pooled[i] else gains[i, lo[i]]
            heap_count[size] = lo[i]
            heap_row[size] = i
            size += 1
    for pos in range(size // 2 - 1, -1, -1):
        _sift_down(heap_gain, heap_count, heap_row, size, pos)
    skipped = 0
    while extra > 0 and size > 0:
        row = heap_row[0]
        n = counts[row]
        end = block_end[row, n] if pooled[row] else n + 1
        if end - n <= extra:
            extra -= end - n
            counts[row] = end
            if end < hi[row]:
                heap_gain[0] = env[row, end] if pooled[row] else gains[row, end]
                heap_count[0] = end
                _sift_down(heap_gain, heap_count, heap_row, size, 0)
                continue
        else:
            skipped += 1
        size -= 1
        heap_gain[0], heap_count[0], heap_row[0] = heap_gain[size], heap_count[size], heap_row[size]
        _sift_down(heap_gain, heap_count, heap_row, size, 0)
    return extra, skipped


# -- Bayesian expected marginal gains (bayes_knapsack) ----------------------------------------------------------------
def _expected_gains_py(a: np.ndarray, b: np.ndarray, gains: np.ndarray) -> None:
    """``gains[i, n] = E[Value(n + 1, p)] - E[Value(n, p)]`` for p ~ Beta(a[i], b[i]), n = 0..C - 1.

    The closed form of :func:`trl_adaptive.allocation.value.expected_marginal_gains` (its NumPy reference):
    g(0) = 0 and, for N >= 1, g(N) = T1(N) + T2(N) with T1(N) = B(a + N + 1, b + 3) / B(a, b) and
    T2(N) = B(a + 2, b + N + 2) / B(a, b). Both start at T(1) = a (a + 1) b (b + 1) (b + 2) / (s ... (s + 4)),
    s = a + b, taken from a sum of logarithms, and move by the exact ratios T1(N + 1) / T1(N) = (a + N + 1) /
    (s + N + 4) and T2(N + 1) / T2(N) = (b + N + 2) / (s + N + 4), both in (0, 1]: no Beta function is formed,
    nothing overflows, and every row is non-increasing (concave values) in floating point too.

    Args:
        a, b: ``(M,)`` float64 Beta parameters, finite and > 0.
        gains: ``(M, C)`` float64 output.
    """
    num_rows, width = gains.shape
    for i in range(num_rows):
        if width == 0:
            continue
        gains[i, 0] = 0.0
        if width == 1:
            continue
        alpha = a[i]
        beta = b[i]
        s = alpha + beta
        log_t = (
            np.log(alpha)
            + np.log1p(alpha)
            + np.log(beta)
            + np.log1p(beta)
            + np.log(beta + 2.0)
            - np.log(s)
            - np.log1p(s)
            - np.log(s + 2.0)
            - np.log(s + 3.0)
            - np.log(s + 4.0)
        )
        first = np.exp(log_t)
        second = first
        for n in range(1, width):
            gains[i, n] = first + second
            denominator = s + n + 4.0
            first *= (alpha + n + 1.0) / denominator
            second *= (beta + n + 2.0) / denominator


mckp_dp = numba.njit(cache=True)(_mckp_dp_py)
concave_envelope = numba.njit(cache=True)(_concave_envelope_py)
greedy = numba.njit(cache=True)(_greedy_py)
expected_gains = numba.njit(cache=True)(_expected_gains_py)


def warmup() -> None:
    """Compile every kernel (or load it from numba's on-disk cache) with the production argument types."""
    values = np.array([[0.0, 0.0, 0.5, 0.75], [0.0, 0.0, 0.25, 0.3]])
    lo = np.array([2, 2], dtype=np.int64)
    hi = np.array([3, 3], dtype=np.int64)
    counts = np.zeros(2, dtype=np.int64)
    mckp_dp(values, lo, hi, 1, np.zeros(2), np.zeros(2), np.zeros((2, 2), dtype=np.int16), counts)
    gains = np.ascontiguousarray(np.diff(values, axis=1))
    env = np.zeros_like(gains)
    block_end = np.zeros(gains.shape, dtype=np.int64)
    pooled = np.zeros(2, dtype=np.bool_)
    concave_envelope(gains, lo, hi, env, block_end, pooled, np.zeros(3, dtype=np.int64), np.zeros(3))
    greedy(gains, env, block_end, pooled, lo, hi, 1, counts, np.zeros(2), np.zeros(2, dtype=np.int64), counts.copy())
    expected_gains(np.ones(2), np.ones(2), np.zeros((2, 3)))
