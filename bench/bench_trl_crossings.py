"""How often one training generation batch crosses between trl_adaptive and TRL, on CPU.

A crossing is a Python call whose caller and callee lie on different sides: trl_adaptive's code, or TRL's (any
module of the ``trl`` package; transformers, accelerate and torch are neither side). Counted with ``sys.setprofile``
over ``_generate_and_score_completions`` of the training step, for two batches of the tiny model: one planned round
(knapsack, the default batch) and Reinforce-Ada Seq in rounds of 4, whose extra rounds give the cost of each round.
Each crossing is listed by callee, so a change that adds one shows where.

    .venv/bin/python bench/bench_trl_crossings.py
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from datasets import Dataset  # noqa: E402
from helpers.tiny_model import build_tiny_model  # noqa: E402
from helpers.trainer import SCRIPTED_PROMPTS, ScriptedReward, tiny_config_kwargs  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer  # noqa: E402


def _side(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if name == "trl_adaptive" or name.startswith("trl_adaptive."):
        return "trl_adaptive"
    if name == "trl" or name.startswith("trl."):
        return "trl"
    return None


class Crossings:
    """Counts calls from one side to the other while ``active``, by direction and callee."""

    def __init__(self) -> None:
        self.active = False
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def __call__(self, frame, event, arg):
        if not self.active or event != "call" or frame.f_back is None:
            return
        callee, caller = _side(frame), _side(frame.f_back)
        if callee and caller and callee != caller:
            module = frame.f_globals.get("__name__", "") if callee == "trl" else frame.f_back.f_globals["__name__"]
            self.calls[(f"{caller} -> {callee}", f"{module.rsplit('.', 1)[-1]}.{frame.f_code.co_name}")] += 1

    def hooks(self) -> int:
        """Crossings into or out of TRL's trainer (its methods and what they call back), not its helper functions
        (``trl.trainer.utils``, ``trl.data_utils``: ``pad``, ``nanstd``, ...)."""
        return sum(n for (_, name), n in self.calls.items() if not name.startswith(("utils.", "data_utils.")))


def one_batch(model_dir: Path, out: str, allocator: str, **kwargs) -> tuple[Crossings, int]:
    """The crossings of the first training generation batch, and how many rounds it took."""
    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(out, per_device_train_batch_size=16, max_steps=1, disable_tqdm=True),
        allocator=allocator,
        **kwargs,
    )
    trainer = AdaptiveGRPOTrainer(
        model=str(model_dir),
        reward_funcs=ScriptedReward(),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": SCRIPTED_PROMPTS}),
    )
    trainer.remove_callback(PrinterCallback)
    crossings, rounds = Crossings(), []
    batch = trainer._generate_and_score_completions

    def counted(inputs):
        if not trainer.model.training:
            return batch(inputs)
        crossings.active = True
        try:
            return batch(inputs)
        finally:
            crossings.active = False

    trainer._generate_and_score_completions = counted

    class Rounds(TrainerCallback):
        def on_generation_batch_end(self, args, state, control, batch, **kwargs):
            rounds.append(len(batch.outcome.record.round_sizes))

    trainer.add_callback(Rounds())
    sys.setprofile(crossings)
    try:
        trainer.train()
    finally:
        sys.setprofile(None)
    return crossings, rounds[0]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model")
        planned, planned_rounds = one_batch(model_dir, f"{tmp}/knapsack", "knapsack")
        seq, seq_rounds = one_batch(
            model_dir,
            f"{tmp}/seq",
            "reinforce_ada_seq_balance",
            allocator_kwargs={"round_size": 4, "max_rollouts": 12, "inference_cap": 8.0},
        )
    extra = seq_rounds - planned_rounds
    print("| batch | rounds | crossings with TRL's trainer | with its helper functions too |")
    print("|---|---|---|---|")
    for name, crossings, rounds in (
        ("knapsack (one planned round)", planned, planned_rounds),
        ("Seq-Balance, rounds of 4", seq, seq_rounds),
    ):
        print(f"| {name} | {rounds} | {crossings.hooks()} | {sum(crossings.calls.values())} |")
    per_round = (seq.hooks() - planned.hooks()) / extra
    print(f"\neach extra round: {per_round:.1f} crossings with TRL's trainer ((Seq - knapsack) / {extra} rounds)\n")
    for name, crossings in (("knapsack", planned), ("seq", seq)):
        print(f"{name}: " + ", ".join(f"{k[0]} {k[1]} x{v}" for k, v in sorted(crossings.calls.items())))


if __name__ == "__main__":
    main()
