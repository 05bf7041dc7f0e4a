"""GRPOTrainer features users rely on keep working when the allocation is variable (single process, tiny model).

Every run here uses a deliberately skewed allocator (the first prompt of each generation batch gets most of the
budget), so a feature that still assumed TRL's fixed ``view(-1, G)`` groups would misattribute completions.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.allocation import SkewedAllocator
from helpers.trainer import build_trainer, make_dataset, param_snapshot, reward_has_vowel_e, reward_length
from transformers import TrainerCallback
from trl import GRPOConfig

from trl_adaptive import AdaptiveGRPOTrainer
from trl_adaptive.trainer.groups import group_advantages

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)


def _loss_types() -> list[str]:
    """Every loss_type the installed GRPOConfig documents (trl 1.16: grpo, dr_grpo, dapo, bnpo, cispo, ...)."""
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    return re.findall(r"'(\w+)'", help_text.split("Supported values are")[1].split(". ")[0])


LOSS_TYPES = _loss_types()


class Recorder:
    """Wraps the trainer's hooks (instance attributes shadow the methods) and keeps what passed through them."""

    def __init__(self, trainer: AdaptiveGRPOTrainer) -> None:
        self.allocations: list[tuple[list[int], list[int]]] = []  # (prompt ids, counts) per generation batch
        self.rows: list[list[int]] = []  # prompt id of each completion, dispatch order
        self.rewards: list[torch.Tensor] = []  # gathered (T, K) rewards, same order
        self.outputs: list[dict[str, Any]] = []  # advantages / completion ids handed to the loss, same order
        self.loss_advantages: list[torch.Tensor] = []  # advantages of each micro-batch the loss consumed
        self.completions: list[Any] = []
        self.eval_batches = 0

        calculate, generate, compute_loss = (
            trainer._calculate_rewards,
            trainer._generate_and_score_completions,
            trainer.compute_loss,
        )
        recorder = self

        class BatchEnd(TrainerCallback):
            def on_generation_batch_end(self, args, state, control, batch, **kwargs):
                outcome = batch.outcome
                recorder.allocations.append((outcome.record.prompt_ids.tolist(), outcome.trained_counts.tolist()))

        trainer.add_callback(BatchEnd())

        def record_calculate(inputs, prompts, completions, completion_ids_list):
            rewards = calculate(inputs, prompts, completions, completion_ids_list)
            if trainer.model.training:
                self.rows.append([row["prompt_id"] for row in inputs])
                self.completions.append(list(completions))
                self.rewards.append(rewards.detach().clone())
            else:
                self.eval_batches += 1
            return rewards

        def record_generate(inputs):
            output = generate(inputs)
            if trainer.model.training:
                self.outputs.append(
                    {"advantages": output["advantages"].clone(), "completion_ids": output["completion_ids"].clone()}
                )
            return output

        def record_loss(model, inputs, *args, **kwargs):
            self.loss_advantages.append(inputs["advantages"].detach().clone())
            return compute_loss(model, inputs, *args, **kwargs)

        trainer._calculate_rewards = record_calculate
        trainer._generate_and_score_completions = record_generate
        trainer.compute_loss = record_loss


def _train(
    model_dir: Path,
    output_dir: Path,
    *,
    reward_funcs=reward_length,
    dataset=None,
    allocator=None,
    trainer_kwargs=None,
    **overrides,
):
    overrides.setdefault("max_steps", 2)
    allocator = allocator if allocator is not None else SkewedAllocator()
    trainer = build_trainer(
        model_dir,
        output_dir,
        dataset,
        allocator,
        trainer_kwargs,
        reward_funcs=reward_funcs,
        allocator="uniform",
        **overrides,
    )
    recorder = Recorder(trainer)
    before = param_snapshot(trainer.model)
    trainer.train()
    return trainer, recorder, before


def _losses(trainer) -> list[float]:
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def _assert_trained(trainer, before, expected_steps: int = 2) -> None:
    losses = _losses(trainer)
    assert len(losses) == expected_steps and all(math.isfinite(x) for x in losses), losses
    after = param_snapshot(trainer.model)
    assert any(not torch.equal(after[name], value) for name, value in before.items()), "no parameter changed"


