"""Image prompts (vision-language GRPO) under adaptive allocation, as a GRPOTrainer user would train them.

Every prompt "What is in picture i?" comes with its own image (an ``image`` column; or two, an ``images`` column):
a solid colour whose red channel encodes i, 28x28 or 56x56 pixels. Wherever completions are made, two things are
checked:

- scoring: each reward call gets, for each completion, the image(s) of ITS OWN prompt, and the same image(s) sit in
  the prompt's messages;
- training: each row of the batch the loss is computed on holds its prompt's pixels, a completion the reward function
  scored for that prompt (on the round path these are replayed, not generated again) and an advantage of the sign of
  that completion's reward.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest
import torch
from datasets import Dataset
from helpers.tiny_vlm import build_tiny_vlm
from helpers.trainer import param_snapshot, solved_at_try, tiny_config_kwargs
from PIL import Image
from transformers import AutoProcessor
from trl import GRPOConfig, GRPOTrainer

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
from trl_adaptive.trainer.allocation_log import ALLOCATION_LOG_FILE, read_allocation_log

NUM_PROMPTS = 8
RATES = [1.0, 0.0, 0.5, 1 / 3] * 2  # by picture: always, never, every 2nd and every 3rd completion solved


def pictures(index: int, count: int = 1) -> list[Image.Image]:
    """The ``count`` images of prompt ``index``: red channel 16 * index + 8, each its own blue and size."""
    sizes = (28, 56) if index % 2 == 0 else (56, 28)
    return [Image.new("RGB", (sizes[k % 2],) * 2, (16 * index + 8, 100, 200 - 100 * k)) for k in range(count)]


def describe(image: Image.Image) -> tuple:
    """What tells the test's images apart: size and colour (PNG round trips keep both)."""
    return image.size, image.getpixel((0, 0))


def prompt_index(text: str) -> int:
    return int(re.search(r"picture (\d+)\?", text).group(1))


def image_dataset(column: str = "image", with_rates: bool = False) -> Dataset:
    count = 2 if column == "images" else 1
    images = [pictures(i, count) for i in range(NUM_PROMPTS)]
    columns = {
        "prompt": [[{"role": "user", "content": f"What is in picture {i}?"}] for i in range(NUM_PROMPTS)],
        column: images if column == "images" else [row[0] for row in images],
    }
    if with_rates:
        columns["success_rate"] = RATES  # a prior: step 1 is already adaptive
    return Dataset.from_dict(columns)


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory):
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-llava"))


class PictureReward:
    """Scores completion k of picture i: 1.0 when RATES[i] says that try succeeds, else 0.0 (or, with ``by_text``,
    the completion's length / 10). Records each completion's picture, token ids and reward, and every completion
    whose ``image``/``images`` column or prompt messages do not hold its own prompt's pictures."""

    __name__ = "picture_reward"

    def __init__(self, by_text: bool = False) -> None:
        self.by_text = by_text
        self.seen: Counter = Counter()
        self.scored: list[tuple[int, tuple[int, ...], float]] = []
        self.mismatched: list[tuple] = []

    def __call__(self, prompts, completions, completion_ids, **columns):
        row_images = columns["images"] if "images" in columns else [[image] for image in columns["image"]]
        rewards = []
        for prompt, completion, ids, images in zip(prompts, completions, completion_ids, row_images, strict=True):
            parts = prompt[-1]["content"]
            index = prompt_index(next(part["text"] for part in parts if part["type"] == "text"))
            own = [describe(image) for image in pictures(index, len(images))]
            in_column = [describe(image) for image in images]
            in_message = [describe(part["image"]) for part in parts if part["type"] == "image"]
            if not own == in_column == in_message:
                self.mismatched.append((index, in_column, in_message))
            if self.by_text:
                value = len(completion[0]["content"]) / 10.0
            else:
                value = solved_at_try(RATES[index], self.seen[index])
                self.seen[index] += 1
            self.scored.append((index, tuple(ids), value))
            rewards.append(value)
        return rewards

    def assert_images_matched(self) -> None:
        assert self.scored and not self.mismatched, f"(picture, column's, message's): {self.mismatched[:3]}"


class TrainingBatches:
    """Wraps a trainer's ``_generate_and_score_completions``: checks every batch the loss is computed on."""

    def __init__(self, trainer, model_dir, reward: PictureReward, images_per_prompt: int = 1) -> None:
        processor = AutoProcessor.from_pretrained(model_dir)
        self.tokenizer = processor.tokenizer
        self.count = images_per_prompt
        self.pixels = [
            processor.image_processor(images=pictures(i, images_per_prompt), return_tensors="pt")["pixel_values"]
            for i in range(NUM_PROMPTS)
        ]
        self.reward = reward
        self.rows = 0
        self.original = trainer._generate_and_score_completions
        trainer._generate_and_score_completions = self

    def __call__(self, inputs):
        output = self.original(inputs)
        scored = defaultdict(set)  # (picture, completion ids) -> its rewards (the same completion may recur)
        for index, ids, value in self.reward.scored:
            scored[index, ids].add(value)
        assert output["num_images"] == [self.count] * len(output["prompt_ids"])
        for row, (ids, mask) in enumerate(zip(output["prompt_ids"], output["prompt_mask"], strict=True)):
            index = prompt_index(self.tokenizer.decode(ids[mask.bool()]))
            pixels = output["pixel_values"][row * self.count : (row + 1) * self.count]
            torch.testing.assert_close(pixels, self.pixels[index], rtol=0, atol=0)
            completion = tuple(output["completion_ids"][row][output["completion_mask"][row].bool()].tolist())
            assert scored[index, completion], f"row {row}: not a completion scored for picture {index}"
            if not self.reward.by_text:  # a success is never pushed down, a failure never up: its own reward
                advantage = output["advantages"][row].item()
                assert any((advantage >= 0) if r else (advantage <= 0) for r in scored[index, completion]), row
        self.rows += len(output["prompt_ids"])
        return output


