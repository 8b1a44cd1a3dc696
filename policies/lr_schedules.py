"""PPO's learning-rate schedules (``policy.learn.lr_schedule``): 'constant', 'adaptive' and 'linear'.

``policy.learn.lr_schedule='adaptive'`` (rl_games' ``lr_schedule: adaptive``, which its EnvPool Pong config
uses): after each epoch over a collect, the learning rate is multiplied by 1.5 where that epoch's mean approximate
KL (``approx_kl``) stayed under ``kl_threshold / 2``, and divided by 1.5 where it went over ``2 * kl_threshold``,
within [1e-6, 1e-2]. Why: with few large minibatches per collect (64 envs x 128 steps in minibatches of 2,048:
16 updates), a fixed 3e-4 moves the policy too little per collect (PPO Pong on an H200: approx_kl 0.003, clip
fraction 0.014, still -21 after 1M env steps); the schedule raises the rate until each epoch moves the policy by
about the threshold. One read of the KL from the device per epoch; under DDP the ranks' KLs are averaged, so
every rank steps at the same rate. The rate reached is checkpointed (the optimizer's) and kept on resume.
Measured once, and it failed: on PPO Pong (H100, minibatches of 2,048, ``kl_threshold=0.01``) the rate reached
the 1e-2 ceiling within five collects and the network stopped learning (entropy flat, clip fraction 0); the
Pong config learns with CleanRL's constant 2.5e-4 and more, smaller minibatches instead (BENCHMARKS.md).

``'linear'`` (SB3's ``lin_`` schedules, CleanRL's ``anneal_lr``): the rate falls from ``learning_rate`` to 0 at
``policy.learn.lr_anneal_env_steps`` where a config states its own span (and stays at 0 after it, whatever the
budget), else at the run's ``--max-env-step``, set before each iteration's updates from the env steps done
(``pipelines.stages.lr_annealing``). Nothing is saved for it: a resume, and every DDP rank, read the same global
env-step count. Why: a constant rate keeps moving a policy that has solved its task; CartPole with its velocities
hidden (``ppo_lstm``, 100k env steps) ended seeds 1 and 2 at 190 and 140 with the constant rate after reaching
500, and at 350 and 500 with the linear one; with rewards normalised too, 475 or above on 8 seeds of 8 (the config's
settings; BENCHMARKS.md, "Scores that hold").
"""
from __future__ import annotations

__all__ = ["LR_SCHEDULES", "adaptive_lr", "linear_lr"]

#: ``policy.learn.lr_schedule``'s choices
LR_SCHEDULES = ("constant", "adaptive", "linear")


def adaptive_lr(lr: float, kl: float, threshold: float, factor: float = 1.5, low: float = 1e-6,
                high: float = 1e-2) -> float:
    """rl_games' adaptive rule (its ``AdaptiveScheduler``): ``lr / factor`` where ``kl > 2 * threshold``,
    ``lr * factor`` where ``kl < threshold / 2``, else ``lr``; kept within ``[low, high]``.

    Examples:
        >>> adaptive_lr(1e-3, kl=0.001, threshold=0.01), adaptive_lr(1e-3, kl=0.05, threshold=0.01)
        (0.0015, 0.0006666666666666666)
        >>> adaptive_lr(1e-3, kl=0.01, threshold=0.01), adaptive_lr(9e-3, kl=0.0, threshold=0.01)
        (0.001, 0.01)
    """
    if kl > 2.0 * threshold:
        return max(lr / factor, low)
    if kl < 0.5 * threshold:
        return min(lr * factor, high)
    return lr


def linear_lr(lr: float, fraction: float) -> float:
    """``lr * (1 - fraction)`` for ``fraction`` of the budget done, within ``[0, lr]``.

    Examples:
        >>> linear_lr(1e-3, 0.25), linear_lr(1e-3, 1.5), linear_lr(1e-3, -0.1)
        (0.00075, 0.0, 0.001)
    """
    return lr * min(1.0, max(0.0, 1.0 - fraction))
