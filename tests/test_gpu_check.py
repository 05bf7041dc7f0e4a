"""``bench/gpu_check.sh`` runs only on a GPU machine with vLLM; here: it parses, and every command it runs passes
its scripts' own argument parsers, so a renamed flag fails CI instead of a scarce GPU lease."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

from helpers import REPO

SCRIPT = REPO / "bench" / "gpu_check.sh"
PARSERS = {
    "bench/bench_vllm.py": REPO / "bench" / "bench_vllm.py",
    "bench/gpu_procedures.py": REPO / "bench" / "gpu_procedures.py",
    "tests/real_vllm/scripts/train_real_vllm.py": REPO / "tests" / "real_vllm" / "scripts" / "train_real_vllm.py",
}


def _parser(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports nothing heavy at module level: torch/vllm load inside functions
    return module.build_parser()


def _python_commands() -> list[list[str]]:
    text = SCRIPT.read_text().replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(re.sub(r"\$\{?(\w+)[^\s\"]*", "x", line), comments=True)
        if "$PY" in line and any(w in PARSERS for w in words):
            start = next(i for i, w in enumerate(words) if w in PARSERS)
            words = words[start:]
            end = next((i for i, w in enumerate(words) if w[:1] in "|;&>" or w.startswith("2>")), len(words))
            commands.append(words[:end])  # up to the shell's redirections
    return commands


def test_gpu_check_parses_and_its_commands_match_the_scripts():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    commands = _python_commands()
    # the procedures on the GPU, the requests and trainer benches, the server-mode run
    assert {c[0] for c in commands} == set(PARSERS)
    assert len(commands) == 4
    for command in commands:
        _parser(PARSERS[command[0]]).parse_args(command[1:])  # SystemExit on an unknown or malformed flag
