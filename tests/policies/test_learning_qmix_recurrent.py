"""Learning quality of QMIX's recurrent agent (issue 32, item 2): on a cooperative task only a memory solves, the
recurrent agent earns the whole reward and the feed-forward one stays at chance.

The task ("remember the cue", a PettingZoo parallel env of the test's own, given to the ``pettingzoo`` env type
by its module): two agents, three steps an episode. At the first step both see the same cue, one of two; the
second step shows nothing; at the last step they see only that it is the last, and each earns 1 for the action
that names the cue. A feed-forward agent sees the same at the last step whatever the cue was, so its best is
0.5 an agent; an agent that remembers earns 1."""
from __future__ import annotations

import sys
import types

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("mpe2")
from pettingzoo import ParallelEnv  # noqa: E402

from commands.cli import main  # noqa: E402

pytestmark = pytest.mark.slow

LENGTH = 3


class RememberTheCue(ParallelEnv):
    metadata = {"name": "remember_the_cue_v0", "render_modes": []}

    def __init__(self, max_cycles: int = LENGTH, render_mode=None) -> None:
        self.possible_agents = ["agent_0", "agent_1"]
        self.state_space = gym.spaces.Box(0, 1, (3,), np.float32)
        self._rng = np.random.default_rng(0)

    def observation_space(self, agent):
        return gym.spaces.Box(0, 1, (3,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _view(self) -> np.ndarray:
        view = np.zeros(3, np.float32)
        if self.t == 0:
            view[self.cue] = 1
        if self.t == LENGTH - 1:
            view[2] = 1
        return view

    def state(self) -> np.ndarray:
        return self._view()

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents, self.t, self.cue = list(self.possible_agents), 0, int(self._rng.integers(2))
        return {a: self._view() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        last = self.t == LENGTH - 1
        rewards = {a: float(last and int(actions[a]) == self.cue) for a in self.agents}
        self.t += 1
        obs = {a: self._view() if not last else np.zeros(3, np.float32) for a in self.agents}
        ends = {a: last for a in self.agents}
        infos = {a: {} for a in self.agents}
        if last:
            self.agents = []
        return obs, rewards, ends, {a: False for a in ends}, infos


@pytest.fixture
def cue_env(monkeypatch):
    package, module = types.ModuleType("memory_tasks"), types.ModuleType("memory_tasks.remember_the_cue_v0")
    module.parallel_env = RememberTheCue
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def _final_return(tmp_path, env_id, recurrent):
    import json

    name = "rnn" if recurrent else "ff"
    args = ["train", "--algo", "qmix", "--env", env_id, "--max-env-step", "6000", "--no-progress", "--seed", "0",
            "--exp-name", str(tmp_path / name), "env.stop_value=none", "env.collector_env_num=4",
            "env.evaluator_env_num=4", "env.n_evaluator_episode=40", "policy.eval.evaluator.eval_freq=100000",
            "policy.other.eps.decay=3000", "policy.learn.batch_size=128", "policy.learn.target_update_freq=50",
            f"policy.model.recurrent={recurrent}", "policy.learn.seq_len=8", "policy.learn.burn_in=2"]
    assert main(args) == 0
    return json.load(open(tmp_path / name / "summary.json"))["eval_return"]


def test_the_recurrent_agent_remembers_the_cue_and_the_feed_forward_one_cannot(tmp_path, cue_env):
    remembered = _final_return(tmp_path, cue_env, recurrent=True)
    forgot = _final_return(tmp_path, cue_env, recurrent=False)
    assert remembered >= 0.95, remembered
    assert forgot <= 0.75, forgot
