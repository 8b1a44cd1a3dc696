"""The one env-stepping loop, on the counting env (obs = [step in episode, episode id])."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from data.env_loop import EnvLoop, EnvStep, _Tally
from data.envs import make_vector_env
from engine.registry import ENV_REGISTRY


class Zero:
    def __init__(self):
        self.kwargs = []
        self.obs = []

    def forward(self, obs, **kwargs):
        self.kwargs.append(kwargs)
        self.obs.append(obs)
        return {"action": torch.zeros(len(obs), dtype=torch.long)}


def _loop(num_envs=2, **env):
    env_type = ENV_REGISTRY.get("counting")  # truncates after 5 steps
    env_cfg = dict(env_type.default_config(), **env)
    policy = Zero()
    return EnvLoop(policy, make_vector_env(env_type, env_cfg, num_envs, seed=0), seed=0), policy


def test_env_loop_reports_episode_ends_with_real_final_obs_returns_and_lengths():
    loop, policy = _loop(env_kwargs=dict(terminate_at=3))
    steps = [loop.step({"eps": 0.5}) for _ in range(6)]
    assert policy.kwargs[0] == {"eps": 0.5}
    assert isinstance(policy.obs[0], torch.Tensor)  # a gymnasium env's observations reach the policy as tensors
    assert [(i, s.ended_envs()) for i, s in enumerate(steps) if s.ended.any()] == [(2, [0, 1]), (5, [0, 1])]
    finished = loop.finished()
    assert finished.envs.tolist() == [0, 1, 0, 1]
    assert finished.returns.tolist() == [3.0] * 4 and finished.lengths.tolist() == [3] * 4
    final = steps[2]
    assert final.next_obs[:, 0].tolist() == [3.0, 3.0]      # the real last observation ...
    assert loop.obs[:, 0].tolist() == [0.0, 0.0]            # ... while the envs already restarted
    assert final.obs[:, 0].tolist() == [2.0, 2.0]
    assert final.terminated.tolist() == [True, True] and not final.truncated.any()


def test_env_loop_finished_counts_episodes_across_calls():
    loop, _ = _loop(env_kwargs=dict(terminate_at=3))
    list(loop.run(4))  # the second episodes are one step old
    assert loop.finished().lengths.tolist() == [3, 3]
    assert len(loop.finished().envs) == 0  # nothing ended since
    list(loop.run(2))
    finished = loop.finished()
    assert finished.lengths.tolist() == [3, 3] and finished.returns.tolist() == [3.0, 3.0]


def test_env_loop_reset_restarts_returns_and_lengths():
    loop, _ = _loop(num_envs=1)
    loop.step(), loop.step()
    loop.reset(seed=7)
    for _ in range(5):
        loop.step()
    finished = loop.finished()
    assert finished.lengths.tolist() == [5] and finished.returns.tolist() == [5.0]


def test_env_loop_refuses_a_policy_that_does_not_answer_tensors():
    class Numpy:
        def forward(self, obs, **kwargs):
            return {"action": np.zeros(len(obs), dtype=np.int64)}

    env_type = ENV_REGISTRY.get("counting")
    loop = EnvLoop(Numpy(), make_vector_env(env_type, env_type.default_config(), 2, seed=0))
    with pytest.raises(TypeError, match="returned 'action' as ndarray.*answers a tensor with tensors"):
        loop.step()


def test_env_loop_refuses_next_step_autoreset():
    import gymnasium as gym

    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")  # NEXT_STEP, gymnasium's default
    with pytest.raises(ValueError, match="SAME_STEP"):
        EnvLoop(Zero(), env)


@pytest.mark.parametrize("settle_every", [1, 3, 256])
def test_tally_matches_counting_step_by_step(settle_every, monkeypatch):
    """The returns and lengths computed for many steps at once are those of counting each step, whatever the
    steps per settle (episodes carried across them) and however often episodes end."""
    monkeypatch.setattr(_Tally, "SETTLE_EVERY", settle_every)
    gen = torch.Generator().manual_seed(0)
    tally, expected, got = _Tally(), [], []
    running, length = torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.int64)
    for t in range(50):
        reward = torch.rand(4, generator=gen)
        terminated, truncated = torch.rand(4, generator=gen) < 0.05, torch.rand(4, generator=gen) < 0.05
        ended = terminated | truncated
        known = bool(ended.any()) if t % 2 else None  # a gymnasium env's step knows, a device env's does not
        tally.add(EnvStep(None, {}, None, reward, terminated, truncated, known))
        running, length = running + reward.double(), length + 1
        expected += [(e, running[e].item(), length[e].item()) for e in torch.nonzero(ended).flatten().tolist()]
        running, length = running.masked_fill(ended, 0), length.masked_fill(ended, 0)
        if t % 7 == 6:
            got += list(zip(*(field.tolist() for field in tally.take()[:3])))
    got += list(zip(*(field.tolist() for field in tally.take()[:3])))
    assert [(e, n) for e, _, n in got] == [(e, n) for e, _, n in expected]
    np.testing.assert_allclose([r for _, r, _ in got], [r for _, r, _ in expected], rtol=1e-12)


def test_obs_helpers_doctests():
    import doctest

    import data.obs

    assert doctest.testmod(data.obs).failed == 0
