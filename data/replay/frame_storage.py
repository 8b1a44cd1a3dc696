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
"""
from __future__ import annotations

from typing import Any, Dict

import torch

from .storage import RingStorage

__all__ = ["FrameStackStorage"]


class FrameStackStorage:
    """Ring storage of transitions whose ``obs``/``next_obs`` are ``[K, H, W]`` frame stacks.

    Args:
        capacity: transitions kept.
        num_envs: ``E``, the envs of the collector whose batches are pushed.
        frame_stack: ``K``.
    """

    def __init__(self, capacity: int, num_envs: int, frame_stack: int) -> None:
        if num_envs < 1 or frame_stack < 1:
            raise ValueError(f"num_envs and frame_stack must be >= 1, got {num_envs} and {frame_stack}")
        if capacity < 4 * num_envs * frame_stack:
            raise ValueError(f"replay_buffer_size={capacity} is too small for {num_envs} envs x {frame_stack} frames")
        self.capacity, self.num_envs, self.k = capacity, num_envs, frame_stack
        self._rest = RingStorage(capacity)  # every field but the stacks, and the bookkeeping below
        self._frames = None                 # [C, H, W] newest frame of each obs
        self._final = None                  # ring of whole final next_obs stacks [K, H, W]
        self._final_cursor = 0
        self._stamp = torch.full((capacity,), -1, dtype=torch.int64)  # global write count of each slot
        self._count = 0

    def __len__(self) -> int:
        return len(self._rest)

    @property
    def fields(self) -> Dict[str, torch.Tensor]:
        return self._rest.fields

    def bytes_per_transition(self) -> float:
        """Resident bytes per stored transition (frames and every other field), for the report."""
        n = max(len(self), 1)
        frame = self._frames[0].numel() if self._frames is not None else 0
        finals = min(self._final_cursor, self.capacity) * frame * self.k
        rest = sum(v[0].numel() * v.element_size() for v in self._rest.fields.values())
        return frame + rest + 8 + finals / n

    def extend(self, batch: Any) -> torch.Tensor:
        obs, next_obs = batch["obs"], batch["next_obs"]
        n = len(obs)
        if n % self.num_envs:
            raise ValueError(f"pushes must be whole vector steps of {self.num_envs} envs, got {n} transitions")
        if n > self.capacity:
            raise ValueError(f"a push of {n} transitions exceeds replay_buffer_size={self.capacity}")
        if tuple(obs.shape[1:2]) != (self.k,):
            raise ValueError(f"obs stacks have {obs.shape[1]} frames, env.frame_stack is {self.k}")
        if "span" not in batch:
            raise KeyError("frame-stack replay needs the n-step builder's 'span' field (steps per transition)")
        if self._frames is None:
            self._frames = torch.empty((self.capacity,) + tuple(obs.shape[2:]), dtype=obs.dtype)
            self._final = torch.empty((self.capacity,) + tuple(obs.shape[1:]), dtype=obs.dtype)
        done = batch["terminated"] | batch["truncated"]
        pad = (obs[:, :self.k - 1].flatten(2).amax(-1) == 0).to(torch.uint8).cumprod(1).sum(1).to(torch.uint8)
        final_ptr = torch.full((n,), -1, dtype=torch.int64)
        done_idx = done.nonzero().squeeze(1)
        if len(done_idx):
            slots = (torch.arange(len(done_idx)) + self._final_cursor) % self.capacity
            self._final[slots] = next_obs[done_idx]
            final_ptr[done_idx] = slots
            self._final_cursor += len(done_idx)
        rest = {k: v for k, v in batch.items() if k not in ("obs", "next_obs")}
        rest.update(pad=pad, done=done, final_ptr=final_ptr)
        idx = self._rest.extend(rest)
        self._frames[idx] = obs[:, -1]
        self._stamp[idx] = torch.arange(self._count, self._count + n)
        self._count += n
        # a transition whose stored history differs from its own stack (e.g. history lost on resume) is
        # never sampled
        rebuilt = self._obs_stacks(idx)
        mismatch = (rebuilt != obs).flatten(1).any(1) | ~self._history_present(idx)
        self._rest.fields["pad"][idx[mismatch]] = 255  # marks "not sampleable"
        return idx

    # ---- reconstruction --------------------------------------------------------------------------
    def _obs_stacks(self, idx: torch.Tensor) -> torch.Tensor:
        offsets = torch.arange(self.k - 1, -1, -1) * self.num_envs        # K-1 ... 0 steps back
        slots = (idx.unsqueeze(1) - offsets) % self.capacity              # [B, K]
        stacks = self._frames[slots]                                      # [B, K, H, W]
        pad = self._rest.fields["pad"][idx].long().clamp(max=self.k)
        zero = torch.arange(self.k).unsqueeze(0) < pad.unsqueeze(1)       # leading zero frames
        return stacks.masked_fill(zero.view(len(idx), self.k, *([1] * (stacks.dim() - 2))), 0)

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
        if done.any():
            d = done.nonzero().squeeze(1)
            next_stack[d] = self._final[f["final_ptr"][idx[d]]]
        out["next_obs"] = next_stack
        return out

    def state_dict(self) -> dict:
        size = len(self)
        finals = min(self._final_cursor, self.capacity)
        return {"rest": self._rest.state_dict(), "stamp": self._stamp.clone(), "count": self._count,
                "final_cursor": self._final_cursor, "num_envs": self.num_envs, "k": self.k,
                "frames": self._frames[:size].clone() if self._frames is not None else None,
                "final": self._final[:finals].clone() if self._final is not None else None}

    def load_state_dict(self, state: dict) -> None:
        if (state["num_envs"], state["k"]) != (self.num_envs, self.k):
            raise ValueError(f"replay checkpoint was written for {state['num_envs']} envs x {state['k']} frames, "
                             f"this buffer is {self.num_envs} x {self.k}")
        self._rest.load_state_dict(state["rest"])
        self._stamp.copy_(state["stamp"])
        self._count, self._final_cursor = state["count"], state["final_cursor"]
        if state["frames"] is not None:
            self._frames = torch.empty((self.capacity,) + tuple(state["frames"].shape[1:]), dtype=state["frames"].dtype)
            self._frames[:len(state["frames"])] = state["frames"]
            self._final = torch.empty((self.capacity,) + tuple(state["final"].shape[1:]), dtype=state["final"].dtype)
            self._final[:len(state["final"])] = state["final"]
