"""The second task: four string skills, with completion lengths that do not depend on difficulty.

A prompt is an operation letter, a string of 4-6 letters and ``=``: ``Rcabd=`` asks for the reversal (``dbac``),
``S`` for the letters sorted, ``N`` for each letter shifted to the next (``j`` wraps to ``a``), ``P`` for adjacent
pairs swapped (``cabd`` -> ``acdb``). The pretraining corpus (model.py pretrains on it) answers a prompt correctly
with a probability that depends on its operation and its FIRST letter (``correct_share``), and otherwise copies the
string unchanged, so:

- every answer, right or wrong, has as many letters as the prompt: lengths carry no information about difficulty
  (the reversal task ties them: there a failed answer is up to twice as long);
- difficulty spreads within each skill (first letter ``a``: nearly always solved; ``j``: nearly never), and the
  skills differ in their base difficulty, so what RL must learn is four decisions, and accuracy is reported per skill
  and per initial difficulty (bench/learning/analysis.py) so that a method that drops one skill, or lets solved
  prompts drift, shows it.

Prompts whose copy would be right (a sorted string for ``S``, a palindrome for ``R``, equal pairs for ``P``) are
never drawn, so the one wrong answer is always wrong. Reward: 1.0 for exactly the right answer, else 0.0; the answer
is one token sequence, so ``task.expected_accuracy`` scores a policy exactly, as on the reversal task.
"""

from __future__ import annotations

import math

import numpy as np

from .task import Prompts as _Rows

NAME = "skills"
LETTERS = "abcdefghij"
OPERATIONS = {"R": "reverse", "S": "sort", "N": "shift", "P": "swap"}
PAD, EOS, EQUALS = 0, 1, 2
VOCAB = {
    "<pad>": PAD,
    "<eos>": EOS,
    "=": EQUALS,
    **{c: i + 3 for i, c in enumerate(LETTERS)},
    **{c: i + 3 + len(LETTERS) for i, c in enumerate(OPERATIONS)},
}
MIN_LETTERS, MAX_LETTERS = 4, 6
MAX_COMPLETION_TOKENS = MAX_LETTERS + 1
# Logit of the pretraining share of correct answers: BASE + OFFSET[op] - SLOPE * (index of the first letter).
BASE, SLOPE = 3.0, 0.8
OFFSET = {"R": 0.0, "S": -1.0, "N": 1.0, "P": -2.0}


def correct_share(operation: str, first_letter: str) -> float:
    """The pretraining share of correct answers for a prompt: from 0.98 (``N``, ``a``) to 0.005 (``P``, ``j``)."""
    logit = BASE + OFFSET[operation] - SLOPE * LETTERS.index(first_letter)
    return 1.0 / (1.0 + math.exp(-logit))


def answer(operation: str, text: str) -> str:
    if operation == "R":
        return text[::-1]
    if operation == "S":
        return "".join(sorted(text))
    if operation == "N":
        return "".join(LETTERS[(LETTERS.index(c) + 1) % len(LETTERS)] for c in text)
    pairs = [text[i : i + 2][::-1] for i in range(0, len(text), 2)]
    return "".join(pairs)


def corpus_key() -> dict:
    """Everything of the corpus that shapes the pretrained weights (model.py's cache key)."""
    return {"task": NAME, "base": BASE, "slope": SLOPE, "offset": OFFSET, "letters": LETTERS,
            "lengths": [MIN_LETTERS, MAX_LETTERS]}  # fmt: skip


def _draw_text(rng: np.random.Generator, operation: str) -> str:
    while True:  # a string whose copy would be its right answer cannot be failed: draw again
        k = int(rng.integers(MIN_LETTERS, MAX_LETTERS + 1))
        text = "".join(rng.choice(list(LETTERS), size=k))
        if answer(operation, text) != text:
            return text


class Prompts(_Rows):
    """Rows ``prompt`` ("Rcabd="), ``answer`` ("dbac"), ``skill`` ("reverse"), ``first`` (the first letter),
    ``letters`` (k)."""

    @classmethod
    def draw(cls, count: int, seed: int) -> Prompts:
        rng = np.random.default_rng(seed)
        rows = []
        for operation in rng.choice(list(OPERATIONS), size=count):
            text = _draw_text(rng, str(operation))
            rows.append({"prompt": f"{operation}{text}=", "answer": answer(str(operation), text),
                         "skill": OPERATIONS[str(operation)], "first": text[0], "letters": len(text)})  # fmt: skip
        return cls(rows)


def reward_skills(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 for exactly the right answer, else 0.0."""
    return [1.0 if completion == expected else 0.0 for completion, expected in zip(completions, answer, strict=True)]


reward = reward_skills  # the name every task module gives its reward (runs.py)


def row_groups(row: dict) -> list[str]:
    """The groups a held-out row's accuracy is reported in (besides its initial-difficulty bin)."""
    return [f"skill={row['skill']}"]


def pretraining_batch(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` pretraining sequences (right-padded ids) and a 0/1 mask of the completion tokens to learn."""
    width = 1 + MAX_LETTERS + 1 + MAX_COMPLETION_TOKENS
    ids = np.full((size, width), PAD, dtype=np.int64)
    mask = np.zeros((size, width), dtype=np.int64)
    for row, operation in enumerate(rng.choice(list(OPERATIONS), size=size)):
        operation = str(operation)
        text = _draw_text(rng, operation)
        right = rng.random() < correct_share(operation, text[0])
        completion = answer(operation, text) if right else text
        sequence = [VOCAB[operation], *(VOCAB[c] for c in text), EQUALS, *(VOCAB[c] for c in completion), EOS]
        ids[row, : len(sequence)] = sequence
        mask[row, len(text) + 2 : len(sequence)] = 1
    return ids, mask
