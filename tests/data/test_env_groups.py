"""Env groups and the overlapped env loop, on the counting env (obs = [step in episode, episode id]): the same
data as one vector env and the serial loop, with the policy's forward running while another group steps."""
from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import torch
import pytest

from data.env_groups import EnvGroups, group_sizes
from data.env_loop import EnvLoop
from data.envs import make_vector_env
from engine.registry import ENV_REGISTRY


class ObsPolicy:
    """Deterministic and observation-dependent: action = (step + episode + 1) % 2 per row."""

    def __init__(self):
        self.rows = []

    def forward(self, obs, **kwargs):
        obs = np.asarray(obs)
        self.rows.append(len(obs))
        return {"action": torch.from_numpy(((obs[:, 0] + obs[:, 1] + 1) % 2).astype(np.int64)),
                "value": torch.from_numpy(obs[:, 0] * 0.5)}


def _env(num_envs, groups, manager="sync", **env):
    env_type = ENV_REGISTRY.get("counting")  # truncates after 5 steps
    env_cfg = dict(env_type.default_config(), manager=dict(type=manager, shared_memory=False, context=None), **env)
    return make_vector_env(env_type, env_cfg, num_envs, seed=0, groups=groups)


def test_group_sizes_split_consecutive_envs():
    assert group_sizes(8, 2) == [4, 4] and group_sizes(5, 2) == [3, 2] and group_sizes(3, 3) == [1, 1, 1]
    with pytest.raises(ValueError, match="cannot split 1 envs into 2 groups"):
        group_sizes(1, 2)


def test_env_groups_step_like_one_vector_env():
    whole, grouped = _env(5, 1, env_kwargs=dict(terminate_at=3)), _env(5, 2, env_kwargs=dict(terminate_at=3))
    assert isinstance(grouped, EnvGroups) and grouped.sizes == [3, 2] and grouped.num_envs == 5
    assert grouped.action_space.shape == (5,) and grouped.single_observation_space == whole.single_observation_space
    obs_w, _ = whole.reset(seed=list(range(5)))
    obs_g, _ = grouped.reset(seed=list(range(5)))
    assert np.array_equal(obs_w, obs_g)
    for t in range(4):
        action = np.arange(5) % 2
        w, g = whole.step(action), grouped.step(action)
        for a, b in zip(w[:4], g[:4]):
            assert np.array_equal(a, b)
        if t == 2:  # every episode ends here: each env's real last observation, in env order
            assert [o.tolist() for o in g[4]["final_obs"]] == [o.tolist() for o in w[4]["final_obs"]]
    grouped.close()


def test_env_groups_merge_info_fills_groups_without_a_key():
    from data.env_groups import _merge_info

    infos = [{"final_obs": np.array([None, np.ones(2)], dtype=object), "_final_obs": np.array([False, True]),
              "env_id": np.array([0, 1])}, {"env_id": np.array([0])}]
    merged = _merge_info(infos, [2, 1], [0, 2])
    assert merged["final_obs"][2] is None and merged["_final_obs"].tolist() == [False, True, False]
    assert merged["env_id"].tolist() == [0, 1, 2]


def test_env_groups_send_recv_misuse_is_named():
    env = _env(2, 2)
    env.send(0, np.zeros(1, dtype=np.int64))
    with pytest.raises(RuntimeError, match="still stepping"):
        env.send(0, np.zeros(1, dtype=np.int64))
    with pytest.raises(RuntimeError, match="no step in flight"):
        env.recv(1)
    with pytest.raises(RuntimeError, match="reset while"):
        env.reset(seed=0)
    env.close()  # receives the step in flight first


def test_env_groups_refuse_different_envs():
    a = _env(1, 1)
    b = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(ValueError, match="group 1 has spaces"):
        EnvGroups([a, b])


def _assert_same_steps(serial_steps, overlapped_steps):
    assert len(serial_steps) == len(overlapped_steps)
    for s, o in zip(serial_steps, overlapped_steps):
        for field in ("obs", "action", "next_obs", "reward", "terminated", "truncated", "ended"):
            assert torch.equal(getattr(s, field), getattr(o, field)), field
        assert torch.equal(s.out["value"], o.out["value"])


def _assert_same_episodes(serial, overlapped):
    for s, o in zip(serial.finished(), overlapped.finished()):
        assert (s is None and o is None) or torch.equal(s, o)  # agent_returns: None, one agent per env


@pytest.mark.parametrize("num_envs,groups", [(4, 2), (5, 2), (3, 3)])
def test_overlapped_loop_gives_the_serial_loops_steps(num_envs, groups):
    serial = EnvLoop(ObsPolicy(), _env(num_envs, 1, env_kwargs=dict(terminate_at=3)), seed=0)
    policy = ObsPolicy()
    overlapped = EnvLoop(policy, _env(num_envs, groups, env_kwargs=dict(terminate_at=3)), seed=0)
    assert overlapped.overlap and not serial.overlap
    # two runs (collector calls) and a single step: episodes end inside and across them
    serial_steps = [serial.step() for _ in range(11)]
    overlapped_steps = list(overlapped.run(7)) + list(overlapped.run(3)) + [overlapped.step()]
    _assert_same_steps(serial_steps, overlapped_steps)
    assert any(s.ended.any() for s in overlapped_steps)
    _assert_same_episodes(serial, overlapped)
    assert set(policy.rows) == set(group_sizes(num_envs, groups))  # one forward per group and step
    assert torch.equal(serial.obs, overlapped.obs)
    overlapped.env.close()


