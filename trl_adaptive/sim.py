"""A prompt-population simulator: how much learning signal does an allocator buy at a fixed budget?

No model, no torch, no trl: each prompt i has a true success probability p_i, a completion is a Bernoulli(p_i) reward,
and a *learning rule* moves logit(p_i) only when the prompt's group is mixed (non-zero reward variance), the one case
where GRPO's advantage, and so its gradient, is non-zero. The allocator sees exactly what the trainer sees: the
per-prompt statistics of :class:`trl_adaptive.stats.PromptStatistics`, updated after every step and rolled over with
``end_epoch()`` at every epoch boundary.

One step of a plan-ahead allocator, as in ``AdaptiveGRPOTrainer`` (every strategy is a procedure of
:mod:`trl_adaptive.sampling`, driven here with Bernoulli rewards exactly as the trainer drives it)::

    ids     = next M prompts of the epoch's shuffled order      (TRL's RepeatSampler: without replacement, drop_last)
    N       = allocator.allocate(store.batch(ids), B).counts                              B = M * num_generations
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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from trl_adaptive.allocation.base import Allocator, PromptBatchStats
from trl_adaptive.allocation.solvers import solve_greedy
from trl_adaptive.allocation.value import marginal_gains
from trl_adaptive.allocation.value import value as value_of
from trl_adaptive.sampling import (
    ROUND_PROCEDURES,
    BatchContext,
    DynamicSampling,
    Pilot,
    PilotCommit,
    PlanAhead,
    Procedure,
    Round,
    as_procedure,
    drive,
    is_success,
)

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
    allocator: str | Allocator | Procedure,
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

    Every strategy is a sampling procedure of :mod:`trl_adaptive.sampling`, driven as the trainer drives it (one
    implementation, two drivers), each training exactly B completions per step:

    - a plan-ahead :class:`Allocator` (uniform, knapsack, Est, CERO's fixed mapping): one round, every completion
      trains;
    - Reinforce-Ada Seq-Pos / Seq-Balance (by name): rounds, then n = ``num_generations`` selected per prompt; the
      baseline is computed from all of a prompt's completions, which only the ``"advantage"`` rule models (see
      :func:`seq_advantage_weights`);
    - :class:`~trl_adaptive.sampling.DynamicSampling` around a plan-ahead allocator (DAPO);
    - two rounds per step: :class:`~trl_adaptive.sampling.Pilot` (k per prompt, then ``allocate_remaining`` on the
      updated posterior) or :class:`~trl_adaptive.sampling.PilotCommit` (Pilot-Commit's thresholds);
    - any other :class:`~trl_adaptive.sampling.Procedure` (e.g. ``CeroPacing(get_allocator("cero"))``).

    Args:
        allocator: a registered name, an :class:`Allocator` or a :class:`~trl_adaptive.sampling.Procedure`; it is
            deep-copied (:func:`simulated_procedure`), so a stateful one (CERO's duals, Pilot-Commit's evictions)
            starts from the given state and the caller's object is not mutated.
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
    procedure = simulated_procedure(allocator)
    procedure.check(batch_prompts, batch_prompts * num_generations, num_generations)
    rule = LearningRule(kind=learning_rule) if isinstance(learning_rule, str) else learning_rule
    difficulty = MIXES[mix] if isinstance(mix, str) else mix
    store = (statistics_factory or _default_store)()

    # The first three generators are those of a plan-ahead run, so adding strategies changed none of its numbers.
    population_rng, order_rng, reward_rng, draw_rng, select_rng = np.random.default_rng(seed).spawn(5)
    p_initial = difficulty.sample(num_prompts, population_rng)
    logits = _logit(p_initial)
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
    status_counts = np.zeros(len(STATUSES))  # sum of N_i per status, epochs >= 2
    status_prompts = np.zeros(len(STATUSES))  # prompts allocated per status, epochs >= 2

    step = 0
    for epoch in range(epochs):
        order = order_rng.permutation(num_prompts)
        for s in range(steps_per_epoch):
            ids = order[s * batch_prompts : (s + 1) * batch_prompts]
            # ---- the procedure samples from the store's statistics only (what the trainer sees) ----
            out = _run_step(procedure, ids, store, logits, num_generations, reward_rng, draw_rng, select_rng)
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


# ==== one step: the sampling procedure, driven with Bernoulli rewards ==========================================
def simulated_procedure(spec: str | Allocator | Procedure) -> Procedure:
    """The procedure a spec runs in the simulator, a private copy (a stateful one starts from the given state).

    A round procedure's name (Reinforce-Ada Seq, ``pilot_commit``) builds it; any other name or allocator is planned
    ahead (:class:`~trl_adaptive.sampling.PlanAhead`; CERO here is the fixed mapping, the trainer's default
    ``pacing=True`` is ``CeroPacing(get_allocator("cero"))``); a procedure runs as given.
    """
    if isinstance(spec, str) and spec in ROUND_PROCEDURES:
        return as_procedure(spec)
    if isinstance(spec, (str, Allocator)):
        return PlanAhead(copy.deepcopy(spec))
    if isinstance(spec, Procedure):
        return copy.deepcopy(spec)
    raise TypeError(f"Expected an allocator name, an Allocator or a Procedure, got {type(spec).__name__}.")


def _run_step(
    procedure: Procedure,
    ids: np.ndarray,
    store: StatisticsStore,
    logits: np.ndarray,
    num_generations: int,
    reward_rng: np.random.Generator,
    draw_rng: np.random.Generator,
    select_rng: np.random.Generator,
) -> _Step:
    """One batch of ``procedure`` with r ~ Bernoulli(p_i), as the trainer drives it (``sampling.drive``)."""

    def draw_prompts(exclude: np.ndarray, number: int) -> np.ndarray:
        candidates = np.setdiff1d(np.arange(len(logits)), exclude)
        if len(candidates) < number:
            return candidates[:0]
        return np.sort(draw_rng.choice(candidates, size=number, replace=False))

    def generate(request: Round, jobs: np.ndarray) -> np.ndarray:
        p = _expit(logits[np.repeat(request.prompt_ids, request.counts)])
        return (reward_rng.random(len(p)) < p).astype(np.float64)

    budget = len(ids) * num_generations
    ctx = BatchContext(ids, budget, num_generations, 1.0, store.batch, draw_prompts, select_rng)
    outcome = drive(procedure, ctx, generate)
    procedure.end_step(outcome)
    record = outcome.record
    generated, successes = record.counts(), record.successes().astype(np.int64)
    trained = outcome.trained_counts
    success = is_success(record.rewards[outcome.selected], ctx.success_threshold)
    trained_successes = np.bincount(outcome.trained_group_ids, weights=success, minlength=len(trained)).astype(
        np.int64
    )
    # The trained groups: every prompt trained on, and the batch's own prompts a plan skipped (count 0).
    keep = (trained > 0) | (np.isin(record.prompt_ids, ids) & (generated == 0))
    weights = record.weights
    if outcome.baseline_from_all:  # Seq: the baseline of all its completions (the "advantage" rule's model)
        p = _expit(logits[record.prompt_ids])
        seq = seq_advantage_weights(trained, trained_successes, generated, successes, p)
        weights = seq if weights is None else weights * seq
    return _Step(
        trained_ids=record.prompt_ids[keep],
        trained=trained[keep],
        trained_successes=trained_successes[keep],
        weights=None if weights is None else weights[keep],
        generated_ids=record.prompt_ids,
        generated_rates=record.success_rates,
        generated=generated,
        generated_successes=successes,
        completion_ids=record.prompt_ids[record.group_ids],
        rewards=record.rewards,
        seconds=outcome.seconds,
        rounds=len(record.round_sizes),
        filled=int(record.metrics.get("dynamic_sampling/filled", 0)),
        unfinished=int(record.metrics.get("rounds/prompts_unfinished", 0)),
    )


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
AllocatorSpec = str | Allocator | Procedure

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
    "SimulationResult",
    "simulated_procedure",
    "compare",
    "group_metrics",
    "seq_advantage_weights",
    "simulate",
    "summarize",
    "value_share",
]
