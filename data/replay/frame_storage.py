"""Replay storage for stacked frames that keeps each frame once.

An Atari observation is a stack of the last ``K`` frames, and consecutive observations of one env share
``K - 1`` of them; ``next_obs`` is (up to the episode end) a later transition's ``obs``. Storing both stacks
costs ``2 K`` frames per transition; this storage keeps one: the newest frame of each transition's ``obs``,
plus the whole ``next_obs`` stack only for the few transitions whose n-step window ended an episode (an
env's final observation is not always the previous stack shifted by one: ale-py steps on internally after
a lost life).
Stacks are rebuilt at sampling with one gather.

It relies on the layout every collector push has: batches of whole vector steps of ``E`` envs in time-major
order, so the previous step of the env in slot ``s`` sits in slot ``s - E`` and the step ``L`` later in
``s + L * E``. Each slot records a write stamp; a transition is sampled only while the slots its stacks
need still hold the steps they should (its history not yet overwritten, its future already written), and a
transition whose stored history does not match its observation (e.g. the first steps after a resume) is
never sampled. Nothing is guessed: every rebuilt stack is the stack the env returned.

The storage can live on a GPU (``device``): frames, final stacks, write stamps and every other field are
then device tensors, pushes arrive through pinned staging buffers (one copy per field), and the stack
rebuild, the sampleability test and the gather are torch ops there, with nothing read back to the host.
Only which transitions of a push ended an episode is worked out on the host, from the pushed batch.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch

from ..obs import is_tree, leaves
from . import device as placement
from .device import PinnedStaging, as_device, ensure_fits
from .storage import RingStorage, _host_copy

__all__ = ["FrameStackStorage"]

# per-transition bookkeeping beside the pushed fields: pad (uint8), done (bool), final_ptr (int64), stamp (int64)
_BOOKKEEPING_BYTES = 1 + 1 + 8 + 8


class FrameStackStorage:
    """Ring storage of transitions whose ``obs``/``next_obs`` are ``[K, H, W]`` frame stacks.

    Args:
        capacity: transitions kept.
        num_envs: ``E``, the envs of the collector whose batches are pushed.
        frame_stack: ``K``.
        device: where everything is stored (``data.replay.device``).
        frame_shape: ``[H, W]`` of one frame (uint8), when known before the first push: the device memory
            the frames will take is then checked at construction (``ReplayMemoryError``), not at the first
            push. Either way the exact size is checked before anything is allocated.
    """

    def __init__(self, capacity: int, num_envs: int, frame_stack: int, device: str | torch.device = "cpu",
                 frame_shape: Optional[Sequence[int]] = None) -> None:
        if num_envs < 1 or frame_stack < 1:
            raise ValueError(f"num_envs and frame_stack must be >= 1, got {num_envs} and {frame_stack}")
        if capacity < 4 * num_envs * frame_stack:
            raise ValueError(f"replay_buffer_size={capacity} is too small for {num_envs} envs x {frame_stack} frames")
        self.capacity, self.num_envs, self.k = capacity, num_envs, frame_stack
        self.device = as_device(device)
        if frame_shape is not None:  # the bulk of the bytes, known up front (the pushed fields are not yet)
            self._ensure_fits(tuple(frame_shape), torch.uint8, capacity * _BOOKKEEPING_BYTES)
        self._staging = PinnedStaging(self.device)
        self._rest = RingStorage(capacity, self.device)  # every field but the stacks, and the bookkeeping below
        self._frames = None                 # [C, H, W] newest frame of each obs
        self._final = None                  # ring of whole final next_obs stacks [K, H, W]
        self._final_cursor = 0
        # global write count of each slot
        self._stamp = torch.full((capacity,), -1, dtype=torch.int64, device=self.device)
        self._count = 0
        self._offsets = torch.arange(self.k - 1, -1, -1, device=self.device) * self.num_envs  # K-1 ... 0 steps back
        self._positions = torch.arange(self.k, device=self.device)
        self._host_reads = placement.host_path(self.device)

    def __len__(self) -> int:
        return len(self._rest)

    @property
    def fields(self) -> Dict[str, torch.Tensor]:
        return self._rest.fields

    def bound_tensors(self) -> tuple:
        """The frames, final stacks and stamps (the device memory a captured update binds; a load replaces them)."""
        return tuple(t for t in (self._frames, self._final, self._stamp) if t is not None)

    def bytes_per_transition(self) -> float:
        """Resident bytes per stored transition (frames and every other field), for the report."""
        n = max(len(self), 1)
        frame = self._frames[0].numel() if self._frames is not None else 0
        finals = min(self._final_cursor, self.capacity) * frame * self.k
        rest = sum(v[0].numel() * v.element_size() for v in self._rest.fields.values())
        return frame + rest + 8 + finals / n

    def nbytes(self) -> int:
        """Bytes allocated (on a GPU: all of them, whether the ring has reached them or not)."""
        tensors = [self._stamp] + [t for t in (self._frames, self._final) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors) + self._rest.nbytes()

    def _frames_nbytes(self, frame_shape: tuple, dtype: torch.dtype) -> int:
        frame = torch.Size(frame_shape).numel() * torch.empty((), dtype=dtype).element_size()
        return self.capacity * frame * (1 + self.k)  # newest frames + the ring of final stacks

    def _ensure_fits(self, frame_shape: tuple, dtype: torch.dtype, other_bytes: int) -> None:
        nbytes = self._frames_nbytes(frame_shape, dtype) + other_bytes
        ensure_fits(nbytes, self.device, f"the frame-stack replay storage ({self.capacity:,} transitions of "
                                         f"{self.k} x {' x '.join(map(str, frame_shape))} frames)", self.capacity)

    def _allocate(self, frame_shape: tuple, dtype: torch.dtype, rest_nbytes: int) -> None:
        """Frames and final stacks, after checking that they fit with the other fields (``rest_nbytes``)."""
        self._ensure_fits(frame_shape, dtype, rest_nbytes)  # the stamps are allocated already
        self._frames = torch.empty((self.capacity,) + frame_shape, dtype=dtype, device=self.device)
        self._final = torch.empty((self.capacity, self.k) + frame_shape, dtype=dtype, device=self.device)

    def extend(self, batch: Any) -> torch.Tensor:
        obs, next_obs = batch["obs"], batch["next_obs"]
        if is_tree(obs) or is_tree(next_obs):
            raise TypeError(f"frame-stack replay keeps observations that are one [K, H, W] stack of frames; these are "
                            f"a dictionary observation with keys {[list(path) for path, _ in leaves(obs)]}: store "
                            f"them in the ring storage (data.replay.RingStorage, the default), which keeps every key")
        n = len(obs)
        if n % self.num_envs:
            raise ValueError(f"pushes must be whole vector steps of {self.num_envs} envs, got {n} transitions")
        if n > self.capacity:
            raise ValueError(f"a push of {n} transitions exceeds replay_buffer_size={self.capacity}")
        if tuple(obs.shape[1:2]) != (self.k,):
            raise ValueError(f"obs stacks have {obs.shape[1]} frames, env.frame_stack is {self.k}")
        if "span" not in batch:
            raise KeyError("frame-stack replay needs the n-step builder's 'span' field (steps per transition)")
        # 1. on the host, from the pushed batch: the transitions whose window ended an episode keep their
        #    whole final stack, in the next slots of the final ring
        done = batch["terminated"] | batch["truncated"]
        done_idx = done.cpu().nonzero().squeeze(1)
        final_ptr = torch.full((n,), -1, dtype=torch.int64)
        final_ptr[done_idx] = (torch.arange(len(done_idx)) + self._final_cursor) % self.capacity
        # 2. one copy per field to the device (nothing happens on a CPU storage)
        rest = {k: batch[k] for k in batch.keys() if k not in ("obs", "next_obs")}
        rest.update(done=done, final_ptr=final_ptr)
        if self._frames is None:  # from the shapes: checked before anything reaches the device
            self._allocate(tuple(obs.shape[2:]), obs.dtype, self._rest.nbytes(rest) + self.capacity)  # + pad
        moved = self._staging.to_device(dict(rest, obs=obs, final_obs=next_obs[done_idx.to(next_obs.device)]))
        obs, final_obs = moved.pop("obs"), moved.pop("final_obs")
        rest = moved
        # 3. on the storage's device: leading zero frames of each stack, the frames, the stamps
        rest["pad"] = (obs[:, :self.k - 1].flatten(2).amax(-1) == 0).int().cumprod(1).sum(1).to(torch.uint8)
        if len(done_idx):
            slots = (torch.arange(len(done_idx), device=self.device) + self._final_cursor) % self.capacity
            self._final[slots] = final_obs
            self._final_cursor += len(done_idx)
        idx = self._rest.extend(rest)
        self._frames[idx] = obs[:, -1]
        self._stamp[idx] = torch.arange(self._count, self._count + n, device=self.device)
        self._count += n
        # a transition whose stored history differs from its own stack (e.g. history lost on resume) is
        # never sampled
        rebuilt = self._obs_stacks(idx)
        mismatch = (rebuilt != obs).flatten(1).any(1) | ~self._history_present(idx)
        pad = self._rest.fields["pad"]
        pad[idx] = torch.where(mismatch, 255, pad[idx])  # 255 marks "not sampleable"
        return idx

    # ---- reconstruction --------------------------------------------------------------------------
    def _obs_stacks(self, idx: torch.Tensor) -> torch.Tensor:
        slots = (idx.unsqueeze(1) - self._offsets) % self.capacity        # [B, K]
        stacks = self._frames[slots]                                      # [B, K, H, W]
        pad = self._rest.fields["pad"][idx].long().clamp(max=self.k)
        zero = self._positions.unsqueeze(0) < pad.unsqueeze(1)            # leading zero frames
        return stacks.masked_fill_(zero.view(len(idx), self.k, *([1] * (stacks.dim() - 2))), 0)  # stacks: a new tensor

    def _history_present(self, idx: torch.Tensor) -> torch.Tensor:
        pad = self._rest.fields["pad"][idx].long()
        back = (self.k - 1 - pad).clamp(min=0) * self.num_envs            # how far back the stack reaches
        older = (idx - back) % self.capacity
        return self._stamp[older] == self._stamp[idx] - back

    def sampleable(self, idx: torch.Tensor) -> torch.Tensor:
        """Whether the stacks of these slots can be rebuilt now."""
        f = self._rest.fields
        ok = (f["pad"][idx] != 255) & self._history_present(idx)
        done = f["done"][idx]
        ahead = f["span"][idx].long() * self.num_envs
        nxt = (idx + ahead) % self.capacity
        # not done: next_obs is the obs of the step `span` later, which must be written and complete
        future = (self._stamp[nxt] == self._stamp[idx] + ahead) & (f["pad"][nxt] != 255) & self._history_present(nxt)
        # done: the final stack is stored; its ring slot is overwritten only after `capacity` more done steps
        return ok & (done | future)

    def gather(self, idx: torch.Tensor) -> Dict[str, torch.Tensor]:
        f = self._rest.fields
        out = {k: v.index_select(0, idx) for k, v in f.items() if k not in ("pad", "done", "final_ptr")}
        out["obs"] = self._obs_stacks(idx)
        done = f["done"][idx]
        nxt = (idx + f["span"][idx].long() * self.num_envs) % self.capacity
        next_stack = self._obs_stacks(nxt)
        if self._host_reads:
            if done.any():
                d = done.nonzero().squeeze(1)
                next_stack[d] = self._final[f["final_ptr"][idx[d]]]
        else:  # no host read: gather a final stack for every row, keep those of the done rows
            final = self._final[f["final_ptr"][idx].clamp(min=0)]
            next_stack = torch.where(done.view(-1, *([1] * (next_stack.dim() - 1))), final, next_stack)
        out["next_obs"] = next_stack
        return out

    def state_dict(self) -> dict:
        """Host tensors (a GPU storage is copied straight to the host), so it loads on any device."""
        size = len(self)
        finals = min(self._final_cursor, self.capacity)
        return {"rest": self._rest.state_dict(), "stamp": _host_copy(self._stamp), "count": self._count,
                "final_cursor": self._final_cursor, "num_envs": self.num_envs, "k": self.k,
                "frames": _host_copy(self._frames[:size]) if self._frames is not None else None,
                "final": _host_copy(self._final[:finals]) if self._final is not None else None}

    def load_state_dict(self, state: dict) -> None:
        """Load a ``state_dict`` written on any device into this storage's device."""
        if (state["num_envs"], state["k"]) != (self.num_envs, self.k):
            raise ValueError(f"replay checkpoint was written for {state['num_envs']} envs x {state['k']} frames, "
                             f"this buffer is {self.num_envs} x {self.k}")
        self._frames = self._final = None
        if state["frames"] is not None:
            frames = state["frames"]
            self._allocate(tuple(frames.shape[1:]), frames.dtype, self._rest.nbytes(state["rest"]["fields"]))
        self._rest.load_state_dict(state["rest"])
        self._stamp.copy_(state["stamp"])
        self._count, self._final_cursor = state["count"], state["final_cursor"]
        if state["frames"] is not None:
            self._frames[:len(state["frames"])] = state["frames"]
            self._final[:len(state["final"])] = state["final"]
