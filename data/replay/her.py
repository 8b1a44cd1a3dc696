"""Hindsight experience replay (HER; Andrychowicz et al., 2017, "Hindsight Experience Replay"): a replay of
goal-conditioned transitions that, when sampled, gives a share of them a goal the episode did reach, so that a
task whose reward comes only at the goal still teaches something from every failed episode.

A goal-conditioned env (gymnasium-robotics' ``GoalEnv`` convention) observes a dict with ``observation``,
``achieved_goal`` and ``desired_goal``, and computes any reward from goals: ``compute_reward(achieved_goal,
desired_goal, info)`` on batches. ``HindsightStorage`` keeps the transitions as a ring (``RingStorage``, one ring
per leaf) and, beside each, which env step of its episode it is and, once the episode has ended, the episode's
length. Relabelling happens at sampling (SB3's ``HerReplayBuffer`` does the same, rather than storing ``k`` copies
of each transition, which would multiply the memory by ``k + 1``): a share ``k / (k + 1)`` of the sampled
transitions whose episode is complete gets the ``achieved_goal`` of another step of the same episode as its
``desired_goal`` (in ``obs`` and ``next_obs``), and the reward (and, where the env defines
``compute_terminated``, the termination) the env computes for it. Strategies, as in the paper:

- ``future``: a step at or after the transition's own, of the same episode (the paper's best);
- ``final``: the episode's last step;
- ``episode``: any step of the episode.

Episodes are found without storing them apart: every collector push holds whole vector steps in time-major order
(row ``t * E + e`` is env ``e`` at step ``t``: ``data.nstep`` with ``nstep=1``), so the transitions of one env's
episode are ``E`` rows apart in the stream of rows, whose row ``r`` the ring keeps in slot ``r % capacity``. A
transition of an episode not yet ended is sampled as it is. Under DDP each rank keeps and relabels its own
episodes. The bookkeeping lives on the host; the goals are gathered on the storage's device and the rewards
computed by the env on the host (one copy of the relabelled goals per batch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

from engine.config import ConfigError
from engine.params import Params, param

from ..obs import Obs, num_rows
from .storage import RingStorage

__all__ = ["HER_STRATEGIES", "HerParams", "HindsightStorage", "goal_functions"]

HER_STRATEGIES = ("future", "final", "episode")

#: ``compute_reward(achieved_goal, desired_goal, info)`` of a goal-conditioned env, on ``[B, goal]`` arrays
GoalFunction = Callable[[np.ndarray, np.ndarray, Any], Any]


@dataclass
class HerParams(Params):
    """``policy.other.replay_buffer.her``: hindsight relabelling of goal-conditioned transitions."""

    strategy: str = param("none", choices=("none",) + HER_STRATEGIES)
    """Where a relabelled goal comes from: "future" (a later step of the episode), "final" (its last step),
    "episode" (any of its steps); "none": no relabelling."""
    k: int = param(4, rule="at_least_one")
    """Relabelled goals per real one: a share k / (k + 1) of the sampled transitions is relabelled (4: 80%)."""
    achieved_goal: str = param("achieved_goal")
    """The observation key of the goal the state reached."""
    desired_goal: str = param("desired_goal")
    """The observation key of the goal the episode was asked for."""

    @property
    def enabled(self) -> bool:
        return self.strategy != "none"


def goal_functions(env: gym.Env, her: HerParams) -> Tuple[GoalFunction, Optional[GoalFunction]]:
    """``(compute_reward, compute_terminated or None)`` of a goal-conditioned ``env``, checked against ``her``.

    Raises:
        engine.config.ConfigError: the observation is not a dict with both goal keys, or the env has no
            ``compute_reward``; each names what is missing and the fix.
    """
    if hasattr(env, "possible_agents"):  # a PettingZoo env: several agents, spaces per agent
        raise ConfigError(f"policy.other.replay_buffer.her relabels the goals of a goal-conditioned gymnasium env "
                          f"(one agent); {type(env).__name__} is not one (several agents per env train without it): "
                          f"set her.strategy='none'")
    space = env.observation_space
    keys = list(space.spaces) if isinstance(space, gym.spaces.Dict) else []
    missing = [key for key in (her.achieved_goal, her.desired_goal) if key not in keys]
    if missing:
        raise ConfigError(f"policy.other.replay_buffer.her needs a goal-conditioned env, a Dict observation with the "
                          f"keys {her.achieved_goal!r} and {her.desired_goal!r}; {env.spec.id if env.spec else env} "
                          f"observes {space} (no {', '.join(map(repr, missing))}): name its keys with "
                          f"her.achieved_goal and her.desired_goal, or set her.strategy='none'")
    reward, terminated = _wrapper_attr(env, "compute_reward"), _wrapper_attr(env, "compute_terminated")
    if not callable(reward):
        raise ConfigError(f"policy.other.replay_buffer.her relabels rewards through the env's "
                          f"compute_reward(achieved_goal, desired_goal, info), which {type(env.unwrapped).__name__} "
                          f"(and its wrappers) does not define: add it (gymnasium-robotics' GoalEnv convention), or "
                          f"set her.strategy='none'")
    return reward, terminated if callable(terminated) else None


def _wrapper_attr(env: gym.Env, name: str) -> Any:
    """``name`` of the outermost wrapper (or the env) that has it: a wrapper's own ``compute_reward`` wins, as its
    goals are the ones observed."""
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


def _per_row(function: GoalFunction, achieved: np.ndarray, wanted: np.ndarray, rows: int) -> np.ndarray:
    """``function(achieved, wanted, info)`` for a batch of ``rows``: called once on the batch, and row by row where
    its answer is not one value per row (gymnasium-robotics' Maze envs compute their termination as a norm over
    the whole array)."""
    value = np.asarray(function(achieved, wanted, [{} for _ in range(rows)]))
    if value.shape == (rows,):
        return value
    return np.array([np.asarray(function(achieved[i], wanted[i], {})).item() for i in range(rows)])


class HindsightStorage(RingStorage):
    """A ``RingStorage`` whose ``gather`` relabels goals (the module docstring).

    Args:
        capacity: transitions kept.
        num_envs: ``E``, the envs of the collector whose pushes it receives (whole vector steps each).
        compute_reward: the env's ``compute_reward(achieved_goal, desired_goal, info)``.
        strategy, k, achieved_goal, desired_goal: as ``HerParams``.
        compute_terminated: the env's ``compute_terminated(achieved_goal, desired_goal, info)``, where it has
            one: a relabelled transition that reaches its goal then ends its episode, as it would have.
        device: where the transitions live (the bookkeeping stays on the host).
        seed: of the relabelling's draws.
    """

    def __init__(self, capacity: int, num_envs: int, compute_reward: GoalFunction, *, strategy: str = "future",
                 k: int = 4, achieved_goal: str = "achieved_goal", desired_goal: str = "desired_goal",
                 compute_terminated: Optional[GoalFunction] = None, device: str | torch.device = "cpu",
                 seed: Optional[int] = None) -> None:
        super().__init__(capacity, device)
        if strategy not in HER_STRATEGIES:
            raise ValueError(f"her.strategy must be one of {', '.join(HER_STRATEGIES)}, got {strategy!r}")
        if k < 1 or num_envs < 1:
            raise ValueError(f"her.k and num_envs must be >= 1, got {k} and {num_envs}")
        self.num_envs, self.strategy, self.k = int(num_envs), strategy, int(k)
        self.ratio = k / (k + 1)
        self.achieved_goal, self.desired_goal = achieved_goal, desired_goal
        self._compute_reward, self._compute_terminated = compute_reward, compute_terminated
        # numpy, not torch: a batch's bookkeeping is a dozen operations on a few hundred integers, where each torch
        # call costs several microseconds more (the relabelling took 0.22 ms a batch of 128 in torch ops)
        self._row = np.full(capacity, -1, dtype=np.int64)       # the stream row each slot holds
        self._step = np.zeros(capacity, dtype=np.int64)         # its env step within its episode
        self._length = np.zeros(capacity, dtype=np.int64)       # its episode's length; 0 while it runs
        self._rows = 0                                           # rows ever written
        self._open = np.zeros(self.num_envs, dtype=np.int64)    # each env's step in its running episode
        self._rng = np.random.default_rng(0 if seed is None else int(seed))

    # ---- writing -----------------------------------------------------------------------------------
    def extend(self, batch: Any) -> torch.Tensor:
        """Write whole vector steps (``[T * E]`` rows, time-major) and record where each env's episodes run."""
        n, envs = num_rows(batch["reward"]), self.num_envs
        if n % envs:
            raise ValueError(f"hindsight replay takes whole vector steps of {envs} envs (what the collector pushes "
                             f"with policy.nstep=1), got {n} transitions")
        if n > self.capacity:
            raise ValueError(f"a collect of {n:,} transitions (policy.collect.n_sample in whole vector steps of {envs} "
                             f"envs) is more than the hindsight replay holds (replay_buffer_size={self.capacity:,}), "
                             f"which keeps whole pushes: give replay_buffer_size >= {n:,}")
        done = (batch["terminated"] | batch["truncated"]).to("cpu").numpy().reshape(-1, envs)
        step = np.empty(done.shape, dtype=np.int64)
        running = self._open
        for t in range(len(done)):  # a few steps a push: the count restarts after each end
            step[t] = running
            running = np.where(done[t], 0, running + 1)
        self._open = running
        first = self._rows
        slots = super().extend(batch)
        rows = np.arange(first, first + n)
        held = rows % self.capacity
        self._row[held], self._step[held], self._length[held] = rows, step.reshape(-1), 0
        self._rows += n
        oldest = max(0, self._rows - self.capacity)
        for end in np.flatnonzero(done):  # the episodes this push ended
            last = int(step.flat[end])
            episode = first + end - np.arange(last + 1) * envs
            episode = episode[episode >= oldest]  # its start may be overwritten already
            self._length[episode % self.capacity] = last + 1
        return slots

    # ---- sampling ----------------------------------------------------------------------------------
    def gather(self, idx: torch.Tensor) -> Dict[str, Obs]:
        """The transitions at ``idx``, a share ``k / (k + 1)`` of those of ended episodes with a hindsight goal."""
        data = super().gather(idx)
        host = idx.to("cpu").numpy()
        chance, draw = self._rng.random((2, len(host)))
        rows = np.flatnonzero((chance < self.ratio) & (self._length[host] > 0))
        if not len(rows):
            return data
        slot = host[rows]
        step, length, row, draw = self._step[slot], self._length[slot], self._row[slot], draw[rows]
        if self.strategy == "future":
            other = step + (draw * (length - step)).astype(np.int64)  # in [step, length - 1]
        elif self.strategy == "final":
            other = length - 1
        else:  # any step of the episode the ring still holds (its first steps may be overwritten)
            oldest = max(0, self._rows - self.capacity)
            first = np.maximum(step - (row - oldest) // self.num_envs, 0)
            other = first + (draw * (length - first)).astype(np.int64)
        target = torch.from_numpy((row + (other - step) * self.num_envs) % self.capacity)
        goal = self.fields["next_obs"][self.achieved_goal].index_select(0, target.to(self.device))
        at = torch.from_numpy(rows).to(self.device)
        data["obs"][self.desired_goal][at] = goal
        data["next_obs"][self.desired_goal][at] = goal
        achieved = data["next_obs"][self.achieved_goal].index_select(0, at).to("cpu").numpy()
        wanted = goal.to("cpu").numpy()
        reward = _per_row(self._compute_reward, achieved, wanted, len(rows))
        data["reward"][at] = torch.as_tensor(reward, dtype=data["reward"].dtype).to(self.device)
        if self._compute_terminated is not None:
            ended = _per_row(self._compute_terminated, achieved, wanted, len(rows))
            data["terminated"][at] = torch.as_tensor(ended.astype(bool)).to(self.device)
        return data

    def chronological(self) -> torch.Tensor:
        """Refused: a hindsight replay's episodes are found by their envs' places in the stream of rows, which
        moving transitions to another buffer (a resume on another number of ranks) would break."""
        raise TypeError("a hindsight replay (her.strategy) keeps its episodes by the collector's env layout: its "
                        "transitions cannot be moved one by one")

    # ---- checkpoints -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = super().state_dict()
        # tensors and plain values only: torch.load(weights_only=True) reads them
        state["her"] = {"row": torch.from_numpy(self._row.copy()), "step": torch.from_numpy(self._step.copy()),
                        "length": torch.from_numpy(self._length.copy()), "rows": self._rows,
                        "num_envs": self.num_envs, "generator": self._rng.bit_generator.state}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Load a ``state_dict``; the episodes that were running stay unrelabelled (a resumed collector starts
        new ones)."""
        her = state.get("her")
        if her is None or her["num_envs"] != self.num_envs:
            raise ValueError(f"replay checkpoint: no hindsight bookkeeping for {self.num_envs} envs "
                             f"(saved: {None if her is None else her['num_envs']}); resume with the same "
                             f"env.collector_env_num and her settings")
        super().load_state_dict(state)
        self._row, self._step, self._length = (np.array(her[key].numpy(), dtype=np.int64)
                                               for key in ("row", "step", "length"))
        self._rows = int(her["rows"])
        self._open = np.zeros(self.num_envs, dtype=np.int64)
        self._rng.bit_generator.state = her["generator"]
