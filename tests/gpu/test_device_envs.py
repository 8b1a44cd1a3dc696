"""Batched torch envs on CUDA (``pytest -m gpu``; skipped without CUDA): the dynamics on the GPU agree with
the CPU's, collection reads nothing back to the host between env steps (and leaves the device only once a
call), and the torch-env configs train with the envs, the rollout or replay and the learner on the GPU."""
from __future__ import annotations

import copy
import importlib
import os
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(150),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run with pytest -m gpu on a GPU)")]


def test_torch_cartpole_on_cuda_steps_as_on_the_cpu():
    from dizoo.classic_control.cartpole.torch_env import CartPoleTorch

    cpu, gpu = CartPoleTorch(4096, dtype=torch.float64), CartPoleTorch(4096, device="cuda", dtype=torch.float64)
    cpu.reset(seed=0)
    gpu.reset(seed=0)
    gpu.state = cpu.state.to("cuda")
    action = torch.randint(0, 2, (4096,), generator=torch.Generator().manual_seed(0))
    _, reward, terminated, _, info = cpu.step(action)
    _, g_reward, g_terminated, _, g_info = gpu.step(action.cuda())
    assert g_info["final_obs"].device.type == "cuda"
    torch.testing.assert_close(g_info["final_obs"].cpu(), info["final_obs"], rtol=1e-6, atol=1e-6)
    assert torch.equal(g_reward.cpu(), reward) and torch.equal(g_terminated.cpu(), terminated)


@pytest.mark.parametrize("config, kwargs, on_policy", [
    ("dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config", {}, True),
    ("dizoo.classic_control.cartpole.config.cartpole_dqn_torch_config", {"eps": 0.5}, False),
    ("dizoo.classic_control.pendulum.config.pendulum_sac_torch_config", {}, False),
])
def test_device_collector_on_cuda_reads_back_once_per_call(config, kwargs, on_policy, monkeypatch):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "middleware"))
    from test_device_collector import CountHostReads, _policy

    from engine import OnlineRLContext
    from middleware import StepCollector

    policy, cfg, env_cls = _policy(config, cuda=True)
    env = env_cls(1024, device="cuda", max_episode_steps=5)
    collector = StepCollector(policy.collect_mode, env, n_sample=1024 * 16, nstep=cfg.policy.get("nstep", 1),
                              seed=0, time_major=on_policy)
    ctx = OnlineRLContext()
    ctx.collect_kwargs.update(kwargs)
    collector(ctx)
    counter = CountHostReads(monkeypatch)
    collector(ctx)
    monkeypatch.undo()
    assert len(counter.calls) <= 3, counter.calls
    assert {ctx.trajectories[k].device.type for k in ctx.trajectories.keys()} == {"cuda"}
    assert ctx.collect_stats["episodes"] > 0


@pytest.mark.parametrize("config", ["dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config",
                                    "dizoo.classic_control.cartpole.config.cartpole_dqn_torch_config",
                                    "dizoo.classic_control.pendulum.config.pendulum_sac_torch_config"])
def test_torch_env_configs_train_on_cuda(config, tmp_path):
    from pipelines import build_pipeline

    module = importlib.import_module(config)
    main, create = copy.deepcopy(module.main_config), copy.deepcopy(module.create_config)
    main.policy.cuda = True
    main.log = dict(progress=False)
    pipeline = build_pipeline((main, create), max_env_step=2048, exp_name=str(tmp_path / "exp"))
    env = pipeline["collector"].env
    assert env.device.type == "cuda"  # env.device None: the envs followed the policy to its GPU
    if pipeline.buffer is not None:
        assert pipeline.buffer.device.type == "cuda"  # replay_buffer.device="learn"
    summary = pipeline.run()
    assert summary["env_step"] >= 2048 and summary["train_iter"] > 0


def test_env_device_names_a_missing_gpu(tmp_path):
    from engine.devices import DeviceError
    from pipelines import build_pipeline

    module = importlib.import_module("dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config")
    main, create = copy.deepcopy(module.main_config), copy.deepcopy(module.create_config)
    main.env.device = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(DeviceError, match="env.device"):
        build_pipeline((main, create), max_env_step=64, exp_name=str(tmp_path / "exp"))


def test_the_learner_s_shuffle_reaches_the_device_without_a_host_wait():
    """A copy to CUDA from pageable memory waits for every queued kernel (the sync debug mode flags it); the
    on-policy learner sends each call's minibatch orders through ``to_device_async``, which does not."""
    from engine.devices import to_device_async

    order = torch.randperm(1 << 16)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):
            order.to("cuda")  # the check can fail: the plain copy is flagged
        moved = to_device_async(order, "cuda")
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert moved.device.type == "cuda" and torch.equal(moved.cpu(), order)


def test_the_learner_s_statistics_come_back_without_a_host_wait():
    """``DeferredReadout`` (the off-policy learner's ``ctx.train_output`` on a GPU): after the first call, a read
    waits for nothing (the sync debug mode would flag a wait) and gives the newest finished call's values."""
    from data.replay.device import DeferredReadout

    readout = DeferredReadout("cuda")
    assert readout.read(["loss"], torch.tensor([1.0], device="cuda")) == {"loss": 1.0}  # the first: waited for
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(2, 6):
            out = readout.read(["loss"], torch.full((1,), float(i), device="cuda"))
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    assert 1.0 <= out["loss"] <= 5.0
    assert readout.read(["loss"], torch.tensor([6.0], device="cuda"))["loss"] >= 5.0  # the device has caught up
