"""One generation batch (``trl_adaptive/trainer/generation_batch.py``) against a hand computation of every figure it
logs, on scripted steps whose groups differ in size: Seq-Balance in rounds (36 completions generated, 16 trained), a
skewed plan-ahead allocation (one round, groups of 6 and 2), dynamic sampling (rounds, groups dropped).

The reward function sees every completion generated, once, with its token ids; the ``on_generation_batch_end`` event
says which were trained. From those alone, with NumPy, each test recomputes TRL's own metrics (``reward``,
``reward_std``, ``rewards/<func>/mean|std``, ``frac_reward_zero_std``, ``completions/*``), ``generated/*``,
``tokens/*`` and the completions table, and asks the logged value to be that number.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from datasets import Dataset
from helpers.allocation import SkewedAllocator
from helpers.trainer import SCRIPTED_PROMPTS, SCRIPTS, build_trainer, scripted_rounds_trainer
from transformers import TrainerCallback

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)


class ScriptedLengthReward:
    """SCRIPTS' reward of each prompt's k-th scored completion; keeps every completion it scored: prompt, reward,
    token ids (so lengths and truncation are known without the trainer)."""

    __name__ = "scripted"

    def __init__(self) -> None:
        self.position: dict[str, int] = defaultdict(int)
        self.scored: list[tuple[str, float, list[int]]] = []

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        rewards = []
        for prompt, ids in zip(prompts, completion_ids, strict=True):
            reward = SCRIPTS[prompt][self.position[prompt]]
            self.position[prompt] += 1
            self.scored.append((prompt, reward, list(ids)))
            rewards.append(reward)
        return rewards


class BatchEnds(TrainerCallback):
    def __init__(self) -> None:
        self.batches = []

    def on_generation_batch_end(self, args, state, control, batch, **kwargs):
        self.batches.append(batch)


def _std(values) -> float:
    return float(np.std(np.asarray(values, dtype=np.float64), ddof=1)) if len(values) > 1 else float("nan")


def _expected(trainer, reward: ScriptedLengthReward, batch) -> dict[str, float]:
    """Every figure of the batch, by hand: over the trained completions (TRL's names) and over every completion
    generated (``generated/*``, ``completions/*``, ``tokens/generated``)."""
    record, outcome = batch.outcome, batch.outcome
    record = outcome.record
    scored = reward.scored
    # The record holds the rewards the reward function returned, every one once.
    assert sorted(record.rewards.tolist()) == sorted(r for _, r, _ in scored)
    trained = record.rewards[batch.dispatched]
    groups = record.group_ids[batch.dispatched]
    expected = {
        "reward": float(np.mean(trained)),
        "reward_std": _std(trained),
        "rewards/scripted/mean": float(np.mean(trained)),
        "rewards/scripted/std": _std(trained),
        "generated/reward_mean": float(np.mean(record.rewards)),
        "generated/reward_std": _std(record.rewards),
        "generated/rewards/scripted/mean": float(np.mean(record.rewards)),
    }
    # frac_reward_zero_std: the share of trained completions whose group's std is 0 (the std that scales their
    # advantage: of every completion drawn for the prompt under Seq, of the trained ones otherwise).
    reference_rewards, reference_groups = (
        (record.rewards, record.group_ids) if outcome.baseline_from_all else (trained, groups)
    )
    group_std = {g: _std(reference_rewards[reference_groups == g]) for g in set(groups.tolist())}
    expected["frac_reward_zero_std"] = float(np.mean([np.isclose(group_std[g], 0.0) for g in groups.tolist()]))
    # completions/*: every completion generated; a completion without EOS (or pad) at its end was cut.
    eos = {*trainer.eos_token_ids, trainer.processing_class.pad_token_id}
    lengths = np.array([len(ids) for _, _, ids in scored], dtype=np.float64)
    cut = np.array([ids[-1] not in eos for _, _, ids in scored])
    ended = lengths[~cut] if (~cut).any() else np.zeros(1)
    expected |= {
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(cut.mean()),
        "completions/mean_terminated_length": float(ended.mean()),
        "completions/min_terminated_length": float(ended.min()),
        "completions/max_terminated_length": float(ended.max()),
        "tokens/generated": float(lengths.sum()),
        "tokens/trained": float(record.completion_tokens[batch.dispatched].sum()),
    }
    assert sorted(record.completion_tokens.tolist()) == sorted(lengths.tolist())
    return expected


def _check(trainer, reward, ends, generated: int, trained: int) -> None:
    (batch,) = ends.batches
    (log,) = [log for log in trainer.state.log_history if "reward" in log]
    assert len(reward.scored) == generated and len(batch.dispatched) == trained
    for name, value in _expected(trainer, reward, batch).items():
        if np.isnan(value):
            assert np.isnan(log[name]), name
        else:
            assert log[name] == pytest.approx(value, rel=1e-6, abs=1e-6), name
    # The completions table: the trained completions, each with its advantage, reward and group size.
    logs = trainer._logs
    assert len(logs["completion"]) == len(logs["advantages"]) == len(logs["extra"]["group_size"]) == trained
    np.testing.assert_allclose(logs["advantages"], batch.training_dict["advantages"].tolist(), rtol=1e-6)
    record = batch.outcome.record
    np.testing.assert_array_equal(logs["rewards"]["scripted"], record.rewards[batch.dispatched])
    counts = batch.outcome.trained_counts
    assert list(logs["extra"]["group_size"]) == counts[record.group_ids[batch.dispatched]].tolist()


def test_seq_balance_in_rounds_logs_every_figure_over_the_right_completions(tiny_model_dir, tmp_path):
    """36 completions generated in rounds of 4 (12, 12, 8 and 4 per prompt), 16 trained, 4 per prompt."""
    reward, ends = ScriptedLengthReward(), BatchEnds()
    trainer = scripted_rounds_trainer(tiny_model_dir, tmp_path, reward, log_completions=True)
    trainer.add_callback(ends)
    trainer.train()
    _check(trainer, reward, ends, generated=36, trained=16)
    (log,) = [log for log in trainer.state.log_history if "reward" in log]
    assert log["rounds/generated"] == 36.0 and log["rounds/trained"] == 16.0


class ScriptedLengths:
    """A rollout_func whose n-th completion has 1 + n % 7 tokens, ending in EOS when n is even (else cut): rounds
    differ in their lengths, so a mean of per-round figures and the batch's figure differ."""

    def __init__(self) -> None:
        self.made = 0

    def __call__(self, prompts, trainer):
        tokenizer = trainer.processing_class
        word, eos = tokenizer(" a")["input_ids"][-1], trainer.eos_token_ids[0]
        completion_ids = []
        for _ in prompts:
            length, ends = 1 + self.made % 7, self.made % 2 == 0
            completion_ids.append([word] * (length - 1) + [eos if ends else word])
            self.made += 1
        return {
            "prompt_ids": [tokenizer(p)["input_ids"] for p in prompts],
            "completion_ids": completion_ids,
            "logprobs": [[0.0] * len(ids) for ids in completion_ids],
        }


def test_seq_balance_with_lengths_that_differ_by_round(tiny_model_dir, tmp_path):
    """The same Seq-Balance step, completions of 1 to 7 tokens, half of them cut: completions/* are the batch's."""
    reward, ends = ScriptedLengthReward(), BatchEnds()
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        Dataset.from_dict({"prompt": SCRIPTED_PROMPTS}),
        trainer_kwargs={"rollout_func": ScriptedLengths()},
        reward_funcs=reward,
        per_device_train_batch_size=16,
        max_steps=1,
        allocator="reinforce_ada_seq_balance",
        allocator_kwargs={"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
        log_completions=True,
    )
    trainer.add_callback(ends)
    trainer.train()
    _check(trainer, reward, ends, generated=36, trained=16)
    lengths = [len(ids) for _, _, ids in reward.scored]
    assert len(set(lengths)) == 7 and len(ends.batches[0].outcome.record.round_sizes) > 1


def test_a_skewed_plan_in_one_round_logs_every_figure_over_its_unequal_groups(tiny_model_dir, tmp_path):
    """Two prompts get 6 and 2 completions (one round, trained whole): TRL's view(-1, 4) would mix them."""
    reward, ends = ScriptedLengthReward(), BatchEnds()
    dataset = Dataset.from_dict({"prompt": ["mixed from the start", "solved at its 6th try"]})
    trainer = build_trainer(
        tiny_model_dir, tmp_path, dataset, SkewedAllocator(), reward_funcs=reward, max_steps=1, log_completions=True
    )
    trainer.add_callback(ends)
    trainer.train()
    _check(trainer, reward, ends, generated=8, trained=8)
    assert sorted(ends.batches[0].outcome.trained_counts.tolist()) == [2, 6]


def test_dynamic_sampling_logs_every_figure_over_the_groups_it_kept(tiny_model_dir, tmp_path):
    """Dynamic sampling drops the groups without a spread (never and always solved) and draws again; what it trains
    and what it generated differ."""
    reward, ends = ScriptedLengthReward(), BatchEnds()
    dataset = Dataset.from_dict({"prompt": SCRIPTED_PROMPTS * 2})
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        dataset,
        reward_funcs=reward,
        allocator="uniform",
        dynamic_sampling=True,
        per_device_train_batch_size=8,
        max_steps=1,
        log_completions=True,
    )
    trainer.add_callback(ends)
    trainer.train()
    (batch,) = ends.batches
    generated = len(batch.outcome.record.rewards)
    assert generated > 8  # it drew again
    _check(trainer, reward, ends, generated=generated, trained=8)


def test_a_batch_of_the_wrong_size_is_refused_before_anything_is_generated(tiny_model_dir, tmp_path):
    reward = ScriptedLengthReward()
    trainer = build_trainer(tiny_model_dir, tmp_path, reward_funcs=reward, allocator="uniform")
    rows = [dict(row, prompt_id=i) for i, row in enumerate(trainer.train_dataset) for _ in range(3)][:12]
    trainer.model.train()
    with pytest.raises(RuntimeError, match="Expected 8 rows in the generation batch, got 12"):
        trainer._generate_and_score_completions(rows)
    assert reward.scored == []


def test_tool_figures_of_several_rounds_are_those_of_every_completion_together():
    """TRL logs tools/* per _generate call; over rounds of 8 and 4 completions with 8 and 2 calls (1 and 1 failures)
    the batch's figures are 10 calls / 12 completions and 2 failures / 10 calls, not the mean of the rounds'."""
    from trl_adaptive.trainer.metrics import tool_metrics

    rounds = [
        (8, {"tools/call_frequency": 8 / 8, "tools/failure_frequency": 1 / 8}),
        (4, {"tools/call_frequency": 2 / 4, "tools/failure_frequency": 1 / 2}),
    ]
    assert tool_metrics(rounds) == pytest.approx({"tools/call_frequency": 10 / 12, "tools/failure_frequency": 2 / 10})
    assert tool_metrics(rounds[:1]) == rounds[0][1]  # one round: TRL's own figures
    assert tool_metrics([]) == {}  # no tools
    no_calls = [(4, {"tools/call_frequency": 0.0, "tools/failure_frequency": 0.0})] * 2
    assert tool_metrics(no_calls) == {"tools/call_frequency": 0.0, "tools/failure_frequency": 0.0}
