"""The model of prompts and learning: where each prompt's true success probability starts and how GRPO moves it.

A prompt is a Bernoulli reward with true probability p_i. :class:`DifficultyMix` draws the initial p_i;
:class:`LearningRule` moves logit(p_i) after each step, only for mixed groups (0 < k_i < N_i), the one case where
GRPO's advantage, and so its gradient, is non-zero; :func:`seq_advantage_weights` makes its ``"advantage"`` rule exact
for Reinforce-Ada Seq, which trains on a subset of the completions it drew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

RuleKind = Literal["per_completion", "per_group", "sqrt", "advantage"]
RULE_KINDS: tuple[RuleKind, ...] = ("per_completion", "per_group", "sqrt", "advantage")

_LOGIT_CLIP = 20.0  # |logit p| <= 20 keeps p in (2e-9, 1 - 2e-9): no prompt becomes exactly impossible or certain.


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), with p clipped away from 0 and 1."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    return np.log(p) - np.log1p(-p)


def expit(x: np.ndarray) -> np.ndarray:
    """The inverse of :func:`logit`, 1 / (1 + exp(-x)), in the tanh form that cannot overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


@dataclass(frozen=True)
class DifficultyMix:
    """Distribution of the initial true success probabilities p_i (an ASSUMPTION, not a measurement).

    A three-part mixture:

    - ``weight_hard``: "near 0", logit(p) ~ Normal(hard_logit_mean, hard_logit_std). Defaults -5 +- 1.5 give a median
      p of 0.007 (one success in ~150 tries); 8 samples show a success for ~5% of them.
    - ``weight_easy``: "near 1", logit(p) ~ Normal(easy_logit_mean, easy_logit_std). Defaults 4 +- 1.5: median
      p = 0.982.
    - ``weight_spread``: p ~ Uniform(spread_low, spread_high).

    The default 0.35 / 0.25 / 0.40 is meant to resemble DAPO-Math-17K under a mid-size model (Knapsack RL's Figure 2
    and 8 show ~20-40% of prompts all-wrong and up to ~40% all-correct at N = 8). It is a guess; the benchmark also
    reports the ``"hard"`` and ``"easy"`` variants in :data:`MIXES`.
    """

    weight_hard: float = 0.35
    weight_easy: float = 0.25
    weight_spread: float = 0.40
    hard_logit_mean: float = -5.0
    hard_logit_std: float = 1.5
    easy_logit_mean: float = 4.0
    easy_logit_std: float = 1.5
    spread_low: float = 0.05
    spread_high: float = 0.95

    def __post_init__(self) -> None:
        weights = (self.weight_hard, self.weight_easy, self.weight_spread)
        if min(weights) < 0 or not np.isclose(sum(weights), 1.0):
            raise ValueError(f"DifficultyMix weights must be >= 0 and sum to 1, got {weights}.")
        if not 0.0 < self.spread_low <= self.spread_high < 1.0:
            raise ValueError(f"Need 0 < spread_low <= spread_high < 1, got {self.spread_low}, {self.spread_high}.")

    def sample(self, num_prompts: int, rng: np.random.Generator) -> np.ndarray:
        """``(num_prompts,)`` float64 initial p_i, drawn with ``rng``."""
        part = rng.choice(3, size=num_prompts, p=[self.weight_hard, self.weight_easy, self.weight_spread])
        hard = rng.normal(self.hard_logit_mean, self.hard_logit_std, size=num_prompts)
        easy = rng.normal(self.easy_logit_mean, self.easy_logit_std, size=num_prompts)
        spread = logit(rng.uniform(self.spread_low, self.spread_high, size=num_prompts))
        logits = np.select([part == 0, part == 1], [hard, easy], default=spread)
        return expit(np.clip(logits, -_LOGIT_CLIP, _LOGIT_CLIP))


MIXES: dict[str, DifficultyMix] = {
    "dapo": DifficultyMix(),
    "hard": DifficultyMix(weight_hard=0.60, weight_easy=0.10, weight_spread=0.30),
    "easy": DifficultyMix(weight_hard=0.15, weight_easy=0.50, weight_spread=0.35),
}


