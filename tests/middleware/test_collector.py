"""Collectors and evaluator on a counting env whose observations reveal exactly which step they are."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from engine import OnlineRLContext
from data.envs import UnknownEnvIdError, check_env_id, make_vector_env
from engine.registry import ENV_REGISTRY
from middleware import EpisodeCollector, InteractionEvaluator, StepCollector, termination_checker
from middleware.collector import NonFiniteDataError


class ConstantPolicy:
    def __init__(self):
        self.calls = 0

    def forward(self, obs, **kwargs):
        self.calls += 1
        return {"action": torch.zeros(len(obs), dtype=torch.long)}


def _env(num, **env):
    env_cfg = dict(ENV_REGISTRY.get("counting").default_config(), **env)
    return make_vector_env(ENV_REGISTRY.get("counting"), env_cfg, num, seed=0)


def test_step_collector_one_forward_per_vector_step_and_counters():
    policy, env = ConstantPolicy(), _env(2)
    collector = StepCollector(policy, env, n_sample=10)
    assert collector.env is env  # for middleware of one's own (and the GPU tests' device checks)
    ctx = OnlineRLContext()
    collector(ctx)
    assert policy.calls == 5  # ceil(10 / 2) batched forwards
    assert len(ctx.trajectories.reward) == 10 and ctx.env_step == 10
    # episodes truncate after 5 steps: each env finished exactly one episode of return 5
    assert ctx.env_episode == 2 and ctx.episode_returns == [5.0, 5.0]
    assert ctx.collect_stats["env_steps"] == 10 and ctx.collect_stats["episodes"] == 2


def test_step_collector_truncation_keeps_real_final_obs():
    collector = StepCollector(ConstantPolicy(), _env(2), n_sample=12)
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
    collector = StepCollector(ConstantPolicy(), _env(1, env_kwargs=dict(terminate_at=3)), n_sample=8)
    ctx = OnlineRLContext()
    collector(ctx)
    assert ctx.trajectories.terminated.tolist() == [False, False, True, False, False, True, False, False]
    assert not ctx.trajectories.truncated.any()


def test_step_collector_envs_are_seeded_apart():
    env_cfg = dict(env_id="CartPole-v1", env_kwargs={}, max_episode_steps=None, manager=dict(type="sync"))
    env = make_vector_env(ENV_REGISTRY.get("cartpole"), env_cfg, 4, seed=0)
    ctx = OnlineRLContext()
    StepCollector(ConstantPolicy(), env, n_sample=4)(ctx)
    first = ctx.trajectories.obs
    assert len({tuple(row.tolist()) for row in first}) == 4


class NaNAtStep(gym.Wrapper):
    """Element ``index`` of the observation is NaN after this env's step ``at`` (1 = the first step)."""

    def __init__(self, env, at, index):
        super().__init__(env)
        self._at, self._index, self._t = at, index, 0

    def reset(self, **kwargs):
        self._t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        if self._t == self._at:
            obs = obs.copy()
            obs[self._index] = np.nan
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("shape,index", [((4,), (2,)), ((2, 2), (1, 0)), ((1, 2, 2), (0, 1, 0))],
                         ids=["vector", "matrix", "image"])
