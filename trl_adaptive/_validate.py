"""Argument checks shared by the package: an error names the field, its value, what it must be and why.

Messages read ``name=value: must be an integer >= 2 (reason). Fix.``, the style of every other check here. ``bool`` is
never a number (``True`` would pass ``isinstance(True, int)``); numpy scalars are.

Example:
    >>> check_int("round_size", 8, minimum=1)
    8
    >>> check_int("round_size", 0, minimum=1, reason="completions per active prompt per round")
    Traceback (most recent call last):
    ...
    ValueError: round_size=0: must be an integer >= 1 (completions per active prompt per round).
    >>> check_number("eta", float("nan"), above=0, finite=True)
    Traceback (most recent call last):
    ...
    ValueError: eta=nan: must be a finite number > 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def is_int(value: Any) -> bool:
    """True for a Python or numpy integer, False for ``bool`` and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """True for a Python or numpy integer or float (NaN and inf included), False for ``bool`` and the rest."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _bounds(minimum: float | None, maximum: float | None, above: float | None, minimum_name: str | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if above is not None:
        return f" > {above}"
    if minimum is not None:
        return f" >= {minimum_name}={minimum}" if minimum_name else f" >= {minimum}"
    return f" <= {maximum}" if maximum is not None else ""


def _fail(name: str, value: Any, requirement: str, reason: str, fix: str) -> ValueError:
    message = f"{name}={value!r}: must be {requirement}" + (f" ({reason})" if reason else "") + "."
    return ValueError(f"{message} {fix}" if fix else message)


def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    minimum_name: str | None = None,
    reason: str = "",
    fix: str = "",
) -> int:
    """``value`` as an ``int``; a ValueError unless it is an integer in ``[minimum, maximum]`` (either may be None).

    Args:
        name: the field or argument, as the user writes it.
        value: what was given.
        minimum: the smallest value allowed, or None.
        maximum: the largest value allowed, or None.
        minimum_name: the field ``minimum`` comes from, when it is another setting (``>= min_rollouts=2``).
        reason: what the value means, put in brackets after the requirement.
        fix: a sentence saying what to do, put after the requirement.
    """
    if not is_int(value) or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _fail(name, value, "an integer" + _bounds(minimum, maximum, None, minimum_name), reason, fix)
    return int(value)


def check_number(
    name: str,
    value: Any,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    above: float | None = None,
    finite: bool = False,
    reason: str = "",
    fix: str = "",
) -> float:
    """``value`` as a ``float``; a ValueError unless it is a real number within the bounds (NaN never is).

    Args:
        name: the field or argument, as the user writes it.
        value: what was given.
        minimum: the smallest value allowed, or None.
        maximum: the largest value allowed, or None.
        above: a strict lower bound (``value > above``), or None.
        finite: refuse inf (NaN is refused by any bound, and by ``finite``).
        reason: what the value means, put in brackets after the requirement.
        fix: a sentence saying what to do, put after the requirement.
    """
    # Every comparison with NaN is False, so NaN fails any bound.
    ok = is_number(value) and (not finite or math.isfinite(value))
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not (ok and (above is None or value > above)):
        kind = "a finite number" if finite else "a number"
        raise _fail(name, value, kind + _bounds(minimum, maximum, above, None), reason, fix)
    return float(value)


def check_bool(name: str, value: Any, *, fix: str = "") -> bool:
    """``value`` as a ``bool``; a ValueError unless it is a Python or numpy bool.

    A string is refused, not read: ``bool("false")`` is True, so ``dynamic_sampling="false"`` would turn it on. (The
    command line's ``--dynamic_sampling false`` is parsed to a bool by ``TrlParser`` before it gets here.)
    """
    if not isinstance(value, (bool, np.bool_)):
        reason = "a string is not read as a bool" if isinstance(value, str) else ""
        raise _fail(name, value, "True or False", reason, fix or f"Pass {name}=True or {name}=False.")
    return bool(value)


__all__ = ["check_bool", "check_int", "check_number", "is_int", "is_number"]
