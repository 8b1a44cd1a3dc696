"""``engine.launch``: run a function on every process of a data-parallel job, one node or many.

One node: ``launch(fn, nprocs=N)`` starts N processes and picks a free rendezvous port itself. The
processes fork from a server process that imported torch once (``forkserver``, where the platform has it;
``spawn`` elsewhere): each rank then starts without importing torch again, so a job's ranks cost one import
in all rather than one each (seconds per rank, more on a loaded machine), and a process that launches many
jobs (a sweep, a test suite) pays it once. As under ``spawn``, ``fn`` and its arguments are pickled, the
child runs in the caller's working directory with the caller's ``sys.path``, and it gets the caller's
environment as it is at the call (the server's own, from its start, is replaced).

Many nodes: run the same call on every node with ``nnodes``, this node's ``node_rank`` and where the nodes
meet, either ``master_addr``/``master_port`` (node 0's address, the same on every node) or
``rendezvous="file:///shared/path"`` (a new file name on a filesystem all nodes share).

Ranks are deterministic: the process with local rank ``l`` on node ``n`` is global rank
``n * nprocs + l`` of ``nnodes * nprocs``; global rank 0 (node 0, local rank 0) alone evaluates and writes
the model, checkpoints and logs. (torchrun with ``--rdzv-backend=c10d`` assigns node order by arrival and
ignores ``--node_rank``; docs/distributed.md gives the torchrun flags that keep it.)

If a process raises, the others on its node are stopped and a ``DistributedError`` names the rank that
failed first (the root cause: the others usually fail after it, on a broken connection) with its traceback.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Dict, Optional, Sequence

from .distributed import DDPContext, DistributedError, RendezvousError
from .preemption import DEFAULT_SIGNALS, Preempted, exit_code, signal_number, stop_taken

__all__ = ["launch", "check_rendezvous", "end_with"]

# imported once by the fork server, not by every rank: the imports every training process makes that cost
# seconds (torch, and torch._dynamo, which the optimizers import at their first step). Not DI-treetensor
# (0.1 s): its import warns, and data.batch imports it with that warning silenced
_PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "numpy", "gymnasium"]


def _start_method() -> str:
    """``forkserver`` where the platform has it (Linux, macOS), else ``spawn``. Never plain ``fork``: a
    forked copy of a process that has touched CUDA or started threads can hang or crash."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.set_forkserver_preload(_PRELOAD)  # read when the server starts, at this process's first launch
    return "forkserver"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_rendezvous(rendezvous: str) -> str:
    """A ``file://`` rendezvous whose directory exists and is writable, else a ``ValueError`` naming the
    path and the fix."""
    if not rendezvous.startswith("file://"):
        raise ValueError(f"--rendezvous {rendezvous!r}: give a file on a filesystem every node shares, as "
                         f"file:///shared/path/job-name (or use --master-addr/--master-port)")
    path = rendezvous[len("file://"):]
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(directory):
        raise ValueError(f"--rendezvous {rendezvous!r}: the directory {directory} does not exist; create it on "
                         f"the shared filesystem first")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"--rendezvous {rendezvous!r}: the directory {directory} is not writable by this user")
    return rendezvous


def _spawned(local_rank: int, fn: Callable[..., Any], args: Sequence[Any], nprocs: int, node_rank: int,
             nnodes: int, rendezvous: Optional[str], backend: str, cuda: bool, timeout: Optional[float],
             error_dir: str, environ: Dict[str, str], launcher_pid: int) -> None:
    # the caller's environment at the call, not the fork server's from its start (a second job in the same
    # process has its own MASTER_PORT; a user's OMP_NUM_THREADS or CUDA_VISIBLE_DEVICES may have changed)
    os.environ.clear()
    os.environ.update(environ)
    signal.signal(signal.SIGINT, _interrupt_once)
    end_with(launcher_pid)
    rank = node_rank * nprocs + local_rank
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(nnodes * nprocs),
                      LOCAL_WORLD_SIZE=str(nprocs), GROUP_RANK=str(node_rank))
    joined = False
    try:
        with DDPContext(init_method=rendezvous, backend=backend, cuda=cuda, timeout=timeout):
            joined = True
            try:
                fn(*args)
            except Preempted as err:  # stopped cleanly by a signal: the launcher exits with the same code
                _write_report(error_dir, rank, {"preempted": err.signal, "exit_code": err.exit_code})
                raise
            except KeyboardInterrupt:  # Ctrl-C: not a failure to report; the run wrote its checkpoint at finish
                raise
            except BaseException as err:
                # record when and how this rank failed, before leaving the group breaks the other ranks'
                # connections, so launch() can name the rank that failed first
                _write_report(error_dir, rank, {"traceback": traceback.format_exc(),
                                                "at_fault": list(getattr(err, "at_fault", ()) or ())})
                raise
    except RendezvousError as err:
        if not joined:  # the ranks never met: its one line is what the launcher raises
            _write_report(error_dir, rank, {"rendezvous": str(err)})
        raise


