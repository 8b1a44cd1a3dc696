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