def test_grpo_trainer_trains_on_the_fixture(tiny_vlm_dir, tmp_path):
    """The fixture is a valid VLM setup for GRPOTrainer itself; the vision tower learns, so images reach the loss."""
    reward = PictureReward(by_text=True)
    args = GRPOConfig(**tiny_config_kwargs(str(tmp_path), max_steps=1))
    trainer = GRPOTrainer(model=str(tiny_vlm_dir), reward_funcs=reward, args=args, train_dataset=image_dataset())
    batches = TrainingBatches(trainer, tiny_vlm_dir, reward)
    before = param_snapshot(trainer.model)
    trainer.train()
    assert trainer.state.global_step == 1 and batches.rows == 8
    reward.assert_images_matched()
    after = param_snapshot(trainer.model)
    changed = {name for name, p in before.items() if not torch.equal(after[name], p)}
    assert any("vision_tower" in name for name in changed) and any("language_model" in name for name in changed)


def test_uniform_reproduces_grpo_trainer_on_images(tiny_vlm_dir, tmp_path):
    """allocator="uniform" trains the same parameters as GRPOTrainer, bit for bit, after 2 steps with the same seed."""
    params = []
    for trainer_cls, config_cls in ((GRPOTrainer, GRPOConfig), (AdaptiveGRPOTrainer, AdaptiveGRPOConfig)):
        extra = {"allocator": "uniform"} if config_cls is AdaptiveGRPOConfig else {}
        args = config_cls(**tiny_config_kwargs(str(tmp_path / trainer_cls.__name__), max_steps=2), **extra)
        reward = PictureReward(by_text=True)
        trainer = trainer_cls(model=str(tiny_vlm_dir), reward_funcs=reward, args=args, train_dataset=image_dataset())
        trainer.train()
        reward.assert_images_matched()
        params.append(param_snapshot(trainer.model))
    grpo, ours = params
    for name, value in grpo.items():
        assert torch.equal(ours[name], value), name


@pytest.mark.parametrize(
    "dynamic_sampling, column",
    [(False, "image"), (True, "image"), (True, "images")],
    ids=["planned", "rounds", "rounds-two-images"],
)
def test_knapsack_on_images(tiny_vlm_dir, tmp_path, dynamic_sampling, column):
    """Per-prompt counts vary with each picture's success rate; every completion is scored with its own prompt's
    image(s) and trained on with its own prompt's pixels, on the planned path and on the round path (replayed)."""
    reward = PictureReward()
    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(str(tmp_path), per_device_train_batch_size=16, max_steps=2),
        allocator="knapsack",
        max_rollouts=8,
        dynamic_sampling=dynamic_sampling,
    )
    dataset = image_dataset(column, with_rates=True)
    trainer = AdaptiveGRPOTrainer(model=str(tiny_vlm_dir), reward_funcs=reward, args=args, train_dataset=dataset)
    batches = TrainingBatches(trainer, tiny_vlm_dir, reward, images_per_prompt=2 if column == "images" else 1)
    trainer.train()

    reward.assert_images_matched()
    assert batches.rows == 32  # 2 steps x 16 completions, every row checked
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert len(records) == 2 and all(sum(r["counts"]) == 16 for r in records)
    assert any(len(set(c for c in r["counts"] if c)) > 1 for r in records)  # the allocation varies per prompt
    logs = [log for log in trainer.state.log_history if "allocation/budget_used" in log]
    assert len(reward.scored) == sum(log.get("rounds/generated", 16.0) for log in logs)  # each scored once
    if dynamic_sampling:
        assert any(log.get("rounds/per_step", 1) > 1 for log in logs)  # the round path ran
    # The rewards reached the statistics per picture: pictures 0 and 4 always solved, 1 and 5 never.
    stats = trainer.prompt_statistics.batch(list(range(NUM_PROMPTS)))
    solved = [i for i in range(NUM_PROMPTS) if RATES[i] == 1.0 and stats.attempts[i] > 0]
    unsolved = [i for i in range(NUM_PROMPTS) if RATES[i] == 0.0 and stats.attempts[i] > 0]
    assert solved and all(stats.successes[i] == stats.attempts[i] for i in solved)
    assert unsolved and all(stats.successes[i] == 0 for i in unsolved)
