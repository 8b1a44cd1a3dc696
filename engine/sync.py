"""Cross-rank agreement, declared on the context field it applies to.

A field that must agree across the ranks of a data-parallel run says how, where it is declared::

    @dataclass
    class MyContext(OnlineRLContext):
        bonus_events: int = persistent(0, sync=Sync.SUM)     # a global counter

The ddp middleware reads these declarations (``SyncPlan``) and builds its one collective per iteration
from them; it knows no field by name. Rules:

- ``Sync.SUM``: what each rank added to the field during the iteration, summed over ranks and added to the
  value the ranks agreed on at its start. A counter of env steps is then global on every rank.
- ``Sync.MEAN`` / ``Sync.MIN`` / ``Sync.MAX``: the mean, minimum or maximum of the ranks' values (for
  bools, ``MIN`` is "all ranks" and ``MAX`` "any rank").
- ``Sync.RANK0``: rank 0's value, whatever its type (evaluation results, the stop flag and reason): what
  other ranks wrote is discarded. Sent only in iterations where rank 0 changed it.

Why on the field: the alternative, a positional vector in the ddp middleware filled from fields that other
middleware write, breaks silently whenever a field is added; here a user's own field is synchronised by
declaring it, and an unknown rule fails when the class is defined.
"""
from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["Sync", "SyncPlan", "SYNC_KEY", "DISTRIBUTED_DEFAULT_KEY"]

SYNC_KEY = "baton_sync"
DISTRIBUTED_DEFAULT_KEY = "baton_distributed_default"


class Sync(str, Enum):
    """How a context field agrees across ranks (see the module docstring)."""

    SUM = "sum"
    MEAN = "mean"
    MIN = "min"
    MAX = "max"
    RANK0 = "rank0"

    @classmethod
    def parse(cls, rule: Any, field_name: str = "") -> "Sync":
        """``rule`` as a ``Sync`` member (its value string is accepted too).

        Raises:
            ValueError: naming the field, the rule and the valid rules.
        """
        try:
            return cls(rule)
        except ValueError:
            valid = ", ".join(f"Sync.{m.name}" for m in cls)
            where = f"context field {field_name!r}: " if field_name else ""
            raise ValueError(f"{where}unknown sync rule {rule!r}; valid rules: {valid}") from None


_NUMERIC = (Sync.SUM, Sync.MEAN, Sync.MIN, Sync.MAX)


class SyncPlan:
    """The declared fields of one context class, and how to pack and unpack them.

    One iteration under DDP: ``begin(ctx)`` at the start (records what the ranks agreed on), then, at the
    end, ``pack(ctx, rank)`` gives this rank's row of numbers, the rows of all ranks are gathered (one
    collective), and ``unpack(ctx, rows, rank)`` writes the agreed values. If ``rank0_changed(rows)``,
    rank 0's ``rank0_values(ctx)`` are broadcast first and passed to ``unpack``.

    Examples:
        >>> from engine.context import OnlineRLContext
        >>> plan = SyncPlan(OnlineRLContext)
        >>> ctx = OnlineRLContext(); plan.begin(ctx); ctx.env_step += 3
        >>> rows = [plan.pack(ctx, 0), [5.0] + plan.pack(ctx, 1)[1:]]   # rank 1 collected 5 steps
        >>> plan.unpack(ctx, rows, rank=0); ctx.env_step
        8
    """

    def __init__(self, ctx_cls: type) -> None:
        fields = dataclasses.fields(ctx_cls)
        declared = [(f.name, f.metadata[SYNC_KEY]) for f in fields if f.metadata.get(SYNC_KEY) is not None]
        self.numeric: List[Tuple[str, Sync]] = [(n, r) for n, r in declared if r in _NUMERIC]
        self.rank0: List[str] = [n for n, r in declared if r is Sync.RANK0]
        self.distributed_defaults: Dict[str, Any] = {
            f.name: f.metadata[DISTRIBUTED_DEFAULT_KEY] for f in fields if DISTRIBUTED_DEFAULT_KEY in f.metadata}
        self._start: Dict[str, Any] = {}

    @property
    def width(self) -> int:
        """Numbers per rank in the collective: one per numeric field, plus rank 0's "changed" flag."""
        return len(self.numeric) + 1

    def begin(self, ctx: Any) -> None:
        """Record the agreed values at the start of an iteration."""
        self._start = {name: getattr(ctx, name) for name, _ in self.numeric}
        self._start.update({name: getattr(ctx, name) for name in self.rank0})

    def pack(self, ctx: Any, rank: int) -> List[float]:
        row = []
        for name, rule in self.numeric:
            value = _number(ctx, name, rule)
            if rule is Sync.SUM:
                value -= _number_of(self._start[name], name, rule)
            row.append(float(value))
        row.append(float(rank == 0 and self._rank0_changed(ctx)))
        return row

    def rank0_changed(self, rows: Sequence[Sequence[float]]) -> bool:
        return bool(rows[0][-1])

    def rank0_values(self, ctx: Any) -> Dict[str, Any]:
        return {name: getattr(ctx, name) for name in self.rank0}

    def unpack(self, ctx: Any, rows: Sequence[Sequence[float]], rank: int,
               rank0_values: Optional[Dict[str, Any]] = None) -> None:
        """Write the agreed values into ``ctx``; ``rows[r]`` is rank r's ``pack``."""
        world = len(rows)
        for i, (name, rule) in enumerate(self.numeric):
            column = [row[i] for row in rows]
            if rule is Sync.SUM:
                agreed = _number_of(self._start[name], name, rule) + sum(column)
            elif rule is Sync.MEAN:
                agreed = sum(column) / world
            elif rule is Sync.MIN:
                agreed = min(column)
            else:
                agreed = max(column)
            setattr(ctx, name, _like(getattr(ctx, name), agreed))
        if rank != 0:
            for name in self.rank0:
                setattr(ctx, name, rank0_values[name] if rank0_values is not None else self._start[name])

    def _rank0_changed(self, ctx: Any) -> bool:
        for name in self.rank0:
            before, now = self._start[name], getattr(ctx, name)
            if now is before:
                continue
            try:
                if not bool(now == before):
                    return True
            except Exception:  # values without a truthy == (tensors, arrays): treat as changed
                return True
        return False


def _number_of(value: Any, name: str, rule: Sync) -> float:
    if value is None:
        return 0.0
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise TypeError(f"context field {name!r} is declared sync={rule.name} but holds {type(value).__name__} "
                    f"{value!r}; numeric rules need a bool, int or float (use Sync.RANK0 for other values)")


def _number(ctx: Any, name: str, rule: Sync) -> float:
    return _number_of(getattr(ctx, name), name, rule)


def _like(current: Any, agreed: float) -> Any:
    """``agreed`` in the type the field holds (bools stay bools, ints ints)."""
    if isinstance(current, bool):
        return bool(agreed)
    if isinstance(current, int):
        return int(round(agreed))
    return float(agreed)
