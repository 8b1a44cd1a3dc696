"""Where a run writes: one directory per run, never another run's.

- ``exp_name`` given explicitly (``--exp-name``, ``build_pipeline(exp_name=...)``): exactly that directory.
- Otherwise the config's ``exp_name`` with the seed, ``<exp_name>_seed<seed>``, and when that already holds
  a run, the first free ``<exp_name>_seed<seed>_<n>`` (n = 2, 3, ...): running the same config twice
  keeps both runs.

A directory that already holds files is refused unless the run ``resume``\\ s it (continue) or ``force``\\ s
it (start over: the old directory is first moved aside to ``<dir>.old-<timestamp>``, nothing is deleted).
``resume`` without an explicit name continues the newest run of that config and seed (the highest n).

One writer per run: the process that writes a run holds an exclusive ``fcntl.flock`` on ``<dir>/.lock``
for the run's whole life (``claim_run_dir``, which chooses the directory and locks it in one step; the
pipelines release it when they close). The file names the holder (pid, host, start time, as JSON). A second
process given that run (``resume``, ``force``, the same explicit name) is refused with a ``RunDirError``
that names the holder. The kernel drops the lock when its holder dies, however it dies (``kill -9``
included): a lock is never stale. Processes forked from the holder (env workers, a background evaluator)
close their copy, so they never keep it. On NFS the lock is shared with the server (Linux maps ``flock`` to
NFS locks), so it excludes other hosts too, and a crashed host's lock ends with its lease; filesystems
whose locks are per host only (some network and FUSE filesystems) exclude processes of this host alone.

Nothing is left by a run that never ran. The pipelines claim the directory only once the run's inputs are
checked (config compiled, envs and policy built), and a new run's directory that holds nothing but what its
start wrote (``config.json``, empty directories) when its lock is released is removed: a start that failed
after the claim, and a pipeline built but closed without ``run()`` (``close()``, ``with``, or the process's
normal exit), leave no directory, and the next run of the config takes the unnumbered name. A run that
ran keeps its directory, however it ended (``summary.json`` is written at its finish).
"""
from __future__ import annotations

import atexit
import datetime
import errno
import fcntl
import json
import logging
import os
import re
import socket
import time
import weakref
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Union

__all__ = ["RunDirError", "RunLock", "RunClaim", "LOCK_NAME", "START_FILES", "claim_run_dir", "resolve_run_dir",
           "default_run_name", "check_same_task"]

logger = logging.getLogger(__name__)

LOCK_NAME = ".lock"
#: what a start writes before the run runs: a new run's directory holding nothing else never ran
START_FILES = frozenset({"config.json"})


class RunDirError(ValueError):
    """The run directory cannot be used as asked; the message names it and the options that would."""


def default_run_name(exp_name: str, seed: int) -> str:
    """``<exp_name>_seed<seed>``, unless the name already ends in that (configs written as ``x_seed0``)."""
    suffix = f"_seed{seed}"
    stem = re.sub(r"_seed\d+$", "", exp_name.rstrip("/\\"))
    return stem + suffix


