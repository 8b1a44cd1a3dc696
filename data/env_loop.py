"""The one env-stepping loop: a batched policy forward, one vector-env step, and the bookkeeping every
user of an env needs. The collectors and the evaluator all step envs through it.

One ``EnvLoop.step``:

1. ``act``: ``policy.forward(obs, **kwargs)`` on the current observations of all envs (one row per env);
   the action comes back as numpy (tensors on any device are copied to the host);
2. one ``env.step(action)``;
3. ``observe``: where an episode ended (terminated or truncated), the real last observation
   (``info["final_obs"]``, gymnasium's SAME_STEP autoreset) replaces the reset observation in
   ``next_obs``, and the episode's return and length are reported, then restarted.

A recurrent policy (one whose mode has ``initial_state(num_envs)``, e.g. ``ppo_lstm``) keeps its memory in
the loop, not in itself: ``act`` passes the loop's ``state`` (one row per env) as ``forward(obs, state=...)``,
and ``observe`` keeps the forward's ``next_state``, with the rows of envs whose episode ended (terminated or
truncated alike) set back to the initial (zero) state. In SAME_STEP autoreset the observation after such a
step is already the new episode's first, so the next forward starts it from zero memory. Holding the state
in the loop gives every loop its own: the collector's, each env group's of an overlapped collector, the
evaluator's.

``act`` and ``observe`` are separate so that a loop over env groups (``data.env_groups``) can run the policy
on one group while another steps.
"""
from __future__ import annotations

from typing import Any, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch

from engine.protocols import CollectPolicy, EvalPolicy, VectorEnv

__all__ = ["EnvLoop", "EnvStep", "to_numpy", "reset_rows"]

_NO_KWARGS: Mapping[str, Any] = {}


def to_numpy(value: Any) -> np.ndarray:
    """Policy outputs as numpy: tensors (on any device) are detached and copied to the host."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def reset_rows(state: torch.Tensor, rows: Any) -> torch.Tensor:
    """A recurrent ``state`` (one row per env) with ``rows`` set to zero, the initial state; a new tensor
    where any row changes, since the policy's output that ``state`` is may also be stored (the collector keeps
    it as the step's ``next_state``, from which GAE bootstraps a truncated episode).

    Examples:
        >>> reset_rows(torch.ones(3, 2), [1]).tolist()
        [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    """
    if len(rows) == 0:
        return state
    state = state.clone()
    state[torch.as_tensor(np.asarray(rows), dtype=torch.long, device=state.device)] = 0
    return state


class EnvStep(NamedTuple):
    """What one vector step produced; arrays have one row per env."""

    obs: np.ndarray            # the observations the policy acted on
    out: dict                  # everything the policy returned (``action``, and ``logp``/``value``, ...)
    action: np.ndarray         # the action sent to the env, as numpy
    next_obs: np.ndarray       # the real next observation (the final one where an episode ended)
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    done_envs: Any             # indices of the envs whose episode ended in this step (empty tuple: none)
    returns: List[float]       # the returns of those episodes, in the same order
    lengths: List[int]         # their lengths in env steps


class EnvLoop:
    """Steps ``env`` with ``policy``, keeping the current observations and per-env episode statistics.

    Args:
        policy: anything with ``forward(obs, **kwargs) -> {"action": ...}`` (a collect or eval mode).
        env: a vector env in SAME_STEP autoreset mode (``data.envs.make_vector_env``).
        seed: env i is reset with ``seed + i`` the first time (``reset`` can pass other seeds).
    """

    def __init__(self, policy: Union[CollectPolicy, EvalPolicy], env: VectorEnv, seed: int = 0) -> None:
        self.policy = policy
        self.env = env
        self.num_envs = env.num_envs
        self.seed = seed
        self.obs: Optional[np.ndarray] = None
        self._return = np.zeros(self.num_envs, dtype=np.float64)
        self._started_at = np.zeros(self.num_envs, dtype=np.int64)  # loop step at which each episode began
        self._steps = 0
        initial_state = getattr(policy, "initial_state", None)
        self._initial_state = initial_state if callable(initial_state) else None
        #: a recurrent policy's memory, one row per env (None: a feed-forward policy)
        self.state: Any = None

    def reset(self, seed: Optional[int] = None) -> np.ndarray:
        """Reset every env (env i with ``seed + i``; default the loop's seed) and restart its episode."""
        seed = self.seed if seed is None else seed
        self.obs, _ = self.env.reset(seed=[seed + i for i in range(self.num_envs)])
        self._return[:] = 0.0
        self._started_at[:] = self._steps
        if self._initial_state is not None:
            self.state = self._initial_state(self.num_envs)
        return self.obs

    def current_obs(self) -> np.ndarray:
        """The observations the next step acts on (the envs are reset on first use)."""
        return self.obs if self.obs is not None else self.reset()

    def step(self, policy_kwargs: Mapping[str, Any] = _NO_KWARGS) -> EnvStep:
        """One act + env step; ``policy_kwargs`` go to ``policy.forward`` (e.g. ``{"eps": 0.1}``)."""
        obs, out, action = self.act(policy_kwargs)
        return self.observe(obs, out, action, self.env.step(action))

    def run(self, steps: int, policy_kwargs: Mapping[str, Any] = _NO_KWARGS) -> Iterator[EnvStep]:
        """``steps`` loop steps, one ``EnvStep`` each (the interface ``data.env_groups.OverlappedEnvLoop``
        shares)."""
        for _ in range(steps):
            yield self.step(policy_kwargs)

    def act(self, policy_kwargs: Mapping[str, Any] = _NO_KWARGS) -> Tuple[np.ndarray, dict, np.ndarray]:
        """The policy's forward on the current observations: ``(obs, out, action as numpy)``."""
        obs = self.current_obs()
        obs_t = torch.as_tensor(obs)
        if self._initial_state is None:
            out = self.policy.forward(obs_t, **policy_kwargs)
        else:
            out = self.policy.forward(obs_t, state=self.state, **policy_kwargs)
        action = out["action"]
        if type(action) is not np.ndarray:
            action = to_numpy(action)
        return obs, out, action

    def observe(self, obs: np.ndarray, out: dict, action: np.ndarray, result: Tuple) -> EnvStep:
        """The bookkeeping of one step: ``result`` is what ``env.step(action)`` returned for ``act``'s action."""
        next_obs, reward, terminated, truncated, info = result
        self._steps += 1
        self._return += reward
        real_next, done_envs, returns, lengths = next_obs, (), [], []
        if terminated.any() or truncated.any():
            done = terminated | truncated
            done_envs = np.flatnonzero(done)
            real_next = next_obs.copy()
            final = info["final_obs"]
            for i in done_envs:
                real_next[i] = final[i]
            returns = self._return[done_envs].tolist()
            lengths = (self._steps - self._started_at[done_envs]).tolist()
            self._return[done] = 0.0
            self._started_at[done] = self._steps
        if self._initial_state is not None:
            self.state = reset_rows(out["next_state"], done_envs)
        self.obs = next_obs
        return EnvStep(obs, out, action, real_next, reward, terminated, truncated, done_envs, returns, lengths)
