"""Token balance across ranks: the busiest rank's tokens over the mean, balanced dispatch against a random shuffle.

Every rank must wait for the slowest one, in generation and in the training pass, so what a layout costs is the
busiest rank's tokens over the mean rank's (1.0 is perfect balance). For 2, 8 and 64 simulated ranks, each batch is
laid out four ways (``trl_adaptive.trainer.groups``) and scored on the completions' ACTUAL tokens:

- ``prompt-major``: TRL's layout, whole groups in a row (what equal group sizes keep, for GRPOTrainer parity);
- ``shuffle``: a random permutation, the trainer's layout over several ranks before token balancing;
- ``balanced (expected)``: balanced by each prompt's expected tokens from the statistics store, as the trainer lays
  out a batch before generating it (unknown lengths count as the mean);
- ``balanced (actual)``: balanced by the completions' own tokens, as the training pass after rounds is laid out.

Two sources of batches:

1. ``real``: a knapsack run of the accuracy-per-token benchmark's task (``bench/learning``: a 0.86M-parameter Llama
   reversing strings, failed completions twice as long as solved ones; 1 to 21 tokens) through AdaptiveGRPOTrainer on
   one process, recording per batch the allocation (each completion's prompt), each completion's generated tokens and
   each prompt's expected tokens before the batch. Saved to ``OUT/real_batches.json`` and reused by later runs. A
   batch is 128 completions; for R ranks, ``max(1, 16 R / 128)`` consecutive batches are pooled into one global batch
   so that every rank holds at least 16 completions (64 ranks: 8 batches, 1024 completions).
2. ``synthetic``: a long tail as with long chains of thought: 16 R completions over prompts whose success rates are
   drawn from Beta(0.5, 0.5) and allocated by knapsack (8 per prompt on average); each prompt's mean length
   log-normal around 400 tokens (sigma 0.8: several-fold spread between prompts), each completion log-normal around
   it (sigma 0.4), failed ones 1.5x longer, truncated at 4096; the expected length is the prompt's mean times a
   log-normal estimation error (sigma 0.2).

Several shuffle seeds per batch; the figure is the mean over batches and seeds (and the worst batch).

``steptime``: the trainer's step time on 2 processes with a real vLLM engine colocated in each (vLLM's CPU build,
SmolLM2-135M-Instruct), balanced dispatch against the shuffle it replaced, each run in its own ``accelerate launch``,
the two layouts in alternating order; the figure is the median over rounds of the two runs' median step times
(TRL's ``step_time``, first step excluded: no lengths are known yet and the engine warms up). The prompts ask for a
one-word answer (prior success rate 1.0: knapsack gives them 2 completions) or a long story (0.5: the rest), so
groups differ in size and in length.

    .venv/bin/python bench/bench_dispatch.py                        # capture the real run, then both tables
    .venv/bin/python bench/bench_dispatch.py --source synthetic     # the synthetic table only (seconds)
    .venv-vllm/bin/python bench/bench_dispatch.py steptime --rounds 3 --steps 6
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trl_adaptive.allocation import KnapsackAllocator  # noqa: E402
from trl_adaptive.trainer.groups import balanced_order, known_lengths, rank_tokens, shuffled_order  # noqa: E402

RANK_COUNTS = (2, 8, 64)
MIN_PER_RANK = 16  # completions each simulated rank holds at least
LAYOUTS = ("prompt-major", "shuffle", "balanced (expected)", "balanced (actual)")


@dataclass
class Batch:
    """One global batch, prompt-major: the group of each completion, its generated tokens, its prompt's expected
    tokens (NaN when the store knew nothing)."""

    group_ids: np.ndarray
    tokens: np.ndarray
    expected: np.ndarray

    def as_dict(self) -> dict:
        return {key: np.asarray(value).tolist() for key, value in vars(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> Batch:
        return cls(np.asarray(data["group_ids"], np.int64), np.asarray(data["tokens"]), np.asarray(data["expected"]))


def prompt_major(group_ids: np.ndarray, tokens: np.ndarray, expected: np.ndarray) -> Batch:
    """The completions sorted by group (stable), as the trainer expands an allocation."""
    order = np.argsort(group_ids, kind="stable")
    return Batch(group_ids[order], tokens[order], expected[order])


def pooled(batches: list[Batch]) -> Batch:
    """Consecutive batches as one global batch (group ids offset so each batch keeps its own groups)."""
    offsets = np.cumsum([0] + [int(b.group_ids.max()) + 1 for b in batches[:-1]])
    return Batch(
        np.concatenate([b.group_ids + offset for b, offset in zip(batches, offsets, strict=True)]),
        np.concatenate([b.tokens for b in batches]),
        np.concatenate([b.expected for b in batches]),
    )


def layout_orders(batch: Batch, num_ranks: int, seed: int) -> dict[str, np.ndarray]:
    """The dispatch order of each layout."""
    size = len(batch.tokens)
    return {
        "prompt-major": np.arange(size),
        "shuffle": shuffled_order(size, seed, 0),
        "balanced (expected)": balanced_order(known_lengths(batch.expected, size), num_ranks),
        "balanced (actual)": balanced_order(batch.tokens, num_ranks),
    }


def max_over_mean(batch: Batch, order: np.ndarray, num_ranks: int) -> float:
    loads = rank_tokens(batch.tokens[order], num_ranks)
    return float(loads.max() / loads.mean())


def measure(batches: list[Batch], num_ranks: int, seeds: int) -> dict[str, list[float]]:
    """max/mean tokens per rank of every layout, per (batch, seed)."""
    results: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    for index, batch in enumerate(batches):
        for seed in range(seeds):
            for name, order in layout_orders(batch, num_ranks, seed * 1000 + index).items():
                results[name].append(max_over_mean(batch, order, num_ranks))
    return results


def layout_seconds(batches: list[Batch], num_ranks: int) -> float:
    """Median wall time of one balanced layout of a batch (what each rank computes before a pass)."""
    times = []
    for batch in batches:
        start = time.perf_counter()
        balanced_order(batch.tokens, num_ranks)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


# -------------------------------------------------------------------------------------------------------------------
# Sources
# -------------------------------------------------------------------------------------------------------------------
def real_batches_for(captured: list[Batch], num_ranks: int) -> list[Batch]:
    """Consecutive captured batches pooled so that each of ``num_ranks`` ranks holds at least MIN_PER_RANK."""
    per_batch = len(captured[0].tokens)
    pool = max(1, -(-MIN_PER_RANK * num_ranks // per_batch))
    return [pooled(captured[start : start + pool]) for start in range(0, len(captured) - pool + 1, pool)]


def synthetic_batch(num_ranks: int, rng: np.random.Generator) -> Batch:
    """16 R completions with long-tailed lengths (see the module docstring)."""
    total = MIN_PER_RANK * num_ranks
    success = rng.beta(0.5, 0.5, total // 8)
    counts = KnapsackAllocator().allocate(success, total).counts
    group_ids = np.repeat(np.arange(len(counts)), counts)
    mean_length = rng.lognormal(np.log(400.0), 0.8, len(counts))
    solved = rng.random(total) < success[group_ids]
    tokens = mean_length[group_ids] * rng.lognormal(0.0, 0.4, total) * np.where(solved, 1.0, 1.5)
    tokens = np.minimum(np.round(tokens), 4096.0)
    expected = (mean_length * rng.lognormal(0.0, 0.2, len(counts)))[group_ids]
    return Batch(group_ids, tokens, expected)


def capture_real_run(steps: int, seed: int, output_dir: Path) -> list[Batch]:
    """Train knapsack on the learning benchmark's task for ``steps`` steps; every batch's allocation and lengths."""
    import torch
    from datasets import Dataset
    from learning import task
    from learning.model import pretrained_model
    from learning.runs import RunSettings, training_config
    from transformers import PrinterCallback, TrainerCallback

    from trl_adaptive import AdaptiveGRPOTrainer

    settings = RunSettings(max_steps=steps)
    torch.manual_seed(seed)
    trainer = AdaptiveGRPOTrainer(
        model=str(pretrained_model()),
        reward_funcs=task.reward_reversal,
        args=training_config("knapsack", seed, settings, str(output_dir / "trainer")),
        train_dataset=Dataset.from_list(task.Prompts.draw(settings.train_prompts, seed=1000 + seed).rows),
    )
    trainer.remove_callback(PrinterCallback)
    batches: list[Batch] = []

    class Capture(TrainerCallback):
        def on_generation_batch_end(self, args, state, control, batch, **kwargs):
            record = batch.outcome.record  # with the expected tokens the dispatch planned with
            expected = batch.expected_tokens[record.group_ids]
            batches.append(prompt_major(record.group_ids, record.completion_tokens, expected))

    trainer.add_callback(Capture())
    trainer.train()
    return batches


def load_or_capture(path: Path, steps: int, seed: int) -> list[Batch]:
    if path.is_file():
        return [Batch.from_dict(b) for b in json.loads(path.read_text())["batches"]]
    batches = capture_real_run(steps, seed, path.parent)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"steps": steps, "seed": seed, "batches": [b.as_dict() for b in batches]}))
    os.replace(temporary, path)
    return batches


# -------------------------------------------------------------------------------------------------------------------
# Tables
# -------------------------------------------------------------------------------------------------------------------
Row = tuple[int, int, dict[str, list[float]], float]


def table_row(batches: list[Batch], num_ranks: int, seeds: int) -> Row:
    """(ranks, batches, every layout's figures, balanced layout time) for ``num_ranks``."""
    return num_ranks, len(batches), measure(batches, num_ranks, seeds), layout_seconds(batches, num_ranks)


def table(title: str, rows: list[Row]) -> str:
    lines = [
        f"**{title}**: busiest rank's tokens / mean rank's, mean over batches and seeds (worst batch)",
        "",
        "| ranks | batches | " + " | ".join(LAYOUTS) + " | balanced layout time (ms) |",
        "|---" * (len(LAYOUTS) + 3) + "|",
    ]
    for num_ranks, count, results, seconds in rows:
        cells = [f"{np.mean(results[name]):.3f} ({np.max(results[name]):.3f})" for name in LAYOUTS]
        lines.append(f"| {num_ranks} | {count} | " + " | ".join(cells) + f" | {seconds * 1e3:.2f} |")
    return "\n".join(lines)


def unequal(batches: list[Batch]) -> list[Batch]:
    """Batches whose groups differ in size: the ones the trainer lays out by tokens (equal ones keep TRL's)."""
    return [b for b in batches if len(set(np.bincount(b.group_ids).tolist()) - {0}) > 1]


# -------------------------------------------------------------------------------------------------------------------
# Step time on 2 processes with vLLM colocate
# -------------------------------------------------------------------------------------------------------------------
STEPTIME_PROMPTS = [  # (prompt, a word a good completion contains, prior success rate)
    *[
        (f"Answer with one word only. What is the capital of {c}?", a, 1.0)
        for c, a in [("Japan", "Tokyo"), ("France", "Paris"), ("Italy", "Rome"), ("Germany", "Berlin")]
    ],
    *[
        (f"Write a long, detailed story about a {t}. Use many sentences.", t, 0.5)
        for t in ["dragon", "robot", "sailor", "wizard"]
    ],
]


def steptime_run(args: argparse.Namespace) -> None:
    """One training run on this rank (under ``accelerate launch``); the main process writes its step times."""
    from datasets import Dataset
    from transformers import PrinterCallback

    from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
    from trl_adaptive.trainer import groups

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "real_vllm" / "scripts"))
    from train_real_vllm import vllm_run_settings

    if args.layout == "shuffle":  # the layout before token balancing: a seeded shuffle on any number of ranks
        balanced = groups.dispatch_order
        groups.dispatch_order = lambda jobs, seed, step, lengths=None, num_ranks=1, round_index=None: balanced(
            jobs, seed, step, round_index=round_index
        )

    def reward_word(completions, word, **kwargs) -> list[float]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [float(w.lower() in t.lower()) for w, t in zip(word, texts, strict=True)]

    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": p}] for p, _, _ in STEPTIME_PROMPTS],
            "word": [w for _, w, _ in STEPTIME_PROMPTS],
            "success_rate": [r for _, _, r in STEPTIME_PROMPTS],
        }
    )
    settings = vllm_run_settings(  # the real-vLLM tests' short-run settings, shared with bench_vllm.py
        "cpu",
        "colocate",
        output_dir=args.output_dir,
        per_device_train_batch_size=8,  # 16 completions per step over 2 processes, 4 prompts
        num_generations=4,
        max_completion_length=args.max_tokens,
        temperature=1.0,
        max_steps=args.steps,
        disable_tqdm=True,
    )
    config = AdaptiveGRPOConfig(**settings, allocator="knapsack", generation_token_budget=None)
    trainer = AdaptiveGRPOTrainer(model=args.model, reward_funcs=reward_word, args=config, train_dataset=data)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    if trainer.accelerator.is_main_process:
        keys = ("step_time", "tokens/rank_max_over_mean_generation", "tokens/rank_max_over_mean_training")
        logs = [{k: h[k] for k in keys if k in h} for h in trainer.state.log_history if "step_time" in h]
        Path(args.report).write_text(json.dumps(logs))


