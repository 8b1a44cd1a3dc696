"""TD3 with hindsight experience replay on FetchReach-v4: ``python dizoo/robotics/config/fetch_reach_td3_her_config.py``.

The settings of ``fetch_reach_sac_her_config.py`` (rl-baselines3-zoo's her.yml for SAC) with TD3's own losses and
exploration noise. Measured on seed 0 (BENCHMARKS.md, "Hindsight experience replay"): a success rate of 1.0 and a
return of -2.0 after 2,500 env steps (11 s on the 2-core machine). With ``--algo td3 --env FetchReach-v4`` (TD3's
MuJoCo defaults: one update per 8 env steps) no goal was met in 8,000 env steps.
"""
import copy

from dizoo.robotics.config import fetch_reach_sac_her_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "fetch_reach_td3_her"
create_config = copy.deepcopy(base.create_config)
create_config.policy.type = "td3"

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
