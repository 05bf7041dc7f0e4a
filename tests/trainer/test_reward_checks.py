"""Once-only warnings about rewards (``trl_adaptive/trainer/inputs.py``): infinite rewards, and shaped rewards
that never reach ``success_threshold``; on the checker alone and in a short real run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers.trainer import build_trainer

from trl_adaptive.sampling.dynamic import STOP_OUT_OF_PROMPTS, STOP_ROUND_LIMIT
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.trainer.inputs import RewardChecks, checked_reward_function


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
    # the other side: a grader scoring 1-3 against the default threshold 1.0 counts every completion a success
    (message,) = run(np.array([1.0, 3.0, 2.0, 1.5]))
    assert "every completion reached success_threshold=1.0 (the lowest reward was 1.0)" in message
    assert "every prompt counts as solved" in message
    assert run(np.ones(4)) == []  # 0/1 rewards always solved: an easy task
    assert run(np.array([1.0, 3.0, 0.5, 1.5])) == []  # some failure


@pytest.mark.parametrize(
    ("extra", "stop", "advice"),
    [
        (3, STOP_OUT_OF_PROMPTS, "more rounds would not have helped"),
        (100_000, STOP_ROUND_LIMIT, "raise dynamic_sampling_max_rounds"),
    ],
)
def test_the_dynamic_fill_warning_gives_the_rounds_that_ran_and_why_the_fill_stopped(extra, stop, advice):
    checks = RewardChecks("group")
    metrics = {"dynamic_sampling/filled": 8.0, "dynamic_sampling/extra_rounds": float(extra)}
    with pytest.warns(UserWarning) as seen:
        checks.dynamic_fill(metrics, {"dynamic_sampling_stop": stop}, 64, 100_000)
        checks.dynamic_fill(metrics, {"dynamic_sampling_stop": stop}, 64, 100_000)  # once
    (message,) = _messages(seen)
    assert f"after {extra} extra round(s) (at most 100000) the batch still lacked 8 of 64" in message
    assert f"because {stop}" in message and advice in message


async def _async_strings(completions, **kwargs):
    return ["1.0"] * len(completions)


@pytest.mark.parametrize(
    ("output", "shown"),
    [
        (["1.0", "0.0"], "item 0 of its 2 is '1.0' (a str)"),
        (0.5, "it returned 0.5 (a float)"),
        ("good", "it returned 'good' (a str)"),
        ([[1.0], [0.0]], "item 0 of its 2 is [1.0] (a list)"),
        (np.ones((2, 1)), "(a ndarray)"),
    ],
)
def test_a_reward_function_with_the_wrong_output_is_named_with_the_shape_it_must_return(output, shown):
    def my_reward(completions, **kwargs):
        return output

    checked = checked_reward_function(my_reward, "my_reward")
    assert checked.__name__ == "my_reward" and checked.__wrapped__ is my_reward
    with pytest.raises(TypeError, match="Reward function 'my_reward' must return a list with one float per") as error:
        checked(completions=["a", "b"])
    assert shown in str(error.value)


def test_good_reward_outputs_pass_through_unchanged_and_async_stays_async():
    import asyncio
    import inspect

    import torch

    for output in ([1.0, None, 0], (True, np.float32(0.5)), np.array([0.5, 1.0]), torch.tensor([1.0, 0.0])):
        assert checked_reward_function(lambda completions, out=output, **k: out, "r")(completions=[]) is output
    checked = checked_reward_function(_async_strings, "_async_strings")
    assert inspect.iscoroutinefunction(checked)
    with pytest.raises(TypeError, match="Reward function '_async_strings' must return"):
        asyncio.run(checked(completions=["a"]))


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


@pytest.mark.trainer
@pytest.mark.parametrize(
    ("reward", "shown"),
    [
        (lambda completions, **kwargs: ["1"] * len(completions), "item 0 of its 8 is '1' (a str)"),
        (lambda completions, **kwargs: 1.0, "it returned 1.0 (a float)"),
    ],
    ids=["strings", "scalar"],
)
def test_a_run_names_the_reward_function_that_returns_the_wrong_shape(tiny_model_dir, tmp_path, reward, shown):
    """GRPOTrainer fails inside torch ('too many dimensions 'str'', 'float' object is not iterable'); ours names the
    function and what it must return."""
    trainer = build_trainer(tiny_model_dir, tmp_path, reward_funcs=reward, max_steps=1)
    with pytest.raises(TypeError, match="Reward function '<lambda>' must return a list with one float") as error:
        trainer.train()
    assert shown in str(error.value)
