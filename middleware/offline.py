"""Offline middleware: the data fetcher that feeds a learner from this rank's shard of a dataset, and the
learner that updates on what it fetched.

One iteration of the offline pipeline (``pipelines.offline``)::

    fetcher   (first call) this rank's shard, read once into the replay storage on the learner's device;
              then update_per_iter batches of batch_size, drawn without replacement within a pass over the
              shard and reshuffled every pass (data.offline.EpochSampler)
    learner   one update per batch

Every rank draws the same number of batches of the same size whatever the size of its shard, so every rank
makes the same updates and DDP's gradient allreduce always has all ranks: there is no readiness to agree on.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Mapping

import torch

from data.obs import Obs, first_leaf
from engine.context import OfflineRLContext
from engine.protocols import LearnPolicy, ReplayBuffer, require

__all__ = ["OfflineDataFetcher", "OfflineLearner"]

logger = logging.getLogger(__name__)


class OfflineDataFetcher:
    """Middleware: reads this rank's shard into ``buffer`` on its first call, then every call puts
    ``update_per_iter`` batches of ``batch_size`` into ``ctx.train_data`` (a list) and counts their
    transitions in ``ctx.env_step`` (summed over ranks under DDP) and the completed passes in
    ``ctx.train_epoch`` (the minimum over ranks).

    Args:
        load: returns the shard's transitions, a dict of tensors sharing their first dimension, ``obs`` and
            ``next_obs`` trees of them for a dictionary observation (``data.offline.OfflineDataset.transitions``).
        buffer: the replay buffer to fill, sized to the shard, with an ``EpochSampler``.
        batch_size, update_per_iter: what each call fetches.
        describe: what the log calls the shard (e.g. ``ShardPlan.describe``).

    Attributes:
        load_seconds, loaded: how long the load took and how many transitions it stored.
    """

    def __init__(self, load: Callable[[], Mapping[str, Obs]], buffer: ReplayBuffer, *, batch_size: int,
                 update_per_iter: int, describe: str = "this rank's shard") -> None:
        if int(batch_size) < 1 or int(update_per_iter) < 1:
            raise ValueError(f"policy.learn.batch_size and update_per_iter must be >= 1, got {batch_size} and "
                             f"{update_per_iter}")
        self._load = load
        self._buffer = require(buffer, ReplayBuffer, "the offline fetcher's replay buffer")
        self._batch_size = int(batch_size)
        self._updates = int(update_per_iter)
        self._describe = describe
        self.loaded = 0
        self.load_seconds = 0.0

    def load(self, train_iter: int = 0) -> None:
        """Read the shard into the buffer (once), and continue its passes where ``train_iter`` updates of
        ``batch_size`` left them (0: a new run; a resumed run's count)."""
        if self.loaded:
            return
        start = time.perf_counter()
        fields = dict(self._load())
        self._buffer.add_transitions(fields)
        self.load_seconds = time.perf_counter() - start
        self.loaded = len(self._buffer)
        sampler = getattr(self._buffer, "sampler", None)
        if hasattr(sampler, "seek"):
            sampler.seek(train_iter * self._batch_size)
        device = first_leaf(next(iter(fields.values()))).device if fields else "cpu"  # obs may be a tree
        logger.info("%s: loaded %d transitions into the replay storage (%s) in %.3f s (%.2f M transitions/s)",
                    self._describe, self.loaded, device, self.load_seconds,
                    self.loaded / max(self.load_seconds, 1e-9) / 1e6)

    def __call__(self, ctx: OfflineRLContext) -> None:
        if not self.loaded:
            self.load(ctx.train_iter)
        ctx.train_data = [self._buffer.sample(self._batch_size) for _ in range(self._updates)]
        ctx.env_step += self._updates * self._batch_size
        sampler = getattr(self._buffer, "sampler", None)
        ctx.train_epoch = int(getattr(sampler, "epoch", ctx.train_epoch))


class OfflineLearner:
    """Middleware: one update of ``policy`` per batch in ``ctx.train_data``; writes ``ctx.train_iter`` (one
    per update) and ``ctx.train_output`` (floats of the last update, ``loss`` averaged over the call's).

    Args:
        policy: ``policy.learn_mode``.
    """

    def __init__(self, policy: LearnPolicy) -> None:
        self._policy = require(policy, LearnPolicy, "the offline learner's policy")

    def __call__(self, ctx: OfflineRLContext) -> None:
        batches: List[Any] = ctx.train_data or []
        losses = []
        out: Dict[str, Any] = {}
        for batch in batches:
            out = self._policy.forward(batch)
            losses.append(out["loss"])
            ctx.train_iter += 1
        if not losses:
            return
        stats = {k: float(v) for k, v in out.items() if _is_scalar(v)}
        stats["loss"] = float(torch.stack([torch.as_tensor(v) for v in losses]).mean())
        ctx.train_output = stats


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1)
