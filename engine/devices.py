"""Which backend and which device each rank uses, decided before any CUDA call, with errors that name the fix.

- ``nccl`` needs one GPU per local rank: ``cuda:LOCAL_RANK``. More local ranks than visible GPUs is an
  error before anything touches CUDA (the raw alternative is "CUDA error: invalid device ordinal").
- ``gloo`` works everywhere: on CPU, and with CUDA models, where several ranks may share a GPU
  (rank r uses ``cuda:(LOCAL_RANK % visible GPUs)``). A test and debugging setting: gloo moves gradients
  through host memory, far slower than nccl.
- ``auto`` (the default, ``ddp.backend``): nccl when the run wants CUDA and every local rank has its own
  GPU; gloo otherwise (with a warning when GPUs are shared).

``CUDA_VISIBLE_DEVICES`` is respected: the visible GPUs are numbered from 0 as CUDA numbers them.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Any, Optional

from .host import host_available_bytes
from .slurm import slurm_layout

__all__ = ["BACKENDS", "visible_gpu_count", "local_world_size", "resolve_backend", "rank_device", "parse_device",
           "to_device_async", "DeviceError", "size_torch_threads", "usable_cores", "free_memory"]

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "nccl", "gloo")
_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+|meta)$")


class DeviceError(ValueError):
    """A backend or device that cannot be used here; the message says what to change."""


def visible_gpu_count() -> int:
    """GPUs this process may use (``CUDA_VISIBLE_DEVICES`` respected); 0 without CUDA. Creates no CUDA
    context."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def local_world_size() -> int:
    """Processes on this node: ``LOCAL_WORLD_SIZE`` as torchrun and ``engine.launch`` set it (else
    ``WORLD_SIZE``, a single-node launcher)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def _visible_note() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""


def resolve_backend(backend: str, cuda: bool, local_world: int, gpus: int) -> str:
    """The process-group backend for a run.

    Args:
        backend: ``auto``, ``nccl`` or ``gloo`` (``ddp.backend``).
        cuda: whether the run's models live on CUDA (``policy.cuda``).
        local_world: processes on this node.
        gpus: GPUs visible to this process.

    Raises:
        DeviceError: an unknown backend; nccl without GPUs; nccl with more local ranks than GPUs (naming
            both fixes: fewer processes per node, or gloo to share GPUs).

    Examples:
        >>> resolve_backend("auto", cuda=True, local_world=2, gpus=2)
        'nccl'
        >>> resolve_backend("auto", cuda=False, local_world=2, gpus=8)
        'gloo'
    """
    if backend not in BACKENDS:
        raise DeviceError(f"ddp.backend={backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "gloo":
        return "gloo"
    if backend == "nccl":
        if gpus == 0:
            raise DeviceError(f"ddp.backend='nccl' needs CUDA GPUs, but none is visible{_visible_note()}; "
                              f"use ddp.backend='gloo' (or 'auto') on CPUs")
        if local_world > gpus:
            raise DeviceError(f"ddp.backend='nccl' needs one GPU per process, but this node runs {local_world} "
                              f"processes and sees {gpus} GPU{'s' if gpus != 1 else ''}{_visible_note()}. Start at "
                              f"most {gpus} process{'es' if gpus != 1 else ''} per node (--nproc_per_node={gpus}, "
                              f"or --gpus all), or set ddp.backend='gloo' to let processes share GPUs (slower; "
                              f"for tests and debugging)")
        return "nccl"
    if cuda and gpus > 0:
        if local_world <= gpus:
            return "nccl"
        logger.warning("%d processes on this node share %d GPU(s): using the gloo backend (nccl needs one GPU "
                       "per process)", local_world, gpus)
    return "gloo"


def rank_device(backend: str, cuda: bool, local_rank: int, gpus: int) -> str:
    """The device of local rank ``local_rank``: ``cuda:LOCAL_RANK`` under nccl, GPUs shared round-robin
    under gloo when the run wants CUDA, else ``cpu``."""
    if not cuda or gpus == 0:
        return "cpu"
    if backend == "nccl":
        return f"cuda:{local_rank}"
    return f"cuda:{local_rank % gpus}"


def parse_device(spec: Any, key: str, gpus: Optional[int] = None) -> str:
    """A device string from a config, checked: ``cpu``, ``cuda``, ``cuda:N`` (N below the visible GPU
    count) or ``meta``.

    Raises:
        DeviceError: naming the config key, the value and the valid forms or the visible GPUs.
    """
    if not isinstance(spec, str) or not _DEVICE.match(spec.strip()):
        raise DeviceError(f"{key}={spec!r} is not a device torch knows here; use 'cpu', 'cuda' or 'cuda:N'")
    spec = spec.strip()
    if spec.startswith("cuda"):
        gpus = visible_gpu_count() if gpus is None else gpus
        index = int(spec.split(":")[1]) if ":" in spec else 0
        if index >= gpus:
            raise DeviceError(f"{key}={spec!r}: this process sees {gpus} GPU{'s' if gpus != 1 else ''}"
                              f"{_visible_note()}" + (f"; use cuda:0 .. cuda:{gpus - 1}" if gpus else "; use 'cpu'"))
    return spec


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a Slurm task's or a container's share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def size_torch_threads(requested: int = 0, local_world: Optional[int] = None) -> int:
    """Size torch's intra-op thread pool for this process, and say so once in the log.

    ``requested > 0`` (the config's ``torch_threads``) wins; else a user's ``OMP_NUM_THREADS``; else the pool
    gets this process's share of the cores (usable cores / processes on this node) less one core for the env
    stepping and the Python loop, at least 1. Why: processes that each use every core (two DDP ranks, or the
    env stepping beside torch's spinning workers) turn a one-second run into twenty. Measured on 2 cores
    (BENCHMARKS.md): CartPole DQN solves as fast with 1 thread as with 2 when the machine is idle, and 3.4x
    faster when another process keeps one core busy.

    Returns:
        The thread count in force.
    """
    import torch

    if requested and requested > 0:
        count, why = int(requested), "torch_threads in the config"
    elif os.environ.get("OMP_NUM_THREADS"):
        value = os.environ["OMP_NUM_THREADS"].strip()
        if not value.isdigit() or int(value) < 1:  # an OpenMP list ("4,2"): left as the OpenMP runtime read it
            return torch.get_num_threads()
        # applied, not just left to the OpenMP runtime: a rank forked from engine.launch's server has the
        # runtime the server loaded, which read the server's environment
        count, why = int(value), "OMP_NUM_THREADS"
    else:
        cores = usable_cores()
        local = local_world if local_world is not None else local_world_size()
        share = max(1, cores // max(1, local))
        count = share - 1 if share > 1 else 1  # one core of the share stays with the env and the Python loop
        why = (f"{cores} usable cores / {local} process{'es' if local != 1 else ''} on this node, one core left "
               f"to the env")
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
        logger.info("torch uses %d intra-op thread%s (%s; set OMP_NUM_THREADS or torch_threads to choose)", count,
                    "s" if count != 1 else "", why)
    return count


# ---- what the launcher told this process ----------------------------------------------------------
DEFAULT_TIMEOUT_S = 90.0  # a hang ends the job within two minutes; BATON_DDP_TIMEOUT to change it


def default_timeout() -> float:
    """Seconds for the rendezvous and every collective: ``BATON_DDP_TIMEOUT``, else ``DEFAULT_TIMEOUT_S``."""
    return float(os.environ.get("BATON_DDP_TIMEOUT", DEFAULT_TIMEOUT_S))


def launched_world_size() -> int:
    """``WORLD_SIZE`` as set by a launcher, else the tasks of the srun step this process is one of (1 when
    there is neither)."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    layout = slurm_layout()
    return layout.world_size if layout is not None else 1


def get_local_rank() -> int:
    """``LOCAL_RANK`` as set by a launcher (0 without one)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def free_memory(device: Any) -> Optional[int]:
    """Bytes free on ``device`` now: what the driver reports free on a GPU (``torch.cuda.mem_get_info``), the
    host's available memory for the CPU (``engine.host.host_available_bytes``); None where it cannot be read."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return host_available_bytes() if device.type == "cpu" else None


def to_device_async(tensor: "torch.Tensor", device: Any) -> "torch.Tensor":
    """``tensor`` (on the host) on ``device`` without the host waiting for the device: a copy to CUDA from
    pageable memory waits for every kernel queued before it, so the copy goes through pinned memory, queued on
    the stream (the caching host allocator keeps the pinned block until the copy is done). A tensor already
    pinned is copied from where it is: the caller must not write it before the device has read it. Elsewhere a
    plain ``to``."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
