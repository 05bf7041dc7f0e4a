"""The generation port: what the batch driver asks of a training framework, and the step settings it gets back.

A leaf of the trainer (NumPy, torch and the sampling procedures' types). :class:`GenerationPort` is the seam between
the batch driver (``batch_driver.py``), which decides what a generation batch generates and trains on, and the
framework that generates, scores and trains: TRL 1.16 through ``trl_port.TrlPort``. An implementation owns the ranks
(share, gather), the rows' generation and scoring, the training pass, the metric stream and the observers of an ended
batch (:class:`GenerationBatchEnd`); the driver owns everything else and reads no trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..sampling import Outcome
from .hook_state import Replay


@dataclass(frozen=True)
class BatchSettings:
    """What one generation batch is run by: the run's settings and this step's number (from ``args`` and the
    trainer, read once per batch by the port)."""

    seed: int
    step: int
    generation_batch_size: int
    num_generations: int
    success_threshold: float
    prompt_id_column: str
    success_rate_column: str
    equal_prompt_weighting: bool
    dynamic_sampling_max_rounds: int
    scale_rewards: str
    multi_objective_aggregation: str
    reward_weights: torch.Tensor  # (K,), on the CPU
    reward_func_names: list[str]
    allocation_log_dir: str | None  # where allocations.jsonl goes; None: not written (not the main process, or off)
    engine: str  # "transformers", "vllm-server" or "vllm-colocate" (allocations.jsonl)

    @classmethod
    def from_args(cls, args: Any, step: int, **framework: Any) -> BatchSettings:
        """The settings an ``AdaptiveGRPOConfig`` gives, at ``step``; ``framework``: the fields the trainer resolves
        (``scale_rewards``, ``multi_objective_aggregation``, ``reward_weights``, ``reward_func_names``)."""
        return cls(
            seed=args.seed,
            step=int(step),
            generation_batch_size=args.generation_batch_size,
            num_generations=args.num_generations,
            success_threshold=args.success_threshold,
            prompt_id_column=args.prompt_id_column,
            success_rate_column=args.success_rate_column,
            equal_prompt_weighting=args.equal_prompt_weighting,
            dynamic_sampling_max_rounds=args.dynamic_sampling_max_rounds,
            allocation_log_dir=args.output_dir if args.should_save and args.log_allocations else None,
            engine=f"vllm-{args.vllm_mode}" if args.use_vllm else "transformers",
            **framework,
        )


@dataclass(frozen=True)
class GenerationBatchEnd:
    """One training generation batch as it ends (every rank): what a trainer callback's ``on_generation_batch_end``
    receives as ``batch``, after the advantages and before the batch's completions update the statistics' lengths.

    Attributes:
        outcome: the procedure's (``outcome.record``: prompt ids, group ids, rewards, completion tokens, metrics of
            every completion generated; ``outcome.selected`` / ``trained_counts``: what is trained).
        dispatched: record index of each trained completion, in dispatch order (every rank's).
        training_dict: this rank's, as the loss reads it (``advantages`` included).
        expected_tokens: per prompt of the record, the expected completion tokens the dispatch planned with.
    """

    outcome: Outcome
    dispatched: np.ndarray
    training_dict: dict[str, Any]
    expected_tokens: np.ndarray


class GenerationPort(Protocol):
    """What the batch driver needs of a framework (``trl_port.TrlPort`` is TRL 1.16's)."""

    num_processes: int
    process_index: int
    is_main_process: bool

    def share(self, value: Any) -> Any:
        """``value`` of the main process, on every rank."""

    def gather(self, items: list) -> list:
        """Every rank's ``items``, concatenated in rank order."""

    def settings(self) -> BatchSettings:
        """The settings of the batch about to run."""

    def generate_round(self, rows: list[dict]) -> tuple[list[tuple], torch.Tensor]:
        """This rank's samples for its ``rows`` (field 1: the completion's token ids) and every rank's ``(N, K)``
        rewards, gathered, on the CPU."""

    def training_pass(
        self, rows: list[dict], total: int, replay: Replay | None
    ) -> tuple[dict[str, Any], torch.Tensor, np.ndarray | None]:
        """The training dict of this rank's ``rows``, the gathered ``(total, K)`` rewards, and every rank's generated
        tokens when the pass generated (None when it replayed)."""

    def take_generation_seconds(self) -> float:
        """This rank's seconds in generation since the last call."""

    def log(self, metrics: Mapping[str, float]) -> None:
        """Append each metric to the training metric stream."""

    def replace_group_logs(self, zero_std_fraction: float, advantages: list[float], group_sizes: list[int]) -> None:
        """The framework's per-batch figures over fixed-size groups, replaced by the real groups'."""

    def batch_end(self, batch: GenerationBatchEnd) -> None:
        """Hand the ended batch to the framework's observers (TRL: callbacks' ``on_generation_batch_end``)."""