@dataclass(frozen=True)
class LearningRule:
    """How a step's groups move the true success probabilities: only mixed groups (0 < k_i < N_i) carry signal.

    ``logit(p_i) += lr * signal_i`` for each prompt i of the batch, where, with n = num_generations (so that a mixed
    uniform group of n gives signal 1 under the first three rules):

    - ``"per_completion"``: signal_i = N_i / n. Every completion of a mixed group is worth the same; the loss is
      averaged over the batch's completions (TRL's default normalisation), so a group's weight grows with its size.
      Favours allocators that put many completions into mixed groups: it is the effective-gradient ratio made
      into learning.
    - ``"per_group"``: signal_i = 1. A mixed group is one unit of signal whatever its size (per-group loss
      averaging, or "more samples only reduce variance"). Favours allocators that make many *prompts* mixed.
    - ``"sqrt"``: signal_i = sqrt(N_i / n), in between.
    - ``"advantage"``: signal_i = w_i * N_i * sqrt(q_i (1 - q_i)) / (n / 2), q_i = k_i / N_i. This is the exact
      GRPO gradient of a tabular Bernoulli-logit policy: with A_ij = (r_ij - q_i) / std_i and score r_ij - p_i,
      sum_j A_ij (r_ij - p_i) = N_i sqrt(q_i (1 - q_i)). It is the only rule that reads ``w_i``, the allocator's
      per-prompt advantage multiplier (Reinforce-Ada's hybrid 1/sqrt(p) weight); the other rules ignore it.

    ``transfer`` lets unsolved prompts improve through the others (generalisation): after each step every prompt of
    the population, sampled or not, gets ``transfer * sum_i(lr * signal_i) / num_prompts``, i.e. a share
    ``transfer`` of the step's total local progress spread evenly. ``transfer = 0`` makes prompts independent.

    Signals are never negative: a mixed group always pushes its prompt towards success (the expected GRPO update on a
    binary reward). Groups that are all correct or all wrong get exactly 0 and, with ``transfer = 0``, leave p_i
    unchanged.
    """

    kind: RuleKind = "per_completion"
    lr: float = 0.3
    transfer: float = 0.25

    def __post_init__(self) -> None:
        if self.kind not in RULE_KINDS:
            raise ValueError(f"Unknown learning rule {self.kind!r}; choose one of {', '.join(RULE_KINDS)}.")
        if self.lr < 0 or self.transfer < 0:
            raise ValueError(f"lr and transfer must be >= 0, got lr={self.lr}, transfer={self.transfer}.")

    def signal(
        self,
        counts: np.ndarray,
        successes: np.ndarray,
        num_generations: int,
        weights: np.ndarray | None = None,
    ) -> np.ndarray:
        """``(M,)`` float64 signal_i >= 0, zero for every group that is not mixed.

        Args:
            counts: ``(M,)`` N_i, completions per prompt (0 = not sampled this step).
            successes: ``(M,)`` k_i, successful completions per prompt.
            num_generations: n, the uniform group size that normalises the signal.
            weights: ``(M,)`` per-prompt advantage multiplier (an allocation's ``weights``), or None (= 1).
                Only the ``"advantage"`` rule uses it.
        """
        counts = np.asarray(counts, dtype=np.float64)
        successes = np.asarray(successes, dtype=np.float64)
        mixed = (successes > 0) & (successes < counts)
        n = float(num_generations)
        if self.kind == "per_completion":
            raw = counts / n
        elif self.kind == "per_group":
            raw = np.ones_like(counts)
        elif self.kind == "sqrt":
            raw = np.sqrt(counts / n)
        else:
            q = np.divide(successes, counts, out=np.zeros_like(counts), where=counts > 0)
            w = np.ones_like(counts) if weights is None else np.asarray(weights, dtype=np.float64)
            raw = w * counts * np.sqrt(q * (1.0 - q)) / (n / 2.0)
        return np.where(mixed, raw, 0.0)

    def apply(
        self,
        logits: np.ndarray,
        prompt_ids: np.ndarray,
        counts: np.ndarray,
        successes: np.ndarray,
        num_generations: int,
        weights: np.ndarray | None = None,
    ) -> None:
        """Update the population's ``logits`` in place after one step (local term, then the transfer term)."""
        step = self.lr * self.signal(counts, successes, num_generations, weights)
        np.add.at(logits, prompt_ids, step)
        if self.transfer > 0:
            logits += self.transfer * step.sum() / len(logits)
        np.clip(logits, -_LOGIT_CLIP, _LOGIT_CLIP, out=logits)


def seq_advantage_weights(
    trained: np.ndarray,
    trained_successes: np.ndarray,
    attempts: np.ndarray,
    successes: np.ndarray,
    p: np.ndarray,
) -> np.ndarray:
    """Per-prompt multipliers that make the ``"advantage"`` rule the exact tabular gradient of Seq's update.

    Seq trains on a subset (N completions, k of them correct) but takes the baseline from all A completions drawn
    (S correct): q = S / A, s = sqrt(q (1 - q)), A_j = (r_j - q) / s. For a Bernoulli-logit prompt with true p the
    score of a completion is r_j - p, so the update is

        G = sum_j A_j (r_j - p) = [k (1 - q)(1 - p) + (N - k) q p] / s

    whereas the ``"advantage"`` rule computes N sqrt(q' (1 - q')) with the subset's own rate q' = k / N (the two agree
    when the subset is the whole pool). The multiplier is G / (N sqrt(q' (1 - q'))), 1 where the subset or the pool
    is not mixed (no signal either way). Other rules ignore it.

    Example:
        >>> # pool of 32 with 2 correct (q = 1/16), balanced subset of 4 (k = 2), true p = 1/16: G = 7.29, rule 2.0
        >>> w = seq_advantage_weights(np.array([4]), np.array([2]), np.array([32]), np.array([2]), np.array([1 / 16]))
        >>> w.round(3).tolist()
        [3.647]
    """
    trained = np.asarray(trained, dtype=np.float64)
    k = np.asarray(trained_successes, dtype=np.float64)
    a = np.asarray(attempts, dtype=np.float64)
    q = np.divide(successes, a, out=np.zeros_like(a), where=a > 0)
    q_sub = np.divide(k, trained, out=np.zeros_like(trained), where=trained > 0)
    ok = (q > 0) & (q < 1) & (q_sub > 0) & (q_sub < 1)
    s = np.sqrt(np.where(ok, q * (1.0 - q), 1.0))
    gradient = (k * (1.0 - q) * (1.0 - p) + (trained - k) * q * p) / s
    rule = trained * np.sqrt(np.where(ok, q_sub * (1.0 - q_sub), 1.0))
    return np.where(ok, gradient / rule, 1.0)


__all__ = [
    "MIXES",
    "RULE_KINDS",
    "DifficultyMix",
    "LearningRule",
    "RuleKind",
    "expit",
    "logit",
    "seq_advantage_weights",
]