def test_overlapped_loop_reset_seeds_env_i_with_seed_plus_i():
    loop = EnvLoop(ObsPolicy(), _env(4, 2), seed=0)
    list(loop.run(2))
    obs = loop.reset(seed=7)
    assert obs.shape == (4, 2) and loop.current_obs() is not None
    list(loop.run(5))
    finished = loop.finished()
    assert finished.lengths.tolist() == [5, 5, 5, 5] and finished.returns.tolist() == [5.0] * 4


def test_overlapped_loop_stopped_early_finishes_the_steps_in_flight():
    loop = EnvLoop(ObsPolicy(), _env(4, 2), seed=0)
    run = loop.run(4)
    first, second = next(run), next(run)
    assert first.obs[:, 0].tolist() == [0, 0, 0, 0] and second.obs[:, 0].tolist() == [1, 1, 1, 1]
    run.close()  # the third step of both groups was in flight: observed, not yielded
    assert not any(loop.env._in_flight)
    assert loop.obs[:, 0].tolist() == [3, 3, 3, 3]
    third = next(loop.run(1))
    assert third.obs[:, 0].tolist() == [3, 3, 3, 3] and third.ended_envs() == []
    assert third.next_obs[:, 0].tolist() == [4] * 4


class _SlowEnv(gym.Env):
    """Each step sleeps (releasing the GIL, as a C++ emulator does) and records when it ran."""

    log = []
    observation_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        start = time.perf_counter()
        time.sleep(0.03)
        self.log.append((start, time.perf_counter(), threading.get_ident()))
        return np.zeros(1, np.float32), 0.0, False, False, {}


class _SlowPolicy:
    def __init__(self):
        self.log = []

    def forward(self, obs, **kwargs):
        start = time.perf_counter()
        time.sleep(0.03)
        self.log.append((start, time.perf_counter()))
        return {"action": torch.zeros(len(obs), dtype=torch.long)}


def test_overlapped_loop_acts_while_the_other_group_steps():
    _SlowEnv.log = []
    same_step = dict(autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    env = EnvGroups([gym.vector.SyncVectorEnv([_SlowEnv], **same_step), gym.vector.SyncVectorEnv([_SlowEnv], **same_step)])
    policy = _SlowPolicy()
    list(EnvLoop(policy, env, seed=0).run(3))
    env.close()
    steps = _SlowEnv.log
    assert len(steps) == 6 and len(policy.log) == 6
    assert all(ident != threading.get_ident() for *_, ident in steps)  # a sync group steps on a worker thread
    # every forward but the first (nothing is stepping yet) runs while some env step runs
    overlapping = [any(fs < se and ss < fe for ss, se, _ in steps) for fs, fe in policy.log]
    assert overlapping[1:] == [True] * 5


def test_env_groups_of_async_vector_envs():
    serial = EnvLoop(ObsPolicy(), _env(2, 1, env_kwargs=dict(terminate_at=3)), seed=0)
    env = _env(2, 2, manager="async", env_kwargs=dict(terminate_at=3))
    assert all(isinstance(g, gym.vector.AsyncVectorEnv) for g in env.groups)
    overlapped = EnvLoop(ObsPolicy(), env, seed=0)
    _assert_same_steps([serial.step() for _ in range(7)], list(overlapped.run(7)))
    _assert_same_episodes(serial, overlapped)
    env.close()


def test_env_groups_doctests():
    import doctest

    import data.env_groups

    assert doctest.testmod(data.env_groups).failed == 0


class _FirstBit:
    """Flips bit 0 in every env: 2-bit goals that differ in bit 0 alone are met in one step, others never."""

    def forward(self, obs, **kwargs):
        return {"action": torch.zeros(len(obs["observation"]), dtype=torch.long)}


@pytest.mark.parametrize("groups", [1, 2])
def test_loop_steps_carry_each_ended_episodes_is_success_in_env_order(groups):
    """``EnvStep.success``: the env's ``info["is_success"]`` where an episode ended (the bit-flipping env succeeds
    exactly when it terminates: 1, else 0), -1 where no episode ended, merged across env groups in env order."""
    import dizoo.goal.envs  # noqa: F401  (registers the bit_flipping env type)

    env_type = ENV_REGISTRY.get("bit_flipping")
    env_cfg = dict(env_type.default_config(), env_kwargs=dict(n_bits=2), max_episode_steps=3,
                   manager=dict(type="sync", shared_memory=False, context=None))
    env = make_vector_env(env_type, env_cfg, 4, seed=0, groups=groups)
    loop = EnvLoop(_FirstBit(), env, seed=0)
    seen = 0
    for step in loop.run(12):
        if step.success is None:
            assert not step.has_ended()
            continue
        seen += 1
        assert torch.equal(step.success, torch.where(step.ended, step.terminated.to(torch.int8), -1))
    assert seen > 0
    env.close()


def test_an_env_types_make_vector_without_a_manager_argument_still_builds():
    """A plugin env type written before ``make_vector`` took ``manager`` is called as it was."""
    calls = []

    class OldPlugin:
        @staticmethod
        def make_vector(env_cfg, num_envs, seed, training):
            calls.append((num_envs, seed, training))
            return gym.make_vec("CartPole-v1", num_envs=num_envs)

    env = make_vector_env(OldPlugin, {"env_id": "CartPole-v1"}, 2, seed=3)
    env.close()
    assert calls == [(2, 3, True)]
