"""The MuJoCo env family (dizoo/mujoco): its tasks, terminated and truncated kept apart, ``--algo/--env`` from
the defaults, a config training a few updates, and the errors of a missing extra and of a diverged simulator.
Each dizoo/mujoco config also runs as a script in tests/dizoo/test_configs.py."""
from __future__ import annotations

import copy
import sys

import gymnasium as gym
import numpy as np
import torch
import pytest
from gymnasium.vector import AutoresetMode

pytest.importorskip("mujoco")

from dizoo.mujoco.envs import TASKS  # noqa: E402
from engine.context import OnlineRLContext  # noqa: E402
from engine.registry import ENV_REGISTRY  # noqa: E402
from middleware.collector import NonFiniteDataError, StepCollector  # noqa: E402
from commands.algo_env import AlgoEnvError, build_config  # noqa: E402


@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_task_is_its_v5_id_with_float32_observations(task, tmp_path, monkeypatch):
    """Also: MuJoCo's warnings (HalfCheetah's model compiles with one under MuJoCo 4) go to the log, not to a
    MUJOCO_LOG.TXT in the working directory."""
    monkeypatch.chdir(tmp_path)
    env_type = ENV_REGISTRY.get(task)
    env_id, threshold = TASKS[task]
    assert env_type.env_id == env_id and env_id.endswith("-v5")
    assert env_type.default_config()["stop_value"] == (np.inf if threshold is None else threshold)
    env = env_type.make(env_type.default_config())
    try:
        obs, _ = env.reset(seed=0)
        assert obs.dtype == np.float32 and env.observation_space.dtype == np.float32
        assert env.observation_space.contains(obs)
        assert isinstance(env.action_space, gym.spaces.Box) and env.spec.max_episode_steps == 1000
    finally:
        env.close()
    assert list(tmp_path.iterdir()) == []


class _Limp:
    """Acts with zero torque: Hopper falls over (terminated), HalfCheetah never does."""

    def forward(self, obs, **kwargs):
        return {"action": torch.zeros((len(obs), 3 if obs.shape[1] == 11 else 6))}


