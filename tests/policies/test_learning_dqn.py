"""Learning quality: DQN solves CartPole-v1 from its dizoo config."""
from __future__ import annotations

import copy

import pytest

from pipelines import serial_pipeline


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_cartpole_dqn_reaches_195(tmp_path, seed):
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    main = copy.deepcopy(main_config)
    main.exp_name = str(tmp_path / "exp")
    summary = serial_pipeline((main, copy.deepcopy(create_config)), seed=seed, max_env_step=100_000,
                              progress=False)
    assert summary["stop_reason"] == "stop_value"
    assert summary["eval_return"] >= 195
