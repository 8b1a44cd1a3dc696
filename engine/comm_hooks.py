"""Gradient compression of DDP's all-reduce (``ddp.comm_hook``): checked before the model is wrapped,
registered on the wrapper."""
from __future__ import annotations

from typing import Any, Optional

from .rank_progress import DistributedError

__all__ = ["COMM_HOOKS", "check_comm_hook", "register_comm_hook"]


#: the gradient compression hooks ``ddp.comm_hook`` names (torch.distributed.algorithms.ddp_comm_hooks)
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")


def check_comm_hook(kind: str, backend: str) -> None:
    """Refuse, before the model is wrapped, a hook the process group's backend cannot run.

    Raises:
        DistributedError: ``bf16`` off nccl (torch's bf16 hook needs CUDA and NCCL 2.10+), or an unknown name.
    """
    if kind not in COMM_HOOKS:
        raise DistributedError(f"ddp.comm_hook={kind!r} is not one of {', '.join(map(repr, COMM_HOOKS))}")
    if kind == "bf16" and backend != "nccl":
        raise DistributedError(f"ddp.comm_hook='bf16' needs the nccl backend on CUDA (torch's bf16 hook); this "
                               f"process group is {backend}. Use 'fp16' or 'powersgd' on {backend}, or 'none'")


def register_comm_hook(model: Any, kind: str, powersgd_rank: int = 1) -> Optional[Any]:
    """Compress ``model``'s (a DDP wrapper) gradient all-reduce: ``fp16`` / ``bf16`` halve the bytes sent
    (the gradients are cast, summed and cast back: precision lost in the sum), ``powersgd`` sends a
    rank-``powersgd_rank`` approximation after 2 plain steps, with error feedback. Returns the hook's state
    (PowerSGD keeps per-bucket matrices), None for ``none``."""
    if kind == "none":
        return None
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    check_comm_hook(kind, dist.get_backend())
    if kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=int(powersgd_rank),
                                            start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    model.register_comm_hook(None, default_hooks.fp16_compress_hook if kind == "fp16"
                             else default_hooks.bf16_compress_hook)
    return None
