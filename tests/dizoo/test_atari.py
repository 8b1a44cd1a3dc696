"""Atari preprocessing: shapes, dtypes, episodic life and reward clipping for training only."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ale_py")

from dizoo.atari.envs import ATARI, UnknownGameError, game_name  # noqa: E402
from data.envs import make_vector_env  # noqa: E402


def _env(game, training, num_envs=2):
    cfg = dict(ATARI.default_config(), env_id=game)
    return make_vector_env(ATARI, cfg, num_envs, seed=0, training=training)


def test_atari_observations_are_stacked_84x84_uint8():
    env = _env("PongNoFrameskip-v4", training=True)
    try:
        obs, _ = env.reset(seed=[0, 1])
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert env.single_observation_space.shape == (4, 84, 84) and env.single_action_space.n == 6
        # the stack starts with zeros before the episode's first frame
        assert not obs[:, :3].any() and obs[:, 3].any()
        nxt, *_ = env.step(np.zeros(2, dtype=np.int64))
        assert np.array_equal(nxt[:, 2], obs[:, 3])  # the stack shifts by one frame per step
    finally:
        env.close()


def _run_until(env, predicate, max_steps=20000):
    env.reset(seed=[0])
    rng = np.random.default_rng(0)
    for _ in range(max_steps):
        obs, reward, term, trunc, info = env.step(rng.integers(0, env.single_action_space.n, 1))
        if predicate(reward, term, trunc, info):
            return reward, term, trunc, info
    raise AssertionError("condition never met")


def test_atari_episodic_life_only_in_training():
    # (with SAME_STEP autoreset, the info of an episode's last step already describes what follows it)
    train = _env("BreakoutNoFrameskip-v4", training=True, num_envs=1)
    try:
        _, term, _, info = _run_until(train, lambda r, te, tr, i: te[0])
        assert info["lives"][0] == 4  # the first lost life ended the training episode; the game goes on
    finally:
        train.close()
    evaluation = _env("BreakoutNoFrameskip-v4", training=False, num_envs=1)
    try:
        _, term, _, info = _run_until(evaluation, lambda r, te, tr, i: i["lives"][0] < 5 or te[0])
        assert info["lives"][0] == 4 and not term[0]  # a lost life does not end an evaluation episode
    finally:
        evaluation.close()


def test_atari_rewards_clipped_in_training_raw_in_evaluation():
    train = _env("SpaceInvadersNoFrameskip-v4", training=True, num_envs=1)
    try:
        reward, *_ = _run_until(train, lambda r, te, tr, i: r[0] != 0)
        assert reward[0] in (-1.0, 1.0)
    finally:
        train.close()
    evaluation = _env("SpaceInvadersNoFrameskip-v4", training=False, num_envs=1)
    try:
        reward, *_ = _run_until(evaluation, lambda r, te, tr, i: r[0] != 0)
        assert reward[0] >= 5  # an invader is worth 5 to 30 points
    finally:
        evaluation.close()


def test_atari_unknown_game_says_how_to_list_games():
    with pytest.raises(UnknownGameError, match="(?s)'Pongg-v4'.*'pong'.*get_all_rom_ids"):
        game_name("Pongg-v4")


def test_atari_missing_extra_names_the_package(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_ale(name, *args, **kwargs):
        if name.startswith("ale_py"):
            raise ImportError("No module named 'ale_py'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ale)
    with pytest.raises(ImportError, match=r"\.\[atari\]"):
        game_name("pong")
