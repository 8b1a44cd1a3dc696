"""Recurrent PPO (``ppo_lstm``): the memory through collection (reset at terminated and truncated steps, per env
and per env group), the sequences learning replays, the unroll against acting, and what is refused."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from easydict import EasyDict

from data.env_loop import EnvLoop
from data.envs import make_vector_env
from data.sequences import SequenceError, check_seq_len, to_sequences
from engine.config import ConfigError, compile_config
from engine.context import OnlineRLContext
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from middleware import StepCollector, gae_estimator
from policies.greedy import NotExportableError


class StepCounter:
    """A recurrent 'policy' whose memory counts the steps it has seen since its episode began; it records the
    memory it was given for each observation."""

    def __init__(self):
        self.seen = []  # (obs, memory) per call

    def initial_state(self, num_envs):
        return torch.zeros(num_envs, 1, 1)

    def forward(self, obs, state):
        self.seen.append((obs.clone(), state[:, 0, 0].clone()))
        return {"action": torch.zeros(len(obs), dtype=torch.long), "next_state": state + 1}


@pytest.mark.parametrize("end", ["terminated", "truncated"])
@pytest.mark.parametrize("overlap", [False, True])
def test_env_loop_resets_the_memory_where_an_episode_ended(end, overlap):
    """The counting env's observation is the step within its episode: a memory reset exactly at each episode's
    start (after a terminated or a truncated step; per env, per env group) equals it at every step."""
    env_type = ENV_REGISTRY.get("counting")  # truncates after 5 steps
    kwargs = dict(terminate_at=3) if end == "terminated" else {}
    env_cfg = dict(env_type.default_config(), env_kwargs=kwargs)
    policy = StepCounter()
    env = make_vector_env(env_type, env_cfg, 4, seed=0, groups=2 if overlap else 1)
    loop = EnvLoop(policy, env, seed=0)
    assert loop.overlap == overlap
    ends = 0
    try:
        for step in loop.run(12):
            ends += int(getattr(step, end).sum())
    finally:
        env.close()
    assert ends >= 8  # every env ended two episodes or more
    for obs, memory in policy.seen:
        assert memory.tolist() == obs[:, 0].tolist()


def test_to_sequences_keeps_order_start_states_and_episode_starts():
    steps, envs, seq_len = 8, 3, 4
    t = torch.arange(steps).reshape(steps, 1).expand(steps, envs)
    e = torch.arange(envs).reshape(1, envs).expand(steps, envs)
    terminated = torch.zeros(steps, envs, dtype=torch.bool)
    truncated = torch.zeros(steps, envs, dtype=torch.bool)
    terminated[1, 0] = True   # env 0: a new episode at step 2 (inside its first sequence)
    truncated[3, 1] = True    # env 1: a new episode at step 4 (its second sequence's first step: stored memory)
    truncated[5, 2] = True    # env 2: a new episode at step 6
    seqs = to_sequences({"reward": (10 * t + e).float(), "terminated": terminated, "truncated": truncated,
                         "state": (10 * t + e).float().reshape(steps, envs, 1, 1),
                         "next_state": torch.zeros(steps, envs, 1, 1)}, seq_len)
    assert "next_state" not in seqs
    assert seqs["reward"].shape == (envs * steps // seq_len, seq_len)
    for row in range(len(seqs["reward"])):
        env, chunk = divmod(row, steps // seq_len)
        expected = [10 * (chunk * seq_len + i) + env for i in range(seq_len)]
        assert seqs["reward"][row].tolist() == expected                    # consecutive steps of one env
        assert seqs["state"][row].item() == expected[0]                    # the memory before the first step
    starts = {(row, i) for row, i in seqs["episode_start"].nonzero().tolist()}
    assert starts == {(0, 2), (5, 2)}  # env 0 step 2; env 2 (rows 4, 5) step 6; env 1's start is a first step


@pytest.mark.parametrize("steps,seq_len,match", [(8, 16, "cannot be longer than the rollout"),
                                                 (12, 8, "does not divide the 12 steps per env"),
                                                 (8, 0, "does not divide")])
def test_check_seq_len_names_the_rollout_and_the_fix(steps, seq_len, match):
    with pytest.raises(SequenceError, match=match) as err:
        check_seq_len(steps, 4, seq_len)
    assert "n_sample to a multiple of seq_len * collector_env_num" in str(err.value)


def _policy_and_env(rnn_type="lstm", num_envs=4, groups=1, shared_core=False, **env):
    from dizoo.classic_control.cartpole.config.cartpole_masked_ppo_lstm_config import create_config, main_config

    main = copy.deepcopy(main_config)
    main.policy.model = EasyDict(dict(rnn_type=rnn_type, hidden_size=16, encoder_hidden_size_list=[16],
                                      actor_head_hidden_size_list=[16], critic_head_hidden_size_list=[16],
                                      shared_core=shared_core))
    main.env.update(env)
    cfg = compile_config(main, create_config, save=False)
    vec = make_vector_env(ENV_REGISTRY.get(cfg.env.type), cfg.env, num_envs, seed=0, groups=groups)
    policy = POLICY_REGISTRY.get("ppo_lstm")(cfg.policy, vec.single_observation_space, vec.single_action_space)
    return policy, vec


@pytest.mark.parametrize("rnn_type,groups,shared", [("lstm", 1, False), ("gru", 1, False), ("lstm", 2, False),
                                                    ("gru", 1, True)], ids=["lstm", "gru", "overlapped", "shared"])
def test_unroll_of_stored_sequences_equals_acting(rnn_type, groups, shared):
    """Learning's unroll from each sequence's stored memory, zeroed at the episode starts inside it, gives the
    log-probs and values acting gave, exactly; the memory stored after each step is the next step's (GAE's
    bootstrap from it is the value acting would have given); and the first update's ratio is 1. Also with the
    overlapped collector, whose env groups each hold their own envs' memories."""
    torch.manual_seed(0)
    # episodes cut at 15 steps: truncations as well as terminations
    policy, env = _policy_and_env(rnn_type, groups=groups, shared_core=shared, max_episode_steps=15)
    ctx = OnlineRLContext()
    try:
        StepCollector(policy.collect_mode, env, 4 * 32, time_major=True)(ctx)
    finally:
        env.close()
    _check_unroll_equals_acting(policy, ctx)


