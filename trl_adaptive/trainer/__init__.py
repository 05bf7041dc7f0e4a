"""Everything that touches TRL, torch and accelerate. Imports the allocation math, never the reverse.

The package itself imports nothing heavy: ``AdaptiveGRPOConfig`` and ``AdaptiveGRPOTrainer`` are loaded on first use
(PEP 562), so ``import trl_adaptive.trainer.output_files`` (no torch: the run files' names, read by
``trl_adaptive.report``) stays cheap.
"""

import importlib

_LAZY = {"AdaptiveGRPOConfig": ".config", "AdaptiveGRPOTrainer": ".trainer"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AdaptiveGRPOConfig", "AdaptiveGRPOTrainer"]
