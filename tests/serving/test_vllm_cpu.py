"""The CPU paths for real vLLM (``trl_adaptive/serving/vllm_cpu.py``), as far as they run without vLLM installed.

The real engine is tested in ``tests/real_vllm`` (``make test-vllm``). Here: the llvmlite work-around against a copy
of vLLM-CPU's module scan, which client the trainer builds in which mode, and the reload client moving real tensors
into the stand-in server, whose ``/collective_rpc reload_weights`` loads them into the model it samples from.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest
import torch
from helpers.allocation import SkewedAllocator
from helpers.trainer import build_trainer, param_snapshot, reward_length
from transformers import AutoModelForCausalLM

from trl_adaptive.serving import StandInVLLMServer, patch_trl_for_stand_in_server
from trl_adaptive.serving.vllm_cpu import (
    cpu_vllm_construction,
    hide_llvmlite_from_kernel_scan,
    reload_client_class,
    use_reload_for_colocate,
)


def vllm_cpu_kernel_scan() -> None:
    """What vLLM-CPU 0.31's ``_rebind_kernels`` does to every loaded module (``vllm/triton_utils/dispatcher.py``)."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not namespace:
            continue
        for value in list(namespace.values()):
            if hasattr(value, "__dict__"):
                vars(value).get("kernel")


def test_llvmlite_is_hidden_from_the_kernel_scan_and_put_back():
    import numba  # noqa: F401 - loads llvmlite.binding.ffi, as our solvers do
    from llvmlite.binding import ffi

    lib = ffi.lib
    with pytest.raises(AttributeError, match="'_lib_fn_wrapper' object has no attribute 'get'"):
        vllm_cpu_kernel_scan()  # the defect, reproduced without vLLM
    with hide_llvmlite_from_kernel_scan():
        vllm_cpu_kernel_scan()
        assert not hasattr(ffi, "lib")
    assert ffi.lib is lib


@pytest.fixture
def trl_sees_vllm(monkeypatch):
    """What an installed vLLM makes true; everything else of TRL's server-mode path runs as shipped."""
    from trl.generation import vllm_client, vllm_generation

    monkeypatch.setattr(vllm_client, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)


def test_construction_swaps_the_client_only_for_a_cpu_trainer_in_server_mode():
    from trl.generation import vllm_generation

    shipped = vllm_generation.VLLMClient
    with cpu_vllm_construction(True, "server", False, None) as used:
        assert used and vllm_generation.VLLMClient.__name__ == "ReloadWeightsVLLMClient"
        assert issubclass(vllm_generation.VLLMClient, shipped)
    assert vllm_generation.VLLMClient is shipped
    for args in [(True, "server", True, None), (False, "server", False, None), (True, "colocate", False, None)]:
        with cpu_vllm_construction(*args) as used:  # GPU: TRL's NCCL path; no vLLM: no CPU engine to fix
            assert not used and vllm_generation.VLLMClient is shipped
    with patch_trl_for_stand_in_server(), cpu_vllm_construction(True, "server", False, None) as used:
        assert not used  # the stand-in seam owns the client


def test_colocate_on_a_cpu_engine_refuses_sleep_mode(monkeypatch):
    with pytest.raises(ValueError, match="vllm_enable_sleep_mode=False"):
        use_reload_for_colocate(SimpleNamespace(enable_sleep_mode=True))
    from trl_adaptive.serving import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "vllm_platform_is_cpu", lambda: True)
    with pytest.raises(ValueError, match="vllm_enable_sleep_mode=False"):  # before any engine is built
        with cpu_vllm_construction(True, "colocate", False, None, sleep_mode=True):
            pytest.fail("an engine would be built")


def test_reload_client_moves_the_weights_into_the_server(tiny_model_dir, trl_sees_vllm):
    trainer_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype="float32")
    with torch.no_grad():
        for param in trainer_model.parameters():
            param.add_(0.5)
    named = list(trainer_model.named_parameters())
    metadata = [(n, str(p.dtype).removeprefix("torch."), list(p.shape)) for n, p in named]
    with StandInVLLMServer(tiny_model_dir) as server:
        client = reload_client_class()(base_url=server.url, connection_timeout=10)
        client.init_communicator(device="cpu")
        served = dict(server.engine.model.named_parameters())
        assert not torch.equal(served[named[0][0]], named[0][1])
        client.update_named_params(metadata, iter(named))
        for name, param in named:
            assert torch.equal(served[name], param), name
        folder = client.weights_dir
        assert os.listdir(folder) == ["model.safetensors"]  # written atomically: no partial file left
        client.close_communicator()
        assert not os.path.exists(folder)
        with pytest.raises(RuntimeError, match="walked 1 parameters, not the"):
            client.init_communicator(device="cpu")
            client.update_named_params(metadata, iter(named[:1]))


@pytest.mark.trainer
def test_server_mode_trainer_on_cpu_syncs_real_weights(tiny_model_dir, tmp_path, trl_sees_vllm):
    """No seam: the trainer builds the reload client itself, and after training the server holds its weights."""
    with StandInVLLMServer(tiny_model_dir) as server:
        trainer = build_trainer(
            tiny_model_dir,
            tmp_path,
            allocator_object=SkewedAllocator(),
            reward_funcs=reward_length,
            max_steps=2,
            per_device_train_batch_size=16,
            temperature=0.7,
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=server.url,
            vllm_weight_reload_dir=str(tmp_path / "weights"),
        )
        assert type(trainer.vllm_generation.vllm_client).__name__ == "ReloadWeightsVLLMClient"
        before = param_snapshot(trainer.model)
        trainer.train()
        reloads = server.requests_to("/collective_rpc")
        served = dict(server.engine.model.named_parameters())
        # one probe at construction, then one reload per step (TRL syncs before generating)
        assert [r.status for r in reloads] == [400, 200, 200]
        # step 2's sync delivered step 1's update: the served weights are no longer the ones it loaded
        assert any(not torch.equal(served[n], before[n]) for n in before)
        trainer.vllm_generation.sync_weights()
        for name, param in trainer.model.named_parameters():
            assert torch.equal(served[name], param), name
        assert len(server.requests_to("/v1/completions")) == 2
    assert (tmp_path / "weights" / "model.safetensors").exists()
    # what generated the batch, for reports: the engine in allocations.jsonl, the time in TRL's logs
    from trl_adaptive.report import load_run, summarize

    trainer.save_state()  # trainer_state.json, which the report reads the logs from
    summary = summarize(load_run(tmp_path))
    assert summary["engine"] == "vllm-server"
    assert summary["generation_seconds_per_batch"] > 0
