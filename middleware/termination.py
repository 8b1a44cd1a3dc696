"""Stopping by budget: env steps or train iterations."""
from __future__ import annotations

from typing import Callable, Optional

from engine.context import OnlineRLContext, StopReason

__all__ = ["termination_checker"]


def termination_checker(max_env_step: Optional[int] = None,
                        max_train_iter: Optional[int] = None) -> Callable[[OnlineRLContext], None]:
    """Middleware that finishes the task once ``ctx.env_step >= max_env_step`` or
    ``ctx.train_iter >= max_train_iter`` (``ctx.stop_reason`` says which)."""
    for name, value in (("max_env_step", max_env_step), ("max_train_iter", max_train_iter)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a non-negative int or None, got {value!r}")

    def _termination_checker(ctx: OnlineRLContext) -> None:
        if max_env_step is not None and ctx.env_step >= max_env_step:
            ctx.finish = True
            ctx.stop_reason = ctx.stop_reason or StopReason.MAX_ENV_STEP
        if max_train_iter is not None and ctx.train_iter >= max_train_iter:
            ctx.finish = True
            ctx.stop_reason = ctx.stop_reason or StopReason.MAX_TRAIN_ITER

    return _termination_checker