def _write_report(error_dir: str, rank: int, report: Dict[str, Any]) -> None:
    """``rank<r>.json`` in ``error_dir``, whole or not at all (written aside, then renamed): the launcher
    may read it while this rank is still writing, and a half-written report would hide the root cause."""
    path = os.path.join(error_dir, f"rank{rank}.json")
    with open(f"{path}.{os.getpid()}.tmp", "w") as f:
        json.dump({"rank": rank, "time": time.time(), **report}, f)
    os.replace(f"{path}.{os.getpid()}.tmp", path)


def end_with(pid: int) -> None:
    """End this process as a preemption ends it (SIGTERM: a running pipeline writes ``latest`` and exits) when
    the process ``pid`` that started it is gone, however it went (``kill -9`` included): a launcher's children
    never outlive it (the ranks of ``launch``, the trial processes of ``baton tune --jobs``)."""
    _parent_death_signal(signal.SIGTERM)
    _watch_launcher(pid)


def _watch_launcher(pid: int) -> None:
    """End this rank when the launcher that started it is gone, however it went (SIGKILL included): the
    rank sends itself SIGTERM, which the run takes as a preemption (``latest`` written, then exit). Its
    parent is the fork server, which outlives the launcher while ranks hold its pipe, so the parent's death
    (torch's PR_SET_PDEATHSIG) does not tell; the launcher's own pid does."""
    def watch() -> None:
        try:
            fd = os.pidfd_open(pid)  # readable once the process has ended (Linux 5.3+)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            select.select([fd], [], [])
            os.close(fd)
        else:
            while _alive(pid):
                time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="baton-launcher-watch", daemon=True).start()


def _parent_death_signal(signum: int) -> None:
    """The signal this rank gets when its parent (the fork server) dies: SIGTERM, the preemption path, in
    place of the SIGINT torch's process wrapper asks for. A cluster's SIGTERM to every process of a job
    ends the fork server at once; with SIGINT its ranks would be interrupted mid-iteration, racing the
    agreed stop their own SIGTERM starts. Linux only (prctl); elsewhere the launcher watch suffices."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signum), 0, 0, 0)  # 1: PR_SET_PDEATHSIG


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _interrupt_once(signum: int, frame: Any) -> None:
    """A rank's SIGINT handler: the first one interrupts the run; later ones (the launcher forwarding a Ctrl-C
    the terminal sent to every rank already, a second Ctrl-C) are ignored, so they do not cut short the
    checkpoint the run writes as it finishes. The launcher stops a rank that takes too long with SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _stop_interrupted(processes: Sequence[Any]) -> None:
    """Ctrl-C reached the launcher: pass it on to the ranks (a terminal's reached them too; a ``kill -INT``
    of the launcher alone did not) and wait while they write their checkpoints and end. A second Ctrl-C
    stops them at once (SIGTERM, then SIGKILL)."""
    alive = [p for p in processes if p.is_alive()]
    for p in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGINT)
    if not alive:
        return
    print(f"baton: interrupted; waiting for {len(alive)} rank{'s' if len(alive) != 1 else ''} to write "
          f"{'their' if len(alive) != 1 else 'its'} checkpoint and stop (Ctrl-C again to stop now)",
          file=sys.stderr, flush=True)
    try:
        for p in alive:
            p.join()
    except KeyboardInterrupt:
        for p in alive:
            if p.is_alive():
                p.terminate()
        for p in alive:
            p.join(5)
            if p.is_alive():
                p.kill()


