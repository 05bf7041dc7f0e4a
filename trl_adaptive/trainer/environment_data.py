"""Environments that make every prompt: ``environment_factory`` without a ``train_dataset``, or with rows that have no
``prompt`` column (rows that only route each rollout to an environment, ``{"environment": [...]}``).

GRPOTrainer 1.16 trains on placeholder rows without a dataset (``GRPOTrainer.__init__``, ``if train_dataset is
None``): one generation batch of empty prompts, cycled across steps; ``max_steps`` sets the length. A row without a
``prompt`` gets the same empty prompt (``_generate_and_score_completions``: ``x.get("prompt", ...)``). Either way each
environment's ``reset()`` makes up the real prompt. No allocation can adapt there: the prompt a completion answers
exists only after ``reset()``, so a row is a different task at every step, and success statistics per row would mean
nothing. The trainer trains as GRPOTrainer does: the same rows as TRL sees them (:class:`ResetRows`: without a
dataset TRL builds its own placeholders and makes its own checks, the trainer passes it none), ``num_generations``
completions per row (uniform), and one warning that says why.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from datasets import Dataset

from ..allocation import UniformAllocator
from ..sampling import PlanAhead, Procedure
from .config import AdaptiveGRPOConfig

EMPTY_PROMPT = [{"role": "user", "content": ""}]  # what GRPOTrainer gives a row without a prompt


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
