"""PPO on Hopper-v5: ``python dizoo/mujoco/config/hopper_ppo_config.py [--seed N] [--max-env-step N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. Settings of CleanRL's ``ppo_continuous_action.py``
(Huang et al., 2022, "The 37 implementation details of PPO"; its MuJoCo benchmark): one env, 2,048 steps per
collect, 10 epochs of 32 minibatches (64 transitions), Adam at 3e-4 (eps 1e-5), discount 0.99, GAE lambda 0.95,
clip 0.2, value weight 0.5, no entropy bonus, advantages normalised per minibatch, gradient norm clipped at 0.5,
separate 64x64 tanh actor and critic with orthogonal init and a state-independent log std starting at 0 (the
policy's defaults), observations normalised by their running mean and variance, clipped to [-10, 10]
(``policy.obs_norm``: gymnasium's NormalizeObservation algorithm, which CleanRL wraps its env in), and rewards
scaled by the running standard deviation of the discounted return, clipped to [-10, 10] (``policy.reward_norm``:
CleanRL's NormalizeReward). Both as CleanRL has them; measured at 94,208 env steps (BENCHMARKS.md): seed 0
returned 816 with both, 671 without reward scaling and 1,399 (at 83,968) without observation normalisation;
seed 1 returned 1,016 with both and 506 without observation normalisation: at this budget the seeds differ
more than the switches.

Where it departs from CleanRL, and why:

- no value clipping (CleanRL's ``clip_vloss``): its range is ``clip_ratio`` in return units; with the scaled
  rewards the returns are of order 1, where it would act as CleanRL's, but it is not measured here, and
  without reward scaling it holds the critic back (pendulum_ppo_config.py measured that);
- a constant learning rate (CleanRL anneals it linearly to 0 over its 1M steps: baton has no schedule);
- truncation bootstraps from the final observation (CleanRL treats the 1,000-step time limit as a
  termination).

Evaluation: 5 greedy episodes every 1,600 learner updates (5 collects, 10,240 env steps), with the statistics
frozen. The budget is the caller's (the reference runs 1M env steps); the stop value is the env's.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="hopper_ppo",
    env=dict(),  # the mujoco family's defaults: 1 collecting env, 5 evaluation episodes
    policy=dict(
        obs_norm=True,  # the rest of CleanRL's settings are the policy's defaults (docstring)
        reward_norm=True,
        eval=dict(evaluator=dict(eval_freq=1600)),  # every 5 collects of 320 updates
    ),
))
create_config = EasyDict(dict(
    env=dict(type="hopper"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
