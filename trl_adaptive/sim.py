"""A prompt-population simulator: how much learning signal does an allocator buy at a fixed budget?

No model, no torch, no trl: each prompt i has a true success probability p_i, a completion is a Bernoulli(p_i) reward,
and a *learning rule* moves logit(p_i) only when the prompt's group is mixed (non-zero reward variance), the one case
where GRPO's advantage, and so its gradient, is non-zero. The allocator sees exactly what the trainer sees: the
per-prompt statistics of :class:`trl_adaptive.stats.PromptStatistics`, updated after every step and rolled over with
``end_epoch()`` at every epoch boundary.

One step, as in ``AdaptiveGRPOTrainer``::

    ids     = next M prompts of the epoch's shuffled order      (TRL's RepeatSampler: without replacement, drop_last)
    N       = allocator.allocate(store.success_rates(ids), B, stats=store.batch(ids))     B = M * num_generations
    r_ij    ~ Bernoulli(p_i), j < N_i                                                     rewards
    metrics = group_metrics(N, k)                                                         k_i = sum_j r_ij
    store.update(prompt id of every completion, r)
    logit(p_i) += lr * signal_i   for mixed groups (0 < k_i < N_i); every prompt += the optional transfer term

Metrics follow Knapsack RL (arXiv 2509.25849) section 3.1 / Eq. 4: the *effective-gradient ratio* is the share of
the step's B completions that lie in mixed groups, (1 / B) sum_i N_i 1[0 < k_i < N_i]; the two zero-gradient ratios
are the shares of completions in all-correct and in all-wrong groups (so the three add up to 1). Unlike the paper,
which counts zero-gradient *prompts*, every ratio here is a share of completions, because with variable N_i only the
completion shares add up to the budget.

Because the simulator knows the true p_i, it also scores every allocation by the paper's own objective at the truth:
the *value share* of a step is sum_i Value(N_i, p_i) over the best sum_i Value(N*_i, p_i) reachable with the same
prompts and the same number of generated completions, N* in [2, 128] (Eq. 5 with the paper's bounds, solved exactly;
:func:`value_share`). It separates "where the budget went" from how lucky the draws were, and penalises allocating on
stale or noisy estimates. *Mixed prompts per 1,000 generated completions* counts the trained groups with
0 < k_i < N_i per thousand completions generated.

Assumptions (all parameters, none tuned to reproduce a paper's number):

- :class:`DifficultyMix`: the initial p_i come from a three-part mixture meant to look like DAPO-Math-17K under a
  mid-size model (many prompts never solved, many always solved, the rest spread). The default weights 0.35 / 0.25 /
  0.40 are an assumption, not a measurement; :data:`MIXES` holds the variants the benchmark reports.
- :class:`LearningRule`: only mixed groups move p_i; by how much is a modelling choice, so four variants are reported
  rather than one (they barely change the effective-gradient ratios, but do change which allocator learns most).
- A prompt's difficulty changes only by the learning rule (no forgetting, no noise in the true p_i).

Example:
    >>> result = simulate("uniform", num_prompts=256, batch_prompts=64, num_generations=8, epochs=2, seed=0)
    >>> result.effective_gradient_ratio.shape
    (8,)
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from trl_adaptive.allocation.base import Allocator, PromptBatchStats, get_allocator
from trl_adaptive.allocation.bayes_knapsack import absorb
from trl_adaptive.allocation.knapsack import fill_evenly
from trl_adaptive.allocation.sequential import SequentialAllocator, dynamic_sampling_keep, is_success
from trl_adaptive.allocation.solvers import solve_greedy
from trl_adaptive.allocation.value import marginal_gains
from trl_adaptive.allocation.value import value as value_of

RuleKind = Literal["per_completion", "per_group", "sqrt", "advantage"]
RULE_KINDS: tuple[RuleKind, ...] = ("per_completion", "per_group", "sqrt", "advantage")

STATUSES: tuple[str, ...] = ("unseen", "p0", "p0_0.2", "p0.2_0.8", "p0.8_1", "p1")  # as ``prompts_per_status``
_LOGIT_CLIP = 20.0  # |logit p| <= 20 keeps p in (2e-9, 1 - 2e-9): no prompt becomes exactly impossible or certain.


# ==== difficulty mix =================================================================================================
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
        spread = _logit(rng.uniform(self.spread_low, self.spread_high, size=num_prompts))
        logits = np.select([part == 0, part == 1], [hard, easy], default=spread)
        return _expit(np.clip(logits, -_LOGIT_CLIP, _LOGIT_CLIP))


MIXES: dict[str, DifficultyMix] = {
    "dapo": DifficultyMix(),
    "hard": DifficultyMix(weight_hard=0.60, weight_easy=0.10, weight_spread=0.30),
    "easy": DifficultyMix(weight_hard=0.15, weight_easy=0.50, weight_spread=0.35),
}


# ==== learning rule ==================================================================================================
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
            weights: ``(M,)`` per-prompt advantage multiplier from ``Allocator.completion_weights``, or None (= 1).
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


# ==== metrics ========================================================================================================
def group_metrics(counts: np.ndarray, successes: np.ndarray) -> dict[str, float]:
    """Knapsack RL's section-3.1 diagnostics for one step, as shares of the step's completions.

    Args:
        counts: ``(M,)`` N_i (0 = prompt not sampled this step).
        successes: ``(M,)`` k_i with ``0 <= k_i <= N_i``.

    Returns:
        ``effective_gradient_ratio`` (Eq. 4: completions in groups with 0 < k_i < N_i), ``zero_grad_all_correct``
        (completions in groups with k_i = N_i), ``zero_grad_all_wrong`` (k_i = 0), each divided by sum_i N_i, and
        ``effective_prompt_ratio``: mixed groups / M, where M counts the batch's prompts including skipped ones.

    Example:
        >>> group_metrics(np.array([4, 2, 2]), np.array([1, 2, 0]))["effective_gradient_ratio"]
        0.5
    """
    counts = np.asarray(counts, dtype=np.int64)
    successes = np.asarray(successes, dtype=np.int64)
    if np.any(successes < 0) or np.any(successes > counts):
        raise ValueError("successes must satisfy 0 <= k_i <= N_i.")
    total = counts.sum()
    if total <= 0:
        raise ValueError("group_metrics needs at least one completion.")
    sampled = counts > 0
    mixed = sampled & (successes > 0) & (successes < counts)
    all_correct = sampled & (successes == counts)
    all_wrong = sampled & (successes == 0)
    return {
        "effective_gradient_ratio": float(counts[mixed].sum() / total),
        "zero_grad_all_correct": float(counts[all_correct].sum() / total),
        "zero_grad_all_wrong": float(counts[all_wrong].sum() / total),
        "effective_prompt_ratio": float(mixed.sum() / len(counts)),
    }


REFERENCE_BOUNDS: tuple[int, int] = (2, 128)  # N_low, N_up of the value share's best allocation (the paper's defaults)


def value_share(counts: np.ndarray, p: np.ndarray, bounds: tuple[int, int] = REFERENCE_BOUNDS) -> float:
    """sum_i Value(N_i, p_i) / max_{N*} sum_i Value(N*_i, p_i), at the TRUE p_i (Knapsack RL's Eq. 5 objective).

    The best allocation N* spends the same total, sum_i N_i, on the same prompts, within ``bounds`` = (N_low, N_up),
    exactly (greedy on the concave Value, :func:`~trl_adaptive.allocation.solvers.solve_greedy`). A prompt given 0
    completions scores 0; since the reference gives every prompt at least N_low, a strategy that skips prompts (CERO,
    Pilot-Commit's eviction) could in principle exceed 1. 1.0 when the best objective is 0.

    Args:
        counts: ``(M,)`` N_i, completions generated per prompt in the step.
        p: ``(M,)`` true success probabilities at the time of the step.

    Example:
        >>> round(value_share(np.array([8, 8]), np.array([0.5, 0.999])), 3)  # the best moves 6 units to p = 0.5
        0.992
    """
    counts = np.asarray(counts, dtype=np.int64)
    p = np.asarray(p, dtype=np.float64)
    low, high = bounds
    high = max(high, int(counts.max()), -(-int(counts.sum()) // len(counts)))
    total = max(int(counts.sum()), low * len(counts))
    best = solve_greedy(None, total, low, high, gains=marginal_gains(p, high))
    optimum = float(value_of(best, p).sum())
    achieved = float(value_of(counts, p).sum())
    return achieved / optimum if optimum > 0 else 1.0


# ==== the statistics store the allocator reads =======================================================================
class StatisticsStore(Protocol):
    """The part of :class:`trl_adaptive.stats.PromptStatistics` the simulator uses."""

    def update(self, prompt_ids: np.ndarray, rewards: np.ndarray) -> None: ...

    def end_epoch(self) -> None: ...

    def success_rates(self, prompt_ids: np.ndarray) -> np.ndarray: ...

    def batch(self, prompt_ids: np.ndarray) -> PromptBatchStats: ...


def _default_store() -> StatisticsStore:
    from trl_adaptive.stats import PromptStatistics

    return PromptStatistics()


# ==== one simulation =================================================================================================
STEP_METRICS: tuple[str, ...] = (
    "effective_gradient_ratio",
    "zero_grad_all_correct",
    "zero_grad_all_wrong",
    "effective_prompt_ratio",
)


@dataclass(frozen=True)
class DynamicSampling:
    """DAPO dynamic sampling around a plan-ahead allocator: a spec for :func:`simulate` and :func:`compare`.

    One step, as ``AdaptiveGRPOTrainer(dynamic_sampling=True)`` (``trl_adaptive/trainer/rounds.py``): the allocator
    splits B over the step's M prompts; groups that are all correct or all wrong by the success rule are dropped;
    while the kept groups hold fewer than B completions and fewer than ``max_rounds`` extra rounds were taken, further
    prompts are drawn from the dataset uniformly at random (seeded; never one already in the step), the same allocator
    splits the missing completions over them (about one prompt per n missing, within its bounds), and their mixed
    groups are kept. A batch still short after ``max_rounds`` is filled with completions of dropped groups (zero
    gradient), group by group in generation order. Training always sees exactly B completions; generation takes
    B plus the extra rounds.

    Attributes:
        allocator: a registered name or a plan-ahead :class:`Allocator` instance (not a round-based one).
        max_rounds: the most extra generation rounds per step (the trainer's ``dynamic_sampling_max_rounds``).

    Example:
        >>> result = simulate(DynamicSampling("uniform"), num_prompts=256, batch_prompts=64, epochs=1, seed=0)
        >>> bool(np.all(result.budget_used == 512)), bool(np.all(result.generated >= 512))
        (True, True)
    """

    allocator: str | Allocator = "uniform"
    max_rounds: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or self.max_rounds < 0:
            raise ValueError(f"max_rounds={self.max_rounds!r}: must be an integer >= 0 (extra rounds per step).")


@dataclass(frozen=True)
class Pilot:
    """A pilot round, then the rest of the step's budget by an allocator's ``allocate_remaining`` (two rounds).

    One step: every prompt of the batch gets ``pilot_rollouts`` = k completions; their results join the posterior
    (:func:`~trl_adaptive.allocation.bayes_knapsack.absorb`, the store itself is updated once per step); the
    allocator splits the remaining B - k M completions on top (``allocate_remaining``, e.g. ``bayes_knapsack``).
    Pilot completions are trained on: a prompt's group is its k + extra completions. Generation = training = B.

    Attributes:
        allocator: a registered name or an instance with ``allocate_remaining`` (default ``"bayes_knapsack"``).
        pilot_rollouts: k >= 1, with k M < B.

    Example:
        >>> result = simulate(Pilot("bayes_knapsack", 2), num_prompts=256, batch_prompts=64, epochs=1, seed=0)
        >>> bool(np.all(result.generated == 512)), int(result.rounds[0])
        (True, 2)
    """

    allocator: str | Allocator = "bayes_knapsack"
    pilot_rollouts: int = 2

    def __post_init__(self) -> None:
        k = self.pilot_rollouts
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"pilot_rollouts={k!r}: must be an integer >= 1 (completions per prompt in round one).")


@dataclass(frozen=True)
class PilotCommit:
    """Pilot-Commit's rule (``databricks/pilot-commit``, ``recipe/pc``) at a fixed budget, as a baseline.

    One step: every prompt not evicted gets ``pilot_rollouts`` = k completions; prompts whose pilot success rate q
    lies in [``lower``, 1 - ``upper``] (the official ``diversity_threshold_lower`` / ``_upper``; README values
    0.125 / 0.25) share the rest of the budget evenly, up to N_up = ``max_rollouts`` each (anything that does not fit
    is spread evenly over the other active prompts); too-hard (q < lower) and too-easy prompts get nothing more this
    step (too-hard ones are deferred: they come back next epoch); prompts with q >= ``evict_at`` (the official
    ``exclude_threshold_upper``, 1.0 in the README) are evicted: they get no completion in any later step, and their
    share goes to the rest of the batch. All completions, pilot included, are trained on.

    Departures from the official code, forced by a fixed-size step: the commit happens in the same step, on the
    pilot's prompts (the official trainer commits from a replay buffer up to 4 steps later, with fresh prompts
    filling the batch); an evicted prompt's share stays in the batch instead of drawing a new prompt; if fewer than
    B / N_up prompts of a batch are active, eviction is ignored for that step.
    """

    pilot_rollouts: int = 4
    lower: float = 0.125
    upper: float = 0.25
    evict_at: float | None = 1.0
    max_rollouts: int = 128

    def __post_init__(self) -> None:
        k = self.pilot_rollouts
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise ValueError(f"pilot_rollouts={k!r}: must be an integer >= 2 (a group of one has no baseline).")
        if not 0.0 <= self.lower <= 1.0 - self.upper <= 1.0:
            raise ValueError(f"Need 0 <= lower <= 1 - upper <= 1, got lower={self.lower}, upper={self.upper}.")


@dataclass
class SimulationResult:
    """Per-step metrics of one run (arrays of shape ``(steps,)``) and a summary.

    Attributes:
        epoch: epoch index (0-based) of each step.
        effective_gradient_ratio, zero_grad_all_correct, zero_grad_all_wrong, effective_prompt_ratio: see
            :func:`group_metrics`, over the step's TRAINED completions (all of them for a plan-ahead allocator; the
            selected n per prompt for Seq; kept plus filled groups for dynamic sampling).
        effective_gradient_ratio_per_generated: completions trained in mixed groups / completions generated in the
            step; equals ``effective_gradient_ratio`` for a plan-ahead allocator, which trains all it generates.
        budget_used: completions trained in the step (always B).
        generated: completions generated in the step (B for a plan-ahead allocator, B to 4B for Seq, B plus the
            extra rounds for dynamic sampling).
        rounds: generation rounds in the step (1 for a plan-ahead allocator).
        filled: dynamic sampling only: completions of dropped (zero-gradient) groups used to fill the batch.
        unfinished: Seq only: prompts whose exit rule did not hold when the rounds stopped.
        max_count: the largest N_i generated for one prompt in the step; skipped_prompts: prompts of the batch given
            N_i = 0.
        converted_from_zero: cumulative number of prompts that had been scored at least once with no success ever
            (the store's p = 0 status) and have now produced a success.
        value_share: the step's :func:`value_share`: the objective of the generated counts at the true p over the
            best allocation of the same completions at the true p.
        mixed_prompts: trained groups with 0 < k_i < N_i in the step.
        mean_p: mean true p_i over the whole population after the step's update.
        allocate_seconds: wall time of the allocator's calls (``allocate``; ``round_counts`` and ``select`` for Seq),
            not deterministic and excluded from comparisons.
        mean_count_by_status: mean N_i generated per observed status of the prompt when it was allocated (keys of
            :data:`STATUSES`: unseen, p = 0, (0, 0.2], (0.2, 0.8), [0.8, 1), p = 1 by the store's last-epoch rate),
            over epochs >= 2; NaN for a status that never occurred.
        p_initial, p_final: ``(num_prompts,)`` true p_i before the first and after the last step.
        summary: scalar summary, see :func:`summarize`.
    """

    epoch: np.ndarray
    effective_gradient_ratio: np.ndarray
    zero_grad_all_correct: np.ndarray
    zero_grad_all_wrong: np.ndarray
    effective_prompt_ratio: np.ndarray
    budget_used: np.ndarray
    max_count: np.ndarray
    skipped_prompts: np.ndarray
    converted_from_zero: np.ndarray
    mean_p: np.ndarray
    allocate_seconds: np.ndarray
    p_initial: np.ndarray
    p_final: np.ndarray
    effective_gradient_ratio_per_generated: np.ndarray
    generated: np.ndarray
    rounds: np.ndarray
    filled: np.ndarray
    unfinished: np.ndarray
    value_share: np.ndarray
    mixed_prompts: np.ndarray
    mean_count_by_status: dict[str, float] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)


@dataclass
class _Step:
    """What one step generated and trained, whatever the strategy (plan-ahead, Seq rounds, dynamic sampling)."""

    # Prompts trained on, aligned: stable ids, completions trained, successes among them, advantage multipliers.
    trained_ids: np.ndarray
    trained: np.ndarray
    trained_successes: np.ndarray
    weights: np.ndarray | None
    # Prompts generated for (each once per step), aligned: ids, their store rate at allocation, completions, successes.
    generated_ids: np.ndarray
    generated_rates: np.ndarray
    generated: np.ndarray
    generated_successes: np.ndarray
    # One entry per generated completion: its prompt id and reward (the store sees every scored completion).
    completion_ids: np.ndarray
    rewards: np.ndarray
    seconds: float
    rounds: int = 1
    filled: int = 0
    unfinished: int = 0


def simulate(
    allocator: str | Allocator | DynamicSampling | Pilot | PilotCommit,
    *,
    num_prompts: int = 2000,
    batch_prompts: int = 256,
    num_generations: int = 8,
    epochs: int = 5,
    seed: int = 0,
    learning_rule: RuleKind | LearningRule = "per_completion",
    mix: str | DifficultyMix = "dapo",
    hard_threshold: float = 0.01,
    statistics_factory: Callable[[], StatisticsStore] | None = None,
) -> SimulationResult:
    """Run one allocator on a simulated prompt population at training budget B = batch_prompts * num_generations.

    Three kinds of strategy, all training exactly B completions per step:

    - a plan-ahead :class:`Allocator` (uniform, knapsack, Est, CERO): ``allocate`` splits B, every completion trains;
    - a round-based :class:`~trl_adaptive.allocation.sequential.SequentialAllocator` (Reinforce-Ada Seq-Pos /
      Seq-Balance): rounds as in :func:`sample_in_rounds`, then n = ``num_generations`` selected per prompt; the
      baseline is computed from all of a prompt's completions, which only the ``"advantage"`` rule models (see
      :func:`seq_advantage_weights`);
    - :class:`DynamicSampling` around a plan-ahead allocator (DAPO);
    - two rounds per step: :class:`Pilot` (k per prompt, then ``allocate_remaining`` on the updated posterior) or
      :class:`PilotCommit` (Pilot-Commit's thresholds).

    Args:
        allocator: a registered name (``get_allocator(name)``), an instance, a :class:`DynamicSampling`, a
            :class:`Pilot` or a :class:`PilotCommit`; an
            instance is deep-copied, so a stateful allocator (CERO's duals) starts from the given state and the
            caller's object is not mutated.
        num_prompts: size of the dataset.
        batch_prompts: M, unique prompts per step.
        num_generations: n; the training budget per step is B = M * n, as for GRPO with ``num_generations = n``.
        epochs: passes over the dataset; each has ``num_prompts // batch_prompts`` steps (the incomplete last batch
            is dropped, as TRL's ``RepeatSampler`` does). Prompts drawn by dynamic sampling come on top.
        seed: seeds independent generators (population, sampling order, rewards, dynamic sampling's draws, Seq's
            selection). Two allocators run with the same seed see the same population and the same batches, so their
            differences are paired.
        learning_rule: a :class:`LearningRule` or the ``kind`` of one with default ``lr`` / ``transfer``.
        mix: a :class:`DifficultyMix` or a key of :data:`MIXES`.
        hard_threshold: prompts with initial true p below it count as "initially hard" in the summary.
        statistics_factory: builds the statistics store the allocator reads; default
            ``trl_adaptive.stats.PromptStatistics()``, the trainer's store. It is updated once per step with every
            completion generated (as the trainer's round loop does).

    Returns:
        a :class:`SimulationResult`.
    """
    if batch_prompts <= 0 or num_prompts < batch_prompts:
        raise ValueError(f"Need 0 < batch_prompts <= num_prompts, got {batch_prompts} and {num_prompts}.")
    if num_generations < 2 or epochs < 1:
        raise ValueError(f"Need num_generations >= 2 and epochs >= 1, got {num_generations} and {epochs}.")
    dynamic = allocator if isinstance(allocator, DynamicSampling) else None
    pilot = allocator if isinstance(allocator, Pilot) else None
    pilot_commit = allocator if isinstance(allocator, PilotCommit) else None
    if pilot_commit is not None:
        spec: str | Allocator = "uniform"  # unused: the rule is the spec's own
    elif dynamic is not None or pilot is not None:
        spec = (dynamic or pilot).allocator  # type: ignore[union-attr]
    else:
        spec = allocator  # type: ignore[assignment]
    alloc = get_allocator(spec) if isinstance(spec, str) else copy.deepcopy(spec)
    sequential = isinstance(alloc, SequentialAllocator)
    if pilot is not None and not hasattr(alloc, "allocate_remaining"):
        raise TypeError(
            f"Pilot({alloc.name!r}): the allocator has no allocate_remaining(stats, budget_left, already)."
        )
    if pilot is not None and pilot.pilot_rollouts * batch_prompts >= batch_prompts * num_generations:
        raise ValueError(
            f"Pilot: pilot_rollouts={pilot.pilot_rollouts} x {batch_prompts} prompts leaves nothing of the step's "
            f"budget {batch_prompts * num_generations}; lower pilot_rollouts below num_generations={num_generations}."
        )
    if pilot_commit is not None and pilot_commit.pilot_rollouts >= num_generations:
        raise ValueError(
            f"PilotCommit: pilot_rollouts={pilot_commit.pilot_rollouts} leaves nothing to commit; it must be below "
            f"num_generations={num_generations}."
        )
    if dynamic is not None and sequential:
        raise ValueError(
            f"DynamicSampling({alloc.name!r}): Reinforce-Ada Seq already samples until each prompt shows signal; "
            "wrap a plan-ahead allocator (uniform, knapsack, ...) instead."
        )
    rule = LearningRule(kind=learning_rule) if isinstance(learning_rule, str) else learning_rule
    difficulty = MIXES[mix] if isinstance(mix, str) else mix
    store = (statistics_factory or _default_store)()

    # The first three generators are those of a plan-ahead run, so adding strategies changed none of its numbers.
    population_rng, order_rng, reward_rng, draw_rng, select_rng = np.random.default_rng(seed).spawn(5)
    p_initial = difficulty.sample(num_prompts, population_rng)
    logits = _logit(p_initial)
    budget = batch_prompts * num_generations
    steps_per_epoch = num_prompts // batch_prompts
    total_steps = steps_per_epoch * epochs

    # Observed history for the conversion metric (what the trainer could log too).
    attempts_seen = np.zeros(num_prompts, dtype=np.int64)
    successes_seen = np.zeros(num_prompts, dtype=np.int64)
    converted = 0

    columns: dict[str, np.ndarray] = {name: np.zeros(total_steps) for name in STEP_METRICS}
    per_generated = np.zeros(total_steps)
    epoch_of = np.zeros(total_steps, dtype=np.int64)
    budget_used = np.zeros(total_steps, dtype=np.int64)
    generated = np.zeros(total_steps, dtype=np.int64)
    rounds = np.zeros(total_steps, dtype=np.int64)
    filled = np.zeros(total_steps, dtype=np.int64)
    unfinished = np.zeros(total_steps, dtype=np.int64)
    max_count = np.zeros(total_steps, dtype=np.int64)
    skipped = np.zeros(total_steps, dtype=np.int64)
    converted_col = np.zeros(total_steps, dtype=np.int64)
    mean_p = np.zeros(total_steps)
    alloc_time = np.zeros(total_steps)
    shares = np.zeros(total_steps)
    mixed_col = np.zeros(total_steps, dtype=np.int64)
    evicted = np.zeros(num_prompts, dtype=bool)  # Pilot-Commit's evicted prompts
    status_counts = np.zeros(len(STATUSES))  # sum of N_i per status, epochs >= 2
    status_prompts = np.zeros(len(STATUSES))  # prompts allocated per status, epochs >= 2

    step = 0
    for epoch in range(epochs):
        order = order_rng.permutation(num_prompts)
        for s in range(steps_per_epoch):
            ids = order[s * batch_prompts : (s + 1) * batch_prompts]
            # ---- allocation from the store's statistics only (same information as the trainer), and rollouts ----
            if pilot is not None:
                out = _pilot_step(alloc, ids, store, logits, budget, pilot.pilot_rollouts, reward_rng)
            elif pilot_commit is not None:
                out = _pilot_commit_step(pilot_commit, ids, store, logits, budget, evicted, reward_rng)
            elif sequential:
                out = _sequential_step(alloc, ids, store, logits, num_generations, reward_rng, select_rng)
            elif dynamic is not None:
                out = _dynamic_step(alloc, ids, store, logits, budget, num_generations, dynamic, reward_rng, draw_rng)
            else:
                out = _plan_step(alloc, ids, store, logits, budget, reward_rng)
            alloc_time[step] = out.seconds

            # ---- metrics (over the trained completions) ----
            trained_total = int(out.trained.sum())
            for name, value in group_metrics(out.trained, out.trained_successes).items():
                columns[name][step] = value
            mixed = (out.trained_successes > 0) & (out.trained_successes < out.trained)
            per_generated[step] = float(out.trained[mixed].sum() / out.generated.sum())
            mixed_col[step] = int(mixed.sum())
            gen_ids = out.generated_ids
            shares[step] = value_share(out.generated, _expit(logits[gen_ids]))
            was_zero = (attempts_seen[gen_ids] > 0) & (successes_seen[gen_ids] == 0)
            converted += int(np.sum(was_zero & (out.generated_successes > 0)))
            attempts_seen[gen_ids] += out.generated
            successes_seen[gen_ids] += out.generated_successes
            epoch_of[step] = epoch
            budget_used[step] = trained_total
            generated[step] = int(out.generated.sum())
            rounds[step] = out.rounds
            filled[step] = out.filled
            unfinished[step] = out.unfinished
            max_count[step] = int(out.generated.max())
            skipped[step] = int(np.sum(out.generated == 0))
            converted_col[step] = converted
            if epoch >= 1:
                status = _status(out.generated_rates)
                status_counts += np.bincount(status, weights=out.generated, minlength=len(STATUSES))
                status_prompts += np.bincount(status, minlength=len(STATUSES))

            # ---- store update (every scored completion), then learning (trained completions only) ----
            store.update(out.completion_ids, out.rewards)
            rule.apply(logits, out.trained_ids, out.trained, out.trained_successes, num_generations, out.weights)
            mean_p[step] = float(_expit(logits).mean())
            step += 1
        store.end_epoch()

    p_final = _expit(logits)
    result = SimulationResult(
        epoch=epoch_of,
        budget_used=budget_used,
        max_count=max_count,
        skipped_prompts=skipped,
        converted_from_zero=converted_col,
        mean_p=mean_p,
        allocate_seconds=alloc_time,
        p_initial=p_initial,
        p_final=p_final,
        effective_gradient_ratio_per_generated=per_generated,
        generated=generated,
        rounds=rounds,
        filled=filled,
        unfinished=unfinished,
        value_share=shares,
        mixed_prompts=mixed_col,
        mean_count_by_status={
            name: float(status_counts[i] / status_prompts[i]) if status_prompts[i] else float("nan")
            for i, name in enumerate(STATUSES)
        },
        **columns,
    )
    result.summary = summarize(result, hard_threshold=hard_threshold)
    return result


# ==== the three kinds of step ========================================================================================
def _plan_step(
    alloc: Allocator,
    ids: np.ndarray,
    store: StatisticsStore,
    logits: np.ndarray,
    budget: int,
    reward_rng: np.random.Generator,
) -> _Step:
    """A plan-ahead allocator: N = allocate(...), r_ij ~ Bernoulli(p_i), every completion trains."""
    stats = store.batch(ids)
    rates = store.success_rates(ids)
    start = time.perf_counter()
    counts = alloc.allocate(rates, budget, stats=stats)
    seconds = time.perf_counter() - start
    weights = alloc.completion_weights(counts, stats)
    segment = np.repeat(np.arange(len(ids)), counts)
    rewards = (reward_rng.random(budget) < _expit(logits[ids])[segment]).astype(np.float64)
    successes = np.bincount(segment, weights=rewards, minlength=len(ids)).astype(np.int64)
    return _Step(
        trained_ids=ids,
        trained=counts,
        trained_successes=successes,
        weights=weights,
        generated_ids=ids,
        generated_rates=rates,
        generated=counts,
        generated_successes=successes,
        completion_ids=np.repeat(ids, counts),
        rewards=rewards,
        seconds=seconds,
    )


def _pilot_step(
    alloc: Allocator,
    ids: np.ndarray,
    store: StatisticsStore,
    logits: np.ndarray,
    budget: int,
    pilot_rollouts: int,
    reward_rng: np.random.Generator,
) -> _Step:
    """A pilot of k per prompt, then ``allocate_remaining`` on the posterior that includes it (:class:`Pilot`)."""
    num = len(ids)
    p = _expit(logits[ids])
    stats = store.batch(ids)
    first = np.full(num, pilot_rollouts, dtype=np.int64)
    segment1 = np.repeat(np.arange(num), first)
    rewards1 = (reward_rng.random(len(segment1)) < p[segment1]).astype(np.float64)
    successes1 = np.bincount(segment1, weights=rewards1, minlength=num)
    start = time.perf_counter()
    extra = alloc.allocate_remaining(absorb(stats, successes1, first), budget - int(first.sum()), first)  # type: ignore[attr-defined]
    seconds = time.perf_counter() - start
    segment2 = np.repeat(np.arange(num), extra)
    rewards2 = (reward_rng.random(len(segment2)) < p[segment2]).astype(np.float64)
    counts = first + extra
    successes = (successes1 + np.bincount(segment2, weights=rewards2, minlength=num)).astype(np.int64)
    return _Step(
        trained_ids=ids,
        trained=counts,
        trained_successes=successes,
        weights=None,
        generated_ids=ids,
        generated_rates=store.success_rates(ids),
        generated=counts,
        generated_successes=successes,
        completion_ids=np.concatenate([ids[segment1], ids[segment2]]),
        rewards=np.concatenate([rewards1, rewards2]),
        seconds=seconds,
        rounds=2,
    )


def _pilot_commit_step(
    spec: PilotCommit,
    ids: np.ndarray,
    store: StatisticsStore,
    logits: np.ndarray,
    budget: int,
    evicted: np.ndarray,
    reward_rng: np.random.Generator,
) -> _Step:
    """Pilot-Commit's rule at a fixed budget (:class:`PilotCommit`); updates ``evicted`` in place."""
    num, k, n_up = len(ids), spec.pilot_rollouts, spec.max_rollouts
    p = _expit(logits[ids])
    start = time.perf_counter()
    active = ~evicted[ids]
    if active.sum() * n_up < budget or active.sum() * k >= budget:
        active[:] = True  # too few prompts left to hold the budget: ignore eviction this step
    first = np.where(active, k, 0).astype(np.int64)
    seconds = time.perf_counter() - start
    segment1 = np.repeat(np.arange(num), first)
    rewards1 = (reward_rng.random(len(segment1)) < p[segment1]).astype(np.float64)
    successes1 = np.bincount(segment1, weights=rewards1, minlength=num)
    start = time.perf_counter()
    rate = np.divide(successes1, first, out=np.zeros(num), where=first > 0)
    keep = np.flatnonzero(active & (rate >= spec.lower) & (rate <= 1.0 - spec.upper))
    counts = first.copy()
    left = budget - int(first.sum())
    if len(keep):
        counts[keep], left = fill_evenly(counts[keep], left, n_up)
    if left:
        on = np.flatnonzero(active)
        counts[on], left = fill_evenly(counts[on], left, n_up)
    if spec.evict_at is not None:
        evicted[ids[active & (rate >= spec.evict_at)]] = True
    seconds += time.perf_counter() - start
    extra = counts - first
    segment2 = np.repeat(np.arange(num), extra)
    rewards2 = (reward_rng.random(len(segment2)) < p[segment2]).astype(np.float64)
    successes = (successes1 + np.bincount(segment2, weights=rewards2, minlength=num)).astype(np.int64)
    return _Step(
        trained_ids=ids,
        trained=counts,
        trained_successes=successes,
        weights=None,
        generated_ids=ids,
        generated_rates=store.success_rates(ids),
        generated=counts,
        generated_successes=successes,
        completion_ids=np.concatenate([ids[segment1], ids[segment2]]),
        rewards=np.concatenate([rewards1, rewards2]),
        seconds=seconds,
        rounds=2,
    )


def _sequential_step(
    alloc: SequentialAllocator,
    ids: np.ndarray,
    store: StatisticsStore,
    logits: np.ndarray,
    num_generations: int,
    reward_rng: np.random.Generator,
    select_rng: np.random.Generator,
) -> _Step:
    """Reinforce-Ada Seq: rounds until every prompt is done (or capped), then n balanced completions per prompt."""
    p = _expit(logits[ids])
    num = len(ids)

    def draw(counts: np.ndarray) -> np.ndarray:
        return reward_rng.random(int(counts.sum())) < p[np.repeat(np.arange(num), counts)]

    out = sample_in_rounds(alloc, draw, num, num_generations, select_rng)
    picked = out.group_ids[out.selected]
    trained = np.bincount(picked, minlength=num).astype(np.int64)
    trained_successes = np.bincount(picked, weights=out.success[out.selected], minlength=num).astype(np.int64)
    attempts = np.bincount(out.group_ids, minlength=num).astype(np.int64)
    successes = np.bincount(out.group_ids, weights=out.success, minlength=num).astype(np.int64)
    return _Step(
        trained_ids=ids,
        trained=trained,
        trained_successes=trained_successes,
        weights=seq_advantage_weights(trained, trained_successes, attempts, successes, p),
        generated_ids=ids,
        generated_rates=store.success_rates(ids),
        generated=attempts,
        generated_successes=successes,
        completion_ids=ids[out.group_ids],
        rewards=out.success.astype(np.float64),
        seconds=out.seconds,
        rounds=len(out.round_counts),
        unfinished=int(np.sum(~out.done)),
    )


def _dynamic_step(
    alloc: Allocator,
    ids: np.ndarray,
    store: StatisticsStore,
    logits: np.ndarray,
    budget: int,
    num_generations: int,
    dynamic: DynamicSampling,
    reward_rng: np.random.Generator,
    draw_rng: np.random.Generator,
) -> _Step:
    """DAPO dynamic sampling around ``alloc`` (see :class:`DynamicSampling`)."""
    num_prompts = len(logits)
    low = max(alloc.min_rollouts, 1)
    batch_ids, batch_rates, batch_counts, batch_successes, batch_weights = [], [], [], [], []
    any_weights = False
    rewards_all, completion_all = [], []
    seconds, missing, extra = 0.0, budget, 0
    prompts, split = ids, budget
    while True:
        stats = store.batch(prompts)
        rates = store.success_rates(prompts)
        start = time.perf_counter()
        counts = alloc.allocate(rates, split, stats=stats)
        seconds += time.perf_counter() - start
        weights = alloc.completion_weights(counts, stats)
        any_weights |= weights is not None
        segment = np.repeat(np.arange(len(prompts)), counts)
        rewards = (reward_rng.random(int(counts.sum())) < _expit(logits[prompts])[segment]).astype(np.float64)
        successes = np.bincount(segment, weights=rewards, minlength=len(prompts)).astype(np.int64)
        mixed = dynamic_sampling_keep(is_success(rewards, 1.0), segment, len(prompts))  # the trainer's filter
        batch_ids.append(prompts)
        batch_rates.append(rates)
        batch_counts.append(counts)
        batch_successes.append(successes)
        batch_weights.append(np.ones(len(prompts)) if weights is None else np.asarray(weights, dtype=np.float64))
        rewards_all.append(rewards)
        completion_all.append(np.repeat(prompts, counts))
        missing -= int(counts[mixed].sum())
        if missing == 0 or extra >= dynamic.max_rounds:
            break
        # As the trainer: about one prompt per n missing completions, enough to hold them within N_up.
        number = min(max(1, missing // num_generations), missing // low)
        number = max(number, -(-missing // alloc.max_rollouts))
        candidates = np.setdiff1d(np.arange(num_prompts), np.concatenate(batch_ids), assume_unique=True)
        if number == 0 or number * low > missing or len(candidates) < number:
            break
        extra += 1
        prompts, split = np.sort(draw_rng.choice(candidates, size=number, replace=False)), missing

    all_ids = np.concatenate(batch_ids)
    counts = np.concatenate(batch_counts)
    successes = np.concatenate(batch_successes)
    mixed = (successes > 0) & (successes < counts)
    trained = np.where(mixed, counts, 0)
    trained_successes = np.where(mixed, successes, 0)
    fill = budget - int(trained.sum())
    left = fill
    for i in np.flatnonzero(~mixed & (counts > 0)):  # dropped groups, in generation order
        if left == 0:
            break
        take = min(int(counts[i]), left)
        trained[i] = take
        trained_successes[i] = take if successes[i] == counts[i] else 0
        left -= take
    keep = trained > 0
    weights = np.concatenate(batch_weights)[keep] if any_weights else None
    return _Step(
        trained_ids=all_ids[keep],
        trained=trained[keep],
        trained_successes=trained_successes[keep],
        weights=weights,
        generated_ids=all_ids,
        generated_rates=np.concatenate(batch_rates),
        generated=counts,
        generated_successes=successes,
        completion_ids=np.concatenate(completion_all),
        rewards=np.concatenate(rewards_all),
        seconds=seconds,
        rounds=1 + extra,
        filled=fill,
    )


# ==== Reinforce-Ada Seq: the rounds of one batch =====================================================================
@dataclass
class RoundsOutcome:
    """Everything the rounds of one batch produced (:func:`sample_in_rounds`).

    Attributes:
        group_ids: ``(K,)`` prompt index of each generated completion, in generation order (round by round, prompt by
            prompt within a round).
        success: ``(K,)`` bool, whether each completion is correct.
        round_counts: the counts of every round that generated something, ``(M,)`` int64 each.
        selected: ``(n M,)`` indices into the generated completions chosen for training (``allocator.select``).
        done: ``(M,)`` bool, the exit rule at the end (False for prompts stopped by N_max or the cap).
        seconds: wall time of the allocator's ``round_counts`` and ``select`` calls.
    """

    group_ids: np.ndarray
    success: np.ndarray
    round_counts: list[np.ndarray]
    selected: np.ndarray
    done: np.ndarray
    seconds: float = 0.0


def sample_in_rounds(
    allocator: SequentialAllocator,
    draw: Callable[[np.ndarray], np.ndarray],
    num_prompts: int,
    group_size: int,
    rng: np.random.Generator,
) -> RoundsOutcome:
    """Run a round-based allocator's loop for one batch of M prompts, with ``draw`` standing in for the model.

    The same loop as the trainer's (``trl_adaptive/trainer/rounds.py``), on NumPy only: ask ``round_counts``, draw
    that many completions, update successes and attempts, until a round is all zeros; then ``select``.

    Args:
        allocator: a :class:`~trl_adaptive.allocation.sequential.SequentialAllocator`.
        draw: ``draw(counts) -> (counts.sum(),) bool``, the success of each new completion, prompt by prompt
            (``np.repeat(np.arange(M), counts)`` order). A scripted function makes the exit rules testable.
        num_prompts: M.
        group_size: n, completions per prompt in the training batch; the training budget is n M.
        rng: the generator of the selection.

    Example:
        >>> from trl_adaptive.allocation import get_allocator
        >>> pos = get_allocator("reinforce_ada_seq_pos", round_size=4, max_rollouts=16)
        >>> p = np.array([0.0, 1.0])  # never solved, always solved
        >>> out = sample_in_rounds(pos, lambda c: np.repeat(p, c) > 0.5, 2, 4, np.random.default_rng(0))
        >>> [c.tolist() for c in out.round_counts], out.done.tolist()
        ([[4, 4], [4, 0], [4, 0], [4, 0]], [False, True])
    """
    if not isinstance(allocator, SequentialAllocator):
        raise TypeError(f"{allocator!r} is not a round-based allocator (SequentialAllocator).")
    budget = num_prompts * group_size
    successes = np.zeros(num_prompts, dtype=np.int64)
    attempts = np.zeros(num_prompts, dtype=np.int64)
    group_ids: list[np.ndarray] = []
    success: list[np.ndarray] = []
    history: list[np.ndarray] = []
    generated, seconds = 0, 0.0
    while True:
        start = time.perf_counter()
        counts = allocator.round_counts(successes, attempts, group_size, generated, budget)
        seconds += time.perf_counter() - start
        if int(counts.sum()) == 0:
            break
        segment = np.repeat(np.arange(num_prompts), counts)
        ok = np.asarray(draw(counts))
        if ok.shape != segment.shape:
            raise ValueError(f"draw returned shape {ok.shape}, expected ({len(segment)},) for counts {counts}.")
        ok = ok.astype(bool)
        successes += np.bincount(segment, weights=ok, minlength=num_prompts).astype(np.int64)
        attempts += counts
        generated += int(counts.sum())
        group_ids.append(segment)
        success.append(ok)
        history.append(counts)
    all_groups = np.concatenate(group_ids) if group_ids else np.zeros(0, dtype=np.int64)
    all_success = np.concatenate(success) if success else np.zeros(0, dtype=bool)
    start = time.perf_counter()
    selected = allocator.select(all_success, all_groups, num_prompts, group_size, rng)
    seconds += time.perf_counter() - start
    done = allocator.is_done(successes, attempts, group_size)
    return RoundsOutcome(all_groups, all_success, history, selected, done, seconds)


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


def summarize(result: SimulationResult, *, hard_threshold: float = 0.01) -> dict[str, float]:
    """Scalar summary of a run: step means of every metric, plus

    - ``effective_gradient_ratio_after_first``: mean over epochs >= 2 (epoch 1 has no statistics, so every allocator
      that follows Knapsack RL's "first epoch uniform" is uniform there), and ``effective_gradient_ratio_epoch<e>``
      per (1-based) epoch;
    - ``final_mean_p``, ``converted_from_zero`` (final cumulative count), ``hard_prompts`` (initial p below
      ``hard_threshold``) and ``hard_final_mean_p`` (their mean true p at the end), ``allocate_ms`` (median, so a
      one-off JIT compile does not count), ``mean_count_<status>`` (see ``SimulationResult.mean_count_by_status``);
    - for strategies that generate more than they train (Seq, dynamic sampling): ``generated_over_trained`` (all
      completions generated / all trained, 1 for a plan-ahead allocator), ``effective_gradient_ratio_per_generated``
      and its ``_after_first`` (step means of trained completions in mixed groups / completions generated),
      ``rounds_per_step``, ``filled_share`` (dynamic sampling's fill / trained) and ``unfinished_prompts`` (Seq,
      per step);
    - ``value_share`` and ``value_share_after_first``: step means of :func:`value_share` (the objective at the true
      p over the best allocation of the same completions at the true p), and ``mixed_per_1000_generated``: mixed
      trained groups per 1,000 completions generated over the run.
    """
    later = result.epoch >= 1
    hard = result.p_initial < hard_threshold
    summary = {name: float(getattr(result, name).mean()) for name in STEP_METRICS}
    summary["effective_gradient_ratio_after_first"] = (
        float(result.effective_gradient_ratio[later].mean()) if later.any() else float("nan")
    )
    for epoch in np.unique(result.epoch):
        summary[f"effective_gradient_ratio_epoch{epoch + 1}"] = float(
            result.effective_gradient_ratio[result.epoch == epoch].mean()
        )
    summary["initial_mean_p"] = float(result.p_initial.mean())
    summary["final_mean_p"] = float(result.p_final.mean())
    summary["converted_from_zero"] = float(result.converted_from_zero[-1])
    summary["hard_prompts"] = float(hard.sum())
    summary["hard_final_mean_p"] = float(result.p_final[hard].mean()) if hard.any() else float("nan")
    summary["skipped_prompts"] = float(result.skipped_prompts.mean())
    summary["max_count"] = float(result.max_count.max())
    summary["allocate_ms"] = 1000.0 * float(np.median(result.allocate_seconds))
    for name, value in result.mean_count_by_status.items():
        summary[f"mean_count_{name}"] = value
    per_generated = result.effective_gradient_ratio_per_generated
    summary["effective_gradient_ratio_per_generated"] = float(per_generated.mean())
    summary["effective_gradient_ratio_per_generated_after_first"] = (
        float(per_generated[later].mean()) if later.any() else float("nan")
    )
    summary["generated_over_trained"] = float(result.generated.sum() / result.budget_used.sum())
    summary["rounds_per_step"] = float(result.rounds.mean())
    summary["filled_share"] = float(result.filled.sum() / result.budget_used.sum())
    summary["unfinished_prompts"] = float(result.unfinished.mean())
    summary["value_share"] = float(result.value_share.mean())
    summary["value_share_after_first"] = float(result.value_share[later].mean()) if later.any() else float("nan")
    summary["mixed_per_1000_generated"] = float(1000.0 * result.mixed_prompts.sum() / result.generated.sum())
    return summary


# ==== comparisons ====================================================================================================
AllocatorSpec = str | Allocator | DynamicSampling | Pilot | PilotCommit

_RATIO_KEYS: tuple[str, ...] = (
    "effective_gradient_ratio",
    "effective_gradient_ratio_after_first",
    "effective_gradient_ratio_per_generated",
    "effective_gradient_ratio_per_generated_after_first",
    "value_share",
    "value_share_after_first",
    "mixed_per_1000_generated",
)


def _run_one(task: tuple[str, AllocatorSpec, int, dict[str, Any]]) -> tuple[str, int, dict[str, float]]:
    label, spec, seed, kwargs = task
    return label, seed, simulate(spec, seed=seed, **kwargs).summary


def compare(
    allocators: Sequence[str] | Mapping[str, AllocatorSpec],
    seeds: Sequence[int],
    *,
    baseline: str = "uniform",
    workers: int = 1,
    executor: Executor | None = None,
    **simulate_kwargs: Any,
) -> list[dict[str, Any]]:
    """Run every allocator on the same seeds (paired populations and batches) and aggregate over seeds.

    Args:
        allocators: names, or a mapping label -> name, instance or :class:`DynamicSampling` (e.g.
            ``{"knapsack (no fallback)": KnapsackAllocator(fallback=False), "knapsack + DS":
            DynamicSampling("knapsack")}``).
        seeds: one run per allocator and seed.
        baseline: label of the reference allocator; ``"uniform"`` is added when missing.
        workers: processes to run the simulations in (1 = in this process); ignored when ``executor`` is given.
        executor: an executor to reuse across calls (saves starting processes and recompiling numba kernels).
        **simulate_kwargs: forwarded to :func:`simulate` (``learning_rule``, ``mix``, sizes...).

    Returns:
        one row per allocator, in input order: ``allocator``, ``seeds``, the seed mean of every summary key, its
        seed standard deviation as ``<key>_std``, and for the effective-gradient ratios ``<key>_vs_baseline``, the
        mean over seeds of the per-seed ratio allocator / baseline (paired by seed), with ``_vs_baseline_std``.
    """
    specs: dict[str, AllocatorSpec] = (
        dict(allocators) if isinstance(allocators, Mapping) else {name: name for name in allocators}
    )
    if baseline not in specs:
        if baseline != "uniform":
            raise ValueError(f"baseline {baseline!r} is not among the allocators {sorted(specs)}.")
        specs = {"uniform": "uniform", **specs}
    tasks = [(label, spec, int(seed), simulate_kwargs) for label, spec in specs.items() for seed in seeds]
    if executor is not None:
        outcomes = list(executor.map(_run_one, tasks))
    elif workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(_run_one, tasks))
    else:
        outcomes = [_run_one(task) for task in tasks]
    by_label: dict[str, dict[int, dict[str, float]]] = {label: {} for label in specs}
    for label, seed, summary in outcomes:
        by_label[label][seed] = summary

    rows: list[dict[str, Any]] = []
    for label, runs in by_label.items():
        ordered = [runs[int(seed)] for seed in seeds]
        row: dict[str, Any] = {"allocator": label, "seeds": len(ordered)}
        for key in ordered[0]:
            values = np.array([run[key] for run in ordered])
            row[key] = float(values.mean())
            row[f"{key}_std"] = float(values.std())
        for key in _RATIO_KEYS:
            ratios = np.array([runs[int(s)][key] / by_label[baseline][int(s)][key] for s in seeds])
            row[f"{key}_vs_baseline"] = float(ratios.mean())
            row[f"{key}_vs_baseline_std"] = float(ratios.std())
        rows.append(row)
    return rows


# ==== helpers ========================================================================================================
def _status(success_rates: np.ndarray) -> np.ndarray:
    """Index into :data:`STATUSES` of each rate (NaN = unseen), with the buckets of ``prompts_per_status``."""
    p = np.asarray(success_rates, dtype=np.float64)
    return np.select(
        [np.isnan(p), p == 0, p <= 0.2, p < 0.8, p < 1],
        [0, 1, 2, 3, 4],
        default=5,
    )


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    return np.log(p) - np.log1p(-p)


def _expit(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


__all__ = [
    "MIXES",
    "RULE_KINDS",
    "STATUSES",
    "DifficultyMix",
    "DynamicSampling",
    "LearningRule",
    "Pilot",
    "PilotCommit",
    "RoundsOutcome",
    "SimulationResult",
    "compare",
    "group_metrics",
    "sample_in_rounds",
    "seq_advantage_weights",
    "simulate",
    "summarize",
    "value_share",
]
