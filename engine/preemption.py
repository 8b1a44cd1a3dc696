"""Preemption: the signals a cluster sends before it kills a job, turned into a clean stop.

Slurm (a time limit, ``scancel``, preemption) and Kubernetes (eviction, a spot node reclaimed) send SIGTERM
and, a grace period later, SIGKILL; Slurm's ``--signal=USR1@N`` sends SIGUSR1 N seconds ahead of a time
limit. A ``PreemptionGuard`` catches those signals in a training process and only records them: the run's
``preemption`` stage (``middleware.preemption``) reads the record at the start of each iteration, the ddp
middleware agrees it across ranks, and every rank ends the same iteration, writes ``latest`` and exits with
``128 + the signal's number`` (SIGTERM 143, SIGUSR1 138), as a process killed by the signal would report.

A process that has not ended ``grace_s`` seconds after the first signal (a peer that died mid-collective, an
env step that never returns) is ended then by the guard's watchdog with the same code; the last finished
checkpoint stays, since checkpoints are written to a temporary file and renamed. Later signals are ignored:
the first one already set the stop and the deadline.

A guard covers a run's iterations only. Around a whole command (``baton train``, ``baton tune``) ``stop_signals``
covers the rest: a signal before the first iteration (the run being built) or between runs stops the command
where it is (``Preempted``, raised as Ctrl-C raises ``KeyboardInterrupt``), and once a stop was taken, by a
guard or there, later signals are ignored until the process has exited, so the shutdown the first one started
finishes and its exit code stands.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence

from .params import Params, param
from .registry import CONFIG_SECTIONS

__all__ = ["PreemptParams", "PreemptionGuard", "Preempted", "signal_number", "DEFAULT_SIGNALS", "exit_code",
           "StopSignals", "stop_signals", "stop_taken"]

DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1")


@dataclass
class PreemptParams(Params):
    """The config's ``preempt`` section: a cluster's stop signal ends the run cleanly (docs/distributed.md)."""

    signals: List[str] = param(list(DEFAULT_SIGNALS))
    """The signals that end the iteration, write ``latest`` and exit with 128 + the signal's number."""
    grace_s: float = param(20.0, rule="not_negative")
    """A process still running this long after the signal exits then; 0: never."""


CONFIG_SECTIONS.register("preempt", PreemptParams)


class Preempted(KeyboardInterrupt):
    """A preemption signal stopped the run cleanly (``latest`` written). A ``KeyboardInterrupt``, so a script
    or a sweep stops as it would on Ctrl-C. ``signal``: its name; ``exit_code``: 128 + its number, what the
    process exits with (``baton train``; a launcher whose ranks were preempted raises it too). ``outside_run``:
    None, or where the process was when ``stop_signals`` raised it with no run iterating (``"before the run's
    first iteration"``, ``"after the run's last iteration"``), for the command's line."""

    outside_run: Optional[str] = None

    def __init__(self, signal_name: str, code: int) -> None:
        super().__init__(f"run preempted by {signal_name}")
        self.signal = signal_name
        self.exit_code = code


def signal_number(name: str) -> int:
    """The number of a signal named like ``SIGTERM`` (or ``TERM``).

    Raises:
        ValueError: a name this platform has no signal for, naming the ones preemption takes.
    """
    full = name if str(name).upper().startswith("SIG") else f"SIG{name}"
    number = getattr(signal, str(full).upper(), None)
    if not isinstance(number, signal.Signals) or number in (signal.SIGKILL, getattr(signal, "SIGSTOP", None)):
        raise ValueError(f"preempt.signals: {name!r} is not a signal a process can catch here; use signal names "
                         f"such as {', '.join(DEFAULT_SIGNALS)}")
    return int(number)


def exit_code(signum: int) -> int:
    """The exit status of a run stopped by ``signum``: 128 + its number, the shell's convention."""
    return 128 + int(signum)


class PreemptionGuard:
    """Records the first of ``signals`` a process receives and arms the exit deadline.

    Install it in the main thread (``install``); ``requested`` is then the signal's name once one came. Only
    the main thread may set signal handlers, so a pipeline run from another thread has no guard (a warning
    says so) and keeps the default action: the signal ends it.

    Args:
        signals: signal names (``preempt.signals``).
        grace_s: seconds from the first signal to the forced exit (``preempt.grace_s``); 0: no deadline.
        describe: who this process is, for the line printed at a forced exit (``"rank 1 of 2"``).
    """

    def __init__(self, signals: Sequence[str] = DEFAULT_SIGNALS, grace_s: float = 20.0, describe: str = "") -> None:
        self.signals = [signal.Signals(signal_number(s)).name for s in signals]
        self._numbers = [signal_number(s) for s in signals]
        self.default_signum = self._numbers[0] if self._numbers else int(signal.SIGTERM)
        if grace_s < 0:
            raise ValueError(f"preempt.grace_s must be >= 0 (0: no deadline), got {grace_s}")
        self.grace_s = float(grace_s)
        self.describe = describe
        self.requested: Optional[str] = None
        self.signum: Optional[int] = None
        self.received_at: Optional[float] = None
        self._previous: Dict[int, Any] = {}
        self._deadline: Optional[threading.Timer] = None

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> bool:
        """Catch the signals; returns False where it cannot (not the main thread)."""
        if self._previous or not self._numbers:
            return bool(self._previous)
        if threading.current_thread() is not threading.main_thread():
            return False
        for number in self._numbers:
            self._previous[number] = signal.signal(number, self._received)
        if _scope is not None:
            _scope.runs_started += 1
        return True

    def uninstall(self) -> None:
        """Give the signals back to their previous handlers, then cancel the deadline (the run ended; in this
        order, so a signal in between cannot arm a deadline that nothing cancels)."""
        for number, previous in self._previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def request(self, signum: int) -> None:
        """What a caught signal does (also for a stop decided without one: ``signum`` names the exit code)."""
        if self.requested is not None:
            return
        stop_taken(signum)
        self.signum = int(signum)
        self.requested = signal.Signals(signum).name
        self.received_at = time.monotonic()
        if self.grace_s > 0:
            self._deadline = threading.Timer(self.grace_s, self._expire)
            self._deadline.daemon = True
            self._deadline.start()

    def _received(self, signum: int, frame: Any) -> None:
        self.request(signum)

    def _expire(self) -> None:
        who = f"{self.describe}: " if self.describe else ""
        code = exit_code(self.signum or signal.SIGTERM)
        sys.stderr.write(f"baton: {who}still running {self.grace_s:g} s after {self.requested} (preempt.grace_s); "
                         f"exiting now with code {code}. The last finished checkpoint stays; continue with "
                         f"--resume\n")
        sys.stderr.flush()
        os._exit(code)


