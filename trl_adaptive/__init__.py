"""trl_adaptive: adaptive rollout allocation for TRL's GRPOTrainer.

The allocation math, the sampling procedures and the strategy registry (``trl_adaptive.allocation``,
``trl_adaptive.sampling``, ``trl_adaptive.strategies``, ``trl_adaptive.stats``) import neither torch nor trl; the
trainer names below are imported lazily so that ``import trl_adaptive`` stays cheap.
"""

from .allocation import *  # noqa: F401,F403
from .allocation import __all__ as _allocation_all
from .sampling import *  # noqa: F401,F403
from .sampling import __all__ as _sampling_all
from .strategies import *  # noqa: F401,F403
from .strategies import __all__ as _strategies_all

__version__ = "0.1.0"

_LAZY = {
    "AdaptiveGRPOConfig": "trl_adaptive.trainer.config",
    "AdaptiveGRPOTrainer": "trl_adaptive.trainer.trainer",
    "PromptStatistics": "trl_adaptive.stats",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trl_adaptive' has no attribute {name!r}")


__all__ = [*_allocation_all, *_sampling_all, *_strategies_all, *_LAZY]
