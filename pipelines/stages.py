"""From a compiled config to the middleware of the standard pipeline: the one place that knows which
config key feeds which constructor argument. Middleware themselves take explicit, typed arguments.

Each function takes the compiled config (``engine.compile_config``) and the objects the pipeline built
(policy, envs, buffer) and returns one middleware or data structure.
"""
from __future__ import annotations

import functools
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from data.envs import EnvParams, env_settings, make_vector_env, unreachable_stop_value
from data.replay import (FrameStackStorage, PrioritizedReplayParams, PrioritizedSampler, ReplayBuffer,
                         ReplayBufferParams, RingStorage, Sampler, SequenceStorage, UniformSampler)
from data.replay.device import resolve_replay_device
from data.replay.her import HindsightStorage, goal_functions
from engine.config import ConfigError, RunParams, plain
from engine.distributed import DistributedError, default_timeout, get_world_size
from engine.preemption import PreemptParams, PreemptionGuard
from engine.profile import StageProfile
from engine.protocols import VectorEnv
from engine.context import OnlineRLContext
from engine.registry import ENV_REGISTRY
from middleware.background_eval import BackgroundEvaluator
from middleware.checkpoint import BEST, CheckpointParams, ShardSaver
from middleware.ddp import DDPParams
from middleware.logger import LogParams
from middleware.preemption import PreemptionStop
from middleware.termination import termination_checker
from middleware import (CkptSaver, DDPMiddleware, InteractionEvaluator, OffPolicyLearner, OnlineLogger, OnPolicyLearner,
                        StepCollector, eps_greedy_handler, epsilon_schedule, gae_estimator,
                        online_logger, random_collect_handler)
from middleware.progress_csv import PROGRESS_FILE
from middleware.summary import RunClock
from middleware.trackers import start_trackers
from policies.base import Policy

__all__ = ["env_params", "env_label", "lr_annealing", "replay_buffer", "collector", "evaluator", "EvalSide", "evaluator_report", "exploration",
           "random_collect", "off_policy_learner", "on_policy_learner", "gae", "sequence_length", "checkpoint_saver", "shard_saver",
           "logs", "logger", "preemption", "termination", "ddp", "OFFLINE_DEFAULT_UPDATES"]

logger_ = logging.getLogger(__name__)

#: the update budget of an offline run given none (it also stops when its evaluations stop improving)
OFFLINE_DEFAULT_UPDATES = 100_000


def env_params(cfg: Mapping[str, Any]) -> EnvParams:
    """The config's ``env`` section, typed by its env type's declaration (``data.envs.EnvParams`` and the
    type's own keys); an env type that declares none: the keys every env has."""
    return env_settings(ENV_REGISTRY.get(cfg["env"]["type"]), cfg["env"])


def env_label(cfg: Mapping[str, Any]) -> str:
    """How a run's env is named to the user: its id, with its env type when the type is not the id's own family
    (``CartPole-v1 (env type cartpole_masked)``, not a bare ``CartPole-v1`` for the masked variant).

    Examples:
        >>> env_label({"env": {"type": "cartpole", "env_id": "CartPole-v1"}})
        'CartPole-v1'
        >>> env_label({"env": {"type": "cartpole_masked", "env_id": "CartPole-v1"}})
        'CartPole-v1 (env type cartpole_masked)'
    """
    env = cfg["env"]
    env_id, env_type = str(env.get("env_id") or ""), str(env.get("type") or "")
    family = env_id.split("/")[-1].split("-v")[0].lower()
    if not env_id:
        return f"env type {env_type}"
    return env_id if env_type in (family, "gym") else f"{env_id} (env type {env_type})"


