"""Checks of the store's settings, inputs and saved state, each naming the field and the fix (NumPy only).

The field name is an argument so that one rule serves the store (``decay``) and the trainer config that sets it
(``est_decay``): both report the name the user wrote.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def check_real(field: str, value: Any) -> float:
    """``value`` as a float; a ValueError naming ``field`` for a bool, a non-number or a non-finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{field}={value!r}: must be a real number.")
    if not math.isfinite(float(value)):
        raise ValueError(f"{field}={value!r}: must be finite.")
    return float(value)


def check_decay(
    field: str, value: Any, decays: str = "Est's decayed counts", usual: str = "Reinforce-Ada Est's"
) -> float:
    """A per-visit decay gamma in (0, 1] (Est's by default); ``decays`` says what it multiplies, ``usual`` whose 0.9
    it is.

    Example:
        >>> check_decay("est_decay", 0.9)
        0.9
        >>> check_decay("est_decay", 1.5)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: est_decay=1.5: must lie in (0, 1]; ... Set est_decay=0.9 (Reinforce-Ada Est's), or 1.0 ...
    """
    decay = check_real(field, value)
    if not 0.0 < decay <= 1.0:
        raise ValueError(
            f"{field}={value!r}: must lie in (0, 1]; it multiplies {decays} at every visit. Set "
            f"{field}=0.9 ({usual}), or 1.0 to keep plain cumulative counts."
        )
    return decay


def check_positive(field: str, value: Any, why: str) -> float:
    """A pseudo-count > 0; ``why`` says what it is and which values are usual."""
    count = check_real(field, value)
    if count <= 0.0:
        raise ValueError(f"{field}={value!r}: must be > 0, {why}")
    return count


def check_half_life(field: str, value: Any) -> float | None:
    """None (never forget) or a finite number of steps > 0."""
    if value is None:
        return None
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not real or not math.isfinite(float(value)) or value <= 0:
        raise ValueError(
            f"{field}={value!r}: must be a finite number of steps > 0 (evidence scored h steps ago weighs half), "
            f"or None to never forget. Use e.g. {field}=None or a positive number of steps."
        )
    return float(value)


def check_duplicates_agree(ids: np.ndarray, values: Sequence[Any], what: str) -> None:
    """An id may repeat only with the same value (NaN equal to NaN)."""
    if len(np.unique(ids)) == len(ids):
        return
    first: dict[int, Any] = {}
    for i, value in zip(ids.tolist(), values, strict=True):
        previous = first.setdefault(i, value)
        if previous != value and not (previous != previous and value != value):
            raise ValueError(
                f"prompt id {i} is given two different {what} ({previous!r} and {value!r}); give each prompt id once."
            )


DAMAGED = (
    "The state is damaged or was edited: load an intact copy (e.g. an earlier checkpoint) or start fresh statistics."
)


def check_at_most(
    ids: np.ndarray, small: str, small_values: np.ndarray, large: str, large_values: np.ndarray, why: str = ""
) -> None:
    """A saved state's invariant ``small <= large`` row by row; a ValueError naming both fields, the prompt ids and
    ``why`` the invariant holds.

    Example:
        >>> ids, last, total = np.array([4, 5]), np.array([2.0, 3.0]), np.array([2.0, 1.0])
        >>> check_at_most(ids, "last_attempts", last, "total_attempts", total)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: PromptStatistics state: last_attempts exceeds total_attempts for prompt ids [5] (3.0 > 1.0). ...
    """
    bad = np.flatnonzero(small_values > large_values)
    if len(bad):
        first = bad[0]
        raise ValueError(
            f"PromptStatistics state: {small} exceeds {large} for prompt ids {ids[bad][:5].tolist()} "
            f"({float(small_values[first])!r} > {float(large_values[first])!r}){'; ' + why if why else ''}. {DAMAGED}"
        )
