"""Keeping acting copies of the model current, when collection or evaluation runs on another device than
the learner (``policy.device.collect`` / ``policy.device.eval``)."""
from __future__ import annotations

from typing import Callable

from engine.context import OnlineRLContext

__all__ = ["actor_refresher"]


def actor_refresher(refresh: Callable[[], None], every: int = 1) -> Callable[[OnlineRLContext], None]:
    """Middleware that calls ``refresh`` (e.g. ``policy.refresh_actors``, a copy of the learner's weights
    through host memory) once at least ``every`` iterations have passed since the last refresh and the
    learner has updated since. Put it after the learner: the next collection then acts with the new weights.
    """
    every = int(every)
    if every < 1:
        raise ValueError(f"policy.device.refresh_every must be >= 1, got {every}")
    last = {"step": -every, "train_iter": 0}

    def _actor_refresher(ctx: OnlineRLContext) -> None:
        if ctx.train_iter != last["train_iter"] and ctx.total_step - last["step"] >= every:
            refresh()
            last["step"], last["train_iter"] = ctx.total_step, ctx.train_iter

    return _actor_refresher
