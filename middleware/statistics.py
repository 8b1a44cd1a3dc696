"""Merging statistics a policy gathers while it collects (``policy.obs_norm``'s running observation moments)
at one fixed point of each iteration."""
from __future__ import annotations

from typing import Callable

from engine.context import OnlineRLContext

__all__ = ["statistics_merger"]


def statistics_merger(merge: Callable[[], None]) -> Callable[[OnlineRLContext], None]:
    """Middleware that calls ``merge`` (e.g. ``policy.merge_statistics``) once every iteration, on every rank:
    under DDP ``merge`` is a collective, so no rank may skip it. Put it after the learner: what was collected
    and learned from in one iteration used the same statistics, and the next collection uses the merged ones.
    """

    def _statistics_merger(ctx: OnlineRLContext) -> None:
        merge()

    return _statistics_merger
