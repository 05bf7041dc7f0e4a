"""Construction-time checks of AdaptiveGRPOTrainer's inputs: dataset, unsupported features, the procedure.

Everything a user can get wrong before the first step fails here, naming the field and a fix that works.
"""

from __future__ import annotations

import inspect
import math
import warnings
from typing import Any

from datasets import Dataset, DatasetDict, IterableDataset
from trl import GRPOTrainer

from ..allocation import Allocator
from ..sampling import Procedure
from .config import AdaptiveGRPOConfig
from .environment_data import ResetRows


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
    Uniform, with a warning, when environments make the prompts (environment_data.py)."""
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
    that have no ``prompt``), what TRL sees of the rows (environment_data.py)."""
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
