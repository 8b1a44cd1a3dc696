"""The process group: ``DDPContext`` joins it from any launcher's environment (or an srun step's), through a
rendezvous store baton makes where it owns the rendezvous, and leaves it on exit."""
from __future__ import annotations

import datetime
import logging
import os
from typing import Any, Optional, Tuple

from ..devices import default_timeout, get_local_rank, launched_world_size, local_world_size, rank_device, \
    resolve_backend, visible_gpu_count
from ..slurm import SlurmLayout, adopt_slurm_env
from .collectives import barrier, is_distributed
from .progress import PROGRESS, DistributedError
from .world_size import agree_on_world_size, world_sizes_seen

__all__ = ["DDPContext", "get_backend"]

logger = logging.getLogger(__name__)


def _rendezvous_store(init_method: str, rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    """The store the ranks meet through, made here where baton's launcher (or a user's environment) owns
    the rendezvous; None under torchrun, whose agent owns it (``TORCHELASTIC_RUN_ID``)."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return _elastic_store(timeout) if init_method == "env://" else None
    if init_method == "env://":
        return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                             is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    if init_method.startswith("file://"):
        return dist.FileStore(init_method[len("file://"):], world_size)
    return None


def _elastic_store(timeout: datetime.timedelta) -> Any:
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
                raise DistributedError(f"rank {self.rank} of {self.world_size}: {', '.join(missing)} not set; "
                                       f"launch with torchrun or engine.launch, or pass init_method='file://...'")
        timeout = datetime.timedelta(seconds=self.timeout)
        store = None
        try:
            store = _rendezvous_store(init_method, self.rank, self.world_size, timeout)
            if store is not None:
                if not os.environ.get("TORCHELASTIC_RUN_ID"):  # torchrun's agent has agreed on the world size
                    agree_on_world_size(store, self.rank, self.world_size, self.timeout)
                dist.init_process_group(backend=backend, store=store, rank=self.rank, world_size=self.world_size,
                                        timeout=timeout)
            else:
                dist.init_process_group(backend=backend, init_method=init_method, rank=self.rank,
                                        world_size=self.world_size, timeout=timeout)
        except DistributedError as err:
            if self.slurm is None:
                raise
            raise DistributedError(f"{err}{self._slurm_hint()}") from err
        except Exception as err:
            where = (f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
                     if init_method == "env://" else init_method)
            sizes = world_sizes_seen(store)
            if len(sizes) > 1:
                raise DistributedError(
                    f"rank {self.rank} could not join the process group at {where}: the processes were started "
                    f"for different world sizes ({', '.join(str(w) for w in sorted(sizes))}). Start every node with "
                    f"the same --nproc (and --nnodes); this one was started for {self.world_size}") from err
            raise DistributedError(f"rank {self.rank} of {self.world_size} could not join the process group at "
                                   f"{where} within {self.timeout:.0f} s ({type(err).__name__}: {err}). Check that "
                                   f"every rank was started, that the master is reachable from this node, and "
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


