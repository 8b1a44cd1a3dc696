"""Noisy linear layers (Fortunato et al., 2018, "Noisy Networks for Exploration"), factorised Gaussian noise.

A ``NoisyLinear`` layer learns, next to each weight and bias, the scale of a Gaussian perturbation of it:

    w = mu_w + sigma_w * (f(eps_out) outer f(eps_in)),   b = mu_b + sigma_b * f(eps_out),   f(x) = sign(x) sqrt(|x|)

with ``eps_in`` ~ N(0, I) of the input size and ``eps_out`` of the output size (factorised: p + q draws per
layer, not p * q). The agent explores by acting greedily on a perturbed network and learns how much to
perturb, state by state, so no epsilon schedule is needed (``policies.dqn`` refuses one next to noisy layers).

When the noise is drawn: at every forward call, one draw for the whole batch (as Tianshou's layer does). So
the learner's forward over ``cat(obs, next_obs)`` rates both halves with one draw, the target network's
forward draws its own, and each acting step acts on a new draw. Nothing about the noise is state: it is
neither a parameter nor a buffer, so checkpoints hold ``mu`` and ``sigma`` only, and DDP (which broadcasts
rank 0's buffers at every forward) leaves each rank its own noise: under DDP every rank draws from its own
generator (seeded ``seed + rank``), by design. The gradient that DDP averages is then an average over
``world_size`` noise draws, each on its own rank's batch.

``set_noise(module, False)`` makes every noisy layer in ``module`` act with its mean weights (``mu``): the
evaluation of a policy does so, and ``baton check-ddp`` compares data-parallel and one-process updates this
way (the sigma parameters stay in the graph with a zero gradient, so DDP sees every parameter used).
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["NoisyLinear", "set_noise", "noise_off", "has_noise"]


class NoisyLinear(nn.Module):
    """A linear layer with learned factorised Gaussian noise on its weights and bias.

    Args:
        in_features, out_features: as ``nn.Linear``.
        sigma0: the initial noise scale; ``sigma`` starts at ``sigma0 / sqrt(in_features)`` (0.5: the paper's).

    Attributes:
        noise: whether the forward perturbs the weights (True) or uses their means (``set_noise``).

    Examples:
        >>> layer = NoisyLinear(4, 2)
        >>> x = torch.ones(3, 4)
        >>> bool((layer(x) != layer(x)).any())        # a new draw at each call
        True
        >>> layer.noise = False
        >>> torch.equal(layer(x), layer(x))           # the mean weights
        True
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        if sigma0 < 0:
            raise ValueError(f"policy.model.noise_sigma0 must be >= 0, got {sigma0}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.noise = True
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight_mu, -bound, bound)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        nn.init.constant_(self.weight_sigma, sigma0 * bound)
        nn.init.constant_(self.bias_sigma, sigma0 * bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.noise:
            eps_in = _scaled_noise(self.in_features, x)
            eps_out = _scaled_noise(self.out_features, x)
        else:  # zeros, not a shortcut: sigma stays in the graph (zero gradient), as DDP expects of every parameter
            eps_in = x.new_zeros(self.in_features)
            eps_out = x.new_zeros(self.out_features)
        # x W^T with W = mu + sigma * (eps_out eps_in^T), without building W: (x * eps_in) sigma^T scaled by eps_out
        mean = F.linear(x, self.weight_mu, self.bias_mu)
        return mean + F.linear(x * eps_in, self.weight_sigma) * eps_out + self.bias_sigma * eps_out

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, noise={self.noise}"


def _scaled_noise(size: int, like: torch.Tensor) -> torch.Tensor:
    """``f(eps) = sign(eps) sqrt(|eps|)`` of a standard normal draw of ``size`` (the paper's factorisation)."""
    eps = torch.randn(size, device=like.device, dtype=like.dtype)
    return eps.sign() * eps.abs().sqrt()


def set_noise(module: nn.Module, enabled: bool) -> int:
    """Turn the noise of every ``NoisyLinear`` in ``module`` on or off; returns how many layers there are."""
    count = 0
    for layer in module.modules():
        if isinstance(layer, NoisyLinear):
            layer.noise = bool(enabled)
            count += 1
    return count


def has_noise(module: nn.Module) -> bool:
    """Whether ``module`` holds a noisy layer."""
    return any(isinstance(layer, NoisyLinear) for layer in module.modules())


@contextlib.contextmanager
def noise_off(module: nn.Module) -> Iterator[None]:
    """``module``'s noisy layers act with their mean weights inside the block; each layer's setting returns after."""
    layers = [layer for layer in module.modules() if isinstance(layer, NoisyLinear)]
    before = [layer.noise for layer in layers]
    for layer in layers:
        layer.noise = False
    try:
        yield
    finally:
        for layer, noise in zip(layers, before):
            layer.noise = noise
