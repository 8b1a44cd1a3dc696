"""Sum and min trees over priorities, updated and searched a whole batch at a time (numpy, no Python loop
over transitions): the O(log N) structure behind prioritized replay."""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["SumTree"]


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
        self._leaves = 1 << max(0, (capacity - 1).bit_length())
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
        self._sum[:] = np.asarray(state["sum"])
        self._min[:] = np.asarray(state["min"])
