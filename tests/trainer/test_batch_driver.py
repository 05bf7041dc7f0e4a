"""The batch driver without a trainer: ``BatchDriver`` run against a generation port that is not TRL.

The port below answers every request from a fixed table (prompt id -> the sequence of rewards its completions get, in
the order they are generated; every completion 3 tokens long per prompt id), so what the driver must do with it is
known: GRPO's advantages for equal groups, Seq's extra rounds replayed (never regenerated) in the training pass, the
store counting every completion generated, and the metrics and ``allocations.jsonl`` line leaving as data.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers.trainer import tiny_config_kwargs

from trl_adaptive import AdaptiveGRPOConfig
from trl_adaptive.report.run_files import read_allocation_log
from trl_adaptive.trainer.adaptive_state import AdaptiveState, checked_training_prompts
from trl_adaptive.trainer.batch_driver import BatchDriver
from trl_adaptive.trainer.port import BatchSettings
from trl_adaptive.trainer.reward_checks import RewardChecks

# prompt id -> its completions' rewards, in generation order (cycled)
SCRIPT = {0: [1.0, 0.0], 1: [0.0], 2: [1.0], 3: [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]}


class ScriptedPort:
    """One process; generation is a lookup in ``SCRIPT``; every call is recorded."""

    num_processes, process_index, is_main_process = 1, 0, True

    def __init__(self, args: AdaptiveGRPOConfig, log_dir: str | None = None) -> None:
        self.args, self.log_dir, self.step = args, log_dir, 0
        self.next_reward = {i: itertools.cycle(rewards) for i, rewards in SCRIPT.items()}
        self.rounds: list[list[int]] = []  # prompt ids of each round's rows
        self.passes: list[tuple[list[int], bool]] = []  # prompt ids of the training pass's rows, replayed?
        self.metrics: dict[str, list[float]] = defaultdict(list)
        self.group_logs: list[tuple] = []
        self.ended: list = []  # each batch's GenerationBatchEnd

    def share(self, value):
        return value

    def gather(self, items):
        return list(items)

    def settings(self) -> BatchSettings:
        settings = BatchSettings.from_args(
            self.args,
            self.step,
            scale_rewards="group",
            multi_objective_aggregation="sum_then_normalize",
            reward_weights=torch.ones(1),
            reward_func_names=["scripted"],
        )
        return dataclasses.replace(settings, allocation_log_dir=self.log_dir, engine="scripted")

    def _generate(self, rows):
        ids = [row["prompt_id"] for row in rows]
        rewards = torch.tensor([[next(self.next_reward[i])] for i in ids])
        samples = [(None, [0] * 3, None, f"completion of {i}", None, None, [], {}) for i in ids]
        return ids, samples, rewards

    def generate_round(self, rows):
        ids, samples, rewards = self._generate(rows)
        self.rounds.append(ids)
        return samples, rewards

    def training_pass(self, rows, total, replay):
        ids = [row["prompt_id"] for row in rows]
        self.passes.append((ids, replay is not None))
        if replay is not None:
            return {"prompt_ids": ids}, replay.rewards_per_func, None
        _, _, rewards = self._generate(rows)
        return {"prompt_ids": ids}, rewards, np.full(total, 3.0)

    def take_generation_seconds(self) -> float:
        return 0.0

    def log(self, metrics):
        for name, value in metrics.items():
            self.metrics[name].append(value)

    def replace_group_logs(self, zero_std_fraction, advantages, group_sizes):
        self.group_logs.append((zero_std_fraction, advantages, group_sizes))

    def batch_end(self, batch):
        self.ended.append(batch)


def _driver(tmp_path, log_dir=None, **config) -> tuple[BatchDriver, ScriptedPort, Dataset]:
    args = AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path), per_device_train_batch_size=16, **config))
    prompts = checked_training_prompts(Dataset.from_dict({"prompt": [f"prompt {i}" for i in SCRIPT]}), args)
    state = AdaptiveState.for_run(prompts, args.build_procedure(), None, args)
    port = ScriptedPort(args, log_dir)
    return BatchDriver(port, state, None, RewardChecks("group")), port, prompts.dataset


def _sampler_rows(dataset: Dataset, group_size: int = 4) -> list[dict]:
    """TRL's sampler rows of one batch: every prompt, each repeated ``group_size`` times in a row."""
    return [dict(row) for row in dataset for _ in range(group_size)]