class RunLock:
    """The exclusive lock of a run directory, ``<dir>/.lock``, held from ``acquire`` until ``release``
    (or the holder's death). ``holder``: what the lock file says (pid, host, started). ``fresh``: the
    directory held no run when it was claimed (``claim_run_dir`` of a new run): released holding nothing
    but ``START_FILES`` and empty directories, the run never ran, and they are removed."""

    def __init__(self, directory: str, fd: Optional[int], holder: Dict[str, Any], created: bool) -> None:
        self.directory, self.holder = directory, holder
        self._fd, self._created = fd, created
        self.fresh = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    @classmethod
    def acquire(cls, directory: str) -> "RunLock":
        """Lock ``directory`` (created if missing) for this process.

        Raises:
            RunDirError: another process holds it; the message names it and what to do.
        """
        created = not os.path.isdir(directory)
        path = os.path.join(directory, LOCK_NAME)
        for _ in range(100):  # the file opened can be unlinked or moved aside before it is locked: reopen
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as err:  # not writable, a file in the way, a read-only filesystem
                raise RunDirError(_cannot_create(directory, err.strerror or str(err))) from None
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:  # the directory was removed by a holder releasing it: make it again
                continue
            except OSError as err:
                raise RunDirError(_cannot_create(directory, err.strerror or str(err))) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunDirError(_refusal(directory, _read_holder(path))) from None
                logger.warning("cannot lock %s (%s): this filesystem has no locks, so nothing stops a second "
                               "process from writing this run at the same time", path, err)
                return cls(directory, None, {}, created)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:  # locked a file no longer at the path (released and unlinked, or moved aside)
                os.close(fd)
                continue
            holder = {"pid": os.getpid(), "host": socket.gethostname(),
                      "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(holder).encode())
            os.fsync(fd)  # readable from other hosts of a network filesystem
            lock = cls(directory, fd, holder, created)
            _HELD.add(lock)
            return lock
        raise RunDirError(f"could not lock {path}: it kept changing under this process (another process "
                          f"claiming and releasing {directory} at the same time?): run again")

    def moved_to(self, directory: str) -> None:
        """The locked directory was renamed to ``directory`` (``force`` moving a run aside)."""
        self.directory, self._created = directory, False

    def release(self) -> None:
        """Give the lock up and remove the lock file (and the directory, when the lock made it and it is
        empty); a ``fresh`` run that never ran first loses what its start wrote. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _HELD.discard(self)
        path = os.path.join(self.directory, LOCK_NAME)
        if self.fresh:
            _remove_if_never_ran(self.directory)
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                os.unlink(path)  # while still locked: whoever opened it before retries (acquire's check)
            if self._created:
                os.rmdir(self.directory)
        except OSError:  # moved, or the run wrote files: leave them
            pass
        finally:
            os.close(fd)  # the lock goes with the last descriptor

    def __del__(self) -> None:  # a pipeline dropped without close(): its lock ends with it
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"RunLock({self.directory!r}, {'held' if self.held else 'released'})"


class RunClaim(NamedTuple):
    """A run directory and the lock this process holds on it (``claim_run_dir``); ``resumed``: the run
    continues what the directory holds (``resume``, or ``resume="auto"`` that found a run)."""
    path: str
    lock: RunLock
    resumed: bool = False


_HELD: "weakref.WeakSet[RunLock]" = weakref.WeakSet()  # this process's locks, for _close_in_child


def _close_in_child() -> None:
    """In a process forked from a holder: close the inherited descriptors (the lock stays with the parent)
    and forget them, so the lock ends when the holder ends, not when its last child does."""
    for lock in list(_HELD):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)


@atexit.register
def _release_at_exit() -> None:
    """A pipeline built and never run nor closed: its lock released as ``close()`` would (a run that ran
    released its lock when it ended)."""
    for lock in list(_HELD):
        lock.release()


def _remove_if_never_ran(directory: str) -> None:
    """Remove ``START_FILES`` and the empty directories of ``directory`` when it holds nothing else (the lock
    file aside): a run that never ran. Anything else in it (a checkpoint, ``summary.json``) keeps it all."""
    if _ran(directory):
        return
    walk = list(os.walk(directory, topdown=False))
    try:
        for top, dirs, _ in walk:
            for name in dirs:
                os.rmdir(os.path.join(top, name))
        for name in START_FILES:
            if os.path.isfile(os.path.join(directory, name)):
                os.unlink(os.path.join(directory, name))
    except OSError as err:  # written to meanwhile, or not ours to remove: leave it
        logger.debug("left %s as it is: %s", directory, err)


def _cannot_create(directory: str, why: str) -> str:
    return f"cannot write the run directory {directory}: {why}; give --exp-name a directory you can write"


def _read_holder(path: str) -> Dict[str, Any]:
    """What the lock file says; the holder writes it just after taking the lock, so wait a moment for it."""
    deadline = time.monotonic() + 1.0
    while True:
        try:
            with open(path) as file:
                holder = json.loads(file.read() or "null")
            if isinstance(holder, dict):
                return holder
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.05)


def _refusal(directory: str, holder: Dict[str, Any]) -> str:
    pid, host, started = holder.get("pid", "?"), holder.get("host"), holder.get("started", "an unknown time")
    lock_file = os.path.join(directory, LOCK_NAME)
    here = socket.gethostname()
    if holder.get("pid") == os.getpid() and host == here:
        return (f"{directory} is being written by this process (pid {pid}, since {started}): a pipeline built "
                f"on it is still open; run or close() it first")
    head = f"{directory} is being written by another process: pid {pid} on host {host or '?'}, since {started}"
    if host is None or host == here:
        return (f"{head}; wait for it to end, or stop it (kill {pid}), then run again (its lock, {lock_file}, "
                f"ends with it)")
    return (f"{head}; the lock is held from host {host}: wait for that run to end, or stop it on {host}. If "
            f"{host} is gone, the lock is released when its filesystem lease or its process ends; delete "
            f"{lock_file} only if you are sure no process on {host} still writes this run")


def claim_run_dir(exp_name: str, seed: int, *, explicit: bool, resume: Union[bool, str] = False,
                  force: bool = False) -> RunClaim:
    """The directory this run writes to, chosen as ``resolve_run_dir`` chooses it, and locked by this
    process in the same step: no other process can claim it between the choice and the lock.

    A new run takes the first free name whose lock it gets (two runs of a config started at once get two
    directories); ``force`` locks the old run before moving it aside (a run another process writes is not
    moved) and then the new directory. Release the lock with ``claim.lock.release()`` when the run ends.

    ``resume="auto"`` (``--resume auto``: requeued jobs, restarted worker groups) continues the run when
    there is one (the explicit directory holds one; else the newest of the config and seed) and starts one
    otherwise.

    Raises:
        RunDirError: as ``resolve_run_dir``; and when another process holds the run (the message names it).
    """
    if resume and force:
        raise RunDirError("--resume continues a run and --force starts it over: give one of them")
    if resume == "auto":  # a directory a start left before its run ran (killed while building) is no run
        resume = _ran(exp_name) if explicit else any(_ran(d) for d in _numbered(default_run_name(exp_name, seed)))
    if explicit:
        return _claim(exp_name, resume, force)
    base = default_run_name(exp_name, seed)
    if resume:
        runs = [d for d in _numbered(base) if _ran(d)] or [d for d in _numbered(base) if _holds_files(d)]
        if not runs:
            raise RunDirError(f"--resume: no run to continue at {base} (nor {base}_<n>): start without --resume, "
                              f"or give the run's directory with --exp-name")
        return _claim(runs[-1], resume, force)
    if force:
        return _claim(base, resume, force)
    for _ in range(100):  # another run of this config may take a free name first: then the next one
        for candidate in _numbered(base, include_free=True):
            if _ran(candidate):
                continue
            try:
                lock = RunLock.acquire(candidate)
            except RunDirError:  # a run starting there now
                continue
            _remove_if_never_ran(candidate)  # what a start killed before its run ran left (ours now: locked)
            if not _holds_files(candidate):
                lock.fresh = True
                return RunClaim(candidate, lock)
            lock.release()  # it wrote a run and ended between the check and the lock
    raise RunDirError(f"no free run directory {base}_<n> could be locked: other runs of this config keep taking "
                      f"them; give one with --exp-name")


def resolve_run_dir(exp_name: str, seed: int, *, explicit: bool, resume: bool = False,
                    force: bool = False) -> str:
    """The directory this run writes to, after the checks above (``force`` has moved an old run aside).
    Only checks that no process holds it: a process that writes the run claims it (``claim_run_dir``).

    Args:
        exp_name: the explicit directory (``explicit``) or the config's base name.
        seed: the run's base seed, part of the default name.
        explicit: whether the user named the directory (then it is used as given).
        resume: continue the run in the directory (it must hold one).
        force: start over in the directory, moving what it holds aside first.

    Raises:
        RunDirError: ``resume`` and ``force`` together; ``resume`` with no run to continue; an explicit
            directory that holds a run and neither option.
    """
    claim = claim_run_dir(exp_name, seed, explicit=explicit, resume=resume, force=force)
    claim.lock.release()
    return claim.path


def _claim(path: str, resume: bool, force: bool) -> RunClaim:
    """Lock ``path`` and check it against ``resume`` / ``force`` (moving a run aside for ``force``)."""
    if resume and not _holds_files(path):  # checked before the lock, which would make the directory
        raise RunDirError(f"--resume: no run to continue at {path}: start without --resume, or give the run's "
                          f"directory with --exp-name")
    lock = RunLock.acquire(path)
    if not resume:
        _remove_if_never_ran(path)  # a start killed before its run ran left config.json: no run to protect
    if resume or not _holds_files(path):
        lock.fresh = not resume
        return RunClaim(path, lock, resumed=bool(resume))
    if not force:
        lock.release()
        raise RunDirError(f"{path} already holds a run ({', '.join(_entries(path)[:4])}): --resume to continue "
                          f"it, --force to start over (it is moved aside first), or another --exp-name")
    aside = _aside_name(path)
    try:
        os.replace(path, aside)  # with its lock: nobody claims the old run meanwhile
        lock.moved_to(aside)
        claim = RunClaim(path, RunLock.acquire(path))
        claim.lock.fresh = True
    finally:
        lock.release()
    print(f"baton: moved the earlier run {path} aside to {aside}", flush=True)
    return claim


def _entries(path: str) -> List[str]:
    """What ``path`` holds, its lock file left out."""
    return sorted(name for name in os.listdir(path) if name != LOCK_NAME) if os.path.isdir(path) else []


def _holds_files(path: str) -> bool:
    return bool(_entries(path))


def _ran(path: str) -> bool:
    """Whether ``path`` holds a run that ran: anything beyond ``START_FILES``, the lock and empty folders."""
    return any(name for top, _, files in os.walk(path)
               for name in files if not (top == path and (name in START_FILES or name == LOCK_NAME)))


def _numbered(base: str, include_free: bool = False) -> List[str]:
    """``base`` and its existing ``base_<n>`` siblings in order; with ``include_free``, then the next free one."""
    parent, name = os.path.split(base)
    pattern = re.compile(re.escape(name) + r"_(\d+)$")
    numbers = sorted(int(m.group(1)) for entry in (os.listdir(parent or ".") if os.path.isdir(parent or ".") else [])
                     if (m := pattern.match(entry)) and int(m.group(1)) >= 2)
    runs = [base] + [f"{base}_{n}" for n in numbers]
    if include_free:
        runs.append(f"{base}_{(numbers[-1] if numbers else 1) + 1}")
    return runs


def _aside_name(path: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = f"{path.rstrip('/')}.old-{stamp}", 2
    while os.path.exists(candidate):
        candidate, n = f"{path.rstrip('/')}.old-{stamp}-{n}", n + 1
    return candidate



def check_same_task(path: str, cfg: Mapping[str, Any]) -> None:
    """Refuse to continue a run of another algorithm or env: the run's own ``config.json`` names them.
    Other keys may change across a resume (a longer budget, a new learning rate).

    Raises:
        RunDirError: naming the run's policy and env, and this config's.
    """
    try:
        with open(os.path.join(path, "config.json")) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return  # a run killed before it wrote its config: nothing to compare
    def task(c: Mapping[str, Any]) -> tuple:
        env, policy = c.get("env") or {}, c.get("policy") or {}
        return policy.get("type"), env.get("type"), env.get("env_id")
    if task(saved) != task(cfg):
        ran, asked = task(saved), task(cfg)
        raise RunDirError(f"{path} holds a run of policy {ran[0]!r} on env {ran[2] or ran[1]!r}; this config is "
                          f"policy {asked[0]!r} on env {asked[2] or asked[1]!r}. Continue it with its own config "
                          f"({os.path.join(path, 'config.json')} says which), or give this run another --exp-name")
