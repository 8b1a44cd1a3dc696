"""``serial_pipeline``: compile a dizoo-style config and run the standard pipeline for its policy.

The off-policy pipeline, in order (one iteration)::

    RunSummary              wall clock from the start of the first iteration; summary.json at finish
    interaction_evaluator   every eval_freq updates; stops the task at env.stop_value
    eps_greedy_handler      epsilon of ctx.env_step
    StepCollector           n_sample transitions, n-step, into ctx.trajectories
    data_pusher             into the replay buffer
    OffPolicyLearner        update_per_collect updates
    CkptSaver               best / periodic / final checkpoints
    online_logger           tensorboardX scalars
    termination_checker     max_env_step / max_train_iter
    progress_bar            tqdm (optional)
"""
from __future__ import annotations

import logging
import os
import random
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import torch

from ..config import compile_config
from ..context import OnlineRLContext
from ..envs import make_vector_env
from ..registry import ENV_REGISTRY, POLICY_REGISTRY
from ..task import Task

__all__ = ["serial_pipeline"]

logger = logging.getLogger(__name__)


def serial_pipeline(input_cfg: Tuple[Mapping[str, Any], Mapping[str, Any]], seed: int = 0,
                    max_env_step: Optional[int] = None, max_train_iter: Optional[int] = None, *,
                    exp_name: Optional[str] = None, resume: bool = False,
                    progress: Optional[bool] = None) -> Dict[str, Any]:
    """Train the policy of ``(main_config, create_config)`` and return the run summary.

    Args:
        input_cfg: ``(main_config, create_config)`` as in a dizoo config file.
        seed: base seed: env i of the collector gets ``seed + i``; torch, numpy and random are seeded.
        max_env_step, max_train_iter: budgets; the run also stops at ``env.stop_value``.
        exp_name: overrides the config's ``exp_name`` (the experiment directory).
        resume: continue from ``<exp_name>/ckpt/latest.pth.tar``.
        progress: show the progress bar (default: the config's ``log.progress``).

    Returns:
        The contents of ``<exp_name>/summary.json``.
    """
    from middleware import (CkptSaver, OffPolicyLearner, RunSummary, StepCollector, data_pusher,
                            eps_greedy_handler, interaction_evaluator, make_replay_buffer, online_logger,
                            progress_bar, termination_checker)

    main_config, create_config = input_cfg
    cfg = compile_config(main_config, create_config, seed=seed, exp_name=exp_name)
    _seed_everything(cfg.seed)
    env_type = ENV_REGISTRY.get(cfg.env.type)
    policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
    if policy_cls.pipeline != "off_policy":
        raise NotImplementedError(f"policy {cfg.policy.type!r} needs the {policy_cls.pipeline} pipeline, "
                                  f"which serial_pipeline does not compose yet")
    collector_env = make_vector_env(env_type, cfg.env, cfg.env.collector_env_num, cfg.seed)
    evaluator_env = make_vector_env(env_type, cfg.env, cfg.env.evaluator_env_num, cfg.seed, manager="sync")
    try:
        policy = policy_cls(cfg.policy, collector_env.single_observation_space, collector_env.single_action_space)
        buffer = make_replay_buffer(cfg.policy, seed=cfg.seed)
        exp_dir = cfg.exp_name
        ctx = OnlineRLContext()
        saver = CkptSaver(policy.learn_mode, os.path.join(exp_dir, "ckpt"), cfg.ckpt.save_freq,
                          buffer if cfg.ckpt.save_replay_buffer else None)
        if resume:
            _resume(os.path.join(exp_dir, "ckpt"), policy, ctx, buffer, saver)
        summary = RunSummary(exp_dir)
        task = Task()
        with task.start(ctx=ctx):
            task.use(summary)
            task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
            task.use(eps_greedy_handler(cfg))
            task.use(StepCollector(cfg, policy.collect_mode, collector_env))
            task.use(data_pusher(cfg, buffer))
            task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer))
            task.use(saver)
            if cfg.log.tensorboard:
                task.use(online_logger(os.path.join(exp_dir, "log"), print_freq=cfg.log.print_freq))
            task.use(termination_checker(max_env_step, max_train_iter))
            if cfg.log.progress if progress is None else progress:
                task.use(progress_bar(max_env_step))
            task.run()
        return summary.result
    finally:
        collector_env.close()
        evaluator_env.close()


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _resume(ckpt_dir: str, policy: Any, ctx: OnlineRLContext, buffer: Any, saver: Any) -> None:
    from middleware.checkpoint import LATEST, load_checkpoint

    state = load_checkpoint(os.path.join(ckpt_dir, LATEST))
    policy.learn_mode.load_state_dict(state["policy"])
    ctx.load_persistent_state(state["ctx"])
    ctx.finish, ctx.stop_reason = False, None  # a resumed run goes on, whatever ended the previous one
    if "replay_buffer" in state:
        buffer.load_state_dict(state["replay_buffer"])
    saver.restore_best(state.get("best_eval_value", float("-inf")))
    logger.info("resumed from %s at env_step=%d train_iter=%d", ckpt_dir, ctx.env_step, ctx.train_iter)
