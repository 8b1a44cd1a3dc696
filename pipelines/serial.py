"""The standard pipeline of a dizoo-style config: ``build_pipeline`` (extend it, then run it) and
``serial_pipeline`` (build and run in one call).

The stages, in order (one iteration); (0) marks rank 0 only under DDP, [off] / [on] off- or on-policy::

    shards           (DDP, every rank but 0) its replay shard and RNG beside each checkpoint rank 0 writes
    ddp              DDP-wrapped learner; the context's declared fields agreed once per iteration (no-op alone)
    summary          the clocks (wall_time_s: training; elapsed_s: since the build); summary.json at finish
    evaluator        (0) every eval_freq updates; stops the run at env.stop_value (background: in a process)
    exploration      epsilon of ctx.env_step (policies with other.eps)
    random_collect   random actions below policy.random_collect_size env steps (when > 0)
    collector        n_sample transitions into ctx.trajectories: [off] n-step, [on] time-major
    pusher           [off] into the replay buffer
    gae              [on] advantages and returns per env stream
    learner          [off] update_per_collect updates of batch_size; [on] epochs of minibatches
    statistics       (policy.obs_norm, reward_norm) what was collected merged into the running statistics (all ranks)
    refresh          the learner's weights copied to collection/evaluation on other devices (policy.device.*)
    checkpoint       (0) best / periodic / final checkpoints
    logger           (0) tensorboardX scalars (log.tensorboard), the same as rows of progress.csv (log.csv) and to
                     W&B / MLflow (log.wandb, log.mlflow)
    termination      max_env_step / max_train_iter
    progress         (0) tqdm (log.progress)
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import numpy as np
import torch

from data.envs import make_vector_env
from data.torch_env import follow_device
from engine.config import ConfigError, compile_config, save_config
from engine.context import OnlineRLContext
from engine.devices import size_torch_threads
from engine.profile import StageProfile
from engine.distributed import DDPContext, broadcast_object, launched_world_size, is_distributed
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from middleware import RunSummary, actor_refresher, data_pusher, progress_bar, statistics_merger
from middleware.summary import RunClock
from policies.base import SpaceMismatchError

from . import stages
from .pipeline import Pipeline
from .resume import resume_run, warn_config_changes
from .run_dir import RunDirError, check_same_task, claim_run_dir

__all__ = ["build_pipeline", "serial_pipeline", "rank_seed", "RANK_SEED_OFFSET"]

logger = logging.getLogger(__name__)

RANK_SEED_OFFSET = 1000

ConfigPair = Tuple[Mapping[str, Any], Mapping[str, Any]]


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``: ranks seeded alike would collect identical data."""
    return seed + rank * RANK_SEED_OFFSET


