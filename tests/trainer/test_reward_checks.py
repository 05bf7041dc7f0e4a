"""Once-only warnings about rewards (``trl_adaptive/trainer/reward_checks.py``): infinite rewards, and shaped rewards
that never reach ``success_threshold``; on the checker alone and in a short real run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers.trainer import build_trainer

from trl_adaptive.stats import PromptStatistics
from trl_adaptive.trainer.reward_checks import RewardChecks


def _messages(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize(
    "scale_rewards, effect",
    [
        ("group", "every advantage of its group is 0"),
        ("batch", "every advantage of the batch is 0"),
        ("none", "about -3.4e38"),
    ],
)
def test_infinite_rewards_warn_once_saying_what_they_do_to_the_group(scale_rewards, effect):
    checks, store = RewardChecks(scale_rewards), PromptStatistics()
    rewards, ids = np.array([np.inf, 0.0, -np.inf, 1.0]), np.array([3, 3, 4, 4])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            store.update(ids, rewards)
            checks.observe(rewards, ids, store)
    (message,) = _messages(seen)
    assert "[-inf, inf] for 2 completion(s) (prompt ids [3, 4])" in message and effect in message
    assert "NaN for a completion that cannot be scored" in message


def test_no_success_after_the_first_epoch_warns_only_for_shaped_rewards():
    def run(rewards):
        checks, store = RewardChecks("group"), PromptStatistics(success_threshold=1.0)
        ids = np.array([0, 0, 1, 1])
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for step in range(6):
                if step == 3:
                    store.end_epoch()
                store.update(ids, rewards)
                checks.observe(rewards, ids, store)
        return _messages(seen)

    (message,) = run(np.array([0.2, 0.7, 0.0, 0.9]))  # shaped, never 1.0: once, after the first epoch
    assert "success_threshold=1.0" in message and "highest reward was 0.9" in message
    assert run(np.zeros(4)) == []  # 0/1 rewards never solved: a hard task, not a threshold set wrong
    assert run(np.array([0.2, 1.0, 0.0, 0.9])) == []  # some success


def _shaped(completions, **kwargs) -> list[float]:
    """Shaped rewards that never reach success_threshold=2.0."""
    return [0.25 + 0.25 * (i % 2) for i in range(len(completions))]


@pytest.mark.trainer
def test_a_run_warns_once_about_infinite_and_never_successful_shaped_rewards(tiny_model_dir, tmp_path):
    """8 prompts, 2 per step: the first epoch ends after step 4. The first step's first completion scores +inf (a
    success, so no threshold warning follows); in a second run nothing reaches success_threshold=2.0."""
    calls = []

    def with_one_inf(completions, **kwargs) -> list[float]:
        calls.append(1)
        values = _shaped(completions)
        return [np.inf, *values[1:]] if len(calls) == 1 else values

    def train(reward, output_dir) -> list[str]:
        trainer = build_trainer(tiny_model_dir, output_dir, reward_funcs=reward, max_steps=6, success_threshold=2.0)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            trainer.train()
        return _messages(seen)

    messages = train(with_one_inf, tmp_path / "inf")
    assert sum("returned [inf] for 1 completion(s)" in m for m in messages) == 1, messages
    assert not any("no completion has reached" in m for m in messages), messages
    messages = [m for m in train(_shaped, tmp_path / "shaped") if "success_threshold" in m]
    assert len(messages) == 1 and "no completion has reached success_threshold=2.0" in messages[0], messages
