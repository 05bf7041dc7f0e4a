"""AdaptiveGRPOConfig: GRPOConfig plus the fields that choose and bound the per-prompt allocation.

The statistics store's settings are checked under their config names at the end of the module
(:func:`check_statistics_settings`): each strategy reads some of the store's estimators (``Strategy.reads`` in
``trl_adaptive.strategies``), so a setting of an estimator the allocator does not read changes nothing in the run and
is warned about when set away from its default.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available
from trl import GRPOConfig

from .._validate import check_bool, check_int, check_number
from ..allocation.base import check_rollout_bounds
from ..allocation.token_budget import UNIFORM_TOKENS
from ..allocation.token_budgeted import check_token_budget
from ..stats import BetaPosterior, DecayedRate, PromptStatistics
from ..strategies import build_procedure, build_prompt_source, registered_strategies, strategy

#: generation_token_budget's default: "uniform" for an allocator that honours a token budget, none for the others.
AUTO_TOKEN_BUDGET = "auto"

#: posterior_half_life's values that the trainer resolves against its data: one epoch of the training data, in
#: generation batches ("epoch"); that for bayes_knapsack and never forgetting for the others ("auto", the default).
EPOCH_HALF_LIFE, AUTO_HALF_LIFE = "epoch", "auto"

#: PromptStatistics argument -> the AdaptiveGRPOConfig field that sets it.
STORE_SETTING_FIELDS: dict[str, str] = {
    "success_threshold": "success_threshold",
    "decay": "est_decay",
    "prior_alpha": "est_prior_alpha",
    "prior_beta": "est_prior_beta",
    "posterior_half_life": "posterior_half_life",
    "posterior_prior_a": "posterior_prior_a",
    "posterior_prior_b": "posterior_prior_b",
    "length_decay": "length_decay",
}


@dataclass
class AdaptiveGRPOConfig(GRPOConfig):
    r"""
    Configuration for [`AdaptiveGRPOTrainer`]: every [`~trl.GRPOConfig`] field, plus the allocation of completions.

    `num_generations` keeps its meaning as the *average* number of completions per prompt: a generation batch holds
    `generation_batch_size / num_generations` prompts and exactly `generation_batch_size` completions (the budget B),
    split between prompts by the allocator.

    > Parameters that control the allocation

    allocator (`str`, *optional*, defaults to `"bayes_knapsack"`):
        Registered name of the allocation strategy: `"bayes_knapsack"` (the default: Knapsack RL's objective in
        expectation under each prompt's Beta posterior; the best adaptive method at equal generated tokens in
        docs/benchmarks.md#accuracy-per-token), `"knapsack"` (Knapsack RL, arXiv 2509.25849), `"uniform"` (GRPO,
        bit-identical to `GRPOTrainer`), `"reinforce_ada_est"`, `"reinforce_ada_seq_pos"`,
        `"reinforce_ada_seq_balance"` (Reinforce-Ada, arXiv 2510.04996; the two Seq variants are round procedures, not
        allocators), `"cero"` (arXiv 2606.05606), `"pilot_commit"` (Pilot-Commit's thresholds and eviction, a round
        procedure). An `Allocator` or sampling `Procedure` object passed to the trainer overrides this name
        (docs/sampling.md).
    allocator_kwargs (`dict` or `str`, *optional*):
        Extra constructor arguments of the allocator (a dict, or a JSON string on the command line), e.g.
        `{"fallback": false}` for knapsack.
    min_rollouts (`int`, *optional*, defaults to `2`):
        Fewest completions a sampled prompt receives (N_low). At least 2: a group of one has no baseline.
    max_rollouts (`int` or `None`, *optional*, defaults to `None`):
        Most completions one prompt may receive in one generation batch (N_up). `None` keeps the allocator's own
        default: 128 for knapsack and uniform (Knapsack RL), 32 for reinforce_ada_est, 16 for cero.
    success_threshold (`float`, *optional*, defaults to `1.0`):
        A completion counts as a success for the per-prompt statistics when its total (weighted) reward is >= this
        value. Rewards may be any float; NaN rewards are not counted.
    prompt_id_column (`str`, *optional*, defaults to `"prompt_id"`):
        Dataset column holding a stable id per prompt: integers, or strings (hashes, UUIDs), which the statistics store
        keys by SHA-256 (`trl_adaptive.stats.stable_prompt_ids`). Added (row index) when missing.
    success_rate_column (`str`, *optional*, defaults to `"success_rate"`):
        Dataset column the trainer keeps up to date with each prompt's success rate (NaN before it is seen). If the
        dataset already has it (floats in [0, 1], NaN = unknown, e.g. a reference model's pass rate), it is read as
        each prompt's prior, so the first epoch is already adaptive.
    success_rate_prior_weight (`float`, *optional*, defaults to `8.0`):
        Weight of a success-rate column given in the dataset, in pseudo-observations: a prior rate p counts as
        `weight * p` successes out of `weight` completions (docs/statistics.md). `0` ignores the column as input.
    dynamic_sampling (`bool`, *optional*, defaults to `False`):
        DAPO dynamic sampling around any procedure that trains every completion it generates (a plan-ahead
        allocator, CERO's pacing, the pilot round, Pilot-Commit; Reinforce-Ada Seq is refused): drop groups whose
        completions are all successes or all failures, draw further prompts from the training data and generate for
        them until the batch is full (docs/sampling.md).
    dynamic_sampling_max_rounds (`int`, *optional*, defaults to `3`):
        Extra generation rounds dynamic sampling may take per batch; at the bound the batch is filled with dropped
        groups' completions with advantage weight 0 (no gradient, whatever the reward's variance), logged and warned
        about once, never an error.
    pilot_rollouts (`int`, *optional*, defaults to `0`):
        With `allocator="bayes_knapsack"`: a pilot round of this many completions per prompt, absorbed by the
        posterior before the rest of the step's budget is allocated with `allocate_remaining`. Every pilot completion
        is trained on. `0` turns the pilot off. With `allocator="pilot_commit"`: the size of its own pilot (the same
        as `allocator_kwargs={"pilot_rollouts": k}`); `0` there takes the paper's 4 when that leaves something to
        commit (4 < `num_generations`), else `max(2, num_generations // 2)`.
    prompt_source (`str`, *optional*, defaults to `"sampler"`):
        Registered name of the prompt source, which decides which prompts enter each generation batch
        (docs/sampling.md#prompt-sources-which-prompts-enter-a-batch). `"sampler"` (the default) takes the data's
        sampler's prompts unchanged, as `GRPOTrainer` does. `"mopps"` (MoPPS: a Thompson draw on each candidate's
        posterior from a pool of `pool_factor` x the batch's prompts, those nearest `target` kept), `"greso"`
        (GRESO: prompts whose recent groups all had equal rewards skipped with a probability that grows with the
        streak) and `"value_pool"` (the pool's prompts of highest expected value under `bayes_knapsack`'s
        objective) choose which prompts are generated for; they draw candidates beyond the sampler's and need a
        map-style (not streaming) dataset of at least `pool_factor` (`max_pool_factor`) x the batch's prompts.
    prompt_source_kwargs (`dict` or `str`, *optional*):
        Constructor arguments of the prompt source (a dict, or a JSON string on the command line). With a selecting
        source, `"revisit_epochs": k` adds a floor of visits: a prompt passed over at k consecutive epochs' offers is
        generated at its next.
    posterior_half_life (`float`, `str` or `None`, *optional*, defaults to `"auto"`):
        Half-life of the per-prompt Beta posterior's evidence (read by `bayes_knapsack`, `cero` and the `mopps` /
        `value_pool` sources), in generation batches (= optimizer steps when `steps_per_generation` is 1): a
        completion scored h batches ago weighs half. `"epoch"`: one epoch of the training data (its prompts / the
        prompts per generation batch), so last epoch's evidence weighs half. `"auto"` (default): `"epoch"` for
        `bayes_knapsack`, `None` for the other strategies and for a streaming dataset (no length), or the half-life
        of the statistics passed to the trainer. `None` never forgets. At the tuned setting of the learning benchmark
        a posterior that forgets in one epoch kept the default level with tuned uniform with no difficulty bin
        regressing beyond its interval, where the never-forgetting one let solved and mid-difficulty prompts slip
        (docs/benchmarks.md, "Do no harm").
    posterior_prior_a (`float`, *optional*, defaults to `1.0`):
        Weak Beta(a0, b0) prior of every prompt's posterior, under the success-rate column's pseudo-counts and the
        evidence. `1.0, 1.0` is uniform (CERO's); `0.5, 0.5` (Jeffreys) gave `bayes_knapsack` a higher
        effective-gradient ratio at the same value share in the simulator (docs/allocators.md).
    posterior_prior_b (`float`, *optional*, defaults to `1.0`):
        b0 of the weak prior, as `posterior_prior_a`.
    generation_token_budget (`float`, `str` or `None`, *optional*, defaults to `"auto"`):
        Expected generated tokens per generation batch (all ranks together) that the allocation may spend, planned
        from each prompt's measured completion length (the statistics' `expected_completion_tokens`), or
        `"uniform"`: each batch may expect what the uniform split of its completions over its prompts expects (GRPO's
        tokens for the same batch, recomputed every step; no number to tune). The number of completions stays
        `generation_batch_size` (TRL's batch shape); the budget decides which prompts get them.
        Honoured by `knapsack` and `bayes_knapsack` (other allocators refuse it); with `pilot_rollouts` it covers
        both rounds; dynamic sampling's extra rounds come on top. Before any length is measured (the first step) the
        allocator's own counts stand. When even the fewest tokens the bounds allow exceed the budget, the allocation
        spends those fewest tokens and logs `allocation/token_budget_infeasible` = 1 (docs/allocators.md, "A token
        budget"). `"auto"` (default): `"uniform"` for an allocator that honours a budget, none for the others (in the
        accuracy-per-token benchmark this budget took `bayes_knapsack` from below uniform to above it, averaged over
        the run: docs/benchmarks.md). `None`: no budget (the papers' allocations), bit-identical to a run without
        this field. `allocator_kwargs["token_budget"]` takes precedence over `"auto"`; beside any other value the two
        must agree. The budget wraps the allocator (`trl_adaptive.allocation.token_budgeted.TokenBudgeted`).
        `"uniform"` is inert (the allocator's counts, `allocation/token_price` 0) when every prompt expects the same
        completion length: expected tokens within half a token of the budget fit.
    length_decay (`float`, *optional*, defaults to `0.9`):
        The factor in (0, 1] a prompt's measured completion lengths are multiplied by at every visit before the new
        ones are added (`1.0`: the plain mean of every completion measured).
    est_decay (`float`, *optional*, defaults to `0.9`):
        Read by `reinforce_ada_est`: the factor in (0, 1] its decayed success counts are multiplied by at every visit
        of a prompt, before the visit's counts are added (Reinforce-Ada Est's 0.9; `1.0` keeps cumulative counts).
        The success-rate column's prior decays the same way (docs/statistics.md).
    est_prior_alpha (`float`, *optional*, defaults to `1.0`):
        Read by `reinforce_ada_est`: alpha > 0, pseudo-successes of the Beta prior of its smoothed rate
        (alpha + n_pos) / (alpha + beta + n_tot), which keeps the rate off 0 and 1.
    est_prior_beta (`float`, *optional*, defaults to `16.0`):
        Read by `reinforce_ada_est`: beta > 0, pseudo-failures of that prior (`1.0, 16.0`: an unseen prompt has
        rate 1 / 17, Reinforce-Ada Est's).
    vllm_weight_reload_dir (`str` or `None`, *optional*, defaults to `None`):
        Server mode with a trainer that has no CUDA device (vLLM's CPU build): TRL's NCCL transfer cannot run, so each
        weight sync writes the weights as one safetensors file into this folder and asks the server to reload them
        (`/collective_rpc` `reload_weights`). The server must read the folder at the same path. `None`: a temporary
        folder, removed when the client closes. Unused on a GPU.
    log_allocations (`bool`, *optional*, defaults to `True`):
        Append each generation batch's prompt ids, counts, success rates and scored successes to
        `output_dir/allocations.jsonl` (main process), the input of run reports. Each run starts its own: a fresh run
        moves an earlier run's log to `allocations.previous-<k>.jsonl`, a resume from `checkpoint-N` keeps its lines
        of steps before N.
    equal_prompt_weighting (`bool`, *optional*, defaults to `False`):
        Multiply each completion's advantage by `mean_n / n_i` so every prompt carries the same total weight
        whatever its count. Off by default, as in the papers: every completion has equal weight, so a prompt with
        more completions moves the policy more.
    """

    allocator: str = field(
        default="bayes_knapsack",
        metadata={
            "help": "Sampling strategy by name: an allocator (bayes_knapsack, knapsack, uniform, reinforce_ada_est, "
            "cero) or a round procedure (reinforce_ada_seq_pos, reinforce_ada_seq_balance, pilot_commit). An "
            "Allocator or Procedure object passed to the trainer overrides it."
        },
    )
    allocator_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Extra allocator constructor arguments as a dict or JSON string, e.g. '{\"fallback\": false}'."
        },
    )
    min_rollouts: int = field(
        default=2,
        metadata={"help": "Fewest completions a sampled prompt receives (N_low, >= 2)."},
    )
    max_rollouts: int | None = field(
        default=None,
        metadata={"help": "Most completions one prompt may receive per generation batch (N_up); None: allocator's."},
    )
    success_threshold: float = field(
        default=1.0,
        metadata={"help": "A completion is a success when its total reward is >= this value."},
    )
    prompt_id_column: str = field(
        default="prompt_id",
        metadata={
            "help": "Dataset column with a stable id per prompt (integers or strings); added (row index) if missing."
        },
    )
    success_rate_column: str = field(
        default="success_rate",
        metadata={"help": "Dataset column kept up to date with each prompt's success rate (NaN until seen)."},
    )
    success_rate_prior_weight: float = field(
        default=8.0,
        metadata={"help": "Pseudo-observations a dataset's success-rate column counts for as a prior (0: ignore it)."},
    )
    equal_prompt_weighting: bool = field(
        default=False,
        metadata={"help": "Scale each completion's advantage by mean_n / n_i so every prompt weighs the same."},
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling around any procedure that trains what it generates (not Seq): drop "
            "all-correct / all-wrong groups, sample further prompts for the missing completions; a batch still short "
            "is filled with dropped groups at advantage weight 0."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=3,
        metadata={"help": "Most extra generation rounds per batch for dynamic sampling; then fill and warn."},
    )
    pilot_rollouts: int = field(
        default=0,
        metadata={
            "help": "bayes_knapsack: completions per prompt in a pilot round, all trained, before the rest is "
            "allocated on the updated posterior (0: off). pilot_commit: its pilot's size (0: min(4, "
            "max(2, num_generations // 2)))."
        },
    )
    prompt_source: str = field(
        default="sampler",
        metadata={
            "help": "Which prompts enter each generation batch, by registered name: 'sampler' (the default) takes the "
            "data's sampler's prompts unchanged, as GRPOTrainer does; 'mopps', 'greso' and 'value_pool' select from a "
            "larger pool."
        },
    )
    prompt_source_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Prompt source constructor arguments as a dict or JSON string; with a selecting source, "
            "'revisit_epochs': k generates a prompt passed over at k consecutive epochs' offers at its next."
        },
    )
    posterior_half_life: float | str | None = field(
        default=AUTO_HALF_LIFE,
        metadata={
            "help": "Half-life of the Beta posterior's evidence in generation batches, 'epoch' (one epoch of the "
            "training data), 'auto' (default: 'epoch' for bayes_knapsack, never for the others) or None (never)."
        },
    )
    posterior_prior_a: float = field(
        default=1.0,
        metadata={"help": "Weak Beta prior a0 > 0 of every prompt's posterior (1.0: uniform; 0.5: Jeffreys)."},
    )
    posterior_prior_b: float = field(
        default=1.0,
        metadata={"help": "Weak Beta prior b0 > 0 of every prompt's posterior (1.0: uniform; 0.5: Jeffreys)."},
    )
    generation_token_budget: float | str | None = field(
        default=AUTO_TOKEN_BUDGET,
        metadata={
            "help": "Expected generated tokens per generation batch (all ranks) the allocation may spend, from each "
            "prompt's measured completion length, or 'uniform' (what the uniform split of the batch expects); the "
            "count stays generation_batch_size. knapsack and bayes_knapsack only. 'auto' (default): 'uniform' for "
            "those, none for the others. None: no token budget, every allocator exactly as without it."
        },
    )
    length_decay: float = field(
        default=0.9,
        metadata={"help": "Per-visit decay in (0, 1] of each prompt's measured completion length (1.0: plain mean)."},
    )
    est_decay: float = field(
        default=0.9,
        metadata={"help": "reinforce_ada_est: per-visit decay in (0, 1] of its success counts (1.0: cumulative)."},
    )
    est_prior_alpha: float = field(
        default=1.0,
        metadata={"help": "reinforce_ada_est: pseudo-successes alpha > 0 of its smoothed rate's Beta prior."},
    )
    est_prior_beta: float = field(
        default=16.0,
        metadata={"help": "reinforce_ada_est: pseudo-failures beta > 0 of its smoothed rate's Beta prior."},
    )
    vllm_weight_reload_dir: str | None = field(
        default=None,
        metadata={
            "help": "vLLM server mode with a trainer on CPU (no NCCL): the folder the weights are written to at each "
            "sync, for the server to reload; it must be readable by the server at the same path. None: a temporary "
            "folder (server on this machine). Unused on a GPU, where TRL's NCCL transfer runs."
        },
    )
    log_allocations: bool = field(
        default=True,
        metadata={"help": "Append each generation batch's counts and rates to output_dir/allocations.jsonl."},
    )

    def __post_init__(self) -> None:
        # GRPOConfig turns bf16 on by default, which fails on a machine without bf16 (a CPU laptop or CI) before
        # training starts. Default to bf16 only where it is supported; an explicit bf16=True is left to fail loudly.
        if self.bf16 is None and not self.fp16 and not (is_torch_bf16_gpu_available() or is_torch_xla_available()):
            self.bf16 = False
        super().__post_init__()
        self.allocator_kwargs = _parsed_kwargs("allocator_kwargs", self.allocator_kwargs)
        self.prompt_source_kwargs = _parsed_kwargs("prompt_source_kwargs", self.prompt_source_kwargs)
        if self.allocator not in registered_strategies():
            raise ValueError(
                f"allocator={self.allocator!r} is not a registered allocator. Choose one of "
                f"{', '.join(registered_strategies())}, or pass an Allocator object to AdaptiveGRPOTrainer."
            )
        for flag in ("dynamic_sampling", "log_allocations", "equal_prompt_weighting"):
            setattr(self, flag, check_bool(flag, getattr(self, flag)))
        check_number(
            "success_rate_prior_weight",
            self.success_rate_prior_weight,
            minimum=0,
            finite=True,
            reason="pseudo-observations; 0 ignores the dataset's success-rate column as a prior",
            fix="Give the number of completions the column's rate should count for, e.g. 8.",
        )
        check_int("dynamic_sampling_max_rounds", self.dynamic_sampling_max_rounds, minimum=0, reason="extra rounds")
        check_int("pilot_rollouts", self.pilot_rollouts, minimum=0, reason="0 turns it off")
        for column in ("prompt_id_column", "success_rate_column"):
            name = getattr(self, column)
            if not isinstance(name, str) or not name:
                raise ValueError(
                    f"{column}={name!r}: must be a non-empty column name (a str), e.g. {column}="
                    f"{self.__dataclass_fields__[column].default!r}."
                )
        self._parse_half_life()
        check_statistics_settings(self)  # a ValueError naming the field and the fix; warns about unread settings
        self._check_token_budget()
        self._check_rollout_bounds()
        self._check_pilot_rollouts()
        # Unknown allocator_kwargs, combinations that cannot work and a strategy that cannot split this batch (its
        # own check, which the trainer runs again for an allocator object) fail here, named.
        prompts = self.generation_batch_size // self.num_generations
        self.build_procedure().check(prompts, self.generation_batch_size, self.num_generations)
        self.build_prompt_source()  # an unknown name or argument fails here, named
        if self.prompt_id_column == self.success_rate_column:
            raise ValueError(
                f"prompt_id_column and success_rate_column are both {self.prompt_id_column!r}; give them different "
                "names."
            )

    def _parse_half_life(self) -> None:
        """posterior_half_life from the command line: a number, "epoch", "auto" or "none"."""
        value = self.posterior_half_life
        if not isinstance(value, str) or value in (EPOCH_HALF_LIFE, AUTO_HALF_LIFE):
            return
        if value.lower() in ("none", "null"):
            self.posterior_half_life = None
            return
        try:
            self.posterior_half_life = float(value)
        except ValueError:
            raise ValueError(
                f"posterior_half_life={value!r} is neither a number of generation batches, 'epoch', 'auto' nor None. "
                "Give a half-life in generation batches, 'epoch' (one epoch of the training data), or leave it unset."
            ) from None

    def resolved_half_life(self, num_prompts: int | None) -> float | None:
        """posterior_half_life for training data of ``num_prompts`` prompts (None: a stream, of unknown length)."""
        half_life = self.posterior_half_life
        if half_life == AUTO_HALF_LIFE:
            half_life = EPOCH_HALF_LIFE if self.allocator == "bayes_knapsack" and num_prompts is not None else None
        if half_life != EPOCH_HALF_LIFE:
            return half_life
        if num_prompts is None:
            raise ValueError(
                "posterior_half_life='epoch' needs training data with a length (a streaming dataset has none). Give a "
                "half-life in generation batches, or posterior_half_life=None."
            )
        return num_prompts / (self.generation_batch_size // self.num_generations)

    def _check_token_budget(self) -> None:
        """generation_token_budget: a number of tokens > 0 or "uniform", for a strategy that can honour it, "auto" or
        None; set once (here or in allocator_kwargs)."""
        budget = self.generation_token_budget
        if isinstance(budget, str) and budget.lower() in ("none", "null"):  # the command line gives a string
            budget = self.generation_token_budget = None
        if isinstance(budget, str) and budget not in (UNIFORM_TOKENS, AUTO_TOKEN_BUDGET):
            try:
                budget = self.generation_token_budget = float(budget)
            except ValueError:
                raise ValueError(
                    f"generation_token_budget={budget!r} is neither a number of tokens, 'uniform', 'auto' nor None. "
                    "Give the expected generated tokens per generation batch, 'uniform', or leave it unset."
                ) from None
        given = self.allocator_kwargs or {}
        if budget != AUTO_TOKEN_BUDGET and "token_budget" in given and given["token_budget"] != budget:
            raise ValueError(
                f"generation_token_budget={budget!r} but allocator_kwargs sets "
                f"token_budget={given['token_budget']!r}. Set it once: use the config field generation_token_budget "
                "and remove token_budget from allocator_kwargs."
            )
        if budget is None or budget == AUTO_TOKEN_BUDGET:
            return
        check_token_budget(budget, "generation_token_budget")  # the wrapper's own rule, at construction
        if not strategy(self.allocator).takes("token_budget"):
            able = [name for name in registered_strategies() if strategy(name).takes("token_budget")]
            raise ValueError(
                f"generation_token_budget={self.generation_token_budget} needs an allocator that allocates under a "
                f"token budget; allocator={self.allocator!r} does not. Choose one of {', '.join(able)}, or set "
                "generation_token_budget=None."
            )

    def _check_rollout_bounds(self) -> None:
        """min_rollouts <= num_generations (the average) <= max_rollouts, each bound set once."""
        given = self.allocator_kwargs or {}
        for bound in ("min_rollouts", "max_rollouts"):
            ours = getattr(self, bound)
            if given.get(bound) is not None and ours is not None and given[bound] != ours:
                raise ValueError(
                    f"allocator_kwargs sets {bound}={given[bound]} but the config has {bound}={ours}. Set it once: "
                    f"use the config field {bound} and remove it from allocator_kwargs."
                )
        max_rollouts = self.max_rollouts if self.max_rollouts is not None else given.get("max_rollouts")
        check_rollout_bounds(self.min_rollouts, self.min_rollouts if max_rollouts is None else max_rollouts)
        low, average = self.min_rollouts, self.num_generations
        if low <= average and (max_rollouts is None or average <= max_rollouts):
            return
        if max_rollouts is None:
            upper = "max_rollouts unset (the allocator's own, at least num_generations)"
        else:
            upper = ("allocator_kwargs sets " if self.max_rollouts is None else "") + f"max_rollouts={max_rollouts}"
        if low > average:
            fix = (
                f"Lower min_rollouts to at most {average}, or raise num_generations to at least {low} (with "
                "generation_batch_size a multiple of it)."
            )
        else:
            fix = f"Raise max_rollouts to at least {average} (or leave it unset), or lower num_generations to it."
        raise ValueError(
            f"min_rollouts <= num_generations <= max_rollouts must hold, but the config has min_rollouts={low}, "
            f"num_generations={average} and {upper}. num_generations is the average number of completions per "
            f"prompt (a generation batch of {self.generation_batch_size} completions over "
            f"{self.generation_batch_size // average} prompts), so no prompt's fewest can exceed it and no prompt's "
            f"most can fall below it. {fix}"
        )

    def _check_pilot_rollouts(self) -> None:
        """pilot_rollouts: a pilot round around a plan-ahead allocator, or pilot_commit's own pilot; set once."""
        own = (self.allocator_kwargs or {}).get("pilot_rollouts")
        if self.pilot_rollouts and own is not None and own != self.pilot_rollouts:
            raise ValueError(
                f"allocator_kwargs sets pilot_rollouts={own} but the config has pilot_rollouts={self.pilot_rollouts}. "
                "Set it once: use the config field pilot_rollouts and remove it from allocator_kwargs."
            )

    @property
    def _pilot_is_the_strategys(self) -> bool:
        """Whether the chosen strategy is a round procedure with a pilot of its own (pilot_commit): the config's
        pilot_rollouts is then its argument, not a pilot round around an allocator."""
        entry = strategy(self.allocator)
        return not entry.is_allocator and entry.takes("pilot_rollouts")

    def strategy_kwargs(self) -> dict[str, Any]:
        """``allocator_kwargs`` plus the config's bounds, where the chosen strategy takes them."""
        kwargs = dict(self.allocator_kwargs or {})
        accepted = strategy(self.allocator).parameters
        if "min_rollouts" in accepted:
            kwargs.setdefault("min_rollouts", self.min_rollouts)
        if self.max_rollouts is not None and "max_rollouts" in accepted:
            kwargs.setdefault("max_rollouts", self.max_rollouts)
        if self._pilot_is_the_strategys and kwargs.get("pilot_rollouts") is None:
            # The config's pilot, else the paper's 4 where it leaves something to commit (half the average if not)
            kwargs["pilot_rollouts"] = self.pilot_rollouts or min(4, max(2, self.num_generations // 2))
        if self.generation_token_budget == AUTO_TOKEN_BUDGET:
            if "token_budget" in accepted:
                kwargs.setdefault("token_budget", UNIFORM_TOKENS)
        elif self.generation_token_budget is not None:
            kwargs["token_budget"] = self.generation_token_budget
        return kwargs

    @property
    def token_budget(self) -> float | str | None:
        """The token budget the chosen allocator is built with: ``generation_token_budget`` with ``"auto"`` resolved
        (``"uniform"`` where the allocator honours a budget, else None) and ``allocator_kwargs`` applied."""
        return self.strategy_kwargs().get("token_budget")

    def build_procedure(self, strategy: Any = None, **extra: Any):
        """The sampling procedure this config describes (refuses combinations that cannot work, naming them).

        ``strategy``: an ``Allocator`` or ``Procedure`` object to build around instead of ``allocator`` (its own
        arguments stand; ``allocator_kwargs`` and ``extra`` are not applied to it).
        """
        return build_procedure(
            self.allocator if strategy is None else strategy,
            pilot_rollouts=0 if strategy is None and self._pilot_is_the_strategys else self.pilot_rollouts,
            dynamic_sampling=self.dynamic_sampling,
            dynamic_sampling_max_rounds=self.dynamic_sampling_max_rounds,
            strategy_kwargs=self.strategy_kwargs() | extra if strategy is None else None,
        )

    def build_prompt_source(self):
        """The prompt source this config names, built with ``prompt_source_kwargs`` (a fresh one per call)."""
        return build_prompt_source(self.prompt_source, self.prompt_source_kwargs)

    def statistics_config_for(self, num_prompts: int | None) -> dict[str, float | None]:
        """The :class:`~trl_adaptive.PromptStatistics` settings this config fixes for training data of
        ``num_prompts`` prompts (None: a stream), by the store's argument names (:data:`STORE_SETTING_FIELDS` maps
        them to this config's fields); ``posterior_half_life`` resolved (:meth:`resolved_half_life`)."""
        return self.statistics_config | {"posterior_half_life": self.resolved_half_life(num_prompts)}

    @property
    def statistics_config(self) -> dict[str, float | None]:
        """:meth:`statistics_config_for` data of unknown length, except that ``"epoch"`` (and ``"auto"``) stand for
        a half-life the trainer resolves against its data: here they read as None (the settings' checks)."""
        config = {store: getattr(self, field) for store, field in STORE_SETTING_FIELDS.items()}
        if isinstance(config["posterior_half_life"], str):
            config["posterior_half_life"] = None
        return config

    @classmethod
    def from_grpo_config(cls, config: GRPOConfig, **adaptive_fields: Any) -> AdaptiveGRPOConfig:
        """An AdaptiveGRPOConfig with every field of an existing ``GRPOConfig`` plus the adaptive fields given.

        ``AdaptiveGRPOConfig(**config.to_dict())`` does not work: ``to_dict`` adds derived values such as
        ``generation_batch_size`` that the constructor would check against ``steps_per_generation`` again.

        Example:
            >>> from trl import GRPOConfig
            >>> grpo = GRPOConfig(output_dir="out", bf16=False, num_generations=4, per_device_train_batch_size=8)
            >>> AdaptiveGRPOConfig.from_grpo_config(grpo, allocator="uniform").num_generations
            4
        """
        names = {f.name for f in fields(config) if f.init}
        values = {name: getattr(config, name) for name in names}
        # Derived in __post_init__ from steps_per_generation; passing both is what to_dict() gets wrong.
        if values.get("generation_batch_size") is not None and values.get("steps_per_generation") is not None:
            values["generation_batch_size"] = None
        return cls(**values, **adaptive_fields)


def _parsed_kwargs(name: str, value: Any) -> dict[str, Any] | None:
    """A ``*_kwargs`` field as a dict: a JSON object string (the command line's form) is parsed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name} is not valid JSON ({error}): {value!r}") from None
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict or a JSON object string, got {value!r}.")
    return value


# Config field -> the estimator it configures, by the name allocators list in `reads`.
ESTIMATOR_OF_FIELD: dict[str, str] = {
    "est_decay": DecayedRate.name,
    "est_prior_alpha": DecayedRate.name,
    "est_prior_beta": DecayedRate.name,
    "posterior_half_life": BetaPosterior.name,
    "posterior_prior_a": BetaPosterior.name,
    "posterior_prior_b": BetaPosterior.name,
}


def check_statistics_settings(config: Any) -> None:
    """Check the store settings of ``config`` (an ``AdaptiveGRPOConfig``); warn about those left unread.

    Raises:
        ValueError: for an invalid setting, naming its config field and the fix, e.g. ``est_decay=1.5: must lie in
            (0, 1]; ...``.
    """
    DecayedRate.check_settings(config.est_decay, config.est_prior_alpha, config.est_prior_beta, prefix="est_")
    PromptStatistics(**config.statistics_config)  # the other settings have the same names in the store
    for name_, value in unread_settings(config).items():
        estimator = ESTIMATOR_OF_FIELD[name_]
        readers = [name for name in registered_strategies() if estimator in strategy(name).reads]
        warnings.warn(
            f"{name_}={value!r} has no effect: allocator={config.allocator!r} does not read the statistics store's "
            f"{estimator!r} estimator, which {name_} configures. Allocators that read it: "
            f"{', '.join(readers) or 'none'}. Choose one of them, or leave {name_} at its default.",
            UserWarning,
            stacklevel=4,  # the caller of AdaptiveGRPOConfig(...)
        )


def unread_settings(config: Any) -> dict[str, Any]:
    """The store settings of ``config`` set away from their defaults that ``config.allocator`` does not read."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    reads = strategy(config.allocator).reads
    return {
        field: getattr(config, field)
        for field, estimator in ESTIMATOR_OF_FIELD.items()
        if estimator not in reads and getattr(config, field) != defaults[field]
    }
