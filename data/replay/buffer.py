"""The replay buffer: a storage plus a sampler; batches in, batches out (``data.batch``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from engine.params import Params, param, section
from engine.protocols import Batch, Storage, require

from ..batch import make_batch
from ..obs import Obs, num_rows
from .device import as_device
from .her import HerParams
from .samplers import PrioritizedSampler, Sampler, UniformSampler
from .storage import RingStorage

__all__ = ["ReplayBuffer", "ReplayBufferParams", "PrioritizedReplayParams"]


@dataclass
class ReplayBufferParams(Params):
    """A policy's ``other.replay_buffer`` section: the buffer's size and where it lives
    (``pipelines.stages.replay_buffer`` builds it)."""

    replay_buffer_size: int = param(100_000, rule="at_least_one")
    """Transitions held; the oldest are overwritten."""
    device: Optional[str] = param(None)
    """None or "cpu": host memory; "learn": the learner's device; "cuda" or "cuda:N" (``data.replay.device``,
    docs/performance.md)."""
    her: HerParams = section(HerParams)
    """Hindsight goals for goal-conditioned envs (``data.replay.her``, docs/observations.md)."""


@dataclass
class PrioritizedReplayParams(ReplayBufferParams):
    """``other.replay_buffer`` of a policy that can sample by priority (``policy.priority``)."""

    alpha: float = param(0.6, rule="not_negative")
    """How strongly priorities shape sampling: 0 uniform, 1 proportional to the TD error."""
    beta: float = param(0.4, rule="unit_interval")
    """The importance-sampling correction's exponent (``policy.priority_IS_weight``)."""


class ReplayBuffer:
    """Transitions in a preallocated ring, sampled with one index gather per field.

    Args:
        capacity: transitions kept; the oldest are overwritten.
        sampler: ``UniformSampler()`` (default) or ``PrioritizedSampler(capacity, ...)``.
        storage: ``RingStorage(capacity)`` (default) or another ``engine.protocols.Storage``, e.g.
            ``FrameStackStorage`` for image stacks.
        device: where the storage and the sampler live (default: the storage's, else the sampler's, else the
            CPU); the default storage and sampler are built there, given ones must be there already.

    Sampled batches carry two extra fields: ``index`` (for ``update_priority``) and ``weight`` (importance
    weights, ones for uniform sampling), on the buffer's device like every field: a buffer on the
    learner's device hands out batches the learner need not move.
    """

    def __init__(self, capacity: int, sampler: Optional[Sampler] = None, storage: Optional[Storage] = None,
                 device: Optional[str | torch.device] = None) -> None:
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a data.replay.Sampler, got {type(sampler).__name__}")
        if device is None:
            device = getattr(storage, "device", None) or getattr(sampler, "device", None) or "cpu"
        self.device = as_device(device)
        self.storage = (require(storage, Storage, "the replay storage") if storage is not None
                        else RingStorage(capacity, self.device))
        if self.storage.capacity != capacity:
            raise ValueError(f"storage capacity {self.storage.capacity} differs from the buffer's {capacity}")
        self.sampler = sampler or UniformSampler(device=self.device)
        for part, what in ((self.storage, "storage"), (self.sampler, "sampler")):
            if as_device(getattr(part, "device", "cpu")) != self.device:
                raise ValueError(f"the replay {what} ({type(part).__name__}) is on {part.device}, the buffer on "
                                 f"{self.device}: build the storage and the sampler on one device")
        self._ones: Optional[torch.Tensor] = None

    def __len__(self) -> int:
        return len(self.storage)

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    def push(self, batch: Batch) -> None:
        """Store a batch of transitions (a ``data.batch.Batch``, or a dict of tensors with a shared leading
        dimension); the storage reads its fields directly."""
        if batch is None or not list(batch.keys()):
            return
        idx = self.storage.extend(batch)
        self.sampler.on_extend(idx)
        if isinstance(self.sampler, PrioritizedSampler) and hasattr(self.storage, "start_slots"):
            # sequences (SequenceStorage): a start slot gets the highest priority when its sequence's last step
            # arrives, and until then the mean one, drawn (and redrawn) as often as under uniform sampling; at the
            # highest, the waiting slots could take most draws, and every redraw would meet them again (a zero
            # would set the importance weights' minimum)
            completed, waiting = self.storage.start_slots(len(idx))
            mean = self.sampler.mean_weight(len(self.storage))
            self.sampler.set_weights(waiting, mean.expand(len(waiting)))
            self.sampler.on_extend(completed)

    def sample(self, batch_size: int) -> Batch:
        """``batch_size`` transitions as one batch (built once, from one index gather per field).

        Raises:
            ValueError: if the buffer is empty.
        """
        size = len(self.storage)
        if size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx, weight = self.sampler.sample(size, batch_size)
        if hasattr(self.storage, "sampleable"):  # storages that rebuild data from neighbours (frame stacks)
            idx, weight = self._replace_unsampleable(idx, weight, size)
        data = self.storage.gather(idx)
        if weight is None:
            if self._ones is None or len(self._ones) != batch_size:
                self._ones = torch.ones(batch_size, device=self.device)
            weight = self._ones
        data["index"] = idx
        data["weight"] = weight
        return make_batch(data)

    def _replace_unsampleable(self, idx: torch.Tensor, weight: Optional[torch.Tensor], size: int):
        # the number of slots to redraw is read on the host (on a GPU: one wait per batch), so the draws,
        # and the batch, are those of a storage in host memory with the same seed
        for _ in range(200):  # a slot that is never whole is redrawn: 200 misses in a row means none is
            bad = ~self.storage.sampleable(idx)
            if not bad.any():
                return idx, weight
            new_idx, new_weight = self.sampler.sample(size, int(bad.sum()))
            idx = idx.clone()
            idx[bad] = new_idx
            if weight is not None:
                weight = weight.clone()
                weight[bad] = new_weight
        raise RuntimeError("the replay buffer holds too few complete transitions to sample from yet")

    def update_priority(self, idx: torch.Tensor, priority: torch.Tensor) -> None:
        self.sampler.update_priority(idx, priority)

    def transitions(self) -> Tuple[Dict[str, Obs], Optional[torch.Tensor]]:
        """Every stored transition, oldest first, with its sampling weight (None when uniform): what
        ``add_transitions`` takes, to split or merge buffers (a resume on another number of ranks).

        Raises:
            TypeError: for storages whose transitions are not self-contained (frame stacks share frames
                with their neighbours), which cannot be split.
        """
        if not hasattr(self.storage, "chronological"):
            why = getattr(self.storage, "unmovable", "keeps transitions that share data with their neighbours")
            raise TypeError(f"{type(self.storage).__name__} {why}: they cannot be moved one by one")
        idx = self.storage.chronological()
        return self.storage.gather(idx), self.sampler.weights(idx)

    def add_transitions(self, fields: Dict[str, Obs], weights: Optional[torch.Tensor] = None) -> None:
        """Store transitions ``transitions()`` returned, keeping their sampling weights."""
        if not fields or not num_rows(next(iter(fields.values()))):
            return
        idx = self.storage.extend(fields)
        self.sampler.on_extend(idx)
        if weights is not None:
            self.sampler.set_weights(idx, weights[-len(idx):])

    def state_dict(self) -> dict:
        return {"storage": self.storage.state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.storage.load_state_dict(state["storage"])
        self.sampler.load_state_dict(state["sampler"])
