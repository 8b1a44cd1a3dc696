"""One Stable-Baselines3 run of ``bench/peers.py``: the rl-baselines3-zoo settings of a task, evaluated the
way baton evaluates, written to a JSON file.

``bench/peers.py`` starts this file as a subprocess per seed (``OMP_NUM_THREADS=1``, and torch is held to one
thread here too), so SB3 and baton each have the process to themselves::

    python bench/peers_sb3.py --task cartpole-dqn --env CartPole-v1 --seed 0 --budget 50000 \\
        --eval-every 2000 --eval-episodes 10 --eval-envs 5 --out result.json

Hyperparameters: rl-baselines3-zoo's ``hyperparams/{dqn,ppo,sac,td3}.yml`` at commit 22e3ff2450fd (April
2026) and ``ppo_lstm.yml`` (SB3-contrib's RecurrentPPO) at 038ab1617a48, transcribed in ``ZOO`` below (``lin_X`` there: a learning rate or clip range falling linearly from X
to 0 over the run, as the zoo's ``linear_schedule``). The zoo tunes MuJoCo on the v4 tasks; the same
settings run here on v5. ``n_timesteps`` is left out: the budget is the bench's.

Evaluation: every ``--eval-every`` env steps (SB3's ``num_timesteps``, all envs counted, as baton's
``env_step``), ``evaluate_policy`` with ``deterministic=True`` over ``--eval-episodes`` episodes on a
separate vector env of ``--eval-envs`` envs (the episodes split evenly over them, as baton's evaluator does).

Written: ``curve`` (env_step, wall_time_s, mean return of each evaluation), ``wall_time_s`` (from the first
env step to the end of ``learn``, evaluations included, the model's construction not: baton's clock too),
``env_step`` and ``train_iter`` (gradient steps: optimizer steps of the Q-network (DQN), of the
actor-critic (PPO: one per minibatch) or of the critics (SAC, TD3), the unit of baton's ``train_iter``).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np


class Linear(NamedTuple):
    """The zoo's ``lin_X``: X times the progress remaining (1 at the start, 0 at the end)."""

    initial: float

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial


class ZooSettings(NamedTuple):
    algo: str              # SB3 class name (SB3-contrib's for RecurrentPPO)
    zoo_entry: str         # the yml file and key the settings come from
    n_envs: int            # training envs (the zoo's n_envs; 1 when the entry has none)
    kwargs: Dict[str, Any]  # constructor arguments besides policy, env and seed
    noise_std: float = 0.0  # the zoo's noise_type 'normal' with noise_std (TD3's action noise)
    policy: str = "MlpPolicy"  # the zoo's policy
    normalize: bool = False  # the zoo's normalize: True (VecNormalize of observations and rewards)
    masks: bool = False    # MaskablePPO: info["action_mask"] as sb3-contrib's action_masks(), in training and evaluation


#: the algorithms SB3-contrib, not SB3, provides
CONTRIB = ("RecurrentPPO", "MaskablePPO")


_MUJOCO_SAC = ZooSettings("SAC", "sac.yml HalfCheetah-v4 (mujoco-defaults)", 1, dict(learning_starts=10_000))
_MUJOCO_TD3 = ZooSettings("TD3", "td3.yml HalfCheetah-v4 (mujoco-defaults)", 1, dict(
    learning_starts=10_000, train_freq=1, gradient_steps=1, learning_rate=1e-3, batch_size=256,
    policy_kwargs=dict(net_arch=[400, 300])), noise_std=0.1)

