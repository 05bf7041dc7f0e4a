"""AdaptiveGRPOTrainer in TRL's vLLM *colocate* mode, run on CPU with an in-process stand-in for vLLM's ``LLM``.

The trainer's claim: colocate mode needs no change, because TRL's ``VLLMGeneration.generate`` (colocate branch) sends
every local row to ``LLM.generate`` with ``SamplingParams(n=1)`` and returns the completions in row order. Here TRL's
own ``VLLMGeneration`` runs unchanged; only the vLLM objects it imports are replaced (see ``colocate_seam``).

Sampling in rounds (Reinforce-Ada Seq, docs/trainer.md "Sampling in rounds"): every round is ONE generation call per
rank, so in colocate mode one ``LLM.generate`` per round, and the training pass replays the chosen completions (no
further call). A scripted reward (each prompt's successes and failures, consumed in the order its completions are
scored) makes the number of rounds and the prompts of each round known in advance.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers.allocation import RecordingAllocator, SkewedAllocator
from helpers.stand_in_llm import StandInSamplingParams, expected_completion, fresh_stand_in_class
from helpers.trainer import SCRIPTED_PROMPTS, ScriptedReward, build_trainer, param_snapshot, reward_length

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)

# ``VLLMGeneration._init_vllm`` (colocate) writes these into os.environ for vLLM's external launcher.
_ENV_WRITTEN_BY_TRL = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def colocate_seam(monkeypatch):
    """Make TRL build and drive the stand-in as if it were vLLM. The patches, all undone after the test:

    1. ``vllm_generation.is_vllm_available`` -> True: ``_init_vllm`` raises ImportError otherwise. (GRPOTrainer and
       GRPOConfig do not check it themselves in trl 1.16.)
    2. ``vllm_generation.LLM`` / ``SamplingParams``: the module imports them only ``if is_vllm_available()`` at import
       time, so the names do not exist (``raising=False``). ``RequestOutput`` is only a type hint and
       ``StructuredOutputsParams`` only used with structured outputs, so neither is needed.
    3. os.environ: ``_init_vllm`` sets RANK/LOCAL_RANK/WORLD_SIZE and MASTER_ADDR/MASTER_PORT (a free port, via
       ``ensure_master_addr_port``) and never unsets them; they are restored so later tests see a clean env.
    No distributed, device or CUDA patch is needed: with one process and tensor_parallel_size=1 no process group is
    created, and ``empty_cache()`` (sleep mode) is ``torch.cuda.empty_cache()``, a no-op without CUDA.
    """
    import trl.generation.vllm_generation as vllm_generation

    stand_in = fresh_stand_in_class()
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *args, **kwargs: True)
    monkeypatch.setattr(vllm_generation, "LLM", stand_in, raising=False)
    monkeypatch.setattr(vllm_generation, "SamplingParams", StandInSamplingParams, raising=False)
    saved = {name: os.environ.get(name) for name in _ENV_WRITTEN_BY_TRL}
    yield stand_in
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def reward_row_position(completions, **kwargs) -> list[float]:
    """Varies inside every group (the completions of one prompt are identical), so advantages and updates are real."""
    return [i / len(completions) for i in range(len(completions))]


def _build(tiny_model_dir, tmp_path, enable_sleep_mode=False):
    allocator = RecordingAllocator(SkewedAllocator())
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        allocator_object=allocator,
        reward_funcs=[reward_length, reward_row_position],
        per_device_train_batch_size=16,  # T = 16 completions, U = 4 prompts x G = 4: counts [10, 2, 2, 2]
        max_steps=2,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_enable_sleep_mode=enable_sleep_mode,
        # on (TRL's default): TRL then computes old_per_token_logps to compare with the engine's logprobs
        vllm_importance_sampling_correction=True,
        allocator="uniform",
    )
    return trainer, allocator


def _record_training_batches(trainer) -> list[dict[str, torch.Tensor]]:
    """Wrap the per-rank generation: a copy of the tensors of every batch the trainer trains on."""
    outputs = []
    original = trainer._generate_and_score_completions

    def generate_and_score(inputs):
        output = original(inputs)
        if trainer.model.training:
            outputs.append({k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)})
        return output

    trainer._generate_and_score_completions = generate_and_score
    return outputs


def _record_rows(trainer):
    """Wrap TRL's scoring and the per-rank generation so every row's prompt, completion and logprobs are kept."""
    scored = []
    original_rewards = trainer._calculate_rewards

    def calculate_rewards(inputs, prompts, completions, completion_ids_list):
        scored.append(
            [
                (row["prompt_id"], row["prompt"], list(ids))
                for row, ids in zip(inputs, completion_ids_list, strict=True)
            ]
        )
        return original_rewards(inputs, prompts, completions, completion_ids_list)

    trainer._calculate_rewards = calculate_rewards
    return scored, _record_training_batches(trainer)


def _tokenize(trainer, prompt: str) -> list[int]:
    return trainer.processing_class(text=[prompt])["input_ids"][0]  # as GRPOTrainer._tokenize_prompts does


# long: one 2-step run checked from every side (engine construction, calls, rows, logprobs, weight syncs, events)
@pytest.mark.parametrize("enable_sleep_mode", [False, True], ids=["awake", "sleep-mode"])
def test_colocate_generates_one_completion_per_row_aligned_with_its_prompt(
    tiny_model_dir, tmp_path, colocate_seam, enable_sleep_mode
):
    trainer, allocator = _build(tiny_model_dir, tmp_path, enable_sleep_mode)
    (llm,) = colocate_seam.instances  # TRL built exactly one engine for the single process
    initial = param_snapshot(trainer.model)
    scored, outputs = _record_rows(trainer)
    trainer.train()

    total = trainer.args.generation_batch_size
    eos = trainer.processing_class.eos_token_id
    assert total == 16 and llm.eos_token_id == eos

    # TRL built the engine the colocate way, from the training model's checkpoint.
    assert llm.init_kwargs["model"] == str(tiny_model_dir)
    assert llm.init_kwargs["distributed_executor_backend"] == "external_launcher"
    assert llm.init_kwargs["tensor_parallel_size"] == 1 and llm.init_kwargs["seed"] == 0
    assert llm.init_kwargs["enable_sleep_mode"] is enable_sleep_mode

    # One generate call per step, each with exactly L = T prompts (one process) and n == 1.
    assert [len(call.prompt_token_ids) for call in llm.generate_calls] == [total, total]
    for call in llm.generate_calls:
        params = call.sampling_params
        assert params.n == 1 and params.logprobs == 0 and params.max_tokens == trainer.max_completion_length
        assert params.temperature == trainer.temperature and call.use_tqdm is False

    # The allocation is skewed and each step's generate call holds every prompt exactly count times.
    assert [counts for _, counts in allocator.history] == [[10, 2, 2, 2], [10, 2, 2, 2]]
    texts = dict(zip(trainer.train_dataset["prompt_id"], trainer.train_dataset["prompt"], strict=True))
    for (ids, counts), call in zip(allocator.history, llm.generate_calls, strict=True):
        want = Counter({tuple(_tokenize(trainer, texts[i])): c for i, c in zip(ids, counts, strict=True)})
        assert Counter(tuple(p) for p in call.prompt_token_ids) == want

    # Every scored row carries the completion the engine produced for ITS prompt, and groups match the allocation.
    all_completions = {tuple(expected_completion(_tokenize(trainer, t), eos)) for t in texts.values()}
    assert len(all_completions) == len(texts)  # the function tells the 8 prompts apart, so a mix-up would show
    assert len(scored) == 2
    for (ids, counts), rows in zip(allocator.history, scored, strict=True):
        assert len(rows) == total
        assert Counter(pid for pid, _, _ in rows) == Counter(dict(zip(ids, counts, strict=True)))
        for pid, prompt, completion in rows:
            assert prompt == texts[pid]
            assert completion == expected_completion(_tokenize(trainer, prompt), eos)
    assert sorted(trainer._logs["extra"]["group_size"]) == [2] * 6 + [10] * 10

    # The tensors TRL trains on: prompt row i, completion row i and the engine's logprobs row i belong together, and
    # the engine's logprobs (computed with the weights it was sent) equal the trainer's own: every sync arrived.
    assert len(outputs) == 2
    for output in outputs:
        mask = output["completion_mask"].bool()
        assert mask.all()  # every completion ended with EOS within max_completion_length
        for i in range(total):
            prompt = output["prompt_ids"][i][output["prompt_mask"][i].bool()].tolist()
            assert output["completion_ids"][i].tolist() == expected_completion(prompt, eos)
        torch.testing.assert_close(
            output["sampling_per_token_logps"], output["old_per_token_logps"], rtol=0, atol=1e-4
        )
        ratio = output["importance_sampling_ratio"]  # per sequence: TRL's default sequence_mask mode
        torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-3)

    # Weights were synced before each step's generation: all parameters, the initial ones first, then moved ones.
    names = [name for name, _ in trainer.model.named_parameters()]
    assert len(llm.weight_syncs) == 2
    for synced in llm.weight_syncs:
        assert sorted(synced) == sorted(names)
    for name in names:
        torch.testing.assert_close(llm.weight_syncs[0][name], initial[name])
    assert any(not torch.equal(llm.weight_syncs[1][n], llm.weight_syncs[0][n]) for n in names)

    # Order of engine events per step: push weights, reset the prefix cache, then generate (sleep mode: wake, sleep).
    kinds = [event[0] for event in llm.events if event[0] != "load_weights"]
    loads_before = [
        sum(1 for e in llm.events[:position] if e[0] == "load_weights")
        for position, event in enumerate(llm.events)
        if event[0] == "generate"
    ]
    assert loads_before == [len(names), 2 * len(names)]
    if enable_sleep_mode:
        step = ["wake_up", "reset_prefix_cache", "wake_up", "generate", "sleep"]
        assert kinds == ["sleep", *step, *step]
        wakes = [event[1] for event in llm.events if event[0] == "wake_up"]
        assert wakes == [("weights",), ("kv_cache",)] * 2
    else:
        assert kinds == ["reset_prefix_cache", "generate"] * 2

    # TRL's own checks in _generate_and_score_completions would have raised on a shape mismatch; the metrics landed.
    logged = {k: v for log in trainer.state.log_history for k, v in log.items()}
    assert logged["allocation/count_max"] == 10 and logged["allocation/budget_used"] == total
    assert np.isfinite(logged["loss"]) and logged["frac_reward_zero_std"] == 0.0
    assert logged["sampling/sampling_logp_difference/max"] < 1e-4


# Sampling in rounds: rounds of 4 per unfinished prompt, at most 12 per prompt; Pos exits at the first success.
#   round 1: all 4 prompts x 4 = 16; "always solved" and "mixed from the start" are done
#   round 2: "never solved" and "solved at its 6th try" x 4 = 8; the latter's 6th completion is a success
#   round 3: "never solved" x 4 = 4; it has reached max_rollouts = 12
EXPECTED_ROUNDS = [
    dict.fromkeys(SCRIPTED_PROMPTS, 4),
    {"never solved": 4, "solved at its 6th try": 4},
    {"never solved": 4},
]


def test_seq_pos_in_colocate_mode_makes_one_generate_call_per_round(tiny_model_dir, tmp_path, colocate_seam):
    reward = ScriptedReward()
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        Dataset.from_dict({"prompt": SCRIPTED_PROMPTS}),
        reward_funcs=reward,
        per_device_train_batch_size=16,  # T = 16: 4 prompts x n = 4
        max_steps=1,
        use_vllm=True,
        vllm_mode="colocate",
        allocator="reinforce_ada_seq_pos",
        allocator_kwargs={"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
    )
    (llm,) = colocate_seam.instances
    trained = _record_training_batches(trainer)
    trainer.train()

    total = trainer.args.generation_batch_size
    assert total == 16

    # ONE generate call per round, each holding exactly the round's prompts (n=1 per row), none in the training pass.
    assert [len(call.prompt_token_ids) for call in llm.generate_calls] == [16, 8, 4]
    for call, expected in zip(llm.generate_calls, EXPECTED_ROUNDS, strict=True):
        assert call.sampling_params.n == 1 and call.sampling_params.max_tokens == trainer.max_completion_length
        assert Counter(tuple(ids) for ids in call.prompt_token_ids) == {
            tuple(_tokenize(trainer, p)): c for p, c in expected.items()
        }
    # The weights are pushed once per step, before the first round, not once per round.
    kinds = [event[0] for event in llm.events if event[0] != "load_weights"]
    assert kinds == ["reset_prefix_cache", "generate", "generate", "generate"]

    # The rounds follow the scripts: one scoring call per round with that round's prompts, never again in training.
    assert [Counter(call) for call in reward.calls] == [Counter(expected) for expected in EXPECTED_ROUNDS]
    log = next(log for log in trainer.state.log_history if "rounds/per_step" in log)
    assert log["rounds/per_step"] == 3 and log["rounds/generated"] == 28 and log["rounds/trained"] == total
    assert log["rounds/prompts_finished"] == 3 and log["rounds/prompts_unfinished"] == 1
    assert trainer.prompt_statistics.batch(range(4)).attempts.tolist() == [12.0, 4.0, 8.0, 4.0]

    # The training batch is exactly generation_batch_size, n per prompt, with the engine's completions and logprobs.
    (output,) = trained
    assert output["completion_ids"].shape[0] == total and output["advantages"].shape == (total,)
    eos = trainer.processing_class.eos_token_id
    prompts = []
    for i in range(total):
        prompt = output["prompt_ids"][i][output["prompt_mask"][i].bool()].tolist()
        completion = output["completion_ids"][i][output["completion_mask"][i].bool()].tolist()
        assert completion == expected_completion(prompt, eos)
        prompts.append(tuple(prompt))
    assert Counter(prompts) == {tuple(_tokenize(trainer, p)): trainer.num_generations for p in SCRIPTED_PROMPTS}
    torch.testing.assert_close(output["sampling_per_token_logps"], output["old_per_token_logps"], rtol=0, atol=1e-4)
