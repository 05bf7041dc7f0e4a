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
    assert ours._generate(["a", "b"]) == expected
    assert ours._generation_seconds > 0  # timed, on the object's own attribute


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
