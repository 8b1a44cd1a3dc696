"""PPO's averages over a minibatch: advantage normalisation and the loss's means, over the elements that count.

Where each row holds several agents (``policies.mappo``), an agent that left its episode early (``alive`` 0) is
in the batch but did not act: a weight of 0 keeps it out of the advantages' statistics and of every mean of the
loss, so that the other agents' updates are those of a batch without it. Under DDP the statistics are every
rank's together (count, sum and sum of squares all-reduced), as one process would compute them on the joined
batch, where each rank's own statistics made data-parallel PPO another algorithm (``baton check-ddp``). The
loss's means are over every rank's elements too (``mean_shares``): ranks whose minibatches hold different
numbers of acting agents each weigh their elements by the joined count, and DDP's average of the ranks'
gradients is then the gradient of one mean over the joined batch.

Examples:
    >>> adv = torch.tensor([1.0, 2.0, 3.0, 100.0])
    >>> acted = torch.tensor([1.0, 1.0, 1.0, 0.0])
    >>> normalise_advantages(adv, acted)[:3]
    tensor([-1.,  0.,  1.])
    >>> weighted_mean(adv, mean_shares(acted))
    tensor(2.)
"""
from __future__ import annotations

from typing import Optional

import torch

from engine.distributed import allreduce_data, is_distributed

__all__ = ["normalise_advantages", "mean_shares", "weighted_mean"]


def normalise_advantages(adv: torch.Tensor, weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(adv - mean) / (std + 1e-8)`` over the minibatch's elements (those of weight 1 where ``weight`` is
    given; the unbiased deviation, as ``Tensor.std``); under DDP over every rank's minibatch together. One
    element has no deviation (``Tensor.std`` gives NaN): it is 0 there, as in the weighted path (a rollout's
    last minibatch may hold one transition)."""
    if weight is None and not is_distributed():
        return (adv - adv.mean()) / ((adv.std() if adv.numel() > 1 else adv.new_zeros(())) + 1e-8)
    w = torch.ones_like(adv) if weight is None else weight.to(adv.dtype)
    moments = torch.stack([w.sum(), (adv * w).sum(), (adv * adv * w).sum()]).double()
    if is_distributed():
        moments = allreduce_data(moments)
    count, total, squares = moments[0], moments[1], moments[2]
    mean = total / count.clamp_min(1.0)
    std = ((squares - count * mean * mean).clamp_min(0) / (count - 1).clamp_min(1.0)).sqrt()
    return (adv - mean.to(adv.dtype)) / (std.to(adv.dtype) + 1e-8)


def mean_shares(weight: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Each element's share of a mean over the elements of weight 1: ``weight / count``, ``count`` this rank's
    part of every rank's (the joined count over the world size; this rank's own without DDP). Outside the
    compiled loss: under DDP its one all-reduce is a collective. None where every element counts."""
    if weight is None:
        return None
    count = weight.sum().double().reshape(1)
    if is_distributed():
        count = allreduce_data(count, op="mean")
    return weight / count.clamp_min(1e-8).to(weight.dtype)


def weighted_mean(x: torch.Tensor, shares: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The mean of ``x`` over the elements that count (``shares``: ``mean_shares``), or over all of them."""
    if shares is None:
        return x.mean()
    return (x * shares).sum()