def steptime(args: argparse.Namespace) -> None:
    """Paired rounds of both layouts, each in its own 2-process launch; prints the table."""
    import statistics
    import subprocess
    import tempfile

    from trl_adaptive.serving.vllm_cpu import CPU_ENGINE_DEFAULTS

    if args.model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
        from demo_utils.model import smollm2_path

        args.model = str(smollm2_path())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", **CPU_ENGINE_DEFAULTS}
    layouts = ["balanced", "shuffle"]
    medians: dict[str, list[float]] = {layout: [] for layout in layouts}
    balance: dict[str, list[float]] = {layout: [] for layout in layouts}
    for round_index in range(args.rounds):
        for layout in layouts if round_index % 2 == 0 else layouts[::-1]:
            work = Path(tempfile.mkdtemp(prefix=f"steptime-{layout}-"))
            command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
            command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", __file__]
            command += ["steptime-run", "--layout", layout, "--steps", str(args.steps), "--model", args.model]
            command += ["--max_tokens", str(args.max_tokens), "--output_dir", str(work), "--report", str(work / "r")]
            result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"{layout} run failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
            logs = json.loads((work / "r").read_text())[1:]
            medians[layout].append(statistics.median(log["step_time"] for log in logs))
            balance[layout].append(statistics.mean(log["tokens/rank_max_over_mean_training"] for log in logs))
            print(
                f"round {round_index}: {layout} median step {medians[layout][-1]:.2f} s, tokens max/mean "
                f"{balance[layout][-1]:.3f}",
                flush=True,
            )
    ratios = [b / s for b, s in zip(medians["balanced"], medians["shuffle"], strict=True)]
    print("| layout | median step time (s) | tokens busiest / mean rank (training) |\n|---|---|---|")
    for layout in layouts:
        print(f"| {layout} | {statistics.median(medians[layout]):.2f} | {statistics.mean(balance[layout]):.3f} |")
    print(
        f"ratio balanced / shuffle, median of {args.rounds} paired rounds: {statistics.median(ratios):.3f} "
        f"({', '.join(f'{r:.3f}' for r in ratios)})"
    )


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] in (["steptime"], ["steptime-run"]):
        parser = argparse.ArgumentParser(description="step time, balanced against shuffled dispatch (vLLM colocate)")
        parser.add_argument("what", choices=["steptime", "steptime-run"])
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--steps", type=int, default=6)
        parser.add_argument("--max_tokens", type=int, default=64)
        parser.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct, converted offline")
        parser.add_argument("--layout", choices=["balanced", "shuffle"], default="balanced")
        parser.add_argument("--output_dir", default=None)
        parser.add_argument("--report", default=None)
        args = parser.parse_args(argv)
        if args.what == "steptime":
            steptime(args)
        else:
            steptime_run(args)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=["both", "real", "synthetic"], default="both")
    parser.add_argument("--steps", type=int, default=40, help="Steps of the real run (8 per epoch).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the real run.")
    parser.add_argument("--shuffle_seeds", type=int, default=5, help="Shuffles per batch.")
    parser.add_argument("--synthetic_batches", type=int, default=20, help="Synthetic batches per rank count.")
    parser.add_argument("--output_dir", default="out/bench_dispatch")
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.source in ("both", "real"):
        captured = unequal(load_or_capture(out / "real_batches.json", args.steps, args.seed))
        rows = [table_row(real_batches_for(captured, r), r, args.shuffle_seeds) for r in RANK_COUNTS]
        tokens = np.concatenate([b.tokens for b in captured])
        title = (
            f"Real run ({len(captured)} batches of {len(captured[0].tokens)} with unequal groups, completion tokens "
            f"{tokens.min():.0f} to {tokens.max():.0f}, mean {tokens.mean():.1f})"
        )
        print(table(title, rows), end="\n\n")
    if args.source in ("both", "synthetic"):
        rows = []
        for num_ranks in RANK_COUNTS:
            rng = np.random.default_rng(num_ranks)
            batches = [synthetic_batch(num_ranks, rng) for _ in range(args.synthetic_batches)]
            rows.append(table_row(batches, num_ranks, args.shuffle_seeds))
        print(table("Synthetic long tail (16 completions per rank)", rows))


if __name__ == "__main__":
    main()
