"""From a compiled config to the middleware of the standard pipeline: the one place that knows which
config key feeds which constructor argument. Middleware themselves take explicit, typed arguments.

Each function takes the compiled config (``engine.compile_config``) and the objects the pipeline built
(policy, envs, buffer) and returns one middleware or data structure.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

import torch

from data.replay import FrameStackStorage, PrioritizedSampler, ReplayBuffer, Sampler, UniformSampler
from engine.protocols import VectorEnv
from engine.context import OnlineRLContext
from middleware.checkpoint import ShardSaver
from middleware import (CkptSaver, InteractionEvaluator, OffPolicyLearner, OnlineLogger, OnPolicyLearner,
                        StepCollector, eps_greedy_handler, epsilon_schedule, gae_estimator, online_logger,
                        random_collect_handler)
from middleware.progress_csv import PROGRESS_FILE
from policies.base import Policy

__all__ = ["replay_buffer", "collector", "evaluator", "exploration", "random_collect", "off_policy_learner",
           "on_policy_learner", "gae", "checkpoint_saver", "shard_saver", "logger"]


def replay_buffer(policy_cfg: Mapping[str, Any], seed: Optional[int] = None, frame_stack: Optional[int] = None,
                  num_envs: Optional[int] = None) -> ReplayBuffer:
    """The buffer a policy config asks for: ``other.replay_buffer`` sizes it, ``priority`` picks the
    sampler; ``frame_stack`` (with the collector's ``num_envs``) stores image stacks one frame per
    transition."""
    rb = policy_cfg["other"]["replay_buffer"]
    capacity = int(rb["replay_buffer_size"])
    storage = FrameStackStorage(capacity, num_envs, frame_stack) if frame_stack else None
    if policy_cfg.get("priority", False):
        sampler: Sampler = PrioritizedSampler(capacity, alpha=rb["alpha"], beta=rb["beta"], seed=seed)
    else:
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        sampler = UniformSampler(generator)
    return ReplayBuffer(capacity, sampler, storage)


def collector(cfg: Mapping[str, Any], policy: Policy, env: VectorEnv, seed: int, on_policy: bool) -> StepCollector:
    pcfg = cfg["policy"]
    return StepCollector(policy.collect_mode, env, pcfg["collect"]["n_sample"], nstep=pcfg.get("nstep", 1),
                         gamma=pcfg["discount_factor"], seed=seed, time_major=on_policy)


def evaluator(cfg: Mapping[str, Any], policy: Policy, env: VectorEnv) -> InteractionEvaluator:
    return InteractionEvaluator(policy.eval_mode, env, eval_freq=cfg["policy"]["eval"]["evaluator"]["eval_freq"],
                                n_episode=cfg["env"]["n_evaluator_episode"], stop_value=cfg["env"]["stop_value"],
                                seed=cfg["seed"])


def exploration(cfg: Mapping[str, Any]) -> Any:
    eps = cfg["policy"]["other"]["eps"]
    return eps_greedy_handler(epsilon_schedule(eps["type"], eps["start"], eps["end"], eps["decay"]))


def random_collect(cfg: Mapping[str, Any]) -> Any:
    return random_collect_handler(cfg["policy"]["random_collect_size"])


def off_policy_learner(cfg: Mapping[str, Any], policy: Policy, buffer: ReplayBuffer) -> OffPolicyLearner:
    pcfg = cfg["policy"]
    return OffPolicyLearner(policy.learn_mode, buffer, batch_size=pcfg["learn"]["batch_size"],
                            update_per_collect=pcfg["learn"]["update_per_collect"],
                            warmup=pcfg.get("random_collect_size", 0), priority=pcfg.get("priority", False))


def on_policy_learner(cfg: Mapping[str, Any], policy: Policy) -> OnPolicyLearner:
    learn = cfg["policy"]["learn"]
    return OnPolicyLearner(policy.learn_mode, epochs=learn["epoch_per_collect"], batch_size=learn["batch_size"])


def gae(cfg: Mapping[str, Any], policy: Policy) -> Any:
    pcfg = cfg["policy"]
    return gae_estimator(policy.collect_mode, gamma=pcfg["discount_factor"], lam=pcfg["collect"]["gae_lambda"])


def checkpoint_saver(cfg: Mapping[str, Any], policy: Policy, buffer: Optional[ReplayBuffer],
                     world_size: int = 1) -> CkptSaver:
    return CkptSaver(policy.learn_mode, os.path.join(cfg["exp_name"], "ckpt"), cfg["ckpt"]["save_freq"],
                     buffer if cfg["ckpt"]["save_replay_buffer"] else None,
                     latest_every_s=cfg["ckpt"]["latest_every_s"], meta=checkpoint_meta(cfg), world_size=world_size)


def shard_saver(cfg: Mapping[str, Any], rank: int, buffer: Optional[ReplayBuffer]) -> ShardSaver:
    return ShardSaver(os.path.join(cfg["exp_name"], "ckpt"), rank,
                      buffer if cfg["ckpt"]["save_replay_buffer"] else None)


def checkpoint_meta(cfg: Mapping[str, Any]) -> Dict[str, Any]:
    """What wrote a checkpoint, checked when a run resumes from it."""
    return {"policy_type": cfg["policy"]["type"], "env_type": cfg["env"]["type"], "env_id": cfg["env"].get("env_id")}


def logger(cfg: Mapping[str, Any], resumed: Optional[OnlineRLContext] = None) -> OnlineLogger:
    """tensorboardX under ``<exp_name>/log`` (``log.tensorboard``) and ``<exp_name>/progress.csv``
    (``log.csv``); ``resumed``: the context restored from a checkpoint, whose rows the CSV keeps."""
    log = online_logger(os.path.join(cfg["exp_name"], "log"), print_freq=cfg["log"]["print_freq"],
                        tensorboard=cfg["log"]["tensorboard"],
                        csv_path=os.path.join(cfg["exp_name"], PROGRESS_FILE) if cfg["log"]["csv"] else None)
    if resumed is not None:
        log.resume(resumed.env_step, resumed.last_eval_iter)
    return log
