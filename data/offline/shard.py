"""Which episodes each rank trains on: whole episodes, dealt round-robin over the global ranks.

Rank ``r`` of ``W`` takes episodes ``r, r + W, r + 2W, ...``: the shards are disjoint, their union is the
dataset, every shard holds ``floor(N / W)`` or ``ceil(N / W)`` episodes, and since episodes are dealt in
the order they were recorded, each shard samples the whole recording rather than one stretch of it. The
plan depends on ``(N, W)`` alone, so every node computes the same one without a collective.

``split="replicate"`` (ReAgent's other split, ``dataset.split``): every rank holds the whole dataset and
draws from it in its own order (the epoch sampler is seeded per rank), for datasets small enough to copy to
every rank and too few episodes to deal out evenly.

Examples:
    >>> plan = ShardPlan(n_episodes=7, world_size=3)
    >>> [plan.episodes(r).tolist() for r in range(3)]
    [[0, 3, 6], [1, 4], [2, 5]]
    >>> plan.even
    False
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["ShardPlan", "shard_episodes", "EmptyShardError", "SPLITS"]

#: how the episodes go to the ranks (``dataset.split``): dealt out, or all to every rank
SPLITS = ("shard", "replicate")


class EmptyShardError(ValueError):
    """More ranks than episodes: some rank would have nothing to train on."""


class ShardPlan:
    """The split of ``n_episodes`` episodes over ``world_size`` global ranks (module docstring).

    Raises:
        EmptyShardError: when ``world_size > n_episodes``, naming both and the fixes.
    """

    def __init__(self, n_episodes: int, world_size: int, dataset: str = "the dataset", split: str = "shard") -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if split not in SPLITS:
            raise ValueError(f"dataset.split={split!r} is not one of {', '.join(map(repr, SPLITS))}")
        self.split = split
        if split == "shard" and n_episodes < world_size:
            raise EmptyShardError(f"{dataset} holds {n_episodes} episode(s) for {world_size} ranks: every rank "
                                  f"needs at least one whole episode. Record at least {world_size} episodes, or "
                                  f"train on at most {n_episodes} process(es)")
        self.n_episodes = int(n_episodes)
        self.world_size = int(world_size)

    def episodes(self, rank: int) -> np.ndarray:
        """The episode indices of ``rank``, ascending."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is not in 0..{self.world_size - 1}")
        if self.split == "replicate":
            return np.arange(self.n_episodes)
        return np.arange(rank, self.n_episodes, self.world_size)

    @property
    def even(self) -> bool:
        return self.split == "replicate" or self.n_episodes % self.world_size == 0

    def describe(self, rank: int, lengths: Optional[Sequence[int]] = None) -> str:
        """One line for the log: this rank's share and, when uneven, the sizes of all shards."""
        mine = self.episodes(rank)
        text = f"rank {rank} of {self.world_size}: {len(mine)} of {self.n_episodes} episodes"
        if self.split == "replicate" and self.world_size > 1:
            return text + "; every rank holds them all (dataset.split=replicate), each in its own order"
        if lengths is not None:
            lengths = np.asarray(lengths)
            per_rank = [int(lengths[self.episodes(r)].sum()) for r in range(self.world_size)]
            text += f" ({per_rank[rank]} of {int(lengths.sum())} transitions)"
        if self.world_size > 1:
            if self.even and (lengths is None or len(set(per_rank)) == 1):
                text += "; the split is even"
            else:
                counts = sorted({len(self.episodes(r)) for r in range(self.world_size)})
                text += (f"; the split is uneven: ranks hold {' or '.join(map(str, counts))} episodes"
                         + (f", {min(per_rank)} to {max(per_rank)} transitions" if lengths is not None else "")
                         + " (every rank still makes the same updates, each of batch_size transitions)")
        return text


def shard_episodes(n_episodes: int, rank: int, world_size: int) -> np.ndarray:
    """Episode indices of ``rank`` among ``world_size`` (``ShardPlan(...).episodes(rank)``)."""
    return ShardPlan(n_episodes, world_size).episodes(rank)