def build_pipeline(input_cfg: ConfigPair, seed: int = 0, max_env_step: Optional[int] = None,
                   max_train_iter: Optional[int] = None, *, exp_name: Optional[str] = None,
                   resume: Union[bool, str] = False, force: bool = False, progress: Optional[bool] = None,
                   context: type = OnlineRLContext) -> Pipeline:
    """The standard pipeline for the policy of ``(main_config, create_config)``, ready to extend and run.

    Joins the process group when launched data-parallel (``WORLD_SIZE > 1``: torchrun,
    ``torch.distributed.launch``, ``engine.launch``; see docs/distributed.md), compiles the config, builds
    the envs, the policy and the replay buffer, and lists the stages (the module docstring). The envs and
    the process group are released when ``run()`` ends (or by ``close()``).

    Args:
        input_cfg: ``(main_config, create_config)`` as in a dizoo config file.
        seed: base seed. Rank r seeds torch, numpy and random with ``seed + r * RANK_SEED_OFFSET``, and its
            collector env i with that plus i.
        max_env_step, max_train_iter: budgets (global env steps under DDP); the run also stops at
            ``env.stop_value``.
        exp_name: the run directory, used as given. Without it the run writes to
            ``<config exp_name>_seed<seed>``, or ``..._seed<seed>_<n>`` when that holds a run already
            (``pipelines.run_dir``); ``pipeline.cfg.exp_name`` and the summary's ``run_dir`` say which. It
            is claimed (``config.json`` written) once the envs and the policy are built; a pipeline closed
            without ``run()`` removes it again, and a build that fails leaves none.
        resume: continue the run of that directory (without ``exp_name``: the newest run of this config and
            seed) from its newest loadable checkpoint; ``"auto"``: continue it if there is one, else start
            it (a requeued job). A worker group torchrun restarted continues its run without being told.
        force: start over in a directory that holds a run, after moving it aside to ``<dir>.old-<time>``.
        progress: show the progress bar (default: the config's ``log.progress``).
        context: the context class, ``OnlineRLContext`` or a subclass of it with fields of your own (declare
            ``sync=...`` on those that must agree across ranks).

    Examples:
        >>> pipeline = build_pipeline((main_config, create_config))          # doctest: +SKIP
        >>> pipeline.insert_after("learner", my_middleware, name="mine")    # doctest: +SKIP
        >>> summary = pipeline.run()                                        # doctest: +SKIP
    """
    from .offline import build_offline_pipeline, is_offline_config  # deferred: it imports this module

    if is_offline_config(input_cfg):  # a policy that learns from a dataset (bc, cql, ...): docs/offline.md
        return build_offline_pipeline(input_cfg, seed, max_env_step, max_train_iter, exp_name=exp_name,
                                      resume=resume, force=force, progress=progress,
                                      **({} if context is OnlineRLContext else {"context": context}))
    if not (isinstance(context, type) and issubclass(context, OnlineRLContext)):
        raise TypeError(f"build_pipeline(context=...) wants OnlineRLContext or a subclass of it (the standard "
                        f"stages read its fields), got {context!r}")
    main_config, create_config = input_cfg
    if main_config.get("policy", {}).get("multi_gpu", False) and launched_world_size() == 1 \
            and not is_distributed():
        logger.warning("policy.multi_gpu=True but the process was not started by a launcher: world size is 1, "
                       "running in one process (use torchrun --nproc_per_node=N, see docs/distributed.md)")
    return _join_and_build(main_config, lambda ddp_ctx, resources: _build(
        main_config, create_config, seed, max_env_step, max_train_iter, exp_name, resume, force, progress, context,
        ddp_ctx, resources))


def _join_and_build(main_config: Mapping[str, Any],
                    build: Callable[[DDPContext, contextlib.ExitStack], Pipeline]) -> Pipeline:
    """Join the process group the config asks for (``ddp.backend``, ``policy.cuda``), then
    ``build(ddp_ctx, resources)``: the online and the offline pipeline alike. If building fails, the
    resources are released told the error: no final barrier that failed peers would never reach."""
    cuda = bool(main_config.get("policy", {}).get("cuda", False)) and torch.cuda.is_available()
    backend = main_config.get("ddp", {}).get("backend", "auto")
    resources = contextlib.ExitStack()
    try:
        ddp_ctx = resources.enter_context(DDPContext(backend=backend, cuda=cuda))
        return build(ddp_ctx, resources)
    except BaseException as err:
        resources.__exit__(type(err), err, err.__traceback__)
        raise


def serial_pipeline(input_cfg: ConfigPair, seed: int = 0, max_env_step: Optional[int] = None,
                    max_train_iter: Optional[int] = None, *, exp_name: Optional[str] = None, resume: bool = False,
                    force: bool = False, progress: Optional[bool] = None) -> Dict[str, Any]:
    """Train the policy of ``(main_config, create_config)`` with the standard pipeline and return the run
    summary (``build_pipeline(...).run()``; the same arguments)."""
    return build_pipeline(input_cfg, seed, max_env_step, max_train_iter, exp_name=exp_name, resume=resume,
                          force=force, progress=progress).run()


