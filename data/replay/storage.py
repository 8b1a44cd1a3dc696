"""Ring storage: one preallocated torch tensor per field (per leaf of a field that is a tree: a dictionary
observation, ``data.obs``), written a batch at a time."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import torch

from ..obs import Obs, from_plain, leaves, map_leaves, nbytes, num_rows, to_plain
from .device import PinnedStaging, as_device, ensure_fits

__all__ = ["RingStorage"]


class RingStorage:
    """A fixed-capacity ring of transitions, stored field by field.

    Tensors are allocated on the first ``extend`` from the batch's shapes and dtypes, so no per-transition
    Python object exists. When full, the oldest transitions are overwritten. A field may be a tree of tensors
    (``obs`` / ``next_obs`` of a dictionary observation): each leaf gets a ring of its own shape and dtype
    (a uint8 image stays uint8), and gathers give the tree back.

    Args:
        capacity: transitions kept.
        device: where the fields live. Off the CPU, pushes go through pinned staging buffers
            (``data.replay.device.PinnedStaging``), slots and gathers stay on the device, and the allocation
            is checked against the device's free memory first (``ReplayMemoryError``).

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
        self.device = as_device(device)
        self._staging = PinnedStaging(self.device)
        self._fields: Optional[Dict[str, Obs]] = None
        self._cursor = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def fields(self) -> Dict[str, Obs]:
        return self._fields or {}

    def nbytes(self, batch: Optional[Mapping[str, Obs]] = None) -> int:
        """Bytes of the allocated fields, or of the fields ``batch``'s shapes and dtypes would allocate
        (every leaf of a tree field counted)."""
        if batch is None:
            return sum(nbytes(v) for v in self.fields.values())
        return sum(self.capacity * _row_bytes(v) for v in batch.values())

    def _allocate(self, batch: Mapping[str, Obs]) -> None:
        ensure_fits(self.nbytes(batch), self.device, f"the replay storage ({self.capacity:,} transitions)",
                    self.capacity)
        # torch.empty, not zeros: a slot is never read before it is written, and untouched pages of a large
        # buffer (gigabytes for Atari) then cost no resident memory until the ring reaches them
        self._fields = {k: map_leaves(self._ring_like, v) for k, v in batch.items()}

    def _ring_like(self, leaf: torch.Tensor) -> torch.Tensor:
        """An unwritten ring of ``capacity`` rows shaped and typed like ``leaf``'s rows."""
        return torch.empty((self.capacity,) + tuple(leaf.shape[1:]), dtype=leaf.dtype, device=self.device)

    def extend(self, batch: Any) -> torch.Tensor:
        """Write a batch (a ``data.batch.Batch`` or a dict of tensors sharing the leading dimension);
        returns the slots written (on the storage's device)."""
        batch = {k: batch[k] for k in batch.keys()}  # each field read once (a Batch's item wraps a tree anew)
        rows = {k: num_rows(v) for k, v in batch.items()}  # not len(): a tree field's len counts its keys
        n = next(iter(rows.values()))
        uneven = {k: r for k, r in rows.items() if r != n}
        if uneven:
            raise ValueError(f"a push's fields must have one row per transition: {n} in "
                             f"{next(iter(batch))!r}, but {uneven} (field: rows)")
        if self._fields is not None and batch.keys() != self._fields.keys():
            raise KeyError(f"batch fields {sorted(batch)} differ from the stored fields {sorted(self._fields)}")
        if n > self.capacity:  # only the newest `capacity` transitions can survive
            batch = {k: v[-self.capacity:] for k, v in batch.items()}
            self._cursor = (self._cursor + n - self.capacity) % self.capacity
            n = self.capacity
        if self._fields is None:  # from the shapes and dtypes: checked before anything reaches the device
            self._allocate(batch)
        first = min(n, self.capacity - self._cursor)
        idx = (torch.arange(self._cursor, self._cursor + n, device=self.device) if first == n
               else (torch.arange(n, device=self.device) + self._cursor) % self.capacity)
        if self._staging.staged and all(isinstance(v, torch.Tensor) for v in batch.values()):
            self._staging.write_rows(self._fields, batch, self._cursor)
        else:  # a tree field (each leaf staged) or the host path
            batch = self._staging.to_device(batch)
            for key, value in batch.items():
                dst = self._fields[key]
                if first == n:  # no wrap: the whole field in one copy
                    dst[self._cursor:self._cursor + n] = value
                else:
                    dst[self._cursor:] = value[:first]
                    dst[:n - first] = value[first:]
        self._cursor = (self._cursor + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        return idx

    def chronological(self) -> torch.Tensor:
        """The occupied slots, oldest first."""
        if self._size < self.capacity:
            return torch.arange(self._size, device=self.device)
        return (torch.arange(self.capacity, device=self.device) + self._cursor) % self.capacity

    def gather(self, idx: torch.Tensor) -> Dict[str, Obs]:
        """One index gather per field (per leaf of a tree field)."""
        return {k: v.index_select(0, idx) for k, v in self.fields.items()}

    def state_dict(self) -> dict:
        """The occupied slots as host tensors (a GPU storage is copied straight to the host, never cloned on
        the device), so a checkpoint loads on any device. A tree field is stored as nested plain dicts of
        tensors (``data.obs.to_plain``): ``torch.load(weights_only=True)`` reads no tree class."""
        size = self._size
        return {"capacity": self.capacity, "cursor": self._cursor, "size": size,
                "fields": {k: to_plain(map_leaves(_host_copy, v[:size] if size < self.capacity else v))
                           for k, v in self.fields.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Load a ``state_dict`` written on any device into this storage's device."""
        if state["capacity"] != self.capacity:
            raise ValueError(f"replay checkpoint has capacity {state['capacity']}, this buffer {self.capacity}")
        fields = {k: from_plain(v) for k, v in state["fields"].items()}  # nested dicts: a tree field
        self._fields = None
        if fields:
            self._allocate(fields)
            for k, v in fields.items():
                self._fields[k][:num_rows(v)] = v
        self._cursor, self._size = state["cursor"], state["size"]


def _row_bytes(value: Obs) -> int:
    """Bytes of one row of a field: of every leaf's row for a tree."""
    return sum(leaf.shape[1:].numel() * leaf.element_size() for _, leaf in leaves(value))


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)
