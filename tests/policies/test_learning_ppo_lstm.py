"""Learning quality: recurrent PPO solves CartPole with its velocities hidden, where feed-forward PPO cannot."""
from __future__ import annotations

import copy

import pytest

from pipelines import serial_pipeline

BUDGET = 100_000  # env steps: rl-baselines3-zoo's for CartPoleNoVel-v1, over which the config anneals its rate
FEED_FORWARD_BUDGET = 30_000


@pytest.mark.slow
def test_ppo_lstm_holds_masked_cartpole_solved_to_its_budget_where_feed_forward_ppo_stays_far_below(tmp_path):
    """cartpole_masked_ppo_lstm_config.py ends 100,000 env steps at or above CartPole-v1's threshold, 475: seeds
    0-7 ended at 500, 481.3, 500, 489.4, 500, 500, 500 and 500 (BENCHMARKS.md, "Scores that hold"), where the
    constant rate without reward normalisation fell back to 190 and 140 after reaching 500 on seeds 1 and 2 (seed
    2 runs here). The final evaluation is asserted, not the best: a recurrent PPO that stops learning, or forgets
    after solving, fails here. Feed-forward PPO (cartpole_masked_ppo_config.py), which sees one observation
    without the velocities, stays far below (best 56 in 100,000 env steps; 30,000 here)."""
    from dizoo.classic_control.cartpole.config import cartpole_masked_ppo_config as feed_forward
    from dizoo.classic_control.cartpole.config import cartpole_masked_ppo_lstm_config as recurrent

    runs = {}
    for name, config, budget in (("recurrent", recurrent, BUDGET), ("feed_forward", feed_forward, FEED_FORWARD_BUDGET)):
        main = copy.deepcopy(config.main_config)
        main.exp_name = str(tmp_path / name)
        main.env.stop_value = float("inf")  # the whole budget: the return at its end is what is asserted
        runs[name] = serial_pipeline((main, copy.deepcopy(config.create_config)), seed=2, max_env_step=budget,
                                     progress=False)
    assert runs["recurrent"]["stop_reason"] == "max_env_step" and runs["recurrent"]["eval_return"] >= 475, \
        runs["recurrent"]
    assert runs["feed_forward"]["best_eval_return"] < 100, runs["feed_forward"]
