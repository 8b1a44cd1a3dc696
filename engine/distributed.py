"""The distributed runtime: process groups from any launcher, and the only module that makes a collective
(every collective on the backend's device: cuda for nccl, cpu for gloo). Beside it, touching no collective:
``engine.rendezvous`` (the store the ranks meet through, the agreed world size), ``engine.rank_progress`` (where
each rank is, the rank at fault; the runtime's errors), ``engine.comm_hooks`` (gradient compression).

Launchers set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``: ``torchrun --nproc_per_node=N script.py`` (one or many nodes), ``python -m
torch.distributed.launch --nproc_per_node=N script.py`` (which also appends ``--local-rank``), or
``engine.launch(fn, nprocs=N)`` (``engine.launcher``: all GPUs of a node, many nodes). Under ``srun`` with
several tasks and no torchrun variables, Slurm's (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``,
``SLURM_JOB_NODELIST``, ...) give them instead (``engine.slurm``). ``DDPContext`` turns that environment into a
process group; the backend and each rank's device follow ``engine.devices``
(nccl and ``cuda:LOCAL_RANK`` when every local rank has its own GPU, gloo otherwise). Every collective has
a finite timeout (``BATON_DDP_TIMEOUT`` seconds, default 90), so a rank that dies or never arrives makes
the others fail with an error instead of hanging. Without a launcher it does nothing and the world size
is 1, so the same script runs alone.

Debugging a hang: set a short ``BATON_DDP_TIMEOUT``. (Not ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: with torch 2.13
and gloo it crashes DDP's constructor; see docs/distributed.md.)
"""
from __future__ import annotations

import datetime
import logging
import os
import time
import zlib
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .comm_hooks import COMM_HOOKS, check_comm_hook, register_comm_hook
from .devices import (default_timeout, get_local_rank, launched_world_size, local_world_size, rank_device,
                      resolve_backend, visible_gpu_count)
from .rank_progress import (HEARTBEAT_S, PROGRESS, CollectiveMismatchError, DistributedError, fault_report,
                            guard_enabled, mark_progress, read_progress)
from .rendezvous import RendezvousError, agree_on_world_size, rendezvous_store, world_sizes_seen
from .slurm import SlurmLayout, adopt_slurm_env

__all__ = ["COMM_HOOKS", "check_comm_hook", "register_comm_hook", "get_backend", "DDPContext", "get_rank",
           "get_world_size", "get_local_rank", "is_main_process", "is_distributed",
           "allreduce_data", "allreduce_moments", "all_gather_rows", "broadcast_object", "barrier", "DistributedError",
           "CollectiveMismatchError", "RendezvousError", "default_timeout", "launched_world_size", "mark_progress",
           "explain_failure",
           "guard_enabled", "is_communication_error", "collective_device"]

logger = logging.getLogger(__name__)


def explain_failure(where: str, err: BaseException) -> DistributedError:
    """A ``DistributedError`` for a collective (ours, or DDP's inside backward) that failed with ``err``,
    naming the rank at fault from the ranks' progress records (``engine.rank_progress.fault_report``)."""
    rank, world = get_rank(), get_world_size()
    time.sleep(3 * HEARTBEAT_S + 0.5)  # let a dead rank's record go stale before judging
    return fault_report(where, err, rank, world, read_progress(world), time.time())