#: the zoo's settings of each task of bench/peers.py
ZOO: Dict[str, ZooSettings] = {
    "cartpole-dqn": ZooSettings("DQN", "dqn.yml CartPole-v1", 1, dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))),
    "cartpole-ppo": ZooSettings("PPO", "ppo.yml CartPole-v1", 8, dict(
        n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate=Linear(0.001), clip_range=Linear(0.2))),
    "pendulum-sac": ZooSettings("SAC", "sac.yml Pendulum-v1", 1, dict(learning_rate=1e-3)),
    "lunarlander-dqn": ZooSettings("DQN", "dqn.yml LunarLander-v3", 1, dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
        target_update_interval=250, train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
        exploration_final_eps=0.1, policy_kwargs=dict(net_arch=[256, 256]))),
    "lunarlander-ppo": ZooSettings("PPO", "ppo.yml LunarLander-v3", 16, dict(
        n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4, ent_coef=0.01)),
    "hopper-sac": _MUJOCO_SAC._replace(zoo_entry="sac.yml Hopper-v4 (mujoco-defaults)"),
    "hopper-td3": _MUJOCO_TD3._replace(zoo_entry="td3.yml Hopper-v4 (mujoco-defaults)"),
    "halfcheetah-sac": _MUJOCO_SAC,
    "halfcheetah-td3": _MUJOCO_TD3,
    # the zoo has no bit flipping: baton's bit_flipping_dqn_her_config settings, in SB3's units (8 envs, 8 updates
    # of 128 every 8 vector steps, eps from 1 to 0.05 over 10k env steps, the target copied every 200 updates)
    "bitflip-dqn-her": ZooSettings("DQN", "baton's bit_flipping_dqn_her_config (no zoo entry)", 8, dict(
        replay_buffer_class="HerReplayBuffer", replay_buffer_kwargs=dict(n_sampled_goal=4,
                                                                         goal_selection_strategy="future"),
        learning_rate=1e-3, batch_size=128, buffer_size=100_000, learning_starts=1000, train_freq=8,
        gradient_steps=8, target_update_interval=1600, exploration_fraction=10_000 / 150_000,
        exploration_final_eps=0.05), policy="MultiInputPolicy"),
    # ppo.yml minigrid-defaults (rl_zoo3 2.0, after lcswillems' rl-starter-files), with the FlatObsWrapper the zoo
    # puts around MiniGrid (bench/peers.py's wrapper)
    "doorkey-ppo": ZooSettings("PPO", "ppo.yml MiniGrid (minigrid-defaults)", 8, dict(
        n_steps=128, batch_size=64, gae_lambda=0.95, gamma=0.99, n_epochs=10, ent_coef=0.0, learning_rate=2.5e-4,
        clip_range=0.2), normalize=True),
    # her.yml FetchReach-v1 (rl_zoo3 2.0), on gymnasium-robotics' v4 of the task
    "fetchreach-sac-her": ZooSettings("SAC", "her.yml FetchReach-v1", 1, dict(
        replay_buffer_class="HerReplayBuffer", replay_buffer_kwargs=dict(n_sampled_goal=4,
                                                                         goal_selection_strategy="future"),
        buffer_size=1_000_000, ent_coef="auto", batch_size=256, gamma=0.95, learning_rate=1e-3,
        learning_starts=1000, policy_kwargs=dict(net_arch=[64, 64], n_critics=1)), policy="MultiInputPolicy",
        normalize=True),
    # ppo_lstm.yml at commit 038ab1617a48: CartPoleNoVel-v1 is CartPole with the velocities dropped, as the
    # VelocityMasked wrapper the bench puts around CartPole-v1 (--wrapper); MlpLstmPolicy's defaults otherwise
    # (an LSTM of 256 for the actor and one for the critic)
    "cartpole_masked-ppo_lstm": ZooSettings("RecurrentPPO", "ppo_lstm.yml CartPoleNoVel-v1", 8, dict(
        n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate=Linear(0.001), clip_range=Linear(0.2)), policy="MlpLstmPolicy"),
    # Taxi-v4 (gymnasium's info["action_mask"]): the zoo has no Taxi entry, so SB3 runs PPO's defaults (10 epochs of
    # minibatches of 64, GAE 0.95) with baton's config's changes (dizoo/toy_text/config/taxi_ppo_config.py: a rate of
    # 1e-3, entropy 0.01) and its collect: 2,048 steps over 8 envs, n_steps=256 each; SB3 one-hot encodes the 500
    # states. Masked: sb3-contrib's MaskablePPO, the mask read from info (``_info_action_masks``); unmasked: PPO.
    "taxi-ppo-masked": ZooSettings("MaskablePPO", "none: PPO defaults as baton's taxi_ppo_config", 8, dict(
        n_steps=256, learning_rate=1e-3, ent_coef=0.01), masks=True),
    "taxi-ppo-unmasked": ZooSettings("PPO", "none: PPO defaults as baton's taxi_ppo_config", 8, dict(
        n_steps=256, learning_rate=1e-3, ent_coef=0.01)),
}


