"""Atomic file writes: a crash or a kill mid-write never leaves a half-written checkpoint or config."""
from __future__ import annotations

import json
import os
import tempfile
from typing import IO, Any, Callable

__all__ = ["atomic_write", "atomic_write_json"]


def atomic_write(path: str, write: Callable[[IO[bytes]], Any]) -> str:
    """Call ``write(file)`` on a temporary file beside ``path``, flush it to disk, then rename it over
    ``path``: readers see the old file or the new one, never a part."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str, obj: Any) -> str:
    text = json.dumps(obj, indent=2, sort_keys=True, default=repr, allow_nan=True)
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))
