"""The atari env type's EnvPool backend (``env.backend='envpool'``): ale-py's backend's preprocessing, seeding and
episode ends, and a DQN run on it."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ale_py")
pytest.importorskip("envpool")

from data.envs import make_vector_env  # noqa: E402
from dizoo.atari.envs import ATARI  # noqa: E402


def _env(game, training, num_envs=2, seed=0, **env):
    cfg = dict(ATARI.default_config(), env_id=game, backend="envpool", **env)
    return make_vector_env(ATARI, cfg, num_envs, seed=seed, training=training)


def _run_until(env, predicate, max_steps=20000, seed=0):
    env.reset(seed=[seed])
    rng = np.random.default_rng(0)
    for _ in range(max_steps):
        obs, reward, term, trunc, info = env.step(rng.integers(0, env.single_action_space.n, 1))
        if predicate(obs, reward, term, trunc, info):
            return obs, reward, term, trunc, info
    raise AssertionError("condition never met")


def test_the_spaces_and_observations_are_the_ale_backend_s():
    ale = make_vector_env(ATARI, dict(ATARI.default_config(), env_id="PongNoFrameskip-v4"), 2, 0, training=True)
    env = _env("PongNoFrameskip-v4", training=True)
    try:
        assert env.single_observation_space == ale.single_observation_space
        assert env.single_action_space == ale.single_action_space
        obs, _ = env.reset(seed=[0, 1])
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert not obs[:, :3].any() and obs[:, 3].any()  # zeros before the game's first frame, as ale-py's
        nxt, reward, term, trunc, _ = env.step(np.zeros(2, dtype=np.int64))
        assert np.array_equal(nxt[:, 2], obs[:, 3])  # the stack shifts by one frame per step
        assert reward.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
    finally:
        env.close()
        ale.close()


def test_a_lost_life_ends_the_training_episode_and_the_game_goes_on():
    train = _env("BreakoutNoFrameskip-v4", training=True, num_envs=1)
    try:
        obs, _, term, _, info = _run_until(train, lambda o, r, te, tr, i: te[0])
        assert info["lives"][0] == 4  # the first lost life ended the training episode
        assert np.array_equal(info["final_obs"][0], obs[0])  # no reset: the game goes on from here
        nxt, *_ = train.step(np.zeros(1, dtype=np.int64))
        assert np.array_equal(nxt[0, 2], obs[0, 3])  # the same game's next frame, not a new game's
        for _ in range(300):  # no FIRE after the lost life (no reset: the agent acts): the ball is not served
            *_, term, _, info = train.step(np.zeros(1, dtype=np.int64))
            assert not term[0] and info["lives"][0] == 4
    finally:
        train.close()
    evaluation = _env("BreakoutNoFrameskip-v4", training=False, num_envs=1)
    try:
        *_, term, _, info = _run_until(evaluation, lambda o, r, te, tr, i: i["lives"][0] < 5 or te[0])
        assert info["lives"][0] == 4 and not term[0]  # a lost life does not end an evaluation episode
    finally:
        evaluation.close()


def test_an_ended_game_is_reset_in_the_same_step_with_its_last_observation_in_final_obs():
    env = _env("PongNoFrameskip-v4", training=True, num_envs=2, max_episode_steps=20)
    try:
        env.reset(seed=[0, 1])
        for t in range(20):
            obs, _, term, trunc, info = env.step(np.zeros(2, dtype=np.int64))
            assert trunc.all() == (t == 19) and not term.any()
        assert info["_final_obs"].all() and info["final_obs"][:, 3].any()
        assert not obs[:, :3].any() and obs[:, 3].any()  # a new game's first frame
        assert info["final_obs"][:, 0].any()  # the old game's last stack, whole
        env.step(np.zeros(2, dtype=np.int64))
        for _ in range(18):  # the new episode runs its whole 20 steps: the reset was not repeated
            *_, trunc, info = env.step(np.zeros(2, dtype=np.int64))
            assert not trunc.any() and "final_obs" not in info
    finally:
        env.close()


def test_env_i_plays_with_seed_plus_i_and_a_reset_with_new_seeds_reseeds():
    actions = np.random.default_rng(1).integers(0, 6, (60, 2))

    def frames(env, seed):
        env.reset(seed=seed)
        return np.stack([env.step(a[-env.num_envs:])[0] for a in actions])  # env 1's actions for the one env

    two, one = _env("PongNoFrameskip-v4", True, num_envs=2, seed=5), _env("PongNoFrameskip-v4", True, num_envs=1)
    try:
        np.testing.assert_array_equal(frames(two, [5, 6])[:, 1], frames(one, [6])[:, 0])
        np.testing.assert_array_equal(frames(two, [5, 6]), frames(two, [5, 6]))  # the same seeds, the same games
        with pytest.raises(ValueError, match=r"seeds env i with seed \+ i; got the seeds \[3, 9\]"):
            two.reset(seed=[3, 9])
    finally:
        two.close()
        one.close()


def test_env_kwargs_reach_envpool_and_ale_only_ones_are_named():
    env = _env("PongNoFrameskip-v4", training=True, num_envs=1, env_kwargs=dict(repeat_action_probability=0.25))
    env.close()
    with pytest.raises(ValueError, match=r"\['max_num_frames_per_episode'\]: not settings of EnvPool's Atari"):
        _env("PongNoFrameskip-v4", training=True, num_envs=1, env_kwargs=dict(max_num_frames_per_episode=100))


def test_a_game_envpool_lacks_and_envpool_missing_are_named(monkeypatch):
    import builtins

    from dizoo.atari.envpool_backend import EnvPoolMissingError, envpool_task

    assert envpool_task("space_invaders") == "SpaceInvaders-v5"
    with pytest.raises(ValueError, match="EnvPool has no Atari game 'Pongg-v5'.*Pong-v5.*env.backend='ale'"):
        envpool_task("pongg")
    real_import = builtins.__import__

    def no_envpool(name, *args, **kwargs):
        if name.startswith("envpool"):
            raise ImportError("No module named 'envpool'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_envpool)
    with pytest.raises(EnvPoolMissingError, match=r"\.\[envpool\].*env.backend='ale'"):
        envpool_task("pong")


def test_dqn_trains_on_the_envpool_backend_and_films_through_ale(tmp_path, monkeypatch):
    pytest.importorskip("imageio")
    from commands.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--algo", "dqn", "--env", "PongNoFrameskip-v4", "--max-env-step", "200", "--no-progress",
                 "--exp-name", "run", "env.backend=envpool", "env.collector_env_num=4", "env.evaluator_env_num=1",
                 "env.n_evaluator_episode=1", "env.max_episode_steps=50", "policy.random_collect_size=64",
                 "policy.learn.batch_size=8", "policy.eval.evaluator.eval_freq=1000000"]) == 0
    assert main(["eval", "run", "--episodes", "1", "--video", "videos", "--gif"]) == 0
    assert (tmp_path / "videos" / "run-best-episode0.gif").stat().st_size > 0
