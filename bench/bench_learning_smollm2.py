"""SmolLM2-135M-Instruct on the arithmetic mix: the diagnostic benchmark (accuracy per token: bench_learning.py).

Each allocator trains from the same weights on the same prompts, in the same order, with the same seed and the same
number of completions per step (B = prompts_per_batch x generations). Measured (figures in docs/benchmarks.md):

- effective-gradient ratio per step (TRL logs), its mean over all steps and after the first epoch (epoch 1 is
  uniform for every allocator), and the all-correct / all-wrong zero-gradient shares;
- held-out accuracy (avg@k, sampled at the training temperature) on prompts never trained on, before and after;
- training prompts never solved by the initial model (0 of k samples) that the trained model solves at least once.

    nice -n 19 .venv/bin/python bench/bench_learning_smollm2.py --allocators uniform knapsack reinforce_ada_est cero \
        --prompts_per_level 12 --epochs 5 --seed 0 --output_dir out/bench_learning

Results are rewritten to OUTPUT_DIR/results.json after every allocator, so an interrupted benchmark keeps what
finished; OUTPUT_DIR/comparison holds the run report of all finished runs.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # the demo's recipe and its helpers

import numpy as np  # noqa: E402
from demo import DemoArguments, resolve_model, run_folder, train_run  # noqa: E402
from demo_utils.arithmetic import train_and_heldout  # noqa: E402
from demo_utils.evaluate import accuracy_by_level, solve_counts  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import TrlParser  # noqa: E402

from trl_adaptive.report import load_run, summarize, write_report  # noqa: E402


@dataclass
class BenchArguments:
    """What the benchmark measures besides training."""

    heldout_per_level: int = field(default=16, metadata={"help": "Held-out prompts per level (never trained on)."})
    eval_samples: int = field(default=8, metadata={"help": "Sampled answers per held-out prompt (avg@k)."})
    train_eval_samples: int = field(default=16, metadata={"help": "Samples per training prompt for 'converted'."})


def evaluate(model, tokenizer, train_rows, heldout_rows, demo: DemoArguments, bench: BenchArguments, tag: str) -> dict:
    """Held-out avg@k per level, and per training prompt the number of correct answers out of k."""
    kwargs = dict(temperature=demo.temperature, max_new_tokens=demo.max_completion_length, seed=demo.seed + 1)
    heldout = solve_counts(model, tokenizer, heldout_rows, bench.eval_samples, desc=f"{tag}: held-out", **kwargs)
    train = solve_counts(model, tokenizer, train_rows, bench.train_eval_samples, desc=f"{tag}: train", **kwargs)
    return {
        "heldout_accuracy": accuracy_by_level(heldout_rows, heldout, bench.eval_samples),
        "train_solved": train.tolist(),
    }


def main(demo: DemoArguments, bench: BenchArguments) -> dict:
    start = time.perf_counter()
    output_dir = Path(demo.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model(demo)
    train_rows, heldout_rows = train_and_heldout(demo.prompts_per_level, bench.heldout_per_level, demo.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)

    model = AutoModelForCausalLM.from_pretrained(model_path)
    initial = evaluate(model, tokenizer, train_rows, heldout_rows, demo, bench, "initial model")
    del model
    never = np.asarray(initial["train_solved"]) == 0
    print(
        f"[bench] initial held-out accuracy {initial['heldout_accuracy']}; {int(never.sum())} training prompts "
        f"never solved in {bench.train_eval_samples} samples"
    )
    results = {"config": {**asdict(demo), **asdict(bench)}, "initial": initial, "runs": {}}

    runs = []
    for allocator in demo.allocators:
        run_dir = output_dir / run_folder(allocator)
        (run_dir / "allocations.jsonl").unlink(missing_ok=True)
        trainer = train_run(demo, allocator, model_path, train_rows, run_dir)
        final = evaluate(trainer.model, tokenizer, train_rows, heldout_rows, demo, bench, allocator)
        run = load_run(run_dir, label=run_folder(allocator))
        runs.append(run)
        summary = summarize(run)
        solved = np.asarray(final["train_solved"])
        series = [h for h in trainer.state.log_history if "allocation/effective_gradient_ratio" in h]
        results["runs"][allocator] = {
            "train_seconds": trainer.train_seconds,
            "steps": trainer.state.global_step,
            "effective_gradient_ratio_per_step": [h["allocation/effective_gradient_ratio"] for h in series],
            "reward_per_step": [h["reward"] for h in series],
            **{
                k: summary.get(k)
                for k in (
                    "engine",
                    "generation_seconds_per_batch",
                    "effective_gradient_ratio_mean",
                    "effective_gradient_ratio_after_epoch_1",
                    "zero_gradient_all_correct_mean",
                    "zero_gradient_all_wrong_mean",
                    "max_count",
                    "converted_from_p0",
                    "p0_in_first_epoch",
                    "counts_by_status",
                )
            },
            "heldout_accuracy_end": final["heldout_accuracy"],
            "train_never_solved_at_start": int(never.sum()),
            "converted_from_never_solved": int((never & (solved > 0)).sum()),
            "train_solved_end": final["train_solved"],
        }
        del trainer
        gc.collect()
        results["wall_seconds"] = time.perf_counter() - start
        (output_dir / "results.json").write_text(json.dumps(results, indent=1, default=float))
        write_report(runs, output_dir / "comparison")
        r = results["runs"][allocator]
        print(
            f"[bench] {allocator}: {r['steps']} steps in {r['train_seconds']:.0f} s ({r['engine']}, "
            f"{r['generation_seconds_per_batch'] or float('nan'):.1f} s generating per batch); eff. grad. "
            f"{r['effective_gradient_ratio_mean']:.3f} (after epoch 1: "
            f"{r['effective_gradient_ratio_after_epoch_1'] or float('nan'):.3f}); held-out "
            f"{initial['heldout_accuracy']['all']:.3f} -> {r['heldout_accuracy_end']['all']:.3f}; converted "
            f"{r['converted_from_never_solved']} of {r['train_never_solved_at_start']}"
        )
    print(markdown_table(results))
    return results


def markdown_table(results: dict) -> str:
    """The docs/benchmarks.md table."""
    start = results["initial"]["heldout_accuracy"]
    lines = [
        "| allocator | engine | generation s / batch | steps | train time (s) | eff.-grad. ratio, all steps | "
        "after epoch 1 | zero-grad all-correct / "
        "all-wrong | max n_i | held-out accuracy, start -> end | never-solved train prompts converted |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["runs"].items():
        lines.append(
            f"| {name} | {r['engine']} | {r['generation_seconds_per_batch'] or float('nan'):.1f} | {r['steps']} | "
            f"{r['train_seconds']:.0f} | {r['effective_gradient_ratio_mean']:.3f} | "
            f"{r['effective_gradient_ratio_after_epoch_1'] or float('nan'):.3f} | "
            f"{r['zero_gradient_all_correct_mean']:.3f} / {r['zero_gradient_all_wrong_mean']:.3f} | "
            f"{r['max_count']} | "
            f"{start['all']:.3f} -> {r['heldout_accuracy_end']['all']:.3f} | "
            f"{r['converted_from_never_solved']} of {r['train_never_solved_at_start']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = TrlParser((DemoArguments, BenchArguments))
    demo_args, bench_args = parser.parse_args_and_config()
    main(demo_args, bench_args)
