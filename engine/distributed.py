"""The distributed runtime: process groups from any launcher, and the only module that calls
``torch.distributed`` (every collective on the backend's device: cuda for nccl, cpu for gloo).

Launchers set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``: ``torchrun --nproc_per_node=N script.py`` (one or many nodes), ``python -m
torch.distributed.launch --nproc_per_node=N script.py`` (which also appends ``--local-rank``), or
``engine.launch(fn, nprocs=N)`` (``engine.launcher``: all GPUs of a node, many nodes). ``DDPContext`` turns
that environment into a process group; the backend and each rank's device follow ``engine.devices``
(nccl and ``cuda:LOCAL_RANK`` when every local rank has its own GPU, gloo otherwise). Every collective has
a finite timeout (``BATON_DDP_TIMEOUT`` seconds, default 600), so a rank that dies or never arrives makes
the others fail with an error instead of hanging. Without a launcher it does nothing and the world size
is 1, so the same script runs alone.

Debugging a hang: set a short ``BATON_DDP_TIMEOUT``. (Not ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: with torch 2.13
and gloo it crashes DDP's constructor; see docs/distributed.md.)
"""
from __future__ import annotations

import datetime
import logging
import os
from typing import Any, List, Optional, Sequence

from .devices import local_world_size, rank_device, resolve_backend, visible_gpu_count