def _reports(error_dir: str) -> list:
    """The ranks' reports (``_write_report``); files still being written are not among them."""
    reports = []
    for name in os.listdir(error_dir):
        if name.endswith(".json"):
            with open(os.path.join(error_dir, name)) as f:
                reports.append(json.load(f))
    return reports


def _root_cause(error_dir: str) -> Optional[dict]:
    failures = [r for r in _reports(error_dir) if "traceback" in r]
    return min(failures, key=lambda r: r["time"]) if failures else None


def _headline(first: dict, world: int) -> str:
    """Who failed first; when that rank's error blames others (it timed out waiting for a rank that fell
    behind or stopped), the blamed ranks lead."""
    blamed = [r for r in first.get("at_fault", []) if r != first["rank"]]
    if blamed:
        ranks = ", ".join(map(str, blamed))
        return (f"rank {ranks} of {world} stopped or fell behind (root cause, named by rank {first['rank']}, whose "
                f"collective failed on it first); the other ranks of this node were stopped. Rank "
                f"{first['rank']}'s traceback:\n{first['traceback']}")
    return (f"rank {first['rank']} of {world} failed first (root cause); the other ranks of this node were "
            f"stopped. Its traceback:\n{first['traceback']}")


class _SignalForwarder:
    """The launcher's handler of the preemption signals: pass the first one to every rank (each stops at an
    iteration boundary and writes ``latest``), remember it, and kill ranks still alive ``grace_s`` + 10 s
    later (their own deadline, ``preempt.grace_s``, should have ended them first)."""

    def __init__(self, signals: Sequence[str] = DEFAULT_SIGNALS, grace_s: float = 20.0) -> None:
        self.processes: Sequence[Any] = ()
        self.signum: Optional[int] = None
        self._signals = [signal_number(name) for name in signals]
        self._grace_s = grace_s
        self._previous: Dict[int, Any] = {}
        self._deadline: Optional[threading.Timer] = None

    def install(self) -> "_SignalForwarder":
        if threading.current_thread() is threading.main_thread():
            for number in self._signals:
                self._previous[number] = signal.signal(number, self._received)
        return self

    def started(self, processes: Sequence[Any]) -> None:
        """The ranks exist now: pass on a signal that came while they were being started."""
        self.processes = processes
        if self.signum is not None:
            signum, self.signum = self.signum, None
            self._received(signum, None)

    def uninstall(self) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
        if self._deadline is not None:
            self._deadline.cancel()

    def _received(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        stop_taken(signum)  # the command's own handler ignores later ones once this one is given back
        if not self.processes:  # still starting them: passed on by started()
            return
        alive = [p for p in self.processes if p.is_alive()]
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signum)
        print(f"baton: {signal.Signals(signum).name}: waiting for {len(alive)} rank{'s' if len(alive) != 1 else ''} "
              f"to write {'their' if len(alive) != 1 else 'its'} checkpoint and stop", file=sys.stderr, flush=True)
        if self._grace_s > 0:  # 0: the ranks have no deadline (preempt.grace_s), nor do they here
            self._deadline = threading.Timer(self._grace_s + 10.0, lambda: [p.kill() for p in alive if p.is_alive()])
            self._deadline.daemon = True
            self._deadline.start()


def _preempted(error_dir: str, forwarder: _SignalForwarder) -> Optional[Preempted]:
    """What to raise when the ranks stopped on a preemption signal (theirs, or the launcher's)."""
    stopped = [r for r in _reports(error_dir) if "preempted" in r]
    if stopped:
        return Preempted(stopped[0]["preempted"], stopped[0]["exit_code"])
    if forwarder.signum is not None:
        return Preempted(signal.Signals(forwarder.signum).name, exit_code(forwarder.signum))
    return None


