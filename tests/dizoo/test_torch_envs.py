"""The batched torch envs (``data.torch_env``, ``dizoo/classic_control/*/torch_env.py``) against gymnasium:
the same physics, rewards, termination and truncation step for step from the same states, and the SAME_STEP
autoreset contract the collectors rely on."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from data.env_loop import EnvLoop
from data.torch_env import TorchEnvType
from dizoo.classic_control.cartpole.envs import CARTPOLE_TORCH
from dizoo.classic_control.cartpole.torch_env import CartPoleTorch
from dizoo.classic_control.pendulum.envs import PENDULUM_TORCH
from dizoo.classic_control.pendulum.torch_env import PendulumTorch
from engine.devices import DeviceError

N = 8


def _cartpole_actions(rng, obs):
    """Half the envs balance (a PD rule that keeps many poles up to the 500-step truncation), half act at
    random (short episodes: many terminations)."""
    balance = (3 * obs[:, 2] + obs[:, 3] > 0).astype(np.int64)
    return np.where(np.arange(len(obs)) < len(obs) // 2, balance, rng.integers(0, 2, len(obs)))


def _pendulum_actions(rng, obs):
    """Torques beyond [-2, 2] (the clip is exercised), in 1/64ths: gymnasium squares and scales the float32
    action in float32, which is exact for these."""
    return (np.round(rng.uniform(-3.0, 3.0, (len(obs), 1)) * 64) / 64).astype(np.float32)


@pytest.mark.parametrize("env_id, torch_cls, actions, steps", [
    ("CartPole-v1", CartPoleTorch, _cartpole_actions, 600),
    ("Pendulum-v1", PendulumTorch, _pendulum_actions, 250),
])
def test_torch_env_matches_gymnasium_step_for_step(env_id, torch_cls, actions, steps):
    """float64 state (as gymnasium's numpy envs compute), every step from gymnasium's states (so that the last
    bits of sin and cos, which differ between numpy and torch, do not add up): whole episodes agree, through
    terminations and truncations; each gymnasium env restarts from the state the torch env reset to."""
    gym_envs = [gym.make(env_id) for _ in range(N)]
    for i, env in enumerate(gym_envs):
        env.reset(seed=i)
    env = torch_cls(N, dtype=torch.float64)
    env.reset(seed=0)
    env.state = np.stack([e.unwrapped.state for e in gym_envs])
    rng = np.random.default_rng(0)
    obs = np.stack([e.unwrapped._get_obs() if hasattr(e.unwrapped, "_get_obs") else
                    np.asarray(e.unwrapped.state, np.float32) for e in gym_envs])
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        action = actions(rng, obs)
        env.state = np.stack([e.unwrapped.state for e in gym_envs])
        next_obs, reward, terminated, truncated, info = env.step(torch.from_numpy(action))
        results = [genv.step(action[i] if action.ndim == 2 else int(action[i])) for i, genv in enumerate(gym_envs)]
        g_obs, g_reward, g_term, g_trunc, _ = (np.array(column) for column in zip(*results))
        np.testing.assert_allclose(info["final_obs"].numpy(), g_obs, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(reward.numpy(), g_reward, rtol=1e-6, atol=1e-6)
        assert np.array_equal(terminated.numpy(), g_term) and np.array_equal(truncated.numpy(), g_trunc)
        for i in np.flatnonzero(g_term | g_trunc):
            gym_envs[i].reset()
            gym_envs[i].unwrapped.state = env.state[i].numpy().copy()
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int(truncated.sum())
        obs = next_obs.numpy()
    if env_id == "CartPole-v1":
        assert ends["terminated"] > 50 and ends["truncated"] >= 1  # both ends were compared
    else:
        assert ends["terminated"] == 0 and ends["truncated"] == N


@pytest.mark.parametrize("torch_cls, action", [(CartPoleTorch, lambda: torch.randint(0, 2, (N,))),
                                               (PendulumTorch, lambda: 4 * torch.rand(N, 1) - 2)])
def test_float32_torch_env_one_step_matches_gymnasium(torch_cls, action):
    """The default float32 state: one step from gymnasium's states agrees to float32 precision."""
    gym_id = "CartPole-v1" if torch_cls is CartPoleTorch else "Pendulum-v1"
    gym_envs = [gym.make(gym_id) for _ in range(N)]
    for i, e in enumerate(gym_envs):
        e.reset(seed=100 + i)
    env = torch_cls(N)
    env.reset(seed=0)
    env.state = np.stack([e.unwrapped.state for e in gym_envs])
    a = action()
    _, reward, terminated, _, info = env.step(a)
    for i, e in enumerate(gym_envs):
        g_obs, g_reward, g_term, _, _ = e.step(a[i].numpy() if a.ndim == 2 else int(a[i]))
        np.testing.assert_allclose(info["final_obs"][i].numpy(), g_obs, rtol=1e-5, atol=1e-5)
        assert float(reward[i]) == pytest.approx(g_reward, rel=1e-5, abs=1e-5) and bool(terminated[i]) == g_term


def test_autoreset_keeps_the_final_observation_and_restarts_inside_the_step():
    env = CartPoleTorch(4)
    env.reset(seed=0)
    env.state = torch.tensor([[2.39, 1.0, 0.0, 0.0]] + [[0.0, 0.0, 0.0, 0.0]] * 3)  # env 0 leaves the track
    obs, reward, terminated, truncated, info = env.step(torch.ones(4, dtype=torch.int64))
    assert terminated.tolist() == [True, False, False, False] and not truncated.any()
    assert float(info["final_obs"][0, 0]) > 2.4               # the real last observation ...
    assert float(obs[0].abs().max()) <= 0.05                 # ... and the reset one in obs
    assert torch.equal(info["final_obs"][1:], obs[1:])       # where nothing ended they are the same
    assert reward.tolist() == [1.0] * 4                       # the terminating step is rewarded, as in gymnasium


def test_truncation_at_max_episode_steps_counts_from_each_reset():
    env = PendulumTorch(3, max_episode_steps=5)
    env.reset(seed=0)
    flags = [env.step(torch.zeros(3, 1))[3].tolist() for _ in range(11)]
    assert [i for i, f in enumerate(flags) if all(f)] == [4, 9] and not any(any(f) for f in flags[:4])


def test_same_seed_same_episodes_other_seed_other_episodes():
    def run(seed):
        env = CartPoleTorch(32)
        out = [env.reset(seed=seed)[0]]
        g = torch.Generator().manual_seed(7)
        for _ in range(60):
            out.append(env.step(torch.randint(0, 2, (32,), generator=g))[0])
        return torch.stack(out)

    assert torch.equal(run(3), run(3)) and not torch.equal(run(3), run(4))


def test_env_type_evaluates_on_the_gymnasium_twin_or_its_cpu_envs_and_refuses_a_missing_device():
    cfg = CARTPOLE_TORCH.default_config()
    twin = CARTPOLE_TORCH.make_vector(cfg, 3, seed=0, training=False)
    assert isinstance(twin, gym.vector.SyncVectorEnv) and twin.envs[0].spec.id == "CartPole-v1"
    host = TorchEnvType("CartPole-torch", CartPoleTorch, stop_value=195).make_vector(cfg, 3, seed=0, training=False)
    assert isinstance(host, CartPoleTorch) and host.device == torch.device("cpu")  # the same loop steps it

    class Zero:
        def forward(self, obs, **kwargs):
            return {"action": torch.zeros(len(obs), dtype=torch.long)}

    step = EnvLoop(Zero(), host, seed=5).step()
    assert step.obs.dtype == torch.float32 and step.next_obs.shape == (3, 4) and step.reward.shape == (3,)
    assert PENDULUM_TORCH.default_config()["env_id"] == "Pendulum-torch"
    collector_env = CARTPOLE_TORCH.make_vector(cfg, 3, seed=0)
    assert isinstance(collector_env, CartPoleTorch) and not collector_env.placed
    missing = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(DeviceError, match=r"env.device='cuda:\d+': this process sees"):
        CARTPOLE_TORCH.make_vector(dict(cfg, device=missing), 3, seed=0)
    with pytest.raises(DeviceError, match="env.device='gpu'"):
        CARTPOLE_TORCH.make_vector(dict(cfg, device="gpu"), 3, seed=0)


# ---- more envs than the device holds: refused before allocation (issue 33, bad input) ----------------------
def test_more_envs_than_the_device_holds_are_refused_before_allocation_naming_the_estimate(monkeypatch):
    import data.torch_env as torch_env
    per_env = CartPoleTorch.bytes_per_env()
    assert per_env == 3 * 4 * 4 + 2 * 4 * 4 + 4 + 3 + 16  # state x3, obs x2, reward, flags, counters
    monkeypatch.setattr(torch_env, "free_memory", lambda device: 1000 * per_env)  # half: 500 envs fit
    made = []
    monkeypatch.setattr(CartPoleTorch, "__init__", lambda self, *a, **k: made.append(a))
    cfg = dict(CARTPOLE_TORCH.default_config(), device="cpu")
    with pytest.raises(DeviceError, match=rf"501 CartPoleTorch envs need about 0.05 MiB on cpu \({per_env} bytes each "
                                          r"per step, the envs' own tensors only\).*use at most 500 envs \(env.collector_env_num\)"):
        CARTPOLE_TORCH.make_vector(cfg, 501, seed=0)
    assert not made  # nothing was allocated
    torch_env.check_fits(CartPoleTorch, 500, "cpu")  # at the limit: fits
    monkeypatch.undo()
    envs = CARTPOLE_TORCH.make_vector(dict(CARTPOLE_TORCH.default_config()), 501, seed=0)  # env.device None
    monkeypatch.setattr(torch_env, "free_memory", lambda device: 1000 * per_env)
    with pytest.raises(DeviceError, match="use at most 500 envs"):  # placed where the policy collects
        torch_env.follow_device(envs, "cpu")
    monkeypatch.setattr(torch_env, "free_memory", lambda device: None)  # unknown: not checked
    torch_env.check_fits(CartPoleTorch, 10**12, "cpu")


def test_the_host_s_free_memory_is_read():
    import os

    from engine.devices import free_memory

    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo")
    assert 0 < free_memory("cpu") < 2**50
