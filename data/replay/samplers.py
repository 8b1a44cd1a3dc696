"""Samplers: which stored transitions a batch draws, and with what importance weight.

Random numbers are drawn on the host from the sampler's own generator (a ``torch.Generator`` on the CPU for
uniform sampling, numpy's for prioritized), whatever the device: a replay on a GPU draws the same indices as
one in host memory from the same seed, and only the drawn numbers (a few hundred bytes, through pinned
buffers: no wait for the device) are copied over.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from . import device as placement
from .device import DeferredCheck, PinnedStaging, as_device, ensure_fits
from .sumtree import DeviceSumTree, SumTree

__all__ = ["Sampler", "UniformSampler", "PrioritizedSampler"]

#: pinned buffer sets for the host draws of a sampler off the CPU: how many batches the host may draw ahead
#: of the device
_DRAW_DEPTH = 8


class Sampler:
    """Base class. ``sample`` returns ``(indices, weights)``; weights None means all ones. ``device``: where
    its indices (and weights) are, the storage's device."""

    device = torch.device("cpu")

    def on_extend(self, idx: torch.Tensor) -> None:
        """Called with the slots just written."""

    def sample(self, size: int, batch_size: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        raise NotImplementedError

    def update_priority(self, idx: torch.Tensor, priority: torch.Tensor) -> None:
        raise TypeError(f"{type(self).__name__} keeps no priorities; use PrioritizedSampler "
                        f"(policy.priority=True) to update them")

    def bound_tensors(self) -> Tuple[torch.Tensor, ...]:
        """The device tensors ``draw`` and ``write_priority`` read and write (where a captured update binds them)."""
        return ()

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
    """Uniform with replacement over the stored transitions.

    Args:
        generator: a CPU ``torch.Generator`` (default: torch's global one).
        device: where the indices go (drawn on the host, then copied).
    """

    def __init__(self, generator: Optional[torch.Generator] = None, device: str | torch.device = "cpu") -> None:
        self._generator = generator
        self.device = as_device(device)
        self._staging = PinnedStaging(self.device, depth=_DRAW_DEPTH)

    def sample(self, size: int, batch_size: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        idx = torch.randint(0, size, (batch_size,), generator=self._generator)
        return self._staging.to_device({"idx": idx})["idx"], None

    def draw(self, size: torch.Tensor, batch_size: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """``sample`` on the device, from its default generator, nothing read on the host: what a captured update
        (``policies.update_graph``) draws with. ``size``: the fill, a 0-d int64 tensor on the device. Returns
        the slots and weights of ones."""
        u = torch.rand(batch_size, dtype=torch.float64, device=self.device)
        idx = torch.minimum((u * size).long(), size - 1)
        return idx, torch.ones(batch_size, device=self.device)


class PrioritizedSampler(Sampler):
    """Proportional prioritized replay (Schaul et al., 2016) on a sum tree.

    P(i) = p_i^alpha / sum_j p_j^alpha; the importance weight (N * P(i))^-beta is divided by the largest
    possible weight (that of the smallest priority), so weights lie in (0, 1]. New transitions get the
    largest priority seen so far, so each is replayed at least once soon.

    On the CPU the tree is numpy's (``SumTree``); on another device it lives there (``DeviceSumTree``) and
    nothing is read back: the largest priority stays a device scalar, and a priority that is not finite is
    left out of the tree and reported at the next ``update_priority`` (``ValueError``), not at once.
    """

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 seed: Optional[int] = None, device: str | torch.device = "cpu") -> None:
        if not 0 <= alpha <= 1 or not 0 <= beta <= 1:
            raise ValueError(f"priority alpha and beta must lie in [0, 1], got alpha={alpha}, beta={beta}")
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.device = as_device(device)
        self._rng = np.random.default_rng(seed)
        self._on_host = placement.host_path(self.device)
        if self._on_host:
            self._tree = SumTree(capacity)
            self._max_priority = 1.0
        else:
            ensure_fits(DeviceSumTree.nbytes_for(capacity), self.device, "the prioritized sampler's sum tree")
            self._tree = DeviceSumTree(capacity, self.device)
            self._max_priority_t = torch.ones((), dtype=torch.float64, device=self.device)
            self._check = DeferredCheck(self.device)
            self._updates = 0
            self._staging = PinnedStaging(self.device, depth=_DRAW_DEPTH)

    @property
    def max_priority(self) -> float:
        """The largest priority seen (a host read: waits for the device)."""
        return self._max_priority if self._on_host else float(self._max_priority_t)

    def mean_weight(self, size: int) -> torch.Tensor:
        """The mean sampling weight (``priority ** alpha``) of the first ``size`` slots: a draw's odds of a slot given
        it are its share of them, as under uniform sampling."""
        return torch.as_tensor(self._tree.total, dtype=torch.float64) / max(1, size)

    def on_extend(self, idx: torch.Tensor) -> None:
        if self._on_host:
            idx = idx.numpy()
            self._tree.update(idx, np.full(len(idx), self._max_priority ** self.alpha))
        else:
            self._tree.update(idx, (self._max_priority_t ** self.alpha).expand(len(idx)))

    def sample(self, size: int, batch_size: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        # stratified: one draw from each of batch_size equal slices of the priority mass
        if self._on_host:
            total = self._tree.total
            mass = (np.arange(batch_size) + self._rng.random(batch_size)) * (total / batch_size)
            idx = np.minimum(self._tree.find_prefix_sum(mass), size - 1)
            prob = self._tree[idx] / total
            min_prob = self._tree.min / total
            weights = (prob / min_prob) ** (-self.beta)
            return torch.from_numpy(idx), torch.from_numpy(weights.astype(np.float32))
        total = self._tree.total
        u = self._staging.to_device({"u": torch.from_numpy(self._rng.random(batch_size))})["u"]
        mass = (torch.arange(batch_size, dtype=torch.float64, device=self.device) + u) * (total / batch_size)
        idx = self._tree.find_prefix_sum(mass).clamp_(max=size - 1)
        return idx, self.importance_weights(idx)

    def importance_weights(self, idx: torch.Tensor) -> torch.Tensor:
        """The importance weights of slots ``idx`` off the host path, ``(P(i) / min P) ** -beta``, on the device."""
        total = self._tree.total
        return (((self._tree[idx] / total) / (self._tree.min / total)) ** (-self.beta)).float()

    def update_priority(self, idx: torch.Tensor, priority: torch.Tensor) -> None:
        if self._on_host:
            p = priority.detach().abs().double().cpu().numpy() + self.eps
            self._max_priority = max(self._max_priority, float(p.max()))
            self._tree.update(idx.cpu().numpy(), p ** self.alpha)
            return
        bad = self.write_priority(idx.to(self.device), priority)
        self._updates += 1
        self._check.report(bad, f"priorities must be finite and non-negative: update_priority call "
                                f"{self._updates} on {self.device} got NaN or infinite values (left out "
                                f"of the sum tree; a GPU replay reports this at a later call)")

    def draw(self, size: torch.Tensor, batch_size: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """``sample`` on the device (the same stratified draw, its uniform numbers from the device's default
        generator), nothing read on the host: what a captured update (``policies.update_graph``) draws with.
        ``size``: the fill, a 0-d int64 tensor on the device.

        Raises:
            TypeError: on the host path (a CPU replay keeps its tree in numpy).
        """
        if self._on_host:
            raise TypeError("PrioritizedSampler.draw needs the tree on the device (a replay off the host path)")
        total = self._tree.total
        u = torch.rand(batch_size, dtype=torch.float64, device=self.device)
        mass = (torch.arange(batch_size, dtype=torch.float64, device=self.device) + u) * (total / batch_size)
        idx = torch.minimum(self._tree.find_prefix_sum(mass), size - 1)
        return idx, self.importance_weights(idx)

    def write_priority(self, idx: torch.Tensor, priority: torch.Tensor,
                       keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``update_priority`` off the host path without its check: returns whether any priority was not finite
        (a 0-d bool tensor; those leaves keep their values, as do the rows ``keep`` marks). Every write is in
        place, so a captured update replays it."""
        p = priority.detach().to(self.device, torch.float64).abs() + self.eps
        bad = ~torch.isfinite(p)
        left = bad if keep is None else bad | keep
        self._max_priority_t.copy_(torch.maximum(self._max_priority_t, torch.where(left, 0.0, p).max()))
        self._tree.update(idx, torch.where(left, self._tree[idx], p ** self.alpha))  # a left one keeps its leaf
        return bad.any()

    def bound_tensors(self) -> Tuple[torch.Tensor, ...]:
        return () if self._on_host else self._tree.tensors() + (self._max_priority_t,)

    def weights(self, idx: torch.Tensor) -> Optional[torch.Tensor]:
        if self._on_host:
            return torch.from_numpy(self._tree[idx.cpu().numpy()].copy())  # p^alpha, as the tree holds them
        return self._tree[idx.to(self.device)].clone()

    def set_weights(self, idx: torch.Tensor, weights: torch.Tensor) -> None:
        if self._on_host:
            values = weights.double().cpu().numpy()
            self._tree.update(idx.cpu().numpy(), values)
            if len(values) and self.alpha > 0:
                self._max_priority = max(self._max_priority, float(values.max()) ** (1 / self.alpha))
            return
        values = weights.to(self.device, torch.float64)
        if not bool(((values >= 0) & torch.isfinite(values)).all()):  # a checkpoint's, once: a host read is fine
            raise ValueError("priorities must be finite and non-negative")
        self._tree.update(idx.to(self.device), values)
        if len(values) and self.alpha > 0:
            self._max_priority_t.copy_(torch.maximum(self._max_priority_t, values.max() ** (1 / self.alpha)))

    def state_dict(self) -> dict:
        if not self._on_host:
            self._check.flush()
        return {"tree": self._tree.state_dict(), "max_priority": self.max_priority}

    def load_state_dict(self, state: dict) -> None:
        self._tree.load_state_dict(state["tree"])
        if self._on_host:
            self._max_priority = float(state["max_priority"])
        else:
            self._max_priority_t.fill_(float(state["max_priority"]))
