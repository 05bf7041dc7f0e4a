"""Run a test script on two CPU ranks with ``accelerate launch`` (gloo) and collect one JSON report per rank."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NUM_PROCESSES = 2
TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch_once(script: Path, model_dir: Path, report_dir: Path, *script_args: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",  # with no GPU this gives MULTI_CPU on gloo; --cpu would silently start ONE process
        "--num_processes",
        str(NUM_PROCESSES),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        str(script),
        str(model_dir),
        str(report_dir),
        *script_args,
    ]
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    # A new session, so that on timeout the launcher and both ranks can be killed as one process group.
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"2-rank training did not finish within {TIMEOUT_S} s (deadlock?). Output tail:\n{output[-4000:]}")
    return subprocess.CompletedProcess(command, process.returncode, output)


def launch_two_ranks(script: Path, model_dir: Path, report_dir: Path, *script_args: str) -> list[dict]:
    """Run the script on 2 ranks and return the rank reports, in rank order.

    Retried ONCE, and only when both ranks wrote their report (training finished) but the launcher still failed: gloo
    occasionally aborts a rank at interpreter exit ("terminate called without an active exception",
    shared/research/cpu-feasibility.md section 6). Any failure before the reports exist fails immediately.
    """
    for attempt in range(2):
        attempt_dir = report_dir / f"attempt{attempt}"
        result = _launch_once(script, model_dir, attempt_dir, *script_args)
        reports = [attempt_dir / f"rank{rank}.json" for rank in range(NUM_PROCESSES)]
        finished = all(path.exists() for path in reports)
        if result.returncode == 0 or not finished or attempt == 1:
            break
    assert result.returncode == 0, (
        f"rc={result.returncode} (attempt {attempt + 1}). Output tail:\n{result.stdout[-6000:]}"
    )
    assert finished, f"a rank wrote no report. Output tail:\n{result.stdout[-6000:]}"
    return [json.loads(path.read_text()) for path in reports]
