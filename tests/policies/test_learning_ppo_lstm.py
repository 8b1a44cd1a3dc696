"""Learning quality: recurrent PPO solves CartPole with its velocities hidden, where feed-forward PPO cannot."""
from __future__ import annotations

import copy

import pytest

from pipelines import serial_pipeline

BUDGET = 30_000  # env steps


@pytest.mark.slow
def test_ppo_lstm_solves_masked_cartpole_where_feed_forward_ppo_stays_far_below(tmp_path):
    """Seeds 0-2 of cartpole_masked_ppo_lstm_config.py reached the stop value (195) at 18,432, 14,336 and
    16,384 env steps (BENCHMARKS.md); the budget, 30,000, is 1.6 times the slowest, so a recurrent PPO that
    stops learning, or learns at a fraction of its speed, fails here while seed-to-seed noise does not. In the
    same budget feed-forward PPO (cartpole_masked_ppo_config.py), which sees one observation without the
    velocities, stays far below it (best 56 in 100,000 env steps). Seed 1, both runs: 55 s on the 2-core machine
    where it was measured, under a load average of 5."""
    from dizoo.classic_control.cartpole.config import cartpole_masked_ppo_config as feed_forward
    from dizoo.classic_control.cartpole.config import cartpole_masked_ppo_lstm_config as recurrent

    runs = {}
    for name, config in (("recurrent", recurrent), ("feed_forward", feed_forward)):
        main = copy.deepcopy(config.main_config)
        main.exp_name = str(tmp_path / name)
        main.env.stop_value = 195  # CartPole-v0's level, the field's for masked CartPole (the configs stop at 475)
        runs[name] = serial_pipeline((main, copy.deepcopy(config.create_config)), seed=1, max_env_step=BUDGET,
                                     progress=False)
    assert runs["recurrent"]["stop_reason"] == "stop_value" and runs["recurrent"]["eval_return"] >= 195
    assert runs["feed_forward"]["stop_reason"] == "max_env_step"
    assert runs["feed_forward"]["best_eval_return"] < 100, runs["feed_forward"]
