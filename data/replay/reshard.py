"""Replay shards saved by N ranks, given to M ranks: a run resumes on another number of processes with
every transition it had, each on exactly one rank.

- M = N: rank m takes shard m, as saved (its sampler state too: an exact resume).
- M < N: rank m takes the whole shards n with n % M == m, merged oldest first (a rank keeps at most its
  buffer's capacity: the newest transitions when the merged shards hold more).
- M > N: shard n is dealt, one transition at a time, to the ranks m with m % N == n.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import torch

from ..obs import first_leaf
from .buffer import ReplayBuffer

__all__ = ["shard_plan", "load_shards"]

Piece = Tuple[int, int, int]  # (saved shard, this rank's part of it, parts it is dealt into)


def shard_plan(saved: int, world_size: int, rank: int) -> List[Piece]:
    """Which saved shards (and which part of each) rank ``rank`` of ``world_size`` takes."""
    if saved < 1 or not 0 <= rank < world_size:
        raise ValueError(f"no shard plan for rank {rank} of {world_size} from {saved} saved shards")
    if world_size == saved:
        return [(rank, 0, 1)]
    if world_size < saved:
        return [(n, 0, 1) for n in range(rank, saved, world_size)]
    shard = rank % saved
    return [(shard, rank // saved, len(range(shard, world_size, saved)))]


def load_shards(buffer: ReplayBuffer, plan: List[Piece], read_shard: Callable[[int], Dict],
                empty_like: Callable[[], ReplayBuffer]) -> int:
    """Fill ``buffer`` with the pieces of ``plan``; ``read_shard(n)`` gives saved shard n's state dict and
    ``empty_like()`` a new buffer configured like ``buffer`` (to read a shard into). Returns the
    transitions loaded.

    Raises:
        TypeError: when the pieces must be split or merged and the storage keeps transitions that share
            data with their neighbours (frame stacks).
    """
    if plan == [(plan[0][0], 0, 1)]:  # one whole shard: load it as it was saved
        buffer.load_state_dict(read_shard(plan[0][0]))
        return len(buffer)
    for shard, part, parts in plan:
        source = empty_like()
        source.load_state_dict(read_shard(shard))
        fields, weights = source.transitions()
        if parts > 1:
            first = first_leaf(next(iter(fields.values()), torch.empty(0)))  # a tree field: any leaf's rows
            keep = torch.arange(part, len(first), parts, device=first.device)
            fields = {k: v.index_select(0, keep) for k, v in fields.items()}
            weights = weights.index_select(0, keep.to(weights.device)) if weights is not None else None
        buffer.add_transitions(fields, weights)
    return len(buffer)
