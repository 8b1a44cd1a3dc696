"""n-step transitions, computed per env stream and never across an episode or env boundary.

Input is time-major chunks of one-step transitions, ``[T, E, ...]`` for ``E`` envs, where ``next_obs`` is
the *real* next observation (the final one where an episode ended). For a start step ``s`` of env ``e``
the window runs over steps ``s .. s+n-1`` of that same env and stops at the first step that ends the
episode (terminated or truncated). Each output transition has

- ``reward``     = sum_k gamma^k r_{s+k} over the window,
- ``next_obs``   = next_obs of the window's last step (a truncated episode bootstraps from it),
- ``terminated`` = the window ended by termination (the learner then does not bootstrap),
- ``truncated``  = the window ended by truncation,
- ``discount``   = gamma^(window length), the factor of the bootstrap value,
- ``span``       = the window length (1..n, uint8): ``next_obs`` is this many steps after ``obs``.

The last ``n-1`` steps of each chunk wait for the next chunk, so windows span collect calls.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch

__all__ = ["NStepBuilder"]

Batch = Dict[str, torch.Tensor]
_REQUIRED = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


class NStepBuilder:
    """Turns time-major one-step chunks into flat n-step transitions.

    Examples:
        >>> b = NStepBuilder(nstep=2, gamma=0.5)
        >>> chunk = dict(obs=torch.zeros(3, 1, 1), action=torch.zeros(3, 1), reward=torch.ones(3, 1),
        ...              next_obs=torch.arange(3.).view(3, 1, 1), terminated=torch.tensor([[0], [0], [1]]).bool(),
        ...              truncated=torch.zeros(3, 1, dtype=torch.bool))
        >>> out = b.push(chunk)
        >>> out["reward"].tolist(), out["discount"].tolist(), out["terminated"].tolist()
        ([1.5, 1.5], [0.25, 0.25], [False, True])
    """

    def __init__(self, nstep: int, gamma: float) -> None:
        if not isinstance(nstep, int) or nstep < 1:
            raise ValueError(f"policy.nstep must be an int >= 1, got {nstep!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"policy.discount_factor must lie in [0, 1], got {gamma!r}")
        self.nstep = nstep
        self.gamma = gamma
        self._carry: Optional[Batch] = None
        self._gamma_pow = torch.tensor([gamma ** k for k in range(nstep + 1)], dtype=torch.float32)

    def reset(self) -> None:
        """Forget the steps waiting for their windows (e.g. after the envs were reset by hand)."""
        self._carry = None

    def push(self, chunk: Batch) -> Batch:
        """Add ``[T, E, ...]`` one-step data; return the flat ``[S * E, ...]`` transitions now complete."""
        missing = [k for k in _REQUIRED if k not in chunk]
        if missing:
            raise KeyError(f"n-step input lacks fields {missing}")
        if self.nstep == 1:
            return self._one_step(chunk)
        if self._carry is not None:
            chunk = {k: torch.cat([self._carry[k], v]) for k, v in chunk.items()}
        length = len(chunk["reward"])
        n = self.nstep
        starts = length - (n - 1)
        self._carry = {k: v[max(0, length - (n - 1)):] for k, v in chunk.items()}
        if starts <= 0:
            return {}
        return self._windows(chunk, starts)

    def _one_step(self, chunk: Batch) -> Batch:
        flat = {k: v.reshape((-1,) + tuple(v.shape[2:])) for k, v in chunk.items()}
        flat["reward"] = flat["reward"].float()
        flat["discount"] = torch.full_like(flat["reward"], self.gamma)
        flat["span"] = torch.ones(len(flat["reward"]), dtype=torch.uint8, device=flat["reward"].device)
        return flat

    def _windows(self, chunk: Batch, starts: int) -> Batch:
        n = self.nstep
        reward = chunk["reward"].float()
        done = chunk["terminated"] | chunk["truncated"]
        num_envs, device = reward.shape[1], reward.device  # a device env's chunks stay on its device
        alive = torch.ones(starts, num_envs, dtype=torch.bool, device=device)
        ret = torch.zeros(starts, num_envs, device=device)
        last = torch.full((starts, num_envs), n - 1, dtype=torch.long, device=device)
        for k in range(n):
            ret += self.gamma ** k * alive * reward[k:k + starts]
            ends_here = alive & done[k:k + starts]
            last = torch.where(ends_here, torch.full_like(last, k), last)
            alive = alive & ~done[k:k + starts]
        # the window's last step, as a time index into the chunk, per (start, env)
        t_last = torch.arange(starts, device=device).unsqueeze(1) + last
        env = torch.arange(num_envs, device=device).unsqueeze(0).expand(starts, num_envs)
        out = {k: v[:starts] for k, v in chunk.items() if k not in ("reward", "next_obs", "terminated", "truncated")}
        out["reward"] = ret
        out["next_obs"] = chunk["next_obs"][t_last, env]
        out["terminated"] = chunk["terminated"][t_last, env]
        out["truncated"] = chunk["truncated"][t_last, env]
        out["discount"] = self._gamma_pow.to(device)[last + 1]
        out["span"] = (last + 1).to(torch.uint8)
        return {k: v.reshape((-1,) + tuple(v.shape[2:])) for k, v in out.items()}
