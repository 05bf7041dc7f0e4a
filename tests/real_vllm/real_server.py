"""Start and stop a real vLLM server on CPU the way a TRL user does: ``trl vllm-serve`` (trl 1.16 execs
``VLLM_SERVER_DEV_MODE=1 vllm serve ... --weight-transfer-config nccl``; the NCCL engine is never touched on CPU)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests

from trl_adaptive.serving.vllm_cpu import CPU_ENGINE_DEFAULTS

START_TIMEOUT_S = 420


def cpu_engine_env() -> dict[str, str]:
    """This environment, offline, with what a vLLM-CPU engine needs (``CPU_ENGINE_DEFAULTS``) forced."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.update(CPU_ENGINE_DEFAULTS)
    return env


@contextlib.contextmanager
def trl_vllm_serve(model_dir: Path, port: int, log_path: Path) -> Iterator[str]:
    """``trl vllm-serve`` on 127.0.0.1:port; yields the base URL once /health answers; kills the group on exit."""
    trl = Path(sys.executable).with_name("trl")
    command = [str(trl), "vllm-serve", "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--dtype", "bfloat16", "--enforce_eager", "true", "--max_model_len", "512"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, env=cpu_engine_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"trl vllm-serve exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"trl vllm-serve not healthy after {START_TIMEOUT_S} s:\n{log_path.read_text()[-4000:]}"
                )
            time.sleep(2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
