"""Where the ranks meet before the process group forms: the rendezvous store (made here where baton's launcher
or the user's environment owns the rendezvous; torchrun's agent's, one prefix per restart), and the agreement on
the world size through it (nodes started with different ``--nproc`` fail at once, on every process, naming the
sizes). No collective is made here: they are ``engine.distributed``'s."""
from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Any

from .devices import local_world_size
from .rank_progress import DistributedError

__all__ = ["RendezvousError", "rendezvous_store", "reach_master", "elastic_store", "agree_on_world_size",
           "world_sizes_seen"]


class RendezvousError(DistributedError):
    """The ranks did not meet: the others never came within the timeout (not started, started for another
    layout, behind a master that does not resolve or cannot be reached), or they were started for different
    world sizes. Its message is one line naming the rank, the meeting point and what to check; ``baton`` prints
    it as such and exits with status 1 (the job's environment failed: one process cannot tell a peer that never
    started from a layout that promised it)."""


def rendezvous_store(init_method: str, rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    """The store the ranks meet through, made here where baton's launcher (or a user's environment) owns
    the rendezvous; None under torchrun, whose agent owns it (``TORCHELASTIC_RUN_ID``)."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return elastic_store(timeout) if init_method == "env://" else None
    if init_method == "env://":
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        if rank != 0:
            reach_master(host, port, rank, world_size, timeout.total_seconds())
        return dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    if init_method.startswith("file://"):
        return dist.FileStore(init_method[len("file://"):], world_size)
    return None


def reach_master(host: str, port: int, rank: int, world_size: int, timeout: float) -> None:
    """Wait until rank 0's store at ``host:port`` accepts a connection (a plain socket, closed at once), at most
    ``timeout`` seconds. torch's store client retries by itself, but logs each failed try with a C++ stack, so
    a master that never comes, or a host that does not resolve, would bury the one line that says so.

    Raises:
        RendezvousError: nothing accepted within ``timeout``, naming why (the name does not resolve, the
            connection was refused or timed out).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as err:
            why = f"the host name {host!r} does not resolve ({getattr(err, 'strerror', None) or err})"
        else:
            try:
                with socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                    return
            except OSError as err:
                why = f"nothing accepted a connection there ({err.strerror or type(err).__name__})"
        if time.monotonic() >= deadline:
            raise RendezvousError(f"rank {rank} of {world_size} could not reach rank 0 at {host}:{port} within "
                                  f"{timeout:.0f} s: {why}. Check that every rank was started, that MASTER_ADDR names "
                                  f"rank 0's node as this node resolves it, and that MASTER_PORT is free there and "
                                  f"the same for all ranks")
        time.sleep(0.2)


def elastic_store(timeout: datetime.timedelta) -> Any:
    """Under torchrun: its agent's store, with keys of this attempt of the worker group only. torch 2.13's
    agents keep one store across restarts of the group (the c10d rendezvous shares it with the workers) and
    env:// adds no prefix per attempt, so a restarted group read the first attempt's gloo addresses and
    never formed ("connectFullMesh failed ... Connection refused"); a prefix per
    ``TORCHELASTIC_RESTART_COUNT`` gives each attempt its own keys. None where the agent does not share
    its store: rank 0 then hosts a new one per attempt, through env://."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True):
        return None
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timeout)
    return dist.PrefixStore(f"/baton/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


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
            raise RendezvousError(f"rank {rank}: the processes were started for different world sizes "
                                   f"({', '.join(str(w) for w in sorted(sizes))}). Start every node with the same "
                                   f"--nproc (and --nnodes); this one was started for {world_size}")
        arrived = store.add(_ARRIVED_KEY, 0)
        if arrived >= world_size:
            return
        if time.monotonic() > deadline:
            raise RendezvousError(f"rank {rank} of {world_size}: only {arrived} of {world_size} processes arrived "
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