def is_communication_error(err: BaseException) -> bool:
    """Whether ``err`` came from the process group (a timeout, a peer gone), not from the user's code."""
    import torch.distributed as dist

    if isinstance(err, getattr(dist, "DistBackendError", ())) or isinstance(err, DistributedError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(
        marker in text for marker in ("gloo", "Gloo", "NCCL", "Timed out", "Connection closed", "Connection reset"))


_SLOT = 64  # float64 numbers in every guarded gather: position, signature, payload length, payload


def _collective(name: str, desc: str, call: Optional[Callable[[], Any]] = None,
                payload: Sequence[float] = ()) -> Any:
    """Run one of our collectives behind the guard, and name the rank at fault if it fails.

    Every guarded collective starts with the same thing on every rank: one ``all_gather`` of a fixed-size
    row ``[position, signature, len(payload), *payload]`` (signature: a checksum of the call's name, shapes
    and dtypes). Equal sizes make this first step safe whatever the other ranks are doing (gloo with
    mismatched sizes aborts one rank and hands the other garbage); unequal headers raise
    ``CollectiveMismatchError`` on every rank, naming both sides. A small payload (``all_gather_rows``, the
    ddp middleware's per-iteration sync) travels in that same gather, so the hot path costs no extra
    collective; other calls (``call``) follow it.

    Returns ``call()``'s result, or every rank's payload when there is no ``call``.
    """
    import numpy as np  # with torch: not loaded by what only launches (baton --help)
    import torch
    import torch.distributed as dist

    if not guard_enabled():
        if call is not None:
            return call()
        return _plain_gather(payload)
    position = PROGRESS.mark(name)
    try:
        inline = call is None and len(payload) <= _SLOT - 3
        row = np.zeros(_SLOT)  # built and read in numpy: a few torch ops would cost more than the gather
        row[:3] = (position, zlib.crc32(f"{name}({desc})".encode()), len(payload))
        if inline:
            row[3:3 + len(payload)] = payload
        tensor = torch.from_numpy(row).to(collective_device())
        rows = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(rows, tensor)
        table = torch.stack(rows).cpu().numpy()
        if not (table[:, :3] == table[0, :3]).all():
            described: List[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(described, f"step {position}: {name}({desc})")
            sides = "; ".join(f"rank {r} called {d}" for r, d in enumerate(described))
            raise CollectiveMismatchError(
                f"rank {dist.get_rank()}: the ranks disagree on the collective to make ({sides}). Every rank must "
                f"make the same collectives with the same shapes in the same order; a collective made on some "
                f"ranks only belongs in a context field's sync declaration")
        if call is not None:
            return call()
        if inline:
            return table[:, 3:3 + len(payload)].tolist()
        return _plain_gather(payload)
    except DistributedError:
        raise
    except Exception as err:
        raise explain_failure(f"collective '{name}' (step {position})", err) from err


def _plain_gather(payload: Sequence[float]) -> List[List[float]]:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(list(payload), dtype=torch.float64, device=collective_device())
    rows = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, tensor)
    return torch.stack(rows).cpu().tolist()


def is_distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if is_distributed() else 1


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
    tensor = tensor.to(collective_device())
    _collective("allreduce_data", f"{op}, {tuple(tensor.shape)}, {tensor.dtype}",
                lambda: dist.all_reduce(tensor, op=ops[op]))
    if op == "mean":
        tensor = tensor / get_world_size()
    if is_tensor:
        return tensor.to(value.device)
    return tensor.item() if tensor.dim() == 0 else tensor.cpu().tolist()


def allreduce_moments(count: Any, mean: Any, m2: Any, center: Any = None) -> Tuple[Any, Any, Any]:
    """Every rank's moments of its own data (``count`` a 0-d tensor, ``mean`` and ``m2``, the sum of squared
    deviations, tensors of one shape) merged into those of all ranks' data joined, with ONE all-reduce of a
    packed float64 tensor (the parallel-variance formula as sums: ``n``, ``n d`` and ``M2 + n d^2`` with ``d``
    each rank's mean minus ``center``, a value all ranks share, such as the running mean, which keeps the
    sums small). No read to the host; in one process the moments come back as they are. Every rank must call
    it at the same point (``policies.obs_norm`` merges its statistics once per iteration)."""
    if not is_distributed():
        return count, mean, m2
    import torch

    count, mean, m2 = count.double(), mean.double(), m2.double()
    center = torch.zeros_like(mean) if center is None else center.to(mean.device, torch.float64)
    d = mean - center
    packed = torch.cat([count.reshape(1), (count * d).reshape(-1), (m2 + count * d * d).reshape(-1)])
    total = allreduce_data(packed)
    size = d.numel()
    n = total[0]
    mean_d = total[1:1 + size].reshape(d.shape) / n.clamp_min(1e-300)
    m2_all = (total[1 + size:].reshape(d.shape) - n * mean_d * mean_d).clamp_min(0.0)
    return n, center + mean_d, m2_all


def all_gather_rows(row: Sequence[float]) -> List[List[float]]:
    """Every rank's ``row`` of numbers, in rank order (one ``all_gather`` of a float64 tensor on the
    backend's device); ``[row]`` in one process. All ranks must pass rows of the same length."""
    if not is_distributed():
        return [list(row)]
    return _collective("all_gather_rows", f"{len(row)} float64", payload=row)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank (pickled); identity in one process."""
    import torch.distributed as dist

    if not is_distributed():
        return obj
    holder = [obj]
    _collective("broadcast_object", f"from rank {src}",
                lambda: dist.broadcast_object_list(holder, src=src, device=collective_device()))
    return holder[0]


def barrier() -> None:
    """Wait for every rank (under nccl on this rank's GPU, so nccl does not guess the device)."""
    import torch
    import torch.distributed as dist

    if not is_distributed():
        return
    if dist.get_backend() == "nccl":
        _collective("barrier", "", lambda: dist.barrier(device_ids=[torch.cuda.current_device()]))
    else:
        _collective("barrier", "", dist.barrier)


def collective_device() -> Any:
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class DDPContext:
    """Initialise the process group from the launcher's environment (or an srun step's: Slurm's variables
    become torchrun's, ``engine.slurm``); destroy it on exit, also on error.

    Args:
        init_method: e.g. ``"file:///shared/path/rendezvous"`` for a shared-filesystem rendezvous (then
            ``RANK`` and ``WORLD_SIZE`` still come from the environment or the arguments); default
            ``env://`` (``MASTER_ADDR``/``MASTER_PORT``).
        backend: ``auto`` (default), ``nccl`` or ``gloo``; see ``engine.devices.resolve_backend``.
        cuda: whether the run's models live on CUDA; picks nccl under ``auto`` and gives ``device``.
        timeout: seconds for the rendezvous and for every collective (default ``BATON_DDP_TIMEOUT`` or 600).
        rank, world_size: override the environment (Slurm's variables are then not read).

    Attributes:
        device: this rank's device: ``cuda:LOCAL_RANK`` under nccl, a shared GPU under gloo with ``cuda``,
            else ``cpu`` (also in one process: ``cuda:0`` with ``cuda``). A Slurm task bound to GPUs of its
            own (``--gpus-per-task``) uses the first of them.
        slurm: the srun step's layout when Slurm's variables gave the ranks, else None.

    Raises:
        engine.slurm.SlurmEnvError: Slurm's variables disagree (naming them and the fix).
        RendezvousError: (on entering) the ranks did not meet within the timeout, or were started for different
            world sizes; one line naming the rank, where they meet and what to check.

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
        # under srun, Slurm's variables become torchrun's (RANK, LOCAL_RANK, MASTER_ADDR, ...) for everything
        # downstream; torchrun's own, or explicit arguments, win
        self.slurm: Optional[SlurmLayout] = adopt_slurm_env() if rank is None and world_size is None else None
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
            if self.backend == "nccl" and self.device.startswith("cuda"):
                # a group joined from outside (a user's mp.spawn with init_process_group) may not have set the
                # device: nccl's barrier and object collectives use the current device, which must be the
                # one this rank's model is on
                torch.cuda.set_device(self.device)
            return self
        if self.world_size <= 1 and self.init_method is None:
            self.device = rank_device("gloo", self.cuda, 0, gpus)
            return self
        # decided before any CUDA call: too many ranks for nccl is a clear error, not "invalid device ordinal"
        device_rank, device_world = self._device_slot(visible_gpu_count())
        backend = resolve_backend(self.backend, self.cuda, device_world, visible_gpu_count())
        if backend == "nccl":
            torch.cuda.set_device(device_rank)
        init_method = self.init_method or "env://"
        if init_method == "env://":
            missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
            if missing:
                raise RendezvousError(f"rank {self.rank} of {self.world_size}: {', '.join(missing)} not set; "
                                      f"launch with torchrun or engine.launch, or pass init_method='file://...'")
        timeout = datetime.timedelta(seconds=self.timeout)
        store = None
        try:
            store = rendezvous_store(init_method, self.rank, self.world_size, timeout)
            if store is not None:
                if not os.environ.get("TORCHELASTIC_RUN_ID"):  # torchrun's agent has agreed on the world size
                    agree_on_world_size(store, self.rank, self.world_size, self.timeout)
                dist.init_process_group(backend=backend, store=store, rank=self.rank, world_size=self.world_size,
                                        timeout=timeout)
            else:
                dist.init_process_group(backend=backend, init_method=init_method, rank=self.rank,
                                        world_size=self.world_size, timeout=timeout)
        except RendezvousError as err:
            if self.slurm is None:
                raise
            raise RendezvousError(f"{err}{self._slurm_hint()}") from err
        except Exception as err:
            where = (f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
                     if init_method == "env://" else init_method)
            sizes = world_sizes_seen(store)
            if len(sizes) > 1:
                raise RendezvousError(
                    f"rank {self.rank} could not join the process group at {where}: the processes were started "
                    f"for different world sizes ({', '.join(str(w) for w in sorted(sizes))}). Start every node with "
                    f"the same --nproc (and --nnodes); this one was started for {self.world_size}") from err
            cause = " ".join(str(err).split()) or "no message"  # torch's may run over lines: the error is one
            raise RendezvousError(f"rank {self.rank} of {self.world_size} could not join the process group at "
                                  f"{where} within {self.timeout:.0f} s ({type(err).__name__}: {cause[:300]}). Check "
                                  f"that every rank was started, that the master is reachable from this node, and "
                                  f"that MASTER_PORT is free and the same on all nodes{self._slurm_hint()}") from err
        self._owns_group = True
        PROGRESS.start(self.rank)
        self.backend = backend
        self.device = rank_device(backend, self.cuda, device_rank, visible_gpu_count() if self.cuda else 0)
        logger.info("rank %d/%d joined (local rank %d, %s, device %s)", self.rank, self.world_size, self.local_rank,
                    backend, self.device)
        return self

    def _device_slot(self, gpus: int) -> Tuple[int, int]:
        """``(local rank, processes)`` that pick the backend and the GPU among the ``gpus`` this process sees:
        this node's, except for a Slurm task bound to GPUs of its own (``--gpus-per-task``: it sees fewer
        than the node's tasks), which is alone on them and takes the first."""
        world = local_world_size()
        if self.slurm is not None and self.slurm.gpus_per_task and 0 < gpus < world:
            return 0, 1
        return self.local_rank, world

    def _slurm_hint(self) -> str:
        if self.slurm is None:
            return ""
        return (f". The ranks came from Slurm's variables: every rank must be a task of the same srun step (a "
                f"command run in the batch script itself is one process: start it with srun); they meet at "
                f"{self.slurm.master_addr}:{self.slurm.master_port} (MASTER_ADDR and MASTER_PORT where set, else the "
                f"step's first node and a port derived from SLURM_JOB_ID)")

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        import torch.distributed as dist

        if self._owns_group and dist.is_initialized():
            # the heartbeat stops first: its last write goes to a store every rank still keeps up (rank 0
            # serves it until the barrier below)
            PROGRESS.stop()
            try:
                if exc_type is None:
                    # nobody tears the group down while another rank still talks to it; on an error the
                    # others may never arrive, so there is no barrier then
                    barrier()
            finally:
                dist.destroy_process_group()
        self._owns_group = False


def get_backend() -> str:
    """The process group's backend (``gloo``, ``nccl``), or "" where there is none."""
    import torch.distributed as dist

    return dist.get_backend() if dist.is_available() and dist.is_initialized() else ""
