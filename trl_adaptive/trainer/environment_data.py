"""Environments that own their data: ``environment_factory`` without a ``train_dataset``.

GRPOTrainer 1.16 trains on placeholder rows then (grpo_trainer.py, ``if train_dataset is None``): one generation
batch of empty prompts, cycled across steps, each environment's ``reset()`` making up the real prompt; ``max_steps``
sets the length. No allocation can adapt there: the prompt a completion answers exists only after ``reset()``, so a
placeholder row is a different task at every step, and success statistics per row would mean nothing. The trainer
trains as GRPOTrainer does: the same placeholder rows (TRL still builds its own and makes its own checks, the trainer
passes it no dataset), ``num_generations`` completions per row (uniform), and one warning that says why.
"""

from __future__ import annotations

import warnings

from datasets import Dataset

from ..allocation import UniformAllocator
from ..sampling import PlanAhead, Procedure
from .config import AdaptiveGRPOConfig


def placeholder_rows(args: AdaptiveGRPOConfig) -> Dataset:
    """GRPOTrainer's placeholder: one generation batch's worth of empty conversational prompts."""
    rows = args.generation_batch_size // args.num_generations
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * rows})


def uniform_for_environment_data(args: AdaptiveGRPOConfig, strategy: object | None) -> Procedure:
    """The uniform procedure (``num_generations`` per row, one planned round), whatever the config or the trainer's
    ``allocator`` asked for; warns once, naming what it replaces."""
    asked = [f"allocator={type(strategy).__name__ if strategy is not None else repr(args.allocator)}"]
    asked += ["dynamic_sampling=True"] * args.dynamic_sampling + [f"pilot_rollouts={args.pilot_rollouts}"] * bool(
        args.pilot_rollouts
    )
    warnings.warn(
        "environment_factory without a train_dataset: the environment owns the data, and each prompt exists only "
        "after its reset(), so no statistics can follow a prompt from step to step and no allocation can adapt. "
        f"Training as GRPOTrainer does: num_generations={args.num_generations} completions per placeholder row "
        f"(uniform), in place of {', '.join(asked)}. To allocate adaptively, pass a train_dataset with one row per "
        "task (its columns are forwarded to reset()).",
        stacklevel=4,
    )
    return PlanAhead(UniformAllocator())
