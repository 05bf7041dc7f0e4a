"""What a user passes AdaptiveGRPOTrainer, checked: the dataset, unsupported features, the procedure, environments that
make the prompts, and the rewards.

Everything a user can get wrong before the first step fails at construction, naming the field and a fix that works.

**Environments that make every prompt** (:class:`ResetRows`): ``environment_factory`` without a ``train_dataset``,
or with rows that have no ``prompt`` column. GRPOTrainer 1.16 trains on placeholder rows without a dataset (one
generation batch of empty prompts, cycled across steps; ``max_steps`` sets the length); a row without a ``prompt``
gets the same empty prompt. Either way each environment's ``reset()`` makes up the real prompt, so a row is a
different task at every step and success statistics per row would mean nothing: the trainer trains as GRPOTrainer
does (the same rows as TRL sees them, ``num_generations`` completions per row, uniform), with one warning that says
why.

**Rewards** (:class:`RewardChecks`: warnings, once each per trainer, about rewards that silently change what is
trained or counted). An infinite reward: the statistics count +inf as a success and -inf as a failure, and the
group's mean becomes infinite, so its advantages are lost. Shaped rewards and a ``success_threshold`` that does not
split them: once the first epoch is closed with no success (or no failure) at all, every prompt reads p = 0 (or 1)
and no allocator can tell prompts apart; 0/1 rewards that are all failures or all successes are a hard or an easy
task and are not warned about. A reward function that returns something other than one number per completion fails
inside TRL's ``_calculate_rewards`` with torch's message; each callable reward function is wrapped
(:func:`checked_reward_function`) so the error names the function and the expected shape. Dynamic sampling that had
to fill its batch with completions of dropped groups, which add no gradient.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict, IterableDataset
from trl import GRPOTrainer
from trl.trainer.utils import is_async_callable

from ..allocation import Allocator, UniformAllocator
from ..sampling import PlanAhead, Procedure
from ..stats import PromptStatistics
from .config import AdaptiveGRPOConfig


# -------------------------------------------------------------------------------------------------------------------
# The dataset, the features, the procedure
# -------------------------------------------------------------------------------------------------------------------
def check_dataset_holds_a_batch(num_rows: int, args: AdaptiveGRPOConfig) -> None:
    num_prompts = args.generation_batch_size // args.num_generations
    if num_rows < num_prompts:
        raise ValueError(
            f"train_dataset has {num_rows} prompts but one generation batch takes {num_prompts} "
            f"(generation_batch_size={args.generation_batch_size} / num_generations={args.num_generations}), so "
            "no step could run. Add prompts, lower generation_batch_size (or, when it is not set, "
            "per_device_train_batch_size / steps_per_generation, which make it), or raise num_generations."
        )


def warn_if_saves_split_generation_batches(args: AdaptiveGRPOConfig) -> None:
    """A generation batch spans steps_per_generation x num_iterations micro-batches; save_steps counts optimizer
    steps of gradient_accumulation_steps micro-batches each."""
    per_generation = args.steps_per_generation * args.num_iterations
    if args.save_strategy == "steps" and args.save_steps >= 1:
        if (int(args.save_steps) * args.gradient_accumulation_steps) % per_generation:
            warnings.warn(
                f"save_steps={args.save_steps} optimizer steps (x gradient_accumulation_steps="
                f"{args.gradient_accumulation_steps} micro-batches) do not end on a generation batch of "
                f"{per_generation} micro-batches (steps_per_generation x num_iterations): a checkpoint inside a "
                "generation batch resumes by generating that batch again, so the resumed run will not reproduce "
                "the uninterrupted one exactly.",
                stacklevel=3,
            )


def build_procedure_from_config(
    args: AdaptiveGRPOConfig,
    dataset_size: int | None,
    strategy: Allocator | Procedure | None = None,
    reset_rows: ResetRows | None = None,
) -> Procedure:
    """The sampling procedure of this config, or around the ``allocator`` object passed to the trainer; CERO plans
    for the run's epochs unless ``allocator_kwargs`` says otherwise (or the data is a stream of unknown length).
    Uniform, with a warning, when environments make the prompts (:class:`ResetRows`)."""
    if reset_rows is not None:
        return reset_rows.uniform(args, strategy)
    planned = strategy is None and args.allocator == "cero" and dataset_size is not None
    if planned and "num_epochs" not in (args.allocator_kwargs or {}):
        return args.build_procedure(num_epochs=_planned_epochs(args, dataset_size))
    return args.build_procedure(strategy)


def check_procedure_reads_the_data(procedure: Procedure, streaming: bool) -> None:
    """A procedure that draws prompts beyond the batch needs data it can draw from by id: not a stream."""
    if streaming and procedure.draws_prompts:
        raise ValueError(
            f"{type(procedure).__name__} draws prompts beyond the generation batch (dynamic sampling, CERO's "
            "pacing), but train_dataset is a streaming IterableDataset, which cannot be drawn from by prompt id. "
            "Use an allocator that splits the budget within each batch (e.g. allocator='knapsack', "
            "'reinforce_ada_est', 'reinforce_ada_seq_balance', 'pilot_commit', or bayes_knapsack with "
            "pilot_rollouts), or materialise the stream: Dataset.from_list(list(stream.take(n)))."
        )


def innermost(procedure: Procedure) -> Procedure:
    """The procedure a wrapper (dynamic sampling) wraps, all the way in."""
    while hasattr(procedure, "inner"):
        procedure = procedure.inner
    return procedure


def _planned_epochs(args: AdaptiveGRPOConfig, dataset_size: int) -> int:
    """K, the epochs this run makes over the prompts: num_train_epochs, or what max_steps amounts to."""
    if args.max_steps <= 0:
        return max(1, math.ceil(args.num_train_epochs))
    batches_per_epoch = dataset_size // (args.generation_batch_size // args.num_generations)
    steps_per_epoch = batches_per_epoch * args.steps_per_generation * args.num_iterations
    steps_per_epoch = max(1, steps_per_epoch // args.gradient_accumulation_steps)
    return max(1, math.ceil(args.max_steps / steps_per_epoch))


def reject_unsupported_features(
    train_dataset: Any, args: AdaptiveGRPOConfig, positional: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ResetRows | None]:
    """Fail at construction for TRL features whose data path this trainer does not (yet) serve. Returns the training
    data and, when environments make the prompts (``environment_factory`` without a ``train_dataset`` or with rows
    that have no ``prompt``), what TRL sees of the rows (:class:`ResetRows`)."""
    names = list(inspect.signature(GRPOTrainer.__init__).parameters)[5:]  # after self, model, reward_funcs, args, ds
    passed = dict(zip(names, positional, strict=False)) | kwargs
    reset_rows = ResetRows.of(train_dataset, passed.get("environment_factory"))
    environment_owns_the_data = reset_rows is not None and reset_rows.no_dataset
    if train_dataset is None and not environment_owns_the_data:  # GRPOTrainer's error, word for word
        raise ValueError("`train_dataset` is required unless an `environment_factory` is provided.")
    if isinstance(train_dataset, DatasetDict):
        raise TypeError(
            f"train_dataset is a DatasetDict with splits {list(train_dataset)}; pass one split, e.g. "
            "train_dataset=dataset['train']."
        )
    if not isinstance(train_dataset, (Dataset, IterableDataset)) and not environment_owns_the_data:
        raise TypeError(
            "AdaptiveGRPOTrainer needs a datasets.Dataset or datasets.IterableDataset as train_dataset, got "
            f"{type(train_dataset).__name__}. Build one with Dataset.from_dict({{'prompt': [...]}}) or "
            "Dataset.from_list(rows)."
        )
    if args.use_vllm and "seed" in (args.generation_kwargs or {}):
        raise ValueError(
            "generation_kwargs['seed'] is set: with vLLM the trainer asks for each completion as its own copy of the "
            "prompt with n=1, and a fixed seed makes every copy produce the same completion (zero-variance groups). "
            "Remove the seed from generation_kwargs."
        )
    if args.use_vllm:
        from trl.generation import vllm_generation

        if not vllm_generation.is_vllm_available():
            raise ImportError(
                "use_vllm=True but vLLM is not installed. On a GPU machine: pip install 'trl-adaptive[vllm]'. "
                "On a CPU machine: vLLM's CPU build, `make vllm-venv` (see docs/serving.md); or, for a dry run of a "
                "server-mode config without vLLM, start the stand-in server with "
                "`trl-adaptive-serve --model <path>` and run your script as "
                "`python -m trl_adaptive.serving.cpu_seam your_script.py ...` (see docs/serving.md); or set "
                "use_vllm=False to generate with transformers."
            )
    return (train_dataset if reset_rows is None else reset_rows.training_rows(train_dataset, args)), reset_rows


EMPTY_PROMPT = [{"role": "user", "content": ""}]  # what GRPOTrainer gives a row without a prompt


# -------------------------------------------------------------------------------------------------------------------
# Environments that make every prompt
# -------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResetRows:
    """Rows whose prompt an environment's ``reset()`` makes: which columns TRL sees of each (the user's, not the
    trainer's id and success-rate columns, so ``reset()`` and the reward functions get what GRPOTrainer gives them),
    and whether TRL was given no dataset (then it builds its placeholders and makes its own checks)."""

    columns: tuple[str, ...]
    no_dataset: bool

    @classmethod
    def of(cls, train_dataset: Any, environment_factory: Any) -> ResetRows | None:
        """None for ordinary rows (a ``prompt`` column, or no environment to make one)."""
        if environment_factory is None:
            return None
        if train_dataset is None:
            return cls(("prompt",), no_dataset=True)
        if isinstance(train_dataset, Dataset) and "prompt" not in train_dataset.column_names:
            return cls(tuple(train_dataset.column_names), no_dataset=False)
        return None

    def training_rows(self, train_dataset: Dataset | None, args: AdaptiveGRPOConfig) -> Dataset:
        """The rows the trainer keeps statistics on: GRPOTrainer's placeholders without a dataset (one generation
        batch's worth), else the user's rows with GRPOTrainer's empty prompt added (it carries no task)."""
        if self.no_dataset:
            return Dataset.from_dict({"prompt": [EMPTY_PROMPT] * (args.generation_batch_size // args.num_generations)})
        return train_dataset.add_column("prompt", [EMPTY_PROMPT] * len(train_dataset))

    def trl_dataset(self, dataset: Dataset) -> Dataset | None:
        return None if self.no_dataset else dataset

    def as_trl_sees(self, row: dict[str, Any]) -> dict[str, Any]:
        return {column: row[column] for column in self.columns}

    def uniform(self, args: AdaptiveGRPOConfig, strategy: object | None) -> Procedure:
        """The uniform procedure (``num_generations`` per row, one planned round), whatever the config or the
        trainer's ``allocator`` asked for; warns once, naming what it replaces."""
        asked = [f"allocator={type(strategy).__name__ if strategy is not None else repr(args.allocator)}"]
        asked += ["dynamic_sampling=True"] * args.dynamic_sampling
        asked += [f"pilot_rollouts={args.pilot_rollouts}"] * bool(args.pilot_rollouts)
        data = (
            "environment_factory without a train_dataset: the environment owns the data"
            if self.no_dataset
            else f"train_dataset has no 'prompt' column (columns: {list(self.columns)}): the environments make the "
            "prompts"
        )
        advice = (
            "pass a train_dataset with one row per task (its columns are forwarded to reset())"
            if self.no_dataset
            else "give each row a 'prompt' column (it may be empty) and the columns reset() builds its task from"
        )
        warnings.warn(
            f"{data}, and each prompt exists only after its reset(), so no statistics can follow a prompt from step "
            "to step and no allocation can adapt. Training as GRPOTrainer does: "
            f"num_generations={args.num_generations} completions per row (uniform), in place of {', '.join(asked)}. "
            f"To allocate adaptively, {advice}.",
            stacklevel=4,
        )
        return PlanAhead(UniformAllocator())


# -------------------------------------------------------------------------------------------------------------------
# Rewards
# -------------------------------------------------------------------------------------------------------------------
class RewardChecks:
    """What the trainer has seen of the rewards, for :meth:`observe`'s once-only warnings.

    Example:
        >>> checks, store = RewardChecks("group"), PromptStatistics(success_threshold=1.0)
        >>> store.update([0, 0], [0.2, 0.7]); store.end_epoch()
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     checks.observe(np.array([0.2, 0.7]), np.array([0, 0]), store)
        >>> "success_threshold=1.0" in str(seen[0].message)
        True
    """

    def __init__(self, scale_rewards: str) -> None:
        self.scale_rewards = scale_rewards
        self.warned_infinite = False
        self.checked_first_epoch = False
        self.shaped = False  # a finite reward other than 0 and 1 was seen
        self.highest = -np.inf  # the highest finite reward seen
        self.lowest = np.inf  # the lowest finite reward seen
        self.warned_dynamic_fill = False

    def observe(self, rewards: np.ndarray, prompt_ids: np.ndarray, store: PromptStatistics) -> None:
        """Look at one generation batch's rewards (every completion scored, NaN where unscorable) after the store
        counted them."""
        finite = rewards[np.isfinite(rewards)]
        self.shaped = self.shaped or bool(np.any((finite != 0.0) & (finite != 1.0)))
        if len(finite):
            self.highest, self.lowest = max(self.highest, float(finite.max())), min(self.lowest, float(finite.min()))
        infinite = np.isinf(rewards)
        if infinite.any() and not self.warned_infinite:
            self.warned_infinite = True
            warnings.warn(_infinite_message(rewards[infinite], prompt_ids[infinite], self.scale_rewards), stacklevel=3)
        if store.epoch >= 1 and not self.checked_first_epoch:
            self.checked_first_epoch = True
            seen = store.batch(store.prompt_ids)
            if self.shaped and seen.successes.sum() == 0:
                warnings.warn(_no_success_message(store.success_threshold, self.highest), stacklevel=3)
            elif self.shaped and seen.attempts.sum() > 0 and seen.successes.sum() == seen.attempts.sum():
                warnings.warn(_no_failure_message(store.success_threshold, self.lowest), stacklevel=3)

    def dynamic_fill(self, metrics: dict[str, float], notes: dict[str, Any], trained: int, max_rounds: int) -> None:
        """Look at one batch's dynamic sampling: its ``dynamic_sampling/*`` metrics and why its extra rounds stopped
        (``notes["dynamic_sampling_stop"]``), of its ``trained`` completions, at most ``max_rounds`` extra rounds."""
        filled = metrics.get("dynamic_sampling/filled", 0)
        if filled and not self.warned_dynamic_fill:
            self.warned_dynamic_fill = True
            extra = int(metrics.get("dynamic_sampling/extra_rounds", 0))
            stop = notes.get("dynamic_sampling_stop", "")
            warnings.warn(_fill_message(filled, trained, extra, max_rounds, stop), stacklevel=4)


def checked_reward_function(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``func`` (sync or async, as it is), raising a TypeError that names ``name`` and the shape TRL expects when its
    output is not a sequence of numbers (None for an unscorable completion). TRL's own checks (one reward per
    completion) follow unchanged; the values pass through untouched."""
    if is_async_callable(func):

        @functools.wraps(func)
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            return _checked_output(await func(*args, **kwargs), name)

        return checked_async

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        return _checked_output(func(*args, **kwargs), name)

    return checked


def _is_reward(value: Any) -> bool:
    if value is None or isinstance(value, numbers.Real):  # bool, int, float, numpy scalars
        return True
    return isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 0 and value.dtype != object


def _checked_output(output: Any, name: str) -> Any:
    expected = (
        f"Reward function {name!r} must return a list with one float per completion (None for a completion it cannot "
        "score), in the order of `completions`"
    )
    if isinstance(output, (str, bytes, dict)) or not hasattr(output, "__len__") or getattr(output, "ndim", 1) != 1:
        raise TypeError(f"{expected}; it returned {_shown(output)}.")
    for index, value in enumerate(output):
        if not _is_reward(value):
            raise TypeError(f"{expected}; item {index} of its {len(output)} is {_shown(value)}.")
    return output


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} (a {type(value).__name__})"


def _infinite_message(values: np.ndarray, prompt_ids: np.ndarray, scale_rewards: str) -> str:
    lost = {
        "group": "every advantage of its group is 0, so nothing is learned from that prompt this step",
        "batch": "the batch's reward std is infinite, so every advantage of the batch is 0",
    }.get(scale_rewards, "the other completions of its group get advantages of about -3.4e38 (nan_to_num of -inf)")
    return (
        f"A reward function returned {sorted(set(values.tolist()))} for {len(values)} completion(s) (prompt ids "
        f"{sorted(set(prompt_ids.tolist()))[:5]}). The statistics count +inf as a success and -inf as a failure, and "
        f"the group's mean reward becomes infinite: with scale_rewards={scale_rewards!r}, {lost}. Return finite "
        "rewards, or NaN for a completion that cannot be scored (it is left out). Warned once."
    )


def _no_success_message(threshold: float, highest: float) -> str:
    return (
        f"The first epoch is over and no completion has reached success_threshold={threshold!r} (the highest reward "
        f"was {highest!r}): every prompt counts as unsolved (p = 0), so the allocator cannot tell prompts apart. "
        "With shaped rewards, set success_threshold to the reward that means solved (e.g. the correctness "
        "function's value for a correct answer). Warned once."
    )


def _no_failure_message(threshold: float, lowest: float) -> str:
    return (
        f"The first epoch is over and every completion reached success_threshold={threshold!r} (the lowest reward "
        f"was {lowest!r}): every prompt counts as solved (p = 1), so the success-rate column says every prompt is "
        "solved and the allocator cannot tell prompts apart. With shaped rewards (e.g. a grader's 0-10 scale), set "
        "success_threshold to the reward that means solved. Warned once."
    )


def _fill_message(filled: float, trained: int, extra: int, max_rounds: int, stop: str) -> str:
    if extra >= max_rounds:
        advice = "raise dynamic_sampling_max_rounds if this happens often"
    else:
        advice = "more rounds would not have helped; a larger dataset, or more mixed prompts, would"
    return (
        f"Dynamic sampling: after {extra} extra round(s) (at most {max_rounds}) the batch still lacked {int(filled)} "
        f"of {trained} completions with signal, because {stop}. They were filled with completions of dropped "
        "(all-correct or all-wrong) groups with advantage weight 0, so they add no gradient. Logged as "
        f"dynamic_sampling/filled and dynamic_sampling/extra_rounds; {advice}. (Warned once.)"
    )
