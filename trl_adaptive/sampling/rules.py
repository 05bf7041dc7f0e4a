"""The success rule (defined in :mod:`trl_adaptive.batch`) and DAPO's filter, shared by every sampling procedure
(NumPy only)."""

from __future__ import annotations

import numpy as np

from .._validate import check_int
from ..batch import is_success


def dynamic_sampling_keep(success: np.ndarray, group_ids: np.ndarray, num_groups: int) -> np.ndarray:
    """``(num_groups,)`` bool: True for groups that are mixed (at least one success and one failure).

    DAPO's dynamic sampling keeps exactly these groups and drops the all-correct and all-wrong ones, whose GRPO
    advantages are all 0. A group with no completion in ``group_ids`` is not kept.

    Args:
        success: ``(K,)`` bool per completion (from :func:`is_success`).
        group_ids: ``(K,)`` int, the group (prompt index) of each completion, in ``[0, num_groups)``.
        num_groups: number of groups.

    Example:
        >>> success = np.array([True, False, True, True, False, False])
        >>> dynamic_sampling_keep(success, np.array([0, 0, 1, 1, 2, 2]), num_groups=4).tolist()
        [True, False, False, False]
    """
    success = _as_success(success)
    group_ids = _as_group_ids(group_ids, len(success), num_groups)
    correct = np.bincount(group_ids, weights=success, minlength=num_groups)
    total = np.bincount(group_ids, minlength=num_groups)
    return (correct > 0) & (correct < total)


# -- validation helpers -----------------------------------------------------------------------------------------------
def _as_success_counts(successes: np.ndarray, attempts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(successes, dtype=np.float64)
    a = np.asarray(attempts, dtype=np.float64)
    if s.ndim != 1 or s.shape != a.shape:
        raise ValueError(f"successes and attempts must be 1-D of the same shape, got {s.shape} and {a.shape}.")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(a))):
        raise ValueError("successes and attempts must be finite counts.")
    if np.any(s < 0) or np.any(s > a):
        bad = np.flatnonzero((s < 0) | (s > a))[:5]
        raise ValueError(
            f"need 0 <= successes <= attempts per prompt; prompts {bad.tolist()} have successes "
            f"{s[bad].tolist()} and attempts {a[bad].tolist()}."
        )
    return s, a


def _as_success(success: np.ndarray) -> np.ndarray:
    arr = np.asarray(success)
    if arr.ndim != 1:
        raise ValueError(f"success must be a 1-D array, got shape {arr.shape}.")
    if arr.dtype == np.bool_:
        return arr
    if np.issubdtype(arr.dtype, np.integer) and np.all((arr == 0) | (arr == 1)):
        return arr.astype(bool)
    raise ValueError(
        f"success must be a bool array (or 0/1 integers), got dtype {arr.dtype}. Apply the success rule to float "
        "rewards first: is_success(rewards, threshold)."
    )


def _as_group_ids(group_ids: np.ndarray, size: int, num_groups: int) -> np.ndarray:
    g = np.asarray(group_ids)
    if g.shape != (size,) or (size and not np.issubdtype(g.dtype, np.integer)):
        raise ValueError(f"group_ids must be an integer array of shape ({size},), got {g.dtype} {g.shape}.")
    check_int("num_groups", num_groups, minimum=0)
    if size and (g.min() < 0 or g.max() >= num_groups):
        raise ValueError(f"group_ids must lie in [0, {num_groups}); got values in [{g.min()}, {g.max()}].")
    return g.astype(np.int64)


__all__ = ["dynamic_sampling_keep", "is_success"]