def _numbers(signals: Sequence[str]) -> List[int]:
    """The numbers of ``signals``; a name that is no signal here is left out (the run's config check names it)."""
    found = []
    for name in signals:
        try:
            found.append(signal_number(name))
        except ValueError:
            pass
    return found


def _ignore(signum: int, frame: Any) -> None:
    """A stop is under way: a later signal changes nothing (its first one's exit code stands)."""


def _ignore_from_now(numbers: Sequence[int]) -> None:
    """At exit: the interpreter's finalisation gives signals with a Python handler their default action back
    (which would end the process with the signal's status, not its exit code); ignored ones stay ignored. Only
    here, at exit, since children started before it would inherit an ignored signal."""
    for number in numbers:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(number, signal.SIG_IGN)


class StopSignals:
    """A command's handler of the preemption signals, around all it does (``stop_signals``); a run's guard takes
    them while the run iterates, this everywhere else.

    - No stop taken yet (a run being built, between the trials of a study, a launcher starting its ranks): the
      first signal raises ``Preempted`` where the process is (``outside_run`` says where), as Ctrl-C raises
      ``KeyboardInterrupt``; what was opened is closed on the way out and the command exits with 128 + its
      number after one line.
    - A stop taken (by this scope, a run's guard, a launcher passing it on: ``stop_taken``): later signals are
      ignored, also after the scope, until the process exits; the shutdown the first one started finishes (the
      envs closed, the process group left, the final lines printed) and the first one's exit code stands.

    Attributes:
        signum: the first signal taken in the scope, or None.
        runs_started: runs whose guard was installed in the scope (0: none began iterating yet).
    """

    def __init__(self, signals: Sequence[str] = DEFAULT_SIGNALS) -> None:
        self.signum: Optional[int] = None
        self.runs_started = 0
        self._numbers = _numbers(signals)
        self._previous: Dict[int, Any] = {}

    def cover(self, signals: Sequence[str]) -> None:
        """Take ``signals`` from now on (the run's ``preempt.signals``, once its config is read); the others go
        back to what they did before the scope."""
        wanted = _numbers(signals)
        for number in [n for n in self._previous if n not in wanted]:
            previous = self._previous.pop(number)
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        self._numbers = wanted
        self._install()

    def _install(self) -> None:
        for number in self._numbers:
            if number not in self._previous:
                self._previous[number] = signal.signal(number, self._received)

    def _restore(self) -> None:
        for number, previous in self._previous.items():
            if self.signum is not None:  # the process is ending on a signal: keep the later ones from ending it
                signal.signal(number, _ignore)
            else:
                signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        if self.signum is not None and self._previous:
            atexit.register(_ignore_from_now, list(self._previous))
        self._previous = {}

    def _received(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            return
        self.signum = int(signum)
        err = Preempted(signal.Signals(signum).name, exit_code(signum))
        err.outside_run = "after the run's last iteration" if self.runs_started else "before the run's first iteration"
        raise err


_scope: Optional[StopSignals] = None


def stop_taken(signum: int) -> None:
    """Tell the command's ``StopSignals`` (if any) that a stop on ``signum`` is under way (a run's guard took
    it, a launcher passed it on): later signals are then ignored."""
    if _scope is not None and _scope.signum is None:
        _scope.signum = int(signum)


@contextlib.contextmanager
def stop_signals(signals: Sequence[str] = DEFAULT_SIGNALS) -> Iterator[Optional[StopSignals]]:
    """A ``StopSignals`` scope over ``signals`` for the ``with`` block (the main thread only; elsewhere it yields
    None and changes nothing). Inside one already, it yields that one, now covering ``signals``."""
    global _scope
    if _scope is not None:
        _scope.cover(signals)
        yield _scope
        return
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    scope = _scope = StopSignals(signals)
    try:
        scope._install()
        yield scope
    finally:
        _scope = None
        scope._restore()
