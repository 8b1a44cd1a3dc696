"""The preemption stage: a caught SIGTERM (or another ``preempt.signals`` signal) ends the run at an
iteration boundary, on every rank in the same iteration.

Registered first, before the ddp middleware: its forward half marks ``ctx.preempt`` when this process's
``PreemptionGuard`` caught a signal; the ddp middleware, in its backward half, agrees the field across ranks
(``Sync.MAX``: any rank signalled stops all); this stage's backward half, which runs after that agreement,
then finishes the run with ``StopReason.PREEMPTED``. Every rank ends the same iteration, so no collective is
left waiting, and the checkpoint stage writes ``latest`` at finish as for any other stop.
"""
from __future__ import annotations

from engine.context import Context, StopReason
from engine.preemption import PreemptionGuard

__all__ = ["PreemptionStop"]


class PreemptionStop:
    """See the module docstring. ``guard``: the process's installed ``PreemptionGuard``."""

    def __init__(self, guard: PreemptionGuard) -> None:
        self.guard = guard

    def __call__(self, ctx: Context):
        if self.guard.requested is not None:
            ctx.preempt = True
        yield
        if ctx.preempt and not ctx.finish:  # agreed across ranks by now
            ctx.finish = True
            ctx.stop_reason = StopReason.PREEMPTED
            if self.guard.requested is None:  # another rank was signalled: exit as if this one had been too
                self.guard.request(self.guard.default_signum)
