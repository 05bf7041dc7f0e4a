"""What the logs say under every procedure family: TRL's completions table (``log_extra`` columns stay with their
rows), the ``generated/*`` reward metrics over every completion generated, and ``allocations.jsonl``'s trained and
generated counts. Planned allocations train every completion generated (the figures equal TRL's); Seq and dynamic
sampling train a chosen subset (they differ)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from datasets import Dataset
from helpers.trainer import (
    SCRIPTED_PROMPTS,
    SCRIPTS,
    build_trainer,
    reward_has_vowel_e,
    reward_length,
    scripted_rounds_trainer,
)

from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE, read_allocation_log

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)


class LoggingScriptedReward:
    """SCRIPTS' reward of each prompt's k-th scored completion; logs each row's completion text and reward through
    TRL's ``log_extra``, and keeps every reward it returned per global step."""

    __name__ = "scripted"

    def __init__(self) -> None:
        self.position: dict[str, int] = defaultdict(int)
        self.per_step: dict[int, list[float]] = defaultdict(list)

    def __call__(self, prompts, completions, trainer_state, log_extra, **kwargs):
        rewards = []
        for prompt in prompts:
            rewards.append(SCRIPTS[prompt][self.position[prompt]])
            self.position[prompt] += 1
        log_extra("scored_completion", list(completions))
        log_extra("scored_reward", list(rewards))
        self.per_step[trainer_state.global_step].extend(rewards)
        return rewards


def log_length(completions, log_extra, **kwargs):
    """reward_length, logging its row's completion text."""
    log_extra("scored_completion", list(completions))
    return reward_length(completions)


def _assert_extra_columns_stay_with_their_rows(trainer, reward_name: str | None = "scripted") -> None:
    logs = trainer._logs
    assert list(logs["extra"]["scored_completion"]) == list(logs["completion"])
    if reward_name is not None:
        assert list(logs["extra"]["scored_reward"]) == list(logs["rewards"][reward_name])
    assert len(logs["extra"]["group_size"]) == len(logs["completion"])


def _train_logs(trainer) -> list[dict]:
    return [log for log in trainer.state.log_history if "reward" in log]


def _nanstd(values: list[float]) -> float:
    return float(np.std(values, ddof=1))


# ---------------------------------------------------------------------------------------------------------------------
# Planned: one round, every completion generated is trained
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("allocator", ["uniform", "knapsack"])
def test_planned_generated_metrics_equal_trls_and_counts_agree(tiny_model_dir, tmp_path, allocator):
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        reward_funcs=[log_length, reward_has_vowel_e],
        allocator=allocator,
        max_steps=2,
        log_completions=True,
    )
    trainer.train()
    logs = _train_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert log["generated/reward_mean"] == log["reward"]
        assert log["generated/reward_std"] == log["reward_std"]
        for name in ("log_length", "reward_has_vowel_e"):
            assert log[f"generated/rewards/{name}/mean"] == log[f"rewards/{name}/mean"]
    _assert_extra_columns_stay_with_their_rows(trainer, reward_name=None)
    for record in read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE)):
        assert record["generated"] == record["counts"]
        assert record["generated_successes"] == record["successes"]
        assert record["generated_attempts"] == record["attempts"]


# ---------------------------------------------------------------------------------------------------------------------
# Rounds: Reinforce-Ada Seq
# ---------------------------------------------------------------------------------------------------------------------
def test_seq_balance_logs_every_completion_generated_and_keeps_extra_columns_with_their_rows(tiny_model_dir, tmp_path):
    """Balance, n=4, rounds of 4 up to 12: never solved draws 12 (0 successes), always solved 12 (12), solved at its
    6th try 8 (3), mixed 4 (2); each trains 4, balanced where it can. Generated: 17 successes of 36; trained: 8 of
    16."""
    reward = LoggingScriptedReward()
    trainer = scripted_rounds_trainer(tiny_model_dir, tmp_path, reward, log_completions=True)
    trainer.train()
    (log,) = _train_logs(trainer)
    generated = reward.per_step[0]
    assert len(generated) == 36
    assert log["generated/reward_mean"] == pytest.approx(17 / 36)
    assert log["generated/rewards/scripted/mean"] == pytest.approx(17 / 36)
    assert log["generated/reward_std"] == pytest.approx(_nanstd(generated))
    assert log["reward"] == pytest.approx(0.5)  # TRL's figure: the balanced subset trained on
    _assert_extra_columns_stay_with_their_rows(trainer)
    (record,) = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert sorted(record["prompt_ids"]) == [0, 1, 2, 3]
    order = np.argsort(record["prompt_ids"])  # the scripted prompts in dataset order

    def per_prompt(key: str) -> list[int]:
        return np.asarray(record[key])[order].tolist()

    assert per_prompt("counts") == [4, 4, 4, 4] and per_prompt("successes") == [0, 4, 2, 2]
    assert per_prompt("generated") == [12, 12, 8, 4]
    assert per_prompt("generated_successes") == [0, 12, 3, 2]
    assert per_prompt("generated_attempts") == [12, 12, 8, 4]


# ---------------------------------------------------------------------------------------------------------------------
# Rounds: DAPO dynamic sampling
# ---------------------------------------------------------------------------------------------------------------------
def test_dynamic_sampling_logs_every_completion_generated_and_keeps_extra_columns_with_their_rows(
    tiny_model_dir, tmp_path
):
    """2 prompts of 4 per batch: a batch holding a solved or never-solved prompt draws another, so more are generated
    than trained, and the dropped groups are in the generated figures only."""
    reward = LoggingScriptedReward()
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        Dataset.from_dict({"prompt": SCRIPTED_PROMPTS * 2}),
        reward_funcs=reward,
        per_device_train_batch_size=8,
        max_steps=3,
        allocator="uniform",
        dynamic_sampling=True,
        log_completions=True,
    )
    trainer.train()
    logs = _train_logs(trainer)
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert len(logs) == len(records) == 3
    for log, record in zip(logs, records, strict=True):
        generated = reward.per_step[record["step"]]
        assert sum(record["generated"]) == len(generated) == log.get("rounds/generated", 8)
        assert sum(record["counts"]) == 8
        assert log["generated/reward_mean"] == pytest.approx(np.mean(generated))
        assert log["generated/reward_std"] == pytest.approx(_nanstd(generated))
        assert sum(record["generated_successes"]) == sum(generated)
    assert any(log["generated/reward_mean"] != pytest.approx(log["reward"]) for log in logs)
    _assert_extra_columns_stay_with_their_rows(trainer)


def test_round_extras_are_taken_per_row():
    """A round's log_extra values leave TRL's buffer one dict per row; a column logged with another length than the
    rows scored cannot be placed (empty cells, a warning). The table then shows every column any trained completion
    logged, None where one did not (the trainer tests above)."""
    from trl_adaptive.trainer.generation_batch import take_round_extras

    pending = defaultdict(list)  # TRL's _pending_extra_logs
    pending["text"].extend(["a", "b"])
    first = take_round_extras(pending, 2)
    assert first == [{"text": "a"}, {"text": "b"}] and not pending
    pending["text"].extend(["c", "d", "e"])
    pending["judge"].extend([0.5, 0.25])
    with pytest.warns(UserWarning, match=r"log_extra\('text', \.\.\.\) logged 3 values while 2 completions"):
        second = take_round_extras(pending, 2)
    assert second == [{"text": None, "judge": 0.5}, {"text": None, "judge": 0.25}]
