"""The ``mpe`` env type (dizoo/pettingzoo): which ids it takes, its worker processes, and the frames of
``baton eval --video``."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mpe2")

from dizoo.pettingzoo.envs import MPE  # noqa: E402
from data.parallel_env_workers import ParallelEnvWorkers  # noqa: E402
from data.parallel_envs import ParallelEnvBatch  # noqa: E402


def test_it_takes_the_mpe2_tasks_by_their_module_names():
    assert MPE.has_task("simple_spread_v3") and MPE.has_task("simple_reference_v3")
    assert not MPE.has_task("CartPole-v1") and not MPE.has_task("simple_nothing_v9")
    assert not MPE.has_task("simple_spread_v3; import os")
    reference = MPE.make_vector(dict(type="mpe", env_id="simple_reference_v3"), 2, 0)
    assert reference.num_agents == 2  # mpe2's own defaults: Simple Spread's N=3 is Spread's alone
    reference.close()


def test_async_splits_the_envs_over_worker_processes():
    cfg = dict(type="mpe", manager=dict(type="async", workers=2))
    envs = MPE.make_vector(cfg, 4, 0, manager="async")
    try:
        assert isinstance(envs, ParallelEnvWorkers) and envs.workers == 2
    finally:
        envs.close()
    assert isinstance(MPE.make_vector(cfg, 4, 0, manager="sync"), ParallelEnvBatch)


def test_the_render_twin_shows_env_0_step_for_step_and_its_episode_s_last_frame():
    cfg = dict(type="mpe")
    envs, twin = MPE.make_vector(cfg, 2, 0, training=False), MPE.make_render_twin(cfg)
    envs.reset(seed=5)
    first, _ = twin.reset(seed=np.array([5]))
    assert first.shape[0] == 1 and first.shape[-1] == 3 and first.dtype == np.uint8
    rng = np.random.default_rng(0)
    frames = [first]
    for t in range(25):
        actions = rng.integers(0, 5, (2, 3))
        _, reward, terminated, truncated, info = envs.step(actions)
        frame, twin_reward, twin_term, twin_trunc, twin_info = twin.step(actions[:1])
        assert bool(twin_term[0] or twin_trunc[0]) == bool(terminated[0] or truncated[0])
        np.testing.assert_array_equal(twin_reward[0], reward[0])  # the same dynamics as env 0, step for step
        frames.append(frame)
    assert "final_obs" in twin_info and truncated[0]  # max_cycles: the row and the twin end together
    assert np.abs(frames[10].astype(int) - frames[0].astype(int)).mean() > 1  # the agents moved
    twin.close()
    envs.close()


def test_baton_eval_films_a_multi_agent_run(tmp_path, monkeypatch):
    pytest.importorskip("imageio")
    from commands.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--algo", "mappo", "--env", "simple_spread_v3", "--max-env-step", "400", "--no-progress",
                 "--exp-name", "run", "policy.collect.n_sample=200", "env.collector_env_num=4"]) == 0
    assert main(["eval", "run", "--episodes", "1", "--video", "videos", "--gif"]) == 0
    assert (tmp_path / "videos" / "run-best-episode0.gif").stat().st_size > 0
