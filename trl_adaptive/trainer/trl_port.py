"""The generation port for TRL 1.16: every contact of a generation batch with GRPOTrainer, in one adapter.

The batch driver (``batch_driver.py``) decides what a batch generates and trains on and reads no trainer; it asks this
port for what only TRL can do, and hands it what TRL must be told:

- the ranks: how many, which one this is, a value of the main process on every rank, a list gathered from every rank;
- the step's settings (``args``, the reward functions' names and weights, the step number) as a plain
  :class:`~trl_adaptive.trainer.port.BatchSettings`;
- a round: TRL's own set-up of the rows (environments, tool dicts, images), its ``_generate`` and its
  ``_calculate_rewards`` (:meth:`TrlPort.generate_round`);
- the training pass: GRPOTrainer's ``_generate_and_score_completions`` on this rank's rows, generating them or
  replaying completions the rounds generated (:meth:`TrlPort.training_pass`);
- the logs: metrics into TRL's metric stream, and TRL's per-fixed-group figures replaced by the real groups'.

Why a round re-enters the parent and stops at ``_generate`` (``RoundCaptured``): TRL 1.16 prepares each row inside
``_generate_and_score_completions`` (about 100 lines: environment pools and ``reset()``, per-rollout tool dicts,
images into conversational prompts) with no method of its own to call; reusing it keeps tools, environments and
images TRL's. The exception is raised by the trainer's ``_generate`` and caught here, never elsewhere;
``tests/test_trl_contract.py`` fails when the parent starts talking across ranks before that call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from trl import GRPOTrainer

from .completion_logs import take_round_extras
from .hook_state import Replay
from .port import BatchSettings, GenerationBatchEnd


class RoundCaptured(Exception):
    """Raised by the trainer's ``_generate`` once a round's completions are captured (never escapes
    :meth:`TrlPort.generate_round`)."""


class TrlPort:
    """The generation port of one :class:`~trl_adaptive.AdaptiveGRPOTrainer` (see the module docstring)."""

    def __init__(self, trainer: GRPOTrainer) -> None:  # an AdaptiveGRPOTrainer: its hooks read _hook_state
        self._trainer = trainer

    # ranks -----------------------------------------------------------------------------------------------------------
    @property
    def num_processes(self) -> int:
        return self._trainer.accelerator.num_processes

    @property
    def process_index(self) -> int:
        return self._trainer.accelerator.process_index

    @property
    def is_main_process(self) -> bool:
        return self._trainer.accelerator.is_main_process

    def share(self, value: Any) -> Any:
        """``value`` of the main process, on every rank."""
        if self.num_processes == 1:
            return value
        payload = [value]
        broadcast_object_list(payload, from_process=0)
        return payload[0]

    def gather(self, items: list) -> list:
        """Every rank's ``items``, concatenated in rank order."""
        return gather_object(items) if self.num_processes > 1 else list(items)

    # the step --------------------------------------------------------------------------------------------------------
    def settings(self) -> BatchSettings:
        trainer = self._trainer
        return BatchSettings.from_args(
            trainer.args,
            trainer.state.global_step,
            scale_rewards=trainer.scale_rewards,
            multi_objective_aggregation=trainer.multi_objective_aggregation,
            reward_weights=trainer.reward_weights.detach().cpu(),
            reward_func_names=list(trainer.reward_func_names),
        )

    # generation ------------------------------------------------------------------------------------------------------
    def generate_round(self, rows: list[dict]) -> tuple[list[tuple], torch.Tensor]:
        """Generate and score one completion per row of this rank: TRL's row set-up and ``_generate``, then its
        ``_calculate_rewards`` with a ``rollout_func``'s extra fields merged as TRL does. Returns this rank's samples
        (``_generate``'s fields per completion, and the ``log_extra`` values its scoring logged) and every rank's
        gathered ``(N, K)`` rewards, on the CPU."""
        trainer, hooks = self._trainer, self._trainer._hook_state
        hooks.capture = []
        try:
            with contextlib.suppress(RoundCaptured):
                GRPOTrainer._generate_and_score_completions(trainer, rows)
        finally:
            captured, hooks.capture = hooks.capture, None
        if len(captured) != 1:
            raise RuntimeError(
                "GRPOTrainer._generate_and_score_completions did not call _generate once (trl 1.16 does)."
            )
        prompts, output = captured[0]
        prompt_token_ids, completion_ids, tool_mask, completions, logps, extra, images, tool_images = output
        _merge_extra_fields(rows, extra)
        rewards = GRPOTrainer._calculate_rewards(trainer, rows, prompts, completions, completion_ids)
        size = len(rows)
        extras = take_round_extras(trainer._pending_extra_logs, size)  # travel with their completions
        tool_mask = tool_mask if tool_mask is not None else [None] * size
        logps = logps if logps is not None else [None] * size
        images = images if images is not None else [None] * size  # None: the replay pass reads the rows' columns
        tool_images = tool_images if tool_images else [[] for _ in range(size)]
        columns = (prompt_token_ids, completion_ids, tool_mask, completions, logps, images, tool_images, extras)
        return list(zip(*columns, strict=True)), rewards.detach().cpu()

    def training_pass(
        self, rows: list[dict], total: int, replay: Replay | None
    ) -> tuple[dict[str, Any], torch.Tensor, np.ndarray | None]:
        """GRPOTrainer's generate-and-score on this rank's ``rows`` (``total`` over every rank), generating them or,
        with ``replay``, handing back the rounds' completions and rewards. Returns TRL's training dict, the gathered
        ``(total, K)`` rewards and, when this pass generated, every rank's generated tokens in dispatch order."""
        trainer, hooks = self._trainer, self._trainer._hook_state
        hooks.rewards_per_func, hooks.completion_tokens, hooks.replay = None, None, replay
        # Replaying rounds already generated and scored: environments must not be drawn and reset() again.
        environments = trainer.environment_factories, trainer.environments
        if replay is not None:
            trainer.environment_factories = trainer.environments = None
        try:
            output = GRPOTrainer._generate_and_score_completions(trainer, rows)
        finally:
            hooks.replay = None
            trainer.environment_factories, trainer.environments = environments
        hooks.check_rewards(total, len(trainer.reward_funcs))
        return output, hooks.rewards_per_func, hooks.completion_tokens

    def gathered_lengths(self, completion_ids: list) -> np.ndarray:
        """Generated tokens of every rank's completions (this rank's ``completion_ids``), in rank order."""
        return np.asarray(self.gather([len(ids) for ids in completion_ids]), dtype=np.float64)

    def take_generation_seconds(self) -> float:
        """This rank's seconds in ``_generate`` since the last call (``generation/seconds``)."""
        return self._trainer._hook_state.take_generation_seconds()

    # logs ------------------------------------------------------------------------------------------------------------
    def log(self, metrics: Mapping[str, float]) -> None:
        """Append each metric to TRL's training metric stream (averaged per logging step by TRL's ``log``)."""
        stream = self._trainer._metrics["train"]
        for name, value in metrics.items():
            stream[name].append(value)

    def replace_group_logs(self, zero_std_fraction: float, advantages: list[float], group_sizes: list[int]) -> None:
        """TRL grouped by ``view(-1, G)``: its ``frac_reward_zero_std`` and completions table's advantages are
        replaced by the real groups' figures; the table gains each completion's group size."""
        trainer = self._trainer
        trainer._metrics["train"]["frac_reward_zero_std"][-1] = zero_std_fraction
        trainer._logs["advantages"].clear()
        trainer._logs["advantages"].extend(advantages)
        trainer._logs["extra"]["group_size"].extend(group_sizes)

    # observers ---------------------------------------------------------------------------------------------------
    def batch_end(self, batch: GenerationBatchEnd) -> None:
        """Every callback with an ``on_generation_batch_end(args, state, control, batch=...)`` method gets the ended
        batch (transformers' callback handler dispatches only its own events, so this one is called here)."""
        trainer = self._trainer
        for callback in trainer.callback_handler.callbacks:
            event = getattr(callback, "on_generation_batch_end", None)
            if event is not None:
                event(trainer.args, trainer.state, trainer.control, batch=batch)


def _merge_extra_fields(rows: list[dict], extra_fields: dict) -> None:
    """A ``rollout_func``'s extra fields onto the rows reward functions read, as GRPOTrainer does before scoring."""
    for i, row in enumerate(rows):
        for key, values in extra_fields.items():
            if isinstance(values, list) and i < len(values):
                row[key] = values[i]
            elif not isinstance(values, list):
                row[key] = values
