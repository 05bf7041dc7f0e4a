"""Every sampling procedure through AdaptiveGRPOTrainer on a CUDA device, with transformers ``generate`` (no vLLM).

The CPU suite runs the same paths on CPU only; this is the check that tensors land on the right device when the
trainer is on a GPU: the single planned round generated inside GRPOTrainer's pass, rounds generated then replayed
(rewards kept on the CPU and moved back), Seq's all-completions baseline, the advantage weights. Per procedure:
3 steps on a tiny offline Qwen2 (tests/helpers/tiny_model.py), the counts, rounds and the loss; and uniform against
GRPOTrainer from the same seed (largest parameter difference after 3 steps).

    python bench/gpu_procedures.py --output out/gpu_procedures.json   # about 1 minute on one GPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

FAMILIES = {
    "knapsack": {"allocator": "knapsack", "max_rollouts": 6},
    "est_dynamic": {"allocator": "reinforce_ada_est", "max_rollouts": 6, "dynamic_sampling": True},
    "seq_balance": {
        "allocator": "reinforce_ada_seq_balance",
        "allocator_kwargs": {"round_size": 4, "max_rollouts": 12},
    },
    "pilot": {"allocator": "bayes_knapsack", "max_rollouts": 6, "pilot_rollouts": 2},
    "cero_pacing": {"allocator": "cero", "max_rollouts": 6, "allocator_kwargs": {"eta_mu": 1.0}},
    "cero_dynamic": {"allocator": "cero", "max_rollouts": 6, "dynamic_sampling": True},
    "pilot_commit": {"allocator": "pilot_commit", "allocator_kwargs": {"pilot_rollouts": 2, "max_rollouts": 8}},
}


def settings(output_dir: str, **overrides) -> dict:
    """The tests' tiny settings, on the GPU: 16 completions per step over 4 prompts, 8 tokens each."""
    kwargs = dict(
        output_dir=output_dir,
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-2,
        max_steps=3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=False,
        seed=0,
        temperature=1.0,
    )
    return kwargs | overrides


def run_family(model: str, name: str, out: str) -> dict:
    from helpers.trainer import make_dataset, reward_has_vowel_e
    from transformers import TrainerCallback

    from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

    args = AdaptiveGRPOConfig(**settings(out), **({"generation_token_budget": None} | FAMILIES[name]))
    trainer = AdaptiveGRPOTrainer(
        model=model, reward_funcs=reward_has_vowel_e, args=args, train_dataset=make_dataset(16)
    )
    devices = []

    class Devices(TrainerCallback):
        def on_generation_batch_end(self, args, state, control, batch, **kwargs):
            devices.append(str(batch.training_dict["advantages"].device))

    trainer.add_callback(Devices())
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logs = [log for log in trainer.state.log_history if "allocation/budget_used" in log]
    return {
        "ok": True,
        "device": str(trainer.accelerator.device),
        "advantages_device": sorted(set(devices)),
        "budget_used": [log["allocation/budget_used"] for log in logs],
        "rounds_per_step": [log.get("rounds/per_step", 1.0) for log in logs],
        "count_max": [log["allocation/count_max"] for log in logs],
        "loss": [log.get("loss") for log in trainer.state.log_history if "loss" in log],
        "seconds": seconds,
    }


def uniform_vs_grpo(model: str, out: str) -> dict:
    """GRPOTrainer twice (the device's own run-to-run noise) and AdaptiveGRPOTrainer(allocator="uniform")."""
    import torch
    from helpers.trainer import make_dataset, reward_has_vowel_e, reward_length
    from trl import GRPOConfig, GRPOTrainer

    from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

    params = []
    for name in ("grpo", "grpo_again", "uniform"):
        kwargs = settings(os.path.join(out, name))
        rewards, dataset = [reward_length, reward_has_vowel_e], make_dataset(16)
        if name.startswith("grpo"):
            trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=GRPOConfig(**kwargs), train_dataset=dataset)
        else:
            args = AdaptiveGRPOConfig(**kwargs, allocator="uniform")
            trainer = AdaptiveGRPOTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=dataset)
        trainer.train()
        params.append(torch.cat([p.detach().reshape(-1).float().cpu() for p in trainer.model.parameters()]))
    return {
        "grpo_vs_grpo_max_abs_param_difference": float((params[0] - params[1]).abs().max()),
        "uniform_vs_grpo_max_abs_param_difference": float((params[0] - params[2]).abs().max()),
        "num_params": len(params[0]),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="out/gpu_procedures.json")
    return parser


def main() -> None:
    import torch
    from helpers.tiny_model import build_tiny_model

    cli = build_parser().parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report: dict = {"cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        report["gpu"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory() as tmp:
        model = str(build_tiny_model(Path(tmp) / "tiny"))
        for name in FAMILIES:
            try:
                report[name] = run_family(model, name, os.path.join(tmp, name))
            except Exception as error:  # record every family's failure as it is; go on with the others
                report[name] = {"ok": False, "error": repr(error), "traceback": traceback.format_exc()[-3000:]}
            print(name, json.dumps(report[name])[:400], flush=True)
        try:
            report["uniform_vs_grpo"] = uniform_vs_grpo(model, os.path.join(tmp, "pair"))
        except Exception as error:
            report["uniform_vs_grpo"] = {"error": repr(error), "traceback": traceback.format_exc()[-3000:]}
        print("uniform_vs_grpo", report["uniform_vs_grpo"], flush=True)
    Path(cli.output).parent.mkdir(parents=True, exist_ok=True)
    Path(cli.output).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
