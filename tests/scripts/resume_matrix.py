"""The resume matrix: a 3-epoch run that saves at EVERY step, then a run resumed from each of its checkpoints.

Every resumed run must reproduce the uninterrupted run's allocations of every later step, its final statistics and
its success-rate column; checkpoints fall mid-epoch, on an epoch's last step and on the run's last step. Used by
``tests/trainer/test_resume.py`` in-process (one rank) and under ``accelerate launch`` (two ranks):

    accelerate launch --multi_gpu --num_processes 2 ... tests/scripts/resume_matrix.py MODEL_DIR OUT_DIR [MODE]

MODE: ``knapsack`` (default), ``dynamic`` (knapsack with DAPO dynamic sampling: prompts drawn within a step),
``seq`` (Reinforce-Ada Seq-Balance: sampling in rounds), ``cero`` (CERO with pacing: prompts skipped and
drawn), ``pilot`` (bayes_knapsack after a pilot round), ``prompt_source`` (knapsack on the batches a stateful
prompt source composes), ``greso`` (knapsack on GRESO's batches), ``greso_revisit`` (the same under a floor of
visits), ``mopps`` (knapsack on MoPPS's batches), ``value_pool`` (bayes_knapsack on the pool by expected value), ... or
``stream`` (knapsack on the prompts as a streaming dataset: 3 passes; "column" is then the store's rates, a stream
has no column). Each rank writes
``OUT_DIR/rank{process_index}.json``:
{"full": run, "resumed": {step: run}}, where a run is {"allocations": [[step, prompt ids, counts], ...] from
``allocations.jsonl`` (main process only), "statistics": state_dict, "column": [...]}.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers

from accelerate import PartialState  # noqa: E402
from datasets import Dataset  # noqa: E402
from helpers.prompt_sources import LeastPickedPool  # noqa: E402, F401  (registers "test_least_picked")
from helpers.rank_report import write_report_and_exit  # noqa: E402
from helpers.trainer import build_trainer  # noqa: E402

from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE, read_allocation_log  # noqa: E402

MODES = {
    "knapsack": {"allocator": "knapsack", "max_rollouts": 6},
    "dynamic": {"allocator": "knapsack", "max_rollouts": 6, "dynamic_sampling": True},
    "seq": {"allocator": "reinforce_ada_seq_balance", "allocator_kwargs": {"round_size": 4, "max_rollouts": 12}},
    # CERO with pacing and a price that moves fast: steps skip prompts and draw others.
    "cero": {"allocator": "cero", "max_rollouts": 6, "allocator_kwargs": {"eta_mu": 1.0}},
    # CERO's duals under dynamic sampling: they move once per step, however many rounds the step takes.
    "cero_dynamic": {
        "allocator": "cero",
        "max_rollouts": 6,
        "dynamic_sampling": True,
        "allocator_kwargs": {"eta_mu": 1.0, "pacing": False},
    },
    # Pilot-Commit evicts solved prompts: its evicted set is state that must survive the checkpoint.
    "pilot_commit": {"allocator": "pilot_commit", "allocator_kwargs": {"pilot_rollouts": 2, "max_rollouts": 8}},
    # A prompt source that picks the prompts it generated for least often from a pool beyond the sampler's: its
    # counts are state that must survive the checkpoint, and its draws must be the uninterrupted run's.
    "prompt_source": {"allocator": "knapsack", "max_rollouts": 6, "prompt_source": "test_least_picked"},
    # GRESO's skip rule: its streaks and adaptive skip bases are state; the pool is the whole data (2 x 2 prompts).
    "greso": {
        "allocator": "knapsack",
        "max_rollouts": 6,
        "prompt_source": "greso",
        "prompt_source_kwargs": {"max_pool_factor": 2},
    },
    # GRESO under a floor of visits: a prompt passed over at one offer is generated at its next; the counts of
    # offers passed over are state beside GRESO's own. p starts at 0.05 so that settled prompts are skipped
    # (P = 0.95 after one equal-reward visit) and the floor has something to force.
    "greso_revisit": {
        "allocator": "knapsack",
        "max_rollouts": 6,
        "prompt_source": "greso",
        "prompt_source_kwargs": {"max_pool_factor": 2, "p_initial": 0.05, "revisit_epochs": 1},
    },
    # MoPPS's Thompson selection: its draws come from the step's random stream, which a resume must reproduce; the pool
    # is the whole data (2 x 2 prompts), and the posterior it reads is the store's.
    "mopps": {
        "allocator": "knapsack",
        "max_rollouts": 6,
        "prompt_source": "mopps",
        "prompt_source_kwargs": {"pool_factor": 2},
    },
    # The pool by bayes_knapsack's expected value: no state of its own, but its choice reads the resumed posterior
    # and the step's draws, and bayes_knapsack splits the batch by the same value.
    "value_pool": {
        "allocator": "bayes_knapsack",
        "max_rollouts": 6,
        "prompt_source": "value_pool",
        "prompt_source_kwargs": {"pool_factor": 2},
    },
    # The same prompts as a stream (3 passes, max_steps=6): transformers cannot tell a stream's passes apart.
    "stream": {"allocator": "knapsack", "max_rollouts": 6},
    # A pilot round of 2 per prompt, then the rest of the step by the knapsack on the posterior, whose evidence fades
    # (half-life 1.5 batches) under a Jeffreys prior: the forgotten evidence must resume bit-identical.
    "pilot": {
        "allocator": "bayes_knapsack",
        "max_rollouts": 6,
        "pilot_rollouts": 2,
        "posterior_half_life": 1.5,
        "posterior_prior_a": 0.5,
        "posterior_prior_b": 0.5,
    },
}

NUM_PROMPTS = 4  # 2 prompts per generation batch: 2 steps per epoch, 6 steps in 3 epochs
EPOCHS = 3


def _dataset() -> Dataset:
    return Dataset.from_dict({"prompt": [f"Question {i}: name a word with the letter e." for i in range(NUM_PROMPTS)]})


def train(model_dir: str, output_dir: Path, num_processes: int, mode: str, resume: str | None = None) -> dict:
    stream = mode == "stream"
    trainer = build_trainer(
        model_dir,
        output_dir,
        _dataset().to_iterable_dataset() if stream else _dataset(),
        per_device_train_batch_size=8 // num_processes,  # generation batch of 8 completions = 2 prompts x 4
        max_steps=EPOCHS * NUM_PROMPTS // 2 if stream else -1,
        num_train_epochs=EPOCHS,
        save_strategy="steps",
        save_steps=1,
        **MODES[mode],
    )
    trainer.train(resume_from_checkpoint=resume)
    store = trainer.prompt_statistics
    rates = store.success_rates(sorted(store.prompt_ids)) if stream else trainer.train_dataset["success_rate"]
    column = [None if math.isnan(x) else x for x in rates]
    log = output_dir / ALLOCATION_LOG_FILE
    records = read_allocation_log(str(log)) if log.exists() else []
    return {
        "allocations": [[r["step"], r["prompt_ids"], r["counts"]] for r in records],
        "statistics": trainer.prompt_statistics.state_dict(),
        "column": column,
        "epoch_count": trainer.prompt_statistics.epoch,
        "revisit_forced": sum(h.get("prompt_source/revisit_forced", 0.0) for h in trainer.state.log_history),
    }


def run_matrix(model_dir: str, out_dir: Path, mode: str = "knapsack") -> dict:
    # Not PartialState() before the first config: on a CPU-only launch it would report one process until
    # TrainingArguments(use_cpu=True) sets up the gloo group.
    num_processes = int(os.environ.get("WORLD_SIZE", "1"))
    full_dir = out_dir / "full"
    report = {"full": train(model_dir, full_dir, num_processes, mode), "resumed": {}}
    state = PartialState()
    steps = EPOCHS * NUM_PROMPTS // 2
    for step in range(1, steps + 1):
        # A copy per resume, so a resumed run's own checkpoints never feed a later resume.
        run_dir = out_dir / f"resume-{step}"
        if state.is_main_process:
            shutil.copytree(full_dir / f"checkpoint-{step}", run_dir / f"checkpoint-{step}")
        state.wait_for_everyone()
        resume = str(run_dir / f"checkpoint-{step}")
        report["resumed"][step] = train(model_dir, run_dir, num_processes, mode, resume)
    return report


if __name__ == "__main__":
    model_dir, out = sys.argv[1], Path(sys.argv[2])
    result = run_matrix(model_dir, out / "runs", sys.argv[3] if len(sys.argv) > 3 else "knapsack")
    write_report_and_exit(out / f"rank{PartialState().process_index}.json", result)
