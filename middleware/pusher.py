"""Moving collected data into a replay buffer."""
from __future__ import annotations

from typing import Callable

from engine.context import OnlineRLContext
from engine.protocols import ReplayBuffer, require

__all__ = ["data_pusher"]


def data_pusher(buffer: ReplayBuffer) -> Callable[[OnlineRLContext], None]:
    """Middleware that pushes ``ctx.trajectories`` (one batch) into ``buffer``. It does not clear the
    field: later middleware (loggers, user code) may still read it this iteration."""
    require(buffer, ReplayBuffer, "data_pusher's buffer")

    def _data_pusher(ctx: OnlineRLContext) -> None:
        if ctx.trajectories is not None:
            buffer.push(ctx.trajectories)

    return _data_pusher
