"""The collector of batched torch envs (``data.torch_env``): every tensor stays on the envs' device.

``StepCollector`` steps gymnasium envs: numpy observations, actions copied to the host every step. A
``TorchVectorEnv`` returns tensors already on its device, and the policy's collect mode, given a tensor,
answers with tensors on its device (``policies``: PPO, A2C, DQN, SAC). So one ``DeviceStepCollector`` call,
for ``E`` envs and ``T = ceil(n_sample / E)`` vector steps, is:

1. ``T`` steps, each: the policy acts on the current observations, the envs step (finished episodes restart
   inside the step, ``info["final_obs"]`` holds the real next observations), and the step's tensors are
   written into preallocated ``[T, E]`` buffers on the device, with each env's running episode return;
   nothing is read back to the host (tests/middleware/test_device_collector.py counts host reads);
   A recurrent policy (``ppo_lstm``) acts from each env's memory, kept here and zeroed where an episode
   ended, as ``data.env_loop`` does for gymnasium envs;
2. once per call: the data is checked finite and the returns of the episodes that ended are read back,
   together (the logger and ``ctx.episode_returns`` need them as numbers);
3. as ``StepCollector``: n-step transitions per env stream (``NStepBuilder``), or the time-major chunk for
   on-policy learning, go to ``ctx.trajectories`` as one batch on the device, where the replay buffer
   (``policy.other.replay_buffer.device``) or the GAE and the learner take them; the context's counters are
   updated the same way.
"""
from __future__ import annotations

import math
import time
from typing import Dict, Optional

import torch

from data.nstep import NStepBuilder
from data.torch_env import TorchVectorEnv
from engine.context import OnlineRLContext
from engine.protocols import CollectPolicy, require

from .collector import _check_finite, record_chunk

__all__ = ["DeviceStepCollector"]


class DeviceStepCollector:
    """Collect ``n_sample`` transitions per call from a ``TorchVectorEnv`` into ``ctx.trajectories``, on the
    envs' device.

    Args:
        policy: ``policy.collect_mode``; its forward must answer a tensor with tensors.
        env: the batched torch envs.
        n_sample: transitions per call (rounded up to whole vector steps).
        nstep: n-step return length (off-policy).
        gamma: discount factor of the n-step returns.
        seed: the envs are first reset with it (one generator for all of them, ``data.torch_env``).
        time_major: the on-policy mode: ``ctx.trajectories`` keeps the one-step ``[T, E]`` chunk, with the
            policy's log-probs and values, for GAE.
    """

    def __init__(self, policy: CollectPolicy, env: TorchVectorEnv, n_sample: int, *, nstep: int = 1,
                 gamma: float = 0.99, seed: int = 0, time_major: bool = False) -> None:
        require(policy, CollectPolicy, "the collector's policy")
        if not isinstance(env, TorchVectorEnv):
            raise TypeError(f"DeviceStepCollector steps a data.torch_env.TorchVectorEnv, got {type(env).__name__}: "
                            f"use middleware.StepCollector for gymnasium vector envs")
        self._recurrent = callable(getattr(policy, "initial_state", None))
        if self._recurrent and not time_major:
            raise ValueError(f"{type(getattr(policy, 'policy', policy)).__name__} is recurrent: its steps depend on "
                             f"the memory of the steps before them, which n-step transitions for a replay buffer "
                             f"lose; collect for it in the on-policy mode (time_major=True)")
        n_sample = int(n_sample)
        if n_sample <= 0:
            raise ValueError(f"policy.collect.n_sample must be positive, got {n_sample}")
        self.policy = policy
        self.env = env
        self.seed = seed
        self.num_envs = env.num_envs
        self.steps_per_call = math.ceil(n_sample / self.num_envs)
        self._nstep = None if time_major else NStepBuilder(int(nstep), float(gamma))
        self._obs_shape = tuple(env.single_observation_space.shape)
        self._obs: Optional[torch.Tensor] = None
        self._episode_return: Optional[torch.Tensor] = None
        self._state: Optional[torch.Tensor] = None  # a recurrent policy's memory, one row per env

    def __call__(self, ctx: OnlineRLContext) -> None:
        start = time.perf_counter()
        env, policy, kwargs = self.env, self.policy, ctx.collect_kwargs
        steps, envs, device = self.steps_per_call, self.num_envs, env.device
        if self._obs is None:  # first use: reset with the seed
            self._obs = env.reset(seed=self.seed)[0]
            self._episode_return = torch.zeros(envs, dtype=torch.float64, device=device)
            if self._recurrent:
                self._state = policy.initial_state(envs)
        obs_buf = torch.empty((steps, envs) + self._obs_shape, dtype=torch.float32, device=device)
        next_buf = torch.empty_like(obs_buf)
        reward_buf = torch.empty((steps, envs), dtype=torch.float32, device=device)
        term_buf = torch.empty((steps, envs), dtype=torch.bool, device=device)
        trunc_buf = torch.empty_like(term_buf)
        return_buf = torch.empty((steps, envs), dtype=torch.float64, device=device)  # episode return so far
        out_bufs: Dict[str, torch.Tensor] = {}  # action and whatever else the policy returns, made at step 0
        episode_return = self._episode_return
        for t in range(steps):
            # 1. act on the current observations, and keep what the policy returned
            obs = self._obs
            out = policy.forward(obs, **kwargs) if not self._recurrent else policy.forward(obs, state=self._state,
                                                                                            **kwargs)
            for key, value in out.items():
                if t == 0 and key not in out_bufs:
                    if not isinstance(value, torch.Tensor):
                        raise TypeError(f"the collect mode of {type(getattr(policy, 'policy', policy)).__name__} "
                                        f"returned {key!r} as {type(value).__name__} for observations on {device}: "
                                        f"a device env needs a policy whose collect forward answers a tensor with "
                                        f"tensors (PPO, A2C, DQN, SAC do)")
                    out_bufs[key] = torch.empty((steps,) + tuple(value.shape), dtype=value.dtype, device=device)
                out_bufs[key][t] = value
            # 2. step every env; those whose episode ended restart inside the step
            next_obs, reward, terminated, truncated, info = env.step(out["action"])
            # 3. the step's tensors, and each env's episode return (restarted where the episode ended)
            obs_buf[t] = obs
            next_buf[t] = info["final_obs"]
            reward_buf[t] = reward
            term_buf[t] = terminated
            trunc_buf[t] = truncated
            episode_return += reward
            return_buf[t] = episode_return
            episode_return.masked_fill_(terminated | truncated, 0.0)
            if self._recurrent:  # an episode that ended starts its successor from zero memory (data.env_loop)
                next_state = out["next_state"]
                ended = (terminated | truncated).reshape((envs,) + (1,) * (next_state.dim() - 1))
                self._state = next_state.masked_fill(ended, 0.0)
            self._obs = next_obs
        # once per call: the checks and the finished episodes' returns, read back together
        done_buf = term_buf | trunc_buf
        finite = torch.isfinite(obs_buf).all() & torch.isfinite(next_buf).all() & torch.isfinite(reward_buf).all()
        if not bool(finite):  # the error path only: it reads the data back to name the first bad value
            _check_finite(obs_buf.cpu().numpy(), next_buf.cpu().numpy(), reward_buf.cpu().numpy(),
                          env_step=ctx.env_step)
        returns = return_buf[done_buf].tolist()
        chunk = {"obs": obs_buf, "action": out_bufs.pop("action"), "reward": reward_buf, "next_obs": next_buf,
                 "terminated": term_buf, "truncated": trunc_buf, **out_bufs}
        record_chunk(ctx, chunk, self._nstep, steps * envs, returns, start)

