"""Several agents per env row (issue 32, item 1): PettingZoo parallel envs batched with an agent axis; agents
that leave are masked, not dropped; a row ends when its last agent does; differing spaces are refused by name."""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from data.parallel_envs import AgentSpaceError, ParallelEnvBatch

ParallelEnv = pytest.importorskip("pettingzoo").ParallelEnv  # the multi-agent extra
simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")


class _Leaving(ParallelEnv):
    """Three agents; agent ``i`` terminates after ``i + 2`` steps (``die=True``) or all are cut at step 3. Each
    agent observes ``[its index, the step]`` and is rewarded its action; an optional mask allows action 0 only
    at odd steps."""

    metadata = {"name": "leaving_v0", "is_parallelizable": True}

    def __init__(self, die=True, masked=False, odd_space=False):
        self.possible_agents = ["a0", "a1", "a2"]
        self.die, self.masked, self.odd_space = die, masked, odd_space
        self.state_space = gym.spaces.Box(-10, 10, (2,), np.float32)

    def observation_space(self, agent):
        box = gym.spaces.Box(-10, 10, (3 if self.odd_space and agent == "a2" else 2,), np.float32)
        if self.masked:
            return gym.spaces.Dict({"observation": box, "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)})
        return box

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _obs(self, agent):
        value = np.array([self.possible_agents.index(agent), self.t], np.float32)
        if self.masked:
            return {"observation": value, "action_mask": np.array([self.t % 2, 1], np.int8)}
        return value

    def state(self):
        return np.array([self.t, len(self.agents)], np.float32)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), "an action for exactly the live agents"
        self.t += 1
        rewards = {a: float(actions[a]) for a in self.agents}
        if self.die:
            term = {a: self.t >= self.possible_agents.index(a) + 2 for a in self.agents}
            trunc = {a: False for a in self.agents}
        else:
            term = {a: False for a in self.agents}
            trunc = {a: self.t >= 3 for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rewards, term, trunc, infos


def test_simple_spread_rows_hold_every_agent_and_end_together_at_max_cycles():
    make = functools.partial(simple_spread_v3.parallel_env, N=3, max_cycles=5)
    envs = ParallelEnvBatch([make, make])
    space = envs.single_observation_space
    OBS = "obs"
    assert space[OBS].shape == (3, 18) and space["state"].shape == (54,) and "action_mask" not in space.spaces
    assert envs.single_action_space == gym.spaces.MultiDiscrete([5, 5, 5])
    obs, _ = envs.reset(seed=0)
    again, _ = ParallelEnvBatch([make, make]).reset(seed=0)
    assert np.array_equal(obs[OBS], again[OBS]) and not np.array_equal(obs[OBS][0], obs[OBS][1])  # seed, seed + 1
    assert np.array_equal(obs["state"], obs[OBS].reshape(2, 54))  # mpe2's state: the observations joined
    for t in range(5):
        obs, reward, terminated, truncated, info = envs.step(np.ones((2, 3), np.int64))
        assert reward.shape == (2, 3) and reward.dtype == np.float32 and not terminated.any()
        assert truncated.all() == (t == 4)
    assert info["_final_obs"].all() and info["final_obs"][0][OBS].shape == (3, 18)
    assert not np.array_equal(info["final_obs"][0][OBS], obs[OBS][0])  # the row was reset in the same step
    assert obs["alive"].tolist() == [[1, 1, 1]] * 2
    envs.close()


def test_agents_that_leave_are_masked_and_the_row_ends_with_the_last():
    envs = ParallelEnvBatch([_Leaving])
    obs, _ = envs.reset(seed=0)
    assert obs["alive"].tolist() == [[1, 1, 1]] and obs["state"].tolist() == [[0, 3]]
    obs, reward, terminated, _, info = envs.step(np.array([[1, 1, 1]]))
    assert reward.tolist() == [[1, 1, 1]] and not info["agent_terminated"].any() and not terminated.any()
    obs, reward, terminated, _, info = envs.step(np.array([[1, 0, 1]]))  # a0 terminates at step 2
    assert info["agent_terminated"].tolist() == [[True, False, False]] and obs["alive"].tolist() == [[0, 1, 1]]
    assert obs["obs"][0, 0].tolist() == [0, 2] and obs["state"].tolist() == [[2, 2]]  # a0's last observation
    obs, reward, terminated, _, info = envs.step(np.array([[1, 1, 1]]))  # a0's action is not sent: it left
    assert reward.tolist() == [[0, 1, 1]] and info["agent_terminated"].tolist() == [[False, True, False]]
    assert obs["obs"][0, 0].tolist() == [0, 0] and obs["alive"].tolist() == [[0, 0, 1]]  # gone: zeros
    obs, reward, terminated, truncated, info = envs.step(np.array([[1, 1, 1]]))  # a2, the last, at step 4
    assert terminated.tolist() == [True] and not truncated.any() and reward.tolist() == [[0, 0, 1]]
    assert info["final_obs"][0]["alive"].tolist() == [0, 0, 0] and obs["alive"].tolist() == [[1, 1, 1]]


class _Growing(_Leaving):
    """An env whose second episode brings an agent its possible_agents do not list."""

    def reset(self, seed=None, options=None):
        self.episode = getattr(self, "episode", -1) + 1
        obs, infos = super().reset(seed, options)
        if self.episode:
            self.agents.append("a3")
            obs["a3"] = np.zeros(2, np.float32)
        return obs, infos


def test_an_agent_set_that_changes_at_reset_is_named():
    envs = ParallelEnvBatch([functools.partial(_Growing, die=False)])
    envs.reset(seed=0)
    with pytest.raises(AgentSpaceError, match=r"agents \['a3'\] appeared that its possible_agents \['a0', 'a1', "
                                              r"'a2'\] do not list"):
        envs.reset(seed=1)


def test_a_row_cut_by_a_time_limit_is_truncated_not_terminated():
    envs = ParallelEnvBatch([functools.partial(_Leaving, die=False)])
    envs.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, info = envs.step(np.zeros((1, 3), np.int64))
    assert truncated.tolist() == [True] and not terminated.any() and not info["agent_terminated"].any()


def test_pettingzoo_masks_become_an_action_mask_key_per_agent():
    envs = ParallelEnvBatch([functools.partial(_Leaving, masked=True)] * 2)
    space = envs.single_observation_space
    assert space["action_mask"].shape == (3, 2) and space["obs"].shape == (3, 2)
    obs, _ = envs.reset(seed=0)
    assert obs["action_mask"].tolist() == [[[0, 1]] * 3] * 2
    obs, *_ = envs.step(np.ones((2, 3), np.int64))
    assert obs["action_mask"][:, :, 0].tolist() == [[1, 1, 1]] * 2


def test_agents_with_differing_spaces_are_refused_naming_each_group():
    with pytest.raises(AgentSpaceError, match=r"env leaving_v0: its agents' observation spaces differ \(a0, a1: "
                                              r"Box\(-10.0, 10.0, \(2,\), float32\); a2: Box\(-10.0, 10.0, \(3,\), "
                                              r"float32\)\)"):
        ParallelEnvBatch([functools.partial(_Leaving, odd_space=True)])


def test_the_env_loop_steps_the_batch_and_tallies_each_agent_s_return():
    """The single-agent loop steps several agents per row as they are: a tree of ``[E, N, ...]`` observations,
    ``[E, N]`` rewards, and each ended episode's return per agent (``Finished.agent_returns`` ``[episodes, N]``;
    ``returns``: their mean)."""
    import torch

    from data.env_loop import EnvLoop

    class Ones:
        def forward(self, obs, **kwargs):
            return {"action": torch.ones(obs["obs"].shape[:2], dtype=torch.int64)}

    loop = EnvLoop(Ones(), ParallelEnvBatch([_Leaving, functools.partial(_Leaving, die=False)]), seed=0)
    steps = list(loop.run(7))
    assert steps[0].obs["obs"].shape == (2, 3, 2) and steps[0].reward.shape == (2, 3)
    finished = loop.finished()
    # env 0: agents live 2, 3, 4 steps (a reward of 1 a step each), episodes of 4 steps, one ended at step 4;
    # env 1: every agent cut at 3 steps, episodes ended at steps 3 and 6
    assert finished.envs.tolist() == [1, 0, 1] and finished.lengths.tolist() == [3, 4, 3]
    assert finished.agent_returns.tolist() == [[3, 3, 3], [2, 3, 4], [3, 3, 3]]
    assert finished.returns.tolist() == [3, 3, 3]  # the mean over agents


def test_the_mpe_env_type_makes_simple_spread_batches_at_the_mappo_settings():
    from data.envs import make_vector_env
    from dizoo.pettingzoo.envs import MPE

    envs = make_vector_env(MPE, MPE.default_config(), 3, seed=0)
    assert isinstance(envs, ParallelEnvBatch) and envs.num_envs == 3 and envs.num_agents == 3
    assert envs.envs[0].unwrapped.max_cycles == 25 and envs.envs[0].unwrapped.local_ratio == 0.5
    short = make_vector_env(MPE, dict(MPE.default_config(), max_episode_steps=4), 1, seed=0)
    for _ in range(4):
        *_, truncated, _ = short.step(np.zeros((1, 3), np.int64))
    assert truncated.tolist() == [True]
    with pytest.raises(ValueError, match="env.env_id='simple_sprad_v3' is not an mpe2 task"):
        MPE.make(dict(MPE.default_config(), env_id="simple_sprad_v3"))


def test_gae_runs_each_agent_s_stream_with_its_row_s_episode_ends():
    """Per agent, the advantages of ``[T, E, N]`` rewards and values are those of each agent's own ``[T, E]``
    stream under the row's ``terminated``/``truncated``."""
    import torch

    from data.gae import gae_advantages

    g = torch.Generator().manual_seed(0)
    reward, value, next_value = (torch.randn(6, 2, 3, generator=g) for _ in range(3))
    terminated = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 1], [0, 0], [0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0], [0, 0], [0, 1], [0, 0], [0, 0], [0, 0]], dtype=torch.bool)
    adv, ret = gae_advantages(reward, value, next_value, terminated, truncated, gamma=0.9, lam=0.8)
    for n in range(3):
        alone, alone_ret = gae_advantages(reward[..., n], value[..., n], next_value[..., n], terminated, truncated,
                                          gamma=0.9, lam=0.8)
        torch.testing.assert_close(adv[..., n], alone)
        torch.testing.assert_close(ret[..., n], alone_ret)


