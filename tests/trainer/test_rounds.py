"""Sampling in rounds in the trainer: Reinforce-Ada Seq, DAPO dynamic sampling, CERO's pacing and the pilot round, on
scripted rewards. (One request per round in vLLM server mode: test_vllm_server_mode.py; one generate call per round
in colocate mode: test_vllm_colocate_mode.py.)

A scripted reward gives each prompt a fixed sequence of successes (1.0) and failures (0.0), consumed in the order the
prompt's completions are scored, so the exit rules, the number of rounds and what is trained are known in advance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers.allocation import WeightedUniform
from helpers.trainer import (
    SCRIPTED_PROMPTS,
    ScriptedReward,
    build_trainer,
    make_dataset,
    reward_has_vowel_e,
)
from transformers import TrainerCallback

from trl_adaptive.allocation import CeroAllocator
from trl_adaptive.allocation.bayes_knapsack import BayesKnapsackAllocator, absorb
from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE, read_allocation_log

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)

SEQ_POS = {
    "allocator": "reinforce_ada_seq_pos",
    "allocator_kwargs": {"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
}


def _trainer(model_dir, tmp_path, reward, dataset=None, **config):
    """One step of 16 completions over the four scripted prompts, unless ``config`` says otherwise."""
    dataset = dataset or Dataset.from_dict({"prompt": SCRIPTED_PROMPTS})
    config = {"per_device_train_batch_size": 16, "max_steps": 1, **config}
    return build_trainer(model_dir, tmp_path, dataset, reward_funcs=reward, **config)


def _last_train_log(trainer) -> dict:
    return next(log for log in reversed(trainer.state.log_history) if "rounds/per_step" in log)


# ---------------------------------------------------------------------------------------------------------------------
# Reinforce-Ada Seq
# ---------------------------------------------------------------------------------------------------------------------
def test_seq_pos_samples_until_one_success_within_the_caps(tiny_model_dir, tmp_path):
    """4 prompts x n=4 = 16 trained; rounds of 4 up to 12 per prompt. Never-solved: 3 rounds (12); always solved:
    1 round; solved at the 6th try: 2 rounds (8: its 6th completion is in round 2); mixed: 1 round."""
    reward = ScriptedReward()
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        reward,
        **SEQ_POS,
    )
    trainer.train()
    attempts = trainer.prompt_statistics.batch(range(4)).attempts
    assert attempts.tolist() == [12.0, 4.0, 8.0, 4.0]  # every generated completion is evidence, counted once
    log = _last_train_log(trainer)
    assert log["rounds/per_step"] == 3 and log["rounds/generated"] == 28 and log["rounds/trained"] == 16
    # the effective-gradient ratio over trained completions, and the same completions over the 28 generated
    per_generated = log["allocation/effective_gradient_ratio"] * 16 / 28
    assert log["allocation/effective_gradient_ratio_per_generated"] == pytest.approx(per_generated)
    assert log["rounds/prompts_finished"] == 3 and log["rounds/prompts_unfinished"] == 1
    assert log["rounds/inference_cap"] == 128
    assert len(reward.calls) == 3  # one scoring call per round, none again in the training pass
    assert [len(c) for c in reward.calls] == [16, 8, 4]


def test_seq_balance_trains_a_balanced_subset_with_the_full_sample_baseline(tiny_model_dir, tmp_path):
    """Balance with n=4: done at >= 2 successes and >= 2 failures. 'solved at its 6th try' draws 8 (5 fails, 3
    successes), trains 2 + 2, and its baseline is the mean of all 8: 3/8."""
    reward = ScriptedReward()
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        reward,
        allocator="reinforce_ada_seq_balance",
        allocator_kwargs={"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
        scale_rewards="none",
    )
    captured = {}

    class BatchEnd(TrainerCallback):
        def on_generation_batch_end(self, args, state, control, batch, **kwargs):
            captured["advantages"] = batch.training_dict["advantages"].clone()
            captured["rewards"] = torch.as_tensor(batch.outcome.record.rewards[batch.dispatched])  # trained ones

    trainer.add_callback(BatchEnd())
    trainer.train()
    attempts = trainer.prompt_statistics.batch(range(4)).attempts.tolist()
    assert attempts == [12.0, 12.0, 8.0, 4.0]
    rewards = captured["rewards"]
    assert len(rewards) == 16
    # Advantages are reward - mean over ALL completions drawn for the prompt (scale_rewards="none").
    means = {0: 0.0, 1: 1.0, 2: 3 / 8, 3: 0.5}
    expected = sorted(float(r - m) for r, m in zip(rewards.tolist(), _group_means(trainer, means), strict=True))
    np.testing.assert_allclose(sorted(captured["advantages"].tolist()), expected, atol=1e-6)


def _group_means(trainer, means):
    """The per-row baseline in dispatch order (rounds trains prompt-major with n per prompt)."""
    return [means[g] for g in range(4) for _ in range(trainer.num_generations)]


# ---------------------------------------------------------------------------------------------------------------------
# DAPO dynamic sampling
# ---------------------------------------------------------------------------------------------------------------------
def test_dynamic_sampling_replaces_zero_variance_groups(tiny_model_dir, tmp_path):
    """8 prompts, 2 per batch of 8 completions: a batch holding a solved or unsolvable prompt draws another."""
    prompts = SCRIPTED_PROMPTS * 2
    dataset = Dataset.from_dict({"prompt": prompts})
    reward = ScriptedReward()
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        reward,
        dataset,
        per_device_train_batch_size=8,
        allocator="uniform",
        dynamic_sampling=True,
        max_steps=3,
    )
    trainer.train()
    logs = [log for log in trainer.state.log_history if "dynamic_sampling/groups_dropped" in log]
    assert len(logs) == 3
    assert any(log["dynamic_sampling/prompts_drawn"] > 0 for log in logs)
    # A batch is trained on mixed groups only unless the bound was hit.
    for log in logs:
        if log["dynamic_sampling/filled"] == 0:
            assert log["frac_reward_zero_std"] == 0


def test_dynamic_sampling_on_all_wrong_data_finishes_with_a_warning(tiny_model_dir, tmp_path):
    dataset = Dataset.from_dict({"prompt": ["never solved"] * 8, "prompt_id": list(range(8))})
    with pytest.warns(UserWarning, match="filled with completions of dropped"):
        trainer = _trainer(
            tiny_model_dir,
            tmp_path,
            ScriptedReward(),
            dataset,
            per_device_train_batch_size=8,
            allocator="knapsack",
            max_rollouts=6,
            dynamic_sampling=True,
            dynamic_sampling_max_rounds=2,
            max_steps=2,
        )
        trainer.train()
    logs = [log for log in trainer.state.log_history if "dynamic_sampling/filled" in log]
    assert [log["dynamic_sampling/filled"] for log in logs] == [8.0, 8.0]
    assert all(log["rounds/per_step"] == 3 for log in logs)
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])


@pytest.mark.parametrize("strategy", ["weighted", "reinforce_ada_est"])
def test_allocator_weights_scale_the_advantages_under_dynamic_sampling(tiny_model_dir, tmp_path, strategy):
    """Est's hybrid weights (and a user allocator's) multiply every trained completion's advantage, also when
    dynamic sampling draws further prompts: the weights of each allocation reach its prompts."""
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        ScriptedReward(),
        Dataset.from_dict({"prompt": SCRIPTED_PROMPTS * 2}),
        per_device_train_batch_size=8,
        max_steps=2,
        dynamic_sampling=True,
        scale_rewards="none",
        allocator="reinforce_ada_est" if strategy != "weighted" else "uniform",
    )
    if strategy == "weighted":
        trainer.procedure.inner.allocator = WeightedUniform(max_rollouts=8)
    seen = []

    class BatchEnd(TrainerCallback):
        def on_generation_batch_end(self, args, state, control, batch, **kwargs):
            advantages = batch.training_dict["advantages"]
            rewards = torch.as_tensor(batch.outcome.record.rewards[batch.dispatched])  # the trained ones
            seen.append((batch.outcome, batch.dispatched, advantages.clone(), rewards.clone()))

    trainer.add_callback(BatchEnd())
    trainer.train()
    drawn = 0
    for outcome, dispatched, advantages, rewards in seen:
        record_ = outcome.record
        groups = record_.group_ids[dispatched]
        assert record_.weights is not None  # Est's hybrid always sets weights (equal while nothing is known)
        assert strategy != "weighted" or np.ptp(record_.weights[groups]) > 0
        means = {g: rewards[torch.as_tensor(groups == g)].mean() for g in np.unique(groups)}
        expected = [(float(r) - float(means[g])) * record_.weights[g] for r, g in zip(rewards, groups, strict=True)]
        np.testing.assert_allclose(advantages.numpy(), expected, atol=1e-5)
        drawn += len(record_.prompt_ids) - 2
    assert drawn > 0  # the weights of prompts drawn in later rounds were applied too


def test_cero_state_moves_once_per_step_under_dynamic_sampling(tiny_model_dir, tmp_path):
    """Rounds are not steps: 3 steps with extra rounds give 3 dual updates (the old loop gave one per round)."""
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        ScriptedReward(),
        Dataset.from_dict({"prompt": SCRIPTED_PROMPTS * 2}),
        per_device_train_batch_size=8,
        max_steps=3,
        dynamic_sampling=True,
        allocator="cero",
        max_rollouts=4,
        allocator_kwargs={"pacing": False},
    )
    trainer.train()
    assert any(log.get("rounds/per_step", 1) > 1 for log in trainer.state.log_history)
    assert trainer.allocator.steps == 3
    batches = {i for r in read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE)) for i in r["prompt_ids"][:2]}
    ids = np.asarray(trainer.train_dataset["prompt_id"])
    sampled = set(ids[trainer.prompt_statistics.batch(ids).attempts > 0].tolist())
    assert batches <= set(trainer.allocator.theta) <= batches | sampled  # a drawn prompt given nothing keeps its dual


def test_shaped_rewards_fill_adds_no_gradient(tiny_model_dir, tmp_path):
    """Rewards 0.6 / 0.9 with success_threshold 0.5: every group is 'all correct' by the success rule yet has reward
    variance, so the fill would carry advantage; its weight 0 removes it."""
    dataset = Dataset.from_dict({"prompt": ["shaped, always correct"] * 8, "prompt_id": list(range(8))})
    outputs, trained_rewards = [], []

    class BatchEnd(TrainerCallback):
        def on_generation_batch_end(self, args, state, control, batch, **kwargs):
            trained_rewards.append(batch.outcome.record.rewards[batch.dispatched])

    with pytest.warns(UserWarning, match="advantage weight 0"):
        trainer = _trainer(
            tiny_model_dir,
            tmp_path,
            ScriptedReward(),
            dataset,
            per_device_train_batch_size=8,
            max_steps=1,
            dynamic_sampling=True,
            dynamic_sampling_max_rounds=1,
            success_threshold=0.5,
        )
        generate = trainer._generate_and_score_completions
        trainer._generate_and_score_completions = lambda inputs: outputs.append(generate(inputs)) or outputs[-1]
        trainer.add_callback(BatchEnd())
        trainer.train()
    assert np.std(trained_rewards[0]) > 0
    assert torch.count_nonzero(outputs[0]["advantages"]) == 0


def test_dynamic_sampling_rejects_a_sequential_allocator(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="already samples until each prompt shows signal"):
        _trainer(tiny_model_dir, tmp_path, ScriptedReward(), allocator="reinforce_ada_seq_pos", dynamic_sampling=True)


# ---------------------------------------------------------------------------------------------------------------------
# CERO with pacing: its price decides which prompts are sampled
# ---------------------------------------------------------------------------------------------------------------------
def _cero_prompt_sets(model_dir, tmp_path, eta_mu, pacing):
    trainer = _trainer(
        model_dir,
        tmp_path,
        reward_has_vowel_e,
        make_dataset(8),
        per_device_train_batch_size=8,
        max_steps=4,
        allocator="cero",
        max_rollouts=6,
        allocator_kwargs={"eta_mu": eta_mu, "pacing": pacing},
    )
    trainer.train()
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    return [(r["prompt_ids"], r["counts"]) for r in records], trainer


def test_cero_price_step_changes_the_allocation_only_with_pacing(tiny_model_dir, tmp_path):
    slow, _ = _cero_prompt_sets(tiny_model_dir, tmp_path / "slow", 1e-6, True)
    fast, trainer = _cero_prompt_sets(tiny_model_dir, tmp_path / "fast", 10.0, True)
    assert slow != fast  # a high price skips the batch's prompts and draws others
    assert any(len(ids) > 2 for ids, _ in fast) and all(len(ids) == 2 for ids, _ in slow)
    assert all(sum(counts) == 8 for _, counts in slow + fast)  # every step still spends exactly B
    assert any("allocation/cero_mu" in log for log in trainer.state.log_history)
    fixed_slow, _ = _cero_prompt_sets(tiny_model_dir, tmp_path / "fixed-slow", 1e-6, False)
    fixed_fast, _ = _cero_prompt_sets(tiny_model_dir, tmp_path / "fixed-fast", 10.0, False)
    assert fixed_slow == fixed_fast  # the fixed-prompt mapping: mu changes nothing


def test_cero_pacing_trains_drawn_prompts_on_their_own_rows(tiny_model_dir, tmp_path):
    """Prompts 0-3 are priced out (theta below mu): a batch holding them draws other prompts, which are sampled and
    trained. Every completion must be generated and scored on its own prompt's row."""
    dataset = make_dataset(8)
    text_of = dict(enumerate(dataset["prompt"]))  # the trainer numbers the rows
    pairs = []

    def reward(prompts, completions, prompt_id, **kwargs):
        pairs.extend(zip(prompt_id, prompts, strict=True))
        return [float(len(str(c)) % 2) for c in completions]

    cero = CeroAllocator(min_rollouts=2, max_rollouts=4)  # B = 8: two prompts of 4
    cero.theta, cero.mu = {i: 1e-9 for i in range(4)}, 1e-6
    trainer = build_trainer(
        tiny_model_dir, tmp_path, dataset, cero, reward_funcs=reward, per_device_train_batch_size=8, max_steps=4
    )
    trainer.train()
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    drawn_sampled = [(r["prompt_ids"][2:], r["counts"][2:]) for r in records if any(r["counts"][2:])]
    assert drawn_sampled, records  # some step trained prompts drawn beyond its batch
    assert pairs and all(text_of[i] == text for i, text in pairs)


