"""Offline datasets: Minari datasets read from and written to a local dataset root, split into per-rank
shards of whole episodes, and the epoch sampler that reshuffles a shard every pass.

Nothing here sees a context: the offline middleware (``middleware.offline``) and the pipeline
(``pipelines.offline``) put these parts together.
"""
from .dataset import (DatasetError, DatasetNotFoundError, DatasetSpaceError, Episode, OfflineDataset,
                      check_storable, dataset_root, open_dataset, write_dataset)
from .sampler import EpochSampler
from .shard import EmptyShardError, ShardPlan, shard_episodes

__all__ = ["OfflineDataset", "Episode", "open_dataset", "write_dataset", "dataset_root", "DatasetError",
           "DatasetNotFoundError", "DatasetSpaceError", "check_storable", "EpochSampler", "ShardPlan", "shard_episodes",
           "EmptyShardError"]
