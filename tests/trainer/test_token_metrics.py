"""Tokens in every metric: ``tokens/*`` and ``allocations.jsonl``'s ``expected_tokens`` / ``generated_tokens``, each
checked against an independent count on a tiny run: a reward function that records the length of every completion
it scores (TRL hands it ``completion_ids``; each completion generated is scored once, every round included), TRL's
own ``completions/mean_length``, and the ``completion_mask`` of the batch trained on."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np
import pytest
from helpers.trainer import (
    SCRIPTED_PROMPTS,
    ScriptedReward,
    build_trainer,
    make_dataset,
    reward_has_vowel_e,
    scripted_rounds_trainer,
)

from trl_adaptive import AdaptiveGRPOConfig
from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE, read_allocation_log
from trl_adaptive.sampling import BatchRecord, Outcome
from trl_adaptive.trainer.metrics import token_metrics

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)


class CountingReward:
    """Wraps a reward function; records per global step each scored completion's (prompt, token count, reward)."""

    def __init__(self, reward) -> None:
        self.reward = reward
        self.__name__ = getattr(reward, "__name__", type(reward).__name__)
        self.per_step: dict[int, list[tuple[str, int, float]]] = defaultdict(list)

    def __call__(self, prompts, completions, completion_ids, trainer_state, **kwargs):
        rewards = self.reward(prompts=prompts, completions=completions, **kwargs)
        for prompt, ids, reward in zip(prompts, completion_ids, rewards, strict=True):
            self.per_step[trainer_state.global_step].append((prompt, len(ids), float(reward)))
        return rewards


def _per_prompt(scored: list[tuple[str, int, float]]) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for prompt, tokens, reward in scored:
        out[prompt][0].append(tokens)
        out[prompt][1].append(reward)
    return dict(out)


def _generated_tokens_by_text(record: dict, texts: list[str]) -> dict[str, int]:
    """allocations.jsonl's generated tokens per prompt, keyed by the prompt's text (ids are the dataset's rows)."""
    return {texts[pid]: t for pid, t in zip(record["prompt_ids"], record["generated_tokens"], strict=True)}


def _train_logs(trainer) -> list[dict]:
    return [log for log in trainer.state.log_history if "tokens/generated" in log]


def _capture_trained_tokens(trainer) -> list[int]:
    """Tokens of the completions each training pass hands to the loss: the sum of its ``completion_mask``."""
    trained: list[int] = []
    original = trainer._generate_and_score_completions

    def capture(inputs):
        output = original(inputs)
        trained.append(int(output["completion_mask"].sum()))
        return output

    trainer._generate_and_score_completions = capture
    return trained


@pytest.mark.parametrize("allocator", ["uniform", "knapsack"])
def test_planned_steps_count_every_token_generated_and_trained(tiny_model_dir, tmp_path, allocator):
    """One planned round: tokens/generated = tokens/trained = the recorded lengths = TRL's mean length x B; tokens per
    effective completion over the recorded groups with a reward spread; allocations.jsonl's generated tokens per
    prompt; its expected tokens null before any length is known, then the population's estimate for unseen prompts."""
    reward = CountingReward(reward_has_vowel_e)
    trainer = build_trainer(tiny_model_dir, tmp_path, reward_funcs=reward, allocator=allocator, max_steps=3)
    trained = _capture_trained_tokens(trainer)
    trainer.train()
    logs, records = _train_logs(trainer), read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert len(logs) == len(records) == 3
    texts = make_dataset(8)["prompt"]
    for step, (log, record) in enumerate(zip(logs, records, strict=True)):
        scored = reward.per_step[step]
        generated = sum(tokens for _, tokens, _ in scored)
        assert log["tokens/generated"] == log["tokens/trained"] == generated == trained[step]
        assert log["tokens/generated"] == pytest.approx(log["completions/mean_length"] * 8)
        groups = _per_prompt(scored)
        effective = sum(len(r) for _, r in groups.values() if len(set(r)) > 1)
        expected = generated / effective if effective else math.nan
        assert log["tokens/per_effective_completion"] == pytest.approx(expected, nan_ok=True)
        assert _generated_tokens_by_text(record, texts) == {p: sum(lengths) for p, (lengths, _) in groups.items()}
    assert records[0]["expected_tokens"] == [None, None]  # no prompt has a length yet
    first = _per_prompt(reward.per_step[0])
    population = np.mean([np.mean(lengths) for lengths, _ in first.values()])  # mean over prompts seen, unseen get it
    assert records[1]["expected_tokens"] == pytest.approx([population, population])


