"""Everything that touches TRL, torch and accelerate. Imports the allocation math, never the reverse."""

from .config import AdaptiveGRPOConfig
from .trainer import AdaptiveGRPOTrainer

__all__ = ["AdaptiveGRPOConfig", "AdaptiveGRPOTrainer"]
