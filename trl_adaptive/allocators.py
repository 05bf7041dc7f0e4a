"""Public home of the allocation strategies: ``from trl_adaptive.allocators import KnapsackAllocator``."""

from .allocation import *  # noqa: F401,F403
from .allocation import __all__  # noqa: F401