def test_rounds_count_every_round_generated_and_the_subset_trained(tiny_model_dir, tmp_path):
    """Seq-Balance, rounds of 4 up to 12 (test_completion_logs has the counts): 36 completions generated, 16 trained,
    of which the 8 of 'solved at its 6th try' and 'mixed from the start' are in groups with a reward spread."""
    reward = CountingReward(ScriptedReward())
    trainer = scripted_rounds_trainer(tiny_model_dir, tmp_path, reward)
    trained = _capture_trained_tokens(trainer)
    trainer.train()
    (log,) = _train_logs(trainer)
    scored = reward.per_step[0]
    generated = sum(tokens for _, tokens, _ in scored)
    assert len(scored) == 36 and log["tokens/generated"] == generated
    assert log["tokens/trained"] == trained[0] < generated
    assert log["tokens/per_effective_completion"] == pytest.approx(generated / 8)
    (record,) = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    groups = _per_prompt(scored)
    assert _generated_tokens_by_text(record, SCRIPTED_PROMPTS) == {
        p: sum(lengths) for p, (lengths, _) in groups.items()
    }


def test_a_token_budget_logs_the_budget_and_the_expected_tokens_of_the_counts(tiny_model_dir, tmp_path):
    """Under generation_token_budget: tokens/budget is T; tokens/expected the allocated counts times the expected
    tokens per completion allocations.jsonl recorded (the store before the step); none before any length is known."""
    trainer = build_trainer(tiny_model_dir, tmp_path, max_steps=3, generation_token_budget=48.0)
    trainer.train()
    logs, records = _train_logs(trainer), read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert [log["tokens/budget"] for log in logs] == [48.0] * 3
    assert "tokens/expected" not in logs[0] and records[0]["expected_tokens"] == [None, None]
    for log, record in zip(logs[1:], records[1:], strict=True):
        assert log["tokens/expected"] == pytest.approx(np.dot(record["counts"], record["expected_tokens"]))


def test_the_default_budget_is_what_the_uniform_split_of_each_batch_expects(tiny_model_dir, tmp_path):
    """The default config (bayes_knapsack, generation_token_budget="auto"): from the first step that knows a length,
    tokens/budget is the batch's B completions at the mean expected tokens of its prompts, and the counts fit it."""
    default = {f.name: f.default for f in dataclasses.fields(AdaptiveGRPOConfig)}
    assert (default["allocator"], default["generation_token_budget"]) == ("bayes_knapsack", "auto")
    trainer = build_trainer(tiny_model_dir, tmp_path, max_steps=3, allocator=default["allocator"])
    assert trainer.allocator.token_budget == "uniform"
    trainer.train()
    logs, records = _train_logs(trainer), read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert "tokens/budget" not in logs[0] and records[0]["expected_tokens"] == [None, None]
    for log, record in zip(logs[1:], records[1:], strict=True):
        assert log["tokens/budget"] == pytest.approx(sum(record["counts"]) * np.mean(record["expected_tokens"]))
        assert log["tokens/expected"] <= log["tokens/budget"] + 1e-9


def _outcome(tokens: list[float], selected: list[int]) -> Outcome:
    record = BatchRecord(success_threshold=1.0)
    record.prompt_ids = np.array([5, 6])
    record.add(np.array([0, 0, 1, 1]), np.array([1.0, 0.0, 1.0, 1.0]))
    record.completion_tokens = np.asarray(tokens, dtype=np.float64)
    return Outcome(record=record, selected=np.asarray(selected), baseline_from_all=False, seconds=0.0)


def test_a_step_without_signal_or_without_counts():
    """No group with a reward spread: the tokens bought nothing, NaN per effective completion; no token counts from
    the driver: no tokens/* at all (never a made-up zero)."""
    metrics = token_metrics(_outcome([3, 4, 5, 6], [0, 1, 2]), effective_completions=0.0)
    assert metrics["tokens/generated"] == 18.0 and metrics["tokens/trained"] == 12.0
    assert math.isnan(metrics["tokens/per_effective_completion"])
    metrics = token_metrics(_outcome([3, 4, 5, 6], [0, 1, 2]), effective_completions=2.0)
    assert metrics["tokens/per_effective_completion"] == 9.0
    assert token_metrics(_outcome([3, math.nan, 5, 6], [0, 1, 2]), effective_completions=2.0) == {}
