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

from helpers import REPO

NUM_PROCESSES = 2
TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_command(command: list[str], timeout_s: int = TIMEOUT_S, **env_extra: str) -> subprocess.CompletedProcess:
    """Run ``command`` from the repository root, offline, in its own session; kill the whole group on timeout."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        **env_extra,
    )
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{command[:5]} did not finish within {timeout_s} s (deadlock?). Output tail:\n{output[-4000:]}")
    return subprocess.CompletedProcess(command, process.returncode, output)


def accelerate_launch_command(*script_and_args: str) -> list[str]:
    """``accelerate launch`` on two CPU ranks: ``--multi_gpu`` with no GPU gives gloo (``--cpu`` starts ONE)."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(NUM_PROCESSES),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        *script_and_args,
    ]


def launch_two_ranks(script: Path, model_dir: Path, report_dir: Path, *script_args: str) -> list[dict]:
    """Run the script on 2 ranks and return the rank reports, in rank order.

    The scripts end with ``helpers.rank_report.write_report_and_exit``, which leaves before gloo's teardown race
    (a rank aborted at interpreter exit with "terminate called without an active exception"; CI once lost both
    attempts of a run to it). Still retried ONCE, and only when both ranks wrote their report (training finished) but
    the launcher failed; any failure before the reports exist fails immediately.
    """
    for attempt in range(2):
        attempt_dir = report_dir / f"attempt{attempt}"
        result = run_command(accelerate_launch_command(str(script), str(model_dir), str(attempt_dir), *script_args))
        reports = [attempt_dir / f"rank{rank}.json" for rank in range(NUM_PROCESSES)]
        finished = all(path.exists() for path in reports)
        if result.returncode == 0 or not finished or attempt == 1:
            break
    assert result.returncode == 0, (
        f"rc={result.returncode} (attempt {attempt + 1}). Output tail:\n{result.stdout[-6000:]}"
    )
    assert finished, f"a rank wrote no report. Output tail:\n{result.stdout[-6000:]}"
    return [json.loads(path.read_text()) for path in reports]
