"""Where each rank of a data-parallel job is, so that a failed collective names the rank at fault, and the
errors of the distributed runtime (``engine.distributed`` re-exports them). No collective is made here: the
records go through the rendezvous store."""
from __future__ import annotations

import datetime
import json
import os
import threading
import time
from typing import Any, Callable, Dict, Optional

__all__ = ["DistributedError", "CollectiveMismatchError", "guard_enabled", "HEARTBEAT_S", "RankProgress",
           "fault_report", "PROGRESS", "mark_progress", "default_store", "read_progress"]

HEARTBEAT_S = 1.0


class DistributedError(RuntimeError):
    """Rendezvous or collective failure, with the rank, world size and what to check."""


class CollectiveMismatchError(DistributedError):
    """The ranks called different collectives (or with different shapes) at the same point."""


def guard_enabled() -> bool:
    """The collective guard and progress records are on unless ``BATON_DDP_GUARD=0``."""
    return os.environ.get("BATON_DDP_GUARD", "1") != "0"


class RankProgress:
    """Where this rank is, to tell which rank fell behind when a collective fails.

    Every rank advances ``position`` in lockstep with the others: at each of our collectives, each
    iteration start and each learner update (the ddp middleware marks the last two). Marking is two
    attribute writes; a daemon thread publishes the position, its label and the time to the rendezvous store
    every second, so a peer can read it even when this rank is stuck, and can tell from a stale time that
    its process is gone.

    Args:
        store: called when the heartbeat starts, the store to publish to (None: nothing is published).
    """

    def __init__(self, store: Callable[[], Any]) -> None:
        self._store = store
        self.position = 0
        self.label = "joining"
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def mark(self, label: str) -> int:
        self.position += 1
        self.label = label
        return self.position

    def start(self, rank: int) -> None:
        if self._thread is not None or not guard_enabled():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, args=(rank,), name="baton-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None

    def _beat(self, rank: int) -> None:
        store = self._store()
        while store is not None and not self._stop.is_set():
            try:
                store.set(f"baton/progress/{rank}", json.dumps({"position": self.position, "label": self.label,
                                                                 "time": time.time()}))
            except Exception:  # the store is gone (rank 0 ended): nothing left to report to
                return
            self._stop.wait(HEARTBEAT_S)


def fault_report(where: str, err: BaseException, rank: int, world: int, records: Dict[int, dict],
                 now: float) -> DistributedError:
    """The ``DistributedError`` of a collective that failed with ``err`` on ``rank``, naming the rank at fault
    from the ranks' progress ``records`` (``RankProgress``, read at ``now``): a rank whose heartbeat stopped
    (its process is gone) or that is behind the others (stuck, or skipped a collective)."""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if not records:
        return DistributedError(f"rank {rank} of {world}: {where} failed ({reason}). The other ranks' progress "
                                f"could not be read: rank 0, which holds the rendezvous store, may be the one gone")
    gone = [r for r in range(world) if r not in records or now - records[r]["time"] > 3 * HEARTBEAT_S + 2]
    alive = {r: rec for r, rec in records.items() if r not in gone}
    lowest = min((rec["position"] for rec in alive.values()), default=0)
    behind = [r for r, rec in alive.items() if rec["position"] == lowest] \
        if len({rec["position"] for rec in alive.values()}) > 1 else []
    where_each = "; ".join(f"rank {r} at '{rec['label']}' (step {rec['position']}, heard {now - rec['time']:.0f} s "
                           f"ago)" for r, rec in sorted(records.items()))
    if gone:
        blame = f"rank {', '.join(map(str, gone))} stopped responding (its process ended or was killed)"
    elif behind:
        blame = (f"rank {', '.join(map(str, behind))} fell behind (stuck, or it skipped a collective the others "
                 f"made)")
    else:
        blame = "every rank reached the same point; one of them failed inside it"
    error = DistributedError(f"rank {rank} of {world}: {where} failed ({reason}). At fault: {blame}. Where each "
                             f"rank was: {where_each}")
    error.at_fault = gone or behind  # the launcher's headline names them (engine.launcher)
    return error


def mark_progress(label: str) -> None:
    """Advance this rank's position (every rank must make the same marks in the same order)."""
    if guard_enabled():
        PROGRESS.mark(label)


def default_store() -> Any:
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # no group, or a torch without it: no progress records
        return None


def read_progress(world: int) -> Dict[int, dict]:
    store = default_store()
    records: Dict[int, dict] = {}
    if store is None:
        return records
    try:
        store.set_timeout(datetime.timedelta(seconds=5))
        for r in range(world):
            if store.check([f"baton/progress/{r}"]):
                records[r] = json.loads(store.get(f"baton/progress/{r}"))
    except Exception:  # rank 0, which serves the store, is gone
        pass
    return records


#: this process's progress, marked by every guarded collective and the ddp middleware
PROGRESS = RankProgress(default_store)
