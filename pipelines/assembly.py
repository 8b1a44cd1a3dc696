"""A run assembled once: the head and tail every standard pipeline shares, around the middle stages its
shape contributes.

A policy class declares its shape (``Policy.pipeline``: ``"off_policy"``, ``"on_policy"``, ``"offline"``);
``pipelines.build`` keeps the table from that name to a ``Shape``, and ``assemble`` runs the same steps for
all of them:

1. join the process group the config asks for (``ddp.backend``, ``policy.cuda``); compile the config;
   size this process's torch threads; seed torch, numpy and random with the rank's seed (``rank_seed``);
2. the shape opens its data source (the collector's envs, or the dataset) and says the spaces;
3. rank 0 builds the evaluator's envs (unless evaluation runs in the background); the policy is built, its
   errors worded for the user; the shape checks the policy and builds its replay buffer;
4. only now, with every input checked, the run directory is claimed and ``config.json`` written (a failed
   start leaves none; ``pipelines.run_dir``), and a resumed run takes back its state (``pipelines.resume``);
5. the stages: ``preemption``, ``shards`` (DDP), ``ddp``, ``summary``, ``evaluator`` (rank 0), the shape's
   middle, ``statistics`` (running observation statistics), ``refresh`` (acting copies on other devices),
   ``checkpoint``, ``logger`` (rank 0), ``termination``, ``final_evaluation`` (rank 0; the last weights of a run
   its budget ended; a background evaluator evaluates them itself, at the end of its stage), ``progress`` (rank 0).

A new shape (multi-agent, say) is a ``Shape`` subclass and a row in ``pipelines.build.SHAPES``: it fills
its data source and its middle stages; the head and tail stay here.
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple, Type, Union

import gymnasium as gym
import numpy as np
import torch

from data.envs import make_vector_env
from data.parallel_envs import is_agent_rows
from data.replay import ReplayBuffer
from engine.config import ConfigError, RunParams, compile_config, save_config
from engine.context import Context
from engine.devices import size_torch_threads
from engine.distributed import DDPContext, broadcast_object
from engine.profile import StageProfile
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from middleware import RunSummary, actor_refresher, progress_bar, statistics_merger
from middleware.evaluator import final_evaluation
from middleware.logger import LogParams
from middleware.summary import RunClock
from policies.base import Policy, SpaceMismatchError

from . import stages
from .pipeline import Pipeline
from .resume import resume_run, warn_config_changes
from .run_dir import RunDirError, check_same_task, claim_run_dir

__all__ = ["RunRequest", "Run", "Shape", "assemble", "rank_seed", "RANK_SEED_OFFSET"]

logger = logging.getLogger(__name__)

#: rank r seeds with ``seed + r * RANK_SEED_OFFSET``; its collector env i with that plus i
RANK_SEED_OFFSET = 1000

ConfigPair = Tuple[Mapping[str, Any], Mapping[str, Any]]


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``: ranks seeded alike would collect identical data."""
    return seed + rank * RANK_SEED_OFFSET


@dataclass(frozen=True)
class RunRequest:
    """What the caller of ``build_pipeline`` asked for (its arguments, documented there)."""

    main_config: Mapping[str, Any]
    create_config: Mapping[str, Any]
    seed: Optional[int] = None
    max_env_step: Optional[int] = None
    max_train_iter: Optional[int] = None
    exp_name: Optional[str] = None
    resume: Union[bool, str] = False
    force: bool = False
    progress: Optional[bool] = None
    context: Optional[type] = None


@dataclass
class Run:
    """What the shared head has built so far, handed to the shape at each of its steps.

    Attributes:
        cfg: the compiled config. rank, world_size: this process's place. seed: this rank's seed.
        resources: closed when the pipeline ends (envs, the process group, the run lock).
        env_type: the config's env type (``engine.registry``). policy: set once built.
    """

    request: RunRequest
    cfg: Any
    rank: int
    world_size: int
    seed: int
    resources: contextlib.ExitStack
    env_type: Any
    policy: Optional[Policy] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def main(self) -> bool:
        """Whether this process is global rank 0 (it evaluates, logs and writes checkpoints)."""
        return self.rank == 0


