"""A streaming (``datasets.IterableDataset``) train set, used as a GRPOTrainer user would: statistics keyed by prompt
identity (the id column, or the prompt's text without one), allocation within each generation batch, the stream's
success-rate key read as a prior, exact resume as TRL resumes a stream, and a clear refusal for procedures that draw
prompts beyond the batch."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from datasets import Dataset
from helpers.trainer import build_trainer, solved_at_try

from trl_adaptive import AdaptiveGRPOTrainer
from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE, read_allocation_log
from trl_adaptive.stats import stable_prompt_ids
from trl_adaptive.trainer.state import derived_prompt_id

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)

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


def test_a_stream_row_with_a_none_id_is_refused_by_name(tiny_model_dir, tmp_path):
    """Every row carries an id, or none does (ids derived from the prompts): a None id names the stream's row."""
    ids = [0, 1, 2, None] + list(range(4, len(PROMPTS)))
    stream = Dataset.from_dict({"prompt": PROMPTS, "prompt_id": ids}).to_iterable_dataset()
    trainer = _trainer(tmp_path, tiny_model_dir, max_steps=1, train_dataset=stream)
    with pytest.raises(
        ValueError, match=r"a stream\) yielded a row whose 'prompt_id' is None \(prompt 'task 3: hard'"
    ):
        trainer.train()


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
    """Runs resumed from checkpoint-2 (the end of the stream's first pass: 10 prompts, 4 a batch) and checkpoint-3
    (inside the second pass) end with the uninterrupted run's statistics: the checkpoint records the pass and the
    step within it (transformers alone takes a stream's epoch to be max_steps long and would replay pass 0)."""
    save = {"save_strategy": "steps", "save_steps": 1}
    straight = _trainer(tmp_path / "straight", tiny_model_dir, **save)
    straight.train()
    expected = json.dumps(straight.prompt_statistics.state_dict(), sort_keys=True)
    steps = [r["prompt_ids"] for r in read_allocation_log(str(tmp_path / "straight" / ALLOCATION_LOG_FILE))]
    for checkpoint in (2, 3):
        resumed = _trainer(tmp_path / f"resumed-{checkpoint}", tiny_model_dir, **save)
        resumed.train(resume_from_checkpoint=str(tmp_path / "straight" / f"checkpoint-{checkpoint}"))
        assert resumed.state.global_step == 4
        log = read_allocation_log(str(tmp_path / f"resumed-{checkpoint}" / ALLOCATION_LOG_FILE))
        assert [r["prompt_ids"] for r in log] == steps[checkpoint:], checkpoint  # the same batches, in order
        assert json.dumps(resumed.prompt_statistics.state_dict(), sort_keys=True) == expected, checkpoint


def test_statistics_of_the_same_prompts_under_other_ids_are_named():
    """A map-style run keys its statistics by row number; the same prompts streamed get derived ids, so that
    evidence cannot count: the first batch says so (once) instead of training as if it did."""
    from trl_adaptive import PromptStatistics
    from trl_adaptive.trainer.state import DatasetPrompts, StreamPrompts

    mapped = DatasetPrompts(Dataset.from_dict({"prompt": PROMPTS}), "prompt_id", "success_rate", 8.0)
    store = PromptStatistics()
    mapped.attach(store, "the map-style run")
    store.update(np.repeat(mapped.ids, 2), np.tile([1.0, 0.0], len(PROMPTS)))
    streamed = StreamPrompts(_stream(), "prompt_id", "success_rate", 8.0)
    rows = [{"prompt": p} for p in PROMPTS[:4]]
    ids = stable_prompt_ids([derived_prompt_id(row) for row in rows])
    with pytest.warns(
        UserWarning, match=r"holds 4 of this batch's prompts under other ids \(e\.g\. stored as id 0, here id"
    ):
        streamed.observe(store, ids, rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        streamed.observe(store, ids, rows)  # said once
