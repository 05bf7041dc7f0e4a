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
    t_ij    ~ the prompt's length distribution given r_ij; cut at max_completion_length -> r_ij = 0     tokens
    store.update(prompt id of every completion, r, t)
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
0 < k_i < N_i per thousand completions generated. Every completion also has a length in tokens
(:class:`LengthModel`), so a run reports the tokens it generated and what it bought per 1,000 of them: effective
completions (trained in mixed groups), mixed groups and the objective at the true p.

Assumptions (all parameters, none tuned to reproduce a paper's number):

- :class:`DifficultyMix`: the initial p_i come from a three-part mixture meant to look like DAPO-Math-17K under a
  mid-size model (many prompts never solved, many always solved, the rest spread). The default weights 0.35 / 0.25 /
  0.40 are an assumption, not a measurement; :data:`MIXES` holds the variants the benchmark reports.
- :class:`LearningRule`: only mixed groups move p_i; by how much is a modelling choice, so four variants are reported
  rather than one (they barely change the effective-gradient ratios, but do change which allocator learns most).
- A prompt's difficulty changes only by the learning rule (no forgetting, no noise in the true p_i).
- :class:`LengthModel`: per-prompt lognormal lengths, failed attempts longer than solved ones (SmolLM2-135M's
  measured 71 vs 54 tokens), an optional cut at ``max_completion_length`` that fails the completion. The default
  cuts nothing, so lengths change no reward; :data:`LENGTHS` holds the small and the several-fold spreads.

The package, one job per module:

- :mod:`~trl_adaptive.sim.population`: the prompts and how they learn (:class:`DifficultyMix`, :class:`LearningRule`);
- :mod:`~trl_adaptive.sim.lengths`: how many tokens each completion generates (:class:`LengthModel`);
- :mod:`~trl_adaptive.sim.step`: one step, a sampling procedure driven with Bernoulli rewards;
- :mod:`~trl_adaptive.sim.run`: one simulation over epochs (:func:`simulate`);
- :mod:`~trl_adaptive.sim.results`: the metrics, :class:`SimulationResult` and :func:`summarize`;
- :mod:`~trl_adaptive.sim.comparison`: every strategy on the same seeds (:func:`compare`).

Example:
    >>> result = simulate("uniform", num_prompts=256, batch_prompts=64, num_generations=8, epochs=2, seed=0)
    >>> result.effective_gradient_ratio.shape
    (8,)
"""

from trl_adaptive.allocation.status import STATUSES
from trl_adaptive.sampling import DynamicSampling, Pilot, PilotCommit

from .comparison import compare
from .lengths import LENGTHS, LengthModel, PromptLengths
from .population import MIXES, RULE_KINDS, DifficultyMix, LearningRule, seq_advantage_weights
from .results import SimulationResult, group_metrics, summarize, value_share
from .run import simulate
from .step import simulated_procedure

__all__ = [
    "LENGTHS",
    "MIXES",
    "RULE_KINDS",
    "STATUSES",
    "DifficultyMix",
    "DynamicSampling",
    "LearningRule",
    "LengthModel",
    "Pilot",
    "PilotCommit",
    "PromptLengths",
    "SimulationResult",
    "simulated_procedure",
    "compare",
    "group_metrics",
    "seq_advantage_weights",
    "simulate",
    "summarize",
    "value_share",
]
