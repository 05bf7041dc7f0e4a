"""Knapsack RL's value of giving N rollouts to a prompt of success rate p, as NumPy functions and tables.

Value(N, p) = ProbNonZeroGradient(N, p) * InfoGain(p)  (Knapsack RL, arXiv 2509.25849), where

- ProbNonZeroGradient(N, p) = 1 - p^N - (1 - p)^N, the chance that N i.i.d. binary rewards are not all equal, so the
  GRPO group has a non-zero advantage (the paper's Observation 1 / Theorem 1; defined as 0 for N <= 1);
- InfoGain(p) = p (1 - p)^2, the first-order gain in success probability after one policy-gradient step on the
  prompt (the paper's Proposition 1; maximal, 4/27, at p = 1/3).

Symbols: ``p`` is p_i (a prompt's success rate), ``n`` is N_i (its number of rollouts), ``n_low`` / ``n_up`` are
N_low / N_up. Everything is vectorised over prompts; nothing here imports torch, trl or numba.

Numerics: with a = max(p, 1 - p) and b = min(p, 1 - p), the code evaluates 1 - a^N as ``-expm1(N log1p(-b))``, which
keeps full relative precision for p near 0 or 1 (plain ``1 - (1 - p)**N`` loses all digits at p = 1e-12).
"""

from __future__ import annotations

import math

import numpy as np

from .._validate import check_int

#: The largest per-prompt upper bound the tables and kernels accept (choice tables are int16).
MAX_ROLLOUTS_LIMIT = 32767


def _rates(p: np.ndarray | float | list[float]) -> np.ndarray:
    rates = np.asarray(p, dtype=np.float64)
    if np.any(np.isnan(rates)) or np.any((rates < 0) | (rates > 1)):
        raise ValueError(
            "success rates must lie in [0, 1] with no NaN (unseen prompts are handled by the allocator, not by the "
            f"value function); got {int(np.isnan(rates).sum())} NaN and {int(((rates < 0) | (rates > 1)).sum())} "
            "out-of-range values."
        )
    return rates


def info_gain(p: np.ndarray | float | list[float]) -> np.ndarray:
    """InfoGain(p) = p (1 - p)^2 (Knapsack RL, Proposition 1).

    Example:
        >>> round(float(info_gain(1 / 3)), 6)  # the maximum, 4/27
        0.148148
    """
    rates = _rates(p)
    return rates * (1.0 - rates) ** 2


def prob_nonzero_gradient(n: np.ndarray | int | list[int], p: np.ndarray | float | list[float]) -> np.ndarray:
    """ProbNonZeroGradient(N, p) = 1 - p^N - (1 - p)^N, and 0 for N <= 1 (Knapsack RL, Observation 1).

    Broadcasts ``n`` against ``p``.

    Example:
        >>> round(float(prob_nonzero_gradient(8, 0.1)), 4)
        0.5695
    """
    rates = _rates(p)
    counts = np.asarray(n, dtype=np.float64)
    b = np.minimum(rates, 1.0 - rates)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        prob = -np.expm1(counts * np.log1p(-b)) - np.power(b, counts)
    return np.where(counts <= 1, 0.0, np.maximum(prob, 0.0))


def value(n: np.ndarray | int | list[int], p: np.ndarray | float | list[float]) -> np.ndarray:
    """Value(N, p) = ProbNonZeroGradient(N, p) * InfoGain(p), the per-prompt term of the objective (Eq. 5).

    Example:
        >>> round(float(value(4, 0.35)), 4)
        0.1193
    """
    return prob_nonzero_gradient(n, p) * info_gain(p)


def value_table(p: np.ndarray | list[float], n_up: int) -> np.ndarray:
    """``(M, n_up + 1)`` table with ``table[i, n] = Value(n, p_i)`` for every N in ``0..N_up`` (column = N).

    This is the input of :func:`trl_adaptive.allocation.solvers.solve_dp`; columns below N_low are present (and
    equal to the true value) but never chosen by a solver whose bounds exclude them.

    Example:
        >>> value_table([0.5], n_up=3).round(4).tolist()
        [[0.0, 0.0, 0.0625, 0.0938]]
    """
    rates = _rates(p)
    _check_n_up(n_up)
    return value(np.arange(n_up + 1, dtype=np.float64)[None, :], rates[:, None])


