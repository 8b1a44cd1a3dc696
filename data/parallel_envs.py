"""Several agents per env: ``E`` copies of a PettingZoo parallel env as one batched env with an agent axis.

PettingZoo's parallel API (``reset() -> (obs, infos)``, ``step(actions) -> (obs, rewards, terminations,
truncations, infos)``, each a dict keyed by agent) is the field's multi-agent env interface; mpe2's Simple Spread
is its standard cooperative benchmark. The env loop (``data.env_loop``) steps batched envs with one row per env;
this wrapper makes ``E`` parallel envs one such env, each row holding every agent, in a fixed order
(``possible_agents``):

- the observation is a dict (a DI-treetensor tree once the loop has it): ``obs`` ``[E, N, ...]`` (each agent's own
  observation), ``alive`` ``[E, N]`` int8 (1 while the agent is in the episode and acts next), ``state`` ``[E, S]`` where the
  env has a global ``state()`` (MAPPO's centralised critic reads it), and ``action_mask`` ``[E, N, A]`` where
  the agents observe one (PettingZoo's classic convention: ``{"observation": ..., "action_mask": ...}``);
- the action is ``[E, N]`` (a ``MultiDiscrete`` of the agents' ``Discrete``), or ``[E, N, *shape]`` (their
  ``Box``); an agent not in the episode is given none;
- the reward is ``[E, N]`` float32: each agent's own (0 once it has left);
- ``terminated``/``truncated`` are per env row: the row's episode ends when no agent is left (every
  agent terminated: terminated; else truncated, e.g. mpe2's ``max_cycles``). Each agent's own end is in the
  info, ``agent_terminated`` ``[E, N]``; GAE ends an agent's stream where its ``alive`` drops while the row
  plays on, as terminated (``data.gae.agent_flags``).

An agent that leaves before the episode ends keeps its place: its row is zeros and ``alive`` 0 from then on
(masked, not dropped). A row whose episode ended is reset in the same step (gymnasium's SAME_STEP autoreset,
what the env loop steps): ``obs`` is the new episode's first and ``info["final_obs"]`` holds the real last one.

Agents are batched along one axis, so they must share their observation and action spaces (the homogeneous case:
Simple Spread's three agents, parameter sharing); agents whose spaces differ are refused, naming each group of
agents and its spaces, unless padded to one (``data.agent_padding``, ``env.pad_agents``). They are stepped in this
process, one env after the other: an mpe2 env step is tens of microseconds of Python.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

__all__ = ["ParallelEnvBatch", "AgentSpaceError", "EnvModuleError", "env_seeds", "is_agent_rows", "OBS_KEY",
           "ALIVE_KEY", "STATE_KEY", "MASK_KEY"]

#: the keys of a row's observation
OBS_KEY, ALIVE_KEY, STATE_KEY, MASK_KEY = "obs", "alive", "state", "action_mask"


class AgentSpaceError(ValueError):
    """Agents whose spaces cannot share one axis, or an env the wrapper cannot batch; the message names the
    agents, their spaces and the fix."""


class EnvModuleError(ValueError):
    """A module named as a multi-agent env (``env.env_id``) that does not exist or fails as it imports (a package
    it needs is missing); the message names the module, the cause and the fix."""


def _groups(spaces: Mapping[str, gym.Space]) -> List[Tuple[gym.Space, List[str]]]:
    """The agents grouped by equal space, in the agents' order."""
    groups: List[Tuple[gym.Space, List[str]]] = []
    for agent, space in spaces.items():
        for known, members in groups:
            if known == space:
                members.append(agent)
                break
        else:
            groups.append((space, [agent]))
    return groups


def _shared_space(spaces: Mapping[str, gym.Space], what: str, env_name: str) -> gym.Space:
    """The one space every agent has; differing ones raise ``AgentSpaceError`` naming the groups."""
    groups = _groups(spaces)
    if len(groups) > 1:
        named = "; ".join(f"{', '.join(members)}: {space}" for space, members in groups)
        raise AgentSpaceError(f"env {env_name}: its agents' {what} spaces differ ({named}); the agents of one env "
                              f"are batched along one axis and share one network, so they need equal spaces. For "
                              f"flat Box observations and Discrete actions set env.pad_agents=true (each agent's "
                              f"observation zero-padded to the largest, its actions masked to its own; "
                              f"data.agent_padding; Box actions are not padded); otherwise train each group of agents "
                              f"apart")
    return groups[0][0]


def is_agent_rows(space: gym.Space) -> bool:
    """Whether ``space`` is a row of several agents (``ParallelEnvBatch``'s ``single_observation_space``): a Dict
    with the agents' ``obs`` and ``alive``."""
    return isinstance(space, gym.spaces.Dict) and OBS_KEY in space.spaces and ALIVE_KEY in space.spaces