class Shape:
    """What one kind of pipeline adds to the shared head and tail. Subclasses fill ``open`` and ``middle``;
    the other steps have the defaults most shapes want. One instance serves one build."""

    #: the context class its stages read (``build_pipeline(context=...)`` takes it or a subclass)
    context: Type[Context]
    #: whether ``policy.eval.evaluator.background`` may move evaluation to a process of its own
    background_eval: bool = True
    #: whether a run given no budget stops at the offline update budget (``stages.termination``)
    offline: bool = False
    #: whether checkpoints keep the replay buffer (``ckpt.save_replay_buffer``): not one refilled from a dataset
    saves_buffer: bool = True
    #: the keys of the ``policy`` section its stages read (the head and tail: the evaluator's), which an algorithm's
    #: ``Params`` must declare (``check_policy_class``)
    policy_keys: Tuple[str, ...] = ("eval.evaluator.eval_freq", "eval.evaluator.patience")
    #: the policy methods its stages call beyond the three modes' (on-policy: ``_value`` for GAE)
    policy_methods: Tuple[str, ...] = ()

    def open(self, run: Run) -> Tuple[gym.Space, gym.Space]:
        """Open the data source (envs, a dataset), registering what must be closed in ``run.resources``;
        return the single-env ``(observation_space, action_space)`` the policy is built for."""
        raise NotImplementedError

    def prepare(self, run: Run) -> Optional[ReplayBuffer]:
        """Check the built policy (``run.policy``) against the shape, and return the replay buffer (or None)."""
        return None

    def empty_buffer(self, run: Run) -> Optional[ReplayBuffer]:
        """A new, empty buffer like ``prepare``'s, which a resumed run fills from its saved shards."""
        return None

    def summary(self, run: Run, ctx: Any) -> Dict[str, Any]:
        """Entries of ``summary.json`` of this shape's own (read when the run ends)."""
        return {}

    def middle(self, run: Run, pipeline: Pipeline, buffer: Optional[ReplayBuffer]) -> None:
        """Append the stages between ``evaluator`` and ``statistics``: how data arrives and is learnt from."""
        raise NotImplementedError


def assemble(request: RunRequest, shapes: Mapping[str, Type[Shape]]) -> Pipeline:
    """The pipeline of ``request``, its shape chosen from ``shapes`` by the policy's ``pipeline``: the process
    group joined, and the envs, policy and buffer built (the module docstring). If building fails, what
    was opened is released, told the error: no final barrier that failed peers would never reach."""
    policy_cfg = request.main_config.get("policy", {})
    cuda = bool(policy_cfg.get("cuda", False)) and torch.cuda.is_available()
    resources = contextlib.ExitStack()
    try:
        ddp_ctx = resources.enter_context(DDPContext(backend=request.main_config.get("ddp", {}).get("backend", "auto"),
                                                     cuda=cuda))
        return _assemble(request, shapes, ddp_ctx, resources)
    except BaseException as err:
        resources.__exit__(type(err), err, err.__traceback__)
        raise