def _collect(task, steps, max_episode_steps=None):
    env_type = ENV_REGISTRY.get(task)
    cfg = dict(env_type.default_config(), max_episode_steps=max_episode_steps)
    venv = gym.vector.SyncVectorEnv([lambda: env_type.make(cfg)], autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        ctx = OnlineRLContext()
        StepCollector(_Limp(), venv, n_sample=steps, seed=0, env_id=cfg["env_id"])(ctx)
        return ctx.trajectories
    finally:
        venv.close()


def test_terminated_and_truncated_are_kept_apart():
    """Hopper falls (terminated, not truncated: no bootstrap); HalfCheetah's time limit truncates (bootstraps
    from its real final observation)."""
    fell = _collect("hopper", 300)
    assert fell.terminated.any() and not fell.truncated.any()
    limited = _collect("halfcheetah", 12, max_episode_steps=5)
    assert limited.truncated.sum() == 2 and not limited.terminated.any()
    last = int(np.flatnonzero(limited.truncated.numpy())[0])
    assert not np.array_equal(limited.next_obs[last].numpy(), limited.obs[last + 1].numpy())  # the reset between


def test_ppo_acts_inside_the_box_and_learns_from_its_unclipped_samples():
    """PPO's Gaussian samples go to the env clipped to the task's Box (``action``), and are kept unclipped
    (``raw_action``) for the log-probabilities; its GAE bootstraps a truncated step from ``next_obs``, which the
    collector keeps as the real final observation (test above, and tests/data/test_gae.py)."""
    from easydict import EasyDict

    from engine.config import deep_merge
    from policies import PPOPolicy

    env_type = ENV_REGISTRY.get("hopper")
    cfg = dict(env_type.default_config(), max_episode_steps=8)
    venv = gym.vector.SyncVectorEnv([lambda: env_type.make(cfg)], autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        policy = PPOPolicy(EasyDict(deep_merge(PPOPolicy.default_config(), dict(obs_norm=True, model=dict(
            init_log_std=1.0)))), venv.single_observation_space, venv.single_action_space)  # std e: past the bounds
        ctx = OnlineRLContext()
        StepCollector(policy.collect_mode, venv, n_sample=24, seed=0, env_id=cfg["env_id"], time_major=True)(ctx)
    finally:
        venv.close()
    traj = ctx.trajectories
    action, raw = traj.action.numpy(), traj.raw_action.numpy()
    assert (np.abs(action) <= 1.0).all() and (np.abs(raw) > 1.0).any()  # Hopper's Box is [-1, 1]^3
    assert np.array_equal(action, np.clip(raw, -1.0, 1.0))
    assert traj.truncated.any() or traj.terminated.any()


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_algo_and_env_from_defaults_use_the_mujoco_family(algo):
    main, create = build_config(algo, "Hopper-v5")
    assert create == dict(env=dict(type="hopper"), policy=dict(type=algo))
    assert main["env"] == dict(env_id="Hopper-v5")  # the family's stop value (3,800) stays


def test_algo_and_env_read_the_spaces_from_the_family_and_leave_no_mujoco_log(tmp_path, monkeypatch):
    """HalfCheetah's model compiles with a MuJoCo warning: the spaces --env reads come from the family's env
    (float32, as in training), whose warnings go to the log, not to a MUJOCO_LOG.TXT in the working directory."""
    monkeypatch.chdir(tmp_path)
    from commands.algo_env import _resolve_env

    family, observation_space = _resolve_env("HalfCheetah-v5")[:2]
    assert family == "halfcheetah" and observation_space.dtype == np.float32
    assert build_config("sac", "HalfCheetah-v5")[1]["env"] == dict(type="halfcheetah")
    assert list(tmp_path.iterdir()) == []


def test_a_config_trains_a_few_updates(tmp_path):
    from dizoo.mujoco.config.hopper_td3_config import create_config, main_config
    from pipelines import serial_pipeline

    main = copy.deepcopy(main_config)
    main.policy.random_collect_size = 32
    main.policy.learn = dict(batch_size=16)
    main.policy.model = dict(actor_head_hidden_size_list=[16], critic_head_hidden_size_list=[16])
    main.env.n_evaluator_episode = main.env.evaluator_env_num = 1
    summary = serial_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=48,
                              exp_name=str(tmp_path / "exp"), progress=False)
    assert summary["env_step"] == 48 and summary["train_iter"] >= 16


def test_without_the_mujoco_extra_the_error_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # import mujoco now raises ImportError
    env_type = ENV_REGISTRY.get("hopper")
    with pytest.raises(ImportError, match=r"env 'Hopper-v5' needs the package 'mujoco' of the 'mujoco' extra: "
                                          r"pip install \"baton-rl\[mujoco\]\".*; importing it failed with "
                                          r"ModuleNotFoundError: import of mujoco halted"):  # the cause, said:
        env_type.make(env_type.default_config())  # a broken install is not a missing one
    with pytest.raises(AlgoEnvError, match=r"--env Hopper-v5: .*pip install \"baton-rl\[mujoco\]\""):
        build_config("sac", "Hopper-v5")


class _Diverges(gym.Wrapper):
    """The simulator's state blows up at its third step."""

    def __init__(self, env):
        super().__init__(env)
        self._t = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        if self._t == 3:
            obs = np.full_like(obs, np.inf)
        return obs, reward, terminated, truncated, info


def test_non_finite_observations_name_the_env_id_and_the_step():
    env_type = ENV_REGISTRY.get("halfcheetah")
    venv = gym.vector.SyncVectorEnv([lambda: _Diverges(env_type.make(env_type.default_config()))],
                                    autoreset_mode=AutoresetMode.SAME_STEP)
    ctx = OnlineRLContext()
    ctx.env_step = 5000
    try:
        with pytest.raises(NonFiniteDataError, match=r"env 0 returned a non-finite next observation \(inf at element "
                                                     r"\[0\] of shape \(17,\)\) at step 2 of this collection \(env id "
                                                     r"'HalfCheetah-v5', 5,000 env steps into the run\)"):
            StepCollector(_Limp(), venv, n_sample=8, seed=0, env_id="HalfCheetah-v5")(ctx)
    finally:
        venv.close()