def marginal_gains(p: np.ndarray | list[float], n_up: int) -> np.ndarray:
    """``(M, n_up)`` table with ``gains[i, n] = Value(n + 1, p_i) - Value(n, p_i)`` for N in ``0..N_up - 1``.

    Evaluated in closed form rather than by differencing :func:`value_table`, so it is exact to rounding even where
    Value saturates: for N >= 1,

        Value(N + 1, p) - Value(N, p) = InfoGain(p) * (p^N (1 - p) + (1 - p)^N p)

    which is non-increasing in N, so Value is concave on N >= 1 and the greedy solver is exact whenever N_low >= 1.
    At N = 0 the gain is 0 (Value(0) = Value(1) = 0) while the next one is 2 p (1 - p) InfoGain(p): the only
    non-concave step, which the greedy solver handles by taking 0 -> 2 as one block (its per-unit gain,
    p (1 - p) InfoGain(p), equals the following step's).

    Example:
        >>> marginal_gains([0.5], n_up=3).round(4).tolist()
        [[0.0, 0.0625, 0.0312]]
    """
    rates = _rates(p)
    _check_n_up(n_up)
    if n_up == 0:
        return np.zeros((len(rates), 0))
    a = np.maximum(rates, 1.0 - rates)[:, None]
    b = np.minimum(rates, 1.0 - rates)[:, None]
    exponent = np.arange(n_up, dtype=np.float64)[None, :] - 1.0  # N - 1 for column N
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        # p^N (1-p) + (1-p)^N p = a b (a^(N-1) + b^(N-1)), symmetric in p <-> 1 - p.
        power_sum = np.exp(exponent * np.log1p(-b)) + np.power(b, exponent)
        gains = (rates * (1.0 - rates) ** 2)[:, None] * (a * b) * power_sum
    gains[:, 0] = 0.0
    gains[(b == 0.0)[:, 0], :] = 0.0
    return gains


def mixed_group_demand(
    p: np.ndarray | float | list[float], n_low: int = 2, n_up: int = 128, confidence: float = 0.9
) -> np.ndarray:
    """Rollouts a prompt needs for a ``confidence`` chance of a mixed group, clipped to ``[N_low, N_up]``.

    The high-probability bound of Knapsack RL's Theorem 1, N >= ln(1 - alpha) / ln(max(p, 1 - p)) with
    alpha = ``confidence``, rounded up. Used by the fallback to cap each mid-difficulty prompt's demand. At p = 0 or 1
    no finite N suffices, so the demand is N_up; at p = 0.5 it is ceil(3.32) = 4.

    The bound ignores the smaller of the two all-equal terms, so at the demand the exact ProbNonZeroGradient can be
    a little below alpha (0.875 at p = 0.5, N = 4); it is the rule the paper and the official code use.

    Example:
        >>> mixed_group_demand([0.0, 0.5, 0.9, 0.99, 1.0]).tolist()
        [128, 4, 22, 128, 128]
    """
    rates = _rates(p)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1.")
    if not 0 <= n_low <= n_up:
        raise ValueError(f"need 0 <= n_low <= n_up, got n_low={n_low}, n_up={n_up}.")
    b = np.minimum(rates, 1.0 - rates)
    log_a = np.log1p(-b)  # ln(max(p, 1 - p)) <= 0, exactly 0 at p in {0, 1}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(log_a < 0.0, math.log1p(-confidence) / np.where(log_a < 0.0, log_a, -1.0), np.inf)
    # A hair below the integer: ratios that are whole numbers up to rounding must not round up to the next one.
    demand = np.ceil(np.minimum(ratio, float(n_up)) - 1e-9)
    return np.clip(demand, n_low, n_up).astype(np.int64)


# -- Bayesian expected value under a Beta posterior (bayes_knapsack) --------------------------------------------------
def _beta_params(a: np.ndarray | float | list[float], b: np.ndarray | float | list[float]) -> tuple[np.ndarray, ...]:
    alpha = np.atleast_1d(np.asarray(a, dtype=np.float64))
    beta = np.atleast_1d(np.asarray(b, dtype=np.float64))
    if alpha.ndim != 1 or alpha.shape != beta.shape:
        raise ValueError(f"a and b must be 1-D arrays of equal length, got shapes {alpha.shape} and {beta.shape}.")
    for field, values in (("a", alpha), ("b", beta)):
        bad = ~np.isfinite(values) | (values <= 0.0)
        if np.any(bad):
            raise ValueError(
                f"Beta parameter {field} must be finite and > 0 for every prompt; got {values[bad][:3].tolist()} at "
                f"positions {np.flatnonzero(bad)[:3].tolist()}. Build the posterior as 1 + prior + successes, "
                "1 + prior + failures (PromptStatistics.batch does)."
            )
    return alpha, beta


def expected_info_gain(a: np.ndarray | float | list[float], b: np.ndarray | float | list[float]) -> np.ndarray:
    """E[InfoGain(p)] = E[p (1 - p)^2] = a b (b + 1) / ((a + b)(a + b + 1)(a + b + 2)) for p ~ Beta(a, b).

    The limit of the expected value as N grows: E[Value(N, p)] -> E[InfoGain(p)].

    Example:
        >>> round(float(expected_info_gain(1.0, 1.0)[0]), 6)  # p uniform: 1/12
        0.083333
    """
    alpha, beta = _beta_params(a, b)
    s = alpha + beta
    return alpha / s * beta / (s + 1.0) * (beta + 1.0) / (s + 2.0)


