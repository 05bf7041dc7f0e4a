"""The one documented seam that lets TRL 1.16's vLLM server mode run on CPU against the stand-in server.

Why a seam at all: without the ``vllm`` package TRL refuses to build a ``VLLMClient``, and weight sync opens an NCCL
group that needs CUDA. Four public names are patched, for the trainer's whole life (construction *and* training):

1. ``trl.generation.vllm_client.is_vllm_available`` -> ``True`` (``VLLMClient.__init__`` checks it);
2. ``trl.generation.vllm_generation.is_vllm_available`` -> ``True`` (``VLLMGeneration._init_vllm`` checks it);
3. ``VLLMClient.init_communicator`` -> HTTP only: check ``/server_info``, call ``/get_world_size``, POST
   ``/init_weight_transfer_engine``; no NCCL group is opened;
4. ``VLLMClient.update_named_params`` -> POST ``/start_weight_update``, ``/update_weights`` (names, dtypes, shapes),
   ``/finish_weight_update``; the parameters are walked (so distributed gathers line up) but no tensor is sent.

Everything else (``sync_weights``, ``reset_prefix_cache``, ``generate``) runs as shipped, so the stand-in's request log
shows every generation request and every weight sync. The server therefore keeps sampling from the weights it loaded.

Run an unchanged training script under the seam with ``python -m trl_adaptive.serving.cpu_seam train.py [args]``.
"""

from __future__ import annotations

import importlib
import runpy
import sys
from collections.abc import Iterator
from typing import Any

SEAM_NAMES = (
    "trl.generation.vllm_client.is_vllm_available",
    "trl.generation.vllm_generation.is_vllm_available",
    "trl.generation.vllm_client.VLLMClient.init_communicator",
    "trl.generation.vllm_client.VLLMClient.update_named_params",
)
# What the replacements themselves call on the shipped client; a rename here would break them just as loudly.
_RELIED_ON = (
    "trl.generation.vllm_client.VLLMClient.get_server_info",
    "trl.generation.vllm_client.VLLMClient.get_world_size",
    "trl.generation.vllm_client.VLLMClient._post",
    "trl.generation.vllm_client.VLLMClient._start_weight_update",
    "trl.generation.vllm_client.VLLMClient._finish_weight_update",
    "trl.generation.vllm_client.VLLMClient.reset_prefix_cache",
    "trl.generation.vllm_generation.VLLMGeneration.sync_weights",
)


