"""AdaptiveGRPOTrainer in vLLM server mode against the stand-in server, through TRL's real VLLMClient."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from trainer_helpers import RecordingAllocator, SkewedAllocator, make_dataset, reward_length, tiny_config_kwargs

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
from trl_adaptive.serving import StandInVLLMServer, echo_completion, patch_trl_for_stand_in_server


@pytest.fixture(scope="module")
def seam():
    with patch_trl_for_stand_in_server():
        yield


def _server_config(tmp_path: Path, url: str, **overrides) -> AdaptiveGRPOConfig:
    kwargs = tiny_config_kwargs(str(tmp_path), max_steps=2, per_device_train_batch_size=16, **overrides)
    return AdaptiveGRPOConfig(
        **kwargs, allocator="uniform", use_vllm=True, vllm_mode="server", vllm_server_base_url=url
    )


def test_one_request_per_generation_batch_and_every_completion_on_its_own_prompt(tiny_model_dir, tmp_path, seam):
    """Echo mode makes each completion a function of its prompt: any misalignment shows up as a mismatch."""
    allocator = RecordingAllocator(SkewedAllocator())
    with StandInVLLMServer(tiny_model_dir, mode="echo") as server:
        trainer = AdaptiveGRPOTrainer(
            model=str(tiny_model_dir),
            reward_funcs=reward_length,
            args=_server_config(tmp_path, server.url),
            train_dataset=make_dataset(8),
            allocator=allocator,
        )
        steps = []
        original = trainer._calculate_rewards

        def check(inputs, prompts, completions, completion_ids_list):
            steps.append([(row["prompt_id"], list(ids)) for row, ids in zip(inputs, completion_ids_list, strict=True)])
            return original(inputs, prompts, completions, completion_ids_list)

        trainer._calculate_rewards = check
        trainer.train()
        generations = server.requests_to("/v1/completions")
        eos, stop_ids = server.engine.eos_token_id, server.engine.stop_ids

    # ONE request per generation batch carrying all 16 completions as duplicated prompts with n=1.
    assert [(r.summary["num_prompts"], r.summary["n"]) for r in generations] == [(16, 1)] * 2
    assert [counts for _, counts in allocator.history] == [[10, 2, 2, 2]] * 2
    tokenizer = trainer.processing_class
    prompt_ids = {i: tokenizer(p)["input_ids"] for i, p in enumerate(trainer.train_dataset["prompt"])}
    assert len(steps) == 2
    for (ids, counts), scored in zip(allocator.history, steps, strict=True):
        # Group sizes follow the allocation, not num_generations ...
        assert sorted(pid for pid, _ in scored) == sorted(
            i for i, c in zip(ids, counts, strict=True) for _ in range(c)
        )
        # ... and every completion is the echo of its own prompt.
        for prompt_id, completion in scored:
            assert completion == echo_completion(prompt_ids[prompt_id], 8, eos, stop_ids)


def test_trains_in_sample_mode_with_weight_sync(tiny_model_dir, tmp_path, seam):
    with StandInVLLMServer(tiny_model_dir) as server:
        trainer = AdaptiveGRPOTrainer(
            model=str(tiny_model_dir),
            reward_funcs=reward_length,
            args=_server_config(tmp_path, server.url, temperature=0.7),
            train_dataset=make_dataset(8),
            allocator=SkewedAllocator(),
        )
        trainer.train()
        assert len(server.requests_to("/v1/completions")) == 2
        assert len(server.requests_to("/update_weights")) == 2
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])
    assert trainer.state.log_history[0]["allocation/count_max"] == 10
