"""PPO on LunarLander-v3 (discrete): ``python dizoo/box2d/lunarlander/config/lunarlander_ppo_config.py``.

Needs the box2d extra: ``pip install -c constraints.txt -e ".[box2d]"``.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="lunarlander_ppo_seed0",
    env=dict(
        collector_env_num=8,
        evaluator_env_num=8,
        n_evaluator_episode=8,
        stop_value=200,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=8,
            action_shape=4,
            actor_head_hidden_size_list=[64, 64],
            critic_head_hidden_size_list=[64, 64],
        ),
        discount_factor=0.999,
        learn=dict(
            epoch_per_collect=4,
            batch_size=64,
            learning_rate=0.0003,
            clip_ratio=0.2,
            value_weight=0.5,
            entropy_weight=0.01,
            adv_norm=True,
        ),
        collect=dict(n_sample=1024, gae_lambda=0.98),
        eval=dict(evaluator=dict(eval_freq=500)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="lunarlander"),
    env_manager=dict(type="sync"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