def _resolve(dotted: str) -> tuple[Any, str]:
    """(owner, attribute) for a dotted name such as ``pkg.module.Class.method``; raises ``AttributeError``."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:-1]:
            owner = getattr(owner, part)
        getattr(owner, parts[-1])
        return owner, parts[-1]
    raise AttributeError(dotted)


def assert_trl_seam_names_exist() -> None:
    """Fail loudly if TRL renamed anything the seam patches or relies on (the pin is ``trl>=1.16,<1.17``)."""
    missing = []
    for dotted in (*SEAM_NAMES, *_RELIED_ON):
        try:
            _resolve(dotted)
        except (AttributeError, ImportError):
            missing.append(dotted)
    if missing:
        raise RuntimeError(
            "trl no longer has the names trl_adaptive's CPU seam needs: "
            f"{', '.join(missing)}. Re-read trl/generation/vllm_client.py and update trl_adaptive/serving/cpu_seam.py."
        )


def _vllm_available(min_version: str | None = None) -> bool:
    """Stands in for ``trl.import_utils.is_vllm_available``: the stand-in server plays the role of vLLM."""
    return True


def _http_only_init_communicator(self: Any, device: Any = 0) -> None:
    """The shipped handshake without the NCCL rendezvous (and without its CUDA-only device check)."""
    from trl.generation import vllm_client

    if self.get_server_info()["weight_transfer_config"] is None:
        raise RuntimeError(f"The vLLM server at {self.base_url} has no weight-transfer engine.")
    init_info = {
        "master_address": self.host or "127.0.0.1",
        "master_port": self.group_port,
        "rank_offset": 1,
        "world_size": self.get_world_size() + 1,
    }
    if getattr(vllm_client, "_HAS_STATEFUL_TRAINER_ENGINE", False):
        init_info["packed"] = True
    self._post(f"{self.base_url}/init_weight_transfer_engine", json={"init_info": init_info})
    self.communicator = None  # nothing to close: ``close_communicator`` stays a no-op


_http_only_init_communicator.stand_in_seam = True


def _http_only_update_named_params(
    self: Any, metadata: list[tuple[str, str, list[int]]], named_params: Iterator[tuple[str, Any]]
) -> None:
    """The shipped announce-then-stream protocol, with the stream replaced by walking the parameters locally."""
    from trl.generation import vllm_client

    names = [name for name, _, _ in metadata]
    update_info: dict[str, Any] = {
        "names": names,
        "dtype_names": [dtype for _, dtype, _ in metadata],
        "shapes": [list(shape) for _, _, shape in metadata],
    }
    if not getattr(vllm_client, "_HAS_STATEFUL_TRAINER_ENGINE", False):
        update_info["packed"] = True
    outer = self._updating_weights  # inside ``weight_update()`` the caller owns start/finish
    if not outer:
        self._start_weight_update()
    self._post(f"{self.base_url}/update_weights", json={"update_info": update_info})
    walked = [name for name, _ in named_params]  # keeps ZeRO-3/FSDP gathers in step with the other ranks
    if walked != names:
        raise RuntimeError(f"weight sync walked {len(walked)} parameters, not the {len(names)} it announced, in order")
    if not outer:
        self._finish_weight_update()


def stand_in_seam_active() -> bool:
    """True while :class:`StandInServerPatch` holds TRL's client (the trainer then leaves the client alone)."""
    from trl.generation.vllm_client import VLLMClient

    # By marker, not identity: under ``python -m trl_adaptive.serving.cpu_seam`` the patch comes from ``__main__``.
    return getattr(VLLMClient.__dict__.get("init_communicator"), "stand_in_seam", False)


class StandInServerPatch:
    """Applies the four patches on ``start()``/``__enter__`` and restores the originals on ``stop()``/``__exit__``."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    @property
    def active(self) -> bool:
        return bool(self._saved)

    def start(self) -> StandInServerPatch:
        if self._saved:
            return self
        assert_trl_seam_names_exist()
        replacements = (_vllm_available, _vllm_available, _http_only_init_communicator, _http_only_update_named_params)
        for dotted, replacement in zip(SEAM_NAMES, replacements, strict=True):
            owner, attribute = _resolve(dotted)
            self._saved.append((owner, attribute, owner.__dict__[attribute]))
            setattr(owner, attribute, replacement)
        return self

    def stop(self) -> None:
        while self._saved:  # reverse order, so stacked patches unwind cleanly
            owner, attribute, original = self._saved.pop()
            setattr(owner, attribute, original)

    def __enter__(self) -> StandInServerPatch:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def patch_trl_for_stand_in_server() -> StandInServerPatch:
    """The CPU seam: ``with patch_trl_for_stand_in_server(): ...`` or ``patch_trl_for_stand_in_server().start()``.

    Keep it active from building the ``GRPOTrainer`` until training ends: the client is built in ``__init__`` and
    weights are synced during ``train()``.
    """
    return StandInServerPatch()


def main(argv: list[str] | None = None) -> None:
    """``python -m trl_adaptive.serving.cpu_seam script.py [args]``: run an unchanged script with the seam active."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m trl_adaptive.serving.cpu_seam SCRIPT.py [ARGS...]")
        raise SystemExit(0 if args else 2)
    sys.argv = list(args)
    with patch_trl_for_stand_in_server():
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
