"""Ring storage: one preallocated torch tensor per field, written a batch at a time."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

__all__ = ["RingStorage"]


class RingStorage:
    """A fixed-capacity ring of transitions, stored field by field.

    Tensors are allocated on the first ``extend`` from the batch's shapes and dtypes, so no per-transition
    Python object exists. When full, the oldest transitions are overwritten.

    Examples:
        >>> s = RingStorage(4)
        >>> idx = s.extend({"x": torch.arange(6)})
        >>> s.gather(torch.arange(4))["x"].tolist(), len(s)
        ([4, 5, 2, 3], 4)
    """

    def __init__(self, capacity: int, device: str | torch.device = "cpu") -> None:
        if not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"replay_buffer_size must be a positive int, got {capacity!r}")
        self.capacity = capacity
        self.device = torch.device(device)
        self._fields: Optional[Dict[str, torch.Tensor]] = None
        self._cursor = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def fields(self) -> Dict[str, torch.Tensor]:
        return self._fields or {}

    def _allocate(self, batch: Any) -> None:
        # torch.empty, not zeros: a slot is never read before it is written, and untouched pages of a large
        # buffer (gigabytes for Atari) then cost no resident memory until the ring reaches them
        self._fields = {k: torch.empty((self.capacity,) + tuple(v.shape[1:]), dtype=v.dtype, device=self.device)
                        for k, v in batch.items()}

    def extend(self, batch: Any) -> torch.Tensor:
        """Write a batch (a ``data.batch.Batch`` or a dict of tensors sharing the leading dimension);
        returns the slots written."""
        n = len(next(iter(batch.values())))
        if self._fields is None:
            self._allocate(batch)
        elif set(batch.keys()) != self._fields.keys():
            raise KeyError(f"batch fields {sorted(batch.keys())} differ from the stored fields {sorted(self._fields)}")
        if n > self.capacity:  # only the newest `capacity` transitions can survive
            batch = {k: v[-self.capacity:] for k, v in batch.items()}
            self._cursor = (self._cursor + n - self.capacity) % self.capacity
            n = self.capacity
        idx = (torch.arange(n) + self._cursor) % self.capacity
        first = min(n, self.capacity - self._cursor)
        for key, value in batch.items():
            dst = self._fields[key]
            dst[self._cursor:self._cursor + first] = value[:first]
            if first < n:
                dst[:n - first] = value[first:]
        self._cursor = (self._cursor + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        return idx

    def chronological(self) -> torch.Tensor:
        """The occupied slots, oldest first."""
        if self._size < self.capacity:
            return torch.arange(self._size)
        return (torch.arange(self.capacity) + self._cursor) % self.capacity

    def gather(self, idx: torch.Tensor) -> Dict[str, torch.Tensor]:
        """One index gather per field."""
        return {k: v.index_select(0, idx) for k, v in self.fields.items()}

    def state_dict(self) -> dict:
        size = self._size
        return {"capacity": self.capacity, "cursor": self._cursor, "size": size,
                "fields": {k: v[:size].clone() if size < self.capacity else v.clone() for k, v in self.fields.items()}}

    def load_state_dict(self, state: dict) -> None:
        if state["capacity"] != self.capacity:
            raise ValueError(f"replay checkpoint has capacity {state['capacity']}, this buffer {self.capacity}")
        fields = state["fields"]
        self._fields = None
        if fields:
            self._allocate({k: v for k, v in fields.items()})
            for k, v in fields.items():
                self._fields[k][:len(v)] = v
        self._cursor, self._size = state["cursor"], state["size"]
