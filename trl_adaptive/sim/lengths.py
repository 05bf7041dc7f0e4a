"""The model of completion lengths: how many tokens each simulated completion generates.

Users pay for generated tokens, not completions, so the simulator draws a length for every completion it scores:

- each prompt i has a mean solved length m_i = ``solved_tokens`` * exp(``prompt_spread`` * z_i), z_i ~ N(0, 1), fixed
  for the run (lognormal across prompts: ``prompt_spread`` 0.08 is the +-8% measured on SmolLM2-135M, 0.6 makes the
  10th-to-90th percentile range 4.7-fold, as long chains of thought do);
- a completion is first solved or failed (its Bernoulli reward); a failed attempt runs longer, mean
  ``failed_ratio`` * m_i, so a prompt's expected length m_i (p_i + ``failed_ratio`` (1 - p_i)) grows as it gets harder;
- the length is lognormal around that mean (``completion_sigma``, the log-scale spread within a prompt and an
  outcome), rounded to whole tokens, at least 1;
- a completion longer than ``max_completion_length`` is cut there and fails (reward 0), as TRL's truncated
  completions do when the answer never comes.

Without truncation the lengths change no reward, so a run's learning is the same whatever its length model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Measured on SmolLM2-135M-Instruct (64 arithmetic prompts, 8 samples each, up to 96 tokens): failed completions
# averaged 71 tokens, solved ones 54, and per-prompt mean lengths varied +-8%.
SMOLLM2_SOLVED_TOKENS = 54.0
SMOLLM2_FAILED_RATIO = 71.0 / 54.0


@dataclass(frozen=True)
class LengthModel:
    """Per-prompt completion-length distributions (an ASSUMPTION shaped by one measurement; see the module docstring).

    Attributes:
        solved_tokens: the population median of m_i, a prompt's mean solved length. Default 54 (SmolLM2-135M).
        prompt_spread: sigma of log m_i across prompts. Default 0.08 (SmolLM2-135M's +-8%).
        failed_ratio: mean failed length over mean solved length of the same prompt. Default 71 / 54 = 1.31,
            SmolLM2-135M's ratio of means; those means were cut at 96 tokens, so the uncut ratio is likely larger.
        completion_sigma: sigma of the log length of one completion around its prompt's mean for its outcome.
            Default 0.3, a guess (the measurement gave no per-prompt spread).
        max_completion_length: completions longer than this are cut to it and fail; None (default) never cuts.
    """

    solved_tokens: float = SMOLLM2_SOLVED_TOKENS
    prompt_spread: float = 0.08
    failed_ratio: float = SMOLLM2_FAILED_RATIO
    completion_sigma: float = 0.3
    max_completion_length: int | None = None

    def __post_init__(self) -> None:
        if not (np.isfinite(self.solved_tokens) and self.solved_tokens >= 1):
            raise ValueError(f"LengthModel.solved_tokens must be a number >= 1 (tokens), got {self.solved_tokens}.")
        for name in ("prompt_spread", "completion_sigma"):
            value = getattr(self, name)
            if not (np.isfinite(value) and 0 <= value <= 3):
                raise ValueError(f"LengthModel.{name} is a log-scale sigma; use 0 <= {name} <= 3, got {value}.")
        if not (np.isfinite(self.failed_ratio) and self.failed_ratio > 0):
            raise ValueError(
                f"LengthModel.failed_ratio must be > 0 (1 = failed as long as solved), got {self.failed_ratio}."
            )
        cap = self.max_completion_length
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1):
            raise ValueError(f"LengthModel.max_completion_length must be an integer >= 1 or None, got {cap!r}.")

    def prompt_means(self, num_prompts: int, rng: np.random.Generator) -> np.ndarray:
        """``(num_prompts,)`` m_i, each prompt's mean solved length, drawn with ``rng``."""
        return self.solved_tokens * np.exp(self.prompt_spread * rng.standard_normal(num_prompts))

    def expected_tokens(self, means: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Mean length of a completion (before any cut) of prompts with mean solved length ``means``, success ``p``."""
        p = np.asarray(p, dtype=np.float64)
        return np.asarray(means, dtype=np.float64) * (p + self.failed_ratio * (1.0 - p))

    def sample(self, means: np.ndarray, solved: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Lengths of completions: ``means`` (C,) their prompts' m_i, ``solved`` (C,) bool their outcome before a cut.

        Returns:
            ``(tokens, truncated)``: (C,) float64 whole tokens >= 1, at most ``max_completion_length``; (C,) bool,
            the completions that were cut (they fail).

        Example:
            >>> model = LengthModel(completion_sigma=0.0, max_completion_length=60)
            >>> tokens, cut = model.sample(np.array([54.0, 54.0]), np.array([True, False]), np.random.default_rng(0))
            >>> tokens.tolist(), cut.tolist()
            ([54.0, 60.0], [False, True])
        """
        mean = np.asarray(means, dtype=np.float64) * np.where(solved, 1.0, self.failed_ratio)
        sigma = self.completion_sigma
        # exp(sigma Z - sigma^2 / 2) has mean 1, so `mean` is the mean length, not the median.
        tokens = np.maximum(1.0, np.rint(mean * np.exp(sigma * rng.standard_normal(len(mean)) - 0.5 * sigma**2)))
        if self.max_completion_length is None:
            return tokens, np.zeros(len(tokens), dtype=bool)
        truncated = tokens > self.max_completion_length
        return np.minimum(tokens, float(self.max_completion_length)), truncated


@dataclass
class PromptLengths:
    """One population's lengths: the model, each prompt's mean solved length m_i, and the generator of its draws."""

    model: LengthModel
    means: np.ndarray
    rng: np.random.Generator

    @classmethod
    def draw(cls, model: LengthModel, num_prompts: int, rng: np.random.Generator) -> PromptLengths:
        """Draw every prompt's m_i with ``rng``, which then draws the completions' lengths."""
        return cls(model, model.prompt_means(num_prompts, rng), rng)

    def complete(self, prompt_ids: np.ndarray, rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lengths of completions of ``prompt_ids`` scored ``rewards`` (>= 1: solved) before any cut.

        Returns:
            ``(rewards, tokens, truncated)``: the rewards with every cut completion failed (0), each completion's
            generated tokens, and which were cut.
        """
        rewards = np.asarray(rewards, dtype=np.float64)
        tokens, truncated = self.model.sample(self.means[prompt_ids], rewards >= 1.0, self.rng)
        return np.where(truncated, 0.0, rewards), tokens, truncated


LENGTHS: dict[str, LengthModel] = {
    # The default: SmolLM2-135M's shape, no cut (lengths change no reward).
    "default": LengthModel(),
    # SmolLM2-135M as measured: +-8% between prompts, cut at 96 tokens.
    "small_spread": LengthModel(max_completion_length=96),
    # Long chains of thought: prompts' means 4.7-fold apart (10th to 90th percentile), cut at 4096 tokens.
    "several_fold": LengthModel(solved_tokens=1000.0, prompt_spread=0.6, max_completion_length=4096),
}


__all__ = ["LENGTHS", "SMOLLM2_FAILED_RATIO", "SMOLLM2_SOLVED_TOKENS", "LengthModel", "PromptLengths"]
