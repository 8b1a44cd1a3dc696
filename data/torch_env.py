"""Batched torch envs: thousands of envs as one tensor on a device, stepped with no host round trip.

rlstructures' ``DeviceEnv`` idea: where an env's dynamics are a few arithmetic operations (CartPole,
Pendulum), stepping every env of a collector is one batched tensor operation on the device where the policy
acts. Observations, rewards, ``terminated`` and ``truncated`` come back as tensors already on that device,
so the collector (``data.env_loop`` steps them) never copies to the host between steps; on a CPU it is also the
fastest way to run thousands of small envs (``bench/device_env.py``).

The contract is gymnasium's vector env in ``SAME_STEP`` autoreset mode (``data.envs``), with tensors:

- ``reset(seed=s)`` -> ``(obs [N, *obs_shape], {})``;
- ``step(action)`` -> ``(obs, reward [N] float32, terminated [N] bool, truncated [N] bool, info)``. An env
  whose episode ended is reset inside the step: ``obs`` holds its reset observation and
  ``info["final_obs"]`` the real next observation of every env (equal to ``obs`` where no episode ended),
  which a truncated transition bootstraps from. Nothing in a step reads a value back to the host: where
  episodes end, fresh initial states replace the old ones through ``torch.where``.
- ``terminated`` and ``truncated`` stay separate; ``truncated`` is gymnasium's ``TimeLimit``: set when an
  episode reaches ``max_episode_steps``, whether or not it also terminated there.

Seeding: all envs draw from one ``torch.Generator`` on the env's device, seeded by ``reset(seed=s)`` (a
list of seeds, as gymnasium's vector envs take, seeds it with its first). The same seed, env count and
device give the same episodes; CPU and CUDA generators differ, so a run on a GPU is not the run on a CPU.
The pipeline seeds each DDP rank's envs with its rank seed (``pipelines.assembly.rank_seed``).

An env family subclasses ``TorchVectorEnv`` with its dynamics (``dizoo/classic_control/*/torch_env.py``) and
registers a ``TorchEnvType`` (``create_config.env.type``): ``env.device`` places the collector's envs
(None: the device the policy collects on). The evaluator plays the gymnasium env the dynamics reproduce
(``gym_twin``), or steps the same dynamics on the CPU, through the same env loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Type

import gymnasium as gym
import numpy as np
import torch

from engine.devices import DeviceError, free_memory, parse_device
from engine.params import param

from .envs import EnvParams, check_env_section, highest_return

__all__ = ["TorchEnvParams", "TorchVectorEnv", "TorchEnvType", "follow_device", "check_fits"]

StepResult = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Dict[str, torch.Tensor]]


class TorchVectorEnv:
    """``num_envs`` envs of one family, their state one tensor on ``device``.

    A subclass sets ``single_observation_space``, ``single_action_space``, ``max_episode_steps`` and
    implements the three functions of its dynamics, each on all envs at once and without host reads:
    ``_initial_state(n)`` (draw from ``self.generator``), ``_dynamics(state, action)`` ->
    ``(next_state, reward, terminated)``, and ``_observe(state)`` -> ``[N, *obs_shape]``. They see the state
    as ``[state_dim, N]``, one contiguous row per variable: elementwise operations on rows run several
    times faster than on the strided columns of ``[N, state_dim]`` (the ``state`` property shows that
    layout).

    Args:
        num_envs: envs in the batch.
        device: where the state lives and the step runs (``cpu``, ``cuda``, ``cuda:N``).
        max_episode_steps: truncation length (None: the family's, as gymnasium registers it).
        dtype: of the state (float32; float64 computes as gymnasium's numpy envs do, for equivalence tests).
            Observations are float32 either way.
    """

    single_observation_space: gym.spaces.Box
    single_action_space: gym.Space
    max_episode_steps: int
    #: set by ``TorchEnvType.make_vector`` when ``env.device`` was given (``follow_device`` leaves it there)
    placed: bool = False

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", max_episode_steps: Optional[int] = None,
                 dtype: torch.dtype = torch.float32) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"a torch vector env needs at least 1 env, got num_envs={num_envs}")
        self.num_envs = int(num_envs)
        self.dtype = dtype
        if max_episode_steps:
            self.max_episode_steps = int(max_episode_steps)
        self.device = _indexed(device)
        self.generator = torch.Generator(self.device)
        self._seed: Optional[int] = None
        self._state: Optional[torch.Tensor] = None
        self._elapsed: Optional[torch.Tensor] = None
        self._constants: Dict[tuple, torch.Tensor] = {}

    # ---- the gymnasium vector-env surface ------------------------------------------------------
    def reset(self, *, seed: Any = None, options: Any = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Start every env's episode afresh; ``seed`` (an int, or a list whose first item is used) reseeds
        the generator, else it goes on from where it was."""
        if seed is not None:
            self._seed = int(seed[0] if isinstance(seed, (list, tuple, np.ndarray)) else seed)
            self.generator.manual_seed(self._seed)
        elif self._seed is None:
            self._seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
            self.generator.manual_seed(self._seed)
        self._state = self._initial_state(self.num_envs)
        self._elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        return self._observe(self._state), {}

    def step(self, action: Any) -> StepResult:
        """One step of every env; finished episodes restart inside it (the module docstring)."""
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__}.step before reset: call reset(seed=...) first")
        action = torch.as_tensor(action, device=self.device)
        state, reward, terminated = self._dynamics(self._state, action)
        elapsed = self._elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        final_obs = self._observe(state)
        done = terminated | truncated
        # fresh initial states for every env, kept where an episode ended: no host read of `done`
        self._state = torch.where(done, self._initial_state(self.num_envs), state)
        self._elapsed = elapsed.masked_fill(done, 0)
        return self._observe(self._state), reward.float(), terminated, truncated, {"final_obs": final_obs}

    def close(self) -> None:
        """Nothing to release (no processes, no files); the tensors go with the object."""

    @property
    def state(self) -> Optional[torch.Tensor]:
        """The envs' state, ``[N, state_dim]`` (None before the first reset). Assigning one starts the envs
        from it (a test comparing the dynamics with gymnasium's from the same states); their episodes go on."""
        return None if self._state is None else self._state.T

    @state.setter
    def state(self, value: torch.Tensor) -> None:
        if self._state is None:
            self.reset()
        value = torch.as_tensor(value, dtype=self.dtype, device=self.device)
        if value.shape != self._state.T.shape:
            raise ValueError(f"{type(self).__name__}.state must have shape {tuple(self._state.T.shape)}, got "
                             f"{tuple(value.shape)}")
        self._state = value.T.contiguous()

    def to(self, device: str | torch.device) -> "TorchVectorEnv":
        """Move the envs to ``device``; a new generator there, seeded as at the last reset (the next
        ``reset(seed=...)`` reseeds it anyway)."""
        device = _indexed(device)
        if device != self.device:
            self.device = device
            self.generator = torch.Generator(device)
            if self._seed is not None:
                self.generator.manual_seed(self._seed)
            if self._state is not None:
                self._state, self._elapsed = self._state.to(device), self._elapsed.to(device)
        return self

    @classmethod
    def bytes_per_env(cls, dtype: torch.dtype = torch.float32) -> int:
        """What one env holds on its device during a step, at most: its state three times (the state, the next
        one, the fresh initial states ``torch.where`` picks from), its observation twice (``obs`` and
        ``final_obs``), the reward, the three flags and two step counters. The state's size is the
        observation's where a family does not say (``state_dim``)."""
        obs = int(np.prod(cls.single_observation_space.shape)) * 4
        state = int(getattr(cls, "state_dim", 0) or np.prod(cls.single_observation_space.shape))
        return 3 * state * torch.empty((), dtype=dtype).element_size() + 2 * obs + 4 + 3 + 2 * 8

    # ---- the dynamics of a family ----------------------------------------------------------------
    def _initial_state(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def _dynamics(self, state: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _uniform(self, n: int, high: Tuple[float, ...]) -> torch.Tensor:
        """``[len(high), n]`` draws from U(-high, high) of the env's generator (gymnasium's reset draws)."""
        u = torch.rand((len(high), n), generator=self.generator, dtype=self.dtype, device=self.device)
        return u.mul_(2).sub_(1).mul_(self._constant(high).unsqueeze(1))

    def _constant(self, values: Tuple[float, ...]) -> torch.Tensor:
        """``values`` as a tensor of the state's dtype on the env's device, made once (per device)."""
        key = (values, self.device)
        constant = self._constants.get(key)
        if constant is None:
            constant = self._constants[key] = torch.tensor(values, dtype=self.dtype, device=self.device)
        return constant


@dataclass
class TorchEnvParams(EnvParams):
    """The ``env`` section of a torch env type (``TorchEnvType``): many envs by default, as one batched step."""

    collector_env_num: int = param(64, rule="at_least_one")
    """Envs the collector steps together, as one batched tensor operation."""
    device: Optional[str] = param(None)
    """The collector's envs' device; None: the device the policy collects on (``policy.device.collect`` or the
    learner's)."""


class TorchEnvType:
    """An env ``type`` for ``create_config`` whose envs are a ``TorchVectorEnv`` subclass.

    Args:
        env_id: the name a run records (checkpoint meta, logs), e.g. ``"CartPole-torch"``; no gymnasium id.
        env_cls: the ``TorchVectorEnv`` subclass.
        stop_value: evaluation return at which training stops by default.
        gym_twin: the gymnasium id whose dynamics ``env_cls`` reproduces (``"CartPole-v1"``): evaluation plays
            that env itself, so the reference env judges what the torch dynamics trained (and a few envs step
            faster in numpy than through torch's per-operation overhead). Without one, evaluation steps
            ``env_cls`` on the CPU.
        best_step_reward, best_return: what bounds an episode's return (``data.envs.GymEnvType``).
        defaults: further default config values.

    Config keys beside the usual ones (``collector_env_num`` ...): ``device`` (the collector's envs; None:
    the device the policy collects on, ``policy.device.collect`` or the learner's) and
    ``max_episode_steps`` (None: the family's truncation length).
    """

    #: its envs step as one batched operation: ``data.envs.make_vector_env`` refuses env groups for them
    batched = True
    #: the keys of its ``env`` section
    Params: Type[EnvParams] = TorchEnvParams

    def __init__(self, env_id: str, env_cls: type, stop_value: float, gym_twin: Optional[str] = None, *,
                 best_step_reward: Optional[float] = None, best_return: Optional[float] = None,
                 **defaults: Any) -> None:
        self.env_id = env_id
        self.env_cls = env_cls
        self.gym_twin = gym_twin
        self.best_step_reward, self.best_return = best_step_reward, best_return
        self.params = self.Params.of(dict(env_id=env_id, stop_value=float(stop_value), **defaults), "env")

    def default_config(self) -> Dict[str, Any]:
        """Its ``env`` section's defaults (``Params`` with this type's own values)."""
        return self.params.to_dict()

    def check_config(self, cfg: Mapping[str, Any]) -> None:
        """The compiled config's ``env`` section at compile time (``data.envs.check_env_section``; its envs are
        one batched tensor, no worker processes)."""
        check_env_section(cfg, processes=False)

    def highest_return(self, env_cfg: Mapping[str, Any]) -> Optional[float]:
        """The highest return an episode can reach, where known (``data.envs.highest_return``): evaluation plays
        the gymnasium twin, whose episode limit bounds the return judged."""
        twin = dict(env_cfg, env_id=self.gym_twin) if self.gym_twin is not None else env_cfg
        return highest_return(twin, self.best_step_reward, self.best_return)

    def make_vector(self, env_cfg: Mapping[str, Any], num_envs: int, seed: int, training: bool = True,
                    manager: str = "sync") -> Any:
        """The collector's envs on ``env.device`` (reset with ``seed``); for evaluation (``training=False``)
        the gymnasium twin's vector env, or the same dynamics on the CPU.

        Raises:
            engine.devices.DeviceError: ``env.device`` names a device this process does not have.
        """
        settings = self.Params.of(env_cfg, "env")
        if not training and self.gym_twin is not None:
            from .envs import GymEnvType, make_vector_env

            twin = GymEnvType(self.gym_twin, stop_value=settings.stop_value)
            twin_cfg = dict(twin.default_config(), max_episode_steps=settings.max_episode_steps)
            return make_vector_env(twin, twin_cfg, num_envs, seed, manager="sync", training=False)
        spec = settings.device
        device = parse_device(spec, "env.device") if spec is not None and training else "cpu"
        check_fits(self.env_cls, num_envs, device)
        env = self.env_cls(num_envs, device=device, max_episode_steps=settings.max_episode_steps)
        env.placed = spec is not None and training
        env.reset(seed=seed)
        return env


def _indexed(device: str | torch.device) -> torch.device:
    """``cuda`` as ``cuda:N`` (the current GPU), as the tensors made there report it."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def follow_device(env: Any, device: str | torch.device) -> Any:
    """A torch vector env whose ``env.device`` was left None moves to ``device`` (the device the policy
    collects on, known once the policy is built); any other env is returned as it is."""
    if isinstance(env, TorchVectorEnv) and not env.placed:
        check_fits(type(env), env.num_envs, device, env.dtype)
        env.to(device)
    return env


#: the share of a device's free memory the envs may take: the policy, the rollout and the allocator need the rest
FREE_SHARE = 0.5


def check_fits(env_cls: Type[TorchVectorEnv], num_envs: int, device: str | torch.device,
               dtype: torch.dtype = torch.float32) -> None:
    """Refuse, before anything is allocated, more envs than ``device`` holds (``bytes_per_env`` against
    ``FREE_SHARE`` of its free memory), naming the estimate, the limit and the most envs that fit.

    Raises:
        engine.devices.DeviceError: the envs would not fit.
    """
    free = free_memory(device)
    if free is None:
        return
    per_env = env_cls.bytes_per_env(dtype)
    need, limit = per_env * int(num_envs), int(free * FREE_SHARE)
    if need > limit:
        raise DeviceError(f"{num_envs:,} {env_cls.__name__} envs need about {_size(need)} on {device} ({per_env} "
                          f"bytes each per step, the envs' own tensors only), more than half of its {_size(free)} free "
                          f"({_size(limit)}); use "
                          f"at most {limit // per_env:,} envs (env.collector_env_num) or another device (env.device)")


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.2f} MiB"
