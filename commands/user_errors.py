"""Errors in what the user gave (config, command line, run directory, checkpoint, dataset, disk) end a
command as one ``baton:`` line on stderr with exit status 2 (1 where the machine failed rather than the input: a
full disk, ``exit_status``), never a traceback; under ``--nproc``/``--gpus``
once for the job, not once per rank and not inside the launcher's report of a failed rank.

How the line gets out of a rank: ``reported_once`` (around ``engine.launch``) names a directory in the
environment the ranks start with (``BATON_ERROR_REPORTS``); a rank that stops on such an error writes its line
there instead of printing it and exits with status 2, and the launching process prints each distinct line
once. Under torchrun, or in one process, the line is printed where the error is caught.

A traceback is for bugs. To see one for a user error too (where in baton the input was refused), run with
``--debug`` or ``BATON_DEBUG=1`` in the environment (``--debug`` sets it, so the processes a run starts see
it): the traceback comes before the ``baton:`` line, and the exit status stays 2.

This module imports nothing heavy until ``USER_ERRORS`` is first read: the command line's own errors (a
config path that does not exist) use it without importing torch.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Iterator, List, NoReturn, Tuple

__all__ = ["USER_ERRORS", "USER_ERROR_EXIT", "ENVIRONMENT_EXIT", "exit_status", "DEBUG_ENV", "debugging", "exit_on_user_error",
           "print_user_error", "reported_once", "close_path_hint", "config_load_error"]

USER_ERROR_EXIT = 2
#: the exit status of a failure of the environment rather than of the input (a full disk under baton tune, ranks
#: that never met): one ``baton:`` line naming it, as for a user error
ENVIRONMENT_EXIT = 1
DEBUG_ENV = "BATON_DEBUG"
_REPORTS = "BATON_ERROR_REPORTS"


def _user_errors() -> Tuple[type, ...]:
    """The errors fixed in the input, not in the code; each message names what is wrong and the fix."""
    from data.action_masks import ActionMaskError
    from data.envs import UnknownEnvIdError
    from data.offline import DatasetError, EmptyShardError
    from data.parallel_envs import AgentSpaceError, EnvModuleError
    from engine.config import ConfigError
    from engine.devices import DeviceError
    from engine.fileio import DiskFullError
    from engine.registry import MissingExtraError, UnknownTypeError
    from engine.slurm import SlurmEnvError
    from middleware.checkpoint import CheckpointError
    from middleware.collector import NonFiniteDataError
    from policies.base import NonFiniteLossError, SpaceMismatchError

    from pipelines.run_dir import RunDirError

    from .algo_fit import AlgoEnvError

    return (ConfigError, UnknownTypeError, RunDirError, CheckpointError, DiskFullError, DatasetError,
            EmptyShardError, SpaceMismatchError, SlurmEnvError, UnknownEnvIdError, DeviceError,
            NonFiniteLossError,  # a loss a config value (a learning rate) made NaN: its message names the fix
            NonFiniteDataError,  # the user's env returned NaN: the message names the env, the step and what to check
            AlgoEnvError,
            AgentSpaceError, EnvModuleError,  # a multi-agent env that cannot be batched, or its module imported
            ActionMaskError,  # an env's legal-action mask that cannot be used: the env, the step and the fix
            MissingExtraError)  # the config's env, backend or dataset needs an extra not installed: it is named


def __getattr__(name: str) -> Any:  # USER_ERRORS on first use (PEP 562): its classes import torch
    if name == "USER_ERRORS":
        globals()[name] = errors = _user_errors()
        return errors
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def debugging() -> bool:
    """Whether user errors show their traceback too (``--debug``, ``BATON_DEBUG=1``)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def print_user_error(err: BaseException) -> None:
    """``err``'s ``baton:`` line on stderr, after its traceback when ``debugging()``."""
    if debugging():
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    print(f"baton: {err}", file=sys.stderr, flush=True)


