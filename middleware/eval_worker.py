"""A child process that runs evaluations for the trainer: it builds and owns the evaluator's envs and a copy
of the policy, and runs one job at a time (weights, seed, episodes) sent over a pipe.

Why a process, not a thread: CPython's GIL. A thread stepping CartPole beside the learner ran both at half
speed (2-core box: 300 updates 0.9 s alone, 2.6 s beside it), so nothing was gained; a process stepping the
same envs slowed training by a third while evaluating at three quarters of its solo speed (BENCHMARKS.md).

Messages over one duplex pipe::

    child  -> parent   ("ready", num_envs)            once built; or ("error", traceback) if building failed
    parent -> child    (weights, seed, n_episode)     one job; None: exit
    child  -> parent   ("done", episodes, seconds)    or ("cancelled", None, seconds), ("error", traceback, seconds)

Cancelling sets a shared event that the child checks between env steps (``evaluate_episodes``'s
``should_stop``). The child ignores SIGINT, SIGTERM and SIGUSR1 (Ctrl-C and a job's preemption signal reach
every process: the parent decides), uses one torch thread (it acts on a handful of observations), and closes
its envs when it exits. It is a daemon: it cannot outlive a parent that exits, and ``close`` kills it when it
does not end in time.

It runs at a lower scheduling priority (``NICENESS``): on a free core it evaluates at full speed, and where
cores are short (other jobs, DDP ranks on every core) training keeps its share and the evaluation takes what
is left, coming in later instead of slowing the run down.

How it starts (``start_method``): by default ``fork`` on Linux, as PyTorch's DataLoader workers do: it
starts at once, with nothing to import or pickle (spawning re-imports torch: seconds, more on a loaded
machine). The child touches nothing of the parent's but what ``build`` makes, and runs torch on one
thread, which is what makes forking a torch process safe. ``spawn`` elsewhere, and where the child acts on
a GPU (CUDA cannot be used in a forked child): ``build`` must then pickle, and a script that trains must
keep its entry point under ``if __name__ == "__main__":`` (the child re-imports it).
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Dict, Optional, Tuple

from data.env_loop import EnvLoop
from engine.preemption import DEFAULT_SIGNALS
from engine.protocols import EvalPolicy, VectorEnv

from .evaluator import EvaluationCancelled, evaluate_episodes

__all__ = ["EvalWorker", "EvalReply", "WorkerSide", "BackgroundEvaluationError", "NICENESS"]

logger = logging.getLogger(__name__)

#: Builds, inside the child, what it evaluates with: ``(eval policy, load(weights), envs)``. Sent to the
#: child by pickling (a module-level function or a picklable object; not a lambda).
WorkerSide = Callable[[], Tuple[EvalPolicy, Callable[[Any], None], VectorEnv]]

#: added to the evaluation process's niceness (0 to 19; 10: about a tenth of a core beside a busy process)
NICENESS = 10

_GUARD_HINT = ("(a script that trains with background evaluation must keep its entry point under "
               "`if __name__ == \"__main__\":`, since the evaluation process re-imports it)")


class BackgroundEvaluationError(RuntimeError):
    """The evaluation process failed, could not start, or exited; the message says which and why."""


class _State(Enum):
    NEW = "new"
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    CLOSED = "closed"


@dataclass
class EvalReply:
    """The end of one job: ``episodes`` (``evaluate_episodes``'s result) when ``cancelled`` is False."""

    episodes: Optional[Dict[str, Any]]
    cancelled: bool
    seconds: float


def _serve(conn: Any, cancel: Any, build: WorkerSide, niceness: int, parent_end: Any = None) -> None:
    """The child: build, say ready, then run jobs until told to exit or the parent is gone.

    ``parent_end``: the parent's end of the pipe, closed here first. A forked child holds a copy of it, and while
    any process holds that end ``conn.recv()`` never sees EOF: a trainer killed outright (``kill -9``, the OOM
    killer) left its evaluation process asleep for good, its signals ignored, a few hundred MB each."""
    if parent_end is not None:
        parent_end.close()
    for name in ("SIGINT", *DEFAULT_SIGNALS):  # the parent decides: Ctrl-C and a job's preemption signal
        signal.signal(getattr(signal, name), signal.SIG_IGN)  # reach every process, the parent ends this one
    if niceness and hasattr(os, "nice"):
        os.nice(niceness)
    import torch

    torch.set_num_threads(1)
    try:
        policy, load, env = build()
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    try:
        loop = EnvLoop(policy, env)
        conn.send(("ready", loop.num_envs))
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if job is None:
                return
            weights, seed, n_episode = job
            start = time.perf_counter()
            try:
                load(weights)
                episodes = evaluate_episodes(loop, n_episode, seed, should_stop=cancel.is_set)
                conn.send(("done", episodes, time.perf_counter() - start))
            except EvaluationCancelled:
                conn.send(("cancelled", None, time.perf_counter() - start))
            except Exception:
                conn.send(("error", traceback.format_exc(), time.perf_counter() - start))
    finally:
        env.close()


class EvalWorker:
    """The parent's handle on the evaluation process (see the module docstring).

    ``start()`` starts it (it builds in the background); ``poll()`` returns a finished job's reply, waiting
    at most its ``timeout`` (default: not at all); ``submit`` sends a job once ``idle``; ``cancel`` and
    ``close`` are bounded too.

    Args:
        build: what the child evaluates with (``WorkerSide``).
        start_method: ``"fork"`` or ``"spawn"``; None: fork on Linux, else spawn (the module docstring).
        niceness: added to the process's niceness (None: ``NICENESS``; 0: the trainer's priority).
    """

    def __init__(self, build: WorkerSide, start_method: Optional[str] = None, niceness: Optional[int] = None) -> None:
        if start_method not in (None, "fork", "spawn"):
            raise ValueError(f"start_method must be 'fork', 'spawn' or None, got {start_method!r}")
        self._build = build
        self._niceness = NICENESS if niceness is None else int(niceness)
        self.start_method = start_method or ("fork" if sys.platform.startswith("linux") else "spawn")
        self._state = _State.NEW
        self._process: Any = None
        self._conn: Any = None
        self._cancel: Any = None
        self.num_envs = 0

    @property
    def idle(self) -> bool:
        """Built, and no job running: ``submit`` may send one."""
        return self._state is _State.IDLE

    @property
    def busy(self) -> bool:
        return self._state is _State.BUSY

    @property
    def starting(self) -> bool:
        """Started and still building its policy and envs."""
        return self._state is _State.STARTING

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    def start(self) -> None:
        """Start the process, once.

        Raises:
            BackgroundEvaluationError: the process could not be started (``build`` does not pickle, or this
                process is a daemon, which may have no children).
        """
        if self._state is not _State.NEW:
            return
        context = multiprocessing.get_context(self.start_method)
        parent_conn, child_conn = context.Pipe()
        self._cancel = context.Event()
        process = context.Process(target=_serve, args=(child_conn, self._cancel, self._build, self._niceness,
                                                       parent_conn), daemon=True, name="baton-eval")
        try:
            process.start()
        except Exception as err:
            parent_conn.close()
            child_conn.close()
            raise BackgroundEvaluationError(f"could not start the evaluation process ({self.start_method}: "
                                            f"{err!r}); under spawn its build function must pickle (a "
                                            f"module-level function, not a lambda), and a daemonic process "
                                            f"cannot start one") from err
        child_conn.close()  # the child holds its own end: its exit is then EOF here
        self._process, self._conn, self._state = process, parent_conn, _State.STARTING

    def poll(self, timeout: float = 0.0) -> Optional[EvalReply]:
        """The reply of the running job if it has ended (waiting at most ``timeout`` s), else None; also
        takes the child's "ready" while it starts.

        Raises:
            BackgroundEvaluationError: the child failed to build, a job raised, or the child exited.
        """
        if self._state not in (_State.STARTING, _State.BUSY):
            return None
        deadline = time.monotonic() + timeout
        while True:
            if not self._conn.poll(max(0.0, deadline - time.monotonic())):
                return None
            message = self._receive()
            if message[0] == "ready":
                self.num_envs, self._state = int(message[1]), _State.IDLE
                return None
            if message[0] == "error":
                where = "building its policy and envs" if self._state is _State.STARTING else "an evaluation"
                self._state = _State.IDLE if self._state is _State.BUSY else self._state
                raise BackgroundEvaluationError(f"the evaluation process failed in {where}:\n{message[1]}")
            self._state = _State.IDLE
            return EvalReply(message[1], message[0] == "cancelled", float(message[2]))

    def submit(self, weights: Any, seed: int, n_episode: int) -> None:
        """Send a job: run ``n_episode`` episodes with ``weights`` from ``seed``.

        Raises:
            RuntimeError: the worker is not idle (one job at a time).
        """
        if self._state is not _State.IDLE:
            raise RuntimeError(f"the evaluation process is {self._state.value}: one evaluation at a time")
        self._cancel.clear()
        self._conn.send((weights, seed, n_episode))
        self._state = _State.BUSY

    def cancel(self, timeout: float) -> bool:
        """Stop the running job (within one env step) and wait at most ``timeout`` s for it; True when it
        ended (or none ran)."""
        if self._state is not _State.BUSY:
            return True
        self._cancel.set()
        try:
            self.poll(timeout)
        except BackgroundEvaluationError as err:  # it failed meanwhile: ended anyway
            logger.warning("%s", err)
        return self._state is not _State.BUSY

    def close(self, timeout: float = 5.0) -> None:
        """End the process: asked to exit when idle, otherwise (building, or a job that did not stop)
        terminated; joined at most ``timeout`` s, then killed. Idempotent."""
        process, self._process = self._process, None
        state, self._state = self._state, _State.CLOSED
        if process is None:
            return
        if state is _State.IDLE:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            process.join(timeout)
        if process.is_alive():  # it ignores SIGTERM (a job's preemption signal is its parent's to act on)
            process.kill()
            process.join(timeout)
        self._conn.close()

    def _receive(self) -> Tuple[Any, ...]:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._process.join(1.0)
            code = self._process.exitcode
            was = self._state
            self.close()
            hint = f" {_GUARD_HINT}" if was is _State.STARTING and self.start_method == "spawn" else ""
            raise BackgroundEvaluationError(f"the evaluation process exited while "
                                            f"{'starting' if was is _State.STARTING else 'evaluating'} (exit code "
                                            f"{code}){hint}") from None
