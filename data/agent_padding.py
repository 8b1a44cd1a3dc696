"""Agents with different spaces on one axis: each agent's observation zero-padded to the largest, its actions
masked to its own (Terry et al., 2020, "Revisiting Parameter Sharing in Multi-Agent Deep Reinforcement Learning":
observation padding and action space restriction, with the agent's index beside its input; SuperSuit's
``pad_observations_v0`` and ``pad_action_space_v0`` do the first two for PettingZoo).

``data.parallel_envs`` batches agents along one axis, so every agent needs one observation and one action space.
``PaddedAgents`` wraps a PettingZoo parallel env whose agents' spaces differ (mpe2's Speaker-Listener: the speaker
sees 3 numbers and says one of 3 words, the listener sees 11 and moves in 5 directions) so that they share one:

- each agent observes ``{'observation': Box(D), 'action_mask': Box(A)}`` (PettingZoo's action-mask convention,
  which the batch carries to the policies): its own observation in the first ``D_i`` places and zeros after,
  ``D`` the largest; its legal actions, the first ``A_i`` of ``A``, the largest, and within them the env's own
  mask where it has one;
- an action beyond the agent's own ``A_i`` is refused by name (the policies sample under the mask, so one that
  does not is a bug).

One network then serves every agent, told apart by its one-hot index (``policy.model.agent_id``, on by default).
Flat Box observations and Discrete actions only, which is what baton's multi-agent algorithms take.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

import gymnasium as gym
import numpy as np

__all__ = ["PaddedAgents", "AgentPaddingError"]

MASK_KEY = "action_mask"


class AgentPaddingError(ValueError):
    """Agents whose spaces padding cannot join (not flat Boxes of one dtype, not Discrete), or an action outside an
    agent's own space; the message names the agents and spaces."""


class PaddedAgents:
    """A PettingZoo parallel env whose agents share one observation and action space (module docstring).

    Examples:
        >>> from mpe2 import simple_speaker_listener_v4
        >>> env = PaddedAgents(simple_speaker_listener_v4.parallel_env(continuous_actions=False))
        >>> obs, _ = env.reset(seed=0)
        >>> [obs[a]["observation"].shape for a in env.agents], env.action_space("speaker_0")
        ([(11,), (11,)], Discrete(5))
        >>> obs["speaker_0"]["action_mask"].tolist(), obs["listener_0"]["action_mask"].tolist()
        ([1, 1, 1, 0, 0], [1, 1, 1, 1, 1])
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self._own_obs: Dict[str, gym.spaces.Box] = {}
        self._env_masked: Dict[str, bool] = {}
        self._actions: Dict[str, int] = {}
        for agent in self.possible_agents:
            space, action = env.observation_space(agent), env.action_space(agent)
            masked = isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces and "observation" in space.spaces
            own = space["observation"] if masked else space
            if not (isinstance(own, gym.spaces.Box) and len(own.shape) == 1) or not isinstance(action,
                                                                                            gym.spaces.Discrete):
                raise AgentPaddingError(self._refusal(agent, own, action))
            self._own_obs[agent], self._env_masked[agent], self._actions[agent] = own, masked, int(action.n)
        dtypes = {space.dtype for space in self._own_obs.values()}
        if len(dtypes) > 1:
            raise AgentPaddingError(f"env {self._name()}: its agents observe arrays of different dtypes "
                                    f"({self._spaces_by_agent()}); padding joins them in one array of one dtype: "
                                    f"cast them to one in a wrapper of your env")
        self.width = max(space.shape[0] for space in self._own_obs.values())
        self.num_actions = max(self._actions.values())
        low = np.stack([self._padded(space.low, 0) for space in self._own_obs.values()]).min(0)
        high = np.stack([self._padded(space.high, 0) for space in self._own_obs.values()]).max(0)
        dtype = dtypes.pop()
        self._observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Box(low.astype(dtype), high.astype(dtype), (self.width,), dtype),
            MASK_KEY: gym.spaces.Box(0, 1, (self.num_actions,), np.int8)})
        self._action_space = gym.spaces.Discrete(self.num_actions)

    # ---- PettingZoo's parallel API --------------------------------------------------------------------------
    def observation_space(self, agent: str) -> gym.Space:
        return self._observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    @property
    def agents(self) -> list:
        return self.env.agents

    def __getattr__(self, name: str) -> Any:  # metadata, state(), state_space, render(), close(), ...
        if name.startswith("_") or name == "env":  # not yet set (a copy, an unpickling): no recursion
            raise AttributeError(name)
        if name in ("observation_spaces", "action_spaces"):  # the agents' own, unpadded: not this env's
            raise AttributeError(f"{name}: ask observation_space(agent) / action_space(agent) of a padded env")
        return getattr(self.env, name)

    def reset(self, seed: Any = None, options: Any = None) -> tuple:
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._pad(observations), infos

    def step(self, actions: Mapping[str, Any]) -> tuple:
        for agent, action in actions.items():
            if not 0 <= int(action) < self._actions[agent]:
                raise AgentPaddingError(f"env {self._name()}: agent {agent} was given action {int(action)}, outside "
                                        f"its own Discrete({self._actions[agent]}) (padded to Discrete("
                                        f"{self.num_actions}) with the rest masked): the policy must sample under "
                                        f"the observation's action_mask")
        observations, rewards, terminations, truncations, infos = self.env.step(
            {agent: int(action) for agent, action in actions.items()})
        return self._pad(observations), rewards, terminations, truncations, infos

    # ---- padding ------------------------------------------------------------------------------------------
    def _padded(self, values: np.ndarray, fill: Any) -> np.ndarray:
        out = np.full(self.width, fill, dtype=np.float64)
        out[:len(values)] = values
        return out

    def _pad(self, observations: Mapping[str, Any]) -> Dict[str, Dict[str, np.ndarray]]:
        padded = {}
        for agent, value in observations.items():
            own = value["observation"] if self._env_masked[agent] else value
            obs = np.zeros(self.width, self._observation_space["observation"].dtype)
            obs[:len(own)] = own
            mask = np.zeros(self.num_actions, np.int8)
            own_mask = value[MASK_KEY] if self._env_masked[agent] else 1
            # a mask with no legal action means every action legal (policies.masks): here every one of its own
            mask[:self._actions[agent]] = own_mask if np.any(own_mask) else 1
            padded[agent] = {"observation": obs, MASK_KEY: mask}
        return padded

    def _name(self) -> str:
        return (getattr(self.env, "metadata", None) or {}).get("name") or type(self.env).__name__

    def _spaces_by_agent(self) -> str:
        return "; ".join(f"{agent}: {space}" for agent, space in self._own_obs.items())

    def _refusal(self, agent: str, obs: gym.Space, action: gym.Space) -> str:
        return (f"env {self._name()}: agent {agent} observes {obs} and acts in {action}; padding joins agents that "
                f"observe a flat Box and act in a Discrete space: other spaces need a wrapper of your env that "
                f"flattens them (agents with Box actions train on one Box that every agent shares)")
