"""Exploration schedules for epsilon-greedy collection, as functions of the env step.

A schedule of ``ctx.env_step`` (not of calls or wall time) means a resumed run continues it exactly
from its restored counter, and under DDP every rank uses the same global value.
"""
from __future__ import annotations

import math
from typing import Callable

from engine.context import OnlineRLContext

__all__ = ["epsilon_schedule", "eps_greedy_handler", "random_collect_handler"]


def epsilon_schedule(type: str, start: float, end: float, decay: int) -> Callable[[int], float]:
    """``exp``: ``end + (start - end) * exp(-step / decay)``; ``linear``: from start to end over decay steps.

    Examples:
        >>> f = epsilon_schedule("linear", 1.0, 0.1, 100)
        >>> f(0), round(f(50), 3), f(1000)
        (1.0, 0.55, 0.1)
    """
    if decay <= 0:
        raise ValueError(f"policy.other.eps.decay must be positive, got {decay}")
    if type == "exp":
        return lambda step: end + (start - end) * math.exp(-step / decay)
    if type == "linear":
        return lambda step: end + (start - end) * max(0.0, 1.0 - step / decay)
    raise ValueError(f"policy.other.eps.type must be 'exp' or 'linear', got {type!r}")


def eps_greedy_handler(schedule: Callable[[int], float]) -> Callable[[OnlineRLContext], None]:
    """Middleware that sets ``ctx.collect_kwargs['eps']`` to ``schedule(ctx.env_step)`` (see
    ``epsilon_schedule``)."""
    if not callable(schedule):
        raise TypeError(f"eps_greedy_handler wants a schedule, a function of the env step (e.g. "
                        f"epsilon_schedule('exp', 0.95, 0.05, 10000)), got {schedule!r}")

    def _eps_greedy(ctx: OnlineRLContext) -> None:
        ctx.collect_kwargs["eps"] = schedule(ctx.env_step)

    return _eps_greedy


def random_collect_handler(size: int) -> Callable[[OnlineRLContext], None]:
    """Middleware that sets ``ctx.collect_kwargs['random']`` while ``ctx.env_step`` is below ``size``
    (``policy.random_collect_size``): the collect policy then acts uniformly at random (warm-up data)."""
    size = int(size)

    def _random_collect(ctx: OnlineRLContext) -> None:
        ctx.collect_kwargs["random"] = ctx.env_step < size

    return _random_collect
