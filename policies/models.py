"""Torch models: the MLP torso and the (dueling) Q-network head used by value-based policies."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

__all__ = ["mlp", "QNetwork"]


def mlp(in_dim: int, hidden_sizes: Sequence[int], activation: type = nn.ReLU) -> nn.Sequential:
    """Linear layers with ``activation`` after each; the output size is ``hidden_sizes[-1]``."""
    layers = []
    for size in hidden_sizes:
        layers += [nn.Linear(in_dim, size), activation()]
        in_dim = size
    return nn.Sequential(*layers)


class QNetwork(nn.Module):
    """Q(s, .) for discrete actions: an MLP torso and a plain or dueling head.

    The dueling head (Wang et al., 2016) computes ``V(s) + A(s, a) - mean_a A(s, a)``.

    Examples:
        >>> q = QNetwork(4, 2, [64, 64], dueling=True)
        >>> q(torch.zeros(3, 4)).shape
        torch.Size([3, 2])
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int], dueling: bool = True) -> None:
        super().__init__()
        if not hidden_sizes:
            raise ValueError("policy.model.encoder_hidden_size_list must name at least one layer")
        self.torso = mlp(obs_dim, hidden_sizes)
        feat = hidden_sizes[-1]
        self.dueling = dueling
        if dueling:
            self.value = nn.Linear(feat, 1)
            self.advantage = nn.Linear(feat, action_dim)
        else:
            self.head = nn.Linear(feat, action_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.torso(obs)
        if not self.dueling:
            return self.head(x)
        adv = self.advantage(x)
        return self.value(x) + adv - adv.mean(dim=-1, keepdim=True)
