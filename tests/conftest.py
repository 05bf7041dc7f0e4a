import functools
import importlib.abc
import importlib.util
import os
import sys
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


# ---- the fast suite builds no trainer -------------------------------------------------------------------------------
# `make test-fast` deselects these marks; a test that builds a GRPOTrainer (AdaptiveGRPOTrainer included) in this
# process without one of them fails, so the fast suite cannot slowly fill up with trainer builds again. A trainer
# built in a subprocess (an example script, accelerate launch) is not seen here: such tests carry a mark by hand.
TRAINER_MARKS = ("trainer", "slow", "multiprocess", "real_vllm")  # real_vllm: its own suite, make test-vllm
_running: list[pytest.Item] = []  # the test whose setup, call or teardown is running now (fixtures included)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.remove(item)


def _refuse_unmarked_builds(grpo_trainer_class) -> None:
    original_init = grpo_trainer_class.__init__

    @functools.wraps(original_init)  # inspect.signature / getsource (the trainer and the TRL pins read them) see TRL's
    def guarded_init(self, *args, **kwargs):
        if _running and not any(_running[-1].get_closest_marker(mark) for mark in TRAINER_MARKS):
            pytest.fail(
                f"{_running[-1].nodeid} builds a {type(self).__name__}, which `make test-fast` must not: mark the "
                "test @pytest.mark.trainer (or its module `pytestmark = pytest.mark.trainer`), or slow/multiprocess",
                pytrace=False,
            )
        original_init(self, *args, **kwargs)

    grpo_trainer_class.__init__ = guarded_init


class _GuardTrlOnImport(importlib.abc.MetaPathFinder):
    """Wraps GRPOTrainer.__init__ when TRL's module defining it is first imported, so a run that never imports TRL
    (the math layers' tests) does not pay the seconds it takes to import."""

    MODULE = "trl.trainer.grpo_trainer"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.MODULE:
            return None
        sys.meta_path.remove(self)  # find the real spec without finding ourselves again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        exec_module = spec.loader.exec_module

        def exec_and_guard(module):
            exec_module(module)
            _refuse_unmarked_builds(module.GRPOTrainer)

        spec.loader.exec_module = exec_and_guard
        return spec


if _GuardTrlOnImport.MODULE in sys.modules:  # imported before this conftest (a plugin): guard it now
    _refuse_unmarked_builds(sys.modules[_GuardTrlOnImport.MODULE].GRPOTrainer)
else:
    sys.meta_path.insert(0, _GuardTrlOnImport())
