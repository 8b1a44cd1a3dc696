"""Where the time goes: seconds per middleware stage, measured by the task loop itself.

``Task.run(profile=StageProfile())`` reads ``time.perf_counter`` once after each middleware call, each
generator resumption and each ``renew``, and charges the time since the previous reading to the stage that
just ran. The readings form one unbroken chain, so

- a generator middleware is charged for its forward half (up to its ``yield``) and its backward half, never
  for the stages that run in between: nothing is counted twice;
- the shares add up to 1 exactly; what is not any stage's (``renew``, the loop's own bookkeeping) is the
  ``loop`` entry.

Without a profile the loop runs its unprofiled path and reads no clock. The pipeline turns it on with the
config key ``log.profile`` (``--profile``), prints ``table()`` at the end of a run, writes ``as_dict()`` to
``summary.json`` under ``profile`` and its shares to TensorBoard (``profile/<stage>_share``).

Examples:
    >>> from engine import Task, Context
    >>> from engine.profile import StageProfile
    >>> profile = StageProfile()
    >>> task = Task()
    >>> with task.start(ctx=Context()):
    ...     _ = task.use(lambda ctx: None, name="idle")
    ...     _ = task.run(max_step=3, profile=profile)
    >>> profile.iterations, profile.names
    (3, ['idle', 'loop'])
    >>> round(sum(profile.shares().values()), 9)
    1.0
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["StageProfile", "profile_table", "LOOP"]

#: The entry for time inside the loop that no stage spent (``renew``, bookkeeping).
LOOP = "loop"


class StageProfile:
    """Accumulated seconds per stage over the iterations of one or more ``Task.run`` calls.

    Attributes:
        names: stage names in pipeline order, then ``LOOP``; unique (a repeated name gets ``#2``, ``#3``).
        seconds: seconds per entry of ``names``, written in place by the loop (so readers such as the
            logger see the running totals without a copy).
        iterations: completed iterations.
    """

    def __init__(self) -> None:
        self.names: List[str] = []
        self.seconds: List[float] = []
        self.iterations = 0

    def start(self, stage_names: Sequence[str]) -> List[float]:
        """Called by ``Task.run`` before its first iteration: the list the loop adds seconds to.

        The same stages as before keep accumulating (a run continued by a second ``run`` call); other
        stages start from zero.
        """
        names = _unique(list(stage_names) + [LOOP])
        if names != self.names:
            self.names, self.seconds, self.iterations = names, [0.0] * len(names), 0
        return self.seconds

    def totals(self) -> Dict[str, float]:
        """Seconds per stage so far."""
        return dict(zip(self.names, self.seconds))

    def shares(self, since: Optional[Mapping[str, float]] = None) -> Dict[str, float]:
        """Each stage's fraction of the iteration time, since the start or since an earlier ``totals()``."""
        spent = {name: s - (since or {}).get(name, 0.0) for name, s in zip(self.names, self.seconds)}
        total = sum(spent.values())
        return {name: (s / total if total > 0 else 0.0) for name, s in spent.items()}

    def as_dict(self) -> Dict[str, Any]:
        """What ``summary.json`` keeps: iterations, total seconds, and seconds and share per stage."""
        return {"iterations": self.iterations, "iteration_s": sum(self.seconds), "seconds": self.totals(),
                "share": self.shares()}

    def table(self) -> str:
        """``profile_table(self.as_dict())``."""
        return profile_table(self.as_dict())


def profile_table(profile: Mapping[str, Any]) -> str:
    """A text table of a profile (``StageProfile.as_dict()``, or ``summary.json``'s ``profile``): largest
    share first, then the total and the time per iteration."""
    seconds: Mapping[str, float] = profile["seconds"]
    iterations = int(profile["iterations"])
    total = sum(seconds.values())
    width = max([len(name) for name in seconds] + [5])
    rows = [f"{'stage':<{width}}  {'seconds':>9}  {'share':>6}"]
    for name, s in sorted(seconds.items(), key=lambda item: -item[1]):
        rows.append(f"{name:<{width}}  {s:9.3f}  {s / total if total > 0 else 0.0:6.1%}")
    per_iter_ms = total / iterations * 1e3 if iterations else 0.0
    rows.append(f"{'total':<{width}}  {total:9.3f}  {1.0 if total > 0 else 0.0:6.1%}  "
                f"({iterations} iterations, {per_iter_ms:.3f} ms each)")
    return "\n".join(rows)


def _unique(names: List[str]) -> List[str]:
    """Names made distinct: the stages of a plain ``Task`` may share a name (two lambdas)."""
    seen: Dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out
