"""Crash-safe JSON files: written to a temporary file in the same folder, fsynced, then renamed over the target.

A crash at any instant leaves either the old file or the new one, never a partial file. Imports no torch and no trl.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as strict JSON (no NaN) to ``path`` atomically, fsyncing the file and its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name opened as open() would (mode 0666 less the umask), not mkstemp's private 0600.
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, allow_nan=False, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)  # the rename itself is durable only once the folder is synced


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a folder; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder; the file itself was already synced
        pass
    finally:
        os.close(fd)


def read_json(path: str | os.PathLike[str], what: str, remedy: str) -> Any:
    """Parse a JSON file, turning a truncated or corrupt file into a ValueError that names it and the remedy."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is truncated or corrupt, not a readable {what} ({error}). {remedy}") from None
