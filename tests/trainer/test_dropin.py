"""GRPOTrainer features used as a GRPOTrainer user would, under adaptive allocation: a custom ``rollout_func``,
``tools`` (multi-turn tool calling) and ``environment_factory`` (an environment per rollout, with its own tools and
reward).

Each test checks that the allocation really varies per prompt in that mode, not only that it runs, on the planned path
(one round, generated inside GRPOTrainer's own pass) and on the round path (dynamic sampling: rounds generated, then
replayed).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from datasets import Dataset
from helpers.tiny_model import build_tiny_model
from helpers.trainer import build_trainer, solved_at_try, tiny_config_kwargs

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE, read_allocation_log

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)

PROMPTS = ["always solved", "never solved", "half solved", "solved every third try"]
RATES = [1.0, 0.0, 0.5, 1 / 3]  # the dataset's success-rate column: a prior, so step 1 is already adaptive


class ScriptedRollout:
    """A custom rollout (e.g. an external agent loop): one completion per row, and an ``env_reward`` per row."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.seen: Counter = Counter()

    def __call__(self, prompts, trainer):
        self.calls.append(len(prompts))
        tokenizer = trainer.processing_class
        prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
        completion_ids = [tokenizer(" done")["input_ids"] for _ in prompts]
        rewards = []
        for prompt in prompts:
            rewards.append(solved_at_try(RATES[PROMPTS.index(prompt)], self.seen[prompt]))
            self.seen[prompt] += 1
        logprobs = [[0.0] * len(ids) for ids in completion_ids]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": logprobs,
            "env_reward": rewards,
        }


def env_reward(completions, env_reward, **kwargs):
    """The reward the rollout computed (an extra field of rollout_func's output, passed to reward functions)."""
    return env_reward


@pytest.mark.parametrize("dynamic_sampling", [False, True], ids=["planned", "rounds"])
def test_rollout_func_under_adaptive_allocation(tiny_model_dir, tmp_path, dynamic_sampling):
    rollout = ScriptedRollout()
    dataset = Dataset.from_dict({"prompt": PROMPTS * 2, "success_rate": RATES * 2})
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        dataset,
        trainer_kwargs={"rollout_func": rollout},
        reward_funcs=env_reward,
        per_device_train_batch_size=16,
        max_steps=2,
        allocator="knapsack",
        max_rollouts=8,
        dynamic_sampling=dynamic_sampling,
    )
    trainer.train()
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert len(records) == 2 and all(sum(r["counts"]) == 16 for r in records)
    assert any(len(set(c for c in r["counts"] if c)) > 1 for r in records)  # the allocation varies per prompt
    # The rollout was asked for one completion per row: exactly the completions generated.
    logs = [log for log in trainer.state.log_history if "allocation/budget_used" in log]
    generated = sum(log.get("rounds/generated", 16.0) for log in logs)
    assert sum(rollout.calls) == generated
    if dynamic_sampling:
        assert any(log.get("rounds/per_step", 1) > 1 for log in logs)  # the round path ran
    # The rollout's own rewards reached the statistics: the solved prompt is at 1, the unsolved at 0.
    rates = trainer.prompt_statistics.batch(list(range(8)))
    assert rates.successes[0] == rates.attempts[0] > 0 and rates.successes[1] == 0 < rates.attempts[1]


# -- tools: a multi-turn rollout is one completion of its prompt ------------------------------------------------------
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    add.calls += 1
    return a + b


add.calls = 0
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'


class ScriptedToolTrainer(AdaptiveGRPOTrainer):
    """The model's turns are scripted (a tiny random model never emits a well-formed call): first a call of ``add``,
    then, once the tool's answer is in the context, the answer "5". Everything else is GRPOTrainer's tool loop."""

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        tokenizer = self.processing_class
        completions = []
        for ids in prompt_ids:
            text = "5<|im_end|>" if "<tool_response>" in tokenizer.decode(ids) else CALL
            completions.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        return completions, None


def answered_five(completions, **kwargs):
    return [float(completion[-1]["content"].strip() == "5") for completion in completions]


def _train_with_tools(tmp_path, dynamic_sampling: bool, **trainer_kwargs) -> tuple[list[dict], float]:
    """Two steps of knapsack (a success-rate prior makes step 1 adaptive) on scripted tool calls; the step logs and
    the completions generated. Checks that the allocation varied per prompt."""
    model = build_tiny_model(tmp_path / "tool-model", tool_calling=True)
    questions = [[{"role": "user", "content": f"What is 2 + 3? ({i})"}] for i in range(8)]
    dataset = Dataset.from_dict({"prompt": questions, "success_rate": [1.0, 0.0, 0.5, 0.25] * 2})
    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(
            str(tmp_path / "out"), per_device_train_batch_size=16, max_steps=2, max_completion_length=256
        ),
        allocator="knapsack",
        max_rollouts=8,
        dynamic_sampling=dynamic_sampling,
    )
    trainer = ScriptedToolTrainer(model=str(model), args=args, train_dataset=dataset, **trainer_kwargs)
    trainer.train()
    records = read_allocation_log(str(tmp_path / "out" / ALLOCATION_LOG_FILE))
    assert any(len(set(c for c in r["counts"] if c)) > 1 for r in records)  # the allocation varies per prompt
    logs = [log for log in trainer.state.log_history if "allocation/budget_used" in log]
    if dynamic_sampling:
        assert any(log.get("rounds/per_step", 1) > 1 for log in logs)  # the round path ran
    return logs, sum(log.get("rounds/generated", 16.0) for log in logs)


