"""Training through ``policy.compile='cudagraph_update'`` on a GPU: CartPole DQN, Pendulum SAC and TD3 (skipped
without CUDA). Marked ``gpu_training``, not ``gpu``: each compiles its networks cold and trains for seconds, more
than ``pytest -m gpu``'s share of the acceptance call; ``bash bench/device_checks.sh updates`` runs them
(``pytest -m gpu_training``). tests/gpu/test_update_graph_cuda.py compares the captured updates with eager's."""
from __future__ import annotations

import copy
import logging

import pytest
import torch

pytestmark = [pytest.mark.gpu_training, pytest.mark.timeout(150),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pytest -m gpu_training on a GPU)")]


def test_cartpole_dqn_trains_through_the_captured_update(tmp_path, caplog):
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    from pipelines import serial_pipeline

    main = copy.deepcopy(main_config)
    main.policy.cuda = True
    main.policy.compile = "cudagraph_update"
    main.policy.setdefault("other", {}).setdefault("replay_buffer", {})["device"] = "learn"
    main.log = dict(progress=False)
    with caplog.at_level(logging.WARNING):
        summary = serial_pipeline((main, copy.deepcopy(create_config)), max_env_step=4000,
                                  exp_name=str(tmp_path / "exp"))
    assert "cannot capture" not in caplog.text, caplog.text
    assert summary["env_step"] >= 4000


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_pendulum_trains_through_the_captured_update(algo, tmp_path, caplog):
    """SAC's actor and TD3's smoothing noise sample inside the graph (torch's CUDA generator, advanced at each
    replay), so the updates are checked by what they learn, not number by number: the run captures without a
    fallback and reaches what eager reaches on the CPU in the same steps (-144 for both at 6,000 env steps,
    seed 0; random play: about -1,200). tests/policies/test_update_graph.py compares the program with eager
    number by number on the CPU."""
    import importlib

    from pipelines import serial_pipeline

    module = importlib.import_module(f"dizoo.classic_control.pendulum.config.pendulum_{algo}_config")
    main = copy.deepcopy(module.main_config)
    main.policy.cuda = True
    main.policy.compile = "cudagraph_update"
    main.policy.setdefault("other", {}).setdefault("replay_buffer", {})["device"] = "learn"
    main.env.stop_value = float("inf")  # env.stop_value=none
    main.log = dict(progress=False)
    with caplog.at_level(logging.WARNING):
        summary = serial_pipeline((main, copy.deepcopy(module.create_config)), seed=0, max_env_step=6000,
                                  exp_name=str(tmp_path / algo))
    assert "cannot capture" not in caplog.text, caplog.text
    assert summary["eval_return"] > -400, summary


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3"])
def test_the_captured_learner_waits_for_nothing_once_it_runs(algo, tmp_path):
    """The whole learner stage (the buffer's readiness, indices drawn on the device, the captured update, the
    statistics' read-back, DQN's priorities where on) under ``torch.cuda.set_sync_debug_mode("error")`` once its
    graphs are captured: a host wait for the device anywhere in it fails the run, naming the operation (the
    guide's "no host sync in a hot loop"; tests/gpu/test_device_envs.py checks the pieces alone)."""
    import importlib

    from pipelines import build_pipeline

    family = "cartpole" if algo == "dqn" else "pendulum"
    module = importlib.import_module(f"dizoo.classic_control.{family}.config.{family}_{algo}_config")
    main = copy.deepcopy(module.main_config)
    main.policy.cuda = True
    main.policy.compile = "cudagraph_update"
    main.policy.setdefault("other", {}).setdefault("replay_buffer", {})["device"] = "learn"
    main.env.stop_value = float("inf")
    main.log = dict(progress=False)
    strict_from = 100  # updates: the graphs are captured by then (warm-up and capture wait, once)
    checked = []

    def strict(ctx):
        if ctx.train_iter >= strict_from:
            torch.cuda.set_sync_debug_mode("error")
            checked.append(ctx.train_iter)

    def lenient(ctx):
        torch.cuda.set_sync_debug_mode(0)

    pipeline = build_pipeline((main, copy.deepcopy(module.create_config)), seed=0, max_env_step=3000,
                              exp_name=str(tmp_path / algo))
    pipeline.insert_before("learner", strict, name="strict").insert_after("learner", lenient, name="lenient")
    try:
        summary = pipeline.run()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len(checked) >= 5, (checked, summary)
