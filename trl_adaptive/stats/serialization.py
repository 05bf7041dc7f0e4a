"""The on-disk format of the statistics store: one JSON object, version 4::

    {"format": "trl_adaptive.PromptStatistics", "version": 4,
     "config": {"success_threshold", "decay", "prior_alpha", "prior_beta",
                "posterior_half_life", "posterior_prior_a", "posterior_prior_b", "length_decay"},
     "epoch": int, "prompt_ids": [int], "fingerprints": [str, "" when unknown],
     "columns": {name: [one number per id]}}          # the 15 names of COLUMNS

Versions 1 to 3 were development formats that no release wrote (the package is unreleased): they are refused, with
the versions this code reads. Each part of the store reads and checks its own columns (``load_state_dict``). NumPy
only.

Example:
    >>> config = dict(zip(CONFIG_FIELDS, (1.0, 0.9, 1.0, 16.0, None, 1.0, 1.0, 0.9)))
    >>> try:
    ...     read_state({"format": FORMAT_NAME, "version": 3}, config)
    ... except ValueError as error:
    ...     print(error)  # doctest: +ELLIPSIS
    PromptStatistics state has format version 3; this code reads versions [4]. ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .columns import Columns
from .estimators import BetaPosterior, EpochRate
from .lengths import CompletionLength
from .prior import PriorCounts
from .table import RowTable

FORMAT_NAME = "trl_adaptive.PromptStatistics"
FORMAT_VERSION = 4
READABLE_VERSIONS = (FORMAT_VERSION,)

# The columns, in the order they are written.
COLUMNS = (
    *EpochRate.columns,
    "decayed_successes",
    "decayed_attempts",
    *PriorCounts.columns,
    "prior_visits",
    *BetaPosterior.columns,
    *CompletionLength.columns,
)
POSTERIOR_CONFIG_FIELDS = ("posterior_half_life", "posterior_prior_a", "posterior_prior_b")
CONFIG_FIELDS = ("success_threshold", "decay", "prior_alpha", "prior_beta", *POSTERIOR_CONFIG_FIELDS, "length_decay")


def write_state(config: Mapping[str, Any], table: RowTable, parts: Sequence[Columns]) -> dict[str, Any]:
    """The version-4 state of a store: its config, its table's ids and fingerprints, and every part's state."""
    merged: dict[str, Any] = {}
    columns: dict[str, list[Any]] = {}
    for part in parts:
        state = part.state_dict()
        columns.update(state.pop("columns"))
        merged.update(state)
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "config": dict(config),
        "epoch": merged["epoch"],
        "prompt_ids": table.ids.tolist(),
        "fingerprints": list(table.fingerprints),
        "columns": {name: columns[name] for name in COLUMNS},
    }


def read_state(state: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` (version 4) checked against the store's ``config``.

    Returns:
        ``{"epoch", "prompt_ids"`` (unique ``int64`` array), ``"fingerprints"``, ``"columns"}`` with all 15 columns;
        the parts check the columns' values when they load them.

    Raises:
        ValueError: when the format or version is unknown, a key or column is missing (named), the saved config
            differs from ``config``, or the ids or fingerprints are malformed.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
        raise ValueError(f"Not a PromptStatistics state: expected format {FORMAT_NAME!r}.")
    _check_version(_require(state, "version"))
    _check_saved_config(_require(state, "config"), config, CONFIG_FIELDS)
    epoch = _require(state, "epoch")
    ids = _prompt_ids(_require(state, "prompt_ids"))
    columns = _require(state, "columns")
    if not isinstance(columns, dict):
        raise ValueError("PromptStatistics state: columns must be a dict of lists.")
    missing = [name for name in COLUMNS if name not in columns]
    if missing:
        raise ValueError(f"PromptStatistics state lacks columns {missing}.")
    fingerprints = _fingerprints(_require(state, "fingerprints"), len(ids))
    return {"epoch": epoch, "prompt_ids": ids, "fingerprints": fingerprints, "columns": dict(columns)}


def config_to_load(state: Any, source: str, expected_config: Mapping[str, float | None]) -> dict[str, Any]:
    """The config to build a store for ``state`` with: the saved one, checked against ``expected_config``.

    Raises:
        ValueError: naming ``source``, when ``state`` is not a store's state, its config is malformed, or a saved
            value differs from the expected one.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
        raise ValueError(f"{source} is not a PromptStatistics file (expected format {FORMAT_NAME!r}).")
    _check_version(state.get("version"), source)
    saved = state.get("config")
    if not isinstance(saved, dict) or set(saved) != set(CONFIG_FIELDS):
        found = sorted(saved) if isinstance(saved, dict) else saved
        raise ValueError(f"{source}: config must hold exactly {CONFIG_FIELDS}, got {found!r}.")
    for field, value in expected_config.items():
        if saved[field] != value:
            raise ValueError(
                f"{source} was saved with {field}={saved[field]!r} but this run uses {field}={value!r}; the "
                "counts would mean something else. Use the saved value or start fresh statistics."
            )
    return saved


def check_config_names(expected_config: Mapping[str, Any]) -> None:
    """A TypeError for keyword arguments that are not store settings."""
    unknown = sorted(set(expected_config) - set(CONFIG_FIELDS))
    if unknown:
        raise TypeError(f"Unknown PromptStatistics config fields {unknown}; expected some of {CONFIG_FIELDS}.")


def _require(state: Mapping[str, Any], key: str) -> Any:
    if key not in state:
        raise ValueError(
            f"PromptStatistics state lacks the key {key!r}: it is truncated or was not written by "
            "PromptStatistics.state_dict(). Use an intact file (e.g. an earlier checkpoint) or start fresh statistics."
        )
    return state[key]


def _check_version(version: Any, source: str = "PromptStatistics state") -> None:
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ValueError(
            f"{source} has format version {version!r}; this code reads versions "
            f"{list(READABLE_VERSIONS)}. Upgrade trl_adaptive to read it, or start fresh statistics."
        )


def _check_saved_config(saved: Any, config: Mapping[str, Any], fields: Sequence[str]) -> None:
    if not isinstance(saved, dict):
        raise ValueError("PromptStatistics state: config must be a dict of the constructor arguments.")
    diff = [f"{k}: saved {saved.get(k)!r}, configured {config[k]!r}" for k in fields if saved.get(k) != config[k]]
    if diff:
        raise ValueError(
            "PromptStatistics config mismatch (" + "; ".join(diff) + "). Construct the store with the saved "
            "values, or use PromptStatistics.load(path) to take them from the file."
        )


def _prompt_ids(raw: Any) -> np.ndarray:
    if not isinstance(raw, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        raise ValueError("PromptStatistics state: prompt_ids must be a list of integers.")
    if any(not -(2**63) <= i < 2**63 for i in raw):
        raise ValueError("PromptStatistics state: prompt_ids must fit in int64.")
    ids = np.asarray(raw, dtype=np.int64).reshape(-1)
    if len(np.unique(ids)) != len(ids):
        raise ValueError("PromptStatistics state has duplicate prompt ids.")
    return ids


def _fingerprints(raw: Any, length: int) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(f, str) for f in raw):
        raise ValueError("PromptStatistics state: fingerprints must be a list of strings ('' when unknown).")
    if len(raw) != length:
        raise ValueError("PromptStatistics state: fingerprints and prompt_ids differ in length.")
    return list(raw)