@pytest.mark.parametrize("dynamic_sampling", [False, True], ids=["planned", "rounds"])
def test_tools_under_adaptive_allocation(tmp_path, dynamic_sampling):
    add.calls = 0
    logs, generated = _train_with_tools(tmp_path, dynamic_sampling, reward_funcs=answered_five, tools=[add])
    assert add.calls == generated  # every completion generated called the tool once, in its own conversation
    assert all(log["tools/call_frequency"] > 0 for log in logs)
    assert all(log["rewards/answered_five/mean"] == 1.0 for log in logs)  # the multi-turn answer was scored


# -- environment_factory: an environment per rollout, its own tools and reward ---------------------------------------
class AdderEnvironment:
    """One task per dataset row: the model must call the environment's ``add``; the environment scores it."""

    resets = 0

    def reset(self, **row):
        AdderEnvironment.resets += 1
        self.called = False

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        self.called = True
        return a + b

    def get_reward(self) -> float:
        return 1.0 if self.called else 0.0


@pytest.mark.parametrize("dynamic_sampling", [False, True], ids=["planned", "rounds"])
def test_environment_factory_under_adaptive_allocation(tmp_path, dynamic_sampling):
    AdderEnvironment.resets = 0
    logs, generated = _train_with_tools(tmp_path, dynamic_sampling, environment_factory=AdderEnvironment)
    assert AdderEnvironment.resets == generated  # one reset per rollout; the training pass after rounds resets none
    assert all(log["rewards/AdderEnvironment/mean"] == 1.0 for log in logs)  # the environment's own reward


# Without a train_dataset (the environment owns the data): tests/trainer/test_trl_parity.py.


# -- prompt identity: string ids, as in datasets that carry a hash per prompt ---------------------------------------
def test_string_prompt_ids_are_accepted_and_stable(tiny_model_dir, tmp_path):
    """A ``prompt_id`` column of strings (hashes, UUIDs) needs no renaming: ids map to the store by SHA-256, reward
    functions still see the dataset's own strings, and the allocation follows each prompt's statistics."""
    import hashlib

    from trl_adaptive.stats import stable_prompt_ids

    hashes = [hashlib.md5(p.encode()).hexdigest() for p in PROMPTS]
    dataset = Dataset.from_dict({"prompt": PROMPTS, "prompt_id": hashes, "success_rate": RATES})
    seen = []

    def reward(completions, prompt_id, prompts, **kwargs):
        seen.extend(prompt_id)
        return [1.0 if RATES[PROMPTS.index(p)] > 0.4 else 0.0 for p in prompts]

    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(str(tmp_path), per_device_train_batch_size=16, max_steps=2), max_rollouts=8
    )
    trainer = AdaptiveGRPOTrainer(model=str(tiny_model_dir), reward_funcs=reward, args=args, train_dataset=dataset)
    trainer.train()
    assert set(seen) <= set(hashes) and trainer.train_dataset["prompt_id"] == hashes  # the user's ids, untouched
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert any(len(set(r["counts"])) > 1 for r in records)  # the prior column makes step 1 adaptive
    ids = stable_prompt_ids(hashes)
    assert set(records[0]["prompt_ids"]) <= set(ids.tolist())
    attempts = trainer.prompt_statistics.batch(ids).attempts
    assert attempts.sum() == 32  # 2 steps x 16 completions, counted under the hashed ids
    with pytest.raises(TypeError, match="all integers or all strings"):
        AdaptiveGRPOTrainer(
            model=str(tiny_model_dir),
            reward_funcs=reward,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": PROMPTS, "prompt_id": [0.5, 1.5, 2.5, 3.5]}),
        )


@pytest.mark.parametrize(
    "ids, config",
    [
        ([f"uuid-{i}" for i in range(8)], {"dynamic_sampling": True}),
        (list(range(-1, -9, -1)), {"allocator": "reinforce_ada_seq_balance", "allocator_kwargs": {"round_size": 4}}),
    ],
    ids=["string-ids-dynamic-sampling", "negative-ids-seq-balance"],
)
def test_rounds_take_any_prompt_ids(tiny_model_dir, tmp_path, ids, config):
    """Procedures that sample in rounds dispatch each round by prompt id: hashed string ids (63-bit) and negative
    integers work as the planned path's do."""
    from trl_adaptive.stats import stable_prompt_ids

    prompts = [f"{p} (copy {k})" for k in range(2) for p in PROMPTS]  # 8 prompts: dynamic sampling can draw more
    dataset = Dataset.from_dict({"prompt": prompts, "prompt_id": ids})

    def reward_by_prompt(prompts, **kwargs):  # every group all-equal: the rounds go on
        return [float(p.startswith(("always", "half"))) for p in prompts]

    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(str(tmp_path), per_device_train_batch_size=16, max_steps=1), max_rollouts=8, **config
    )
    trainer = AdaptiveGRPOTrainer(
        model=str(tiny_model_dir), reward_funcs=reward_by_prompt, args=args, train_dataset=dataset
    )
    trainer.train()
    assert trainer.state.global_step == 1
    assert any(log.get("rounds/per_step", 1) > 1 for log in trainer.state.log_history)  # the round path ran
    store = trainer.prompt_statistics
    assert set(store.prompt_ids.tolist()) == set(stable_prompt_ids(ids).tolist())
    stats = store.batch(stable_prompt_ids(ids))
    assert stats.attempts.sum() >= 16
    solved = np.array([p.startswith(("always", "half")) for p in prompts])
    assert (stats.successes[solved] == stats.attempts[solved]).all() and (stats.successes[~solved] == 0).all()
