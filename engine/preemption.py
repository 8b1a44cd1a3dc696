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
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from .params import Params, param
from .registry import CONFIG_SECTIONS

__all__ = ["PreemptParams", "PreemptionGuard", "Preempted", "signal_number", "DEFAULT_SIGNALS", "exit_code"]

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
    process exits with (``baton train``; a launcher whose ranks were preempted raises it too)."""

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
