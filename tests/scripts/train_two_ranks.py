"""Train on the tiny model in every rank of an ``accelerate launch``; each rank writes a JSON report.

Launched by ``tests/trainer/test_multiprocess.py`` and ``tests/test_report.py``:

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no \
        --main_process_port PORT tests/scripts/train_two_ranks.py MODEL_DIR REPORT_DIR [skewed|uniform-vs-grpo] [STEPS]

(``--multi_gpu`` with no GPU gives ``DistributedType.MULTI_CPU`` on gloo; ``--cpu`` would start a single process.)

Each rank writes ``REPORT_DIR/rank{process_index}.json`` with, per generation batch, the allocation it dispatched
(after the broadcast), the prompt id of each row it generated for, the gathered ``(T, K)`` rewards and its local
advantages; and, after training, a hash of the flattened parameters, the per-prompt statistics and the logged metrics.

- ``skewed``: AdaptiveGRPOTrainer with an allocator that gives one prompt most of the budget. A second, weight-0
  reward function returns each row's prompt id, so the order of TRL's gathered rewards can be checked.
- ``uniform-vs-grpo``: GRPOTrainer, then AdaptiveGRPOTrainer(allocator="uniform"), same seed; they must agree.
- ``seq-extra``: Reinforce-Ada Seq-Balance (rounds) with a reward function that logs each row's completion text
  through TRL's ``log_extra``; each rank reports the completions table TRL kept (``_logs``).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers

from datasets import Dataset  # noqa: E402
from helpers.allocation import SkewedAllocator  # noqa: E402
from helpers.rank_report import write_report_and_exit  # noqa: E402
from helpers.trainer import reward_has_vowel_e, reward_length, tiny_config_kwargs  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer  # noqa: E402

NUM_PROMPTS = 8
PROMPTS = [f"Question {i}: what is {i} + {i}?" for i in range(NUM_PROMPTS)]  # a distinct text per prompt id


def reward_prompt_id(prompts, completions, prompt_id, **kwargs) -> list[float]:
    """Weight 0: tags each row's reward with its prompt id (and -1 when the prompt text is not that id's text)."""
    return [float(i) if p == PROMPTS[i] else -1.0 for p, i in zip(prompts, prompt_id, strict=True)]


def reward_logging_its_row(prompts, completions, log_extra, **kwargs) -> list[float]:
    """reward_has_vowel_e, logging each row's completion text (to check the table's rows keep their values)."""
    log_extra("scored_completion", list(completions))
    return reward_has_vowel_e(completions)


def param_digest(model) -> tuple[str, float]:
    flat = torch.cat([p.detach().reshape(-1).to(torch.float32).cpu() for p in model.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest(), float(flat.double().sum())


def instrument(trainer) -> list[dict]:
    """Record, per generation batch: the allocation (adaptive only), rows, gathered rewards and local advantages."""
    steps: list[dict] = []
    calculate, generate = trainer._calculate_rewards, trainer._generate_and_score_completions

    class BatchEnd(TrainerCallback):
        def on_generation_batch_end(self, args, state, control, batch, **kwargs):
            outcome = batch.outcome
            steps[-1]["prompt_ids"] = outcome.record.prompt_ids.tolist()
            steps[-1]["counts"] = outcome.trained_counts.tolist()
            steps[-1]["group_ids"] = outcome.record.group_ids[batch.dispatched].tolist()  # dispatch order, all ranks
            steps[-1]["expected_tokens"] = batch.expected_tokens.tolist()  # what the dispatch read

    if hasattr(trainer, "generation_batches"):  # an AdaptiveGRPOTrainer (GRPOTrainer never fires the event)
        trainer.add_callback(BatchEnd())

    def record_calculate(inputs, prompts, completions, completion_ids_list):
        rewards = calculate(inputs, prompts, completions, completion_ids_list)
        steps[-1]["rows"] = [PROMPTS.index(row["prompt"]) for row in inputs]
        steps[-1]["gathered_rewards"] = rewards.cpu().tolist()
        return rewards

    def record_generate(inputs):
        if trainer.model.training:
            steps.append({"global_step": trainer.state.global_step})
        output = generate(inputs)
        if trainer.model.training:
            steps[-1]["advantages"] = output["advantages"].cpu().tolist()
        return output

    trainer._calculate_rewards = record_calculate
    trainer._generate_and_score_completions = record_generate
    return steps


def train(trainer, with_params: bool = False) -> dict:
    """Train ``trainer`` with its hooks instrumented; the rank's report for it."""
    initial_hash, _ = param_digest(trainer.model)
    steps = instrument(trainer)
    trainer.train()
    final_hash, final_sum = param_digest(trainer.model)
    report = {
        "steps": steps,
        "initial_param_hash": initial_hash,
        "param_hash": final_hash,
        "param_sum": final_sum,
        "log_history": trainer.state.log_history,
    }
    if with_params:
        report["params"] = torch.cat([p.detach().reshape(-1).float() for p in trainer.model.parameters()]).tolist()
    if isinstance(trainer, AdaptiveGRPOTrainer):
        report["statistics"] = trainer.prompt_statistics.state_dict()
    return report