def replay_buffer(settings: ReplayBufferParams, *, priority: bool = False, obs_shape: Optional[Sequence[int]] = None,
                  seed: Optional[int] = None, frame_stack: Optional[int] = None, num_envs: Optional[int] = None,
                  learn_device: Optional[str | torch.device] = None, goal_env: Any = None,
                  nstep: int = 1, seq_len: Optional[int] = None) -> ReplayBuffer:
    """The buffer a policy's ``other.replay_buffer`` section asks for: sized and placed by ``settings``
    (``device``: None or "cpu", "learn", "cuda[:N]"; ``data.replay.device``); ``priority`` (``policy.priority``)
    picks the prioritized sampler (``settings``' alpha and beta); ``frame_stack`` (with the collector's
    ``num_envs``) stores image stacks one frame per transition. ``learn_device``: the policy's device, which
    "learn" names (``policy.device``). ``settings.her`` (hindsight goals) relabels through ``goal_env``'s
    ``compute_reward`` (one env of the run's, made in this process) the whole vector steps of the collector's
    ``num_envs`` envs (``nstep``: the policy's, which must be 1). ``seq_len`` (a recurrent policy's
    ``policy.learn.seq_len``) hands out sequences of that many consecutive steps of one env
    (``data.replay.SequenceStorage``).

    On a GPU the memory check runs here when the frames' size is known from ``obs_shape`` (the policy's
    observation shape), so an oversized buffer fails before the first env step; otherwise, and for the exact
    size, at the first push, before the first update."""
    capacity = settings.replay_buffer_size
    device = resolve_replay_device(settings.device, learn_device)
    if settings.her.enabled:
        storage = _hindsight_storage(settings, goal_env, num_envs, nstep, priority, device, seed)
    elif seq_len:
        storage = SequenceStorage(capacity, num_envs, seq_len, device=device)
    elif frame_stack:
        known = obs_shape is not None and len(obs_shape) == 3 and int(obs_shape[0]) == frame_stack
        storage = FrameStackStorage(capacity, num_envs, frame_stack, device=device,
                                    frame_shape=[int(x) for x in obs_shape[1:]] if known else None)
    else:
        storage = RingStorage(capacity, device)
    if priority:
        if not isinstance(settings, PrioritizedReplayParams):
            raise ConfigError(f"policy.priority=True needs a replay section with alpha and beta "
                              f"(data.replay.PrioritizedReplayParams), got {type(settings).__name__}")
        sampler: Sampler = PrioritizedSampler(capacity, alpha=settings.alpha, beta=settings.beta, seed=seed,
                                              device=device)
    else:
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        sampler = UniformSampler(generator, device=device)
    return ReplayBuffer(capacity, sampler, storage)


def _hindsight_storage(settings: ReplayBufferParams, goal_env: Any, num_envs: Optional[int], nstep: int,
                       priority: bool, device: torch.device, seed: Optional[int]) -> HindsightStorage:
    her = settings.her
    missing = [what for what, given in (("an env of the run's own (its compute_reward)", goal_env is not None),
                                        ("the collector's env count", bool(num_envs))) if not given]
    if missing:
        raise ConfigError(f"policy.other.replay_buffer.her relabels goals through an env of the run's own and the "
                          f"collector's env count: this pipeline gave no {' and no '.join(missing)} (hindsight "
                          f"replay is for the online off-policy pipeline)")
    if nstep != 1:
        raise ConfigError(f"policy.other.replay_buffer.her with policy.nstep={nstep}: a relabelled goal changes every "
                          f"reward of an n-step window, which the window's sum no longer holds; set policy.nstep=1")
    if priority:
        raise ConfigError("policy.other.replay_buffer.her with policy.priority=True: the priorities are the TD errors "
                          "of the goals sampled last, not of the slot's next draw; set policy.priority=False")
    compute_reward, compute_terminated = goal_functions(goal_env, her)
    return HindsightStorage(settings.replay_buffer_size, num_envs, compute_reward, strategy=her.strategy, k=her.k,
                            achieved_goal=her.achieved_goal, desired_goal=her.desired_goal,
                            compute_terminated=compute_terminated, device=device, seed=seed)


def collector(cfg: Mapping[str, Any], policy: Policy, env: VectorEnv, seed: int, on_policy: bool,
              max_env_step: Optional[int] = None) -> StepCollector:
    """``StepCollector`` on the collector's envs: gymnasium's, in groups (``env.manager.overlap``), or batched
    torch envs, whose transitions stay on their device (``data.torch_env``)."""
    params = policy.params
    return StepCollector(policy.collect_mode, env, params.collect.n_sample, nstep=getattr(params, "nstep", 1),
                         gamma=params.discount_factor, seed=seed, time_major=on_policy,
                         env_id=env_params(cfg).env_id, max_env_step=max_env_step)


