"""SAC with hindsight experience replay on FetchReach-v4: ``python dizoo/robotics/config/fetch_reach_sac_her_config.py``.

rl-baselines3-zoo's FetchReach settings (``her.yml``: SAC, HER with ``future`` goals and 4 relabels, discount 0.95,
batch 256, learning rate 1e-3, two layers of 64, observations normalised, 1,000 random steps, one update per env
step), with four envs stepping together. Needs the robotics extra: ``pip install -c constraints.txt -e
".[robotics]"``.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="fetch_reach_sac_her",
    env=dict(collector_env_num=4, n_evaluator_episode=10),
    policy=dict(
        obs_norm=True,
        discount_factor=0.95,
        model=dict(
            actor_head_hidden_size_list=[64, 64], critic_head_hidden_size_list=[64, 64],
            # the three keys joined as they are (SB3's MultiInputPolicy), not each through an MLP of its own
            encoders=dict(observation=dict(type="flatten"), achieved_goal=dict(type="flatten"),
                          desired_goal=dict(type="flatten")),
        ),
        learn=dict(update_per_collect=4),  # batches of 256, the default
        collect=dict(n_sample=4),
        eval=dict(evaluator=dict(eval_freq=500)),
        other=dict(replay_buffer=dict(her=dict(strategy="future"))),  # k=4 and 1M transitions: the defaults
    ),
))
create_config = EasyDict(dict(
    env=dict(type="fetch_reach"),
    policy=dict(type="sac"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
