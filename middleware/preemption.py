"""The preemption stage: a caught SIGTERM (or another ``preempt.signals`` signal) ends the run at an
iteration boundary, on every rank in the same iteration.

Registered first, before the ddp middleware: its forward half marks ``ctx.preempt`` when this process's
``PreemptionGuard`` caught a signal; the ddp middleware, in its backward half, agrees the field across ranks
(``Sync.MAX``: any rank signalled stops all); this stage's backward half, which runs after that agreement,
then finishes the run with ``StopReason.PREEMPTED``. Every rank ends the same iteration, so no collective is
left waiting, and the checkpoint stage writes ``latest`` at finish as for any other stop.
"""
from __future__ import annotations

import logging

from engine.context import Context, StopReason
from engine.preemption import PreemptionGuard

__all__ = ["PreemptionStop"]

logger = logging.getLogger(__name__)


class PreemptionStop:
    """See the module docstring. ``guard``: the process's ``PreemptionGuard``, installed at this stage's
    first call (a pipeline built and never run changes no signal handler); whoever built the stage
    uninstalls it when the run ends (the standard pipelines: when they close)."""

    def __init__(self, guard: PreemptionGuard) -> None:
        self.guard = guard
        self._armed = False

    def __call__(self, ctx: Context):
        if not self._armed:
            self._armed = True
            if not self.guard.install() and self.guard.signals:
                logger.warning("not in the main thread: %s will end this run without a checkpoint (catching "
                               "signals needs the main thread)", ", ".join(self.guard.signals))
        if self.guard.requested is not None:
            ctx.preempt = True
        yield
        if ctx.preempt and not ctx.finish:  # agreed across ranks by now
            ctx.finish = True
            ctx.stop_reason = StopReason.PREEMPTED
            if self.guard.requested is None:  # another rank was signalled: exit as if this one had been too
                self.guard.request(self.guard.default_signum)