def _assert_rows_follow_allocation(recorder: Recorder) -> None:
    """Every generation batch holds exactly the allocated completions, each one scored for its own prompt."""
    assert len(recorder.allocations) == len(recorder.rows) > 0
    for (ids, counts), rows in zip(recorder.allocations, recorder.rows, strict=True):
        assert sorted(rows) == sorted(np.repeat(ids, counts).tolist())
        assert max(counts) > min(counts)  # the allocation really was skewed


def _assert_advantages_are_per_group(trainer, recorder: Recorder) -> None:
    """The advantages handed to the loss are the segment advantages of the recorded rewards, in the config's modes."""
    for rows, rewards, output in zip(recorder.rows, recorder.rewards, recorder.outputs, strict=True):
        _, group_ids = np.unique(rows, return_inverse=True)
        expected = group_advantages(
            rewards,
            trainer.reward_weights,
            torch.as_tensor(group_ids),
            int(group_ids.max()) + 1,
            trainer.args.scale_rewards,
            trainer.args.multi_objective_aggregation,
        ).advantages
        torch.testing.assert_close(output["advantages"], expected, rtol=1e-6, atol=1e-6)


# -------------------------------------------------------------------------------------------------------------------
# PEFT
# -------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_peft_lora_trains_only_adapters(tiny_model_dir, tmp_path, beta):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer, recorder, before = _train(tiny_model_dir, tmp_path, beta=beta, trainer_kwargs={"peft_config": lora})
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    after = param_snapshot(trainer.model)
    changed = {name for name, value in before.items() if not torch.equal(after[name], value)}
    assert changed and all("lora_" in name for name in changed), sorted(changed)
    assert any("lora_B" in name for name in changed)
    if beta:
        assert all(math.isfinite(log["kl"]) for log in trainer.state.log_history if "kl" in log)


# -------------------------------------------------------------------------------------------------------------------
# Batching knobs: gradient accumulation, steps_per_generation, num_iterations
# -------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "knobs,generations",
    [
        # generation_batch_size = per_device_train_batch_size x steps_per_generation = 8 in every case (2 prompts).
        ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}, 2),  # spg = GA: one per step
        ({"per_device_train_batch_size": 4, "steps_per_generation": 2}, 1),  # one generation serves two steps
        ({"per_device_train_batch_size": 8, "num_iterations": 2}, 1),  # one generation reused for a second step
        # A generation per micro-batch: two allocations within one optimizer step (same global_step).
        ({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "steps_per_generation": 1}, 4),
    ],
    ids=["grad_accum", "steps_per_generation", "num_iterations", "grad_accum_spg1"],
)
def test_batching_knobs_consume_every_completion(tiny_model_dir, tmp_path, knobs, generations):
    trainer, recorder, before = _train(tiny_model_dir, tmp_path, **knobs)
    per_device = knobs["per_device_train_batch_size"]
    assert trainer.args.generation_batch_size == per_device * trainer.args.steps_per_generation == 8
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    _assert_advantages_are_per_group(trainer, recorder)
    assert len(recorder.allocations) == generations
    for _, counts in recorder.allocations:
        assert sum(counts) == trainer.args.generation_batch_size
    # Every micro-batch has per_device_train_batch_size rows, and the loss sees each generated completion exactly
    # num_iterations times: nothing dropped or duplicated by TRL's shuffle / split of the variable-size batch.
    assert all(len(a) == per_device for a in recorder.loss_advantages)
    generated = torch.cat([o["advantages"] for o in recorder.outputs]).sort().values
    consumed = torch.cat(recorder.loss_advantages).sort().values
    torch.testing.assert_close(consumed, generated.repeat_interleave(trainer.args.num_iterations))


# -------------------------------------------------------------------------------------------------------------------
# Loss types
# -------------------------------------------------------------------------------------------------------------------
def test_loss_types_are_discovered():
    assert {"grpo", "dr_grpo", "dapo", "bnpo", "cispo"} <= set(LOSS_TYPES)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_type_trains(tiny_model_dir, tmp_path, loss_type):
    extra = {"importance_sampling_level": "sequence"} if loss_type == "luspo" else {}
    trainer, recorder, before = _train(tiny_model_dir, tmp_path, loss_type=loss_type, **extra)
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    _assert_advantages_are_per_group(trainer, recorder)


