"""AdaptiveGRPOTrainer on a tiny offline model: GRPO equivalence, variable groups and their metrics, statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.allocation import RecordingAllocator, SkewedAllocator
from helpers.trainer import (
    build_trainer,
    make_dataset,
    param_snapshot,
    reward_has_vowel_e,
    reward_length,
    tiny_config_kwargs,
)
from trl import GRPOConfig, GRPOTrainer

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)

_CONSTANT = ("What", "Name", "Spell", "Say")  # 5 of the 8 prompts get constant rewards: zero-variance groups


def reward_length_or_zero(prompts, completions, **kwargs) -> list[float]:
    return [0.0 if p.startswith(_CONSTANT) else r for p, r in zip(prompts, reward_length(completions), strict=True)]


def reward_e_or_one(prompts, completions, **kwargs) -> list[float]:
    return [
        1.0 if p.startswith(_CONSTANT) else r for p, r in zip(prompts, reward_has_vowel_e(completions), strict=True)
    ]


_TIMING = ("runtime", "per_second", "step_time")


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_uniform_reproduces_grpo_trainer(tiny_model_dir, tmp_path, scale_rewards, aggregation):
    """allocator="uniform" must give GRPOTrainer's advantages, parameters and EVERY logged metric, step for step,
    in every mode, with zero-variance groups in the batches (where frac_reward_zero_std differs between modes)."""
    dataset = make_dataset(8)
    results = []
    for trainer_cls, config_cls in ((GRPOTrainer, GRPOConfig), (AdaptiveGRPOTrainer, AdaptiveGRPOConfig)):
        extra = {"allocator": "uniform"} if config_cls is AdaptiveGRPOConfig else {}
        args = config_cls(
            **tiny_config_kwargs(
                str(tmp_path / trainer_cls.__name__),
                scale_rewards=scale_rewards,
                multi_objective_aggregation=aggregation,
            ),
            **extra,
        )
        trainer = trainer_cls(
            model=str(tiny_model_dir),
            reward_funcs=[reward_length_or_zero, reward_e_or_one],
            args=args,
            train_dataset=dataset,
        )
        advantages = []
        original = trainer._generate_and_score_completions

        def record(inputs, original=original, advantages=advantages):
            output = original(inputs)
            advantages.append(output["advantages"].clone())
            return output

        trainer._generate_and_score_completions = record
        trainer.train()
        results.append((advantages, param_snapshot(trainer.model), trainer.state.log_history))

    (adv_grpo, params_grpo, logs_grpo), (adv_ours, params_ours, logs_ours) = results
    assert len(adv_grpo) == len(adv_ours) == 3
    for a, b in zip(adv_grpo, adv_ours, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(params_ours[n], p) for n, p in _initial_params(tiny_model_dir).items())
    for name, value in params_grpo.items():
        torch.testing.assert_close(params_ours[name], value, rtol=1e-5, atol=1e-6)
    assert len(logs_grpo) == len(logs_ours)
    for log_grpo, log_ours in zip(logs_grpo, logs_ours, strict=True):
        for key, value in log_grpo.items():
            if not any(t in key for t in _TIMING):
                assert log_ours[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    if scale_rewards != "batch" and aggregation == "sum_then_normalize":
        assert any(log.get("frac_reward_zero_std", 0) > 0 for log in logs_grpo)  # the case this test is about


def _initial_params(model_dir) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return param_snapshot(AutoModelForCausalLM.from_pretrained(model_dir))


def test_skewed_allocation_groups_and_logs(tiny_model_dir, tmp_path):
    """One prompt gets most of the budget: every completion is scored in its own group, metrics are logged."""
    allocator = RecordingAllocator(SkewedAllocator())
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        allocator_object=allocator,
        reward_funcs=reward_length,
        max_steps=2,
        log_completions=True,
        allocator="uniform",
    )
    captured = []
    original = trainer._calculate_rewards

    def capture(inputs, prompts, completions, completion_ids_list):
        captured.append([row["prompt_id"] for row in inputs])
        return original(inputs, prompts, completions, completion_ids_list)

    trainer._calculate_rewards = capture
    trainer.train()

    assert [counts for _, counts in allocator.history] == [[6, 2], [6, 2]]
    for (ids, counts), rows in zip(allocator.history, captured, strict=True):
        assert sorted(rows) == sorted(np.repeat(ids, counts).tolist())  # every completion attached to its prompt
    logged = {k: v for log in trainer.state.log_history for k, v in log.items()}
    assert logged["allocation/count_max"] == 6 and logged["allocation/count_min"] == 2
    assert logged["allocation/budget_used"] == logged["allocation/budget"] == 8
    for key in (
        "allocation/effective_gradient_ratio",
        "allocation/effective_gradient_ratio_per_generated",
        "allocation/zero_gradient_ratio_all_wrong",
        "prompt_status/unseen",
    ):
        assert key in logged
    assert sorted(trainer._logs["extra"]["group_size"]) == [2, 2] + [6] * 6
    # Statistics were updated for the prompts the trainer saw.
    assert trainer.prompt_statistics.num_seen == len({i for ids, _ in allocator.history for i in ids})


def test_success_rate_column_after_an_epoch(tiny_model_dir, tmp_path):
    trainer = build_trainer(tiny_model_dir, tmp_path, max_steps=-1, num_train_epochs=1, allocator="uniform")
    assert all(math.isnan(x) for x in trainer.train_dataset["success_rate"])
    trainer.train()
    rates = np.array(trainer.train_dataset["success_rate"])
    assert not np.isnan(rates).any()  # 8 prompts, 2 per step, 4 steps: every prompt seen in epoch 1
    assert ((rates >= 0) & (rates <= 1)).all()
    assert np.allclose(rates * 4, np.round(rates * 4))  # 4 completions per prompt under uniform
