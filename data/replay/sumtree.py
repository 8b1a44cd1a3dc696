"""Sum and min trees over priorities, updated and searched a whole batch at a time (no Python loop over
transitions): the O(log N) structure behind prioritized replay.

Two implementations of one layout: ``SumTree`` (numpy, host memory: on the CPU numpy's small calls cost a
quarter to a fifth of torch's; a batch-64 search of a 1M-leaf tree took 0.15-0.18 ms against 0.67-1.1 ms)
and ``DeviceSumTree`` (torch ops on any device, e.g. beside a replay
storage on a GPU, where nothing is read back to the host). Their state dicts are the same tensors, so a tree
saved by one loads into the other.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["SumTree", "DeviceSumTree"]


def _leaves(capacity: int) -> int:
    return 1 << max(0, (capacity - 1).bit_length())


class SumTree:
    """Binary trees of ``capacity`` leaves (rounded up to a power of two) holding sums and minima.

    Examples:
        >>> t = SumTree(4)
        >>> t.update(np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0]))
        >>> t.total, t.min
        (6.0, 1.0)
        >>> t.find_prefix_sum(np.array([0.5, 1.5, 5.9])).tolist()
        [0, 1, 2]
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._leaves = _leaves(capacity)
        self._depth = self._leaves.bit_length() - 1
        self._sum = np.zeros(2 * self._leaves, dtype=np.float64)
        self._min = np.full(2 * self._leaves, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self._sum[1])

    @property
    def min(self) -> float:
        return float(self._min[1])

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        return self._sum[np.asarray(idx) + self._leaves]

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``idx`` to ``values`` (last write wins for repeated indices), then fix the ancestors."""
        idx = np.asarray(idx, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if np.any(values < 0) or not np.all(np.isfinite(values)):
            raise ValueError("priorities must be finite and non-negative")
        nodes = idx + self._leaves
        self._sum[nodes] = values
        self._min[nodes] = values
        # one level at a time, leaves to root. Repeated parents need no np.unique: each copy computes the
        # same value from children that are already final, so the repeated writes agree.
        for _ in range(self._depth):
            nodes = nodes >> 1
            left = nodes << 1
            self._sum[nodes] = self._sum[left] + self._sum[left + 1]
            self._min[nodes] = np.minimum(self._min[left], self._min[left + 1])

    def find_prefix_sum(self, mass: np.ndarray) -> np.ndarray:
        """For each value in ``mass`` the leaf whose prefix-sum interval contains it (vectorized descent)."""
        mass = np.array(mass, dtype=np.float64)
        nodes = np.ones(len(mass), dtype=np.int64)
        for _ in range(self._depth):
            left = nodes << 1
            left_sum = self._sum[left]
            go_right = mass >= left_sum
            mass = np.where(go_right, mass - left_sum, mass)
            nodes = left + go_right
        return np.minimum(nodes - self._leaves, self.capacity - 1)

    def state_dict(self) -> dict:
        """Tensors, not numpy arrays: checkpoints load with ``torch.load(weights_only=True)``."""
        return {"sum": torch.from_numpy(self._sum.copy()), "min": torch.from_numpy(self._min.copy())}

    def load_state_dict(self, state: dict) -> None:
        """Load a state written by either tree, from any device."""
        self._sum[:] = torch.as_tensor(state["sum"]).cpu().numpy()
        self._min[:] = torch.as_tensor(state["min"]).cpu().numpy()


class DeviceSumTree:
    """``SumTree`` in torch ops on ``device``: the same layout, the same float64 arithmetic, so the same
    leaves are found for the same masses; ``total`` and ``min`` stay 0-d tensors on the device (reading
    them as numbers would wait for the device).

    Repeated indices in one ``update``: the last write wins, as in ``SumTree``. A GPU does not order
    colliding writes of one kernel, so the values are first made equal per index (the last one's).

    Examples:
        >>> t = DeviceSumTree(4, "cpu")
        >>> t.update(torch.tensor([0, 1, 2, 2]), torch.tensor([1.0, 2.0, 9.0, 3.0], dtype=torch.float64))
        >>> float(t.total), float(t.min)
        (6.0, 1.0)
        >>> t.find_prefix_sum(torch.tensor([0.5, 1.5, 5.9], dtype=torch.float64)).tolist()
        [0, 1, 2]
    """

    def __init__(self, capacity: int, device: str | torch.device) -> None:
        self.capacity = capacity
        self.device = torch.device(device)
        self._leaves = _leaves(capacity)
        self._depth = self._leaves.bit_length() - 1
        self._sum = torch.zeros(2 * self._leaves, dtype=torch.float64, device=self.device)
        self._min = torch.full((2 * self._leaves,), float("inf"), dtype=torch.float64, device=self.device)

    @staticmethod
    def nbytes_for(capacity: int) -> int:
        """Device bytes of a tree of ``capacity`` leaves (both trees, float64)."""
        return 2 * 2 * _leaves(capacity) * 8

    @property
    def total(self) -> torch.Tensor:
        return self._sum[1]

    @property
    def min(self) -> torch.Tensor:
        return self._min[1]

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        return self._sum[idx + self._leaves]

    def update(self, idx: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves ``idx`` to ``values`` (float64 on the device; not checked here: see
        ``PrioritizedSampler``), then fix the ancestors level by level."""
        idx, values = _last_write(idx, values)
        nodes = idx + self._leaves
        self._sum[nodes] = values
        self._min[nodes] = values
        for _ in range(self._depth):
            nodes = nodes >> 1
            left = nodes << 1
            self._sum[nodes] = self._sum[left] + self._sum[left + 1]
            self._min[nodes] = torch.minimum(self._min[left], self._min[left + 1])

    def find_prefix_sum(self, mass: torch.Tensor) -> torch.Tensor:
        """For each value in ``mass`` (float64) the leaf whose prefix-sum interval contains it."""
        nodes = torch.ones(len(mass), dtype=torch.int64, device=self.device)
        for _ in range(self._depth):
            left = nodes << 1
            left_sum = self._sum[left]
            go_right = mass >= left_sum
            mass = torch.where(go_right, mass - left_sum, mass)
            nodes = left + go_right
        return (nodes - self._leaves).clamp_(max=self.capacity - 1)

    def tensors(self) -> tuple:
        """The sum and min trees (the device memory a captured update binds)."""
        return (self._sum, self._min)

    def state_dict(self) -> dict:
        """Host tensors, as ``SumTree`` writes them."""
        return {"sum": self._sum.to("cpu", copy=True), "min": self._min.to("cpu", copy=True)}

    def load_state_dict(self, state: dict) -> None:
        self._sum.copy_(torch.as_tensor(state["sum"]))
        self._min.copy_(torch.as_tensor(state["min"]))


def _last_write(idx: torch.Tensor, values: torch.Tensor):
    """``idx`` sorted, with each index's values replaced by its last value in the original order, so
    colliding writes agree (no host sync: no unique, no boolean mask)."""
    order = torch.sort(idx, stable=True).indices      # equal indices keep their original order
    idx, values = idx[order], values[order]
    n = len(idx)
    position = torch.arange(n, device=idx.device)
    run_end = torch.ones(n, dtype=torch.bool, device=idx.device)
    run_end[:-1] = idx[1:] != idx[:-1]
    # for each position, the first run end at or after it: a cumulative minimum from the right
    last = torch.where(run_end, position, n).flip(0).cummin(0).values.flip(0)
    return idx, values[last]