# -------------------------------------------------------------------------------------------------------------------
# Prompts, rewards and advantage modes
# -------------------------------------------------------------------------------------------------------------------
def test_conversational_prompts(tiny_model_dir, tmp_path):
    dataset = make_dataset(8, conversational=True)
    texts = {i: row["prompt"] for i, row in enumerate(dataset)}
    seen = []

    def reward_prompt_matches(prompts, completions, prompt_id, **kwargs):
        # The conversation each completion was generated for is the one of its own prompt id.
        seen.extend(p == texts[i] for p, i in zip(prompts, prompt_id, strict=True))
        return [float(len(c[0]["content"])) for c in completions]

    trainer, recorder, before = _train(tiny_model_dir, tmp_path, reward_funcs=reward_prompt_matches, dataset=dataset)
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    assert seen and all(seen)
    assert all(isinstance(c, list) and c[0]["role"] == "assistant" for batch in recorder.completions for c in batch)


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_scale_rewards_and_aggregation_with_two_reward_functions(tiny_model_dir, tmp_path, scale_rewards, aggregation):
    trainer, recorder, before = _train(
        tiny_model_dir,
        tmp_path,
        reward_funcs=[reward_length, reward_has_vowel_e],
        reward_weights=[1.0, 0.5],
        scale_rewards=scale_rewards,
        multi_objective_aggregation=aggregation,
    )
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    _assert_advantages_are_per_group(trainer, recorder)
    assert all(r.shape[1] == 2 for r in recorder.rewards)


def test_none_and_nan_rewards(tiny_model_dir, tmp_path):
    """A reward function returning None for some completions and NaN for others: those get advantage 0 and are not
    counted as attempts in the per-prompt statistics; training carries on."""

    def reward_with_gaps(completions, **kwargs):
        rewards: list[float | None] = []
        for i, c in enumerate(completions):
            if i % 4 == 1:
                rewards.append(None)
            elif i % 4 == 2:
                rewards.append(float("nan"))
            else:
                rewards.append(float("e" in c) + len(c) / 100.0)
        return rewards

    trainer, recorder, before = _train(tiny_model_dir, tmp_path, reward_funcs=reward_with_gaps)
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    _assert_advantages_are_per_group(trainer, recorder)
    scored: dict[int, int] = {}
    for rows, rewards, output in zip(recorder.rows, recorder.rewards, recorder.outputs, strict=True):
        unscorable = torch.isnan(rewards[:, 0])
        assert unscorable.sum() == len(rows) // 2  # i % 4 in {1, 2}
        assert (output["advantages"][unscorable] == 0).all()
        for prompt_id, missing in zip(rows, unscorable.tolist(), strict=True):
            scored[prompt_id] = scored.get(prompt_id, 0) + (not missing)
    ids = sorted(scored)
    stats = trainer.prompt_statistics.batch(ids)
    assert stats.attempts.tolist() == [float(scored[i]) for i in ids]
    assert np.all(stats.successes <= stats.attempts)


def test_reward_model_scores_each_completion_with_its_own_prompt(tiny_model_dir, tmp_path):
    """A reward model (``reward_funcs="path/to/model"``, a sequence classifier, as in TRL) scores prompt + completion:
    each recorded reward is the model's score of its own row's prompt and completion, scored alone."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    reward_dir = tmp_path / "reward-model"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(1)
    scorer = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    scorer.config.pad_token_id = tokenizer.pad_token_id
    scorer.save_pretrained(reward_dir)
    tokenizer.save_pretrained(reward_dir)
    texts = {i: row["prompt"] for i, row in enumerate(make_dataset(8))}

    trainer, recorder, before = _train(tiny_model_dir, tmp_path / "run", reward_funcs=str(reward_dir))
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    _assert_advantages_are_per_group(trainer, recorder)
    scorer = trainer.reward_funcs[0]
    for rows, completions, rewards in zip(recorder.rows, recorder.completions, recorder.rewards, strict=True):
        with torch.inference_mode():
            alone = [
                scorer(**tokenizer(texts[i] + c, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item()
                for i, c in zip(rows, completions, strict=True)
            ]
        torch.testing.assert_close(rewards[:, 0], torch.tensor(alone), rtol=1e-4, atol=1e-4)
        assert rewards[:, 0].unique().numel() > 1  # distinct rows, distinct scores: a misaligned pair would show


@pytest.mark.parametrize(
    "option", [{"mask_truncated_completions": True}, {"top_entropy_quantile": 0.5}], ids=lambda o: next(iter(o))
)
def test_token_level_options(tiny_model_dir, tmp_path, option):
    """Options that act on each completion's tokens after the advantages keep the rows and advantages as allocated."""
    trainer, recorder, _ = _train(tiny_model_dir, tmp_path, **option)
    assert all(math.isfinite(x) for x in _losses(trainer)) and len(_losses(trainer)) == 2
    _assert_rows_follow_allocation(recorder)
    _assert_advantages_are_per_group(trainer, recorder)


