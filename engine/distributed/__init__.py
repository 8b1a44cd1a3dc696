"""The distributed runtime: process groups from any launcher, and the only package that calls
``torch.distributed`` (every collective on the backend's device: cuda for nccl, cpu for gloo). Its modules:
``process_group`` (``DDPContext``), ``collectives``, ``progress`` (where each rank is, the rank at fault),
``world_size`` (the ranks agree on it before joining), ``comm_hooks``.

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

from ..devices import default_timeout, get_local_rank, launched_world_size
from .collectives import (all_gather_rows, allreduce_data, allreduce_moments, barrier, broadcast_object,
                          explain_failure, get_rank, get_world_size, is_communication_error, is_distributed,
                          is_main_process)
from .comm_hooks import COMM_HOOKS, check_comm_hook, register_comm_hook
from .process_group import DDPContext, get_backend
from .progress import CollectiveMismatchError, DistributedError, guard_enabled, mark_progress

__all__ = ["COMM_HOOKS", "check_comm_hook", "register_comm_hook", "get_backend", "DDPContext", "get_rank",
           "get_world_size", "get_local_rank", "is_main_process", "is_distributed",
           "allreduce_data", "allreduce_moments", "all_gather_rows", "broadcast_object", "barrier", "DistributedError",
           "CollectiveMismatchError", "default_timeout", "launched_world_size", "mark_progress", "explain_failure",
           "guard_enabled", "is_communication_error"]
