"""Where GRPOTrainer's own behaviour is the reference: an object built without ``__init__`` (as TRL's tests build
one), and a missing ``train_dataset``."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from helpers.trainer import reward_has_vowel_e, tiny_config_kwargs
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)


def _bare(cls: type, tokenizer) -> GRPOTrainer:
    """``cls.__new__(cls)`` with the few attributes GRPOTrainer's ``_generate`` reads on the rollout_func path."""
    trainer = cls.__new__(cls)
    trainer.accelerator = SimpleNamespace(device=torch.device("cpu"), gather=lambda tensor: tensor)
    trainer.model = SimpleNamespace(training=True)
    trainer.state = SimpleNamespace(global_step=0, num_input_tokens_seen=0)
    trainer.use_vllm = False
    trainer.tools = None
    trainer.processing_class = trainer._tokenizer = tokenizer
    trainer.eos_token_ids = [tokenizer.eos_token_id]
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    def rollout_func(prompts, trainer):
        return {"prompt_ids": [[1, 2]] * len(prompts), "completion_ids": [[3, 4, 5]] * len(prompts),
                "logprobs": [[-0.5] * 3] * len(prompts), "answer": ["x"] * len(prompts)}  # fmt: skip

    trainer.rollout_func = rollout_func
    return trainer


