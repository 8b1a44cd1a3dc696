"""TD3 on Hopper-v5: ``python dizoo/mujoco/config/hopper_td3_config.py [--seed N] [--max-env-step N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. Settings of rl-baselines3-zoo's ``td3.yml`` Hopper
entry (its MuJoCo defaults, the ones SB3 runs in ``bench/peers.py``): one env, one update of 256 transitions per
env step, networks of 400x300, learning rates of 1e-3, 10,000 uniformly random env steps before learning; the
TD3 paper's rest, the policy's defaults (the actor and targets every 2nd update, target smoothing 0.2 clipped at
0.5, exploration noise 0.1, Polyak 0.005, a replay of 1M). No observation normalisation, as in CleanRL and the SB3
zoo's TD3. Evaluation: 5 greedy episodes every 5,000 updates. The budget is the caller's (the zoo's is 1M env
steps); the stop value is the env's.

Why the zoo's and not CleanRL's ``td3_continuous_action.py`` (25,000 random steps, rates of 3e-4, 256x256, which
halfcheetah_td3_config.py keeps for the LeanRL comparison): at 100,000 env steps, seeds 0-2, CleanRL's settings
ended at 339, 333 and 341 (a quarter of the budget spent on the warm-up, then the standing-still plateau), the
zoo's at 2,789, 1,183 and 363 (BENCHMARKS.md, "TD3 on Hopper-v5 at 100k"). Ten seeds beside SB3 under
peers.py's protocol, TD3's update in the paper's and SB3's order: finals 1,328, 270, 580, 1,760, 1,112, 449, 1,251,
982, 1,488 and 34 against SB3's 2,953, 1,897, 908, 754, 2,541, 273, 642, 794, 888 and 856 (IQM 950 [501, 1,336]
against 1,016 [696, 1,836]; above SB3 on 5 of 10 seeds): a tie within Hopper's spread at 100k (BENCHMARKS.md,
"Hopper TD3 at 100k over 10 seeds").
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="hopper_td3",
    env=dict(),  # the mujoco family's defaults: 1 collecting env, 5 evaluation episodes
    policy=dict(
        random_collect_size=10000,
        model=dict(actor_head_hidden_size_list=[400, 300], critic_head_hidden_size_list=[400, 300]),
        learn=dict(learning_rate_q=1e-3, learning_rate_policy=1e-3),
        eval=dict(evaluator=dict(eval_freq=5000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="hopper"),
    policy=dict(type="td3"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
