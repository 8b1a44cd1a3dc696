"""Samplers: which stored transitions a batch draws, and with what importance weight."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from .sumtree import SumTree

__all__ = ["Sampler", "UniformSampler", "PrioritizedSampler"]


class Sampler:
    """Base class. ``sample`` returns ``(indices, weights)``; weights None means all ones."""

    def on_extend(self, idx: torch.Tensor) -> None:
        """Called with the slots just written."""

    def sample(self, size: int, batch_size: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        raise NotImplementedError

    def update_priority(self, idx: torch.Tensor, priority: torch.Tensor) -> None:
        raise TypeError(f"{type(self).__name__} keeps no priorities; use PrioritizedSampler "
                        f"(policy.priority=True) to update them")

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def weights(self, idx: torch.Tensor) -> Optional[torch.Tensor]:
        """The sampling weights of slots ``idx`` (None: all alike), to move transitions between buffers."""
        return None

    def set_weights(self, idx: torch.Tensor, weights: torch.Tensor) -> None:
        """Give slots ``idx`` the ``weights`` another buffer's ``weights`` returned."""


class UniformSampler(Sampler):
    """Uniform with replacement over the stored transitions."""

    def __init__(self, generator: Optional[torch.Generator] = None) -> None:
        self._generator = generator

    def sample(self, size: int, batch_size: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        return torch.randint(0, size, (batch_size,), generator=self._generator), None


class PrioritizedSampler(Sampler):
    """Proportional prioritized replay (Schaul et al., 2016) on a sum tree.

    P(i) = p_i^alpha / sum_j p_j^alpha; the importance weight (N * P(i))^-beta is divided by the largest
    possible weight (that of the smallest priority), so weights lie in (0, 1]. New transitions get the
    largest priority seen so far, so each is replayed at least once soon.
    """

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 seed: Optional[int] = None) -> None:
        if not 0 <= alpha <= 1 or not 0 <= beta <= 1:
            raise ValueError(f"priority alpha and beta must lie in [0, 1], got alpha={alpha}, beta={beta}")
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self._tree = SumTree(capacity)
        self._max_priority = 1.0
        self._rng = np.random.default_rng(seed)

    def on_extend(self, idx: torch.Tensor) -> None:
        idx = idx.numpy()
        self._tree.update(idx, np.full(len(idx), self._max_priority ** self.alpha))

    def sample(self, size: int, batch_size: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        total = self._tree.total
        # stratified: one draw from each of batch_size equal slices of the priority mass
        mass = (np.arange(batch_size) + self._rng.random(batch_size)) * (total / batch_size)
        idx = np.minimum(self._tree.find_prefix_sum(mass), size - 1)
        prob = self._tree[idx] / total
        min_prob = self._tree.min / total
        weights = (prob / min_prob) ** (-self.beta)
        return torch.from_numpy(idx), torch.from_numpy(weights.astype(np.float32))

    def update_priority(self, idx: torch.Tensor, priority: torch.Tensor) -> None:
        p = priority.detach().abs().double().cpu().numpy() + self.eps
        self._max_priority = max(self._max_priority, float(p.max()))
        self._tree.update(idx.cpu().numpy(), p ** self.alpha)

    def weights(self, idx: torch.Tensor) -> Optional[torch.Tensor]:
        return torch.from_numpy(self._tree[idx.cpu().numpy()].copy())  # p^alpha, as the tree holds them

    def set_weights(self, idx: torch.Tensor, weights: torch.Tensor) -> None:
        values = weights.double().cpu().numpy()
        self._tree.update(idx.cpu().numpy(), values)
        if len(values) and self.alpha > 0:
            self._max_priority = max(self._max_priority, float(values.max()) ** (1 / self.alpha))

    def state_dict(self) -> dict:
        return {"tree": self._tree.state_dict(), "max_priority": self._max_priority}

    def load_state_dict(self, state: dict) -> None:
        self._tree.load_state_dict(state["tree"])
        self._max_priority = state["max_priority"]
