"""The overlapped StepCollector (env groups stepped while the policy acts) stores exactly what the serial
collector stores for the same seeds: transitions, n-step windows across calls, GAE streams, counters."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from data.env_groups import EnvGroups
from data.envs import make_vector_env
from engine import OnlineRLContext
from engine.registry import ENV_REGISTRY
from middleware import StepCollector, gae_estimator


class ObsPolicy:
    """Deterministic, observation-dependent actions, with the log-prob and value an on-policy policy returns
    (as torch tensors, as PPO returns them)."""

    def forward(self, obs, **kwargs):
        obs = torch.as_tensor(np.asarray(obs))
        return {"action": ((obs[:, 0] + obs[:, 1] + 1) % 2).long(), "logp": -obs[:, 0] / 10,
                "value": obs[:, 0] * 0.5 + obs[:, 1]}

    def value(self, obs):
        obs = torch.as_tensor(np.asarray(obs))
        return obs[:, 0] * 0.5 + obs[:, 1]


def _env(num_envs, groups, **env):
    env_type = ENV_REGISTRY.get("counting")  # truncates after 5 steps
    return make_vector_env(env_type, dict(env_type.default_config(), **env), num_envs, seed=3, groups=groups)


def _collect(groups, calls, num_envs=5, env_kwargs=None, **kwargs):
    env = _env(num_envs, groups, env_kwargs=dict(terminate_at=4) if env_kwargs is None else env_kwargs)
    collector = StepCollector(ObsPolicy(), env, seed=3, **kwargs)
    ctx = OnlineRLContext()
    out = []
    for _ in range(calls):
        collector(ctx)
        out.append((ctx.trajectories, list(ctx.episode_returns), ctx.env_step, ctx.env_episode))
    return collector, out


def _assert_same(serial, overlapped):
    for (tr_s, ret_s, step_s, ep_s), (tr_o, ret_o, step_o, ep_o) in zip(serial, overlapped):
        assert sorted(tr_s.keys()) == sorted(tr_o.keys())
        for key in tr_s.keys():
            assert torch.equal(getattr(tr_s, key), getattr(tr_o, key)), key
        assert (ret_s, step_s, ep_s) == (ret_o, step_o, ep_o)


@pytest.mark.parametrize("nstep", [1, 3])
@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_step_collector_overlapped_stores_the_serial_transitions(nstep, end):
    # 7 vector steps a call: windows and episodes (terminated at 4, else truncated at 5) cross the calls
    env_kwargs = dict(terminate_at=4) if end == "terminated" else {}
    serial_collector, serial = _collect(1, 3, env_kwargs=env_kwargs, n_sample=35, nstep=nstep, gamma=0.9)
    overlapped_collector, overlapped = _collect(2, 3, env_kwargs=env_kwargs, n_sample=35, nstep=nstep, gamma=0.9)
    assert not serial_collector.overlap and overlapped_collector.overlap
    _assert_same(serial, overlapped)
    assert getattr(overlapped[1][0], end).any()


def test_step_collector_overlapped_keeps_gae_streams():
    gae = gae_estimator(ObsPolicy(), gamma=0.9, lam=0.8)
    results = []
    for groups in (1, 2):
        _, out = _collect(groups, 2, n_sample=30, time_major=True)
        ctxs = []
        for trajectories, *_ in out:
            ctx = OnlineRLContext()
            ctx.trajectories = trajectories
            assert trajectories.reward.shape == (6, 5)  # time-major [T, E]
            gae(ctx)
            ctxs.append(ctx.trajectories)
        results.append((out, ctxs))
    _assert_same(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.equal(a.adv, b.adv) and torch.equal(a.returns, b.returns) and torch.equal(a.logp, b.logp)


def test_step_collector_overlap_needs_env_groups():
    with pytest.raises(ValueError, match="make_vector_env.*groups=2.*env.manager.overlap"):
        StepCollector(ObsPolicy(), _env(2, 1), n_sample=4, overlap=True)
    grouped = _env(4, 2)
    assert isinstance(grouped, EnvGroups)
    assert not StepCollector(ObsPolicy(), grouped, n_sample=4, overlap=False).overlap  # groups stepped together


def test_step_collector_overlapped_dqn_greedy_matches_serial():
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    from engine import compile_config
    from policies import DQNPolicy

    cfg = compile_config(main_config, create_config, save=False)
    trajectories = []
    torch.manual_seed(0)
    for groups in (1, 2):
        env = make_vector_env(ENV_REGISTRY.get("cartpole"), cfg.env, 4, seed=0, groups=groups)
        torch.manual_seed(0)  # the same initial weights
        policy = DQNPolicy(cfg.policy, env.single_observation_space, env.single_action_space)
        collector = StepCollector(policy.collect_mode, env, 4 * 40, nstep=3, gamma=0.99, seed=0)
        ctx = OnlineRLContext()
        ctx.collect_kwargs["eps"] = 0.0  # greedy: the same actions whatever the batch
        collector(ctx)
        collector(ctx)
        trajectories.append(ctx.trajectories)
        env.close()
    for key in trajectories[0].keys():
        assert torch.equal(getattr(trajectories[0], key), getattr(trajectories[1], key)), key


def test_env_manager_overlap_builds_groups_for_the_collector_only(quick_cartpole_config):
    from pipelines import build_pipeline

    main, create = copy.deepcopy(quick_cartpole_config)
    main.env.manager = dict(overlap=True)
    pipeline = build_pipeline((main, create), max_env_step=96, progress=False)
    assert pipeline.cfg.env.manager.overlap is True
    collector = pipeline["collector"]
    assert collector.overlap and isinstance(collector._loop.env, EnvGroups)
    assert not isinstance(pipeline["evaluator"]._loop.env, EnvGroups)  # evaluation envs: one vector env
    summary = pipeline.run()
    assert summary["env_step"] >= 96