def _keys_of(value: Any) -> str:
    """What an agent observed, for an error: a dict's keys, else its type."""
    return f"the keys {sorted(value)}" if isinstance(value, Mapping) else f"a {type(value).__name__}"


def env_seeds(seed: Any, num_envs: int) -> List[Optional[int]]:
    """Each env's reset seed: ``seed`` one per env as given, an int ``s`` as ``s + i`` for env ``i``, or None."""
    if isinstance(seed, (list, tuple)):
        return list(seed)
    return [None if seed is None else int(seed) + i for i in range(num_envs)]


class ParallelEnvBatch(gym.vector.VectorEnv):
    """``len(env_fns)`` PettingZoo parallel envs as one batched env with an agent axis (the module docstring).

    Args:
        env_fns: each makes one parallel env (``mpe2.simple_spread_v3.parallel_env(...)``); all of one task.
        render_final: render each env's last frame before its reset, into ``info["final_frame"]`` (envs made with
            ``render_mode="rgb_array"``: a video's render twin).

    Raises:
        AgentSpaceError: agents with differing spaces, or an observation space the wrapper cannot batch.

    Examples:
        >>> from mpe2 import simple_spread_v3
        >>> envs = ParallelEnvBatch([lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25)] * 2)
        >>> obs, _ = envs.reset(seed=0)
        >>> obs["obs"].shape, obs["state"].shape, obs["alive"].tolist()
        ((2, 3, 18), (2, 54), [[1, 1, 1], [1, 1, 1]])
        >>> _, reward, terminated, truncated, _ = envs.step(np.zeros((2, 3), np.int64))
        >>> reward.shape, terminated.tolist(), truncated.tolist()
        ((2, 3), [False, False], [False, False])
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_fns: Sequence[Callable[[], Any]], render_final: bool = False) -> None:
        if not env_fns:
            raise AgentSpaceError("ParallelEnvBatch needs at least one env")
        self.envs = [fn() for fn in env_fns]
        self._render_final = render_final  # info["final_frame"]: each ended episode's last frame (videos)
        try:
            self._spaces()
        except Exception:  # a refusal leaves no env open
            self.close()
            raise

    def _spaces(self) -> None:
        """The agents, their shared spaces and the batch's (refusing agents that cannot share one axis)."""
        first = self.envs[0]
        self.name = (getattr(first, "metadata", None) or {}).get("name") or type(first).__name__
        self.agents: List[str] = list(first.possible_agents)
        self.num_envs, self.num_agents = len(self.envs), len(self.agents)
        agent_obs = _shared_space({a: first.observation_space(a) for a in self.agents}, "observation", self.name)
        self.agent_action_space = _shared_space({a: first.action_space(a) for a in self.agents}, "action", self.name)
        self._masked = (isinstance(agent_obs, gym.spaces.Dict) and MASK_KEY in agent_obs.spaces
                        and "observation" in agent_obs.spaces)
        self.agent_observation_space = agent_obs["observation"] if self._masked else agent_obs
        if not isinstance(self.agent_observation_space, gym.spaces.Box):
            raise AgentSpaceError(f"env {self.name}: each agent observes {self.agent_observation_space}; batching "
                                  f"takes a Box per agent (with an action mask beside it, PettingZoo's "
                                  f"{{'observation', 'action_mask'}} dict)")
        self._has_state = callable(getattr(first, "state", None)) and getattr(first, "state_space", None) is not None
        spaces: Dict[str, gym.Space] = {
            OBS_KEY: batch_space(self.agent_observation_space, self.num_agents),
            ALIVE_KEY: gym.spaces.Box(0, 1, (self.num_agents,), np.int8)}
        if self._has_state:
            spaces[STATE_KEY] = first.state_space
        if self._masked:
            n = int(self.agent_action_space.n)
            spaces[MASK_KEY] = gym.spaces.Box(0, 1, (self.num_agents, n), np.int8)
        self.single_observation_space = gym.spaces.Dict(spaces)
        self.single_action_space = batch_space(self.agent_action_space, self.num_agents)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    # ---- the rows ----------------------------------------------------------------------------------------
    def _row(self, env: Any, observations: Mapping[str, Any], final: bool = False) -> Dict[str, np.ndarray]:
        """One env's observation: every agent in order; ``alive`` 1 for the agents still in the episode (they act
        next), zeros for an agent ``observations`` lacks (it left before this step; in the step it leaves, its
        last observation is kept, ``alive`` 0). ``final``: the last row of an episode every agent terminated, whose
        global state nothing reads (a terminated step bootstraps from nothing): where the env's ``state()`` fails
        once the episode is over (SISL's Multiwalker frees its bodies), it is zeros."""
        space = self.agent_observation_space
        obs = np.zeros((self.num_agents,) + space.shape, space.dtype)
        live = set(env.agents)
        unknown = (live | set(observations)) - set(self.agents)
        if unknown:
            raise AgentSpaceError(f"env {self.name}: agents {sorted(unknown)} appeared that its possible_agents "
                                  f"{self.agents} do not list; each agent keeps one place on the agent axis, so the "
                                  f"agent set is fixed: list every agent that can ever act in possible_agents (one "
                                  f"that is absent is masked, alive 0)")
        alive = np.array([agent in live for agent in self.agents], np.int8)
        mask = np.zeros((self.num_agents, int(self.agent_action_space.n)), np.int8) if self._masked else None
        for i, agent in enumerate(self.agents):
            if agent not in observations:
                continue
            value = observations[agent]
            if self._masked:
                if not isinstance(value, Mapping) or "observation" not in value or MASK_KEY not in value:
                    raise AgentSpaceError(f"env {self.name}: agent {agent} observed {_keys_of(value)} where its "
                                          f"space is {{'observation', {MASK_KEY!r}}}: an env whose agents observe "
                                          f"an action mask gives it with every observation, at every reset and step")
                obs[i], mask[i] = value["observation"], value[MASK_KEY]
                if alive[i] and not mask[i].any():
                    raise AgentSpaceError(f"env {self.name}: agent {agent}'s action mask allows no action while it "
                                          f"is still in the episode: a mask must leave it at least one legal action "
                                          f"(1)")
            else:
                obs[i] = value
        row = {OBS_KEY: obs, ALIVE_KEY: alive}
        if self._has_state:
            row[STATE_KEY] = self._state(env, final)
        if mask is not None:
            row[MASK_KEY] = mask
        return row

    def _state(self, env: Any, final: bool) -> np.ndarray:
        """The env's global ``state()``; zeros for a ``final`` row whose env cannot give it any more (``_row``)."""
        space = self.single_observation_space[STATE_KEY]
        try:
            return np.asarray(env.state(), dtype=space.dtype)
        except Exception:
            if not final:
                raise
            return np.zeros(space.shape, space.dtype)

    @staticmethod
    def _stack(rows: Sequence[Mapping[str, np.ndarray]]) -> Dict[str, np.ndarray]:
        return {key: np.stack([row[key] for row in rows]) for key in rows[0]}

    # ---- the vector env API ------------------------------------------------------------------------------
    def reset(self, *, seed: Any = None, options: Optional[dict] = None) -> Tuple[Dict[str, np.ndarray], dict]:
        """Reset every env; ``seed`` an int (env ``i`` gets ``seed + i``) or one per env."""
        seeds = env_seeds(seed, self.num_envs)
        rows = []
        for env, env_seed in zip(self.envs, seeds):
            observations, _ = env.reset(seed=env_seed, options=options)
            rows.append(self._row(env, observations))
        return self._stack(rows), {}

    def step(self, actions: Any) -> Tuple[Dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every env; ``actions`` ``[E, N, ...]``. Returns ``(obs, reward [E, N], terminated [E],
        truncated [E], info)``; ``info["agent_terminated"]`` ``[E, N]``, and where a row's episode ended
        ``info["final_obs"]`` (one row's observation per env, None elsewhere; SAME_STEP autoreset)."""
        actions = np.asarray(actions)
        rewards = np.zeros((self.num_envs, self.num_agents), np.float32)
        agent_terminated = np.zeros((self.num_envs, self.num_agents), bool)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        rows, final_obs = [], np.full(self.num_envs, None, dtype=object)
        final_frames = np.full(self.num_envs, None, dtype=object)
        for e, env in enumerate(self.envs):
            live = list(env.agents)
            step_actions = {agent: self._action(actions[e, self.agents.index(agent)]) for agent in live}
            observations, reward, term, trunc, _ = env.step(step_actions)
            for i, agent in enumerate(self.agents):
                rewards[e, i] = float(reward.get(agent, 0.0))
                agent_terminated[e, i] = bool(term.get(agent, False))
            ended = not env.agents  # the episode ended for every agent: reset the row in this step
            if ended:
                terminated[e] = all(term.get(a, False) for a in live)
                truncated[e] = not terminated[e]
            row = self._row(env, observations, final=bool(terminated[e]))
            if ended:
                final_obs[e] = row
                if self._render_final:
                    final_frames[e] = env.render()
                next_observations, _ = env.reset()
                row = self._row(env, next_observations)
            rows.append(row)
        info: Dict[str, Any] = {"agent_terminated": agent_terminated}
        if (terminated | truncated).any():
            info["final_obs"] = final_obs
            info["_final_obs"] = terminated | truncated
            if self._render_final:
                info["final_frame"] = final_frames
        return self._stack(rows), rewards, terminated, truncated, info

    def _action(self, action: np.ndarray) -> Any:
        """One agent's action as PettingZoo takes it: an int for a Discrete space, an array for a Box."""
        if isinstance(self.agent_action_space, gym.spaces.Discrete):
            return int(action)
        return np.asarray(action, dtype=self.agent_action_space.dtype)

    def render(self) -> Any:
        """The first env's frame (``render_mode="rgb_array"``)."""
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()
