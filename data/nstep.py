"""n-step transitions, computed per env stream and never across an episode or env boundary.

Input is time-major chunks of one-step transitions, ``[T, E, ...]`` for ``E`` envs, where ``next_obs`` is
the *real* next observation (the final one where an episode ended). For a start step ``s`` of env ``e``
the window runs over steps ``s .. s+n-1`` of that same env and stops at the first step that ends the
episode (terminated or truncated). ``obs`` and ``next_obs`` may be trees (a dictionary observation,
``data.obs``): every leaf is cut, joined and indexed alike. Each output transition has

- ``reward``     = sum_k gamma^k r_{s+k} over the window,
- ``next_obs``   = next_obs of the window's last step (a truncated episode bootstraps from it),
- ``terminated`` = the window ended by termination (the learner then does not bootstrap),
- ``truncated``  = the window ended by truncation,
- ``discount``   = gamma^(window length), the factor of the bootstrap value,
- ``span``       = the window length (1..n, uint8): ``next_obs`` is this many steps after ``obs``.

The last ``n-1`` steps of each chunk wait for the next chunk, so windows span collect calls.

How long a window may be (``check_nstep``, at compile time): the builder carries ``n-1`` steps of every env
and loops ``n`` times a push, so ``policy.nstep`` is bounded by what a window can mean, not left to fail in
the allocator: at most ``MAX_SPAN`` steps (``span`` is one byte), no longer than an episode can last (a longer
window gives the same transitions), and no longer than the discount's float32 horizon (``useful_horizon``).
``collect_bytes`` is the host memory a collect and its windows hold, which the collector's envs must fit.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch

from engine.config import ConfigError

from .obs import Obs, cat

__all__ = ["NStepBuilder", "MAX_SPAN", "useful_horizon", "check_nstep", "collect_bytes"]

Batch = Dict[str, Obs]  # a field is a tensor, or a tree of them for a dictionary observation (data.obs)
_REQUIRED = ("obs", "action", "reward", "next_obs", "terminated", "truncated")

#: the longest window a transition can record: its ``span`` is a uint8, by which frame-stack replay
#: (``data.replay.frame_storage``) finds ``next_obs`` ``span`` steps after ``obs``; a longer window would wrap
MAX_SPAN = int(torch.iinfo(torch.uint8).max)

#: float32's relative resolution, 2^-24: the rewards are summed, and the TD target computed, in float32
FLOAT32_RESOLUTION = 2.0 ** -24


def useful_horizon(gamma: float) -> Optional[int]:
    """The window length past which a step weighs ``gamma^k < 2^-24``: a reward that far into the window
    changes a float32 sum of rewards of its size by less than its rounding, and the bootstrap's weight
    ``gamma^n`` is below float32's resolution of 1 (the target is then the window's return alone, as with
    any longer window). None for ``gamma >= 1`` (no horizon); 1 for ``gamma = 0``.

    Examples:
        >>> useful_horizon(0.99), useful_horizon(0.9), useful_horizon(0.5), useful_horizon(1.0)
        (1656, 158, 25, None)
    """
    if gamma >= 1.0:
        return None
    if gamma <= 0.0:
        return 1
    return int(math.log(FLOAT32_RESOLUTION) / math.log(gamma)) + 1


def check_nstep(nstep: int, gamma: float, *, episode_limit: Optional[int] = None, env_id: str = "",
                num_envs: Optional[int] = None) -> None:
    """Refuse an n-step window longer than any window can usefully be, naming the bound it passes.

    Args:
        nstep, gamma: ``policy.nstep`` and ``policy.discount_factor``.
        episode_limit: the most steps an episode lasts (``data.envs.episode_limit``), None when unknown.
        env_id: the env, for the message. num_envs: ``env.collector_env_num``, for the estimate.

    Raises:
        engine.config.ConfigError: naming ``policy.nstep``, what the builder would carry, each bound the value
            passes and the largest value that fits them.
    """
    if not isinstance(nstep, int) or isinstance(nstep, bool) or nstep <= 1:
        return
    bounds: List[tuple] = [(MAX_SPAN, f"a transition records its window's length in one byte (its span), so "
                                      f"{MAX_SPAN} steps is the longest window it can hold")]
    if episode_limit is not None and episode_limit >= 1:
        bounds.append((episode_limit, f"{env_id or 'the env'}'s episodes end by step {episode_limit:,} (its time "
                                      f"limit), so a longer window gives the same transitions as "
                                      f"policy.nstep={episode_limit}"))
    horizon = useful_horizon(float(gamma))
    if horizon is not None:
        bounds.append((horizon, f"with policy.discount_factor={gamma} a reward {horizon:,} or more steps into the "
                                f"window is weighted gamma^k < 2^-24, below float32's resolution, so steps past "
                                f"{horizon:,} add nothing the learner's float32 sums can hold"))
    passed = [(bound, why) for bound, why in bounds if nstep > bound]
    if not passed:
        return
    fits = min(bound for bound, _ in bounds)
    # the bound that binds, and the episode's when it is passed too (the one a user sees for themselves)
    passed = [(bound, why) for i, (bound, why) in enumerate(bounds) if nstep > bound and (bound == fits or i == 1)]
    carry = f"{nstep - 1:,} steps" + (f" of each of the {num_envs:,} collector envs" if num_envs else " of each env")
    raise ConfigError(f"policy.nstep={nstep}: the n-step builder would carry {carry} waiting for their windows, "
                      f"and a window cannot usefully be that long: " + "; ".join(why for _, why in passed)
                      + f". Give policy.nstep <= {fits:,} (n-step returns are usually 3 to 10 steps)")


def collect_bytes(obs_bytes: int, num_envs: int, n_sample: int, nstep: int = 1) -> int:
    """The least host memory one collect holds for its observations, in bytes: each of the ``num_envs`` envs
    steps ``ceil(n_sample / num_envs)`` times; ``obs`` and ``next_obs`` are kept per step and stacked (two
    copies), then joined to the ``nstep - 1`` steps the n-step builder carries (``StepCollector``).

    Examples:
        >>> collect_bytes(obs_bytes=16, num_envs=8, n_sample=64, nstep=3)   # 8 steps an env, 2 carried
        4608
    """
    steps = math.ceil(n_sample / num_envs)
    return 2 * obs_bytes * num_envs * (2 * steps + nstep - 1)


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
        if nstep > MAX_SPAN:
            raise ValueError(f"policy.nstep={nstep}: a transition records its window's length in one byte (its "
                             f"span), so {MAX_SPAN} steps is the longest window; give policy.nstep <= {MAX_SPAN}")
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
            chunk = {k: cat([self._carry[k], v]) for k, v in chunk.items()}
        length = len(chunk["reward"])
        n = self.nstep
        starts = length - (n - 1)
        self._carry = {k: v[max(0, length - (n - 1)):] for k, v in chunk.items()}
        if starts <= 0:
            return {}
        return self._windows(chunk, starts)

    def _one_step(self, chunk: Batch) -> Batch:
        flat = {k: v.flatten(0, 1) for k, v in chunk.items()}  # [T, E, ...] -> [T * E, ...], per leaf of a tree
        flat["reward"] = flat["reward"].float()
        flat["discount"] = torch.full(flat["reward"].shape[:1], self.gamma, device=flat["reward"].device)
        flat["span"] = torch.ones(len(flat["reward"]), dtype=torch.uint8, device=flat["reward"].device)
        return flat

    def _windows(self, chunk: Batch, starts: int) -> Batch:
        n = self.nstep
        reward = chunk["reward"].float()
        done = chunk["terminated"] | chunk["truncated"]
        num_envs, device = reward.shape[1], reward.device  # a device env's chunks stay on its device
        agents = (1,) * (reward.dim() - 2)  # several agents per row (``data.parallel_envs``): each one's reward
        alive = torch.ones(starts, num_envs, dtype=torch.bool, device=device)
        ret = torch.zeros((starts,) + tuple(reward.shape[1:]), device=device)
        last = torch.full((starts, num_envs), n - 1, dtype=torch.long, device=device)
        for k in range(n):
            ret += self.gamma ** k * alive.reshape(alive.shape + agents) * reward[k:k + starts]
            ends_here = alive & done[k:k + starts]
            last = torch.where(ends_here, torch.full_like(last, k), last)
            alive = alive & ~done[k:k + starts]
        # the window's last step, as a time index into the chunk, per (start, env)
        t_last = torch.arange(starts, device=device).unsqueeze(1) + last
        env = torch.arange(num_envs, device=device).unsqueeze(0).expand(starts, num_envs)
        out = {k: v[:starts] for k, v in chunk.items() if k not in ("reward", "next_obs", "terminated", "truncated")}
        out["reward"] = ret
        out["next_obs"] = chunk["next_obs"][t_last, env]  # every leaf of a tree alike
        out["terminated"] = chunk["terminated"][t_last, env]
        out["truncated"] = chunk["truncated"][t_last, env]
        out["discount"] = self._gamma_pow.to(device)[last + 1]
        out["span"] = (last + 1).to(torch.uint8)
        return {k: v.flatten(0, 1) for k, v in out.items()}
