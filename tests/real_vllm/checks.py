"""Running ``scripts/train_real_vllm.py`` and the checks every family's report must pass."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers.launch import accelerate_launch_command, run_command

from trl_adaptive.serving.vllm_cpu import CPU_ENGINE_DEFAULTS

SCRIPT = Path(__file__).parent / "scripts" / "train_real_vllm.py"
ANSWERS = ["Tokyo", "London", "Berlin", "cold", "Rome", "blue", "Paris", "4"]
TIMEOUT_S = 1500


def train(model_dir: Path, out_dir: Path, mode: str, families: list[str], *extra: str, processes: int = 1) -> list:
    """Run the script (under ``accelerate launch`` for 2 processes); the per-rank reports, in rank order."""
    args = [str(SCRIPT), str(model_dir), str(out_dir), mode, ",".join(families), *extra]
    command = accelerate_launch_command(*args) if processes == 2 else [sys.executable, *args]
    result = run_command(command, TIMEOUT_S, **CPU_ENGINE_DEFAULTS)
    assert result.returncode == 0, f"rc={result.returncode}. Output tail:\n{result.stdout[-6000:]}"
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in range(processes)]


def check_alignment(pairs: list) -> None:
    """Completions landed on their own prompts: every prompt has an answer SmolLM2 gives reliably, so a completion
    that names ANOTHER prompt's answer and not its own can only be a misaligned one (0 in every run so far)."""
    own = sum(answer.lower() in text.lower() for answer, text in pairs)
    misplaced = [
        (answer, text)
        for answer, text in pairs
        if answer.lower() not in text.lower() and any(o.lower() in text.lower() for o in ANSWERS if o != answer)
    ]
    assert own >= 0.4 * len(pairs), f"only {own}/{len(pairs)} completions answer their own prompt"
    assert len(misplaced) <= max(1, len(pairs) // 20), f"completions answering another prompt: {misplaced[:5]}"


def check_reload(reload: dict) -> None:
    """The weights reached the engine: perturbed weights change its greedy output, restored ones bring it back."""
    assert "Tokyo" in reload["before"], reload
    assert reload["perturbed"] != reload["before"], reload
    assert reload["restored"] == reload["before"], reload


def allocation_varies(counts: list[list[int]]) -> bool:
    return any(len(set(step)) > 1 for step in counts)
