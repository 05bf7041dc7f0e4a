"""A streaming (``datasets.IterableDataset``) train set, used as a GRPOTrainer user would: statistics keyed by prompt
identity (the id column, or the prompt's text without one), allocation within each generation batch, the stream's
success-rate key read as a prior, exact resume as TRL resumes a stream, and a clear refusal for procedures that draw
prompts beyond the batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datasets import Dataset
from helpers.trainer import build_trainer, solved_at_try

from trl_adaptive import AdaptiveGRPOTrainer
from trl_adaptive.stats import stable_prompt_ids
from trl_adaptive.trainer.allocation_log import ALLOCATION_LOG_FILE, read_allocation_log
from trl_adaptive.trainer.prompts import derived_prompt_id

# Eight distinct prompts (a batch never holds one twice), with how often each is solved.
RATES = {f"task {i}: {kind}": rate for i, (kind, rate) in enumerate([("easy", 1.0), ("hard", 0.0)] * 4)}
RATES |= {"task 8: coin": 0.5, "task 9: coin": 0.5}
PROMPTS = list(RATES)


def scripted_reward(completions, prompts, **kwargs):
    """Solved prompts always succeed, unsolved never, coins every other completion (a deterministic script)."""
    rewards = []
    for prompt in prompts:
        scripted_reward.calls[prompt] = scripted_reward.calls.get(prompt, -1) + 1
        rewards.append(solved_at_try(RATES[prompt], scripted_reward.calls[prompt]))
    return rewards


def _stream(with_prior: bool = False):
    columns = {"prompt": PROMPTS}
    if with_prior:
        columns["success_rate"] = list(RATES.values())
    return Dataset.from_dict(columns).to_iterable_dataset()


def _trainer(tmp_path, model_dir, **config) -> AdaptiveGRPOTrainer:
    scripted_reward.calls = {}
    allocator = config.pop("allocator", "knapsack")
    train_dataset = config.pop("train_dataset", None) or _stream(with_prior=True)
    config = {"per_device_train_batch_size": 16, "max_steps": 4, **config}
    return build_trainer(
        model_dir, tmp_path, train_dataset, reward_funcs=scripted_reward, allocator=allocator, max_rollouts=8, **config
    )


def test_streaming_dataset_is_allocated_per_prompt(tiny_model_dir, tmp_path):
    trainer = _trainer(tmp_path, tiny_model_dir)
    trainer.train()
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert len(records) == 4 and all(sum(r["counts"]) == 16 for r in records)
    assert all(len(set(r["counts"])) > 1 for r in records)  # the prior key makes step 1 adaptive already
    # No id column: each prompt's id derives from its text, the same in every pass.
    ids = stable_prompt_ids([derived_prompt_id({"prompt": p}) for p in PROMPTS])
    assert {i for r in records for i in r["prompt_ids"]} <= set(ids.tolist())
    stats = trainer.prompt_statistics.batch(ids)
    solved = np.array([RATES[p] == 1.0 for p in PROMPTS])
    seen = stats.attempts > 0
    assert stats.attempts.sum() == 64 and seen.sum() >= 8  # 4 steps x 16 completions; the stream went round
    assert (stats.successes[seen & solved] == stats.attempts[seen & solved]).all()
    assert (stats.successes[seen & ~solved & (stats.attempts > 0)] <= stats.attempts[seen & ~solved]).all()
    # The allocation follows each prompt's statistics: knapsack spends least on the prompts known to be solved.
    easy = set(ids[solved].tolist())
    counts = [(i in easy, c) for r in records for i, c in zip(r["prompt_ids"], r["counts"], strict=True)]
    assert max(c for is_easy, c in counts if is_easy) < np.mean([c for is_easy, c in counts if not is_easy])


def test_streaming_prior_is_read_when_a_prompt_first_comes(tiny_model_dir, tmp_path):
    trainer = _trainer(tmp_path, tiny_model_dir, max_steps=1)
    assert trainer.prompt_statistics.num_with_prior == 0  # nothing read before the stream yields
    trainer.train()
    assert trainer.prompt_statistics.num_with_prior == 4  # the first batch's four prompts


def test_streaming_id_column_is_used_as_is(tiny_model_dir, tmp_path):
    uuids = [f"uuid-{i:04d}" for i in range(len(PROMPTS))]
    stream = Dataset.from_dict({"prompt": PROMPTS, "prompt_id": uuids}).to_iterable_dataset()
    trainer = _trainer(tmp_path, tiny_model_dir, max_steps=1, train_dataset=stream)
    trainer.train()
    assert trainer.prompt_statistics.batch(stable_prompt_ids(uuids)).attempts.sum() == 16


@pytest.mark.parametrize(
    "config, named",
    [({"dynamic_sampling": True}, "DynamicSampling"), ({"allocator": "cero"}, "CeroPacing")],
    ids=["dynamic_sampling", "cero"],
)
def test_procedures_that_draw_prompts_refuse_a_stream(tiny_model_dir, tmp_path, config, named):
    with pytest.raises(ValueError, match=rf"{named} draws prompts beyond the generation batch.*streaming"):
        _trainer(tmp_path, tiny_model_dir, **config)


@pytest.mark.parametrize(
    "config",
    [
        {"allocator": "reinforce_ada_seq_balance", "allocator_kwargs": {"round_size": 4}},
        {"allocator": "bayes_knapsack", "pilot_rollouts": 2},
        {"allocator": "pilot_commit", "allocator_kwargs": {"pilot_rollouts": 2}},
    ],
    ids=["seq_balance", "bayes_knapsack_pilot", "pilot_commit"],
)
def test_procedures_in_rounds_on_a_stream(tiny_model_dir, tmp_path, config):
    """The procedures the refusal above recommends for streams sample within the batch in rounds, dispatched by the
    stream's derived ids (63-bit hashes): they run, and every scored completion lands under its own prompt."""
    trainer = _trainer(tmp_path, tiny_model_dir, max_steps=2, **config)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(log.get("rounds/per_step", 1) > 1 for log in trainer.state.log_history)  # the round path ran
    ids = stable_prompt_ids([derived_prompt_id({"prompt": p}) for p in PROMPTS])
    stats = trainer.prompt_statistics.batch(ids)
    assert stats.attempts.sum() == sum(scripted_reward.calls.get(p, -1) + 1 for p in PROMPTS)
    for prompt, successes, attempts in zip(PROMPTS, stats.successes, stats.attempts, strict=True):
        if RATES[prompt] in (0.0, 1.0):  # its own rewards only
            assert successes == RATES[prompt] * attempts, prompt


def test_streaming_resume_continues_exactly(tiny_model_dir, tmp_path):
    """A run resumed from its step-2 checkpoint ends with the statistics of the uninterrupted run (TRL resumes a
    stream by skipping the batches already trained)."""
    save = {"save_strategy": "steps", "save_steps": 2}
    straight = _trainer(tmp_path / "straight", tiny_model_dir, **save)
    straight.train()
    resumed = _trainer(tmp_path / "resumed", tiny_model_dir, **save)
    resumed.train(resume_from_checkpoint=str(tmp_path / "straight" / "checkpoint-2"))
    assert resumed.state.global_step == 4
    a, b = straight.prompt_statistics.state_dict(), resumed.prompt_statistics.state_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
