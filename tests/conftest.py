import os
from pathlib import Path

import pytest

# A hidden Hub download must fail loudly, never hang or silently succeed on a developer laptop.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny Qwen2 model and tokenizer on disk, built once per test session."""
    from helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="module")
def stand_in_seam():
    """TRL's vLLM client and generation patched to talk to the CPU stand-in server, for the rest of the module."""
    from trl_adaptive.serving import patch_trl_for_stand_in_server

    with patch_trl_for_stand_in_server():
        yield
