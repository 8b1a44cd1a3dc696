"""Collectors and evaluator on a counting env whose observations reveal exactly which step they are."""
from __future__ import annotations

import pytest
import torch
from easydict import EasyDict

from engine import OnlineRLContext
from engine.envs import UnknownEnvIdError, check_env_id, make_vector_env
from engine.registry import ENV_REGISTRY
from middleware import EpisodeCollector, InteractionEvaluator, StepCollector, termination_checker


class ConstantPolicy:
    def __init__(self):
        self.calls = 0

    def forward(self, obs, **kwargs):
        self.calls += 1
        return {"action": torch.zeros(len(obs), dtype=torch.long)}


def _cfg(n_sample=10, nstep=1, **env):
    env_cfg = dict(ENV_REGISTRY.get("counting").default_config(), **env)
    return EasyDict(seed=0, env=env_cfg, policy=dict(collect=dict(n_sample=n_sample), nstep=nstep,
                                                      discount_factor=0.9,
                                                      eval=dict(evaluator=dict(eval_freq=10))))


def _env(cfg, num):
    return make_vector_env(ENV_REGISTRY.get("counting"), cfg.env, num, seed=0)


def test_step_collector_one_forward_per_vector_step_and_counters():
    cfg = _cfg(n_sample=10)
    env = _env(cfg, 2)
    policy = ConstantPolicy()
    collector = StepCollector(cfg, policy, env)
    ctx = OnlineRLContext()
    collector(ctx)
    assert policy.calls == 5  # ceil(10 / 2) batched forwards
    assert len(ctx.trajectories.reward) == 10 and ctx.env_step == 10
    # episodes truncate after 5 steps: each env finished exactly one episode of return 5
    assert ctx.env_episode == 2 and ctx.episode_returns == [5.0, 5.0]
    assert ctx.collect_stats["env_steps"] == 10 and ctx.collect_stats["episodes"] == 2


def test_step_collector_truncation_keeps_real_final_obs():
    cfg = _cfg(n_sample=12)
    collector = StepCollector(cfg, ConstantPolicy(), _env(cfg, 2))
    ctx = OnlineRLContext()
    collector(ctx)
    tr = ctx.trajectories
    last = tr.truncated.nonzero().squeeze(1)
    assert len(last) == 2
    # the truncated step's next_obs is [5, episode], not the reset obs [0, episode + 1]
    assert tr.next_obs[last, 0].tolist() == [5.0, 5.0]
    assert tr.next_obs[last, 1].tolist() == tr.obs[last, 1].tolist()
    assert not tr.terminated.any()
    # every transition is real: next_obs step = obs step + 1, same episode
    assert torch.all(tr.next_obs[:, 0] == tr.obs[:, 0] + 1)
    assert torch.all(tr.next_obs[:, 1] == tr.obs[:, 1])


def test_step_collector_termination_is_separate_from_truncation():
    cfg = _cfg(n_sample=8, env_kwargs=dict(terminate_at=3))
    collector = StepCollector(cfg, ConstantPolicy(), _env(cfg, 1))
    ctx = OnlineRLContext()
    collector(ctx)
    assert ctx.trajectories.terminated.tolist() == [False, False, True, False, False, True, False, False]
    assert not ctx.trajectories.truncated.any()


def test_step_collector_envs_are_seeded_apart():
    cfg = EasyDict(seed=0, env=dict(env_id="CartPole-v1", env_kwargs={}, max_episode_steps=None,
                                    manager=dict(type="sync")),
                   policy=dict(collect=dict(n_sample=4), nstep=1, discount_factor=0.9))
    env = make_vector_env(ENV_REGISTRY.get("cartpole"), cfg.env, 4, seed=0)
    ctx = OnlineRLContext()
    StepCollector(cfg, ConstantPolicy(), env)(ctx)
    first = ctx.trajectories.obs
    assert len({tuple(row.tolist()) for row in first}) == 4


def test_episode_collector_whole_episodes():
    cfg = _cfg()
    collector = EpisodeCollector(cfg, ConstantPolicy(), _env(cfg, 2), n_episode=3)
    ctx = OnlineRLContext()
    collector(ctx)
    assert len(ctx.episodes) == 3
    for episode in ctx.episodes:
        assert episode.obs[:, 0].tolist() == [0, 1, 2, 3, 4] and bool(episode.truncated[-1])
    assert ctx.env_episode >= 3 and len(ctx.trajectories.reward) == 15


def test_evaluator_runs_quota_and_stops_at_stop_value():
    cfg = _cfg(stop_value=5.0, n_evaluator_episode=3)
    evaluator = InteractionEvaluator(cfg, ConstantPolicy(), _env(cfg, 2))
    ctx = OnlineRLContext()
    evaluator(ctx)
    assert ctx.eval_output is None  # never before the first update
    ctx.train_iter = 1
    evaluator(ctx)
    assert ctx.eval_output["returns"] == [5.0, 5.0, 5.0] and ctx.eval_value == 5.0
    assert ctx.finish and ctx.stop_reason == "stop_value" and ctx.last_eval_iter == 1


def test_evaluator_waits_eval_freq_train_iters():
    cfg = _cfg(stop_value=100.0)
    policy = ConstantPolicy()
    evaluator = InteractionEvaluator(cfg, policy, _env(cfg, 2))
    ctx = OnlineRLContext(train_iter=1)
    evaluator(ctx)
    calls = policy.calls
    ctx.train_iter = 10
    evaluator(ctx)
    assert policy.calls == calls and not ctx.finish
    ctx.train_iter = 11
    evaluator(ctx)
    assert policy.calls > calls and ctx.last_eval_iter == 11


def test_termination_checker_reasons():
    ctx = OnlineRLContext(env_step=100)
    termination_checker(max_env_step=100)(ctx)
    assert ctx.finish and ctx.stop_reason == "max_env_step"
    ctx = OnlineRLContext(train_iter=3)
    termination_checker(max_train_iter=3)(ctx)
    assert ctx.stop_reason == "max_train_iter"
    with pytest.raises(ValueError, match="max_env_step"):
        termination_checker(max_env_step=-1)


def test_unknown_env_id_names_it_and_lists_registered():
    with pytest.raises(UnknownEnvIdError) as err:
        check_env_id("CartPol-v1")
    assert "'CartPol-v1'" in str(err.value) and "CartPole-v1" in str(err.value)
