"""Knapsack RL's run (arXiv 2509.25849) in TRL: the DAPO recipe on DAPO-Math-17K with AdaptiveGRPOTrainer.

Qwen2.5-Math-7B, 8 completions per prompt on average, each prompt's count N_i in [2, 128] chosen by an allocator,
learning rate 1e-6, clip 0.2 / 0.28 (DAPO's clip-higher), token-level loss, and a math-verify reward; no token
budget, as in the paper (`--generation_token_budget auto` gives the library's default). Every option is a flag
(`--help`); `--config recipe.yaml` sets many at once, as in TRL's scripts.

    # the paper's run, 8 GPUs on one node (vLLM colocated)
    accelerate launch --config_file examples/accelerate_configs/multi_gpu.yaml examples/train_dapo.py \
        --config examples/recipes/knapsack_rl_qwen2.5_math_7b.yaml

    # CPU smoke run: a local model and a local parquet in DAPO-Math-17K's schema
    python examples/train_dapo.py --config examples/recipes/cpu_smoke.yaml \
        --model_name_or_path path/to/model --dataset_name path/to/dapo.parquet

Other layouts (one GPU, DeepSpeed ZeRO-2/3, FSDP2, a vLLM server on another node): docs/quickstart.md and
docs/serving.md.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from datasets import Dataset, load_dataset, load_from_disk
from math_verify import parse, verify
from trl import ModelConfig, TrlParser, get_peft_config, get_quantization_config

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
from trl_adaptive.hub import load_statistics, push_statistics_to_hub, statistics_dataset


@dataclass
class DAPOScriptArguments:
    """Data, warm start and Hub options of this script (the trainer's options are AdaptiveGRPOConfig's)."""

    dataset_name: str = field(
        default="BytedTsinghua-SIA/DAPO-Math-17k",
        metadata={
            "help": "Hub dataset id, or a local path: a .parquet / .json / .jsonl / .csv file, a folder of such "
            "files, or a folder written by Dataset.save_to_disk. Rows in DAPO-Math-17K's schema (see "
            "to_prompt_and_answer)."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name on the Hub."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dedup_prompts: bool = field(
        default=True,
        metadata={
            "help": "Keep one row per prompt (by extra_info.index, else by prompt text). The Hub copy of "
            "DAPO-Math-17K repeats each of its 17,917 prompts 100 times."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on the first N prompts only (after deduplication)."}
    )
    warm_start_statistics: str | None = field(
        default=None,
        metadata={
            "help": "Per-prompt statistics of an earlier run to start from: a Hub dataset pushed with "
            "--push_statistics, a local .parquet / save_to_disk folder, a prompt_statistics.json, or a run's "
            "output_dir. Prompt ids and fingerprints must match this run's dataset."
        },
    )
    push_statistics: bool = field(
        default=True,
        metadata={"help": "With --push_to_hub, also push the per-prompt statistics as a dataset repo."},
    )
    statistics_repo_id: str | None = field(
        default=None,
        metadata={"help": "Dataset repo of the statistics; default: <hub_model_id>-prompt-statistics."},
    )


# The knobs Knapsack RL's run sets (paper Section 5.1 and Appendix C; its official run_knapsack_grpo_7b.sh). They are
# this script's defaults; examples/recipes/knapsack_rl_qwen2.5_math_7b.yaml adds batch sizes, lengths and vLLM.
PAPER_DEFAULTS = dict(
    model_name_or_path="Qwen/Qwen2.5-Math-7B",
    output_dir="outputs/dapo-knapsack",
    allocator="knapsack",
    num_generations=8,  # N: the AVERAGE completions per prompt; the budget is generation_batch_size
    min_rollouts=2,  # N_low
    max_rollouts=128,  # N_up
    generation_token_budget=None,  # the paper's allocation, not the library's default "uniform" token budget
    learning_rate=1e-6,
    epsilon=0.2,  # clip low
    epsilon_high=0.28,  # DAPO's clip-higher
    loss_type="dapo",  # token-level loss: normalised by the number of tokens in the global batch
    beta=0.0,  # no KL term
    success_threshold=1.0,  # a completion is a success when math_verify says its answer is right
)


# ---------------------------------------------------------------------------------------------------------------------
# Data: DAPO-Math-17K -> {"prompt": [user message], "answer": reference}
# ---------------------------------------------------------------------------------------------------------------------
DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def to_prompt_and_answer(example: dict) -> dict:
    """The prompt format and the answer column, for the layouts DAPO-Math-17K comes in.

    - ``BytedTsinghua-SIA/DAPO-Math-17k`` (verl's format): ``prompt`` is ``[{"role": "user", "content": ...}]``
      holding DAPO's instruction around the problem, and the answer is ``reward_model["ground_truth"]``.
    - ``open-r1/DAPO-Math-17k-Processed``: ``prompt`` is that same user text as a string, the answer ``solution``.
    - Any other file: ``prompt`` (string or messages) or a bare ``problem`` (wrapped in DAPO's instruction), and
      ``answer``.
    """
    if "problem" in example and "prompt" not in example:
        prompt = DAPO_INSTRUCTION.format(problem=example["problem"])
    else:
        prompt = example["prompt"]
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if isinstance(example.get("reward_model"), dict):
        answer = example["reward_model"]["ground_truth"]
    elif "solution" in example:
        answer = example["solution"]
    else:
        answer = example["answer"]
    return {"prompt": [{"role": m["role"], "content": m["content"]} for m in prompt], "answer": str(answer)}


def drop_duplicate_prompts(dataset: Dataset) -> Dataset:
    """Keep the first row of each prompt: by ``extra_info.index`` (one id per DAPO prompt) when present, else text."""
    if "extra_info" in dataset.column_names and "index" in dataset.features["extra_info"]:
        keys = dataset.flatten().select_columns(["extra_info.index"]).to_pandas()["extra_info.index"]
    else:
        keys = pd.Series([str(p) for p in dataset["prompt"]])
    keep = np.flatnonzero(~keys.duplicated(keep="first").to_numpy())
    return dataset if len(keep) == len(dataset) else dataset.select(keep)


def load_prompts(script_args: DAPOScriptArguments) -> Dataset:
    """Load from the Hub or a local path, deduplicate, map to prompt / answer."""
    path = Path(script_args.dataset_name)
    split = script_args.dataset_train_split
    if path.is_dir() and (path / "dataset_info.json").is_file():  # Dataset.save_to_disk
        dataset = load_from_disk(str(path))
    elif path.is_file():
        builder = {".jsonl": "json", ".parquet": "parquet", ".json": "json", ".csv": "csv"}[path.suffix]
        dataset = load_dataset(builder, data_files={split: str(path)}, split=split)
    else:  # a folder of data files, or a Hub dataset id
        dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config, split=split)
    if script_args.dedup_prompts:
        dataset = drop_duplicate_prompts(dataset)
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    return dataset.map(to_prompt_and_answer, remove_columns=dataset.column_names)


# ---------------------------------------------------------------------------------------------------------------------
# Reward: math-verify, no hand-written answer parsing
# ---------------------------------------------------------------------------------------------------------------------
def math_verify_reward(completions: list, answer: list[str], **kwargs) -> list[float | None]:
    """1.0 when math_verify finds the completion's final answer equal to the reference, else 0.0.

    ``parse`` extracts the last boxed / LaTeX / plain expression ("Answer: 42", "\\boxed{42}", "$\\frac{1}{2}$"), and
    ``verify`` compares symbolically. A reference math_verify cannot parse gives ``None``: TRL skips that completion
    (NaN reward) and the statistics do not count it.
    """
    # math_verify times out with signal.alarm, which only works in the main thread (as in trl.rewards).
    timeout = 10 if threading.current_thread() is threading.main_thread() else None
    rewards: list[float | None] = []
    for completion, reference in zip(completions, answer, strict=True):
        gold = parse(reference, parsing_timeout=timeout)
        if not gold:
            rewards.append(None)
            continue
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        prediction = parse(text, parsing_timeout=timeout)
        rewards.append(float(verify(gold, prediction, timeout_seconds=timeout)))
    return rewards


# ---------------------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------------------
def main(script_args: DAPOScriptArguments, training_args: AdaptiveGRPOConfig, model_args: ModelConfig) -> None:
    model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    training_args.model_init_kwargs = model_init_kwargs | (training_args.model_init_kwargs or {})
    train_dataset = load_prompts(script_args)
    statistics = None
    if script_args.warm_start_statistics:
        statistics = load_statistics(
            script_args.warm_start_statistics, success_threshold=training_args.success_threshold
        )

    trainer = AdaptiveGRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=math_verify_reward,
        args=training_args,
        train_dataset=train_dataset,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        statistics=statistics,
    )
    print_ = trainer.accelerator.print
    print_(f"{len(train_dataset)} prompts; allocator {trainer.allocator!r}")
    print_(
        f"budget {training_args.generation_batch_size} completions per generation batch over "
        f"{training_args.generation_batch_size // training_args.num_generations} prompts, on "
        f"{trainer.accelerator.num_processes} process(es)"
    )

    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)

    # Save the model, the card and the per-prompt statistics (as a dataset too) next to it.
    trainer.save_model(training_args.output_dir)
    hub_dataset = None if os.path.exists(script_args.dataset_name) else script_args.dataset_name
    statistics_repo_id = None
    if training_args.push_to_hub and script_args.push_statistics:
        statistics_repo_id = script_args.statistics_repo_id or f"{trainer.hub_model_id}-prompt-statistics"
    if trainer.accelerator.is_main_process:
        summary = trainer.allocation_summary()
        trainer.create_model_card(dataset_name=hub_dataset, statistics_repo_id=statistics_repo_id)
        statistics_dataset(trainer).to_parquet(os.path.join(training_args.output_dir, "prompt_statistics.parquet"))
        ratio = summary["metrics"].get("allocation/effective_gradient_ratio", {}).get("mean", float("nan"))
        print_(f"effective-gradient ratio (run mean) {ratio:.3f}; prompt status {summary['prompt_status']}")
        print_(f"model, card and prompt statistics saved to {training_args.output_dir}")

    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=hub_dataset, statistics_repo_id=statistics_repo_id)
        print_(f"model pushed to https://huggingface.co/{trainer.hub_model_id}")
        if statistics_repo_id is not None and trainer.accelerator.is_main_process:
            url = push_statistics_to_hub(
                trainer, statistics_repo_id, model_repo_id=trainer.hub_model_id, private=training_args.hub_private_repo
            )
            print_(f"per-prompt statistics pushed to {url}")

    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()  # tears the process group down before exit (gloo can abort at exit otherwise)


def make_parser() -> TrlParser:
    parser = TrlParser(
        (DAPOScriptArguments, AdaptiveGRPOConfig, ModelConfig),
        description=__doc__.split("\n\n")[0],
        epilog="--config RECIPE.yaml sets any of these options from a YAML file (examples/recipes/); flags given on "
        "the command line override it. The adaptive options are --allocator, --allocator_kwargs, --min_rollouts, "
        "--max_rollouts, --success_threshold and the others of AdaptiveGRPOConfig (docs/configuration.md).",
    )
    parser.set_defaults(**PAPER_DEFAULTS)
    return parser


if __name__ == "__main__":
    script_args, training_args, model_args = make_parser().parse_args_and_config()
    main(script_args, training_args, model_args)
