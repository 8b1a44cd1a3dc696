"""IPPO on MPE Simple Spread: ``python dizoo/pettingzoo/config/simple_spread_ippo_config.py``.

The MAPPO config's settings (``simple_spread_mappo_config.py``) with each agent's critic on its own observation
instead of the global state (de Witt et al., 2020): the same shared actor, no centralised value.
"""
import copy

from dizoo.pettingzoo.config import simple_spread_mappo_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "simple_spread_ippo"
create_config = copy.deepcopy(base.create_config)
create_config.policy.type = "ippo"

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