def _build(main_config: Mapping[str, Any], create_config: Mapping[str, Any], seed: int,
           max_env_step: Optional[int], max_train_iter: Optional[int], exp_name: Optional[str], resume: bool,
           force: bool, progress: Optional[bool], context: type, ddp_ctx: DDPContext,
           resources: contextlib.ExitStack) -> Pipeline:
    rank, world_size = ddp_ctx.rank, ddp_ctx.world_size
    main = rank == 0
    clock = RunClock()  # elapsed_s counts from here; wall_time_s from the first iteration (middleware.summary)
    cfg = compile_config(main_config, create_config, seed=seed, exp_name=exp_name, save=False)
    size_torch_threads(cfg.torch_threads)  # this process's share of the cores, unless OMP_NUM_THREADS says
    seed_r = rank_seed(cfg.seed, rank)
    _seed_everything(seed_r)
    env_type = ENV_REGISTRY.get(cfg.env.type)
    policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
    on_policy = policy_cls.pipeline == "on_policy"
    collector_env = make_vector_env(env_type, cfg.env, cfg.env.collector_env_num, seed_r)
    resources.callback(collector_env.close)
    evaluator_env = None
    if main and not cfg.policy.eval.evaluator.get("background", False):  # else its process builds its own
        evaluator_env = make_vector_env(env_type, cfg.env, cfg.env.evaluator_env_num, cfg.seed, manager="sync",
                                        training=False)
        resources.callback(evaluator_env.close)
    device = ddp_ctx.device if ddp_ctx.device != "cpu" else None
    try:
        policy = policy_cls(cfg.policy, collector_env.single_observation_space, collector_env.single_action_space,
                            device=device)
    except SpaceMismatchError as err:  # say which env, beside the policy and the space
        raise SpaceMismatchError(f"env {cfg.env.env_id!r} (type {cfg.env.type!r}): {err}") from err
    except ValueError as err:  # a value of its config the policy refuses: the user's to fix
        raise ConfigError(f"policy {cfg.policy.type!r}: {err}") from err
    if getattr(policy, "recurrent", False) and not on_policy:
        raise ConfigError(f"policy {cfg.policy.type!r} is recurrent but learns from a replay buffer, whose single "
                          f"transitions lose the memory each step acted from: a recurrent policy needs the on-policy "
                          f"pipeline (pipeline = 'on_policy', as ppo_lstm)")
    follow_device(collector_env, policy.collect_mode.device)  # torch envs without env.device: where the policy acts
    frame_stack = cfg.env.get("frame_stack") if len(collector_env.single_observation_space.shape) == 3 else None
    buffer = None if on_policy else stages.replay_buffer(cfg.policy, seed=seed_r, frame_stack=frame_stack,
                                                         num_envs=cfg.env.collector_env_num,
                                                         learn_device=policy.device)
    # the inputs are checked: only now the run directory (a failed start leaves none, pipelines.run_dir)
    cfg.exp_name, resume = _run_dir(cfg, exp_name is not None, resume, force, main, world_size, resources)
    if main:
        if resume:
            warn_config_changes(cfg)
        save_config(cfg)
    ctx = context()
    saver = stages.checkpoint_saver(cfg, policy, buffer, world_size) if main else None
    if resume:  # rank 0 reads the learn state (the ddp middleware shares it); every rank its replay and RNG
        resume_run(cfg, policy, ctx, buffer, saver, rank, world_size, empty_buffer=lambda: stages.replay_buffer(
            cfg.policy, frame_stack=frame_stack, num_envs=cfg.env.collector_env_num, learn_device=policy.device),
            max_env_step=max_env_step, max_train_iter=max_train_iter)
    evaluator = stages.evaluator(cfg, policy, evaluator_env, saver, world_size) if main else None
    ddp = stages.ddp(cfg, policy)
    profile = StageProfile() if cfg.log.profile else None  # where the time goes (--profile, engine.profile)
    summary = RunSummary(cfg.exp_name, write=main, extra=lambda: {"run_dir": cfg.exp_name, **(
        {"world_size": world_size, "rank": rank, "ddp_collective_s": ddp.collective_time} if world_size > 1 else {}),
        **({"profile": profile.as_dict()} if profile is not None else {}), **stages.evaluator_report(evaluator)},
        clock=clock)
    resources.callback(summary.close)  # elapsed_s to the end: after the final checkpoint, before envs close

    pipeline = Pipeline(ctx, rank=rank, result=lambda: summary.result, resources=resources)
    pipeline.append(stages.preemption(cfg, rank, world_size, resources), name="preemption")  # first: after ddp's sync
    pipeline.cfg, pipeline.policy, pipeline.buffer, pipeline.profile = cfg, policy, buffer, profile
    if world_size > 1:  # before ddp: writes each rank's replay shard after the iteration's agreement
        pipeline.append(stages.shard_saver(cfg, rank, buffer), name="shards")
    pipeline.append(ddp, name="ddp")
    pipeline.append(summary, name="summary")
    pipeline.append(evaluator, name="evaluator", main_only=True)
    if "eps" in cfg.policy.other:
        pipeline.append(stages.exploration(cfg), name="exploration")
    if cfg.policy.get("random_collect_size", 0) > 0:
        pipeline.append(stages.random_collect(cfg), name="random_collect")
    pipeline.append(stages.collector(cfg, policy, collector_env, seed_r, on_policy), name="collector")
    if on_policy:
        pipeline.append(stages.gae(cfg, policy), name="gae")
        pipeline.append(stages.on_policy_learner(cfg, policy), name="learner")
    else:
        pipeline.append(data_pusher(buffer), name="pusher")
        pipeline.append(stages.off_policy_learner(cfg, policy, buffer), name="learner")
    if policy.keeps_statistics:  # every rank, every iteration: under DDP a collective
        pipeline.append(statistics_merger(policy.merge_statistics), name="statistics")
    if policy.separate_actors:  # collection or evaluation acts on its own device: keep its copy current
        pipeline.append(actor_refresher(policy.refresh_actors, cfg.policy.device.refresh_every), name="refresh")
    pipeline.append(saver, name="checkpoint", main_only=True)
    if stages.logs(cfg):
        pipeline.append(stages.logger(cfg, ctx if resume else None, resources) if main else None, name="logger",
                        main_only=True)
    pipeline.append(stages.termination(cfg, max_env_step, max_train_iter, main),
                    name="termination")
    if cfg.log.progress if progress is None else progress:
        pipeline.append(progress_bar(max_env_step, clock) if main else None, name="progress", main_only=True)
    if "logger" in pipeline and pipeline["logger"] is not None:
        pipeline["logger"].clock = clock  # progress.csv's wall_time_s and elapsed_s: the summary's
    if profile is not None and "logger" in pipeline and pipeline["logger"] is not None:
        pipeline["logger"].profile = profile  # its profile/<stage>_share scalars
    return pipeline