def _info_action_masks(env: Any) -> Any:
    """``env`` with sb3-contrib's ``action_masks()`` answered from the ``info["action_mask"]`` of its last reset or
    step (gymnasium's Taxi gives it there); an action the mask forbade raises, so a finished run took none."""
    import gymnasium as gym

    class InfoActionMasks(gym.Wrapper):
        def reset(self, **kwargs: Any) -> Any:
            obs, info = self.env.reset(**kwargs)
            self.mask = np.asarray(info["action_mask"], dtype=bool)
            return obs, info

        def step(self, action: Any) -> Any:
            if not self.mask[int(action)]:
                raise RuntimeError(f"MaskablePPO took action {int(action)}, which the mask forbade")
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.mask = np.asarray(info["action_mask"], dtype=bool)
            return obs, reward, terminated, truncated, info

        def action_masks(self) -> np.ndarray:
            return self.mask

    return InfoActionMasks(env)


def _update_optimizer(model: Any) -> Any:
    """The optimizer whose steps are the run's updates (the module docstring)."""
    critic = getattr(model, "critic", None)
    return critic.optimizer if critic is not None else model.policy.optimizer


def train(task: str, env_id: str, seed: int, budget: int, eval_every: int, eval_episodes: int,
          eval_envs: int, wrapper: Optional[str] = None) -> Dict[str, Any]:
    """Train the zoo's settings of ``task`` on ``env_id`` (each env wrapped in ``wrapper``, "module:Class") for
    ``budget`` env steps; the JSON of the run."""
    import importlib

    import stable_baselines3 as sb3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    zoo = ZOO[task]
    if zoo.masks:  # the masked evaluation: greedy among legal actions
        from sb3_contrib.common.maskable.evaluation import evaluate_policy
    else:
        from stable_baselines3.common.evaluation import evaluate_policy
    wrapper_class = None
    if wrapper:
        module, name = wrapper.split(":")
        wrapper_class = getattr(importlib.import_module(module), name)
    if zoo.masks:
        inner = wrapper_class
        wrapper_class = (lambda e: _info_action_masks(inner(e))) if inner else _info_action_masks  # noqa: E731
    env = make_vec_env(env_id, n_envs=zoo.n_envs, seed=seed, wrapper_class=wrapper_class)
    eval_env = make_vec_env(env_id, n_envs=eval_envs, seed=seed + 100_000, wrapper_class=wrapper_class)
    if zoo.normalize:  # the evaluation normalises observations with the training statistics, rewards not at all
        from stable_baselines3.common.vec_env import VecNormalize

        env = VecNormalize(env, gamma=zoo.kwargs.get("gamma", 0.99))
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    kwargs = dict(zoo.kwargs)
    if kwargs.get("replay_buffer_class") == "HerReplayBuffer":  # named in ZOO, which imports no SB3
        kwargs["replay_buffer_class"] = sb3.HerReplayBuffer
    if zoo.noise_std:
        n_actions = env.action_space.shape[-1]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n_actions), zoo.noise_std * np.ones(n_actions))
    library = importlib.import_module("sb3_contrib") if zoo.algo in CONTRIB else sb3
    model = getattr(library, zoo.algo)(zoo.policy, env, seed=seed, verbose=0, **kwargs)
    updates = [0]
    _update_optimizer(model).register_step_post_hook(lambda *_: updates.__setitem__(0, updates[0] + 1))

    class Evaluations(BaseCallback):
        """Every ``eval_every`` env steps: greedy episodes on ``eval_env``, with the clock of the run."""

        def __init__(self) -> None:
            super().__init__()
            self.start = 0.0
            self.next_eval = eval_every
            self.curve: List[List[float]] = []

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += eval_every
                if zoo.normalize:
                    eval_env.obs_rms = env.obs_rms
                mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=eval_episodes, deterministic=True)
                self.curve.append([self.num_timesteps, time.perf_counter() - self.start, float(mean)])
            return True

    evaluations = Evaluations()
    model.learn(total_timesteps=budget, callback=evaluations)
    wall = time.perf_counter() - evaluations.start
    env.close()
    eval_env.close()
    return dict(framework="sb3", task=task, seed=seed, algo=zoo.algo, zoo_entry=zoo.zoo_entry,
                env_step=int(model.num_timesteps), train_iter=updates[0], wall_time_s=wall, curve=evaluations.curve)


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=sorted(ZOO))
    parser.add_argument("--env", required=True, help="gymnasium id")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--budget", type=int, required=True, help="env steps")
    parser.add_argument("--eval-every", type=int, required=True, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--eval-envs", type=int, default=5)
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--wrapper", default=None, help="module:Class wrapped around each env (the task's)")
    args = parser.parse_args(argv)
    result = train(args.task, args.env, args.seed, args.budget, args.eval_every, args.eval_episodes, args.eval_envs,
                   args.wrapper)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