def expected_marginal_gains(
    a: np.ndarray | float | list[float], b: np.ndarray | float | list[float], n_up: int
) -> np.ndarray:
    """``(M, n_up)`` gains ``g[i, n] = E[Value(n + 1, p)] - E[Value(n, p)]``, p ~ Beta(a_i, b_i), N in 0..N_up - 1.

    The expectation of Knapsack RL's marginal gain (:func:`marginal_gains`) under the posterior, in closed form:
    for N >= 1,

        g(N) = E[InfoGain(p) (p^N (1 - p) + (1 - p)^N p)] = E[p^(N+1) (1 - p)^3] + E[p^2 (1 - p)^(N+2)]
             = [B(a + N + 1, b + 3) + B(a + 2, b + N + 2)] / B(a, b)

    and g(0) = 0 (Value(0) = Value(1) = 0). Each term is an expectation of a function that does not increase in N,
    so g does not increase in N: E[Value] is concave on N >= 1 and the greedy solver stays exact (as for the
    plug-in value). It tends to :func:`marginal_gains` at p = a / (a + b) as a + b grows.

    Numerics, in log space: no Beta function is formed. With s = a + b, both terms start at
    T(1) = B(a + 2, b + 3) / B(a, b) = a (a + 1) b (b + 1) (b + 2) / (s (s + 1) (s + 2) (s + 3) (s + 4)), summed as
    logarithms, and move by the exact ratios B(a + N + 2, b + 3) / B(a + N + 1, b + 3) = 1 - (b + 3) / (s + N + 4)
    and B(a + 2, b + N + 3) / B(a + 2, b + N + 2) = 1 - (a + 2) / (s + N + 4), accumulated with ``log1p`` and
    ``cumsum``. Nothing overflows for any finite a, b > 0 (a + b up to ~1e300); gains below ~1e-308 underflow to 0.
    The accumulated logarithms are non-increasing in floating point too, so the computed rows are exactly concave.

    Example:
        >>> expected_marginal_gains([1.0], [1.0], n_up=4).round(5).tolist()  # p uniform: g(N) = 2 / ((N+2)...(N+5))
        [[0.0, 0.03333, 0.01667, 0.00952]]
    """
    alpha, beta = _beta_params(a, b)
    _check_n_up(n_up)
    gains = np.zeros((len(alpha), n_up))
    if n_up < 2:
        return gains
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
    )[:, None]
    # Column k of the steps is the move from N = k + 1 to N = k + 2.
    denominator = s[:, None] + np.arange(5.0, n_up + 3.0)[None, :]
    log_first = np.zeros((len(alpha), n_up - 1))
    log_second = np.zeros((len(alpha), n_up - 1))
    np.cumsum(np.log1p(-(beta + 3.0)[:, None] / denominator[:, : n_up - 2]), axis=1, out=log_first[:, 1:])
    np.cumsum(np.log1p(-(alpha + 2.0)[:, None] / denominator[:, : n_up - 2]), axis=1, out=log_second[:, 1:])
    with np.errstate(under="ignore"):
        gains[:, 1:] = np.exp(log_t + log_first) + np.exp(log_t + log_second)
    return gains


def expected_value_table(
    a: np.ndarray | float | list[float], b: np.ndarray | float | list[float], n_up: int
) -> np.ndarray:
    """``(M, n_up + 1)`` table ``E[Value(n, p)]``, p ~ Beta(a_i, b_i), for N in 0..N_up (column = N).

    The Bayesian counterpart of :func:`value_table`: the expected objective term of a prompt whose success
    probability is only known through its posterior,

        E[Value(N, p)] = [B(a + 1, b + 2) - B(a + N + 1, b + 2) - B(a + 1, b + N + 2)] / B(a, b)   (N >= 2; 0 below)

    evaluated as the running sum of :func:`expected_marginal_gains` (no cancellation, no overflow). As a + b grows
    with a / (a + b) = p fixed it tends to Value(N, p) (the error is O(N^2 / (a + b))).

    Example:
        >>> expected_value_table([1.0], [1.0], n_up=3).round(5).tolist()
        [[0.0, 0.0, 0.03333, 0.05]]
    """
    gains = expected_marginal_gains(a, b, n_up)
    table = np.zeros((gains.shape[0], n_up + 1))
    np.cumsum(gains, axis=1, out=table[:, 1:])
    return table


def _check_n_up(n_up: int) -> None:
    check_int("n_up", n_up, minimum=0, maximum=MAX_ROLLOUTS_LIMIT)


__all__ = [
    "expected_info_gain",
    "expected_marginal_gains",
    "expected_value_table",
    "info_gain",
    "marginal_gains",
    "mixed_group_demand",
    "prob_nonzero_gradient",
    "value",
    "value_table",
]