def evaluator(cfg: Mapping[str, Any], policy: Policy, env: Optional[VectorEnv], saver: Optional[CkptSaver] = None,
              world_size: int = 1, background: bool = False) -> Union[InteractionEvaluator, BackgroundEvaluator]:
    """The blocking evaluator on ``env``, or with ``background`` (``policy.eval.evaluator.background``, where
    the pipeline's shape allows it) the background one,
    whose process builds envs of its own (``EvalSide``; ``env`` is then unused, None) and whose best
    checkpoint ``saver`` takes from the evaluated snapshot. Under DDP the last iteration waits for a
    running evaluation at most half the collective timeout, while the other ranks wait in theirs. The
    process is forked, or spawned where it acts on a GPU (``middleware.eval_worker``)."""
    env_settings = env_params(cfg)
    kwargs = dict(eval_freq=policy.params.eval.evaluator.eval_freq, n_episode=env_settings.n_evaluator_episode,
                  stop_value=env_settings.stop_value, seed=RunParams.pick(cfg).seed)
    if not background:  # a new best is written from the weights evaluated, before the learner moves them on
        return InteractionEvaluator(policy.eval_mode, env, **kwargs,
                                    on_evaluation=saver.on_evaluation if saver is not None else None)
    if not callable(getattr(policy, "acting_weights", None)):
        raise ConfigError(f"policy.eval.evaluator.background=True needs a policy with acting_weights() and "
                          f"load_acting_weights() (policies.base.Policy), which {type(policy).__name__} lacks: "
                          f"set background=False")
    finish_timeout_s = 60.0 if world_size == 1 else min(60.0, default_timeout() / 2)
    side = EvalSide.of(cfg, policy)
    evaluator = BackgroundEvaluator(side, policy.acting_weights, **kwargs, finish_timeout_s=finish_timeout_s,
                                    learn_state=policy.learn_mode.state_dict if saver is not None else None,
                                    start_method="spawn" if side.device.startswith("cuda") else None)
    if saver is not None:
        saver.save_best_from(evaluator.evaluated_state)
    return evaluator


@dataclass(frozen=True)
class EvalSide:
    """What the background evaluation process builds (``middleware.eval_worker.WorkerSide``): a policy
    from the run's config acting on the trainer's eval device, with the weights the trainer sends, and the
    evaluator's envs as the blocking evaluator's (``EnvParams.evaluator_envs``, seeded ``cfg.seed``). Plain
    picklable data: ``spawn`` sends it to the process."""

    policy_cls: type
    policy_cfg: Dict[str, Any]
    observation_space: Any
    action_space: Any
    device: str
    env_type: Any
    env_cfg: Dict[str, Any]
    num_envs: int
    seed: int

    @classmethod
    def of(cls, cfg: Mapping[str, Any], policy: Policy) -> "EvalSide":
        return cls(type(policy), plain(cfg["policy"]), policy.observation_space, policy.action_space,
                   str(policy.mode_devices["eval"]), ENV_REGISTRY.get(cfg["env"]["type"]), plain(cfg["env"]),
                   env_params(cfg).evaluator_envs, RunParams.pick(cfg).seed)

    def __call__(self) -> Tuple[Any, Callable[[Any], None], VectorEnv]:
        env = make_vector_env(self.env_type, self.env_cfg, self.num_envs, self.seed, manager="sync", training=False)
        policy = self.policy_cls(self.policy_cfg, self.observation_space, self.action_space, device=self.device)
        return policy.eval_mode, policy.load_acting_weights, env


def evaluator_report(evaluator: Any) -> Dict[str, Any]:
    """The summary's ``background_eval`` entry (``BackgroundEvaluator.finish_report``), or nothing."""
    return {"background_eval": evaluator.finish_report()} if isinstance(evaluator, BackgroundEvaluator) else {}


def exploration(policy: Policy) -> Any:
    """Epsilon-greedy by the policy's ``other.eps`` schedule (``policies.dqn.EpsilonParams``)."""
    eps = policy.params.other.eps
    return eps_greedy_handler(epsilon_schedule(eps.type, eps.start, eps.end, eps.decay))


