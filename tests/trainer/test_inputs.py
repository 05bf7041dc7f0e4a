"""What a new user meets: the success-rate column as an input, warm starts, and every defect found by trying the
trainer as one (each test is the one that would have caught it)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from helpers.allocation import RecordingAllocator, SkewedAllocator
from helpers.trainer import build_trainer, make_dataset, reward_has_vowel_e, tiny_config_kwargs
from trl import GRPOConfig

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer, PromptStatistics
from trl_adaptive.strategies import get_allocator


# ---------------------------------------------------------------------------------------------------------------------
# The success-rate column as an input
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.trainer
def test_success_rate_column_is_a_prior_so_the_first_epoch_is_adaptive(tiny_model_dir, tmp_path):
    rates = [1.0, 0.25]  # one generation batch of these two prompts: knapsack gives the hard one 6 of 8
    dataset = make_dataset(2).add_column("success_rate", rates)
    allocator = RecordingAllocator(get_allocator("knapsack", max_rollouts=6))
    trainer = build_trainer(
        tiny_model_dir, tmp_path, dataset, allocator, allocator="knapsack", max_rollouts=6, max_steps=1
    )
    np.testing.assert_array_equal(trainer.train_dataset["success_rate"], rates)  # shown before any step
    trainer.train()
    ids, counts = allocator.history[0]
    assert dict(zip(ids, counts, strict=True)) == {0: 2, 1: 6}  # the first step is already adaptive
    assert trainer.prompt_statistics.batch([1]).prior_attempts.tolist() == [trainer.args.success_rate_prior_weight]


@pytest.mark.trainer
def test_prior_weight_zero_ignores_the_column(tiny_model_dir, tmp_path):
    dataset = make_dataset(8).add_column("success_rate", [0.0, 1.0] * 4)
    allocator = RecordingAllocator(get_allocator("knapsack", max_rollouts=6))
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        dataset,
        allocator,
        allocator="knapsack",
        max_rollouts=6,
        max_steps=2,
        success_rate_prior_weight=0.0,
    )
    trainer.train()
    assert all(len(set(counts)) == 1 for _, counts in allocator.history)
    # Not input, so not checked either: a column of labels is replaced by the store's rates.
    labels = make_dataset(8).add_column("success_rate", ["high", "low"] * 4)
    trainer = build_trainer(tiny_model_dir, tmp_path / "labels", labels, success_rate_prior_weight=0.0)
    assert all(math.isnan(rate) for rate in trainer.train_dataset["success_rate"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([5.0] + [0.5] * 7, r"outside \[0, 1\].*5\.0"),
        ([1] * 8, "must hold floats"),
        (["high"] * 8, "must hold floats"),
    ],
)
def test_bad_success_rate_column_fails_at_construction(tiny_model_dir, tmp_path, values, message):
    dataset = make_dataset(8).add_column("success_rate", values)
    with pytest.raises((TypeError, ValueError), match=message):
        build_trainer(tiny_model_dir, tmp_path, dataset)


@pytest.mark.trainer
def test_reward_functions_see_the_current_success_rate(tiny_model_dir, tmp_path):
    seen: list[list[float]] = []

    def reward(completions, success_rate, **kwargs):
        seen.append(list(success_rate))
        return reward_has_vowel_e(completions)

    trainer = build_trainer(tiny_model_dir, tmp_path, reward_funcs=reward, max_steps=6, allocator="uniform")
    trainer.train()
    assert all(math.isnan(x) for batch in seen[:4] for x in batch)  # epoch 1: nothing measured yet
    assert not any(math.isnan(x) for batch in seen[4:] for x in batch)  # epoch 2: last epoch's rates, live


@pytest.mark.trainer
def test_statistics_export_to_a_dataset_and_warm_start(tiny_model_dir, tmp_path):
    first = build_trainer(tiny_model_dir, tmp_path / "a", allocator="knapsack", max_rollouts=6, max_steps=4)
    first.train()  # one epoch: every prompt has a rate
    exported = first.prompt_statistics.to_dataset()
    assert {"prompt_id", "prompt_fingerprint", "success_rate"} <= set(exported.column_names)
    exported.to_parquet(str(tmp_path / "stats.parquet"))
    warm = PromptStatistics.from_dataset(Dataset.from_parquet(str(tmp_path / "stats.parquet")))
    allocator = RecordingAllocator(get_allocator("knapsack", max_rollouts=6))
    second = build_trainer(
        tiny_model_dir, tmp_path / "b", None, allocator, {"statistics": warm}, max_rollouts=6, max_steps=1
    )
    rates = first.prompt_statistics.success_rates(range(8))
    assert not np.isnan(rates).any()
    np.testing.assert_array_equal(second.train_dataset["success_rate"], rates)
    second.train()
    # The warm store's rates drive the very first allocation of the new run.
    ids, counts = allocator.history[0]
    assert counts == get_allocator("knapsack", max_rollouts=6).allocate(rates[ids], 8).counts.tolist()


@pytest.mark.trainer
def test_warm_start_with_the_refreshed_column_counts_the_evidence_once(tiny_model_dir, tmp_path):
    """A previous run's store plus its refreshed dataset (whose success_rate column repeats that store) must not
    add the column as a prior on top: the evidence is counted once."""
    first = build_trainer(tiny_model_dir, tmp_path / "a", allocator="knapsack", max_rollouts=6, max_steps=4)
    first.train()
    refreshed = first.train_dataset  # success_rate column = the store's rates
    warm = PromptStatistics.from_dataset(first.prompt_statistics.to_dataset())
    second = build_trainer(
        tiny_model_dir, tmp_path / "b", refreshed, None, {"statistics": warm}, max_rollouts=6, max_steps=1
    )
    ids = np.arange(8)
    before, after = first.prompt_statistics.batch(ids), second.prompt_statistics.batch(ids)
    np.testing.assert_array_equal(after.evidence, before.evidence)  # no pseudo-observations added
    np.testing.assert_array_equal(after.beta_a, before.beta_a)
    np.testing.assert_array_equal(
        second.prompt_statistics.success_rates(ids), first.prompt_statistics.success_rates(ids)
    )


@pytest.mark.trainer
def test_warm_start_from_other_prompts_is_refused(tiny_model_dir, tmp_path):
    first = build_trainer(tiny_model_dir, tmp_path / "a", max_steps=4)
    first.train()
    other = Dataset.from_dict({"prompt": [f"Another question {i}" for i in range(8)]})
    with pytest.raises(ValueError, match=r"prompt \(text or images\) differs"):
        build_trainer(tiny_model_dir, tmp_path / "b", other, trainer_kwargs={"statistics": first.prompt_statistics})


# ---------------------------------------------------------------------------------------------------------------------
# Defects found by a new user
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.trainer
def test_an_empty_statistics_store_is_kept(tiny_model_dir, tmp_path):
    store = PromptStatistics(decay=0.5)
    trainer = build_trainer(
        tiny_model_dir, tmp_path, trainer_kwargs={"statistics": store}, allocator="reinforce_ada_est", est_decay=0.5
    )
    assert trainer.prompt_statistics is store and trainer.prompt_statistics.decay == 0.5


def test_a_store_with_another_threshold_is_an_error(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"success_threshold=0.5"):
        build_trainer(tiny_model_dir, tmp_path, trainer_kwargs={"statistics": PromptStatistics(success_threshold=0.5)})


@pytest.mark.trainer
def test_the_posterior_settings_reach_the_store_and_a_passed_store_must_match(tiny_model_dir, tmp_path):
    settings = {"posterior_half_life": 4.0, "posterior_prior_a": 0.5, "posterior_prior_b": 0.5}
    trainer = build_trainer(tiny_model_dir, tmp_path, allocator="bayes_knapsack", **settings)
    assert {k: getattr(trainer.prompt_statistics, k) for k in settings} == settings
    with pytest.raises(ValueError, match=r"built with posterior_half_life=None.*config has posterior_half_life=4.0"):
        build_trainer(
            tiny_model_dir, tmp_path, trainer_kwargs={"statistics": PromptStatistics()}, posterior_half_life=4.0
        )


def test_allocator_kwargs_contradicting_the_bounds_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"allocator_kwargs sets max_rollouts=16.*max_rollouts=8"):
        AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), max_rollouts=8, allocator_kwargs={"max_rollouts": 16})
    with pytest.raises(ValueError, match=r"allocator_kwargs sets min_rollouts=3"):
        AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), allocator_kwargs={"min_rollouts": 3})


@pytest.mark.trainer
def test_remove_unused_columns_keeps_the_id_column(tiny_model_dir, tmp_path):
    trainer = build_trainer(tiny_model_dir, tmp_path, max_steps=1, remove_unused_columns=True)
    trainer.train()
    assert trainer.state.global_step == 1


def test_a_dataset_smaller_than_one_generation_batch_is_an_error(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"train_dataset has 1 prompts but one generation batch takes 2"):
        build_trainer(tiny_model_dir, tmp_path, make_dataset(1))


@pytest.mark.trainer
def test_environments_owning_the_data_are_seen_also_when_passed_positionally(tiny_model_dir, tmp_path):
    """An environment_factory passed positionally without a train_dataset is an environment owning the data (the
    warning of environment_data.py, then GRPOTrainer's own checks: this factory's objects have no reset()), not a
    missing dataset."""
    import inspect

    from trl import GRPOTrainer

    names = list(inspect.signature(GRPOTrainer.__init__).parameters)[5:]
    args = AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)))
    positional = [None] * names.index("environment_factory") + [lambda: None]
    with pytest.warns(UserWarning, match="the environment owns the data"), pytest.raises(ValueError) as caught:
        AdaptiveGRPOTrainer(str(tiny_model_dir), reward_has_vowel_e, args, None, *positional)
    assert "train_dataset" not in str(caught.value)


@pytest.mark.trainer
def test_cero_plans_for_the_runs_epochs_and_logs_its_price(tiny_model_dir, tmp_path):
    trainer = build_trainer(
        tiny_model_dir, tmp_path, allocator="cero", max_steps=-1, num_train_epochs=2, max_rollouts=6
    )
    assert trainer.allocator.num_epochs == 2
    trainer.train()
    assert any("allocation/cero_mu" in log for log in trainer.state.log_history)
    by_steps = build_trainer(tiny_model_dir, tmp_path / "b", allocator="cero", max_steps=10, max_rollouts=6)
    assert by_steps.allocator.num_epochs == 3  # 4 steps per epoch over 8 prompts: 10 steps is 3 epochs


@pytest.mark.trainer
def test_evaluation_completions_table_has_evaluation_group_sizes(tiny_model_dir, tmp_path):
    import pandas as pd

    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        None,
        RecordingAllocator(SkewedAllocator(min_rollouts=2, max_rollouts=6)),
        max_steps=1,
        log_completions=True,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=8,
        num_generations_eval=4,
        trainer_kwargs={"eval_dataset": make_dataset(2)},
    )
    trainer.train()
    logged = trainer._logs["extra"]["group_size"]
    assert list(logged)[-8:] == [4] * 8  # the evaluation batch, not the skewed training batch's [6, 2]
    assert len(logged) == len(trainer._logs["prompt"])
    del pd


# ---------------------------------------------------------------------------------------------------------------------
# Error messages whose advice works (the advice itself is tested)
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.trainer
def test_grpo_config_advice_works(tiny_model_dir, tmp_path):
    grpo = GRPOConfig(**tiny_config_kwargs(str(tmp_path)))
    with pytest.raises(TypeError, match=r"AdaptiveGRPOConfig.from_grpo_config") as error:
        AdaptiveGRPOTrainer(
            model=str(tiny_model_dir), reward_funcs=reward_has_vowel_e, args=grpo, train_dataset=make_dataset(8)
        )
    assert "from_grpo_config(your_grpo_config" in str(error.value)
    converted = AdaptiveGRPOConfig.from_grpo_config(grpo, allocator="uniform")
    assert converted.generation_batch_size == grpo.generation_batch_size and converted.allocator == "uniform"
    AdaptiveGRPOTrainer(
        model=str(tiny_model_dir), reward_funcs=reward_has_vowel_e, args=converted, train_dataset=make_dataset(8)
    )


@pytest.mark.trainer
def test_dataset_dict_advice_works(tiny_model_dir, tmp_path):
    splits = DatasetDict({"train": make_dataset(8)})
    with pytest.raises(TypeError, match=re.escape("train_dataset=dataset['train']")):
        build_trainer(tiny_model_dir, tmp_path, splits)
    build_trainer(tiny_model_dir, tmp_path, splits["train"])


def test_use_vllm_without_vllm_points_at_the_stand_in_server(tiny_model_dir, tmp_path):
    with pytest.raises(ImportError, match=r"trl-adaptive-serve.*cpu_seam"):
        build_trainer(tiny_model_dir, tmp_path, use_vllm=True, vllm_mode="server")


def test_missing_prompt_id_names_the_rows(tiny_model_dir, tmp_path):
    dataset = make_dataset(4).add_column("prompt_id", [0, None, 2, None])
    with pytest.raises(ValueError, match=r"no id at rows \[1, 3\]"):
        build_trainer(tiny_model_dir, tmp_path, dataset)


@pytest.mark.parametrize(
    ("knobs", "warns"),
    [
        ({"gradient_accumulation_steps": 2, "save_steps": 1}, False),  # steps_per_generation = GA: every step ends one
        ({"steps_per_generation": 2, "per_device_train_batch_size": 4, "save_steps": 1}, True),
        ({"steps_per_generation": 2, "per_device_train_batch_size": 4, "save_steps": 2}, False),
    ],
)
@pytest.mark.trainer
def test_save_steps_inside_a_generation_batch_warns(tiny_model_dir, tmp_path, knobs, warns):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_trainer(tiny_model_dir, tmp_path, save_strategy="steps", **knobs)
    assert any("do not end on a generation batch" in str(w.message) for w in caught) == warns
