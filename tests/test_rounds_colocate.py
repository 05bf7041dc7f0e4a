"""Sampling in rounds (Reinforce-Ada Seq) in TRL's vLLM *colocate* mode, on CPU with the in-process stand-in ``LLM``.

The claim under test (docs/trainer.md, "Sampling in rounds"): every round is ONE generation call per rank, so in
colocate mode one ``LLM.generate`` per round, and the training pass replays the chosen completions (no further call).
A scripted reward (each prompt's successes and failures, consumed in the order its completions are scored) makes the
number of rounds and the prompts of each round known in advance. TRL's ``VLLMGeneration`` runs unchanged; only the
vLLM names it imports are replaced, as in tests/test_colocate.py.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest
import torch
from datasets import Dataset
from stand_in_llm import StandInSamplingParams, expected_completion, fresh_stand_in_class
from trainer_helpers import tiny_config_kwargs

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

# ``VLLMGeneration._init_vllm`` (colocate) writes these into os.environ and never unsets them.
_ENV_WRITTEN_BY_TRL = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# Rounds of 4 per unfinished prompt, at most 12 per prompt; Pos exits at the first success.
#   round 1: all 4 prompts x 4 = 16; "always solved" and "mixed from the start" are done
#   round 2: "never solved" and "solved at its 6th try" x 4 = 8; the latter's 6th completion is a success
#   round 3: "never solved" x 4 = 4; it has reached max_rollouts = 12
SCRIPTS = {
    "never solved": [0.0] * 100,
    "always solved": [1.0] * 100,
    "solved at its 6th try": [0.0] * 5 + [1.0] * 95,
    "mixed from the start": [1.0, 0.0] * 50,
}
PROMPTS = list(SCRIPTS)
EXPECTED_ROUNDS = [
    dict.fromkeys(PROMPTS, 4),
    {"never solved": 4, "solved at its 6th try": 4},
    {"never solved": 4},
]


class ScriptedReward:
    """Reward of the k-th scored completion of a prompt = SCRIPTS[prompt][k]; records every call."""

    __name__ = "scripted"

    def __init__(self) -> None:
        self.position: dict[str, int] = defaultdict(int)
        self.calls: list[list[str]] = []

    def __call__(self, prompts, completions, **kwargs):
        self.calls.append(list(prompts))
        rewards = []
        for prompt in prompts:
            rewards.append(SCRIPTS[prompt][self.position[prompt]])
            self.position[prompt] += 1
        return rewards


@pytest.fixture
def colocate_seam(monkeypatch):
    """TRL builds and drives the stand-in as if it were vLLM's ``LLM`` (see test_colocate.colocate_seam)."""
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


def test_seq_pos_in_colocate_mode_makes_one_generate_call_per_round(tiny_model_dir, tmp_path, colocate_seam):
    reward = ScriptedReward()
    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(
            str(tmp_path),
            per_device_train_batch_size=16,  # T = 16: 4 prompts x n = 4
            max_steps=1,
            use_vllm=True,
            vllm_mode="colocate",
        ),
        allocator="reinforce_ada_seq_pos",
        allocator_kwargs={"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
    )
    trainer = AdaptiveGRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
    )
    (llm,) = colocate_seam.instances
    trained = []
    original = trainer._generate_and_score_completions

    def record(inputs):
        output = original(inputs)
        if trainer.model.training:
            trained.append({k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)})
        return output

    trainer._generate_and_score_completions = record
    trainer.train()

    total = trainer.args.generation_batch_size
    assert total == 16

    # ONE generate call per round, each holding exactly the round's prompts (n=1 per row), none in the training pass.
    def tokenize(prompt: str) -> tuple[int, ...]:
        return tuple(trainer.processing_class(text=[prompt])["input_ids"][0])

    assert [len(call.prompt_token_ids) for call in llm.generate_calls] == [16, 8, 4]
    for call, expected in zip(llm.generate_calls, EXPECTED_ROUNDS, strict=True):
        assert call.sampling_params.n == 1 and call.sampling_params.max_tokens == trainer.max_completion_length
        assert Counter(tuple(ids) for ids in call.prompt_token_ids) == {tokenize(p): c for p, c in expected.items()}
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
    assert Counter(prompts) == {tokenize(p): trainer.num_generations for p in PROMPTS}
    torch.testing.assert_close(output["sampling_per_token_logps"], output["old_per_token_logps"], rtol=0, atol=1e-4)
