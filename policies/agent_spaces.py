"""What the policies for several agents per env row share (``policies.mappo``, ``policies.qmix``): the check of a
``data.parallel_envs`` row's spaces, and the agent's one-hot index beside its input (parameter sharing)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import gymnasium as gym
import torch

from data.parallel_envs import ALIVE_KEY, MASK_KEY, OBS_KEY, STATE_KEY, is_agent_rows

from .spaces import SpaceMismatchError

__all__ = ["AgentRows", "agent_rows", "with_agent_ids"]


class AgentRows(NamedTuple):
    """The sizes of a multi-agent row: agents, each one's flat observation, the global state (None: the env has
    no ``state()``), each one's actions (the number of discrete ones, or a Box's width), whether they are a Box's,
    and whether the agents observe an action mask."""

    num_agents: int
    obs_dim: int
    state_dim: Optional[int]
    action_dim: int
    masked: bool
    continuous: bool = False


def agent_rows(observation_space: gym.Space, action_space: gym.Space, name: str,
               state_reader: Optional[str] = None, instead: str = "", continuous: bool = False) -> AgentRows:
    """The row's sizes, or a ``SpaceMismatchError`` naming what does not fit policy ``name``: not a multi-agent
    row, agents without one shared ``Discrete`` action space (or, where ``continuous``, a flat ``Box`` too),
    observations that are not flat per agent, or (where ``state_reader`` names what reads the global state) an env
    without ``state()``, with ``instead`` the advice."""
    if not is_agent_rows(observation_space):
        raise SpaceMismatchError(f"policy {name!r} trains the agents of a multi-agent env (an env type that "
                                 f"batches them, e.g. 'mpe': observations with {OBS_KEY!r} and {ALIVE_KEY!r} "
                                 f"keys), got the observation space {observation_space}")
    spaces = observation_space.spaces
    if state_reader is not None and STATE_KEY not in spaces:
        raise SpaceMismatchError(f"policy {name!r}: {state_reader} the env's global state, and this env has no "
                                 f"state() (observation keys {sorted(spaces)}); {instead}")
    num_agents = int(spaces[ALIVE_KEY].shape[0])
    box = isinstance(action_space, gym.spaces.Box)
    if continuous and box:
        if len(action_space.shape) != 2 or action_space.shape[0] != num_agents:
            raise SpaceMismatchError(f"policy {name!r} takes agents with a flat Box action space each ({num_agents} "
                                     f"agents: a Box of shape ({num_agents}, A)), got {action_space}")
        action_dim = int(action_space.shape[1])
    else:
        nvec = getattr(action_space, "nvec", None)
        if not isinstance(action_space, gym.spaces.MultiDiscrete) or len(set(nvec.tolist())) != 1:
            takes = "one Discrete or one flat Box action space each" if continuous else (
                "one Discrete action space each" + (" (a Box is continuous: use 'mappo' or 'ippo')" if box else ""))
            raise SpaceMismatchError(f"policy {name!r} takes agents with {takes}, got {action_space}")
        action_dim = int(nvec[0])
    agent_obs = spaces[OBS_KEY]
    if len(agent_obs.shape) != 2:
        raise SpaceMismatchError(f"policy {name!r} takes a flat observation per agent, got {agent_obs} for "
                                 f"{agent_obs.shape[0]} agents")
    state_dim = int(spaces[STATE_KEY].shape[0]) if STATE_KEY in spaces else None
    return AgentRows(int(agent_obs.shape[0]), int(agent_obs.shape[1]), state_dim, action_dim, MASK_KEY in spaces,
                     continuous and box)


def with_agent_ids(x: torch.Tensor, num_agents: int) -> torch.Tensor:
    """``x`` ``[..., N, F]`` with each agent's one-hot index appended: shared parameters can still act per agent."""
    ids = torch.eye(num_agents, dtype=x.dtype, device=x.device).expand(*x.shape[:-1], num_agents)
    return torch.cat([x, ids], dim=-1)
