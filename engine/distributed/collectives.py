"""The collectives of the distributed runtime, each behind the guard that checks every rank makes the same
one, on the backend's device (cuda for nccl, cpu for gloo); identities in one process."""
from __future__ import annotations

import time
import zlib
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .progress import (HEARTBEAT_S, PROGRESS, CollectiveMismatchError, DistributedError, fault_report, guard_enabled,
                       read_progress)

__all__ = ["explain_failure", "is_communication_error", "is_distributed", "get_rank", "get_world_size",
           "is_main_process", "allreduce_data", "allreduce_moments", "all_gather_rows", "broadcast_object", "barrier",
           "collective_device"]


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


