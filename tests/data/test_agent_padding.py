"""Agents with different spaces on one axis (``data.agent_padding``, issue 32 item 1): observations zero-padded to
the largest, actions masked to each agent's own, the env's own masks kept inside them; what padding cannot join is
named; and the algorithms train on such an env through ``--env`` alone."""
from __future__ import annotations

import doctest
import json

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("mpe2")

import data.agent_padding as module  # noqa: E402
from data.agent_padding import AgentPaddingError, PaddedAgents  # noqa: E402
from data.parallel_envs import ParallelEnvBatch  # noqa: E402


def test_the_examples_hold():
    assert doctest.testmod(module).failed == 0


class _TwoKinds:
    """A scout that sees 2 numbers and has 2 moves (the second illegal at even steps), and a carrier that sees 4
    and has 3 moves."""

    metadata = {"name": "two_kinds"}
    possible_agents = ["scout", "carrier"]

    def observation_space(self, agent):
        if agent == "scout":
            return gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (2,), np.float32),
                                    "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)})
        return gym.spaces.Box(-2, 2, (4,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2 if agent == "scout" else 3)

    def _obs(self):
        scout = {"observation": np.full(2, 0.5, np.float32), "action_mask": np.array([1, self.t % 2], np.int8)}
        return {"scout": scout, "carrier": np.full(4, 1.5, np.float32)}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        self.last = dict(actions)
        return self._obs(), {a: 0.0 for a in self.agents}, {a: False for a in self.agents}, \
            {a: False for a in self.agents}, {a: {} for a in self.agents}


def test_observations_are_padded_and_each_agent_keeps_its_own_actions_and_masks():
    env = PaddedAgents(_TwoKinds())
    space = env.observation_space("scout")
    assert space["observation"].shape == (4,) and env.action_space("scout") == gym.spaces.Discrete(3)
    assert space["observation"].low.tolist() == [-2, -2, -2, -2] and space["observation"].high.tolist() == [2] * 4
    obs, _ = env.reset()
    assert obs["scout"]["observation"].tolist() == [0.5, 0.5, 0, 0] and obs["carrier"]["observation"].tolist() == [1.5] * 4
    assert obs["scout"]["action_mask"].tolist() == [1, 0, 0] and obs["carrier"]["action_mask"].tolist() == [1, 1, 1]
    obs, *_ = env.step({"scout": np.int64(0), "carrier": np.int64(2)})
    assert obs["scout"]["action_mask"].tolist() == [1, 1, 0] and env.env.last == {"scout": 0, "carrier": 2}
    with pytest.raises(AgentPaddingError, match="agent scout was given action 2, outside its own Discrete\\(2\\)"):
        env.step({"scout": 2, "carrier": 0})
    batch = ParallelEnvBatch([lambda: PaddedAgents(_TwoKinds())] * 2)
    rows, _ = batch.reset(seed=0)
    assert rows["obs"].shape == (2, 2, 4) and rows["action_mask"].tolist()[0] == [[1, 0, 0], [1, 1, 1]]


def test_what_padding_cannot_join_is_named():
    from mpe2 import simple_speaker_listener_v4

    with pytest.raises(AgentPaddingError, match="agent speaker_0 observes .* and acts in Box"):
        PaddedAgents(simple_speaker_listener_v4.parallel_env(continuous_actions=True))


def test_qmix_trains_on_agents_of_different_spaces_given_by_env_alone(tmp_path, monkeypatch):
    """``--env simple_speaker_listener_v4`` (a speaker that sees 3 numbers and says one of 3 words, a listener that
    sees 11 and moves 5 ways): padding is chosen for it, and QMIX's exploration, random warm-up and evaluation
    stay within each agent's own actions (an action beyond them is refused by the wrapper). MAPPO on it:
    docs/multi_agent.md's command."""
    algo = "qmix"
    from commands.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--algo", algo, "--env", "simple_speaker_listener_v4", "--max-env-step", "600",
                 "--no-progress", "--exp-name", "run", "env.collector_env_num=4",
                 "policy.random_collect_size=200"]) == 0
    summary = json.load(open(tmp_path / "run" / "summary.json"))
    assert summary["env_step"] >= 600 and summary["train_iter"] > 0 and len(summary["eval_agent_returns"]) == 2


def test_an_agent_whose_own_mask_allows_nothing_may_take_any_of_its_own_actions():
    """An empty mask means every action legal (``policies.masks``): padded, every one of the agent's own, never
    one of the padding's."""
    env = PaddedAgents(_TwoKinds())
    env.reset()
    observations = env._pad({"scout": {"observation": np.zeros(2, np.float32), "action_mask": np.zeros(2, np.int8)}})
    assert observations["scout"]["action_mask"].tolist() == [1, 1, 0]


def test_a_padded_env_copies_and_pickles_without_recursing():
    import copy
    import pickle

    env = PaddedAgents(_TwoKinds())
    assert copy.copy(env).width == 4 and pickle.loads(pickle.dumps(env)).num_actions == 3
    with pytest.raises(AttributeError, match="observation_space\\(agent\\)"):
        env.observation_spaces


def test_env_names_what_padding_cannot_join_when_it_tries_it_for_the_user(monkeypatch, capsys):
    """``--env`` tries padding for agents of different spaces; where that fails too, the one line says why."""
    import functools
    import sys
    import types

    from mpe2 import simple_speaker_listener_v4

    from commands.cli import main

    package, mod = types.ModuleType("my_envs"), types.ModuleType("my_envs.continuous_talk")
    mod.parallel_env = functools.partial(simple_speaker_listener_v4.parallel_env, continuous_actions=True)
    monkeypatch.setitem(sys.modules, "my_envs", package)
    monkeypatch.setitem(sys.modules, "my_envs.continuous_talk", mod)
    assert main(["train", "--algo", "mappo", "--env", "my_envs.continuous_talk", "--max-env-step", "100"]) != 0
    err = capsys.readouterr().err
    assert "acts in Box" in err and "env.pad_agents cannot join its agents either" in err