# ---------------------------------------------------------------------------------------------------------------------
# The pilot round (bayes_knapsack): k per prompt, then the rest of the budget on the posterior
# ---------------------------------------------------------------------------------------------------------------------
def test_pilot_round_then_knapsack_on_the_posterior(tiny_model_dir, tmp_path):
    reward = ScriptedReward()
    trainer = _trainer(tiny_model_dir, tmp_path, reward, allocator="bayes_knapsack", pilot_rollouts=2, max_rollouts=8)
    before = trainer.prompt_statistics.batch(range(4))
    trainer.train()
    assert [len(c) for c in reward.calls] == [8, 8]  # the pilot (2 x 4), then the rest of 16: one call per round
    attempts = trainer.prompt_statistics.batch(range(4)).attempts
    assert attempts.sum() == 16  # every completion of both rounds is trained on and counted once
    # Round two is the knapsack on the posterior that absorbed the pilot (scripts: 0/2, 2/2, 0/2, 1/2 correct).
    pilot = absorb(before, np.array([0, 2, 0, 1]), np.array([2, 2, 2, 2]))
    extra = BayesKnapsackAllocator(max_rollouts=8).allocate_remaining(pilot, 8, np.array([2, 2, 2, 2])).counts
    assert attempts.tolist() == (2 + extra).astype(float).tolist()
    log = _last_train_log(trainer)
    assert log["rounds/per_step"] == 2 and log["rounds/trained"] == 16 and log["pilot/completions"] == 8


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"allocator": "bayes_knapsack", "pilot_rollouts": 4}, r"pilot_rollouts=4 x 4 prompts = 16 .* nothing"),
        ({"allocator": "knapsack", "pilot_rollouts": 2}, r"needs allocator='bayes_knapsack'"),
        ({"allocator": "reinforce_ada_seq_pos", "pilot_rollouts": 2}, r"needs allocator='bayes_knapsack'"),
    ],
)
def test_bad_pilot_fails_at_construction(tiny_model_dir, tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        _trainer(tiny_model_dir, tmp_path, ScriptedReward(), **config)