class _FreedAtTheEnd(_Leaving):
    """``state()`` fails once the episode is over, as SISL's Multiwalker's does (it frees its bodies)."""

    def state(self):
        if not self.agents:
            raise AttributeError("'NoneType' object has no attribute 'position'")
        return super().state()


def test_a_state_the_env_cannot_give_once_every_agent_terminated_is_zeros_and_only_then():
    envs = ParallelEnvBatch([lambda: _FreedAtTheEnd(die=True)])
    envs.reset(seed=0)
    for _ in range(4):  # agent i terminates after i + 2 steps: the row ends terminated at step 4
        obs, _, terminated, truncated, info = envs.step(np.ones((1, 3), np.int64))
    assert terminated.tolist() == [True] and info["final_obs"][0]["state"].tolist() == [0.0, 0.0]
    assert obs["state"].tolist() == [[0.0, 3.0]]  # the new episode's, from the env
    cut = ParallelEnvBatch([lambda: _FreedAtTheEnd(die=False)])  # truncated: its value bootstraps from the state
    cut.reset(seed=0)
    cut.step(np.ones((1, 3), np.int64))
    cut.step(np.ones((1, 3), np.int64))
    with pytest.raises(AttributeError, match="position"):
        cut.step(np.ones((1, 3), np.int64))


class _BadMask(_Leaving):
    """Masked agents whose step 2 observation lacks the mask (``drop``) or allows no action (``zero``)."""

    def __init__(self, fault):
        super().__init__(die=False, masked=True)
        self.fault = fault

    def _obs(self, agent):
        value = super()._obs(agent)
        if self.t == 2 and agent == "a1":
            if self.fault == "drop":
                return {"observation": value["observation"]}
            value["action_mask"] = np.zeros(2, np.int8)
        return value


@pytest.mark.parametrize("fault, message", [
    ("drop", r"env leaving_v0: agent a1 observed the keys \['observation'\] where its space is \{'observation', "
             r"'action_mask'\}"),
    ("zero", r"env leaving_v0: agent a1's action mask allows no action while it is still in the episode"),
])
def test_a_mask_missing_or_allowing_nothing_is_named_with_the_agent(fault, message):
    envs = ParallelEnvBatch([functools.partial(_BadMask, fault)])
    envs.reset(seed=0)
    envs.step(np.ones((1, 3), np.int64))
    with pytest.raises(AgentSpaceError, match=message):
        envs.step(np.ones((1, 3), np.int64))
