"""Atomic file writes: a crash or a kill mid-write never leaves a half-written checkpoint or config.

A write that fails because the disk is full (or the user's quota is spent) raises ``DiskFullError``, which
names the file and what to do, instead of the writer's own error: torch's zip writer reports a full disk as
``RuntimeError: [enforce fail at inline_container.cc] . unexpected pos ...``, the ``ENOSPC`` only in the
exception it was raised over (a file object) or nowhere at all (a path), so when such a writer fails the
free space of the file's filesystem decides.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from typing import IO, Any, Callable, Iterator, Optional, Tuple

__all__ = ["atomic_write", "atomic_file", "atomic_write_path", "atomic_write_json", "DiskFullError", "error_chain"]

#: the errors of a full filesystem: no space left, or the user's quota spent
_FULL = (errno.ENOSPC, errno.EDQUOT)
#: a writer that fails with no errno (torch's) while its filesystem has less free space than this ran out of it
_NEARLY_FULL = 16 << 20


class DiskFullError(OSError):
    """A file could not be written because its filesystem is full; the previous file, if any, is unchanged
    and no temporary file is left. ``errno`` is ``ENOSPC`` (or ``EDQUOT``), ``path`` the file."""

    def __init__(self, message: str, path: str = "", code: int = errno.ENOSPC) -> None:
        super().__init__(message)
        self.errno = code  # str() stays the message: strerror and filename are left unset
        self.path = path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: what ``open()`` would give a new file: 0666 less the umask (group-readable with the usual 022 or 002)
_FILE_MODE = 0o666 & ~_umask()


def _disk_full_error(path: str, code: int, free: int) -> DiskFullError:
    kept = "the previous version is unchanged" if os.path.exists(path) else "nothing was written"
    return DiskFullError(f"cannot write {path}: {os.strerror(code).lower()} ({_size(free)} free there); {kept}. "
                         f"Free space on that disk, or point the run at another one (--exp-name DIR, or the "
                         f"config's exp_name)", path, code)


def atomic_write(path: str, write: Callable[[IO[bytes]], Any]) -> str:
    """Call ``write(file)`` on a temporary file beside ``path``, flush it to disk, then rename it over
    ``path``: readers see the old file or the new one, never a part.

    Raises:
        DiskFullError: the filesystem of ``path`` is full (``path`` is left as it was).
    """
    def to_file(tmp: str) -> None:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())

    return atomic_write_path(path, to_file)


@contextlib.contextmanager
def atomic_file(path: str, prefix: str = ".tmp-") -> Iterator[str]:
    """A temporary file beside ``path`` (its name ends as ``path``'s does, its extension kept) for the block to
    write, flushed to disk and renamed over ``path`` when the block ends; however it ends otherwise (a full disk,
    Ctrl-C, an error), the temporary file is removed and ``path`` is left as it was. For a writer that opens the
    file itself and writes over time (a video, episode by episode).

    Raises:
        DiskFullError: the filesystem of ``path`` is full (``path`` is left as it was).
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix="-" + os.path.basename(path), dir=directory)
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp's 0600 would make run files private to their writer
        os.close(fd)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        full = _disk_full(err, directory) if isinstance(err, Exception) else None  # before the unlink frees space
        if os.path.exists(tmp):
            os.unlink(tmp)
        if full is not None:
            raise _disk_full_error(path, *full) from err
        raise


def atomic_write_path(path: str, write: Callable[[str], Any], prefix: str = ".tmp-") -> str:
    """``atomic_write`` for a writer that takes a path (an exporter that opens the file itself): ``write(tmp)``
    writes a temporary file beside ``path`` whose name ends as ``path``'s does (its extension kept), which is
    flushed to disk and renamed over ``path``; however the write ends (a full disk, Ctrl-C), no part of a file
    is left where ``path`` is. ``prefix``: the temporary file's name's start (torch's archive writer refuses a
    name that starts with a dot and has no extension).

    Raises:
        DiskFullError: the filesystem of ``path`` is full (``path`` is left as it was).
    """
    with atomic_file(path, prefix) as tmp:
        write(tmp)
    return path


def atomic_write_json(path: str, obj: Any) -> str:
    text = json.dumps(obj, indent=2, sort_keys=True, default=repr, allow_nan=True)
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def error_chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and every error behind it (``__cause__``, ``__context__``, a wrapper's ``orig``: SQLAlchemy's), each
    once: where a full disk hides under a library's own error."""
    seen, chain = set(), [err]
    while chain:
        e = chain.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        chain += [e.__cause__, e.__context__, getattr(e, "orig", None)]


def _disk_full(err: BaseException, directory: str) -> Optional[Tuple[int, int]]:
    """``(errno, free bytes)`` when ``err`` is a write that failed on a full filesystem, else None: an
    ``ENOSPC``/``EDQUOT`` anywhere in its chain, or a ``RuntimeError`` (a writer that reports no errno) or a
    broken pipe to a writer process while the filesystem has almost no space left."""
    for e in error_chain(err):
        if isinstance(e, OSError) and e.errno in _FULL:
            return e.errno, _free(directory)
    if isinstance(err, (RuntimeError, BrokenPipeError)):  # a writer process (ffmpeg) that died of it: its pipe
        free = _free(directory)
        if 0 <= free < _NEARLY_FULL:
            return errno.ENOSPC, free
    return None


def _free(directory: str) -> int:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return -1


def _size(n: float) -> str:
    if n < 0:
        return "unknown space"
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"
