"""Shared builders for trainer tests: a tiny dataset, deterministic and scripted rewards, configs and trainers that run
on CPU in seconds."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from datasets import Dataset

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

PROMPTS = [
    "What is 2 + 3?",
    "Solve x * 7 = 42.",
    "Name a fox.",
    "Count to ten.",
    "Sum 1 to 10.",
    "What is 9 - 4?",
    "Spell dog.",
    "Say the alphabet.",
]


def make_dataset(num_prompts: int = 8, conversational: bool = False) -> Dataset:
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(num_prompts)]
    if conversational:
        return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})
    return Dataset.from_dict({"prompt": prompts})


def _text(completion: Any) -> str:
    return completion if isinstance(completion, str) else completion[0]["content"]


def reward_has_vowel_e(completions, **kwargs) -> list[float]:
    """1.0 when the completion contains an 'e': a random tiny model gives a spread of success rates."""
    return [1.0 if "e" in _text(c) else 0.0 for c in completions]


def reward_length(completions, **kwargs) -> list[float]:
    """A float reward with variance inside almost every group."""
    return [len(_text(c)) / 10.0 for c in completions]


def solved_at_try(rate: float, k: int) -> float:
    """The reward of a prompt's ``k``-th scored completion (from 0) when the prompt is solved at ``rate``: always at 1,
    never at 0, otherwise every ``round(1 / rate)``-th try, the first included."""
    return float(rate == 1.0 or (rate > 0 and k % round(1 / rate) == 0))


# Each prompt's rewards in the order its completions are scored, so exit rules and rounds are known in advance.
SCRIPTS = {
    "never solved": [0.0] * 100,
    "always solved": [1.0] * 100,
    "solved at its 6th try": [0.0] * 5 + [1.0] * 95,
    "mixed from the start": [1.0, 0.0] * 50,
    "shaped, always correct": [0.6, 0.9] * 50,
}
# The prompts with 0/1 scripts, in the order of a dataset built from them (prompt ids 0 to 3).
SCRIPTED_PROMPTS = ["never solved", "always solved", "solved at its 6th try", "mixed from the start"]


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


def tiny_config_kwargs(output_dir: str, **overrides: Any) -> dict[str, Any]:
    """GRPO settings for a CPU run: fp32 (exact comparisons), no saving, no reporting, 8 tokens per completion."""
    kwargs: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-2,  # large, so a few steps visibly move the tiny model's parameters
        max_steps=3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        temperature=1.0,
    )
    kwargs.update(overrides)
    return kwargs


def build_trainer(
    model_dir,
    output_dir,
    dataset=None,
    allocator_object=None,
    trainer_kwargs=None,
    *,
    reward_funcs=reward_has_vowel_e,
    **config,
) -> AdaptiveGRPOTrainer:
    """An AdaptiveGRPOTrainer on the tiny model: ``config`` holds AdaptiveGRPOConfig fields over
    :func:`tiny_config_kwargs`; ``allocator_object`` an Allocator instance passed to the trainer (``allocator`` in
    ``config`` is the config's name, knapsack unless given: the suite's reference allocator, whatever the default);
    the dataset defaults to ``make_dataset(8)``."""
    config.setdefault("allocator", "knapsack")
    return AdaptiveGRPOTrainer(
        model=str(model_dir),
        reward_funcs=reward_funcs,
        args=AdaptiveGRPOConfig(**tiny_config_kwargs(str(output_dir), **config)),
        train_dataset=make_dataset(8) if dataset is None else dataset,
        allocator=allocator_object,
        **(trainer_kwargs or {}),
    )


def scripted_rounds_trainer(model_dir, output_dir, reward_funcs, **config) -> AdaptiveGRPOTrainer:
    """One step of Seq-Balance over the four scripted prompts: 16 completions trained, rounds of 4 up to 12 per
    prompt (the counts the scripts fix are in test_completion_logs); ``config`` adds AdaptiveGRPOConfig fields."""
    return build_trainer(
        model_dir,
        output_dir,
        Dataset.from_dict({"prompt": SCRIPTED_PROMPTS}),
        reward_funcs=reward_funcs,
        per_device_train_batch_size=16,
        max_steps=1,
        allocator="reinforce_ada_seq_balance",
        allocator_kwargs={"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
        **config,
    )


def param_snapshot(model) -> dict[str, Any]:
    """A detached copy of every named parameter, to compare before and after training."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}
