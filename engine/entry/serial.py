"""``serial_pipeline``: compile a dizoo-style config and run the standard pipeline for its policy.

The pipeline, in order (one iteration); (0) marks rank 0 only under DDP, [off] / [on] off- or on-policy::

    DDPMiddleware           DDP-wrapped learner; one allreduce per iteration on the way back (no-op alone)
    RunSummary              wall clock from the start of the first iteration; summary.json at finish
    interaction_evaluator   (0) every eval_freq updates; stops the task at env.stop_value
    eps_greedy_handler      epsilon of ctx.env_step (policies with other.eps)
    random_collect_handler  random actions below policy.random_collect_size env steps (when > 0)
    StepCollector           n_sample transitions into ctx.trajectories: [off] n-step, [on] time-major
    data_pusher             [off] into the replay buffer
    OffPolicyLearner        [off] update_per_collect updates of batch_size
    gae_estimator           [on] advantages and returns per env stream
    OnPolicyLearner         [on] epoch_per_collect epochs of minibatches
    CkptSaver               (0) best / periodic / final checkpoints
    online_logger           (0) tensorboardX scalars
    termination_checker     max_env_step / max_train_iter
    progress_bar            (0) tqdm (optional)
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

    Runs data-parallel when launched with ``WORLD_SIZE > 1`` (torchrun, ``torch.distributed.launch``,
    ``engine.launch``) or with ``policy.multi_gpu=True`` under a launcher: see docs/distributed.md.

    Args:
        input_cfg: ``(main_config, create_config)`` as in a dizoo config file.
        seed: base seed. Rank r seeds torch, numpy and random with ``seed + r * RANK_SEED_OFFSET``, and its
            collector env i with that plus i.
        max_env_step, max_train_iter: budgets (global env steps under DDP); the run also stops at
            ``env.stop_value``.
        exp_name: overrides the config's ``exp_name`` (the experiment directory).
        resume: continue from ``<exp_name>/ckpt/latest.pth.tar``.
        progress: show the progress bar (default: the config's ``log.progress``).

    Returns:
        The run summary (on rank 0 also written to ``<exp_name>/summary.json``).
    """
    from ..distributed import DDPContext, launched_world_size

    main_config, create_config = input_cfg
    cuda = bool(main_config.get("policy", {}).get("cuda", False)) and torch.cuda.is_available()
    if main_config.get("policy", {}).get("multi_gpu", False) and launched_world_size() == 1 \
            and not torch.distributed.is_initialized():
        logger.warning("policy.multi_gpu=True but the process was not started by a launcher: world size is 1, "
                       "running in one process (use torchrun --nproc_per_node=N, see docs/distributed.md)")
    with DDPContext(backend="nccl" if cuda else "gloo") as ddp_ctx:
        return _run(main_config, create_config, seed, max_env_step, max_train_iter, exp_name, resume, progress,
                    ddp_ctx)


RANK_SEED_OFFSET = 1000


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``: ranks seeded alike would collect identical data."""
    return seed + rank * RANK_SEED_OFFSET


def _run(main_config: Mapping[str, Any], create_config: Mapping[str, Any], seed: int,
         max_env_step: Optional[int], max_train_iter: Optional[int], exp_name: Optional[str], resume: bool,
         progress: Optional[bool], ddp_ctx: Any) -> Dict[str, Any]:
    from middleware import (CkptSaver, OffPolicyLearner, OnPolicyLearner, RunSummary, StepCollector,
                            data_pusher, eps_greedy_handler, gae_estimator, interaction_evaluator,
                            make_replay_buffer, online_logger, progress_bar, random_collect_handler,
                            termination_checker)
    from middleware.ddp import DDPMiddleware
    from policies.base import SpaceMismatchError

    from ..distributed import broadcast_object

    rank, world_size = ddp_ctx.rank, ddp_ctx.world_size
    main = rank == 0
    cfg = compile_config(main_config, create_config, seed=seed, exp_name=exp_name, save=main)
    seed_r = rank_seed(cfg.seed, rank)
    _seed_everything(seed_r)
    env_type = ENV_REGISTRY.get(cfg.env.type)
    policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
    on_policy = policy_cls.pipeline == "on_policy"
    collector_env = make_vector_env(env_type, cfg.env, cfg.env.collector_env_num, seed_r)
    evaluator_env = make_vector_env(env_type, cfg.env, cfg.env.evaluator_env_num, cfg.seed, manager="sync",
                                    training=False) if main else None
    try:
        device = ddp_ctx.device if ddp_ctx.device != "cpu" else None
        try:
            policy = policy_cls(cfg.policy, collector_env.single_observation_space,
                                collector_env.single_action_space, device=device)
        except SpaceMismatchError as err:  # say which env, beside the policy and the space
            raise SpaceMismatchError(f"env {cfg.env.env_id!r} (type {cfg.env.type!r}): {err}") from err
        frame_stack = cfg.env.get("frame_stack") if len(collector_env.single_observation_space.shape) == 3 else None
        buffer = None if on_policy else make_replay_buffer(cfg.policy, seed=seed_r, frame_stack=frame_stack,
                                                           num_envs=cfg.env.collector_env_num)
        exp_dir = cfg.exp_name
        ctx = OnlineRLContext()
        saver = CkptSaver(policy.learn_mode, os.path.join(exp_dir, "ckpt"), cfg.ckpt.save_freq,
                          buffer if cfg.ckpt.save_replay_buffer else None)
        if resume and main:
            _resume(os.path.join(exp_dir, "ckpt"), policy, ctx, buffer, saver)
        if world_size > 1 and resume:  # rank 0 read the checkpoint; the ddp middleware shares its learn state
            ctx.load_persistent_state(broadcast_object(ctx.persistent_state(), src=0))
        ddp = DDPMiddleware(policy.learn_mode)
        summary = RunSummary(exp_dir, write=main, extra=lambda: {"world_size": world_size, "ddp_collective_s":
                                                                  ddp.collective_time} if world_size > 1 else {})
        task = Task()
        with task.start(ctx=ctx):
            task.use(ddp)
            task.use(summary)
            if main:
                task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
            if "eps" in cfg.policy.other:
                task.use(eps_greedy_handler(cfg))
            if cfg.policy.get("random_collect_size", 0) > 0:
                task.use(random_collect_handler(cfg))
            task.use(StepCollector(cfg, policy.collect_mode, collector_env, seed=seed_r, time_major=on_policy))
            if on_policy:
                task.use(gae_estimator(cfg, policy.collect_mode))
                task.use(OnPolicyLearner(cfg, policy.learn_mode))
            else:
                task.use(data_pusher(cfg, buffer))
                task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer))
            if main:
                task.use(saver)
                if cfg.log.tensorboard:
                    task.use(online_logger(os.path.join(exp_dir, "log"), print_freq=cfg.log.print_freq))
            task.use(termination_checker(max_env_step, max_train_iter))
            if main and (cfg.log.progress if progress is None else progress):
                task.use(progress_bar(max_env_step))
            task.run()
        return summary.result
    finally:
        collector_env.close()
        if evaluator_env is not None:
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
    if buffer is not None and "replay_buffer" in state:
        buffer.load_state_dict(state["replay_buffer"])
    saver.restore_best(state.get("best_eval_value", float("-inf")))
    logger.info("resumed from %s at env_step=%d train_iter=%d", ckpt_dir, ctx.env_step, ctx.train_iter)