def exit_status(err: BaseException) -> int:
    """The status a command ends with on ``err``, one of ``USER_ERRORS``: 1 (``ENVIRONMENT_EXIT``) where the
    machine failed rather than the input (a full disk: ``engine.fileio.DiskFullError``), else 2."""
    from engine.fileio import DiskFullError

    return ENVIRONMENT_EXIT if isinstance(err, DiskFullError) else USER_ERROR_EXIT


def exit_on_user_error(err: BaseException) -> NoReturn:
    """End this process on ``err``, one of ``USER_ERRORS``: its ``baton:`` line (printed here, or left for the
    process that launched this rank) and its ``exit_status``; its traceback first when ``debugging()``."""
    line = f"baton: {err}"
    if debugging():
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    reports = os.environ.get(_REPORTS)
    if reports and os.path.isdir(reports):
        path = os.path.join(reports, f"rank{os.environ.get('RANK', '0')}.json")
        with open(f"{path}.tmp", "w") as f:
            json.dump({"time": time.time(), "line": line, "status": exit_status(err)}, f)
        os.replace(f"{path}.tmp", path)  # whole or not at all: the launching process may be reading
    else:
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(exit_status(err))


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
        except Exception as err:
            from engine.distributed import DistributedError

            if not isinstance(err, DistributedError):
                raise
            lines, status = _lines(reports)
            if not lines:
                raise
            for line in lines:
                print(line, file=sys.stderr, flush=True)
            raise SystemExit(status) from None
        finally:
            if previous is None:
                os.environ.pop(_REPORTS, None)
            else:
                os.environ[_REPORTS] = previous


def _lines(reports: str) -> Tuple[List[str], int]:
    """The distinct lines the ranks reported, the first first, and the status to exit with (2 if any rank's
    input was wrong, else theirs)."""
    found = []
    for name in os.listdir(reports):
        if name.endswith(".json"):
            with open(os.path.join(reports, name)) as f:
                found.append(json.load(f))
    status = USER_ERROR_EXIT if any(r.get("status", USER_ERROR_EXIT) == USER_ERROR_EXIT for r in found) \
        else ENVIRONMENT_EXIT
    return list(dict.fromkeys(r["line"] for r in sorted(found, key=lambda r: r["time"]))), status


def close_path_hint(path: str) -> str:
    """``"; did you mean 'X'?"`` for a path that does not exist, where each missing part of it has one close
    name in its directory and the path so corrected is a file; ``""`` otherwise.

    Examples:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> open(os.path.join(root, "cartpole_dqn_config.py"), "w").close()
        >>> close_path_hint(os.path.join(root, "cartpole_dqn_cofig.py")).replace(root, "ROOT")
        "; did you mean 'ROOT/cartpole_dqn_config.py'?"
    """
    head, parts = path, []
    while head and not os.path.exists(head):
        head, tail = os.path.split(head)
        if not tail:
            break
        parts.append(tail)
    fixed = head
    for part in reversed(parts):
        try:
            names = os.listdir(fixed or ".")
        except OSError:
            return ""
        close = difflib.get_close_matches(part, names, n=1, cutoff=0.75)
        if not close:
            return ""
        fixed = os.path.join(fixed, close[0])
    return f"; did you mean {fixed!r}?" if parts and os.path.isfile(fixed) else ""


def config_load_error(path: str, err: BaseException) -> str:
    """One line for a config file whose own code failed as it ran (an import, a name): the file, the line
    in it, and the error."""
    here = os.path.realpath(path)
    lines = [frame.lineno for frame in traceback.extract_tb(err.__traceback__)
             if os.path.realpath(frame.filename) == here]
    where = f", line {lines[-1]}" if lines else ""
    return (f"config file {path}{where}: {type(err).__name__}: {err} (a config is a Python file defining "
            f"main_config and create_config; it is run to read them)")