def launch(fn: Callable[..., Any], nprocs: int, args: Sequence[Any] = (), *, backend: str = "auto",
           cuda: bool = False, timeout: Optional[float] = None, nnodes: int = 1, node_rank: int = 0,
           master_addr: Optional[str] = None, master_port: Optional[int] = None,
           rendezvous: Optional[str] = None, preempt_signals: Sequence[str] = DEFAULT_SIGNALS,
           preempt_grace_s: float = 20.0) -> None:
    """Run ``fn(*args)`` on ``nprocs`` processes of this node, each inside a ``DDPContext``.

    ``fn`` must be importable (a module-level function): it is pickled by name, as are ``args``.

    Args:
        nprocs: processes on this node (one per GPU for nccl).
        backend, cuda: as ``DDPContext`` (``auto`` picks nccl only for CUDA runs with a GPU per process).
        timeout: seconds for the rendezvous and every collective.
        nnodes, node_rank: the job's node count and this node's index (0 .. nnodes-1).
        master_addr, master_port: where the nodes meet (node 0's address); on one node, default
            127.0.0.1 and a free port.
        rendezvous: ``file:///shared/path`` instead of an address.
        preempt_signals, preempt_grace_s: the run's ``preempt`` settings: the signals passed on to the ranks
            (which stop cleanly on them), and the grace after which ranks still alive are killed (plus 10 s).

    Raises:
        ValueError: an impossible layout (node_rank >= nnodes, no meeting point for several nodes, a
            rendezvous file in a missing or read-only directory).
        DistributedError: a process failed; names the rank that failed first, with its traceback.
    """
    import torch.multiprocessing as mp

    if nprocs < 1 or nnodes < 1:
        raise ValueError(f"nprocs and nnodes must be >= 1, got nprocs={nprocs}, nnodes={nnodes}")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"--node-rank {node_rank} is not in 0..{nnodes - 1} (--nnodes {nnodes}): number the "
                         f"nodes 0 to nnodes-1, node 0 being the one at --master-addr")
    if rendezvous is not None:
        check_rendezvous(rendezvous)
    elif nnodes > 1 and (master_addr is None or master_port is None):
        raise ValueError(f"--nnodes {nnodes} needs where the nodes meet: --master-addr HOST0 --master-port PORT "
                         f"(node 0's address, the same on every node), or --rendezvous file:///shared/path")
    else:
        os.environ["MASTER_ADDR"] = master_addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(master_port or _free_port())
    world = nnodes * nprocs
    forwarder = _SignalForwarder(preempt_signals, preempt_grace_s).install()
    with tempfile.TemporaryDirectory(prefix="baton-launch-") as error_dir, contextlib.ExitStack() as cleanup:
        cleanup.callback(forwarder.uninstall)
        context = mp.start_processes(_spawned, args=(fn, tuple(args), nprocs, node_rank, nnodes, rendezvous, backend,
                                                     cuda, timeout, error_dir, dict(os.environ), os.getpid()),
                                     nprocs=nprocs, join=False, start_method=_start_method())
        forwarder.started(context.processes)
        try:
            while not context.join():
                pass
        except KeyboardInterrupt:
            _stop_interrupted(context.processes)
            raise
        except Exception as err:
            first = _root_cause(error_dir)
            met = [r for r in _reports(error_dir) if "rendezvous" in r]
            if first is None and met:  # a rank could not meet the others: its one line, no traceback
                raise RendezvousError(min(met, key=lambda r: r["time"])["rendezvous"]) from None
            preempted = _preempted(error_dir, forwarder) if first is None else None
            if preempted is not None:  # a rank ended by its own deadline after the signal: still a preemption
                raise preempted from None
            signal_name = getattr(err, "signal_name", None)
            if signal_name:  # killed: it could write no report, and it is what the others then failed on
                rank = node_rank * nprocs + err.error_index
                others = (f" Rank {first['rank']} reported, after it:\n{first['traceback']}" if first is not None
                          else "")
                raise DistributedError(f"rank {rank} of {world} was killed ({signal_name}) (root cause); the other "
                                       f"ranks of this node were stopped.{others}") from err
            if first is None:
                raise
            raise DistributedError(_headline(first, world)) from err
        preempted = _preempted(error_dir, forwarder)
        if preempted is not None:
            raise preempted