def _assemble(request: RunRequest, shapes: Mapping[str, Type[Shape]], ddp_ctx: DDPContext,
              resources: contextlib.ExitStack) -> Pipeline:
    clock = RunClock()  # elapsed_s counts from here; wall_time_s from the first iteration (middleware.summary)
    cfg = compile_config(request.main_config, request.create_config, seed=request.seed, exp_name=request.exp_name,
                         save=False)
    policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
    shape = _shape_of(policy_cls, cfg.policy.type, shapes)
    context = _context_class(request.context, shape)
    keys = RunParams.pick(cfg)  # the run's own keys (its directory is settled below)
    size_torch_threads(keys.torch_threads)  # this process's share of the cores (or OMP_NUM_THREADS)
    run = Run(request, cfg, ddp_ctx.rank, ddp_ctx.world_size, rank_seed(keys.seed, ddp_ctx.rank), resources,
              ENV_REGISTRY.get(cfg.env.type))
    _seed_everything(run.seed)
    observation_space, action_space = shape.open(run)
    evaluator_params = policy_cls.Params.of(cfg.policy, "policy").eval.evaluator  # before the policy is built
    background = shape.background_eval and getattr(evaluator_params, "background", False)
    evaluator_env = None
    if run.main and not background:  # a background evaluator's process builds its own
        evaluator_env = make_vector_env(run.env_type, cfg.env, stages.env_params(cfg).evaluator_envs, keys.seed,
                                        manager="sync", training=False)
        resources.callback(evaluator_env.close)
    run.policy = policy = _build_policy(policy_cls, cfg, observation_space, action_space, ddp_ctx)
    buffer = shape.prepare(run)
    annealing = stages.lr_annealing(policy, request.max_env_step, run.main)  # refused before the run dir exists
    saved_buffer = buffer if shape.saves_buffer else None

    # the inputs are checked: only now the run directory (a failed start leaves none, pipelines.run_dir)
    run_dir, resume = _run_dir(cfg, request.exp_name is not None, request.resume, request.force, run.main,
                               run.world_size, resources)
    cfg.exp_name = run_dir  # the compiled config records the directory the run writes (config.json, resume)
    if run.main:
        if resume:
            warn_config_changes(cfg)
        save_config(cfg)
    ctx = context()
    saver = stages.checkpoint_saver(cfg, policy, saved_buffer, run.world_size) if run.main else None
    if resume:  # rank 0 reads the learn state (the ddp middleware shares it); every rank its replay and RNG
        resume_run(cfg, policy, ctx, saved_buffer, saver, run.rank, run.world_size,
                   empty_buffer=lambda: shape.empty_buffer(run), max_env_step=request.max_env_step,
                   max_train_iter=request.max_train_iter)
    evaluator = stages.evaluator(cfg, policy, evaluator_env, saver, run.world_size, background=background) \
        if run.main else None
    ddp = stages.ddp(cfg, policy)
    log = LogParams.of(cfg.log, "log")
    profile = StageProfile() if log.profile else None  # where the time goes (--profile, engine.profile)
    summary = RunSummary(run_dir, write=run.main, clock=clock, extra=lambda: {
        "run_dir": run_dir, **shape.summary(run, ctx),
        **({"world_size": run.world_size, "rank": run.rank, "ddp_collective_s": ddp.collective_time}
           if run.world_size > 1 else {}),
        **({"profile": profile.as_dict()} if profile is not None else {}), **stages.evaluator_report(evaluator)})
    resources.callback(summary.close)  # elapsed_s to the end: after the final checkpoint, before envs close
    if background and evaluator is not None:  # its final evaluation may replace one published in the same iteration
        evaluator.seen = summary.track_evaluation

    pipeline = Pipeline(ctx, rank=run.rank, result=lambda: summary.result, resources=resources, cfg=cfg,
                        policy=policy, buffer=buffer, profile=profile, **run.extra)
    pipeline.append(stages.preemption(cfg, run.rank, run.world_size, resources), name="preemption")  # after ddp's sync
    if run.world_size > 1:  # before ddp: each rank's replay shard and RNG after the iteration's agreement
        pipeline.append(stages.shard_saver(cfg, run.rank, saved_buffer), name="shards")
    pipeline.append(ddp, name="ddp")
    pipeline.append(summary, name="summary")
    pipeline.append(evaluator, name="evaluator", main_only=True)
    if annealing is not None:  # policy.learn.lr_schedule='linear'
        pipeline.append(annealing, name="lr_schedule")
    shape.middle(run, pipeline, buffer)
    if policy.keeps_statistics:  # every rank, every iteration: under DDP a collective
        pipeline.append(statistics_merger(policy.merge_statistics), name="statistics")
    if policy.separate_actors:  # collection or evaluation acts on its own device: keep its copy current
        pipeline.append(actor_refresher(policy.refresh_actors, policy.params.device.refresh_every), name="refresh")
    pipeline.append(saver, name="checkpoint", main_only=True)
    if stages.logs(cfg):
        pipeline.append(stages.logger(cfg, ctx if resume else None, resources, clock=clock, profile=profile)
                        if run.main else None, name="logger", main_only=True)
    pipeline.append(stages.termination(cfg, policy, request.max_env_step, request.max_train_iter, run.main,
                                       offline=shape.offline, resumed=bool(resume)), name="termination")
    if not background:  # the run's last weights evaluated once where a budget ends it (middleware.evaluator)
        pipeline.append(final_evaluation(evaluator, seen=summary.track_evaluation) if run.main else None,
                        name="final_evaluation", main_only=True)
    if log.progress if request.progress is None else request.progress:
        pipeline.append(progress_bar(request.max_env_step, clock) if run.main else None, name="progress",
                        main_only=True)
    return pipeline