def random_collect(policy: Policy) -> Any:
    return random_collect_handler(policy.params.random_collect_size)


def rank_warmup(random_collect_size: int, world_size: int) -> int:
    """The transitions one rank's buffer holds of the random warm-up (``policy.random_collect_size``, global env
    steps), which its learner waits for: its share."""
    return math.ceil(random_collect_size / world_size)


def off_policy_learner(policy: Policy, buffer: ReplayBuffer) -> OffPolicyLearner:
    """``update_per_collect`` updates of ``policy.learn.batch_size`` transitions: sampled rows, or for a recurrent
    policy ``batch_size / seq_len`` whole sequences (``data.replay.SequenceStorage``). Updates wait for the
    random warm-up's data: ``policy.random_collect_size`` counts global env steps (``random_collect``), so under
    DDP each rank's buffer holds its share of it, not the whole (which kept every rank collecting with the
    untrained policy until its own buffer held as much as all ranks' random data)."""
    params = policy.params
    warmup = rank_warmup(getattr(params, "random_collect_size", 0), get_world_size())
    return OffPolicyLearner(policy.learn_mode, buffer, batch_size=_batch_rows(policy),
                            update_per_collect=params.learn.update_per_collect, warmup=warmup,
                            priority=getattr(params, "priority", False))


def on_policy_learner(policy: Policy) -> OnPolicyLearner:
    """Epochs of minibatches of ``policy.learn.batch_size`` transitions: rows of the flattened rollout, or
    for a recurrent policy ``batch_size / seq_len`` whole sequences (``data.sequences``)."""
    learn = policy.params.learn
    return OnPolicyLearner(policy.learn_mode, epochs=learn.epoch_per_collect, batch_size=_batch_rows(policy))


