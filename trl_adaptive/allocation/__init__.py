"""Pure allocation math: value functions, exact solvers and the allocation strategies. No torch, no trl."""

from .base import (
    Allocator,
    PromptBatchStats,
    get_allocator,
    largest_remainder,
    prompts_per_status,
    register_allocator,
    registered_allocators,
)
from .uniform import UniformAllocator

__all__ = [
    "Allocator",
    "PromptBatchStats",
    "UniformAllocator",
    "get_allocator",
    "largest_remainder",
    "prompts_per_status",
    "register_allocator",
    "registered_allocators",
]
