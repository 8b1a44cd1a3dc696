"""The offline shape: a policy learns from a dataset instead of an env, alone or data-parallel, with the
evaluation, checkpoints, logs and DDP middleware of online training (docs/offline.md).

Its middle stages::

    fetcher      this rank's shard, read once into the replay storage; update_per_iter batches per iteration
    learner      one update per batch

around them the head and tail of every pipeline (``pipelines.assembly``): the evaluator plays greedy episodes
on the real env (in this process: ``policy.eval.evaluator.background`` does not apply), ``env_step`` counts
transitions drawn from the dataset, and a run given no budget stops at ``stages.OFFLINE_DEFAULT_UPDATES``.

Shards: episodes dealt round-robin over the global ranks of all nodes (``data.offline.ShardPlan``): disjoint,
their union is the dataset, sizes differing by one episode at most (the log says when the split is
uneven). Each rank reshuffles its own shard every pass, from ``seed + rank * RANK_SEED_OFFSET``.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Tuple

import gymnasium as gym

from data.envs import make_vector_env
from data.offline import EpochSampler, ShardPlan, open_dataset
from data.offline.dataset import DatasetParams
from data.replay import ReplayBuffer
from data.replay.storage import RingStorage
from engine.config import ConfigError, RunParams
from engine.context import OfflineRLContext
from middleware.offline import OfflineDataFetcher, OfflineLearner

from . import stages
from .assembly import Run, Shape
from .pipeline import Pipeline

__all__ = ["OfflineShape"]

logger = logging.getLogger(__name__)


class OfflineShape(Shape):
    """A dataset instead of collector envs; the pipeline gets ``dataset`` (``data.offline``) and ``shard`` (the
    episode indices of this rank) besides the standard attributes."""

    context = OfflineRLContext
    background_eval = False
    offline = True
    saves_buffer = False
    policy_keys = Shape.policy_keys + ("learn.batch_size", "learn.update_per_iter")

    def open(self, run: Run) -> Tuple[gym.Space, gym.Space]:
        """Every rank opens the dataset and checks it against the env before anything is written: all fail
        alike, none waits.

        Raises:
            ConfigError: ``dataset.name`` is empty.
            data.offline.DatasetNotFoundError: naming where it looked and how to make the dataset.
            data.offline.DatasetSpaceError: the dataset's spaces differ from the env's.
            data.offline.DatasetError: a corrupt or truncated dataset.
            data.offline.EmptyShardError: more ranks than episodes.
        """
        cfg = run.cfg
        self.settings = settings = DatasetParams.of(cfg.dataset, "dataset")
        if not settings.name:
            raise ConfigError(f"dataset.name is empty: policy {cfg.policy.type!r} learns from a dataset; name one "
                              f"(dataset.name=cartpole/expert-v0, see docs/offline.md)")
        self.dataset = dataset = open_dataset(settings.name, settings.root or None)
        probe = make_vector_env(run.env_type, cfg.env, 1, RunParams.pick(cfg).seed, manager="sync", training=False)
        spaces = probe.single_observation_space, probe.single_action_space
        probe.close()
        env = stages.env_params(cfg)
        dataset.check_spaces(*spaces, f"env {env.env_id!r} (type {env.type!r})")
        self.plan = ShardPlan(dataset.n_episodes, run.world_size, dataset=f"dataset {settings.name!r}",
                              split=settings.split)
        self.episodes = self.plan.episodes(run.rank)
        run.extra.update(dataset=dataset, shard=self.episodes)
        return spaces

    def prepare(self, run: Run) -> ReplayBuffer:
        capacity = int(self.dataset.episode_lengths[self.episodes].sum())
        device = run.policy.device
        self.buffer = ReplayBuffer(capacity, EpochSampler(run.seed, device), RingStorage(capacity, device))
        if run.main or run.world_size == 1:
            logger.info("dataset %r, %s", self.settings.name,
                        self.plan.describe(run.rank, self.dataset.episode_lengths))
        learn = run.policy.params.learn
        self.fetcher = OfflineDataFetcher(lambda: self.dataset.transitions(self.episodes), self.buffer,
                                          batch_size=learn.batch_size, update_per_iter=learn.update_per_iter,
                                          describe=f"rank {run.rank}")
        return self.buffer

    def summary(self, run: Run, ctx: Any) -> Dict[str, Any]:
        return {"dataset": self.settings.name, "dataset_episodes": self.dataset.n_episodes,
                "dataset_transitions": self.dataset.total_steps, "train_epoch": ctx.train_epoch,
                "shard_transitions": self.fetcher.loaded, "load_seconds": self.fetcher.load_seconds}

    def middle(self, run: Run, pipeline: Pipeline, buffer: Optional[ReplayBuffer]) -> None:
        pipeline.append(self.fetcher, name="fetcher")
        pipeline.append(OfflineLearner(run.policy.learn_mode), name="learner")
