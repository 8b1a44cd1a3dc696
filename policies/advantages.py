"""PPO's averages over a minibatch: advantage normalisation and the loss's means, over the elements that count.

Where each row holds several agents (``policies.mappo``), an agent that left its episode early (``alive`` 0) is
in the batch but did not act: a weight of 0 keeps it out of the advantages' statistics and of every mean of the
loss, so that the other agents' updates are those of a batch without it. Under DDP the statistics are every
rank's together (count, sum and sum of squares all-reduced), as one process would compute them on the joined
batch, where each rank's own statistics made data-parallel PPO another algorithm (``baton check-ddp``).

Examples:
    >>> adv = torch.tensor([1.0, 2.0, 3.0, 100.0])
    >>> normalise_advantages(adv, torch.tensor([1.0, 1.0, 1.0, 0.0]))[:3]
    tensor([-1.,  0.,  1.])
    >>> weighted_mean(adv, torch.tensor([1.0, 1.0, 1.0, 0.0]))
    tensor(2.)
"""
from __future__ import annotations

from typing import Optional

import torch

from engine.distributed import allreduce_data, is_distributed

__all__ = ["normalise_advantages", "weighted_mean"]


def normalise_advantages(adv: torch.Tensor, weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(adv - mean) / (std + 1e-8)`` over the minibatch's elements (those of weight 1 where ``weight`` is
    given; the unbiased deviation, as ``Tensor.std``); under DDP over every rank's minibatch together."""
    if weight is None and not is_distributed():
        return (adv - adv.mean()) / (adv.std() + 1e-8)
    w = torch.ones_like(adv) if weight is None else weight.to(adv.dtype)
    moments = torch.stack([w.sum(), (adv * w).sum(), (adv * adv * w).sum()]).double()
    if is_distributed():
        moments = allreduce_data(moments)
    count, total, squares = moments[0], moments[1], moments[2]
    mean = total / count.clamp_min(1.0)
    std = ((squares - count * mean * mean).clamp_min(0) / (count - 1).clamp_min(1.0)).sqrt()
    return (adv - mean.to(adv.dtype)) / (std.to(adv.dtype) + 1e-8)


def weighted_mean(x: torch.Tensor, weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The mean of ``x`` over the elements of weight 1 (all of them where ``weight`` is None)."""
    if weight is None:
        return x.mean()
    return (x * weight).sum() / weight.sum().clamp_min(1.0)