def main() -> None:
    model_dir, report_dir = sys.argv[1], Path(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "skewed"
    max_steps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    dataset = Dataset.from_dict({"prompt": PROMPTS})
    if mode.startswith("stream-"):  # the same prompts and ids as a streaming dataset: TRL shards it over the ranks
        mode = mode.removeprefix("stream-")
        dataset = Dataset.from_dict({"prompt": PROMPTS, "prompt_id": list(range(NUM_PROMPTS))}).to_iterable_dataset()
    kwargs = tiny_config_kwargs(
        str(report_dir / "output"),
        per_device_train_batch_size=8,  # generation_batch_size 16 over 2 ranks: L = 8 rows per rank
        num_generations=4,  # 4 prompts per generation batch
        max_steps=max_steps,
    )

    report: dict = {}
    if mode == "skewed":
        # Second reward (weight 0) tags every row's gathered reward with its prompt id.
        args = AdaptiveGRPOConfig(**kwargs, reward_weights=[1.0, 0.0], allocator="uniform")
        trainer = AdaptiveGRPOTrainer(
            model=model_dir,
            reward_funcs=[reward_length, reward_prompt_id],
            args=args,
            train_dataset=dataset,
            allocator=SkewedAllocator(),
        )
        report["adaptive"] = train(trainer)
    elif mode == "uniform-vs-grpo":
        # GRPOTrainer first, then AdaptiveGRPOTrainer(allocator="uniform") from the same model and seed: each trainer
        # re-seeds at construction, so both generate the same completions and must train identically.
        grpo = GRPOTrainer(
            model=model_dir,
            reward_funcs=[reward_length, reward_has_vowel_e],
            args=GRPOConfig(**kwargs),
            train_dataset=dataset,
        )
        report["grpo"] = train(grpo, with_params=True)
        args = AdaptiveGRPOConfig(**kwargs, allocator="uniform")
        trainer = AdaptiveGRPOTrainer(
            model=model_dir, reward_funcs=[reward_length, reward_has_vowel_e], args=args, train_dataset=dataset
        )
        report["adaptive"] = train(trainer, with_params=True)
    elif mode == "seq-extra":
        seq = {"allocator": "reinforce_ada_seq_balance", "allocator_kwargs": {"round_size": 4, "max_rollouts": 12}}
        args = AdaptiveGRPOConfig(**kwargs, **seq)
        trainer = AdaptiveGRPOTrainer(
            model=model_dir, reward_funcs=[reward_logging_its_row], args=args, train_dataset=dataset
        )
        report["adaptive"] = train(trainer)
        report["table"] = {"completion": list(trainer._logs["completion"])}
        report["table"] |= {column: list(values) for column, values in trainer._logs["extra"].items()}
    else:
        raise SystemExit(f"unknown mode {mode!r}")

    accelerator = trainer.accelerator
    report.update(
        process_index=accelerator.process_index,
        num_processes=accelerator.num_processes,
        distributed_type=str(accelerator.distributed_type),
        generation_batch_size=trainer.args.generation_batch_size,
        seed=trainer.args.seed,
        streaming=trainer.training_prompts.streaming,
    )
    write_report_and_exit(report_dir / f"rank{accelerator.process_index}.json", report)


if __name__ == "__main__":
    main()