def test_step_collector_names_a_nan_in_an_array_observation(shape, index):
    """One element of env 1's third observation is NaN: the collector names the field, the env, the
    element and the step (not numpy's 'only 0-dimensional arrays can be converted')."""
    def make(env_index):
        env = gym.wrappers.ReshapeObservation(gym.make("CartPole-v1"), shape)
        return NaNAtStep(env, at=3, index=index) if env_index == 1 else env

    env = gym.vector.SyncVectorEnv([lambda i=i: make(i) for i in range(3)], autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    with pytest.raises(NonFiniteDataError) as err:
        StepCollector(ConstantPolicy(), env, n_sample=12)(OnlineRLContext())
    assert str(err.value).startswith(f"env 1 returned a non-finite next observation (nan at element {list(index)} "
                                     f"of shape {shape}) at step 2 of this collection")


def test_episode_collector_whole_episodes():
    env = _env(2)
    collector = EpisodeCollector(ConstantPolicy(), env, n_episode=3, gamma=0.9)
    assert collector.env is env
    ctx = OnlineRLContext()
    collector(ctx)
    assert len(ctx.episodes) == 3
    for episode in ctx.episodes:
        assert episode.obs[:, 0].tolist() == [0, 1, 2, 3, 4] and bool(episode.truncated[-1])
    assert ctx.env_episode >= 3 and len(ctx.trajectories.reward) == 15


def test_evaluator_runs_quota_and_stops_at_stop_value():
    evaluator = InteractionEvaluator(ConstantPolicy(), _env(2), eval_freq=10, n_episode=3, stop_value=5.0)
    ctx = OnlineRLContext()
    evaluator(ctx)
    assert ctx.eval_output is None  # never before the first update
    ctx.train_iter = 1
    evaluator(ctx)
    assert ctx.eval_output["returns"] == [5.0, 5.0, 5.0] and ctx.eval_value == 5.0
    assert ctx.finish and ctx.stop_reason == "stop_value" and ctx.last_eval_iter == 1


def test_evaluator_waits_eval_freq_train_iters():
    policy = ConstantPolicy()
    evaluator = InteractionEvaluator(policy, _env(2), eval_freq=10, n_episode=5, stop_value=100.0)
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


def test_step_collector_refuses_a_collect_beyond_the_machines_memory(monkeypatch):
    """Before the first collect, from the env's observation space (issue 34: 100,000 envs were accepted)."""
    import middleware.collector as collector
    from data.nstep import collect_bytes
    from engine.config import ConfigError
    env = _env(4)
    obs_bytes = int(np.prod(env.single_observation_space.shape)) * env.single_observation_space.dtype.itemsize
    needed = collect_bytes(obs_bytes, 4, 64, nstep=3)
    monkeypatch.setattr(collector, "host_memory_bytes", lambda: needed)
    StepCollector(ConstantPolicy(), env, n_sample=64, nstep=3)  # exactly fits
    monkeypatch.setattr(collector, "host_memory_bytes", lambda: needed - 1)
    with pytest.raises(ConfigError, match=r"env.collector_env_num=4 with policy.collect.n_sample=64: one collect holds "
                                          r"the observations of 4 envs x 16 steps and 2 steps each waiting .*more than "
                                          r"this machine's .*give fewer envs or a smaller policy.collect.n_sample"):
        StepCollector(ConstantPolicy(), env, n_sample=64, nstep=3)
    env.close()


class _SaysSuccessOnEvenEnvs(gym.Env):
    """One-step episodes; only an env built with ``says=True`` puts ``is_success`` (True) in its info."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, says):
        self.says = says

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, True, False, ({"is_success": True} if self.says else {})


def test_the_success_rate_counts_only_the_episodes_whose_env_says():
    """An env that gives no ``is_success`` is neither a success nor a failure: the rate is over the episodes that
    said (all successes here), whichever episodes end together."""
    from gymnasium.vector import SyncVectorEnv

    from data.env_loop import EnvLoop
    from middleware.evaluator import evaluate_episodes, evaluation_output

    env = SyncVectorEnv([lambda: _SaysSuccessOnEvenEnvs(True), lambda: _SaysSuccessOnEvenEnvs(False)],
                        autoreset_mode=AutoresetMode.SAME_STEP)
    episodes = evaluate_episodes(EnvLoop(ConstantPolicy(), env, seed=0), n_episode=6, seed=0)
    assert len(episodes["returns"]) == 6 and episodes["successes"] == [True] * 3
    assert evaluation_output(episodes, train_iter=1, env_step=1, duration=0.0)["success_rate"] == 1.0
    silent = SyncVectorEnv([lambda: _SaysSuccessOnEvenEnvs(False)] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    assert "successes" not in evaluate_episodes(EnvLoop(ConstantPolicy(), silent, seed=0), n_episode=4, seed=0)


class _LeanOnAngle:
    """Pushes the cart toward the pole's lean, with a seeded coin flip now and then: CartPole episodes of many
    lengths."""

    def __init__(self):
        self.generator = torch.Generator().manual_seed(3)

    def forward(self, obs, **kwargs):
        lean = (obs[:, 2] > 0).long()
        flip = torch.rand(len(obs), generator=self.generator) < 0.2
        return {"action": torch.where(flip, 1 - lean, lean)}


def test_device_envs_are_evaluated_with_one_read_of_their_ends_per_16_steps(monkeypatch):
    """On torch envs (a GPU's, here on the CPU) the evaluation reads which episodes ended every 16 steps, not at
    each step (each read waits for the device), and takes the same episodes for each env's quota as reading at
    every step does."""
    from data.env_loop import EnvLoop
    from dizoo.classic_control.cartpole.torch_env import CartPoleTorch
    from middleware import evaluator

    def evaluate(read_every):
        monkeypatch.setattr(evaluator, "DEVICE_READ_EVERY", read_every)
        loop = EnvLoop(_LeanOnAngle(), CartPoleTorch(3, max_episode_steps=60), seed=0)
        reads = []
        finished = loop.finished
        monkeypatch.setattr(loop, "finished", lambda: reads.append(1) or finished())
        return evaluator.evaluate_episodes(loop, n_episode=7, seed=5), len(reads)

    every_step, reads_each = evaluate(1)
    batched, reads_batched = evaluate(16)
    assert batched == every_step and len(set(every_step["lengths"])) > 2
    assert reads_batched * 8 <= reads_each, (reads_batched, reads_each)
