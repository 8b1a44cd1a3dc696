"""Collectors: every env through the one loop (``data.env_loop.EnvLoop``), one batched policy forward per step.

One ``StepCollector`` call, for ``E`` envs and ``T = ceil(n_sample / E)`` vector steps:

1. ``T`` loop steps, each kept as it came: the policy acted on the current observations, the envs stepped,
   ``next_obs`` is the real next observation (the final one where an episode ended). Gymnasium envs give host
   tensors; a batched torch env (``data.torch_env``) gives tensors on its device, and then nothing is read back
   to the host between steps (tests/middleware/test_device_collector.py counts host reads). With env groups
   (``env.manager.overlap``) the policy acts on one group while the other steps, and row ``e`` of step ``t``
   is still env ``e``'s step ``t``;
2. once per call: the steps are stacked into a ``[T, E]`` chunk on the envs' device (what the policy returned
   besides the action, e.g. log-probs and values, moved there too), checked finite, and the returns of the
   episodes that ended are read back, together;
3. the chunk becomes n-step transitions per env stream (``NStepBuilder``), or stays time-major for on-policy
   learning (with the policy's log-probs and values, for GAE); ``ctx.trajectories`` gets them as one batch
   (``data.batch``), and ``ctx.env_step``, ``ctx.env_episode``, ``ctx.episode_returns`` and
   ``ctx.collect_stats`` are updated.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from data.batch import make_batch
from data.env_loop import EnvLoop, Finished
from data.nstep import NStepBuilder, collect_bytes
from data.obs import all_finite, cat, index_rows, leaves, space_nbytes, stack
from engine.config import ConfigError
from engine.context import OnlineRLContext
from engine.distributed import get_world_size
from engine.host import gib, host_memory_bytes
from engine.protocols import CollectPolicy, VectorEnv, require

__all__ = ["StepCollector", "EpisodeCollector", "NonFiniteDataError"]


class NonFiniteDataError(ValueError):
    """An env returned NaN or infinite observations or rewards."""


def _check_finite(obs: np.ndarray, next_obs: np.ndarray, reward: np.ndarray, env_id: Optional[str] = None,
                  env_step: Optional[int] = None, key: str = "") -> None:
    """Name bad data where it enters, not as a NaN loss many updates later (one vectorized pass per call).

    Each array is ``[T, E, *shape]``: the first non-finite value of the earliest step is named with its
    field, its env, its element (for array observations) and its step; with the env's id and the run's env
    steps before this collection when given (a simulator that diverged, e.g. MuJoCo's, is found by them).
    """
    first = None  # (step, env, name, element, value); within a step, in the order the env produced them
    for name, values in ((f"observation{key}", obs), ("reward", reward), (f"next observation{key}", next_obs)):
        if values.dtype.kind != "f":
            continue
        finite = np.isfinite(values)
        if finite.all():
            continue
        where = tuple(int(i) for i in np.argwhere(~finite)[0])
        if first is None or where[0] < first[0]:
            first = (where[0], where[1], name, where[2:], values[where].item())
    if first is not None:
        step, env, name, element, value = first
        shape = f" at element {list(element)} of shape {tuple(obs.shape[2:])}" if element else ""
        where = [f"env id {env_id!r}"] if env_id else []
        where += [f"{env_step:,} env steps into the run"] if env_step is not None else []
        raise NonFiniteDataError(f"env {env} returned a non-finite {name} ({value}{shape}) at step {step} of this "
                                 f"collection{' (' + ', '.join(where) + ')' if where else ''}: the env must return "
                                 f"finite numbers (check its wrapper, its reward computation or, for a simulator, "
                                 f"its stability at these actions)")


def _check_finite_obs(obs: Any, next_obs: Any, reward: torch.Tensor, env_id: Optional[str] = None,
                      env_step: Optional[int] = None) -> None:
    """``_check_finite`` on a chunk's tensors, leaf by leaf for a dictionary observation (``data.obs``): the
    error then names the key that held the non-finite value (``observation ['vec']``)."""
    reward_np = reward.numpy(force=True)
    for (path, o), (_, n) in zip(leaves(obs), leaves(next_obs)):
        _check_finite(o.numpy(force=True), n.numpy(force=True), reward_np, env_id, env_step,
                      key=f" {list(path)}" if path else "")


def record_counts(ctx: OnlineRLContext, env_steps: int, samples: int, returns: List[float], start: float,
                  agent_returns: Optional[List[List[float]]] = None) -> None:
    """What every collector adds to the context after a call that began at ``start`` (``time.perf_counter``):
    the env steps, the finished episodes and their returns (and each agent's, ``agent_returns``, in a
    multi-agent env), the seconds it took (summed over ranks under DDP: the logger's global collection speed),
    and this call's ``collect_stats``."""
    ctx.env_step += env_steps
    ctx.env_episode += len(returns)
    ctx.episode_return_total += float(sum(returns))
    ctx.episode_returns = returns
    ctx.agent_episode_returns = agent_returns
    duration = time.perf_counter() - start
    ctx.collect_time_total += duration
    ctx.collect_stats = {"samples": samples, "env_steps": env_steps, "episodes": len(returns), "duration": duration}


def record_chunk(ctx: OnlineRLContext, chunk: Dict[str, Any], nstep: Optional[NStepBuilder], env_steps: int,
                 finished: Finished, start: float) -> None:
    """A step collector's ``[T, E]`` chunk into ``ctx.trajectories``: as it is (``nstep`` None: the on-policy,
    time-major mode), or through the n-step builder (off-policy); then ``record_counts`` with the episodes that
    ``finished`` in it."""
    if nstep is None:
        transitions, samples = chunk, env_steps
    else:
        transitions = nstep.push(chunk)
        samples = len(transitions.get("reward", ()))
    ctx.trajectories = make_batch(transitions) if transitions else None
    agent_returns = None if finished.agent_returns is None else finished.agent_returns.tolist()
    record_counts(ctx, env_steps, samples, finished.returns.tolist(), start, agent_returns)


class _EnvLoopOwner:
    """What both collectors show of the env loop they drive."""

    _loop: EnvLoop

    @property
    def env(self) -> VectorEnv:
        """The vector env it steps (its ``device``, ``num_envs``), for middleware of your own."""
        return self._loop.env


class StepCollector(_EnvLoopOwner):
    """Collect ``n_sample`` transitions per call into ``ctx.trajectories``.

    Args:
        policy: ``policy.collect_mode``: its forward answers a tensor with tensors.
        env: a vector env in SAME_STEP autoreset mode: gymnasium's (``data.envs.make_vector_env``), env groups,
            or a batched torch env (``data.torch_env``), whose transitions stay on its device.
        n_sample: transitions per call (rounded up to whole vector steps).
        nstep: n-step return length (off-policy).
        gamma: discount factor of the n-step returns.
        seed: env i is first reset with ``seed + i`` (a torch env's one generator with ``seed``).
        time_major: the on-policy mode: keep ``ctx.trajectories`` as one-step ``[T, E]`` chunks, with
            whatever else the policy returned (log-probs, values), for GAE; no n-step.
        overlap: step env groups while the policy acts (``data.env_loop``); default: whenever ``env`` is
            ``EnvGroups`` (``make_vector_env`` builds them for ``env.manager.overlap``).
        env_id: the envs' id, named by the error of a non-finite observation or reward.
        max_env_step: the run's env-step budget (off-policy): the call that reaches it collects only the vector
            steps left (this rank's share under DDP), so the run ends at its budget rounded up to whole vector
            steps rather than a whole collect past it. An on-policy rollout is never cut: its length is what
            GAE and the recurrent sequences are built for.
    """

    def __init__(self, policy: CollectPolicy, env: VectorEnv, n_sample: int, *, nstep: int = 1,
                 gamma: float = 0.99, seed: int = 0, time_major: bool = False,
                 overlap: Optional[bool] = None, env_id: Optional[str] = None,
                 max_env_step: Optional[int] = None) -> None:
        require(policy, CollectPolicy, "the collector's policy")
        n_sample = int(n_sample)
        if n_sample <= 0:
            raise ValueError(f"policy.collect.n_sample must be positive, got {n_sample}")
        if not time_major and int(nstep) > 1 and callable(getattr(policy, "initial_state", None)):
            raise ValueError(f"{type(getattr(policy, 'policy', policy)).__name__} is recurrent: its steps depend on "
                             f"the memory of the steps before them, which the n-step windows of policy.nstep={nstep} "
                             f"skip; give policy.nstep=1 (its one-step transitions, with the memory each acted from, "
                             f"are replayed as sequences: data.replay.SequenceStorage)")
        self._loop = EnvLoop(policy, env, seed, overlap=overlap)
        self.overlap = self._loop.overlap
        self.num_envs = env.num_envs
        self.steps_per_call = math.ceil(n_sample / self.num_envs)
        _check_collect_memory(env, self.num_envs, n_sample, 1 if time_major else int(nstep))
        self._nstep = None if time_major else NStepBuilder(int(nstep), float(gamma))
        self._env_id = env_id
        self._budget = None if time_major or max_env_step is None else int(max_env_step)
        self._ranks = get_world_size()

    def __call__(self, ctx: OnlineRLContext) -> None:
        start = time.perf_counter()
        steps, envs = self.steps_per_call, self.num_envs
        if self._budget is not None:  # the last call collects what is left of the budget (ctx.env_step: global)
            steps = max(1, min(steps, math.ceil((self._budget - ctx.env_step) / (envs * self._ranks))))
        obs, next_obs, reward, terminated, truncated = [], [], [], [], []
        out: Dict[str, List[torch.Tensor]] = {}
        # 1. the steps, kept as they come: appends only, this loop is the collector's whole overhead
        for step in self._loop.run(steps, ctx.collect_kwargs):
            obs.append(step.obs)
            next_obs.append(step.next_obs)
            reward.append(step.reward)
            terminated.append(step.terminated)
            truncated.append(step.truncated)
            for key, value in step.out.items():  # the action, and log-probs, values, raw actions, memories
                out.setdefault(key, []).append(value)
        # 2. one [T, E] chunk on the envs' device, checked, and the finished episodes' returns: read back together
        reward_t = torch.stack(reward)
        device = reward_t.device  # the envs': the host for gymnasium envs
        policy_out = {key: torch.stack(values).to(device) for key, values in out.items()}
        chunk = {"obs": stack(obs), "action": policy_out.pop("action"), "reward": reward_t.float(),
                 "next_obs": stack(next_obs), "terminated": torch.stack(terminated),
                 "truncated": torch.stack(truncated), **policy_out}
        finished = self._loop.finished()
        if not all_finite(chunk["obs"], chunk["next_obs"], chunk["reward"]):
            _check_finite_obs(chunk["obs"], chunk["next_obs"], chunk["reward"], self._env_id, ctx.env_step)
        # 3. n-step transitions or the time-major chunk, and the counters
        record_chunk(ctx, chunk, self._nstep, steps * envs, finished, start)


def _check_collect_memory(env: Any, num_envs: int, n_sample: int, nstep: int) -> None:
    """Refuse, before the first collect, a collect whose observations (``data.nstep.collect_bytes``, from the
    env's observation space) cannot fit in this machine's memory; envs whose chunks stay on a device of their
    own are left to it (a batched torch env on a GPU).

    Raises:
        engine.config.ConfigError: naming ``env.collector_env_num``, ``policy.collect.n_sample``, the bytes and
            the machine's memory.
    """
    space = getattr(env, "single_observation_space", None)
    device = getattr(env, "device", None)
    obs_bytes = space_nbytes(space) if space is not None else 0  # every leaf of a Dict or Tuple space
    if not obs_bytes or (device is not None and torch.device(device).type != "cpu"):
        return
    memory = host_memory_bytes()
    needed = collect_bytes(obs_bytes, num_envs, n_sample, nstep)
    if memory is None or needed <= memory:
        return
    raise ConfigError(f"env.collector_env_num={num_envs} with policy.collect.n_sample={n_sample}: one collect holds "
                      f"the observations of {num_envs:,} envs x {math.ceil(n_sample / num_envs):,} steps"
                      + (f" and {nstep - 1} steps each waiting for their n-step windows" if nstep > 1 else "")
                      + f" ({obs_bytes:,} bytes an observation, {space}), at least {gib(needed)} of host memory, "
                      f"more than this machine's {gib(memory)}: give fewer envs or a smaller policy.collect.n_sample")


class EpisodeCollector(_EnvLoopOwner):
    """Collect ``n_episode`` whole episodes per call into ``ctx.episodes`` (a list of one-step episode
    batches) and their concatenation into ``ctx.trajectories``.

    Episodes in progress when a call ends carry over to the next call, per env.

    Args:
        policy: ``policy.collect_mode``.
        env: a vector env in SAME_STEP autoreset mode.
        n_episode: episodes per call (default: one per env).
        gamma: written as each transition's ``discount``.
        seed: env i is first reset with ``seed + i``.
    """

    def __init__(self, policy: CollectPolicy, env: VectorEnv, n_episode: Optional[int] = None, *,
                 gamma: float = 0.99, seed: int = 0) -> None:
        require(policy, CollectPolicy, "the collector's policy")
        self._loop = EnvLoop(policy, env, seed)
        self.n_episode = int(n_episode or env.num_envs)
        if self.n_episode <= 0:
            raise ValueError(f"n_episode must be positive, got {self.n_episode}")
        self._gamma = float(gamma)
        self._open: List[List[Dict[str, Any]]] = [[] for _ in range(env.num_envs)]

    def __call__(self, ctx: OnlineRLContext) -> None:
        start = time.perf_counter()
        loop = self._loop
        episodes: List[Any] = []
        returns: List[float] = []
        env_steps = 0
        while len(episodes) < self.n_episode:
            step = loop.step(ctx.collect_kwargs)
            env_steps += loop.num_envs
            fields = dict(obs=step.obs, action=step.action.to(step.reward.device), reward=step.reward,
                          next_obs=step.next_obs, terminated=step.terminated, truncated=step.truncated)
            for i in range(loop.num_envs):
                self._open[i].append({key: index_rows(value, i) for key, value in fields.items()})
            ended = step.ended_envs()
            for i in ended:
                if len(episodes) < self.n_episode:
                    episodes.append(self._to_episode(self._open[i]))
                self._open[i] = []
            if ended:
                returns.extend(loop.finished().returns.tolist())
        ctx.episodes = episodes
        ctx.trajectories = make_batch({k: cat([e[k] for e in episodes])
                                       for k in ("obs", "action", "reward", "next_obs", "terminated",
                                                 "truncated", "discount")})
        record_counts(ctx, env_steps, len(ctx.trajectories.reward), returns, start)

    def _to_episode(self, steps: List[Dict[str, Any]]) -> Any:
        data = {k: stack([s[k] for s in steps]) for k in steps[0]}
        data["reward"] = data["reward"].float()
        data["discount"] = torch.full((len(steps),), self._gamma)
        return make_batch(data)
