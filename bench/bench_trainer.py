"""Step time of AdaptiveGRPOTrainer (uniform, knapsack) over GRPOTrainer at equal completions, on CPU.

Paired design: each round trains every variant for the same number of steps, in rotating order, from the same tiny
model and seed; the figure is the median over rounds of (variant step time / GRPOTrainer step time in that round).
Step time is TRL's own ``step_time`` metric (generation + scoring + loss + backward), first step excluded.

    .venv/bin/python bench/bench_trainer.py [--rounds 7] [--steps 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.tiny_model import build_tiny_model  # noqa: E402
from helpers.trainer import make_dataset, reward_has_vowel_e, tiny_config_kwargs  # noqa: E402
from transformers import PrinterCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer  # noqa: E402


def step_times(variant: str, model_dir: Path, steps: int, out: str) -> list[float]:
    # 16 prompts, 4 per generation batch: epoch 1 is uniform for every trainer, knapsack adapts from step 5 on.
    kwargs = tiny_config_kwargs(
        out,
        max_steps=steps,
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=16,
        disable_tqdm=True,
    )
    if variant == "grpo":
        trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=reward_has_vowel_e,
            args=GRPOConfig(**kwargs),
            train_dataset=make_dataset(16),
        )
    else:
        args = AdaptiveGRPOConfig(**kwargs, allocator=variant, max_rollouts=32, generation_token_budget=None)
        trainer = AdaptiveGRPOTrainer(
            model=str(model_dir), reward_funcs=reward_has_vowel_e, args=args, train_dataset=make_dataset(16)
        )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return [log["step_time"] for log in trainer.state.log_history if "step_time" in log][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    hf_logging.set_verbosity_error()
    variants = ["grpo", "uniform", "knapsack"]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model")
        ratios: dict[str, list[float]] = {v: [] for v in variants[1:]}
        medians: dict[str, list[float]] = {v: [] for v in variants}
        for round_index in range(args.rounds):
            order = variants[round_index % 3 :] + variants[: round_index % 3]  # rotate to cancel drift
            per_round = {v: statistics.median(step_times(v, model_dir, args.steps, f"{tmp}/{v}")) for v in order}
            for v in variants:
                medians[v].append(per_round[v])
            for v in variants[1:]:
                ratios[v].append(per_round[v] / per_round["grpo"])
    print(f"| trainer | median step time (ms) | ratio vs GRPOTrainer (median of {args.rounds} paired rounds) |")
    print("|---|---|---|")
    print(f"| GRPOTrainer | {1000 * statistics.median(medians['grpo']):.1f} | 1.000 |")
    for v in variants[1:]:
        print(
            f"| AdaptiveGRPOTrainer ({v}) | {1000 * statistics.median(medians[v]):.1f} | "
            f"{statistics.median(ratios[v]):.3f} (min {min(ratios[v]):.3f}, max {max(ratios[v]):.3f}) |"
        )


if __name__ == "__main__":
    main()
