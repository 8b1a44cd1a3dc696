"""The one env-stepping loop, on the counting env (obs = [step in episode, episode id])."""
from __future__ import annotations

import numpy as np

from data.env_loop import EnvLoop
from data.envs import make_vector_env
from engine.registry import ENV_REGISTRY


class Zero:
    def __init__(self):
        self.kwargs = []

    def forward(self, obs, **kwargs):
        self.kwargs.append(kwargs)
        return {"action": np.zeros(len(obs), dtype=np.int64)}


def _loop(num_envs=2, **env):
    env_type = ENV_REGISTRY.get("counting")  # truncates after 5 steps
    env_cfg = dict(env_type.default_config(), **env)
    policy = Zero()
    return EnvLoop(policy, make_vector_env(env_type, env_cfg, num_envs, seed=0), seed=0), policy


def test_env_loop_reports_episode_ends_with_real_final_obs_returns_and_lengths():
    loop, policy = _loop(env_kwargs=dict(terminate_at=3))
    steps = [loop.step({"eps": 0.5}) for _ in range(6)]
    assert policy.kwargs[0] == {"eps": 0.5}
    ends = [(i, list(s.done_envs), s.returns, s.lengths) for i, s in enumerate(steps) if len(s.done_envs)]
    assert ends == [(2, [0, 1], [3.0, 3.0], [3, 3]), (5, [0, 1], [3.0, 3.0], [3, 3])]
    final = steps[2]
    assert final.next_obs[:, 0].tolist() == [3.0, 3.0]      # the real last observation ...
    assert loop.obs[:, 0].tolist() == [0.0, 0.0]            # ... while the envs already restarted
    assert final.obs[:, 0].tolist() == [2.0, 2.0]


def test_env_loop_reset_restarts_returns_and_lengths():
    loop, _ = _loop(num_envs=1)
    loop.step(), loop.step()
    loop.reset(seed=7)
    steps = [loop.step() for _ in range(5)]
    assert steps[-1].lengths == [5] and steps[-1].returns == [5.0]
