"""Learning quality on MuJoCo (issue 20, item 5): SAC balances InvertedPendulum-v5, TD3 keeps Hopper-v5 up.

Why these tasks: they are the MuJoCo tasks that a CI budget affords. Hopper-v5 at 1,000 needs tens of thousands of
SAC updates of 256 transitions (BENCHMARKS.md: Hopper SAC returned 237 after 15,000 env steps), several minutes
of an idle core, where InvertedPendulum is balanced for whole episodes after 11,000 to 12,000 env steps. TD3 does
not balance it at that budget (baton's and SB3's TD3 alike stay near 60 to 130 up to 20,000 env steps:
BENCHMARKS.md), so TD3's test is Hopper at a lower bar.
"""
from __future__ import annotations

import copy

import pytest

from pipelines import serial_pipeline

pytest.importorskip("mujoco")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_invertedpendulum_sac_reaches_950_within_20k_env_steps(tmp_path):
    """invertedpendulum_sac_config.py (CleanRL's SAC settings, 1,000 random warm-up steps, an evaluation of 5
    greedy episodes every 1,000 updates) with networks of 64x64 and batches of 128 in place of 256x256 and 256:
    a quarter of the time per update, so that the test fits the suite. Measured on the 2-core machine with SAC's
    update in SB3's order (2026-11-29, two runs at once): seed 0 returned 1,000 (every episode balanced to its
    time limit) at 13,001 env steps, the stop, in 29 s of training; seed 1 at 19,001 (43 s). Before that order
    (BENCHMARKS.md), seeds 0 and 1 stopped at 10,001 and 18,001, and with the config's own networks at 11,001 and
    12,001 env steps. The budget of 20,000 env steps is 1.5 times seed 0's."""
    from dizoo.mujoco.config import invertedpendulum_sac_config as config

    main = copy.deepcopy(config.main_config)
    main.exp_name = str(tmp_path / "exp")
    main.policy.model = dict(actor_head_hidden_size_list=[64, 64], critic_head_hidden_size_list=[64, 64])
    main.policy.learn.batch_size = 128
    summary = serial_pipeline((main, copy.deepcopy(config.create_config)), seed=0, max_env_step=20_000,
                              progress=False)
    assert summary["stop_reason"] == "stop_value" and summary["eval_return"] >= 950
    assert summary["env_step"] <= 20_000


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_hopper_td3_reaches_150_within_20k_env_steps(tmp_path):
    """hopper_td3_config.py (rl-baselines3-zoo's TD3 settings: rates of 1e-3) with networks of 64x64, batches of
    128, 5,000 random warm-up steps in place of 10,000 and an evaluation of 5 greedy episodes every 1,000 updates.
    Measured on the 2-core machine (2026-11-29): 150 or more at 7,001, 9,001 and 9,001 env steps (seeds 0, 1, 2;
    with CleanRL's rates of 3e-4 it was 8,000, 11,000 and 7,000, BENCHMARKS.md). 150 is Hopper upright and moving
    for over a hundred steps, not a gait (SAC's 1,000 needs tens of thousands of updates of the config's networks);
    the budget of 20,000 env steps is twice the slowest seed's."""
    from dizoo.mujoco.config import hopper_td3_config as config

    main = copy.deepcopy(config.main_config)
    main.exp_name = str(tmp_path / "exp")
    main.env.stop_value = 150
    main.policy.random_collect_size = 5000
    main.policy.eval = dict(evaluator=dict(eval_freq=1000))
    main.policy.model = dict(actor_head_hidden_size_list=[64, 64], critic_head_hidden_size_list=[64, 64])
    main.policy.learn.batch_size = 128  # the config's rates of 1e-3 kept
    summary = serial_pipeline((main, copy.deepcopy(config.create_config)), seed=0, max_env_step=20_000,
                              progress=False)
    assert summary["stop_reason"] == "stop_value" and summary["eval_return"] >= 150
    assert summary["env_step"] <= 20_000
