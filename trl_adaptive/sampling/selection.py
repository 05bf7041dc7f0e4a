"""Prompt selection before rollout: MoPPS's Thompson rule and GRESO's skip rule as prompt sources (NumPy only).

Both choose WHICH U prompts enter a generation batch (``docs/sampling.md``; the port is :mod:`.source`); the
allocator then splits the batch's completions over them as before. A batch of U = 4, from the sampler's offer::

    offered          [11, 12, 13, 14]
    mopps (x3)       draws 8 more: [3, 27, 40, 58, 61, 70, 82, 95]; one g ~ Beta(a, b) per candidate;
                     keeps the 4 whose g is nearest 0.5 -> [12, 27, 58, 70]; the rest skipped as easy/hard draws
    greso            11 and 14 were all correct on their last k visits: skipped with probability 1 - max(p^k, 0.01);
                     coins skip 11 -> draws 1 more ([40]), examined, kept -> [12, 13, 14, 40]

Neither keeps a random generator of its own: the Thompson draws and the skip coins come from ``ctx.rng``, the further
candidates from ``ctx.draw``, so a resumed run and every rank choose the same prompts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._validate import check_int, check_number, is_number
from ..allocation.value import expected_value_table
from ..batch import is_success
from .source import PromptSource, SourceBatch, SourceContext

P_BOUNDS = (0.05, 0.95)
"""GRESO's clip of the adaptive skip bases p_easy and p_hard (its code's bounds)."""


# ---- the rules, as pure functions ----------------------------------------------------------------------------------
def thompson_nearest(
    beta_a: np.ndarray, beta_b: np.ndarray, keep: int, target: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """MoPPS's selection: one draw g_i ~ Beta(a_i, b_i) per candidate, keep the ``keep`` smallest (g_i - target)^2.

    Returns the kept candidates' indices in candidate order (ties go to the earlier candidate) and every draw.

    Example:
        >>> kept, g = thompson_nearest(np.array([50.0, 1.0, 1.0]), np.array([1.0, 50.0, 1.0]), 1, 0.5,
        ...                            np.random.default_rng(0))
        >>> kept.tolist()  # Beta(50, 1) and Beta(1, 50) are settled; Beta(1, 1) may land anywhere, nearer 0.5
        [2]
    """
    draws = rng.beta(np.asarray(beta_a, dtype=np.float64), np.asarray(beta_b, dtype=np.float64))
    order = np.argsort((draws - target) ** 2, kind="stable")
    return np.sort(order[:keep]), draws


def expected_mixed_share(beta_a: np.ndarray, beta_b: np.ndarray, group_size: int) -> float:
    """The expected share of groups of ``group_size`` completions with mixed rewards, p_i ~ Beta(a_i, b_i):
    the mean of 1 - E[p^G] - E[(1 - p)^G], with E[p^G] = prod_{j<G} (a + j) / (a + b + j) (the Beta-Binomial).

    The posterior's expectation, not the plug-in 1 - pbar^G - (1 - pbar)^G at the posterior mean pbar, which
    overstates it (p^G is convex): an unseen prompt, Beta(1, 1), is mixed with probability 1 - 2 / (G + 1).

    Example:
        >>> round(expected_mixed_share(np.array([1.0]), np.array([1.0]), 8), 4)  # 1 - 2 / 9
        0.7778
    """
    a = np.asarray(beta_a, dtype=np.float64)[:, None]
    b = np.asarray(beta_b, dtype=np.float64)[:, None]
    if a.size == 0:
        return float("nan")
    j = np.arange(group_size, dtype=np.float64)
    all_success = np.prod((a + j) / (a + b + j), axis=1)
    all_fail = np.prod((b + j) / (a + b + j), axis=1)
    return float(np.mean(1.0 - all_success - all_fail))


def skip_probability(streak: np.ndarray, p: float | np.ndarray, floor: float) -> np.ndarray:
    """GRESO's P(skip) = 1 - max(p^k, floor) after k consecutive zero-variance visits (0 for k = 0).

    Example:
        >>> skip_probability(np.array([0, 1, 2, 10]), 0.5, 0.01).tolist()
        [0.0, 0.5, 0.75, 0.99]
    """
    return 1.0 - np.maximum(np.power(p, np.asarray(streak, dtype=np.float64)), floor)


def adapt_skip_base(p: float, observed_share: float, target_share: float, step: float) -> float:
    """GRESO's update of p after a step: down by ``step`` (skip more) when the observed zero-variance share is at
    or above its target, else up, clipped to :data:`P_BOUNDS`.

    Example:
        >>> adapt_skip_base(0.5, 0.2, 0.25 / 3, 0.01), adapt_skip_base(0.5, 0.0, 0.25 / 3, 0.01)
        (0.49, 0.51)
    """
    moved = p - step if observed_share >= target_share else p + step
    return float(min(max(moved, P_BOUNDS[0]), P_BOUNDS[1]))


def zero_variance_groups(
    prompt_ids: np.ndarray, group_ids: np.ndarray, rewards: np.ndarray, success_threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prompts with at least one scored completion this step and whether each group was all successes (easy)
    or all failures (hard), by the package's success rule; NaN rewards are not attempts (as in the store)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    groups = np.asarray(group_ids, dtype=np.int64)
    scored = ~np.isnan(rewards)
    success = is_success(rewards, success_threshold)
    size = len(prompt_ids)
    attempts = np.bincount(groups[scored], minlength=size)
    successes = np.bincount(groups[scored], weights=success[scored], minlength=size)
    visited = attempts > 0
    ids = np.asarray(prompt_ids, dtype=np.int64)[visited]
    return ids, (successes == attempts)[visited], (successes == 0)[visited]


def _check_pool(name: str, factor: int, num_prompts: int, batch_prompts: int) -> None:
    if factor * batch_prompts > num_prompts:
        most = max(num_prompts // max(batch_prompts, 1), 1)
        raise ValueError(
            f"{name}={factor}: a pool of {factor} x {batch_prompts} prompts per batch exceeds the {num_prompts} "
            f"prompts of the training data. Set prompt_source_kwargs={{'{name}': {most}}} or fewer, or use more data."
        )


def _posterior_pool(source, ctx: SourceContext):
    """The offered ids and (``source.pool_factor`` - 1) x U drawn ones, with their statistics (the posterior)."""
    offered = np.asarray(ctx.offered, dtype=np.int64)
    drawn = np.asarray(ctx.draw(offered, (source.pool_factor - 1) * len(offered)), dtype=np.int64)
    pool = np.concatenate([offered, drawn]) if source.pool_factor > 1 else offered
    stats = ctx.statistics(pool)
    if stats.beta_a is None or stats.beta_b is None:
        raise ValueError(f"{source.name} reads the store's 'posterior' estimator, but its statistics came without it.")
    return pool, stats


# ---- MoPPS --------------------------------------------------------------------------------------------------------
class ThompsonPoolSelection(PromptSource):
    """MoPPS (arXiv 2507.04632, verl ``recipe/mopps``): Thompson selection of the U prompts nearest ``target`` from a
    pool of ``pool_factor`` x U candidates, on the statistics store's Beta posterior.

    One batch: the offered U ids plus (``pool_factor`` - 1) x U further ids from ``ctx.draw``; one draw
    g_i ~ Beta(a_i, b_i) per candidate from ``ctx.rng`` (the store's ``posterior`` estimator; never-seen prompts read
    the store's weak prior, Beta(1, 1) by default, MoPPS's only exploration); the U candidates with the smallest
    (g_i - target)^2 make the batch, in candidate order. ``predicted_mixed`` is :func:`expected_mixed_share` of the
    selected prompts at the group size.

    Departures from MoPPS: forgetting is the store's ``posterior_half_life`` (every prompt's evidence halves every h
    steps) instead of MoPPS's per-visit decay towards the prior (``bandit_decay_ratio``, 1.0, i.e. none, by
    default); the number of steps stays that of the data's sampler (MoPPS multiplies its epochs by ``ts_ratio``).

    Args:
        pool_factor: candidates per batch prompt, >= 1 (MoPPS: ``ts_ratio``, 16 for MATH, 8 otherwise). Default 4:
            the pool must fit in the training data (refused otherwise), and a 4x pool already lets a batch of 256
            choose from 1024 prompts while small data sets (a few thousand prompts) keep most of each epoch's order.
        target: the success probability the selection aims at, in (0, 1) (MoPPS: 0.5, where a group's reward
            variance is largest).
    """

    name: ClassVar[str] = "mopps"
    reads: ClassVar[tuple[str, ...]] = ("posterior",)
    needs_pool: ClassVar[bool] = True

    def __init__(self, pool_factor: int = 4, target: float = 0.5) -> None:
        fix = "Set it in prompt_source_kwargs."
        self.pool_factor = check_int("pool_factor", pool_factor, minimum=1, reason="candidates per prompt", fix=fix)
        if not (is_number(target) and 0.0 < target < 1.0):
            raise ValueError(f"target={target!r}: must be a number in (0, 1) (a success probability). {fix}")
        self.target = float(target)

    def check(self, num_prompts: int, batch_prompts: int) -> None:
        _check_pool("pool_factor", self.pool_factor, num_prompts, batch_prompts)

    def compose(self, ctx: SourceContext) -> SourceBatch:
        size = len(ctx.offered)
        pool, stats = _posterior_pool(self, ctx)
        kept, draws = thompson_nearest(stats.beta_a, stats.beta_b, size, self.target, ctx.rng)
        selected = np.zeros(len(pool), dtype=bool)
        selected[kept] = True
        skipped = {
            "easy_draw": pool[~selected & (draws >= self.target)],
            "hard_draw": pool[~selected & (draws < self.target)],
        }
        predicted = expected_mixed_share(stats.beta_a[kept], stats.beta_b[kept], ctx.group_size)
        return SourceBatch(prompt_ids=pool[kept], examined=pool, skipped=skipped, predicted_mixed=predicted)


# ---- the pool by expected value (bayes_knapsack's objective) ------------------------------------------------------
class ExpectedValuePool(PromptSource):
    """Which prompts by the value function ``bayes_knapsack`` splits a batch by: from a pool of ``pool_factor`` x U
    candidates, the U whose group of G completions has the largest expected value E[Value(G, p)], p ~ Beta(a, b)
    (the store's posterior; Knapsack RL's Eq. 5 objective in expectation, :func:`~..allocation.value.
    expected_value_table`).

    This is the pool knapsack with 0 allowed, solved in two exact steps under TRL's batch shape (U prompts, U x G
    completions): the prompts of highest expected value at the batch's mean count G, then the allocator's split of
    U x G over them (``bayes_knapsack`` maximises the same expected value). Unlike MoPPS's Thompson rule it has no
    randomness: exploration comes only from the posterior (a never-seen prompt, Beta(1, 1), is worth E[Value(G, p)]
    under the uniform prior, more than a prompt known to be solved or hopeless, less than one known to be near
    p = 1/3, where p (1 - p)^2 peaks). Ties go to the earlier candidate (offered ids first).

    Args:
        pool_factor: candidates per batch prompt, >= 1 (default 4, as ``mopps``).
    """

    name: ClassVar[str] = "value_pool"
    reads: ClassVar[tuple[str, ...]] = ("posterior",)
    needs_pool: ClassVar[bool] = True

    def __init__(self, pool_factor: int = 4) -> None:
        self.pool_factor = check_int(
            "pool_factor",
            pool_factor,
            minimum=1,
            reason="candidates per prompt",
            fix="Set it in prompt_source_kwargs.",
        )

    def check(self, num_prompts: int, batch_prompts: int) -> None:
        _check_pool("pool_factor", self.pool_factor, num_prompts, batch_prompts)

    def compose(self, ctx: SourceContext) -> SourceBatch:
        size = len(ctx.offered)
        pool, stats = _posterior_pool(self, ctx)
        values = expected_value_table(stats.beta_a, stats.beta_b, ctx.group_size)[:, ctx.group_size]
        kept = np.sort(np.argsort(-values, kind="stable")[:size])
        selected = np.zeros(len(pool), dtype=bool)
        selected[kept] = True
        predicted = expected_mixed_share(stats.beta_a[kept], stats.beta_b[kept], ctx.group_size)
        return SourceBatch(
            prompt_ids=pool[kept], examined=pool, skipped={"lower_value": pool[~selected]}, predicted_mixed=predicted
        )


# ---- GRESO --------------------------------------------------------------------------------------------------------
class SettledPromptSkipping(PromptSource):
    """GRESO (arXiv 2506.02177, Infini-AI-Lab/GRESO): skip prompts whose recent groups all had zero reward variance.

    Each prompt carries k_easy (its consecutive most recent visits with every completion a success) and k_hard
    (every completion a failure); at most one is > 0. A candidate is skipped with probability
    1 - max(p^k, ``floor``) (p = p_easy or p_hard; k = 0: never), one coin from ``ctx.rng`` each, so every prompt is
    re-checked now and then. The offered ids are examined first; skipped ones are replaced by ids from
    ``ctx.draw`` (excluding everything examined), examined the same way, until U are kept or ``max_pool_factor`` x U
    have been examined; a batch still short is filled with the skipped candidates least likely to be skipped.
    After each step (:meth:`end_step`) p_easy moves by ``p_step`` towards ``target_easy`` as GRESO's code does (down,
    skipping more, when the step's share of all-success groups is at or above the target, else up), p_hard towards
    ``target_hard``, both clipped to [0.05, 0.95].

    Args:
        max_pool_factor: at most this many x U candidates examined per batch, >= 1 (1: skipped offered prompts come
            straight back as the fill).
        floor: the skip probability's floor on p^k, in (0, 1] (GRESO: 0.01).
        target_easy, target_hard: the zero-variance shares p adapts towards (GRESO: 0.25 / 3 and 0.25 * 2 / 3).
        p_initial: p_easy = p_hard at the start (GRESO: 0.5).
        p_step: the per-step move of p (GRESO: 0.01).

    Own state (``own_state``, JSON): ``{"p_easy", "p_hard", "easy_streaks": {id: k}, "hard_streaks": {id: k}}``.
    """

    name: ClassVar[str] = "greso"
    needs_pool: ClassVar[bool] = True

    def __init__(
        self,
        max_pool_factor: int = 4,
        floor: float = 0.01,
        target_easy: float = 0.25 / 3,
        target_hard: float = 0.25 * 2 / 3,
        p_initial: float = 0.5,
        p_step: float = 0.01,
    ) -> None:
        fix = "Set it in prompt_source_kwargs."
        self.max_pool_factor = check_int("max_pool_factor", max_pool_factor, minimum=1, fix=fix)
        self.floor = check_number("floor", floor, above=0.0, maximum=1.0, reason="P(keep) >= floor", fix=fix)
        self.target_easy = check_number("target_easy", target_easy, minimum=0.0, maximum=1.0, fix=fix)
        self.target_hard = check_number("target_hard", target_hard, minimum=0.0, maximum=1.0, fix=fix)
        self.p_initial = check_number("p_initial", p_initial, minimum=P_BOUNDS[0], maximum=P_BOUNDS[1], fix=fix)
        self.p_step = check_number("p_step", p_step, minimum=0.0, maximum=0.5, fix=fix)
        self._p_easy = self._p_hard = self.p_initial
        self._easy: dict[int, int] = {}
        self._hard: dict[int, int] = {}

    p_easy = property(lambda self: self._p_easy, doc="The skip base of prompts settled as all-success.")
    p_hard = property(lambda self: self._p_hard, doc="The skip base of prompts settled as all-failure.")

    def check(self, num_prompts: int, batch_prompts: int) -> None:
        _check_pool("max_pool_factor", self.max_pool_factor, num_prompts, batch_prompts)

    def streaks(self, prompt_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(k_easy, k_hard)`` of each prompt, int64 (0 for prompts never seen settled)."""
        ids = np.asarray(prompt_ids, dtype=np.int64).tolist()
        easy = np.array([self._easy.get(i, 0) for i in ids], dtype=np.int64)
        return easy, np.array([self._hard.get(i, 0) for i in ids], dtype=np.int64)

    def skip_probabilities(self, prompt_ids: np.ndarray) -> np.ndarray:
        """GRESO's P(skip) per prompt, with p_easy or p_hard by which streak it is on (never both)."""
        easy, hard = self.streaks(prompt_ids)
        return skip_probability(easy + hard, np.where(easy > 0, self._p_easy, self._p_hard), self.floor)

    def compose(self, ctx: SourceContext) -> SourceBatch:
        offered = np.asarray(ctx.offered, dtype=np.int64)
        size, cap = len(offered), self.max_pool_factor * len(offered)
        examined, kept = [offered], [ctx.rng.random(size) >= self.skip_probabilities(offered)]
        num_kept, num_examined = int(kept[0].sum()), size
        while num_kept < size and num_examined < cap:
            number = min(size - num_kept, cap - num_examined)
            drawn = np.asarray(ctx.draw(np.concatenate(examined), number), dtype=np.int64)
            if len(drawn) == 0:
                break
            examined.append(drawn)
            kept.append(ctx.rng.random(len(drawn)) >= self.skip_probabilities(drawn))
            num_kept, num_examined = num_kept + int(kept[-1].sum()), num_examined + len(drawn)
        pool, chosen = np.concatenate(examined), np.concatenate(kept)
        if num_kept < size:  # the fill: the skipped candidates least likely to be skipped, offered ones first
            order = np.argsort(self.skip_probabilities(pool), kind="stable")
            chosen[order[~chosen[order]][: size - num_kept]] = True
        easy, hard = self.streaks(pool)
        skipped = {"settled_easy": pool[~chosen & (easy > 0)], "settled_hard": pool[~chosen & (hard > 0)]}
        return SourceBatch(prompt_ids=pool[chosen], examined=pool, skipped=skipped)

    def end_step(
        self, prompt_ids: np.ndarray, group_ids: np.ndarray, rewards: np.ndarray, success_threshold: float
    ) -> None:
        ids, easy, hard = zero_variance_groups(prompt_ids, group_ids, rewards, success_threshold)
        for prompt, all_success, all_fail in zip(ids.tolist(), easy.tolist(), hard.tolist(), strict=True):
            self._easy[prompt] = self._easy.get(prompt, 0) + 1 if all_success else 0
            self._hard[prompt] = self._hard.get(prompt, 0) + 1 if all_fail else 0
            for streak in (self._easy, self._hard):
                if streak[prompt] == 0:
                    del streak[prompt]
        if len(ids):
            self._p_easy = adapt_skip_base(self._p_easy, float(easy.mean()), self.target_easy, self.p_step)
            self._p_hard = adapt_skip_base(self._p_hard, float(hard.mean()), self.target_hard, self.p_step)

    def own_state(self) -> dict[str, Any]:
        return {
            "p_easy": self._p_easy,
            "p_hard": self._p_hard,
            "easy_streaks": {str(i): k for i, k in sorted(self._easy.items())},
            "hard_streaks": {str(i): k for i, k in sorted(self._hard.items())},
        }

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        expected = {"p_easy", "p_hard", "easy_streaks", "hard_streaks"}
        if set(state) != expected:
            raise ValueError(f"greso's saved state has keys {sorted(state)}, expected {sorted(expected)}.")
        self._p_easy, self._p_hard = float(state["p_easy"]), float(state["p_hard"])
        self._easy = {int(i): int(k) for i, k in state["easy_streaks"].items()}
        self._hard = {int(i): int(k) for i, k in state["hard_streaks"].items()}


__all__ = [
    "ExpectedValuePool",
    "P_BOUNDS",
    "SettledPromptSkipping",
    "ThompsonPoolSelection",
    "adapt_skip_base",
    "expected_mixed_share",
    "skip_probability",
    "thompson_nearest",
    "zero_variance_groups",
]