def test_uniform_trains_grpo_groups_with_grpo_advantages_and_logs_as_data(tmp_path):
    driver, port, dataset = _driver(tmp_path, tmp_path / "logs", allocator="uniform")
    (tmp_path / "logs").mkdir()
    output = driver.run(_sampler_rows(dataset))
    assert port.rounds == [] and port.passes == [([0] * 4 + [1] * 4 + [2] * 4 + [3] * 4, False)]  # one planned pass
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])  # prompt 0's group; the others have no spread
    expected = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    torch.testing.assert_close(output["advantages"][:4], expected)
    assert torch.count_nonzero(output["advantages"][4:]) == 0
    assert port.metrics["allocation/budget_used"] == [16.0] and port.metrics["tokens/generated"] == [48.0]
    assert port.metrics["allocation/effective_gradient_ratio"] == [0.25]
    zero_std, advantages, group_sizes = port.group_logs[0]
    assert zero_std == 0.75 and group_sizes == [4] * 16 and advantages == output["advantages"].tolist()
    np.testing.assert_array_equal(driver.state.prompt_statistics.batch(list(SCRIPT)).attempts, [4, 4, 4, 4])
    (ended,) = port.ended  # the on_generation_batch_end event's data, once per batch
    assert ended.training_dict is output and ended.outcome.trained_counts.tolist() == [4, 4, 4, 4]
    assert (
        ended.outcome.record.prompt_ids[ended.outcome.record.group_ids[ended.dispatched]].tolist()
        == (port.passes[0][0])
    )
    assert ended.expected_tokens.shape == (4,)  # before the batch's lengths were measured
    assert port.metrics["prompts/revisited"] == [0.0] and "prompts/batches_since_last_visit_mean" not in port.metrics
    port.step = 1
    driver.run(_sampler_rows(dataset))  # the same four prompts again, one batch later
    assert port.metrics["prompts/revisited"][-1] == 4.0 and port.metrics["prompts/batches_since_last_visit_max"] == [
        1.0
    ]
    line, _ = read_allocation_log(str(tmp_path / "logs" / "allocations.jsonl"))
    assert line["counts"] == [4, 4, 4, 4] and line["engine"] == "scripted" and line["successes"] == [2, 0, 4, 0]


def test_rounds_are_generated_through_the_port_and_replayed_in_the_training_pass(tmp_path):
    """Seq-Pos (rounds of 4, up to 12 per prompt): prompt 1 never succeeds (3 rounds), prompt 3 succeeds at its 6th
    try (2 rounds), prompts 0 and 2 stop after one. The training pass replays 16 of the 28 completions generated."""
    driver, port, dataset = _driver(
        tmp_path,
        allocator="reinforce_ada_seq_pos",
        allocator_kwargs={"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
    )
    output = driver.run(_sampler_rows(dataset))
    generated = [i for round_ids in port.rounds for i in round_ids]
    assert sorted(np.bincount(generated).tolist()) == [4, 4, 8, 12]
    assert np.bincount(generated).tolist() == [4, 12, 4, 8]
    ((trained, replayed),) = port.passes
    assert replayed and len(trained) == 16 and len(output["advantages"]) == 16
    np.testing.assert_array_equal(driver.state.prompt_statistics.batch(list(SCRIPT)).attempts, [4, 12, 4, 8])
    assert port.metrics["rounds/generated"] == [28.0] and port.metrics["rounds/trained"] == [16.0]
    assert port.metrics["tokens/generated"] == [84.0] and port.metrics["tokens/trained"] == [48.0]


def test_a_batch_of_the_wrong_size_is_refused_before_anything_is_generated(tmp_path):
    driver, port, dataset = _driver(tmp_path, allocator="uniform")
    with pytest.raises(RuntimeError, match="Expected 16 rows in the generation batch, got 12"):
        driver.run(_sampler_rows(dataset, group_size=3))
    assert port.rounds == [] and port.passes == []
