"""Replay storage that hands out sequences of consecutive steps, for a recurrent policy learning off-policy.

A recurrent agent cannot learn from shuffled single transitions: each step's values depend on the memory the
steps before it built. So the buffer keeps one-step transitions as every collector push lays them out (whole
vector steps of ``E`` envs in time-major order: the next step of the env in slot ``s`` sits in slot ``s + E``,
as ``FrameStackStorage`` relies on too), and a sample is a set of start slots, each gathered with the
``L - 1`` steps of its env that follow (R2D2's sequences, Kapturowski et al., 2019; EPyMARL replays whole
episodes instead, which fixed-length sequences of a vector env's stream make unnecessary). Each sequence
carries:

- every stored field as ``[B, L, ...]``, but ``state``, the memory each step acted from: only the first step's,
  ``[B, ...]``, which the learner starts its unroll from (as ``data.sequences`` cuts an on-policy rollout);
- ``episode_start [B, L]``: True at a step that begins an episode inside the sequence (the step after a
  terminated or truncated one), where the unroll zeroes the memory as acting did; False at the first step,
  whose stored memory is already the reset one.

A start slot is sampled only while the ``L`` steps it needs are all written and none overwritten: each slot
keeps a write stamp, and a sequence is whole when its last slot's stamp is its first's plus ``(L - 1) E``.
``next_state`` (the memory after each step) is not stored: the learner rebuilds it from the sequence.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import torch

from ..obs import Obs, map_leaves
from .device import as_device
from .storage import RingStorage, _host_copy

__all__ = ["SequenceStorage"]


class SequenceStorage:
    """Ring storage of one-step transitions, sampled as ``seq_len`` consecutive steps of one env.

    Args:
        capacity: transitions kept (at least ``2 * seq_len * num_envs``).
        num_envs: ``E``, the envs of the collector whose whole vector steps are pushed.
        seq_len: ``L``, steps per sampled sequence.
        device: where everything is stored (``data.replay.device``).

    Examples:
        >>> s = SequenceStorage(8, num_envs=2, seq_len=2)
        >>> idx = s.extend({"x": torch.arange(6), "terminated": torch.tensor([0, 0, 1, 0, 0, 0]).bool(),
        ...                 "truncated": torch.zeros(6, dtype=torch.bool)})
        >>> s.sampleable(torch.tensor([0, 1, 2, 4])).tolist()   # slot 4's next step is not written yet
        [True, True, True, False]
        >>> out = s.gather(torch.tensor([0, 2]))
        >>> out["x"].tolist(), out["episode_start"].tolist()     # env 0's episode ended at slot 2
        ([[0, 2], [2, 4]], [[False, False], [False, True]])
    """

    def __init__(self, capacity: int, num_envs: int, seq_len: int, device: str | torch.device = "cpu") -> None:
        if num_envs < 1 or seq_len < 1:
            raise ValueError(f"num_envs and seq_len must be >= 1, got {num_envs} and {seq_len}")
        if capacity < 2 * seq_len * num_envs:
            raise ValueError(f"replay_buffer_size={capacity} is too small for sequences of {seq_len} steps of "
                             f"{num_envs} envs: give at least {2 * seq_len * num_envs}")
        self.capacity, self.num_envs, self.seq_len = capacity, num_envs, seq_len
        self.device = as_device(device)
        self._ring = RingStorage(capacity, self.device)
        self._stamp = torch.full((capacity,), -1, dtype=torch.int64, device=self.device)
        self._count = 0
        self._offsets = torch.arange(seq_len, device=self.device) * num_envs  # the L steps of a start slot's env

    #: why ``ReplayBuffer.transitions`` cannot deal its transitions to another number of ranks
    unmovable = "hands out sequences read across each env's stream of slots, which a split would cut"

    def __len__(self) -> int:
        return len(self._ring)

    @property
    def fields(self) -> Dict[str, Obs]:
        return self._ring.fields

    @property
    def min_fill(self) -> int:
        """Transitions a learner waits for: ``2 L`` steps of every env, so that more than half the slots start a
        whole sequence (at ``L`` steps only the first of each env's would, and the sampler's redraws of the others
        could run out)."""
        return 2 * self.seq_len * self.num_envs

    def nbytes(self) -> int:
        return self._ring.nbytes() + self._stamp.numel() * self._stamp.element_size()

    def extend(self, batch: Any) -> torch.Tensor:
        """Write whole vector steps (the memory after each step, ``next_state``, is dropped)."""
        fields = {k: batch[k] for k in batch.keys() if k != "next_state"}
        n = int(fields["terminated"].shape[0])
        if n % self.num_envs:
            raise ValueError(f"pushes must be whole vector steps of {self.num_envs} envs, got {n} transitions")
        if n > self.capacity:
            raise ValueError(f"a push of {n} transitions exceeds replay_buffer_size={self.capacity}")
        fields["done"] = fields["terminated"].bool() | fields["truncated"].bool()
        idx = self._ring.extend(fields)
        self._stamp[idx] = torch.arange(self._count, self._count + n, device=self.device)
        self._count += n
        return idx

    def start_slots(self, pushed: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """After a push of ``pushed`` transitions: the start slots whose sequence it completed, and those still
        waiting for their sequence's last step (the newest ``(L - 1) E``); from the host's write count, so with
        no read of the device (a prioritized sampler draws only the first, ``ReplayBuffer.push``)."""
        end = self._count - (self.seq_len - 1) * self.num_envs
        begin = max(0, end - pushed)
        completed = torch.arange(begin, max(begin, end), device=self.device) % self.capacity
        waiting = torch.arange(max(0, end), self._count, device=self.device) % self.capacity
        return completed, waiting

    def _slots(self, idx: torch.Tensor) -> torch.Tensor:
        """``[B, L]``: the slots of each start slot's sequence."""
        return (idx.unsqueeze(1) + self._offsets) % self.capacity

    def sampleable(self, idx: torch.Tensor) -> torch.Tensor:
        """Whether the sequences starting at these slots are whole: written, none overwritten. (A slot between
        the first and the last is overwritten only after the first, so checking the two ends suffices.)"""
        last = (idx + (self.seq_len - 1) * self.num_envs) % self.capacity
        first = self._stamp[idx]
        return (first >= 0) & (self._stamp[last] == first + (self.seq_len - 1) * self.num_envs)

    def gather(self, idx: torch.Tensor) -> Dict[str, Obs]:
        """Every field as ``[B, L, ...]``, the memory of the first step alone, and ``episode_start`` (module
        docstring)."""
        slots = self._slots(idx)
        flat = slots.reshape(-1)
        shape = tuple(slots.shape)
        out = {k: map_leaves(lambda leaf: leaf.index_select(0, flat).reshape(shape + tuple(leaf.shape[1:])), v)
               for k, v in self._ring.fields.items() if k != "state"}
        if "state" in self._ring.fields:  # the unroll starts from the first step's memory; the rest it rebuilds
            out["state"] = self._ring.fields["state"].index_select(0, idx)
        done = out.pop("done")
        start = torch.zeros_like(done)
        start[:, 1:] = done[:, :-1]
        out["episode_start"] = start
        return out

    def state_dict(self) -> dict:
        """Host tensors (a GPU storage is copied straight to the host), so it loads on any device."""
        return {"ring": self._ring.state_dict(), "stamp": _host_copy(self._stamp), "count": self._count,
                "num_envs": self.num_envs}

    def load_state_dict(self, state: dict) -> None:
        """Load a ``state_dict`` written on any device into this storage's device."""
        if state["num_envs"] != self.num_envs:
            raise ValueError(f"replay checkpoint was written for {state['num_envs']} envs, this buffer has "
                             f"{self.num_envs}: resume with the same env.collector_env_num")
        self._ring.load_state_dict(state["ring"])
        self._stamp.copy_(state["stamp"])
        self._count = state["count"]
        if self._count >= self.num_envs:  # the resumed run restarts its envs' episodes (and memories) after these
            last = torch.arange(self._count - self.num_envs, self._count, device=self.device) % self.capacity
            self._ring.fields["done"][last] = True
