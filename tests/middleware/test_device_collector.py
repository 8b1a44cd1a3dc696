"""The collector on batched torch envs (``data.torch_env``): transitions as on gymnasium envs, with nothing read
back to the host between env steps."""
from __future__ import annotations

import copy
import importlib

import pytest
import torch

import data.replay.device
from data.torch_env import TorchVectorEnv
from dizoo.classic_control.cartpole.torch_env import CartPoleTorch
from dizoo.classic_control.pendulum.torch_env import PendulumTorch
from engine import OnlineRLContext
from engine.config import compile_config
from engine.registry import POLICY_REGISTRY
from middleware import StepCollector
from middleware.collector import NonFiniteDataError

# every way a tensor's value reaches the host: on a GPU each one waits for the device
HOST_READS = ("item", "cpu", "numpy", "tolist", "__bool__", "__float__", "__int__", "__index__", "__array__")


class CountHostReads:
    """Counts the calls of ``HOST_READS`` on any tensor while active (monkeypatched onto ``torch.Tensor``)."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, __name=name, __original=original, **kwargs):
                self.calls.append(__name)
                return __original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)


def _policy(config_module, **policy_overrides):
    module = importlib.import_module(config_module)
    main, create = copy.deepcopy(module.main_config), copy.deepcopy(module.create_config)
    main.policy.update(policy_overrides)
    cfg = compile_config(main, create, save=False)
    env_cls = CartPoleTorch if "cartpole" in config_module else PendulumTorch
    probe = env_cls(1)
    return POLICY_REGISTRY.get(cfg.policy.type)(cfg.policy, probe.single_observation_space,
                                                 probe.single_action_space), cfg, env_cls


CASES = [  # (config, collect kwargs, on-policy)
    ("dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config", {}, True),
    ("dizoo.classic_control.cartpole.config.cartpole_dqn_torch_config", {"eps": 0.5}, False),
    ("dizoo.classic_control.pendulum.config.pendulum_sac_torch_config", {"random": False}, False),
    ("dizoo.classic_control.pendulum.config.pendulum_sac_torch_config", {"random": True}, False),
]


@pytest.mark.parametrize("config, kwargs, on_policy", CASES, ids=["ppo", "dqn-eps", "sac", "sac-random"])
def test_device_collector_reads_nothing_back_per_env_step(config, kwargs, on_policy, monkeypatch):
    """The host reads of one collect call do not grow with its env steps: a few per call (the finite check
    and the finished episodes' returns), none per step, from the policy's forward to the envs' autoreset.
    The envs are on the CPU here, standing for a device: a Q-network's numpy acting (``host_acting``), which
    serves only tensors already on the host, is turned off, and so is the finite check's in-place numpy read of host
    tensors (``data.replay.device.host_path``, the one host/device switch), so that the path a device's tensors take is counted."""
    policy, cfg, env_cls = _policy(config)
    if getattr(policy.model, "host_acting", False):
        monkeypatch.setattr(type(policy.model), "host_acting", property(lambda self: False))
    monkeypatch.setattr(data.replay.device, "host_path", lambda device: False)
    reads = {}
    for steps in (2, 12):
        env = env_cls(8, max_episode_steps=3)  # episodes end in each counted call: autoreset and returns are read
        collector = StepCollector(policy.collect_mode, env, n_sample=8 * steps, nstep=cfg.policy.get("nstep", 1),
                                        seed=0, time_major=on_policy)
        ctx = OnlineRLContext()
        ctx.collect_kwargs.update(kwargs)
        collector(ctx)  # the first call resets the envs and builds the hot paths: not counted
        with pytest.MonkeyPatch.context() as counting:
            counter = CountHostReads(counting)
            collector(ctx)
        reads[steps] = sorted(counter.calls)
        assert ctx.env_step == 2 * 8 * steps and ctx.collect_stats["episodes"] > 0
    assert reads[2] == reads[12] and len(reads[12]) <= 3, reads


def test_device_collector_transitions_keep_final_obs_and_episode_returns():
    """One env per row: ``next_obs`` is the real next observation (the final one where an episode ended, the
    next row's ``obs`` elsewhere); each finished episode's return is its length (CartPole rewards 1 a step)."""
    policy, cfg, _ = _policy("dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config")
    env = CartPoleTorch(4, max_episode_steps=7)
    collector = StepCollector(policy.collect_mode, env, n_sample=4 * 30, seed=3, time_major=True)
    ctx = OnlineRLContext()
    collector(ctx)
    tr = ctx.trajectories
    assert tr.obs.shape == (30, 4, 4) and tr.logp.shape == (30, 4) and tr.value.shape == (30, 4)
    done = tr.terminated | tr.truncated
    assert tr.truncated.any() and torch.equal(tr.truncated, tr.truncated & ~tr.terminated | tr.truncated)
    follows = torch.isclose(tr.next_obs[:-1], tr.obs[1:]).all(-1)
    assert torch.equal(follows, ~done[:-1])  # the reset observation replaced the final one only in obs
    lengths, expected = torch.zeros(4), []
    for t in range(30):
        lengths += 1
        expected += lengths[done[t]].tolist()
        lengths[done[t]] = 0
    assert ctx.episode_returns == expected and ctx.env_episode == len(expected) > 4
    assert (tr.truncated.float().sum(0) >= 1).all() and lengths.max() < 7
    # the logger's collection time counts this collector too, as every collector's (middleware.collector)
    assert ctx.collect_time_total == ctx.collect_stats["duration"] > 0


def test_device_collector_nstep_matches_on_device_layout():
    policy, cfg, _ = _policy("dizoo.classic_control.cartpole.config.cartpole_dqn_torch_config")
    env = CartPoleTorch(4)
    collector = StepCollector(policy.collect_mode, env, n_sample=4 * 6, nstep=3, gamma=0.9, seed=0)
    ctx = OnlineRLContext()
    ctx.collect_kwargs["eps"] = 1.0
    collector(ctx)
    first = ctx.trajectories
    assert len(first.reward) == 4 * 4  # the last n-1 steps of each env wait for the next call
    assert first.action.dtype == torch.int64 and set(first.action.unique().tolist()) <= {0, 1}
    assert torch.allclose(first.reward[first.span == 3], torch.tensor(1 + 0.9 + 0.81))


def test_device_collector_refuses_host_policies_and_names_non_finite_data():
    class NumpyPolicy:
        def forward(self, obs, **kwargs):
            return {"action": obs[:, 0].numpy() > 0}

    collector = StepCollector(NumpyPolicy(), CartPoleTorch(2), n_sample=2)
    with pytest.raises(TypeError, match="answers a tensor with tensors"):
        collector(OnlineRLContext())

    class Broken(CartPoleTorch):
        def _dynamics(self, state, action):
            state, reward, terminated = super()._dynamics(state, action)
            return state, torch.where(torch.arange(state.shape[1]) == 1, float("nan"), reward), terminated

    class Zero:
        def forward(self, obs, **kwargs):
            return {"action": torch.zeros(len(obs), dtype=torch.long)}

    with pytest.raises(NonFiniteDataError, match="env 1 returned a non-finite reward"):
        StepCollector(Zero(), Broken(2), n_sample=2)(OnlineRLContext())
    assert issubclass(Broken, TorchVectorEnv)