def test_reference_model_with_beta(tiny_model_dir, tmp_path):
    trainer, recorder, before = _train(tiny_model_dir, tmp_path, beta=0.1)
    assert trainer.ref_model is not None
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    kls = [log["kl"] for log in trainer.state.log_history if "kl" in log]
    assert len(kls) == 2 and all(math.isfinite(x) for x in kls)


def test_evaluation_keeps_fixed_groups_and_statistics_untouched(tiny_model_dir, tmp_path):
    """Evaluation runs TRL's own fixed-size groups; it neither allocates nor counts eval completions as attempts."""
    trainer, recorder, before = _train(
        tiny_model_dir,
        tmp_path,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=8,
        trainer_kwargs={"eval_dataset": make_dataset(4)},
    )
    _assert_trained(trainer, before)
    _assert_rows_follow_allocation(recorder)
    assert recorder.eval_batches > 0 and len(recorder.allocations) == 2  # no allocation for eval batches
    evals = [log["eval_reward"] for log in trainer.state.log_history if "eval_reward" in log]
    assert len(evals) == 2 and all(math.isfinite(x) for x in evals)
    seen = sorted({p for rows in recorder.rows for p in rows})
    assert trainer.prompt_statistics.batch(seen).attempts.sum() == 2 * trainer.args.generation_batch_size


def test_log_completions_writes_group_size(tiny_model_dir, tmp_path):
    import pandas as pd

    trainer, recorder, _ = _train(tiny_model_dir, tmp_path, log_completions=True, max_steps=1)
    path = tmp_path / "completions" / "completions_00001.parquet"
    assert path.exists(), sorted(p.name for p in tmp_path.rglob("*"))
    table = pd.read_parquet(path)
    assert "group_size" in table.columns
    assert len(table) == trainer.args.generation_batch_size
    # make_dataset(8) has distinct prompt texts, so a prompt's rows in the table are its group.
    sizes = table.groupby(table["prompt"].astype(str))["group_size"]
    assert (sizes.count() == sizes.first()).all()
    counts = recorder.allocations[0][1]
    assert sorted(table["group_size"].tolist()) == sorted(np.repeat(counts, counts).tolist())  # n_i rows of size n_i
    torch.testing.assert_close(
        torch.tensor(table["advantage"].tolist()), recorder.outputs[0]["advantages"], rtol=1e-6, atol=1e-6
    )


def test_equal_prompt_weighting_rescales_by_mean_over_count(tiny_model_dir, tmp_path):
    """Same seed, one step each: with the option on every completion's advantage is mean_n / n_i times its value
    with the option off (6 and 2 completions over a mean of 4: factors 2/3 and 2)."""
    runs = {}
    for flag in (False, True):
        _, recorder, _ = _train(tiny_model_dir, tmp_path / str(flag), equal_prompt_weighting=flag, max_steps=1)
        runs[flag] = recorder
    off, on = runs[False], runs[True]
    assert off.allocations == on.allocations and off.rows == on.rows
    assert torch.equal(off.outputs[0]["completion_ids"], on.outputs[0]["completion_ids"])  # same generations
    ids, counts = on.allocations[0]
    mean_n = sum(counts) / len(counts)
    factor = torch.tensor([mean_n / counts[ids.index(p)] for p in on.rows[0]])
    assert sorted(set(factor.tolist())) == pytest.approx([2 / 3, 2.0])
    a_off, a_on = off.outputs[0]["advantages"], on.outputs[0]["advantages"]
    assert a_off.abs().sum() > 0
    torch.testing.assert_close(a_on, a_off * factor, rtol=1e-6, atol=0)
    # Hence sum |A| per prompt is rescaled by exactly mean_n / n_i.
    rows = np.array(on.rows[0])
    for p, n in zip(ids, counts, strict=True):
        mask = torch.as_tensor(rows == p)
        assert float(a_on[mask].abs().sum()) == pytest.approx(float(a_off[mask].abs().sum()) * mean_n / n, rel=1e-6)
