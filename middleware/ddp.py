"""The ddp middleware: one middleware makes a pipeline data-parallel across processes.

Added first in a pipeline, it

- wraps the policy's learn model in ``torch.nn.parallel.DistributedDataParallel`` (``device_ids`` on CUDA)
  and gives every rank rank 0's whole learn state (models, target models, optimizer), so every rank starts
  identical and every algorithm gets bucketed, overlapped gradient allreduce without a line of its own;
- synchronises the context's declared fields (``engine.sync``) with ONE collective per iteration, at one
  fixed point (its backward pass, after every other middleware), in the same order on every rank: global
  counters are summed, the learner gate agreed, rank 0's evaluation and stop adopted by all, so every rank
  finishes in the same iteration. Only an iteration in which rank 0 changed one of its ``Sync.RANK0``
  fields (an evaluation, the stop) costs a second collective, which every rank knows to expect from the
  first. It knows no field by name: a user's context field is synchronised by declaring it.

The wrapper is installed through ``learn_mode.model``, which makes the policy rebuild its learner hot paths
(``policy.compile``, docs/performance.md): a compiled learner's loss then calls the DDP wrapper, as torch
recommends (its DDPOptimizer splits the compiled graph at DDP's gradient buckets, so the allreduce still
overlaps the backward). DDP supports ``compile`` and ``policy.amp``; a ``cudagraph`` learner compiles
without CUDA graphs under DDP (a warning says so), its acting forward keeps them.

Rank 0 alone evaluates, logs and writes checkpoints; that is the pipeline's composition
(``pipelines.build_pipeline``), not this middleware's job. The collectives themselves are
``engine.distributed``'s, on the backend's device.
"""
from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch

from engine.context import Context
from engine.distributed import (DistributedError, all_gather_rows, broadcast_object, check_comm_hook,
                                explain_failure, get_backend, get_rank, get_world_size, is_communication_error,
                                is_distributed, mark_progress, register_comm_hook)
from engine.params import Params, param
from engine.protocols import ModelOwner, require
from engine.registry import CONFIG_SECTIONS
from engine.sync import SyncPlan

__all__ = ["DDPParams", "DDPMiddleware"]

#: ``ddp.bucket_cap_mb``'s default (torch's own)
DDP_BUCKET_CAP_MB = 25.0


@dataclass
class DDPParams(Params):
    """The config's ``ddp`` section: how the gradients of data-parallel ranks are exchanged (docs/distributed.md,
    "Communication": when each of these helps)."""

    bucket_cap_mb: float = param(DDP_BUCKET_CAP_MB, rule="positive")
    """Megabytes of gradients per all-reduce bucket; larger: fewer, bigger messages."""
    static_graph: bool = param(False)
    """The same parameters take gradients in the same order every backward (lets DDP skip its bookkeeping)."""
    gradient_as_bucket_view: bool = param(False)
    """Gradients alias the buckets: one copy less, less memory."""
    comm_hook: str = param("none", choices=("none", "fp16", "bf16", "powersgd"))
    """Gradient compression: "none", "fp16", "bf16" (nccl only) or "powersgd"."""
    powersgd_rank: int = param(1, rule="positive")
    """PowerSGD's matrix approximation rank (``comm_hook="powersgd"``)."""
    backend: str = param("auto", choices=("auto", "nccl", "gloo"))
    """"auto", "nccl" (one GPU per process) or "gloo" (CPU, or processes sharing GPUs; ``engine.devices``)."""


CONFIG_SECTIONS.register("ddp", DDPParams)

logger = logging.getLogger(__name__)


