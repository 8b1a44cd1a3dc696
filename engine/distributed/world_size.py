"""Before the process group forms, the processes agree on its size through the rendezvous store: nodes
started with different ``--nproc`` fail at once, on every process, naming the sizes, instead of each timing
out in the transport's own way. Nothing here calls ``torch.distributed``: the store is handed in."""
from __future__ import annotations

import time
from typing import Any

from ..devices import local_world_size
from .progress import DistributedError

__all__ = ["agree_on_world_size", "world_sizes_seen"]

_WORLD_SIZES_KEY = "baton/world_sizes"
_ARRIVED_KEY = "baton/arrived"


def agree_on_world_size(store: Any, rank: int, world_size: int, timeout: float) -> None:
    """Before joining, every process records the world size it was started for and waits until that many
    have arrived; another world size in the store (nodes started with different ``--nproc``) fails at once,
    on every process, naming the sizes, instead of each timing out in the transport's own way.

    Rank 0 hosts the store, so it waits (a few seconds at most) until every process that arrived has read
    the mismatch before it raises: leaving at once would close the store under the others, who would then
    report a broken pipe instead of the cause."""
    store.append(_WORLD_SIZES_KEY, f"{world_size},")
    store.add(_ARRIVED_KEY, 1)
    deadline = time.monotonic() + timeout
    while True:
        sizes = world_sizes_seen(store)
        if len(sizes) > 1:
            _tell_mismatch_read(store, rank)
            raise DistributedError(f"rank {rank}: the processes were started for different world sizes "
                                   f"({', '.join(str(w) for w in sorted(sizes))}). Start every node with the same "
                                   f"--nproc (and --nnodes); this one was started for {world_size}")
        arrived = store.add(_ARRIVED_KEY, 0)
        if arrived >= world_size:
            return
        if time.monotonic() > deadline:
            raise DistributedError(f"rank {rank} of {world_size}: only {arrived} of {world_size} processes arrived "
                                   f"within {timeout:.0f} s. Check that every node was started, with the same "
                                   f"--nnodes and --nproc, meeting at the same address or file")
        time.sleep(0.05)


_MISMATCH_READ_KEY = "baton/mismatch_read"
_MISMATCH_LINGER_S = 5.0


def _tell_mismatch_read(store: Any, rank: int) -> None:
    """Count this process among those that read the world-size mismatch; on rank 0 (the store's host),
    wait until all that arrived, and at least every process of its own node (started with it, maybe not
    arrived yet), have read it, so none of them loses the store before it can name the cause."""
    try:
        store.add(_MISMATCH_READ_KEY, 1)
        if rank != 0:
            return
        deadline = time.monotonic() + _MISMATCH_LINGER_S
        while time.monotonic() < deadline and (store.add(_MISMATCH_READ_KEY, 0)
                                               < max(store.add(_ARRIVED_KEY, 0), local_world_size())):
            time.sleep(0.05)
    except Exception:  # the store is gone already: the error raised next still names the sizes
        pass


def world_sizes_seen(store: Any) -> set:
    """The world sizes the processes that reached ``store`` were started for (empty when unknown)."""
    if store is None:
        return set()
    try:
        return {int(w) for w in store.get(_WORLD_SIZES_KEY).decode().split(",") if w}
    except Exception:  # the store itself is unreachable: nothing to add to the error
        return set()
