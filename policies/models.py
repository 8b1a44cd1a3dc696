"""Torch models: the MLP torso and the (dueling) Q-network head used by value-based policies."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
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

        self._numpy_layers: Optional[List[Tuple[np.ndarray, np.ndarray]]] = None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.torso(obs)
        if not self.dueling:
            return self.head(x)
        adv = self.advantage(x)
        return self.value(x) + adv - adv.mean(dim=-1, keepdim=True)

    def numpy_greedy_action(self, obs: np.ndarray) -> np.ndarray:
        """``argmax_a Q(obs, a)`` computed with numpy, for acting on the CPU.

        Why: acting on a handful of envs is a batch of ~8 rows, where torch's per-op dispatch costs more
        than the arithmetic (about 75 us against 17 us per step here). With a dueling head,
        ``argmax_a Q = argmax_a A`` (V and the mean of A are the same for every action), so the value
        stream is skipped. The arrays are views of the live parameters (optimizer steps and
        ``load_state_dict`` write in place), so they never go stale; valid only while the parameters
        are on the CPU.
        """
        if self._numpy_layers is None:
            linears = [m for m in self.torso if isinstance(m, nn.Linear)]
            linears.append(self.advantage if self.dueling else self.head)
            self._numpy_layers = [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in linears]
        x = obs.astype(np.float32, copy=False)
        for w, b in self._numpy_layers[:-1]:
            x = x @ w
            x += b
            np.maximum(x, 0.0, out=x)
        w, b = self._numpy_layers[-1]
        return (x @ w + b).argmax(axis=1)
