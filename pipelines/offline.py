"""The offline pipeline: a policy learns from a dataset instead of an env, alone or data-parallel, with the
evaluation, checkpoints, logs and DDP middleware of online training (docs/offline.md).

The stages, in order (one iteration); (0) marks rank 0 only under DDP::

    shards       (DDP, every rank but 0) its RNG state beside each checkpoint rank 0 writes
    ddp          the same ddp middleware as online: DDP-wrapped learner; declared fields agreed once per iteration
    summary      the clocks (wall_time_s, elapsed_s); summary.json at finish
    evaluator    (0) every eval_freq updates, greedy episodes on the real env; stops at env.stop_value
    fetcher      this rank's shard, read once into the replay storage; update_per_iter batches per iteration
    learner      one update per batch
    checkpoint   (0) best / periodic / final checkpoints
    logger       (0) tensorboardX scalars and progress.csv (env_step: transitions drawn from the dataset)
    termination  max_env_step / max_train_iter
    progress     (0) tqdm

Shards: episodes dealt round-robin over the global ranks of all nodes (``data.offline.ShardPlan``): disjoint,
their union is the dataset, sizes differing by one episode at most (the log says when the split is
uneven). Each rank reshuffles its own shard every pass, from ``seed + rank * RANK_SEED_OFFSET``.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Dict, Mapping, Optional, Tuple

from data.envs import make_vector_env
from data.offline import EpochSampler, ShardPlan, open_dataset
from data.replay import ReplayBuffer
from data.replay.storage import RingStorage
from engine.config import ConfigError, compile_config, save_config
from engine.context import OfflineRLContext
from engine.devices import size_torch_threads
from engine.distributed import DDPContext
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from middleware import InteractionEvaluator, RunSummary, progress_bar
from middleware.offline import OfflineDataFetcher, OfflineLearner
from middleware.summary import RunClock
from policies.base import SpaceMismatchError

from . import stages
from .pipeline import Pipeline
from .resume import resume_run, warn_config_changes
from .serial import _join_and_build, _run_dir, _seed_everything, rank_seed

__all__ = ["build_offline_pipeline", "offline_pipeline", "is_offline_config"]

logger = logging.getLogger(__name__)

ConfigPair = Tuple[Mapping[str, Any], Mapping[str, Any]]


def is_offline_config(input_cfg: ConfigPair) -> bool:
    """Whether the config's policy learns from a dataset (its class says ``pipeline = "offline"``); False
    when the type is unknown (the standard builder then reports it)."""
    main_config, create_config = input_cfg
    section = dict((create_config or {}).get("policy") or {})
    name = section.get("type") or dict(main_config.get("policy") or {}).get("type")
    if not name:
        return False
    try:
        POLICY_REGISTRY.import_modules(section.get("import_names", []))
        return getattr(POLICY_REGISTRY.get(name), "pipeline", None) == "offline"
    except (KeyError, ImportError):
        return False


def build_offline_pipeline(input_cfg: ConfigPair, seed: int = 0, max_env_step: Optional[int] = None,
                           max_train_iter: Optional[int] = None, *, exp_name: Optional[str] = None,
                           resume: bool = False, force: bool = False, progress: Optional[bool] = None,
                           context: type = OfflineRLContext) -> Pipeline:
    """The offline pipeline of ``(main_config, create_config)``, ready to extend and run (arguments as for
    ``pipelines.build_pipeline``; ``max_env_step`` counts transitions drawn from the dataset, summed over
    ranks).

    Raises:
        ConfigError: ``dataset.name`` is empty, or the policy is not an offline one.
        data.offline.DatasetNotFoundError: naming where it looked and how to make the dataset.
        data.offline.DatasetSpaceError: the dataset's spaces differ from the env's.
        data.offline.DatasetError: a corrupt or truncated dataset.
        data.offline.EmptyShardError: more ranks than episodes.
    """
    if not (isinstance(context, type) and issubclass(context, OfflineRLContext)):
        raise TypeError(f"build_offline_pipeline(context=...) wants OfflineRLContext or a subclass of it, got "
                        f"{context!r}")
    main_config, create_config = input_cfg
    return _join_and_build(main_config, lambda ddp_ctx, resources: _build(
        main_config, create_config, seed, max_env_step, max_train_iter, exp_name, resume, force, progress, context,
        ddp_ctx, resources))


def offline_pipeline(input_cfg: ConfigPair, seed: int = 0, max_env_step: Optional[int] = None,
                     max_train_iter: Optional[int] = None, **kwargs: Any) -> Dict[str, Any]:
    """Build the offline pipeline and run it; returns the run summary."""
    return build_offline_pipeline(input_cfg, seed, max_env_step, max_train_iter, **kwargs).run()


def _build(main_config: Mapping[str, Any], create_config: Mapping[str, Any], seed: int,
           max_env_step: Optional[int], max_train_iter: Optional[int], exp_name: Optional[str], resume: bool,
           force: bool, progress: Optional[bool], context: type, ddp_ctx: DDPContext,
           resources: contextlib.ExitStack) -> Pipeline:
    rank, world_size = ddp_ctx.rank, ddp_ctx.world_size
    main = rank == 0
    clock = RunClock()  # elapsed_s counts from here; wall_time_s from the first iteration (middleware.summary)
    cfg = compile_config(main_config, create_config, seed=seed, exp_name=exp_name, save=False)
    policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
    if getattr(policy_cls, "pipeline", None) != "offline":
        raise ConfigError(f"policy {cfg.policy.type!r} learns online (pipeline {policy_cls.pipeline!r}): train it "
                          f"with pipelines.build_pipeline; the offline pipeline takes 'bc', 'cql', ...")
    if not cfg.dataset.name:
        raise ConfigError(f"dataset.name is empty: policy {cfg.policy.type!r} learns from a dataset; name one "
                          f"(dataset.name=cartpole/expert-v0, see docs/offline.md)")
    # every rank opens the dataset and checks it before anything is written: all fail alike, none waits
    dataset = open_dataset(cfg.dataset.name, cfg.dataset.root or None)
    env_type = ENV_REGISTRY.get(cfg.env.type)
    probe = make_vector_env(env_type, cfg.env, 1, cfg.seed, manager="sync", training=False)
    obs_space, action_space = probe.single_observation_space, probe.single_action_space
    probe.close()
    dataset.check_spaces(obs_space, action_space, f"env {cfg.env.env_id!r} (type {cfg.env.type!r})")
    plan = ShardPlan(dataset.n_episodes, world_size, dataset=f"dataset {cfg.dataset.name!r}",
                     split=cfg.dataset.split)

    size_torch_threads(cfg.torch_threads)
    seed_r = rank_seed(cfg.seed, rank)
    _seed_everything(seed_r)
    evaluator_env = None
    if main:
        evaluator_env = make_vector_env(env_type, cfg.env, cfg.env.evaluator_env_num, cfg.seed, manager="sync",
                                        training=False)
        resources.callback(evaluator_env.close)
    device = ddp_ctx.device if ddp_ctx.device != "cpu" else None
    try:
        policy = policy_cls(cfg.policy, obs_space, action_space, device=device)
    except SpaceMismatchError as err:
        raise SpaceMismatchError(f"env {cfg.env.env_id!r} (type {cfg.env.type!r}): {err}") from err
    except ValueError as err:  # a value of its config the policy refuses: the user's to fix
        raise ConfigError(f"policy {cfg.policy.type!r}: {err}") from err
    # the inputs are checked: only now the run directory (a failed start leaves none, pipelines.run_dir)
    cfg.exp_name, resume = _run_dir(cfg, exp_name is not None, resume, force, main, world_size, resources)
    if main:
        if resume:
            warn_config_changes(cfg)
        save_config(cfg)

    episodes = plan.episodes(rank)
    capacity = int(dataset.episode_lengths[episodes].sum())
    learn_device = policy.device
    buffer = ReplayBuffer(capacity, EpochSampler(seed_r, learn_device), RingStorage(capacity, learn_device))
    describe = f"dataset {cfg.dataset.name!r}, {plan.describe(rank, dataset.episode_lengths)}"
    if main or world_size == 1:
        logger.info("%s", describe)
    learn = cfg.policy.learn
    fetcher = OfflineDataFetcher(lambda: dataset.transitions(episodes), buffer, batch_size=learn.batch_size,
                                 update_per_iter=learn.update_per_iter, describe=f"rank {rank}")
    ctx = context()
    saver = stages.checkpoint_saver(cfg, policy, None, world_size) if main else None
    if resume:
        resume_run(cfg, policy, ctx, None, saver, rank, world_size, empty_buffer=lambda: None,
                   max_env_step=max_env_step, max_train_iter=max_train_iter)
    ddp = stages.ddp(cfg, policy)
    summary = RunSummary(cfg.exp_name, write=main, extra=lambda: {
        "run_dir": cfg.exp_name, "dataset": cfg.dataset.name, "dataset_episodes": dataset.n_episodes,
        "dataset_transitions": dataset.total_steps, "train_epoch": ctx.train_epoch,
        "shard_transitions": fetcher.loaded, "load_seconds": fetcher.load_seconds,
        **({"world_size": world_size, "rank": rank, "ddp_collective_s": ddp.collective_time}
           if world_size > 1 else {})}, clock=clock)
    resources.callback(summary.close)  # elapsed_s to the end: after the final checkpoint, before envs close

    pipeline = Pipeline(ctx, rank=rank, result=lambda: summary.result, resources=resources)
    pipeline.append(stages.preemption(cfg, rank, world_size, resources), name="preemption")  # first: after ddp's sync
    pipeline.cfg, pipeline.policy, pipeline.buffer = cfg, policy, buffer
    pipeline.dataset, pipeline.shard = dataset, episodes
    if world_size > 1:  # before ddp: writes each rank's RNG state after the iteration's agreement
        pipeline.append(stages.shard_saver(cfg, rank, None), name="shards")
    pipeline.append(ddp, name="ddp")
    pipeline.append(summary, name="summary")
    evaluator = InteractionEvaluator(policy.eval_mode, evaluator_env, eval_freq=cfg.policy.eval.evaluator.eval_freq,
                                     n_episode=cfg.env.n_evaluator_episode, stop_value=cfg.env.stop_value,
                                     seed=cfg.seed) if main else None
    pipeline.append(evaluator, name="evaluator", main_only=True)
    pipeline.append(fetcher, name="fetcher")
    pipeline.append(OfflineLearner(policy.learn_mode), name="learner")
    pipeline.append(saver, name="checkpoint", main_only=True)
    if stages.logs(cfg):
        pipeline.append(stages.logger(cfg, ctx if resume else None, resources) if main else None, name="logger",
                        main_only=True)
    pipeline.append(stages.termination(cfg, max_env_step, max_train_iter, main, offline=True),
                    name="termination")
    if cfg.log.progress if progress is None else progress:
        pipeline.append(progress_bar(max_env_step, clock) if main else None, name="progress", main_only=True)
    if "logger" in pipeline and pipeline["logger"] is not None:
        pipeline["logger"].clock = clock  # progress.csv's wall_time_s and elapsed_s: the summary's
    return pipeline
