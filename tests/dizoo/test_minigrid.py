"""MiniGrid (issue 31 item 6): ``--env MiniGrid-*`` picks the minigrid family (every id of the package), whose
envs observe the image and the direction, the mission dropped; a short run trains, checkpoints and resumes."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minigrid")

from commands.algo_env import build_config  # noqa: E402
from data.envs import make_vector_env  # noqa: E402
from engine.registry import ENV_REGISTRY  # noqa: E402
from pipelines import serial_pipeline  # noqa: E402


@pytest.mark.parametrize("env_id", ["MiniGrid-DoorKey-5x5-v0", "MiniGrid-Empty-8x8-v0"])
def test_every_minigrid_id_is_the_minigrid_family(env_id):
    main, create = build_config("ppo", env_id)
    assert create["env"]["type"] == "minigrid" and main["env"]["env_id"] == env_id


def test_minigrid_envs_observe_image_and_direction_without_the_mission():
    env_type = ENV_REGISTRY.get("minigrid")
    env = make_vector_env(env_type, env_type.default_config(), 2, seed=0)
    space = env.single_observation_space
    assert isinstance(space, gym.spaces.Dict) and sorted(space.spaces) == ["direction", "image"]
    obs, _ = env.reset(seed=[0, 1])
    assert obs["image"].shape == (2, 7, 7, 3) and obs["image"].dtype == np.uint8 and obs["direction"].shape == (2,)
    env.close()


def test_ppo_on_minigrid_from_algo_and_env_trains_and_resumes(tmp_path):
    main, create = build_config("ppo", "MiniGrid-DoorKey-5x5-v0")
    main.update(exp_name=str(tmp_path / "run"), log=dict(progress=False))
    main["env"].update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1, max_episode_steps=20)
    main["policy"] = dict(collect=dict(n_sample=32), learn=dict(batch_size=16, epoch_per_collect=1),
                          eval=dict(evaluator=dict(eval_freq=1000)))
    first = serial_pipeline((main, create), max_env_step=64)
    assert first["env_step"] == 64 and first["train_iter"] > 0
    resumed = serial_pipeline((main, create), max_env_step=128, resume=True)
    assert resumed["env_step"] == 128 and resumed["train_iter"] > first["train_iter"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_doorkey_settings_solve_minigrid_empty(tmp_path):
    """``doorkey_ppo_config.py``'s settings on MiniGrid-Empty-5x5-v0: the greedy evaluation reaches 0.9 (measured:
    0.955 at 18k env steps, 7 s). DoorKey itself takes about 290k (BENCHMARKS.md, "MiniGrid")."""
    import copy

    from dizoo.minigrid.config.doorkey_ppo_config import create_config, main_config

    main = copy.deepcopy(main_config)
    main.env.env_id = "MiniGrid-Empty-5x5-v0"
    main.log = dict(progress=False)
    summary = serial_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=80_000,
                              exp_name=str(tmp_path / "run"))
    assert summary["stop_reason"] == "stop_value" and summary["eval_return"] >= 0.9
