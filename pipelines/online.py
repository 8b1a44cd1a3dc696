"""The online shapes: a policy learns from what its collector's envs give it, alone or data-parallel.

The middle stages (``pipelines.assembly`` adds the head and the tail); [off] / [on] off- or on-policy::

    exploration      epsilon of ctx.env_step (policies with other.eps)
    random_collect   random actions below policy.random_collect_size env steps (when > 0)
    collector        n_sample transitions into ctx.trajectories: [off] n-step, [on] time-major
    pusher           [off] into the replay buffer
    gae              [on] advantages and returns per env stream
    learner          [off] update_per_collect updates of batch_size; [on] epochs of minibatches
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import gymnasium as gym

from data.envs import make_vector_env
from data.replay import ReplayBuffer
from data.torch_env import follow_device
from engine.config import ConfigError
from engine.context import OnlineRLContext
from middleware import data_pusher

from . import stages
from .assembly import Run, Shape
from .pipeline import Pipeline

__all__ = ["OffPolicyShape", "OnPolicyShape"]


class _OnlineShape(Shape):
    """Collector envs of ``env.collector_env_num``, seeded from the rank's seed."""

    context = OnlineRLContext
    policy_keys = Shape.policy_keys + ("discount_factor", "collect.n_sample", "learn.batch_size")

    def open(self, run: Run) -> Tuple[gym.Space, gym.Space]:
        self.collector_env = make_vector_env(run.env_type, run.cfg.env, stages.env_params(run.cfg).collector_env_num,
                                             run.seed)
        run.resources.callback(self.collector_env.close)
        return self.collector_env.single_observation_space, self.collector_env.single_action_space

    def prepare(self, run: Run) -> Optional[ReplayBuffer]:
        follow_device(self.collector_env, run.policy.collect_mode.device)  # torch envs without env.device
        return None

    def _collect(self, run: Run, pipeline: Pipeline, on_policy: bool) -> None:
        params = run.policy.params
        if hasattr(params, "other") and hasattr(params.other, "eps"):  # an epsilon-greedy policy (DQN's EpsilonParams)
            pipeline.append(stages.exploration(run.policy), name="exploration")
        if getattr(params, "random_collect_size", 0) > 0:
            pipeline.append(stages.random_collect(run.policy), name="random_collect")
        pipeline.append(stages.collector(run.cfg, run.policy, self.collector_env, run.seed, on_policy,
                                         max_env_step=run.request.max_env_step), name="collector")


class OffPolicyShape(_OnlineShape):
    """Collected n-step transitions go into a replay buffer, which the learner samples."""

    policy_keys = _OnlineShape.policy_keys + ("learn.update_per_collect", "other.replay_buffer")

    def prepare(self, run: Run) -> Optional[ReplayBuffer]:
        super().prepare(run)
        if getattr(run.policy, "recurrent", False) and not getattr(run.policy, "replays_sequences", False):
            raise ConfigError(f"policy {run.cfg.policy.type!r} is recurrent but learns from a replay buffer, whose "
                              f"single transitions lose the memory each step acted from: a recurrent policy needs "
                              f"the on-policy pipeline (pipeline = 'on_policy', as ppo_lstm), or to learn from "
                              f"replayed sequences (replays_sequences, as qmix with policy.model.recurrent)")
        return self.empty_buffer(run, seed=run.seed)

    def empty_buffer(self, run: Run, seed: Optional[int] = None) -> ReplayBuffer:
        cfg = run.cfg
        shape = self.collector_env.single_observation_space.shape  # None for a Dict/Tuple space
        images = shape is not None and len(shape) == 3
        env, params = stages.env_params(cfg), run.policy.params
        return stages.replay_buffer(params.other.replay_buffer, priority=getattr(params, "priority", False),
                                    obs_shape=run.policy.observation_space.shape, seed=seed,
                                    frame_stack=getattr(env, "frame_stack", None) if images else None,
                                    num_envs=env.collector_env_num, learn_device=run.policy.device,
                                    goal_env=self._goal_env(run), nstep=getattr(params, "nstep", 1),
                                    seq_len=stages.sequence_length(run.policy))

    def _goal_env(self, run: Run) -> Optional[gym.Env]:
        """One env of the run's, whose ``compute_reward`` a hindsight replay relabels through (None without
        ``her``); closed with the run."""
        if not run.policy.params.other.replay_buffer.her.enabled:
            return None
        if not hasattr(run.env_type, "make"):
            raise ConfigError(f"policy.other.replay_buffer.her needs one env of env type {run.cfg.env.type!r} made "
                              f"alone (for its compute_reward), which that type cannot make: use a gymnasium env "
                              f"type (env.type='gym')")
        env = run.env_type.make(run.cfg.env)
        run.resources.callback(env.close)
        return env

    def middle(self, run: Run, pipeline: Pipeline, buffer: Optional[ReplayBuffer]) -> None:
        self._collect(run, pipeline, on_policy=False)
        pipeline.append(data_pusher(buffer), name="pusher")
        pipeline.append(stages.off_policy_learner(run.policy, buffer), name="learner")


class OnPolicyShape(_OnlineShape):
    """What was just collected is learnt from, after its advantages are estimated; no buffer."""

    policy_keys = _OnlineShape.policy_keys + ("collect.gae_lambda", "learn.epoch_per_collect")
    policy_methods = ("_value",)  # the values GAE bootstraps from (CollectMode.value)

    def middle(self, run: Run, pipeline: Pipeline, buffer: Any) -> None:
        self._collect(run, pipeline, on_policy=True)
        pipeline.append(stages.gae(run.policy), name="gae")
        pipeline.append(stages.on_policy_learner(run.policy), name="learner")
