"""CPU stand-in for vLLM's server, so TRL's server mode can be tested and dry-run without vLLM or a GPU.

See docs/serving.md. ``StandInVLLMServer`` speaks the HTTP routes TRL 1.16's ``VLLMClient`` uses;
``patch_trl_for_stand_in_server`` is the seam that lets the real client talk to it on CPU. Names are imported lazily,
so ``import trl_adaptive.serving`` stays cheap and ``python -m trl_adaptive.serving.cpu_seam`` runs without a
duplicate-module warning.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "SEAM_NAMES": "cpu_seam",
    "StandInServerPatch": "cpu_seam",
    "assert_trl_seam_names_exist": "cpu_seam",
    "patch_trl_for_stand_in_server": "cpu_seam",
    "RequestRecord": "server",
    "SamplingParams": "engine",
    "StandInVLLMServer": "server",
    "echo_completion": "engine",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