class DDPMiddleware:
    """See the module docstring. ``collective_time`` accumulates the seconds spent in its collectives.

    Args:
        learn_mode: ``policy.learn_mode``; its ``model`` is wrapped in place.
        find_unused_parameters: passed to DDP (for models whose forward skips some parameters).
        bucket_cap_mb, static_graph, gradient_as_bucket_view: passed to DDP (the config's ``ddp`` keys).
        comm_hook, powersgd_rank: gradient compression (``engine.distributed.register_comm_hook``).
    """

    def __init__(self, learn_mode: ModelOwner, find_unused_parameters: bool = False, *,
                 bucket_cap_mb: float = DDP_BUCKET_CAP_MB, static_graph: bool = False, gradient_as_bucket_view: bool = False,
                 comm_hook: str = "none", powersgd_rank: int = 1) -> None:
        self.world_size = get_world_size()
        self.rank = get_rank()
        self.collective_time = 0.0
        self.iterations = 0
        self._learn_mode = require(learn_mode, ModelOwner, "the ddp middleware's policy")
        self._wrapped = False
        self._plans: Dict[type, SyncPlan] = {}
        self._started = False
        self._updates = 0
        self._forward: Any = None
        self._distributed = is_distributed()  # a group of one process synchronises too (one GPU under nccl)
        if not self._distributed:
            return
        module = learn_mode.model
        device = next(module.parameters()).device  # cuda:LOCAL_RANK under nccl; a shared GPU under gloo
        check_comm_hook(comm_hook, get_backend())  # before anything is wrapped: a clear refusal, not torch's
        learn_mode.model = torch.nn.parallel.DistributedDataParallel(
            module, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=find_unused_parameters, bucket_cap_mb=bucket_cap_mb, static_graph=static_graph,
            gradient_as_bucket_view=gradient_as_bucket_view)
        self.comm_hook_state = register_comm_hook(learn_mode.model, comm_hook, powersgd_rank)
        # DDP syncs the wrapped module; target networks and optimizer state must match too
        state = broadcast_object(learn_mode.state_dict() if self.rank == 0 else None, src=0)
        learn_mode.load_state_dict(state)
        self._wrapped = True
        self._forward = getattr(learn_mode, "forward", None)
        if callable(self._forward):
            learn_mode.forward = self._marked_forward

    def _marked_forward(self, batch: Any) -> Any:
        """The learner's update, with its place marked (every rank makes the same updates) and a failure of
        DDP's gradient allreduce inside it named like one of ours: which rank is at fault, and where."""
        self._updates += 1
        mark_progress(f"learner update {self._updates}")
        try:
            return self._forward(batch)
        except DistributedError:
            raise
        except Exception as err:
            if is_communication_error(err):
                raise explain_failure(f"DDP's gradient allreduce in learner update {self._updates}", err) from err
            raise

    def on_finish(self, ctx: Context) -> None:
        """Unwrap the learn model and free the DDP wrapper now, on the main thread, while the process
        group is alive: a wrapper left to the garbage collector can release the group's last reference
        on one of gloo's own threads after the group was destroyed, which aborts the process."""
        if not self._wrapped:
            return
        wrapper = self._learn_mode.model
        self._learn_mode.model = wrapper.module
        if callable(self._forward):
            self._learn_mode.forward = self._forward
        self._wrapped = False
        del wrapper
        gc.collect()

    def _plan(self, ctx: Context) -> SyncPlan:
        plan = self._plans.get(type(ctx))
        if plan is None:
            plan = self._plans[type(ctx)] = SyncPlan(type(ctx))
        return plan

    def __call__(self, ctx: Context):
        if not self._distributed:
            yield
            return
        plan = self._plan(ctx)
        if not self._started:  # e.g. the learner gate: nobody trains before the ranks have agreed once
            self._started = True
            for name, value in plan.distributed_defaults.items():
                setattr(ctx, name, value)
        mark_progress(f"iteration {ctx.total_step}")
        plan.begin(ctx)
        yield
        start = time.perf_counter()
        rows = all_gather_rows(plan.pack(ctx, self.rank))
        rank0_values: Optional[Dict[str, Any]] = None
        if plan.rank0_changed(rows):  # every rank read the same flag: all take part in the broadcast
            rank0_values = broadcast_object(plan.rank0_values(ctx) if self.rank == 0 else None, src=0)
        plan.unpack(ctx, rows, self.rank, rank0_values)
        self.iterations += 1
        self.collective_time += time.perf_counter() - start
