"""CERO, cross-epoch adaptive rollout optimisation (arXiv 2606.05606), mapped onto fixed-size TRL steps.

The paper (Sec. 2-4) maximises sum_i U_i(sum_k N_ik) subject to sum_ik N_ik <= B and 0 <= N_ik <= N_max, with a
concave, saturating utility of each prompt's *cumulative* allocation,

    U_i(n) = 1 - exp(-c_i n),    c_i = eta q_i,    q_i = E[p_i (1 - p_i)] = a_i b_i / ((a_i + b_i)(a_i + b_i + 1))

under the Beta(a_i, b_i) posterior of prompt i's success probability (Sec. 3). Through the Fenchel conjugate
U*_i(theta) = inf_{s >= 0} (theta s - U_i(s)), whose gradient is s*(theta) = ln(c_i / theta) / c_i for theta in
(0, c_i], the problem splits into per-epoch decisions priced by dual variables (Sec. 4, Algorithm 1):

    N_ik       = argmax_{0 <= n <= N_max} (theta_i^k - mu^k) n          (N_max if theta_i > mu, else 0)
    theta_i   <- clip(theta_i - eta_theta (N_ik - s*(theta_i) / K), eps, c_i)
    mu        <- max(0, mu - eta_mu (B / K - sum_i N_ik))

theta_i is prompt i's marginal utility at its projected cumulative allocation: it falls while the prompt is sampled
faster than s*(theta_i) / K per epoch (diminishing returns) and rises while it is skipped. mu is the budget price:
``mu - eta_mu (B/K - sum N) = mu + eta_mu (sum N - B/K)``, so it RISES when the rule asks for more than the
per-epoch budget and falls when it asks for less (the sign of CERO's dual update, Algorithm 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._validate import check_int, check_number
from ..batch import Allocation, PromptBatchStats
from .base import Allocator

STATE_VERSION = 1


@dataclass
class CeroAllocator(Allocator):
    """CERO's primal-dual allocation, one generation batch (TRL step) at a time; prompts may get 0 completions.

    Paper: Y. Zong, Y. Wang and J. Jiang, "Cross-Epoch Adaptive Rollout Optimization for RL Post-Training", 2026,
    arXiv 2606.05606. Implements Sec. 4, Algorithm 1: the online primal-dual allocation with prompt duals theta_i and a
    budget price mu.

    **Mapping onto TRL steps.** The paper decides per epoch with a flexible spend; a TRL step must spend exactly B.
    Each call of :meth:`allocate` is one round of the paper's algorithm restricted to the M prompts of the batch (in
    TRL each prompt comes once per epoch, so a prompt's duals get one update per epoch, as in the paper):

    1. c_i = eta q_i from ``stats.beta_a`` / ``stats.beta_b``; theta_i is the stored dual, c_i for a prompt never
       allocated before (its marginal utility at n = 0), clipped to [min(eps, c_i), c_i].
    2. Rank the prompts by theta_i - mu (ties to the lower position). The first ceil(B / N_max) get N_max, the rest
       0; the lowest-ranked of those give back the excess m N_max - B, none going below N_low. This is the paper's
       rule at the step's clearing price: whoever the rule would sample first is sampled, and only as many as the
       budget pays for.
    3. Once per step (:meth:`end_step`, the sampling procedure calls it whatever the number of rounds): update each
       batch prompt's theta_i with its realised N_i (0 for skipped prompts), and mu with the demand
       D = N_max |{i : theta_i > mu}| of the rule at the current price against the step budget:
       mu <- max(0, mu + eta_mu (D - B) / B). :meth:`allocate` itself changes no state.

    Args:
        min_rollouts: N_low, the fewest completions a sampled prompt gets (>= 2).
        max_rollouts: N_max, the completions of a selected prompt (default 16: with num_generations = 8 half of each
            batch is sampled, twice as deep). B / N_max prompts per step are sampled.
        eta: eta, the utility scale; c_i = eta q_i. A prompt's utility saturates after about 1 / c_i cumulative
            completions: with eta = 0.25 and q_i around 0.2, about 20, i.e. K = 3 epochs of 8 (default 0.25).
        eta_theta: eta_theta, step of the prompt duals, in utility per completion (default 1e-3: one selection at
            N_max = 16 lowers a fresh prompt's theta from c = 0.042 by 0.016).
        eta_mu: eta_mu, step of the budget price per unit of relative over-demand (D - B) / B (default 0.005).
        num_epochs: K, the number of epochs the run makes over the prompts (TRL's ``num_train_epochs``, default 3).
        eps: epsilon, lower end of theta's domain [eps, c_i] (default 1e-6).

    The trainer and the simulator sample CERO through its pacing by default (strategy ``"cero"``:
    :class:`~trl_adaptive.sampling.CeroPacing`, which uses :meth:`wanted` and :meth:`allocate_paced`: a batch prompt
    whose dual is at or below the price mu is skipped and further prompts are drawn in its place). :meth:`allocate`
    is the fixed-prompt mapping, where mu changes nothing (``allocator_kwargs={"pacing": False}``).

    State (``state_dict``, JSON): ``mu``, ``steps``, and per prompt id (string keys) ``theta`` and ``allocated``
    (cumulative completions given). Only prompts that have been in a batch are stored.

    Warning:
        Departures from the paper, all forced by steps that spend exactly B: (i) mu cannot move spending across
        epochs, and since it is common to all prompts of a step it does not change the ranking; it is kept as the
        paper's price, updated from the rule's demand, for logging and for the record (the paper's realised
        sum_i N_ik is our demand D); (ii) its gradient is divided by B so eta_mu does not depend on the batch size;
        (iii) the marginal prompt may get fewer than N_max. Pass real ``stats`` (from ``PromptStatistics.batch``):
        without them prompt ids default to batch positions and duals of different prompts get mixed.

    Example:
        >>> cero = CeroAllocator(max_rollouts=8)
        >>> first = cero.allocate([0.5, 0.5, 0.5, 0.5], budget=12); first.counts.tolist()  # equal duals: 8 + 4
        [8, 4, 0, 0]
        >>> cero.end_step([first])  # the step's dual update
        >>> cero.allocate([0.5, 0.5, 0.5, 0.5], budget=12).counts.tolist()  # the skipped prompts now rank first
        [0, 0, 8, 4]
    """

    name: ClassVar[str] = "cero"
    reads: ClassVar[tuple[str, ...]] = ("posterior",)  # beta_a, beta_b
    allows_zero: ClassVar[bool] = True

    max_rollouts: int = 16
    eta: float = 0.25
    eta_theta: float = 1e-3
    eta_mu: float = 0.005
    num_epochs: int = 3
    eps: float = 1e-6

    # -- state: the dual variables, keyed by prompt id ---------------------------------------------------------------
    mu: float = field(default=0.0, init=False)
    steps: int = field(default=0, init=False)
    theta: dict[int, float] = field(default_factory=dict, init=False, repr=False)
    allocated: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("eta", "eta_theta", "eta_mu", "eps"):
            check_number(name, getattr(self, name), above=0, finite=True)
        check_int("num_epochs", self.num_epochs, minimum=1, reason="K, TRL's num_train_epochs")

    def check_budget(self, num_prompts: int, budget: int) -> None:
        """As the base check, plus: some number m of sampled prompts must fit, m N_low <= B <= m N_max."""
        super().check_budget(num_prompts, budget)
        if budget > 0:
            m = -(-int(budget) // self.max_rollouts)
            if m * self.min_rollouts > budget:
                raise ValueError(
                    f"budget={budget} cannot be split into counts in [{self.min_rollouts}, {self.max_rollouts}] "
                    f"(or 0): {m} prompts are needed to reach it but {m} x min_rollouts exceeds it. Change the budget "
                    "or widen [min_rollouts, max_rollouts]."
                )

    # -- the algorithm ----------------------------------------------------------------------------------------------
    def scores(self, stats: PromptBatchStats) -> tuple[np.ndarray, np.ndarray]:
        """c_i = eta q_i and the current dual theta_i (c_i if unseen, clipped to [min(eps, c_i), c_i]) per prompt."""
        a = np.asarray(stats.beta_a, dtype=np.float64)
        b = np.asarray(stats.beta_b, dtype=np.float64)
        if np.any(~np.isfinite(a) | ~np.isfinite(b) | (a <= 0) | (b <= 0)):
            raise ValueError("stats.beta_a and stats.beta_b must be finite and > 0 (CERO starts from Beta(1, 1)).")
        c = self.eta * a * b / ((a + b) * (a + b + 1.0))
        get = self.theta.get
        stored = np.fromiter((get(i, math.nan) for i in stats.prompt_ids.tolist()), np.float64, len(c))
        theta = np.clip(np.where(np.isnan(stored), c, stored), np.minimum(self.eps, c), c)
        return c, theta

    def _allocate(self, stats: PromptBatchStats, budget: int) -> Allocation:
        c, theta = self.scores(stats)
        order = np.argsort(-(theta - self.mu), kind="stable")
        demand = self.max_rollouts * int(np.count_nonzero(theta > self.mu))
        counts = self._fill(order, budget)
        return self._allocation(counts, c, theta, demand, moves=np.ones(len(c), dtype=bool))

    def _allocation(
        self, counts: np.ndarray, c: np.ndarray, theta: np.ndarray, demand: int, moves: np.ndarray
    ) -> Allocation:
        """The decision, with what :meth:`end_step` reads back: the duals at decision time and who moves."""
        internals = {"c": c, "theta": theta, "demand": demand, "moves": moves}
        return Allocation(counts, metrics=self.metrics(), internals=internals)

    def _fill(self, order: np.ndarray, budget: int) -> np.ndarray:
        """N_max to the first ceil(B / N_max) prompts of ``order``; the marginal ones give back the excess."""
        counts = np.zeros(len(order), dtype=np.int64)
        if budget > 0:
            m = -(-budget // self.max_rollouts)
            chosen = order[:m]
            counts[chosen] = self.max_rollouts
            excess = m * self.max_rollouts - budget
            for i in chosen[::-1]:  # the marginal prompts give back the excess
                give = min(excess, self.max_rollouts - self.min_rollouts)
                counts[i] -= give
                excess -= give
                if excess == 0:
                    break
        return counts

    def end_step(self, allocations: Sequence[Allocation]) -> None:
        """The step's one dual update, from every allocation it made (see the class docstring, step 3).

        The first allocation is the step's own batch: each of its prompts moves with its count (a skipped prompt's
        dual rises, as in the paper), except prompts pacing drew and skipped; mu moves with its demand against B.
        Later allocations (prompts dynamic sampling drew for the step) move only the prompts they sampled: a prompt
        drawn and given nothing was never in the step.
        """
        if not allocations:
            return
        ids, c, theta, counts = [], [], [], []
        for index, allocation in enumerate(allocations):
            moves = np.asarray(allocation.internals["moves"]) if index == 0 else allocation.counts > 0
            ids.append(np.asarray(allocation.prompt_ids)[moves])
            c.append(np.asarray(allocation.internals["c"])[moves])
            theta.append(np.asarray(allocation.internals["theta"])[moves])
            counts.append(allocation.counts[moves])
        first = allocations[0]
        self._update_duals(
            np.concatenate(ids),
            np.concatenate(c),
            np.concatenate(theta),
            np.concatenate(counts),
            first.budget,
            demand=int(first.internals["demand"]),
        )

    def _update_duals(
        self,
        prompt_ids: np.ndarray,
        c: np.ndarray,
        theta: np.ndarray,
        counts: np.ndarray,
        budget: int,
        demand: int,
    ) -> None:
        """theta_i <- clip(theta_i - eta_theta (N_i - s*(theta_i) / K), eps, c_i); mu <- [mu + eta_mu (D - B)/B]_+."""
        # A prompt listed twice in one step gets one update with its total count.
        ids, first, inverse = np.unique(np.asarray(prompt_ids, dtype=np.int64), return_index=True, return_inverse=True)
        n = np.bincount(inverse, weights=counts.astype(np.float64), minlength=len(ids))
        c_u, theta_u = c[first], theta[first]
        s_star = np.log(c_u / theta_u) / c_u
        new_theta = np.clip(theta_u - self.eta_theta * (n - s_star / self.num_epochs), np.minimum(self.eps, c_u), c_u)
        for pid, t, k in zip(ids.tolist(), new_theta.tolist(), n.astype(np.int64).tolist(), strict=True):
            self.theta[pid] = t
            self.allocated[pid] = self.allocated.get(pid, 0) + k
        if budget > 0:
            self.mu = max(0.0, self.mu + self.eta_mu * (demand - budget) / budget)
        self.steps += 1

    # -- pacing: the paper's rule with prompts drawn on demand ------------------------------------------------------
    def wanted(self, stats: PromptBatchStats) -> np.ndarray:
        """``(M,)`` bool: the paper's rule at the current price, theta_i > mu (no state change)."""
        return self.scores(stats)[1] > self.mu

    def allocate_paced(self, stats: PromptBatchStats, budget: int, num_sampled: int) -> Allocation:
        """Counts for the examined prompts: the step's ``num_sampled`` sampler prompts first, then drawn ones.

        Wanted prompts (theta_i > mu) get N_max in order of theta_i - mu, the sampler's before the drawn, until B is
        spent; if they cannot spend it, the best-ranked unwanted prompts make up the rest (every step spends exactly
        B). The marginal prompts give back any excess, none below N_low. At :meth:`end_step` the duals of the
        sampler's prompts and of the drawn prompts that were sampled move, and mu moves with the demand of the
        SAMPLER's prompts, D = N_max |{i <= num_sampled : theta_i > mu}|, against B: mu rises when the step's own
        prompts ask for more than B, and falls when prompts had to be drawn.

        Example:
            >>> from trl_adaptive.allocation import PromptBatchStats
            >>> cero = CeroAllocator(max_rollouts=8, min_rollouts=2)
            >>> cero.mu = 0.06  # above every fresh prompt's c = eta q = 0.25 * 5 * 5 / (10 * 11): nobody is wanted
            >>> stats = PromptBatchStats.from_success_rates([0.5] * 4)
            >>> cero.allocate_paced(stats, 16, num_sampled=2).counts.tolist()
            [8, 8, 0, 0]
        """
        budget = int(budget)
        self.check_budget(len(stats), budget)
        c, theta = self.scores(stats)
        wanted = theta > self.mu
        position = np.arange(len(c))
        drawn = position >= num_sampled
        # Wanted before unwanted; within each, the sampler's before the drawn; then by theta - mu; then position.
        order = np.lexsort((position, -(theta - self.mu), drawn, ~wanted))
        demand = self.max_rollouts * int(np.count_nonzero(wanted[:num_sampled]))
        counts = self._fill(order, budget)
        moves = ~drawn | (counts > 0)  # the sampler's prompts, and the drawn ones that are sampled
        return self.checked(self._allocation(counts, c, theta, demand, moves), stats, budget)

    # -- state ------------------------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """The budget price and how many prompts hold a dual at decision time, logged as ``allocation/cero_*``."""
        return {"cero_mu": self.mu, "cero_prompts_tracked": float(len(self.theta))}

    def state_dict(self) -> dict[str, Any]:
        """``{"version", "mu", "steps", "theta": {id: float}, "allocated": {id: int}}`` with string ids (JSON)."""
        return {
            "version": STATE_VERSION,
            "mu": self.mu,
            "steps": self.steps,
            "theta": {str(k): v for k, v in self.theta.items()},
            "allocated": {str(k): v for k, v in self.allocated.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` exactly (also after a JSON round trip)."""
        if not state:  # an empty dict resets to a fresh allocator's state
            self.mu, self.steps, self.theta, self.allocated = 0.0, 0, {}, {}
            return
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"CeroAllocator state version {state.get('version')!r}; this code reads {STATE_VERSION}.")
        missing = {"mu", "steps", "theta", "allocated"} - set(state)
        if missing:
            raise ValueError(f"CeroAllocator state lacks keys {sorted(missing)}.")
        self.mu = float(state["mu"])
        self.steps = int(state["steps"])
        self.theta = {int(k): float(v) for k, v in state["theta"].items()}
        self.allocated = {int(k): int(v) for k, v in state["allocated"].items()}


__all__ = ["CeroAllocator"]