def _run_dir(cfg: Mapping[str, Any], explicit: bool, resume: Union[bool, str], force: bool, main: bool,
             world_size: int, resources: contextlib.ExitStack) -> Tuple[str, bool]:
    """Rank 0 picks the run directory and locks it until the pipeline closes (``pipelines.run_dir``: one
    writer per run); under DDP every rank gets its choice, or its error, so all fail alike instead of
    waiting for a rank that gave up. Returns the directory and whether the run continues what it holds.

    A worker group that torchrun restarted (``TORCHELASTIC_RESTART_COUNT`` > 0) continues the run its first
    attempt started, as ``resume="auto"`` does: from its newest loadable checkpoint, with the counters, the
    replay shards and the RNG state that checkpoint holds."""
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restart > 0:  # continue the first attempt's run: never start over (--force), never guess which run
        if not explicit:
            raise RunDirError(f"torchrun restarted this worker group (restart {restart}), and without --exp-name "
                              f"the run it should continue cannot be told from other runs of this config: give "
                              f"the run a directory with --exp-name DIR (restarts then continue it)")
        resume, force = "auto", False
    choice: Tuple[Optional[str], bool, Optional[str]] = (None, False, None)
    if main:
        try:
            claim = claim_run_dir(cfg["exp_name"], cfg["seed"], explicit=explicit, resume=resume, force=force)
            resources.callback(claim.lock.release)
            if claim.resumed:
                check_same_task(claim.path, cfg)
            choice = (claim.path, claim.resumed, None)
        except RunDirError as err:
            choice = (None, False, str(err))
    if world_size > 1:
        choice = broadcast_object(choice, src=0)
    if choice[2] is not None:
        raise RunDirError(choice[2])
    if restart > 0 and main:
        logger.warning("torchrun restart %d of this worker group: %s the run in %s", restart,
                       "continuing" if choice[1] else "starting", choice[0])
    return choice[0], choice[1]


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