def test_generate_on_an_object_built_without_init_runs_as_grpo_trainers(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    expected = _bare(GRPOTrainer, tokenizer)._generate(["a", "b"])
    ours = _bare(AdaptiveGRPOTrainer, tokenizer)
    assert ours._generate(["a", "b"]) == expected  # TRL's own: a batch calls it, the trainer does not override it


def _construction_error(cls: type, config_cls: type, model_dir, tmp_path, **kwargs) -> Exception:
    config = config_cls(**tiny_config_kwargs(str(tmp_path)))
    with pytest.raises(Exception) as caught:
        cls(model=str(model_dir), reward_funcs=reward_has_vowel_e, args=config, **kwargs)
    return caught.value


def test_a_missing_train_dataset_raises_trls_error(tiny_model_dir, tmp_path):
    expected = _construction_error(GRPOTrainer, GRPOConfig, tiny_model_dir, tmp_path)
    ours = _construction_error(AdaptiveGRPOTrainer, AdaptiveGRPOConfig, tiny_model_dir, tmp_path)
    assert type(expected) is ValueError
    assert type(ours) is type(expected) and str(ours) == str(expected)
    ours = _construction_error(AdaptiveGRPOTrainer, AdaptiveGRPOConfig, tiny_model_dir, tmp_path, train_dataset=None)
    assert type(ours) is type(expected) and str(ours) == str(expected)


class TaskOwningEnvironment:
    """An environment that owns its data: reset() makes up the task (GRPOTrainer's rows are empty placeholders) and
    records what it was given; get_reward scores the rollout."""

    reset_kwargs: list[dict] = []

    def reset(self, **kwargs) -> str:
        TaskOwningEnvironment.reset_kwargs.append(dict(kwargs))
        return f"What is 2 + {len(TaskOwningEnvironment.reset_kwargs) % 5}?"

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return a + b

    def get_reward(self) -> float:
        return float(len(TaskOwningEnvironment.reset_kwargs) % 3 == 0)


def _train_on_environment_data(cls: type, config_cls: type, model_dir, output_dir, **config) -> tuple:
    TaskOwningEnvironment.reset_kwargs = []
    args = config_cls(**tiny_config_kwargs(str(output_dir), max_steps=2, max_completion_length=16), **config)
    trainer = cls(model=str(model_dir), reward_funcs=reward_has_vowel_e, args=args,
                  environment_factory=TaskOwningEnvironment)  # fmt: skip
    trainer.train()
    params = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    return trainer, params, list(TaskOwningEnvironment.reset_kwargs)


@pytest.fixture(scope="module")
def tool_model_dir(tmp_path_factory):
    """The tiny model with a tool-calling chat template (environments expose their methods as tools)."""
    from helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tool-model"), tool_calling=True)


@pytest.mark.parametrize("allocator", ["uniform", "knapsack"])
def test_environment_owned_data_trains_as_grpo_trainer_with_one_warning(tool_model_dir, tmp_path, allocator):
    """No train_dataset: the environment makes up each prompt in reset(). GRPOTrainer trains on its placeholder rows;
    so does AdaptiveGRPOTrainer, with num_generations per row whatever the allocator, and says why (once)."""
    model_dir = tool_model_dir
    grpo, grpo_params, grpo_resets = _train_on_environment_data(GRPOTrainer, GRPOConfig, model_dir, tmp_path / "grpo")
    with pytest.warns(UserWarning, match="the environment owns the data") as caught:
        ours, our_params, our_resets = _train_on_environment_data(
            AdaptiveGRPOTrainer, AdaptiveGRPOConfig, model_dir, tmp_path / "ours", allocator=allocator, max_rollouts=8
        )
    assert sum("the environment owns the data" in str(w.message) for w in caught) == 1
    assert f"in place of allocator={allocator!r}" in next(str(w.message) for w in caught if "owns" in str(w.message))
    assert our_resets == grpo_resets  # reset() got GRPOTrainer's placeholder rows, nothing of ours
    _assert_trained_as_grpo_trainer(grpo, grpo_params, ours, our_params)


def _assert_trained_as_grpo_trainer(grpo, grpo_params: dict, ours, our_params: dict) -> None:
    """The same parameters and the same logs (None where a reward function scored nothing), uniform counts."""
    for name, value in grpo_params.items():
        torch.testing.assert_close(our_params[name], value, rtol=1e-5, atol=1e-6)
    grpo_logs = [log for log in grpo.state.log_history if "reward" in log]
    our_logs = [log for log in ours.state.log_history if "reward" in log]
    assert len(grpo_logs) == len(our_logs) == 2
    for grpo_log, our_log in zip(grpo_logs, our_logs, strict=True):
        for key, value in grpo_log.items():
            if not any(t in key for t in ("runtime", "per_second", "step_time")):
                assert our_log[key] == (value if value is None else pytest.approx(value, rel=1e-5, abs=1e-6)), key
        assert our_log["allocation/count_min"] == our_log["allocation/count_max"] == 4  # uniform


def test_environment_owned_data_keeps_grpo_trainers_checks(tool_model_dir, tmp_path):
    """What GRPOTrainer refuses without a train_dataset (no max_steps), the subclass refuses with TRL's error."""
    kwargs = {"environment_factory": TaskOwningEnvironment}
    grpo_config = {"max_steps": -1}
    errors = []
    for cls, config_cls in ((GRPOTrainer, GRPOConfig), (AdaptiveGRPOTrainer, AdaptiveGRPOConfig)):
        config = config_cls(**tiny_config_kwargs(str(tmp_path), **grpo_config))
        with pytest.raises(ValueError) as caught:
            cls(model=str(tool_model_dir), reward_funcs=reward_has_vowel_e, args=config, **kwargs)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "max_steps" in errors[0]


class PromptOnlyEnvironment:
    """A second environment without get_reward (the reward functions score it) and without tools."""

    reset_kwargs: list[dict] = []

    def reset(self, **kwargs) -> str:
        PromptOnlyEnvironment.reset_kwargs.append(dict(kwargs))
        return "Name a colour."


def _train_on_routing_rows(cls: type, config_cls: type, model_dir, output_dir, **config) -> tuple:
    """TRL's multi-environment example: the dataset's only column routes each rollout to an environment."""
    from datasets import Dataset

    TaskOwningEnvironment.reset_kwargs, PromptOnlyEnvironment.reset_kwargs = [], []
    args = config_cls(**tiny_config_kwargs(str(output_dir), max_steps=2, max_completion_length=16), **config)
    dataset = Dataset.from_dict({"environment": ["task", "prompt_only"] * 4})
    factories = {"task": TaskOwningEnvironment, "prompt_only": PromptOnlyEnvironment}
    trainer = cls(model=str(model_dir), reward_funcs=reward_has_vowel_e, args=args, train_dataset=dataset,
                  environment_factory=factories)  # fmt: skip
    trainer.train()
    params = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    return trainer, params, (list(TaskOwningEnvironment.reset_kwargs), list(PromptOnlyEnvironment.reset_kwargs))


def test_rows_that_only_route_to_environments_train_as_grpo_trainer_with_one_warning(tool_model_dir, tmp_path):
    """A train_dataset whose only column is `environment` (TRL's multi-environment example, one environment owning
    its reward): GRPOTrainer trains on it, reset() making each prompt; so does AdaptiveGRPOTrainer, uniform, saying
    why."""
    grpo, grpo_params, grpo_resets = _train_on_routing_rows(GRPOTrainer, GRPOConfig, tool_model_dir, tmp_path / "g")
    with pytest.warns(UserWarning, match="no 'prompt' column .*'environment'.*the environments make the prompts") as w:
        ours, our_params, our_resets = _train_on_routing_rows(
            AdaptiveGRPOTrainer, AdaptiveGRPOConfig, tool_model_dir, tmp_path / "o", allocator="knapsack"
        )
    assert sum("the environments make the prompts" in str(warning.message) for warning in w) == 1
    assert our_resets == grpo_resets and all(grpo_resets)  # reset() got what GRPOTrainer gives it: nothing of ours
    _assert_trained_as_grpo_trainer(grpo, grpo_params, ours, our_params)
