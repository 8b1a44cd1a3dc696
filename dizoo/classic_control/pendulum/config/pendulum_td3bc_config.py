"""TD3+BC on Pendulum-v1 from the dataset ``pendulum/medium-v0`` (a partly trained SAC whose episodes return
about -550 on average; build it with ``python dizoo/classic_control/make_datasets.py --only pendulum``):
``python dizoo/classic_control/pendulum/config/pendulum_td3bc_config.py``.

Offline: the policy never acts in the env while it learns; rank 0 evaluates it on the real env every
``eval_freq`` updates and stops at the env's stop value (-250). The policy's defaults are the paper's, tuned
for a million updates on MuJoCo; here smaller networks, larger steps and a faster target (0.02 instead of
0.005) reach -250 in about 2,000 updates (docs/offline.md).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pendulum_td3bc",
    env=dict(),  # every env value is the default; the empty section lets callers set main_config.env.<key>
    dataset=dict(name="pendulum/medium-v0"),
    policy=dict(
        model=dict(actor_head_hidden_size_list=[64, 64], critic_head_hidden_size_list=[64, 64]),
        learn=dict(learning_rate_q=1e-3, learning_rate_policy=1e-3, target_theta=0.02),
        eval=dict(evaluator=dict(eval_freq=200)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="pendulum"),
    policy=dict(type="td3bc"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
