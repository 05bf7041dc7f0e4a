"""Stable keys for prompts: integer store ids from a dataset's id column, and fingerprints of prompts.

Statistics are keyed by integer prompt ids. Resuming, or warm-starting, with a different dataset that reuses the same
ids would silently apply old statistics to new prompts, so each row of the store may carry a fingerprint of its
prompt (its text, and its images' content), and statistics whose stored fingerprint differs are refused. Both are the
same in every process, machine and Python version (SHA-256, no ``hash()``). NumPy only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._checks import check_duplicates_agree
from .table import RowTable


def stable_prompt_ids(values: Sequence[Any], column: str = "prompt_id") -> np.ndarray:
    """``(N,)`` int64 store ids of a dataset's prompt-id column: integers as they are, strings mapped by SHA-256.

    String ids (hashes, UUIDs, names) become the first 63 bits of the SHA-256 of their UTF-8 bytes: the same in every
    process, machine and Python version. Two distinct strings collide with probability about 5e-8 among 10**6 ids.

    Raises:
        ValueError / TypeError: naming ``column`` for a missing id or a mix of kinds.

    Example:
        >>> stable_prompt_ids([3, 5]).tolist()
        [3, 5]
        >>> stable_prompt_ids(["a3f9c2"]).tolist()
        [2513115939235962885]
    """
    values = list(values)
    missing = [i for i, v in enumerate(values) if v is None]
    if missing:
        raise ValueError(
            f"train_dataset column {column!r} has no id at rows {missing[:5]}: every row needs a prompt id (an "
            "integer or a string). Fill them in, or drop the column to let the trainer number the rows."
        )
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values):
        out_of_range = [v for v in values if not -(2**63) <= int(v) < 2**63]
        if out_of_range:
            raise ValueError(
                f"train_dataset column {column!r} holds ids outside int64, e.g. {out_of_range[0]}: renumber them, or "
                "store them as strings (string ids are hashed to int64)."
            )
        return np.asarray(values, dtype=np.int64).reshape(len(values))
    if all(isinstance(v, str) for v in values):
        digests = (hashlib.sha256(v.encode("utf-8")).digest()[:8] for v in values)
        return np.fromiter((int.from_bytes(d, "big") >> 1 for d in digests), np.int64, len(values))
    kinds: dict[str, Any] = {}
    for value in values:  # the first value of each kind, in order
        kinds.setdefault(type(value).__name__, value)
    raise TypeError(
        f"train_dataset column {column!r} must hold prompt ids, all integers or all strings, got "
        f"{', '.join(f'{kind} (e.g. {v!r})' for kind, v in kinds.items())}. Convert them, or set prompt_id_column to "
        "another column (or to a name the dataset does not have, to let the trainer number the rows or, in a stream, "
        "derive each id from its prompt; a stream's row without the column gets such a derived id, a string)."
    )


def prompt_fingerprint(prompt: str | Sequence[Mapping[str, Any]], images: Sequence[Any] | None = None) -> str:
    """A 16-hex-character fingerprint of a prompt: the start of SHA-256 over its canonical JSON.

    The canonical JSON is ``json.dumps(prompt, sort_keys=True, ensure_ascii=False, separators=(",", ":"))`` encoded
    as UTF-8, so the fingerprint is the same in every process, machine and Python version (no ``hash()``), and does
    not depend on the key order of the message dicts. Everything else counts: whitespace, Unicode normalisation, the
    system message, extra keys of a message (also ones set to ``None``), and a plain string differs from the same
    text wrapped in a message list. An image inside a message (``{"type": "image", "image": ...}``) counts by its
    content: a PIL image by its mode, size and pixels, an array by its dtype, shape and bytes, encoded ``bytes`` as
    they are (see :func:`image_digest`).

    Args:
        prompt: a plain-text prompt, or a conversational prompt: a list of ``{"role": ..., "content": ...}`` dicts
            (TRL's two prompt formats).
        images: the row's images outside the prompt (TRL's ``image`` / ``images`` columns), counted in order; ``None``
            or empty for a text prompt, whose fingerprint is then that of its text alone.

    Returns:
        16 lowercase hex characters (64 bits: a collision among 10**6 prompts has probability about 3e-8).

    Example:
        >>> prompt_fingerprint("What is 2 + 2?")
        'fb3eb78712d637f5'
        >>> a = [{"role": "user", "content": "What is 2 + 2?"}]
        >>> prompt_fingerprint(a) == prompt_fingerprint([{"content": "What is 2 + 2?", "role": "user"}])
        True
        >>> prompt_fingerprint(a, images=[b"one picture"]) == prompt_fingerprint(a, images=[b"another"])
        False
    """
    if isinstance(prompt, str):
        canonical: Any = str(prompt)
    elif isinstance(prompt, (list, tuple)) and all(isinstance(message, Mapping) for message in prompt):
        canonical = [dict(message) for message in prompt]
    else:
        raise TypeError(
            f"prompt must be a string or a list of {{'role': ..., 'content': ...}} dicts (TRL's prompt formats), got "
            f"{type(prompt).__name__}."
        )
    if images:  # a new top level, so a text prompt's fingerprint stays what it was
        canonical = {"prompt": canonical, "images": [image_digest(image) for image in images]}
    try:
        text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_image_json)
    except (TypeError, ValueError) as error:
        raise TypeError(f"prompt cannot be written as JSON, so it has no fingerprint: {error}") from None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def image_digest(image: Any) -> str:
    """SHA-256 hex digest of an image's content, for fingerprints: the same picture gives the same digest in every
    process.

    A PIL image counts by mode, size and pixels (and palette); a NumPy array (or anything ``np.asarray`` takes whole)
    by dtype, shape and bytes; ``bytes`` (an encoded file) as they are; a ``datasets`` undecoded image (``{"bytes",
    "path"}``) by its bytes, else its path; a string (a path or URL) as its text.

    Example:
        >>> image_digest(b"abc") == image_digest(bytearray(b"abc"))
        True
        >>> image_digest(np.zeros((2, 2), np.uint8)) == image_digest(np.zeros((2, 3), np.uint8))
        False
    """
    digest = hashlib.sha256()
    if isinstance(image, (bytes, bytearray, memoryview)):
        digest.update(b"bytes:" + bytes(image))
    elif isinstance(image, str):
        digest.update(b"path:" + image.encode("utf-8", "surrogatepass"))
    elif isinstance(image, Mapping) and ("bytes" in image or "path" in image):
        return image_digest(image["bytes"] if image.get("bytes") is not None else str(image.get("path")))
    elif _is_pil(image):
        palette = bytes(image.getpalette() or []) if image.mode in ("P", "PA") else b""  # what the indices mean
        digest.update(f"pil:{image.mode}:{tuple(image.size)}:".encode() + palette + image.tobytes())
    else:
        array = np.asarray(image)
        if array.dtype == object:
            raise TypeError(f"cannot digest an image of type {type(image).__name__}: give a PIL image, array or bytes")
        digest.update(f"array:{array.dtype.str}:{array.shape}:".encode() + np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _is_pil(value: Any) -> bool:
    """A PIL image, recognised without importing PIL (the stats package needs NumPy only)."""
    return all(hasattr(value, name) for name in ("mode", "size", "tobytes"))


def _image_json(value: Any) -> dict[str, str]:
    """``json.dumps``' hook for what JSON cannot write: the images (and encoded bytes) inside a prompt's messages."""
    if isinstance(value, (bytes, bytearray, memoryview, np.ndarray)) or _is_pil(value):
        return {"image-sha256": image_digest(value)}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def as_fingerprints(fingerprints: Sequence[str], length: int) -> list[str]:
    values = list(fingerprints)
    if len(values) != length:
        raise ValueError(f"fingerprints holds {len(values)} entries but prompt_ids holds {length}; give one each.")
    for value in values:
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"fingerprints must be non-empty strings, got {value!r}; compute them with prompt_fingerprint(prompt)."
            )
    return [str(value) for value in values]


def record_fingerprints(table: RowTable, ids: np.ndarray, fingerprints: Sequence[str]) -> None:
    """Store the fingerprint of each id's prompt (overwriting), adding rows for new ids."""
    values = as_fingerprints(fingerprints, len(ids))
    check_duplicates_agree(ids, values, "fingerprints")
    stored = table.fingerprints
    for row, value in zip(table.rows_adding(ids).tolist(), values, strict=True):
        stored[row] = value


def fingerprint_mismatches(table: RowTable, ids: np.ndarray, fingerprints: Sequence[str]) -> np.ndarray:
    """Sorted unique ids whose stored fingerprint exists and differs from the given one: another prompt's statistics.

    Ids without a stored fingerprint (never fingerprinted, or read from a version-1 file) are not mismatches.
    """
    values = as_fingerprints(fingerprints, len(ids))
    stored = table.fingerprints
    bad = [
        i
        for i, row, value in zip(ids.tolist(), table.rows(ids).tolist(), values, strict=True)
        if row >= 0 and stored[row] and stored[row] != value
    ]
    return np.unique(np.asarray(bad, dtype=np.int64))
