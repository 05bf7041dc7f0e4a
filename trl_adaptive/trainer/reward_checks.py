"""Warnings, once each per trainer, about rewards that silently change what is trained or what is counted.

- An infinite reward: the statistics count +inf as a success and -inf as a failure, and the group's mean becomes
  infinite, so its advantages are lost (``scale_rewards="group"``: every advantage of the group is 0; ``"batch"``:
  every advantage of the batch; ``"none"``: the group's other completions get about -3.4e38, ``nan_to_num`` of
  -inf). NaN stays what it means everywhere else: a completion that cannot be scored.
- Shaped rewards and a ``success_threshold`` that does not split them: once the first epoch is closed with no
  success at all, every prompt reads p = 0; with no failure at all (a grader scoring 1-10 against the default
  threshold 1.0), every prompt reads p = 1. Either way no allocator can tell prompts apart. 0/1 rewards that are all
  failures or all successes are a hard or an easy task, not a threshold set wrong, and are not warned about.
- A reward function that returns something other than one number per completion (a string, a scalar, a nested list)
  fails inside TRL's ``_calculate_rewards`` with torch's message (``too many dimensions 'str'``); each callable reward
  function is wrapped (:func:`checked_reward_function`) so the error names the function and the expected shape.
- Dynamic sampling that had to fill its batch: after its extra rounds too few groups had a reward spread, so the
  batch was filled with completions of dropped groups that add no gradient.
"""

from __future__ import annotations

import functools
import numbers
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from trl.trainer.utils import is_async_callable

from ..stats import PromptStatistics


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


__all__ = ["RewardChecks", "checked_reward_function"]
