"""A seeded arithmetic dataset of mixed difficulty with exact answers, and its exact-match reward.

Four levels, from SmolLM2-135M-Instruct's accuracy measured at temperature 0.7 (docs/report.md): ``easy`` (one-digit
sums and products: mostly solved), ``medium`` (two-digit times one-digit: some prompts solved, some never),
``hard`` (two-digit plus two-digit, two-digit minus one-digit: solved now and then) and ``impossible`` (three-digit
times two-digit: never). A prompt is one worked example and the question, ``"3 + 4 = 7\n23 + 45 ="``: short, so a
completion of a few tokens holds the answer and a CPU step stays cheap.

Example:
    >>> rows = arithmetic_rows(per_level=1, seed=0)
    >>> [r["level"] for r in rows]
    ['easy', 'medium', 'hard', 'impossible']
    >>> reward_exact_answer([" 12\\nQ: 4 + 4", " 1 2"], answer=["12", "12"])
    [1.0, 0.0]
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

EXAMPLE = "3 + 4 = 7\n"
LEVELS = ("easy", "medium", "hard", "impossible")


def _easy(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return (f"{a} + {b}", a + b) if rng.random() < 0.5 else (f"{a} * {b}", a * b)


def _medium(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(11, 49), rng.randint(2, 9)
    return f"{a} * {b}", a * b


def _hard(rng: random.Random) -> tuple[str, int]:
    if rng.random() < 0.5:
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        return f"{a} + {b}", a + b
    a, b = rng.randint(11, 99), rng.randint(2, 9)
    return f"{a} - {b}", a - b


def _impossible(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(101, 999), rng.randint(11, 99)
    return f"{a} * {b}", a * b


GENERATORS: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "easy": _easy,
    "medium": _medium,
    "hard": _hard,
    "impossible": _impossible,
}


def arithmetic_rows(per_level: int, seed: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[dict]:
    """``per_level`` distinct questions per level (none of them in ``exclude``), interleaved level by level.

    Each row: ``prompt`` (one example, then the question), ``question``, ``answer`` (a string), ``level``.
    """
    rng = random.Random(seed)
    by_level: dict[str, list[dict]] = {}
    seen = set(exclude) | {EXAMPLE.split(" =")[0]}
    for level in LEVELS:
        rows: list[dict] = []
        while len(rows) < per_level:
            question, answer = GENERATORS[level](rng)
            if question in seen:
                continue
            seen.add(question)
            rows.append({"prompt": f"{EXAMPLE}{question} =", "question": question, "answer": str(answer)})
            rows[-1]["level"] = level
        by_level[level] = rows
    return [by_level[level][i] for i in range(per_level) for level in LEVELS]


def train_and_heldout(train_per_level: int, heldout_per_level: int, seed: int) -> tuple[list[dict], list[dict]]:
    """A training set and a held-out set with no question in common (same levels, same generators)."""
    train = arithmetic_rows(train_per_level, seed)
    heldout = arithmetic_rows(heldout_per_level, seed + 10_000, exclude={r["question"] for r in train})
    return train, heldout


_FIRST_INT = re.compile(r"^\s*(-?\d+)")


def extract_answer(completion: str) -> str | None:
    """The integer the completion starts with (its first line), or None: ``" 42\\nQ: ..."`` gives ``"42"``."""
    match = _FIRST_INT.match(completion.split("\n", 1)[0])
    return match.group(1) if match else None


def reward_exact_answer(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion starts with exactly the answer, else 0.0 (a TRL reward function)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if extract_answer(t) == str(a) else 0.0 for t, a in zip(texts, answer, strict=True)]
