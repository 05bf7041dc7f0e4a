"""Warnings, once each per trainer, about rewards that silently change what is trained or what is counted.

- An infinite reward: the statistics count +inf as a success and -inf as a failure, and the group's mean becomes
  infinite, so its advantages are lost (``scale_rewards="group"``: every advantage of the group is 0; ``"batch"``:
  every advantage of the batch; ``"none"``: the group's other completions get about -3.4e38, ``nan_to_num`` of
  -inf). NaN stays what it means everywhere else: a completion that cannot be scored.
- Shaped rewards that never reach ``success_threshold``: once the first epoch is closed with no success at all, every
  prompt reads p = 0 and no allocator can tell them apart; 0/1 rewards with no success are a hard task, not a
  threshold set wrong, and are not warned about.
- Dynamic sampling that had to fill its batch: after its extra rounds too few groups had a reward spread, so the
  batch was filled with completions of dropped groups that add no gradient.
"""

from __future__ import annotations

import warnings

import numpy as np

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
        self.warned_dynamic_fill = False

    def observe(self, rewards: np.ndarray, prompt_ids: np.ndarray, store: PromptStatistics) -> None:
        """Look at one generation batch's rewards (every completion scored, NaN where unscorable) after the store
        counted them."""
        finite = rewards[np.isfinite(rewards)]
        self.shaped = self.shaped or bool(np.any((finite != 0.0) & (finite != 1.0)))
        self.highest = max(self.highest, float(finite.max())) if len(finite) else self.highest
        infinite = np.isinf(rewards)
        if infinite.any() and not self.warned_infinite:
            self.warned_infinite = True
            warnings.warn(_infinite_message(rewards[infinite], prompt_ids[infinite], self.scale_rewards), stacklevel=3)
        if store.epoch >= 1 and not self.checked_first_epoch:
            self.checked_first_epoch = True
            if self.shaped and store.batch(store.prompt_ids).successes.sum() == 0:
                warnings.warn(_no_success_message(store.success_threshold, self.highest), stacklevel=3)

    def dynamic_fill(self, filled: float, trained: int, max_rounds: int) -> None:
        """Look at one batch's ``dynamic_sampling/filled`` (of its ``trained`` completions, after ``max_rounds``
        extra rounds)."""
        if filled and not self.warned_dynamic_fill:
            self.warned_dynamic_fill = True
            warnings.warn(_fill_message(filled, trained, max_rounds), stacklevel=4)


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


def _fill_message(filled: float, trained: int, max_rounds: int) -> str:
    return (
        f"Dynamic sampling: after {max_rounds} extra round(s) the batch still lacked {int(filled)} of {trained} "
        "completions with signal; they were filled with completions of dropped (all-correct or all-wrong) groups with "
        "advantage weight 0, so they add no gradient. Logged as dynamic_sampling/filled; raise "
        "dynamic_sampling_max_rounds if this happens often. (Warned once.)"
    )


__all__ = ["RewardChecks"]
