"""Overlapped collection on ale-py's AtariVectorEnv: two groups stepped with send/recv store exactly the
serial collector's transitions (frames, n-step windows, episodic-life terminations, truncations)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from data.env_groups import EnvGroups  # noqa: E402
from data.envs import make_vector_env  # noqa: E402
from dizoo.atari.envs import ATARI  # noqa: E402
from engine import OnlineRLContext  # noqa: E402
from middleware import StepCollector  # noqa: E402


class FramePolicy:
    """Deterministic and frame-dependent, so each env's actions follow its own screen."""

    def __init__(self, num_actions):
        self.num_actions = num_actions

    def forward(self, obs, **kwargs):
        frames = np.asarray(obs)[:, -1, 20:70, 8:76].astype(np.int64)
        return {"action": torch.from_numpy((frames.sum(axis=(1, 2)) // 13) % self.num_actions)}


def _trajectories(game, groups, num_envs, steps, calls, **env):
    cfg = dict(ATARI.default_config(), env_id=game, **env)
    venv = make_vector_env(ATARI, cfg, num_envs, seed=5, groups=groups)
    try:
        collector = StepCollector(FramePolicy(venv.single_action_space.n), venv, n_sample=num_envs * steps, nstep=3, gamma=0.99, seed=5)
        ctx = OnlineRLContext()
        out = []
        for _ in range(calls):
            collector(ctx)
            out.append(ctx.trajectories)
        return out, ctx.episode_returns, ctx.env_episode, type(venv)
    finally:
        venv.close()


@pytest.mark.parametrize("game,steps,env,end", [
    ("PongNoFrameskip-v4", 25, dict(max_episode_steps=20), "truncated"),  # truncated every 20 steps
    ("BreakoutNoFrameskip-v4", 40, dict(), "terminated"),                 # a lost life ends the training episode
])
def test_atari_overlapped_collector_stores_the_serial_transitions(game, steps, env, end):
    serial = _trajectories(game, 1, 4, steps, 2, **env)
    overlapped = _trajectories(game, 2, 4, steps, 2, **env)
    assert overlapped[3] is EnvGroups and serial[3] is not EnvGroups
    for a, b in zip(serial[0], overlapped[0]):
        for key in a.keys():
            assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert serial[1:3] == overlapped[1:3]
    assert any(getattr(tr, end).any() for tr in overlapped[0])


def test_atari_env_manager_overlap_groups_training_envs_only():
    cfg = dict(ATARI.default_config(), manager=dict(type="sync", overlap=True))
    train = make_vector_env(ATARI, cfg, 4, seed=0)
    evaluation = make_vector_env(ATARI, cfg, 4, seed=0, training=False)
    try:
        assert isinstance(train, EnvGroups) and train.sizes == [2, 2]
        assert all(callable(getattr(g, "send", None)) for g in train.groups)  # ale-py's own async mode
        assert not isinstance(evaluation, EnvGroups)
        obs, info = train.reset(seed=[0, 1, 2, 3])
        assert obs.shape == (4, 4, 84, 84) and info["env_id"].tolist() == [0, 1, 2, 3]
    finally:
        train.close()
        evaluation.close()


def test_atari_lost_life_next_obs_is_the_frame_the_game_goes_on_from():
    # ale-py leaves final_obs unwritten for a lost life (no reset); the env type copies the real next obs
    cfg = dict(ATARI.default_config(), env_id="BreakoutNoFrameskip-v4")
    venv = make_vector_env(ATARI, cfg, 2, seed=0)
    try:
        collector = StepCollector(FramePolicy(venv.single_action_space.n), venv, n_sample=2 * 120, seed=0)
        ctx = OnlineRLContext()
        collector(ctx)
    finally:
        venv.close()
    tr = ctx.trajectories  # one-step transitions in [T, E] order: row t * 2 + e
    ended = [r for r in tr.terminated.nonzero().flatten().tolist() if r + 2 < len(tr.reward)]
    assert ended
    for r in ended:
        assert torch.equal(tr.next_obs[r], tr.obs[r + 2])
