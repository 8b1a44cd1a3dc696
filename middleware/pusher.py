"""Moving collected data into a replay buffer."""
from __future__ import annotations

from typing import Any, Callable, Mapping

__all__ = ["data_pusher"]


def data_pusher(cfg: Mapping[str, Any], buffer: Any) -> Callable[[Any], None]:
    """Middleware that pushes ``ctx.trajectories`` (one batch) into ``buffer``. It does not clear the
    field: later middleware (loggers, user code) may still read it this iteration."""

    def _data_pusher(ctx: Any) -> None:
        if ctx.trajectories is not None:
            buffer.push(ctx.trajectories)

    return _data_pusher
