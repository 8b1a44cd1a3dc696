"""The ddp middleware: one middleware makes a pipeline data-parallel across processes.

Added first in a pipeline, it

- wraps the policy's learn model in ``torch.nn.parallel.DistributedDataParallel`` (``device_ids`` on CUDA)
  and broadcasts rank 0's whole learn state (models, target models, optimizer), so every rank starts
  identical and every algorithm gets bucketed, overlapped gradient allreduce without a line of its own;
- does ONE collective per iteration, at one fixed point (its backward pass, after every other middleware),
  in the same order on every rank. A single float64 allreduce carries
    * the collector's statistics (samples, env steps, episodes, collect duration), summed into global
      ``ctx.env_step`` / ``ctx.env_episode`` / ``ctx.collect_stats``;
    * every rank's learner readiness, from which ``ctx.learn_gate`` (train next iteration or not) is
      agreed: no rank can skip a backward that another runs;
    * rank 0's stop flag and evaluation (other ranks contribute zeros, so the sum is rank 0's value),
      which every rank adopts: all ranks finish in the same iteration.
  Only a stop reason outside the known ones costs a second (agreed) broadcast.

Rank 0 alone evaluates, logs and writes checkpoints; that is the pipeline's composition
(``engine.entry.serial_pipeline``), not this middleware's job.
"""
from __future__ import annotations

import gc
import logging
import math
import time
from typing import Any

import torch

from engine.distributed import broadcast_object, get_local_rank, get_rank, get_world_size, is_distributed

__all__ = ["DDPMiddleware", "ddp_middleware"]

logger = logging.getLogger(__name__)

_STOP_REASONS = [None, "stop_value", "max_env_step", "max_train_iter"]
# slots of the per-iteration allreduce vector
_SAMPLES, _ENV_STEPS, _EPISODES, _DURATION, _READY, _FINISH, _STOP, _EVALUATED, _EVAL_VALUE, _EVAL_ITER = range(10)


class DDPMiddleware:
    """See the module docstring. ``collective_time`` accumulates the seconds spent in its collectives.

    Args:
        learn_mode: ``policy.learn_mode``; its ``model`` is wrapped in place.
        find_unused_parameters: passed to DDP (for models whose forward skips some parameters).
    """

    def __init__(self, learn_mode: Any, find_unused_parameters: bool = False) -> None:
        self.world_size = get_world_size()
        self.rank = get_rank()
        self.collective_time = 0.0
        self.iterations = 0
        self._learn_mode = learn_mode
        self._wrapped = False
        if not is_distributed():
            return
        module = learn_mode.model
        on_cuda = next(module.parameters()).is_cuda
        learn_mode.model = torch.nn.parallel.DistributedDataParallel(
            module, device_ids=[get_local_rank()] if on_cuda else None,
            find_unused_parameters=find_unused_parameters)
        # DDP syncs the wrapped module; target networks and optimizer state must match too
        state = broadcast_object(learn_mode.state_dict() if self.rank == 0 else None, src=0)
        learn_mode.load_state_dict(state)
        self._wrapped = True

    def on_finish(self, ctx: Any) -> None:
        """Unwrap the learn model and free the DDP wrapper now, on the main thread, while the process
        group is alive: a wrapper left to the garbage collector can release the group's last reference
        on one of gloo's own threads after the group was destroyed, which aborts the process."""
        if not self._wrapped:
            return
        wrapper = self._learn_mode.model
        self._learn_mode.model = wrapper.module
        self._wrapped = False
        del wrapper
        gc.collect()

    def __call__(self, ctx: Any):
        if self.world_size == 1:
            yield
            return
        if ctx.learn_gate is None:
            ctx.learn_gate = False  # nobody trains before the ranks have agreed once
        env_step, env_episode, eval_iter = ctx.env_step, ctx.env_episode, ctx.last_eval_iter
        yield
        start = time.perf_counter()
        stats = ctx.collect_stats or {}
        vec = torch.zeros(10, dtype=torch.float64)
        vec[_SAMPLES] = stats.get("samples", 0)
        vec[_ENV_STEPS] = stats.get("env_steps", 0)
        vec[_EPISODES] = stats.get("episodes", 0)
        vec[_DURATION] = stats.get("duration", 0.0)
        vec[_READY] = float(bool(ctx.learner_ready))
        stop_code = 0
        if self.rank == 0:
            vec[_FINISH] = float(bool(ctx.finish))
            stop_code = _STOP_REASONS.index(ctx.stop_reason) if ctx.stop_reason in _STOP_REASONS else len(_STOP_REASONS)
            vec[_STOP] = stop_code
            evaluated = ctx.last_eval_iter != eval_iter
            vec[_EVALUATED] = float(evaluated)
            vec[_EVAL_VALUE] = ctx.eval_value if evaluated and math.isfinite(ctx.eval_value) else 0.0
            vec[_EVAL_ITER] = ctx.last_eval_iter
        torch.distributed.all_reduce(vec)
        ctx.env_step = env_step + int(vec[_ENV_STEPS])
        ctx.env_episode = env_episode + int(vec[_EPISODES])
        ctx.collect_stats = {"samples": int(vec[_SAMPLES]), "env_steps": int(vec[_ENV_STEPS]),
                             "episodes": int(vec[_EPISODES]), "duration": float(vec[_DURATION]) / self.world_size}
        ctx.learn_gate = int(vec[_READY]) == self.world_size
        finish = bool(vec[_FINISH])
        stop_code = int(vec[_STOP])
        stop_reason = (_STOP_REASONS[stop_code] if stop_code < len(_STOP_REASONS)
                       else broadcast_object(ctx.stop_reason, src=0))  # agreed: every rank sees the same code
        if self.rank != 0:
            if vec[_EVALUATED]:
                ctx.eval_value = ctx.last_eval_value = float(vec[_EVAL_VALUE])
                ctx.last_eval_iter = int(vec[_EVAL_ITER])
                ctx.eval_output = {"mean": ctx.eval_value, "train_iter": ctx.last_eval_iter, "from_rank": 0}
            ctx.finish, ctx.stop_reason = finish, stop_reason
        self.iterations += 1
        self.collective_time += time.perf_counter() - start


def ddp_middleware(learn_mode: Any, find_unused_parameters: bool = False) -> DDPMiddleware:
    return DDPMiddleware(learn_mode, find_unused_parameters)