__all__ = ["DDPContext", "get_rank", "get_world_size", "get_local_rank", "is_main_process", "is_distributed",
           "allreduce_data", "all_gather_rows", "broadcast_object", "barrier", "DistributedError",
           "default_timeout", "launched_world_size"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0


class DistributedError(RuntimeError):
    """Rendezvous or collective failure, with the rank, world size and what to check."""


def default_timeout() -> float:
    return float(os.environ.get("BATON_DDP_TIMEOUT", DEFAULT_TIMEOUT_S))


def launched_world_size() -> int:
    """``WORLD_SIZE`` as set by a launcher (1 when there is none)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if is_distributed() else 1


def get_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main_process() -> bool:
    return get_rank() == 0


def allreduce_data(value: Any, op: str = "sum") -> Any:
    """Allreduce a number or tensor across ranks (``op``: sum, mean, min, max); identity in one process."""
    import torch
    import torch.distributed as dist

    if not is_distributed():
        return value
    ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
    if op not in ops:
        raise ValueError(f"allreduce op must be one of {sorted(ops)}, got {op!r}")
    is_tensor = isinstance(value, torch.Tensor)
    tensor = value.clone() if is_tensor else torch.tensor(value, dtype=torch.float64)
    tensor = tensor.to(_collective_device())
    dist.all_reduce(tensor, op=ops[op])
    if op == "mean":
        tensor = tensor / get_world_size()
    if is_tensor:
        return tensor.to(value.device)
    return tensor.item() if tensor.dim() == 0 else tensor.cpu().tolist()


def all_gather_rows(row: Sequence[float]) -> List[List[float]]:
    """Every rank's ``row`` of numbers, in rank order (one ``all_gather`` of a float64 tensor on the
    backend's device); ``[row]`` in one process. All ranks must pass rows of the same length."""
    import torch
    import torch.distributed as dist

    if not is_distributed():
        return [list(row)]
    tensor = torch.tensor(list(row), dtype=torch.float64, device=_collective_device())
    rows = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, tensor)
    return torch.stack(rows).cpu().tolist()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank (pickled); identity in one process."""
    import torch.distributed as dist

    if not is_distributed():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src, device=_collective_device())
    return holder[0]


def barrier() -> None:
    """Wait for every rank (under nccl on this rank's GPU, so nccl does not guess the device)."""
    import torch
    import torch.distributed as dist

    if not is_distributed():
        return
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def _collective_device() -> Any:
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


_WORLD_SIZES_KEY = "baton/world_sizes"


def _rendezvous_store(init_method: str, rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    """The store the ranks meet through, made here where baton's launcher (or a user's environment) owns
    the rendezvous; None under torchrun, whose agent owns it (``TORCHELASTIC_RUN_ID``)."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return None
    if init_method == "env://":
        return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                             is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    if init_method.startswith("file://"):
        return dist.FileStore(init_method[len("file://"):], world_size)
    return None


def _world_sizes_seen(store: Any) -> set:
    """The world sizes the processes that reached ``store`` were started for (empty when unknown)."""
    if store is None:
        return set()
    try:
        return {int(w) for w in store.get(_WORLD_SIZES_KEY).decode().split(",") if w}
    except Exception:  # the store itself is unreachable: nothing to add to the error
        return set()


class DDPContext:
    """Initialise the process group from the launcher's environment; destroy it on exit, also on error.

    Args:
        init_method: e.g. ``"file:///shared/path/rendezvous"`` for a shared-filesystem rendezvous (then
            ``RANK`` and ``WORLD_SIZE`` still come from the environment or the arguments); default
            ``env://`` (``MASTER_ADDR``/``MASTER_PORT``).
        backend: ``auto`` (default), ``nccl`` or ``gloo``; see ``engine.devices.resolve_backend``.
        cuda: whether the run's models live on CUDA; picks nccl under ``auto`` and gives ``device``.
        timeout: seconds for the rendezvous and for every collective (default ``BATON_DDP_TIMEOUT`` or 600).
        rank, world_size: override the environment.

    Attributes:
        device: this rank's device: ``cuda:LOCAL_RANK`` under nccl, a shared GPU under gloo with ``cuda``,
            else ``cpu`` (also in one process: ``cuda:0`` with ``cuda``).

    Examples:
        >>> with DDPContext() as ddp:      # no launcher: a no-op
        ...     ddp.world_size
        1
    """

    def __init__(self, init_method: Optional[str] = None, backend: str = "auto", cuda: bool = False,
                 timeout: Optional[float] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None) -> None:
        self.init_method = init_method
        self.backend = backend or "auto"
        self.cuda = cuda
        self.timeout = float(timeout if timeout is not None else default_timeout())
        self.rank = int(rank if rank is not None else os.environ.get("RANK", "0"))
        self.world_size = int(world_size if world_size is not None else launched_world_size())
        self.local_rank = get_local_rank()
        self.device = "cpu"
        self._owns_group = False

    def __enter__(self) -> "DDPContext":
        import torch
        import torch.distributed as dist

        gpus = visible_gpu_count() if self.cuda else 0
        if is_distributed():  # already set up (e.g. by engine.launch): join it
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self.backend = dist.get_backend()
            self.device = rank_device(self.backend, self.cuda, self.local_rank, gpus)
            return self
        if self.world_size <= 1 and self.init_method is None:
            self.device = rank_device("gloo", self.cuda, 0, gpus)
            return self
        # decided before any CUDA call: too many ranks for nccl is a clear error, not "invalid device ordinal"
        backend = resolve_backend(self.backend, self.cuda, local_world_size(), visible_gpu_count())
        if backend == "nccl":
            torch.cuda.set_device(self.local_rank)
        init_method = self.init_method or "env://"
        if init_method == "env://":
            missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
            if missing:
                raise DistributedError(f"rank {self.rank} of {self.world_size}: {', '.join(missing)} not set; "
                                       f"launch with torchrun or engine.launch, or pass init_method='file://...'")
        timeout = datetime.timedelta(seconds=self.timeout)
        store = None
        try:
            store = _rendezvous_store(init_method, self.rank, self.world_size, timeout)
            if store is not None:
                # each process says which world it was started for, so a failed join can name a mismatch
                store.append(_WORLD_SIZES_KEY, f"{self.world_size},")
                dist.init_process_group(backend=backend, store=store, rank=self.rank, world_size=self.world_size,
                                        timeout=timeout)
            else:
                dist.init_process_group(backend=backend, init_method=init_method, rank=self.rank,
                                        world_size=self.world_size, timeout=timeout)
        except Exception as err:
            where = (f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
                     if init_method == "env://" else init_method)
            sizes = _world_sizes_seen(store)
            if len(sizes) > 1:
                raise DistributedError(
                    f"rank {self.rank} could not join the process group at {where}: the processes were started "
                    f"for different world sizes ({', '.join(str(w) for w in sorted(sizes))}). Start every node with "
                    f"the same --nproc (and --nnodes); this one was started for {self.world_size}") from err
            raise DistributedError(f"rank {self.rank} of {self.world_size} could not join the process group at "
                                   f"{where} within {self.timeout:.0f} s ({type(err).__name__}: {err}). Check that "
                                   f"every rank was started, that the master is reachable from this node, and "
                                   f"that MASTER_PORT is free and the same on all nodes") from err
        self._owns_group = True
        self.backend = backend
        self.device = rank_device(backend, self.cuda, self.local_rank, visible_gpu_count() if self.cuda else 0)
        logger.info("rank %d/%d joined (local rank %d, %s, device %s)", self.rank, self.world_size, self.local_rank,
                    backend, self.device)
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        import torch.distributed as dist

        if self._owns_group and dist.is_initialized():
            try:
                if exc_type is None:
                    # nobody tears the group down while another rank still talks to it; on an error the
                    # others may never arrive, so there is no barrier then
                    barrier()
            finally:
                dist.destroy_process_group()
        self._owns_group = False
