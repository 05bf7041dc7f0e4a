"""The on-disk format of the statistics store: one JSON object, written as version 4, read in versions 1 to 4.

Version 4 (written since the completion-length estimate)::

    {"format": "trl_adaptive.PromptStatistics", "version": 4,
     "config": {"success_threshold", "decay", "prior_alpha", "prior_beta",
                "posterior_half_life", "posterior_prior_a", "posterior_prior_b", "length_decay"},
     "epoch": int, "prompt_ids": [int], "fingerprints": [str, "" when unknown],
     "columns": {name: [one number per id]}}          # the 15 names of COLUMNS

Version 3 has no length columns and no ``length_decay``; version 2 also no posterior columns and no posterior
config; version 1 also no ``fingerprints`` and no ``prior_*`` columns. :func:`read_state` upgrades an older state to
version 4 the way the store would have kept it: no prior and no fingerprint (version 1), the posterior's evidence
equal to the cumulative counts, nothing forgotten yet (versions 1 and 2), and no length measured (versions 1 to 3).
Each part of the store then reads and checks its own columns (``load_state_dict``). NumPy only.

Example:
    >>> v1 = {"format": FORMAT_NAME, "version": 1, "epoch": 1, "prompt_ids": [7],
    ...       "config": {"success_threshold": 1.0, "decay": 0.9, "prior_alpha": 1.0, "prior_beta": 16.0},
    ...       "columns": {name: [2] for name in V1_COLUMNS}}
    >>> state = read_state(v1, dict(zip(CONFIG_FIELDS, (1.0, 0.9, 1.0, 16.0, None, 1.0, 1.0, 0.9))))
    >>> state["fingerprints"], state["columns"]["prior_visits"], state["columns"]["posterior_failures"].tolist()
    ([''], [0], [0.0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .columns import Columns, column_values
from .estimators import BetaPosterior, EpochRate
from .lengths import CompletionLength
from .prior import PriorCounts
from .table import RowTable

FORMAT_NAME = "trl_adaptive.PromptStatistics"
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)

# The columns each version holds, in the order they are written.
V1_COLUMNS = (*EpochRate.columns, "decayed_successes", "decayed_attempts")
V2_COLUMNS = (*V1_COLUMNS, *PriorCounts.columns, "prior_visits")
V3_COLUMNS = (*V2_COLUMNS, *BetaPosterior.columns)
COLUMNS = (*V3_COLUMNS, *CompletionLength.columns)
V2_CONFIG_FIELDS = ("success_threshold", "decay", "prior_alpha", "prior_beta")  # versions 1 and 2
POSTERIOR_CONFIG_FIELDS = ("posterior_half_life", "posterior_prior_a", "posterior_prior_b")
V3_CONFIG_FIELDS = (*V2_CONFIG_FIELDS, *POSTERIOR_CONFIG_FIELDS)
LENGTH_CONFIG_FIELDS = ("length_decay",)
CONFIG_FIELDS = (*V3_CONFIG_FIELDS, *LENGTH_CONFIG_FIELDS)
# The config fields each version saves; those it lacks come from the run's settings (the store's defaults).
SAVED_CONFIG_FIELDS = {1: V2_CONFIG_FIELDS, 2: V2_CONFIG_FIELDS, 3: V3_CONFIG_FIELDS, 4: CONFIG_FIELDS}


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
    """``state`` (any readable version) checked against the store's ``config`` and upgraded to version 4.

    Returns:
        ``{"epoch", "prompt_ids"`` (unique ``int64`` array), ``"fingerprints"``, ``"columns"}`` with all 15 columns;
        the parts check the columns' values when they load them.

    Raises:
        ValueError: when the format or version is unknown, a key or column is missing (named), the saved config
            differs from ``config`` on the fields the version saves, or the ids or fingerprints are malformed.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
        raise ValueError(f"Not a PromptStatistics state: expected format {FORMAT_NAME!r}.")
    version = _require(state, "version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ValueError(
            f"PromptStatistics state has format version {version!r}; this code reads versions "
            f"{list(READABLE_VERSIONS)}. Upgrade trl_adaptive to read it, or start fresh statistics."
        )
    _check_saved_config(_require(state, "config"), config, SAVED_CONFIG_FIELDS[version])
    epoch = _require(state, "epoch")
    ids = _prompt_ids(_require(state, "prompt_ids"))
    columns = _require(state, "columns")
    if not isinstance(columns, dict):
        raise ValueError("PromptStatistics state: columns must be a dict of lists.")
    saved = {1: V1_COLUMNS, 2: V2_COLUMNS, 3: V3_COLUMNS}.get(version, COLUMNS)
    missing = [name for name in saved if name not in columns]
    if missing:
        raise ValueError(f"PromptStatistics state lacks columns {missing}.")
    fingerprints = [""] * len(ids) if version == 1 else _fingerprints(_require(state, "fingerprints"), len(ids))
    return {"epoch": epoch, "prompt_ids": ids, "fingerprints": fingerprints, "columns": _upgrade(columns, version)}


def _upgrade(columns: Mapping[str, Any], version: int) -> dict[str, Any]:
    """Version-4 columns from a version's columns (a copy; the saved state is not changed)."""
    columns = dict(columns)
    if version == 1:  # no priors before version 2
        length = len(column_values(columns, "total_attempts"))
        columns.update({name: [0] * length for name in ("prior_successes", "prior_attempts", "prior_visits")})
    if version < 3:  # no forgetting before version 3: the posterior's evidence is the cumulative counts
        successes = column_values(columns, "total_successes")
        columns["posterior_successes"] = successes.copy()
        columns["posterior_failures"] = column_values(columns, "total_attempts") - successes
    if version < 4:  # no lengths measured before version 4
        length = len(column_values(columns, "total_attempts"))
        columns.update({name: [0.0] * length for name in CompletionLength.columns})
    return columns


def config_to_load(state: Any, source: str, expected_config: Mapping[str, float | None]) -> dict[str, Any]:
    """The config to build a store for ``state`` with: the saved one, checked against ``expected_config``.

    A version-1 or 2 state saves no posterior config, a version-1 to 3 state no ``length_decay``: the expected values
    are used where given (the store's defaults otherwise).

    Raises:
        ValueError: naming ``source``, when ``state`` is not a store's state, its config is malformed, or a saved
            value differs from the expected one.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
        raise ValueError(f"{source} is not a PromptStatistics file (expected format {FORMAT_NAME!r}).")
    saved = state.get("config")
    fields = SAVED_CONFIG_FIELDS.get(state.get("version"), CONFIG_FIELDS)
    if not isinstance(saved, dict) or set(saved) != set(fields):
        found = sorted(saved) if isinstance(saved, dict) else saved
        raise ValueError(f"{source}: config must hold exactly {fields}, got {found!r}.")
    saved = {**{k: expected_config[k] for k in CONFIG_FIELDS if k not in fields and k in expected_config}, **saved}
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
