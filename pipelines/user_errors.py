"""Errors in what the user gave (config, command line, run directory, checkpoint, dataset, disk) end a
command as one ``baton:`` line on stderr with exit status 2, never a traceback; under ``--nproc``/``--gpus``
once for the job, not once per rank and not inside the launcher's report of a failed rank.

How the line gets out of a rank: ``reported_once`` (around ``engine.launch``) names a directory in the
environment the ranks start with (``BATON_ERROR_REPORTS``); a rank that stops on such an error writes its line
there instead of printing it and exits with status 2, and the launching process prints each distinct line
once. Under torchrun, or in one process, the line is printed where the error is caught.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from typing import Iterator, List, NoReturn

from data.offline import DatasetError, EmptyShardError
from engine.config import ConfigError
from engine.distributed import DistributedError
from engine.fileio import DiskFullError
from engine.registry import UnknownTypeError
from engine.slurm import SlurmEnvError
from middleware.checkpoint import CheckpointError
from policies.base import SpaceMismatchError

from .run_dir import RunDirError

__all__ = ["USER_ERRORS", "USER_ERROR_EXIT", "exit_on_user_error", "reported_once"]

#: the errors fixed in the input, not in the code; each message names what is wrong and the fix
USER_ERRORS = (ConfigError, UnknownTypeError, RunDirError, CheckpointError, DiskFullError, DatasetError,
               EmptyShardError, SpaceMismatchError, SlurmEnvError)
USER_ERROR_EXIT = 2
_REPORTS = "BATON_ERROR_REPORTS"


def exit_on_user_error(err: BaseException) -> NoReturn:
    """End this process on ``err``, one of ``USER_ERRORS``: its ``baton:`` line (printed here, or left for the
    process that launched this rank) and exit status 2."""
    line = f"baton: {err}"
    reports = os.environ.get(_REPORTS)
    if reports and os.path.isdir(reports):
        path = os.path.join(reports, f"rank{os.environ.get('RANK', '0')}.json")
        with open(f"{path}.tmp", "w") as f:
            json.dump({"time": time.time(), "line": line}, f)
        os.replace(f"{path}.tmp", path)  # whole or not at all: the launching process may be reading
    else:
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(USER_ERROR_EXIT)


@contextlib.contextmanager
def reported_once() -> Iterator[None]:
    """Around ``engine.launch``: when ranks stopped on user errors, print each distinct line once (the first
    reported first) and exit with status 2, in place of the launcher's ``DistributedError`` and the
    traceback of a rank's ``SystemExit: 2``. Any other failure passes on unchanged."""
    previous = os.environ.get(_REPORTS)
    with tempfile.TemporaryDirectory(prefix="baton-errors-") as reports:
        os.environ[_REPORTS] = reports  # the ranks start with the launcher's environment at the call
        try:
            yield
        except DistributedError:
            lines = _lines(reports)
            if not lines:
                raise
            for line in lines:
                print(line, file=sys.stderr, flush=True)
            raise SystemExit(USER_ERROR_EXIT) from None
        finally:
            if previous is None:
                os.environ.pop(_REPORTS, None)
            else:
                os.environ[_REPORTS] = previous


def _lines(reports: str) -> List[str]:
    found = []
    for name in os.listdir(reports):
        if name.endswith(".json"):
            with open(os.path.join(reports, name)) as f:
                found.append(json.load(f))
    return list(dict.fromkeys(r["line"] for r in sorted(found, key=lambda r: r["time"])))