def _shape_of(policy_cls: type, name: str, shapes: Mapping[str, Type[Shape]]) -> Shape:
    """A new instance of the shape the policy class declares (``pipeline``)."""
    declared = getattr(policy_cls, "pipeline", None)
    if declared not in shapes:
        raise ConfigError(f"policy {name!r} ({policy_cls.__module__}.{policy_cls.__name__}) declares pipeline = "
                          f"{declared!r}, which no standard pipeline has; declare one of {', '.join(sorted(shapes))}")
    shape = shapes[declared]()
    check_policy_class(policy_cls, name, shape)
    return shape


def check_policy_class(policy_cls: type, name: str, shape: Shape) -> None:
    """Refuse an algorithm whose ``Params`` lacks a key its shape's stages read, or a method they call, naming
    each: an algorithm of the user's own writes its ``Params`` from scratch (docs/own_algorithm.md), and a key left
    out was an ``AttributeError`` in the middle of the assembly."""
    declared = {info.path for info in policy_cls.Params.fields_info()}
    missing = [f"policy.{key}" for key in shape.policy_keys if key not in declared]
    methods = [method for method in shape.policy_methods if not callable(getattr(policy_cls, method, None))]
    if missing or methods:
        lacks = ", ".join(missing) + (" and " if missing and methods else "") + \
            " and ".join(f"a {method}(obs) method" for method in methods)
        raise ConfigError(f"policy {name!r} ({policy_cls.__module__}.{policy_cls.__name__}) declares no {lacks}, "
                          f"which its pipeline ({policy_cls.pipeline!r}) reads: add them (its sections deriving from "
                          f"policies.defaults' CollectParams and OnlineEvalParams, data.replay's ReplayBufferParams; "
                          f"docs/own_algorithm.md)")


def _context_class(context: Optional[type], shape: Shape) -> type:
    """The context the stages share: the shape's, or the caller's subclass of it."""
    if context is None:
        return shape.context
    if not (isinstance(context, type) and issubclass(context, shape.context)):
        raise TypeError(f"build_pipeline(context=...) wants {shape.context.__name__} or a subclass of it (the "
                        f"standard stages of this policy read its fields), got {context!r}")
    return context


def _build_policy(policy_cls: type, cfg: Any, observation_space: gym.Space, action_space: gym.Space,
                  ddp_ctx: DDPContext) -> Policy:
    """The policy on this rank's device, its refusals worded for the user: a space that does not fit names
    the env, a config value it refuses is a ``ConfigError``."""
    device = ddp_ctx.device if ddp_ctx.device != "cpu" else None
    env = stages.env_params(cfg)
    if is_agent_rows(observation_space) and not getattr(policy_cls, "multi_agent", False):
        raise SpaceMismatchError(f"env {env.env_id!r} (type {env.type!r}) has several agents in each env, which "
                                 f"policy {cfg.policy.type!r} does not train (it trains one agent per env): use an "
                                 f"algorithm for several agents (baton train --list-algos, the 'agents' column)")
    try:
        return policy_cls(cfg.policy, observation_space, action_space, device=device)
    except SpaceMismatchError as err:  # say which env, beside the policy and the space
        raise SpaceMismatchError(f"env {env.env_id!r} (type {env.type!r}): {err}") from err
    except ValueError as err:  # a value of its config the policy refuses: the user's to fix
        raise ConfigError(f"policy {cfg.policy.type!r}: {err}") from err


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
            keys = RunParams.pick(cfg)
            claim = claim_run_dir(keys.exp_name, keys.seed, explicit=explicit, resume=resume, force=force)
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