def _check_unroll_equals_acting(policy, ctx):
    """The checks of test_unroll_of_stored_sequences_equals_acting on a ``[32, 4]`` rollout in ``ctx``."""
    traj = ctx.trajectories
    assert bool(traj.truncated.any()) and bool(traj.terminated.any())
    done = traj.terminated | traj.truncated
    with torch.no_grad():  # V(next_obs) from next_state is the next step's value where the episode goes on
        next_value = policy.model.value(traj.next_obs[:-1].flatten(0, 1), traj.next_state[:-1].flatten(0, 1))
    going_on = ~done[:-1].flatten()
    assert torch.allclose(next_value[going_on], traj.value[1:].flatten()[going_on], atol=1e-6)
    gae_estimator(policy.collect_mode, gamma=0.99, lam=0.95, seq_len=8)(ctx)
    seqs = ctx.trajectories
    assert seqs.obs.shape[:2] == (4 * 32 // 8, 8) and bool(seqs.episode_start.any())
    with torch.no_grad():
        head, value = policy.model(*policy._learn_inputs(seqs))
    logp = torch.distributions.Categorical(logits=head).log_prob(seqs.action.flatten(0, 1).long())
    assert torch.allclose(logp, seqs.logp.flatten(0, 1), atol=1e-6)
    assert torch.allclose(value, seqs.value.flatten(0, 1), atol=1e-6)
    out = policy.learn_mode.forward(seqs[:4])
    assert float(out["approx_kl"]) == pytest.approx(0.0, abs=1e-6) and float(out["clipfrac"]) == 0.0


def test_collector_on_torch_envs_carries_the_memory_per_env():
    """Batched torch envs (``data.torch_env``, here on the CPU): the env loop holds each env's memory and zeroes
    it where an episode ended, on the envs' device as on the host; learning's unroll reproduces acting there too."""
    from dizoo.classic_control.cartpole.torch_env import CartPoleTorch

    torch.manual_seed(0)
    main = dict(policy=dict(model=dict(hidden_size=16, encoder_hidden_size_list=[16]), collect=dict(n_sample=128),
                            learn=dict(seq_len=8, batch_size=64)), env=dict(collector_env_num=4))
    cfg = compile_config(main, dict(env=dict(type="cartpole_torch"), policy=dict(type="ppo_lstm")), save=False)
    env = CartPoleTorch(4, max_episode_steps=15)
    policy = POLICY_REGISTRY.get("ppo_lstm")(cfg.policy, env.single_observation_space, env.single_action_space)
    ctx = OnlineRLContext()
    StepCollector(policy.collect_mode, env, 128, time_major=True)(ctx)
    _check_unroll_equals_acting(policy, ctx)


def test_eval_mode_carries_memory_through_the_evaluator_loop():
    policy, env = _policy_and_env(num_envs=2)
    from middleware.evaluator import evaluate_episodes

    try:
        episodes = evaluate_episodes(EnvLoop(policy.eval_mode, env), 3, seed=5)
    finally:
        env.close()
    assert len(episodes["returns"]) == 3
    with pytest.raises(TypeError, match=r"acts with a memory: call its eval_mode.forward\(obs, state=...\)"):
        policy.eval_mode.forward(torch.zeros(2, 2))


def test_export_refuses_a_recurrent_policy_with_the_reason():
    policy, env = _policy_and_env(num_envs=1)
    env.close()
    with pytest.raises(NotExportableError, match="memory carried from step to step.*baton eval"):
        policy.greedy_module()


def test_a_replay_collector_refuses_n_step_windows_for_a_recurrent_policy():
    """One-step transitions keep the memory each step acted from (QMIX's recurrent agent replays them as sequences);
    an n-step window skips steps the memory followed."""
    policy, env = _policy_and_env(num_envs=2)
    try:
        with pytest.raises(ValueError, match="is recurrent.*policy.nstep=3 skip; give policy.nstep=1"):
            StepCollector(policy.collect_mode, env, 8, nstep=3)
    finally:
        env.close()


def test_continuous_actions_train_and_resume_from_defaults(tmp_path):
    """``--algo ppo_lstm`` on Pendulum (continuous actions) trains, checkpoints and resumes: the checkpoint holds
    the model and optimizer; the acting memory starts from zero with the resumed run's fresh episodes."""
    from pipelines import serial_pipeline
    from commands.algo_env import build_config

    main, create = build_config("ppo_lstm", "Pendulum-v1")
    main.update(exp_name=str(tmp_path / "run"), log=dict(progress=False))
    main["env"].update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1)
    main["policy"] = dict(collect=dict(n_sample=32), learn=dict(seq_len=8, batch_size=16, epoch_per_collect=1),
                          model=dict(hidden_size=8, encoder_hidden_size_list=[8]),
                          eval=dict(evaluator=dict(eval_freq=1000)))
    first = serial_pipeline((main, create), max_env_step=64)
    assert first["env_step"] == 64 and first["train_iter"] == 4
    resumed = serial_pipeline((main, create), max_env_step=128, resume=True)
    assert resumed["env_step"] == 128 and resumed["train_iter"] == 8
