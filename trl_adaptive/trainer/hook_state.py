"""What AdaptiveGRPOTrainer's overrides of GRPOTrainer's hooks hand each other within one generation batch.

GRPOTrainer's ``_generate_and_score_completions`` calls ``_generate`` and ``_calculate_rewards`` itself, so what the
trainer wants from them (the gathered rewards, the completions' tokens) or wants them to do instead (hand back the
rounds' completions, stop after a round's generation) goes through one :class:`HookState` per trainer. The trainer
makes it on first use, so the hooks also run on an object built without ``__init__`` (as TRL's own tests build
``GRPOTrainer.__new__(GRPOTrainer)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch


class Replay(NamedTuple):
    """What the training pass after rounds hands back in place of generating and scoring (``rounds.Generated``)."""

    output: tuple  # this rank's ``_generate`` return value for its trained rows
    rewards_per_func: torch.Tensor  # every rank's (T, K) rewards, gathered, in dispatch order
    log_extra: dict[str, list[Any]]  # this rank's ``log_extra`` columns for its rows


@dataclass
class HookState:
    """The hooks' state in the batch being generated (see the module docstring)."""

    rewards_per_func: torch.Tensor | None = None  # TRL's gathered (T, K) rewards of the last pass
    completion_tokens: np.ndarray | None = None  # and the (T,) generated tokens of its completions
    replay: Replay | None = None  # for the training pass after rounds
    capture: list | None = None  # set by TrlPort.generate_round: _generate hands its output over and stops
    generation_seconds: float = 0.0  # in _generate since the last logged batch

    def take_generation_seconds(self) -> float:
        """The seconds spent in ``_generate`` since the last call (``generation/seconds``)."""
        seconds, self.generation_seconds = self.generation_seconds, 0.0
        return seconds

    def check_rewards(self, completions: int, reward_funcs: int) -> None:
        """The last pass kept TRL's gathered rewards, one row per completion of every rank, one column per function."""
        rewards = self.rewards_per_func
        if rewards is None or tuple(rewards.shape) != (completions, reward_funcs):
            raise RuntimeError(
                f"Expected TRL's gathered rewards of shape ({completions}, {reward_funcs}), got "
                f"{None if rewards is None else tuple(rewards.shape)}. trl_adaptive is pinned to trl 1.16; a "
                "different trl version changed GRPOTrainer's internals."
            )
