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

import numpy as np
import pytest
import torch
from datasets import Dataset, Features, List, Value
from datasets import Image as ImageFeature
from helpers.tiny_vlm import build_tiny_vlm
from helpers.trainer import param_snapshot, solved_at_try, tiny_config_kwargs
from PIL import Image
from transformers import AutoProcessor
from trl import GRPOConfig, GRPOTrainer

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE, read_allocation_log
from trl_adaptive.stats import stable_prompt_ids
from trl_adaptive.trainer.state import derived_prompt_id

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)

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


def same_question_dataset(form: str):
    """The eight pictures, each asked the same question (one text): as an ``image`` column of a stream without an id
    column, or inside the messages of a map-style dataset (TRL's inline image parts)."""
    question = "What is in this picture?"
    images = [pictures(i)[0] for i in range(NUM_PROMPTS)]
    if form == "stream":
        rows = {"prompt": [[{"role": "user", "content": question}]] * NUM_PROMPTS, "image": images}
        return Dataset.from_dict(rows | {"success_rate": RATES}).to_iterable_dataset()
    part = {"type": Value("string"), "image": ImageFeature(), "text": Value("string")}
    message = {"role": Value("string"), "content": List(part)}
    features = Features({"prompt": List(message), "success_rate": Value("float64")})
    rows = [
        {
            "prompt": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": image, "text": None},
                        {"type": "text", "image": None, "text": question},
                    ],
                }
            ],
            "success_rate": rate,
        }
        for image, rate in zip(images, RATES, strict=True)
    ]
    return Dataset.from_list(rows, features=features)


def picture_of(prompt) -> int:
    """Which picture a prompt's messages show (its red channel), whichever form the image came in."""
    image = next(part["image"] for part in prompt[-1]["content"] if part["type"] == "image")
    return (image.getpixel((0, 0))[0] - 8) // 16


@pytest.mark.parametrize("form", ["stream", "inline"])
def test_one_question_about_eight_pictures_is_eight_prompts(tiny_vlm_dir, tmp_path, form):
    """Prompt identity counts the images: without an id column a stream derives each prompt's id from its text AND
    its image, and a map-style dataset fingerprints the images inside its messages. Each picture keeps its own
    statistics and the allocation follows them."""
    seen: Counter = Counter()

    def picture_reward(prompts, completions, **columns):
        rewards = []
        for prompt in prompts:
            index = picture_of(prompt)
            rewards.append(solved_at_try(RATES[index], seen[index]))
            seen[index] += 1
        return rewards

    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(str(tmp_path), per_device_train_batch_size=16, max_steps=4), max_rollouts=8
    )
    dataset = same_question_dataset(form)
    trainer = AdaptiveGRPOTrainer(
        model=str(tiny_vlm_dir), reward_funcs=picture_reward, args=args, train_dataset=dataset
    )
    trainer.train()

    store = trainer.prompt_statistics
    assert len(set(store.state_dict()["fingerprints"])) == len(store.prompt_ids) == NUM_PROMPTS
    if form == "stream":  # picture i's id: derived from its row, text and image
        ids = stable_prompt_ids([derived_prompt_id(row) for row in dataset])
    else:  # row numbers
        ids = np.arange(NUM_PROMPTS)
    assert sorted(ids.tolist()) == sorted(store.prompt_ids.tolist())
    records = read_allocation_log(str(tmp_path / ALLOCATION_LOG_FILE))
    assert len(records) == 4 and any(len(set(r["counts"])) > 1 for r in records)  # allocated per picture
    stats = store.batch(ids)
    assert stats.attempts.sum() == sum(seen.values()) == 64
    for index in range(NUM_PROMPTS):  # each picture's statistics hold its own rewards only
        if RATES[index] in (0.0, 1.0):
            assert stats.successes[index] == RATES[index] * stats.attempts[index], index