def _batch_rows(policy: Policy) -> int:
    """The rows of a batch of ``policy.learn.batch_size`` transitions: transitions, or a recurrent policy's whole
    sequences of ``seq_len`` steps."""
    seq_len = sequence_length(policy)
    batch_size = policy.params.learn.batch_size
    return batch_size if seq_len is None else max(1, batch_size // seq_len)


def gae(policy: Policy) -> Any:
    params = policy.params
    return gae_estimator(policy.collect_mode, gamma=params.discount_factor, lam=params.collect.gae_lambda,
                         seq_len=sequence_length(policy),
                         reward_scale=policy.scale_rewards if getattr(policy, "scales_rewards", False) else None,
                         observe_returns=policy.observe_returns if getattr(policy.params, "value_norm", False) else None)


def sequence_length(policy: Policy) -> Optional[int]:
    """A recurrent policy's ``policy.learn.seq_len``; None for a feed-forward policy. ``compile_config`` has
    checked it against the steps per env of a collect already (``PPOLSTMPolicy.check_config``)."""
    return policy.params.learn.seq_len if getattr(policy, "recurrent", False) else None


def checkpoint_saver(cfg: Mapping[str, Any], policy: Policy, buffer: Optional[ReplayBuffer],
                     world_size: int = 1) -> CkptSaver:
    """The saver of ``ckpt`` (``CheckpointParams``) in ``<exp_name>/ckpt``."""
    ckpt = CheckpointParams.of(cfg["ckpt"], "ckpt")
    return CkptSaver(policy.learn_mode, os.path.join(RunParams.pick(cfg).exp_name, "ckpt"), ckpt.save_freq,
                     buffer if ckpt.save_replay_buffer else None, latest_every_s=ckpt.latest_every_s,
                     meta=checkpoint_meta(cfg), world_size=world_size)


def shard_saver(cfg: Mapping[str, Any], rank: int, buffer: Optional[ReplayBuffer]) -> ShardSaver:
    """A rank's own replay shard beside the checkpoints, when ``ckpt.save_replay_buffer`` keeps the buffer."""
    ckpt = CheckpointParams.of(cfg["ckpt"], "ckpt")
    return ShardSaver(os.path.join(RunParams.pick(cfg).exp_name, "ckpt"), rank,
                      buffer if ckpt.save_replay_buffer else None)


def checkpoint_meta(cfg: Mapping[str, Any]) -> Dict[str, Any]:
    """What wrote a checkpoint, checked when a run resumes from it."""
    env = env_params(cfg)
    return {"policy_type": cfg["policy"]["type"], "env_type": env.type, "env_id": env.env_id}


def logs(cfg: Mapping[str, Any]) -> bool:
    """Whether the run logs scalars anywhere: TensorBoard, ``progress.csv`` or an experiment tracker."""
    log = LogParams.of(cfg["log"], "log")
    return bool(log.tensorboard or log.csv or any(tracker.enable for tracker in log.trackers().values()))


def logger(cfg: Mapping[str, Any], resumed: Optional[OnlineRLContext] = None, resources: Optional[Any] = None, *,
           clock: Optional[RunClock] = None, profile: Optional[StageProfile] = None) -> OnlineLogger:
    """tensorboardX under ``<exp_name>/log`` (``log.tensorboard``), ``<exp_name>/progress.csv`` (``log.csv``)
    and the experiment trackers ``log.wandb``/``log.mlflow`` enable (``middleware.trackers``; started here with
    the compiled config, finished with the best checkpoint when ``resources``, the pipeline's, close);
    ``resumed``: the context restored from a checkpoint, whose rows the CSV keeps; ``clock``: the run's, which
    the summary keeps too (progress.csv's ``wall_time_s`` and ``elapsed_s``); ``profile``: the run's stage
    times (``profile/<stage>_share`` scalars)."""
    settings, run_dir = LogParams.of(cfg["log"], "log"), RunParams.pick(cfg).exp_name
    trackers = start_trackers(settings.trackers(), run_dir, plain(cfg),
                              resume_env_step=resumed.env_step if resumed is not None else None)
    if trackers and resources is not None:
        best = os.path.join(run_dir, "ckpt", BEST)
        for tracker in trackers:  # at the run's end; an error or Ctrl-C that ended it marks the tracker's run failed
            resources.push(functools.partial(_finish_tracker, tracker, [best]))
    log = online_logger(os.path.join(run_dir, "log"), print_freq=settings.print_freq, tensorboard=settings.tensorboard,
                        csv_path=os.path.join(run_dir, PROGRESS_FILE) if settings.csv else None,
                        profile=profile, trackers=trackers)
    if resumed is not None:
        log.resume(resumed.env_step, resumed.last_eval_iter)
    if clock is not None:  # after resume: a resumed clock goes on from the kept rows
        log.clock = clock
    return log


def _finish_tracker(tracker: Any, artifacts: List[str], error_type: Any, error: Any, traceback: Any) -> bool:
    """End ``tracker``'s run as the pipeline's resources close (``contextlib.ExitStack.push``): failed where an
    error or Ctrl-C ended the run, which then goes on propagating (False)."""
    tracker.finish(artifacts, failed=error_type is not None)
    return False


def preemption(cfg: Mapping[str, Any], rank: int, world_size: int, resources: Any) -> PreemptionStop:
    """The preemption stage (``preempt.signals``, ``preempt.grace_s``): its guard catches the signals from
    the run's first iteration until the pipeline closes (``resources``), so a signal during the final
    checkpoint write waits for it. Registered first in a pipeline (``middleware.preemption``)."""
    settings = PreemptParams.of(cfg["preempt"], "preempt")
    try:
        guard = PreemptionGuard(settings.signals, settings.grace_s,
                                describe=f"rank {rank} of {world_size}" if world_size > 1 else "")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    resources.callback(guard.uninstall)
    return PreemptionStop(guard)


def lr_annealing(policy: Policy, max_env_step: Optional[int], main: bool = True) -> Optional[Callable[[Any], None]]:
    """The stage of ``policy.learn.lr_schedule='linear'`` (None for any other policy or schedule): before the
    iteration's updates, the learning rate for the env steps done out of ``policy.learn.lr_anneal_env_steps``, or
    out of the budget where the config states none. ``ctx.env_step`` is the global count under DDP (the same on
    every rank), and a resumed run's, so nothing is saved for it. Rank 0 (``main``) says, in one line, when the
    budget outlasts the span: the env steps after it train at a rate of 0.

    Raises:
        engine.config.ConfigError: the schedule asked for with no span and no ``--max-env-step`` to anneal over.
    """
    if not getattr(policy, "anneals_learning_rate", False):
        return None
    span = policy.params.learn.lr_anneal_env_steps or max_env_step
    if span is None:
        raise ConfigError("policy.learn.lr_schedule='linear' anneals the learning rate to 0 over the run's env steps, "
                          "and this run has no --max-env-step: give --max-env-step N, "
                          "policy.learn.lr_anneal_env_steps=N, or policy.learn.lr_schedule=constant")
    if main and max_env_step is not None and span < max_env_step:
        logger_.warning("policy.learn.lr_anneal_env_steps=%s: the learning rate is 0 from env step %s to the budget, "
                        "--max-env-step %s (set policy.learn.lr_anneal_env_steps=%s to anneal over the whole run)",
                        span, span, max_env_step, max_env_step)

    def lr_annealing(ctx: Any) -> None:
        policy.anneal_learning_rate(ctx.env_step / span)

    return lr_annealing


def termination(cfg: Mapping[str, Any], policy: Policy, max_env_step: Optional[int], max_train_iter: Optional[int], main: bool,
                offline: bool = False, resumed: bool = False) -> Callable[[Any], None]:
    """The termination stage: the budgets given, ``policy.eval.evaluator.patience``, and no run without an
    end that does not say so. An offline run given no budget stops at ``OFFLINE_DEFAULT_UPDATES`` updates
    (a dataset's policy may never reach ``env.stop_value``); rank 0 says, in one line each, when the stop value is
    above the highest return an episode can reach (``data.envs.unreachable_stop_value``: a typo, or a value copied
    from another env), and when an online run has no budget, no reachable stop value and no patience, so that it
    runs until stopped (not on a resume: it stops at its own budget, ``pipelines.resume``)."""
    patience = policy.params.eval.evaluator.patience
    stop_value = env_params(cfg).stop_value
    env_type = ENV_REGISTRY.get(cfg["env"]["type"])
    highest = env_type.highest_return(cfg["env"]) if hasattr(env_type, "highest_return") else None
    unreachable = unreachable_stop_value(cfg["env"], highest)
    if unreachable and main:
        logger_.warning("%s", unreachable)
    if max_env_step is None and max_train_iter is None:
        if offline:
            max_train_iter = OFFLINE_DEFAULT_UPDATES
            if main:
                logger_.warning("no budget given: this offline run stops at %s updates%s, or at env.stop_value "
                                "(--max-train-iter N to choose)", f"{OFFLINE_DEFAULT_UPDATES:,}",
                                f" or after {patience} evaluations in a row without a new best "
                                f"(policy.eval.evaluator.patience)" if patience else "")
        elif (stop_value is None or math.isinf(stop_value) or unreachable) and not patience and main and not resumed:
            logger_.warning("this run has no end: no --max-env-step or --max-train-iter, env.stop_value is %s and "
                            "policy.eval.evaluator.patience is 0; it trains until stopped (Ctrl-C, which keeps "
                            "latest); give --max-env-step N", "out of reach" if unreachable else "none")
    try:
        return termination_checker(max_env_step, max_train_iter, patience=patience)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def ddp(cfg: Mapping[str, Any], policy: Policy) -> DDPMiddleware:
    """The ddp middleware with the config's communication settings (``ddp.bucket_cap_mb``, ``static_graph``,
    ``gradient_as_bucket_view``, ``comm_hook``, ``powersgd_rank``; docs/distributed.md)."""
    settings = DDPParams.of(cfg["ddp"], "ddp")
    try:
        return DDPMiddleware(policy.learn_mode, bucket_cap_mb=settings.bucket_cap_mb, static_graph=settings.static_graph,
                             gradient_as_bucket_view=settings.gradient_as_bucket_view, comm_hook=settings.comm_hook,
                             powersgd_rank=settings.powersgd_rank)
    except DistributedError as err:
        if "ddp.comm_hook" in str(err):
            raise ConfigError(str(err)) from None
        raise
