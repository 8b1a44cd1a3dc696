"""Env helpers: registered gymnasium env types and seeded vector envs.

Vector envs use gymnasium's ``AutoresetMode.SAME_STEP``: when an episode ends, ``step`` returns the reset
observation in ``obs`` and the real last observation in ``info["final_obs"]``. So every step is a real
transition (no dummy step after a reset to filter out), and a truncated transition can bootstrap from its
real final observation. ``terminated`` and ``truncated`` are returned separately and stay separate.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Type

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from engine.config import ConfigError
from engine.config_rules import lookup
from engine.host import gib, host_memory_bytes, open_file_limit, process_limit
from engine.params import Params, param, section
from engine.preemption import DEFAULT_SIGNALS, PreemptionGuard
from engine.registry import ENV_REGISTRY, MissingExtraError

from .action_masks import ACTION_MASK_KEY, as_trainable

__all__ = ["EnvParams", "ManagerParams", "GymEnvParams", "env_settings", "GymEnvType", "AnyGymEnvType", "GYM_TYPE", "make_vector_env",
           "check_env_id", "registered_id", "UnknownEnvIdError", "episode_limit", "check_env_section", "MAX_EVAL_EPISODES",
           "WORKER_BYTES"]

logger = logging.getLogger(__name__)

#: the most episodes one evaluation plays (``env.n_evaluator_episode``). Their mean estimates the policy's
#: return with a standard error of sigma/sqrt(n): at 10,000 episodes 1% of the spread of single returns, finer than
#: anything the stop check or the best checkpoint decides on; and an evaluation repeats every ``eval_freq``
#: updates, so at the bound a 500-step env already plays up to 5,000,000 env steps an evaluation. A larger
#: one-off evaluation is ``baton eval RUN --episodes N``, on a saved run.
MAX_EVAL_EPISODES = 10_000

#: the least host memory an env worker process of an async manager holds of its own: 4 MiB (a forked CartPole
#: worker held 4.7 MiB private right after it started; a spawned one imports Python, numpy and gymnasium afresh,
#: tens of MiB); with the open file and process limits, what ``env.collector_env_num`` workers must fit
WORKER_BYTES = 4 << 20


@dataclass
class ManagerParams(Params):
    """The config's ``env.manager`` section: how the collector's envs run (``make_vector_env``)."""

    type: str = param("sync", choices=("sync", "async", "subprocess"))
    """"sync": every env in this process (cheap envs); "async" or "subprocess": one process per env."""
    shared_memory: bool = param(False)
    """async: observations come back through shared memory rather than pipes."""
    context: Optional[str] = param(None)
    """async: the multiprocessing start method ("fork", "spawn", "forkserver"); None: gymnasium's."""
    workers: Optional[int] = param(None, rule="at_least_one")
    """async, for an env type that batches several envs in each process (``mpe``: ``data.parallel_env_workers``):
    the worker processes its envs are split over; None: one per usable core, at most one per env."""
    overlap: bool = param(False)
    """The collector's envs in 2 groups, one stepping while the policy acts on the other (``data.env_groups``;
    pays off where the policy's forward is not cheap next to the env step, e.g. Atari)."""


@dataclass
class EnvParams(Params):
    """The config's ``env`` section, as every env type has it; an env type adds its own keys in a subclass
    (``GymEnvParams``, ``data.torch_env.TorchEnvParams``, ``dizoo.atari.envs.AtariParams``)."""

    type: str = param("")
    """The registered env type (``create_config.env.type``)."""
    env_id: str = param("")
    """The env's id, e.g. gymnasium's "CartPole-v1"."""
    collector_env_num: int = param(8, rule="at_least_one")
    """Envs the collector steps together (one batch per step); refused beyond what the machine holds (memory,
    and processes with an async manager) or one collect uses (``policies.defaults.check_collection``)."""
    evaluator_env_num: int = param(5, rule="at_least_one")
    """Envs the evaluator steps together; no more are made than one evaluation has episodes
    (``evaluator_envs``)."""
    n_evaluator_episode: int = param(5, rule="at_least_one")
    """Episodes per evaluation; their mean return is the evaluation's. At most 10,000 (``MAX_EVAL_EPISODES``)."""
    stop_value: float = param(math.inf)
    """Training stops when an evaluation's mean return reaches it; ``env.stop_value=none``: never."""
    max_episode_steps: Optional[int] = param(None, rule="at_least_one")
    """Truncate episodes after this many steps; None: the env's own limit."""
    manager: ManagerParams = section(ManagerParams)
    """How the collector's envs run (``ManagerParams``)."""

    @property
    def evaluator_envs(self) -> int:
        """The evaluator envs made: ``evaluator_env_num``, but no more than ``n_evaluator_episode``: an env with no
        episode of its own to play would only be built and stepped (``env.evaluator_env_num=100000`` made 100,000
        envs for 5 episodes)."""
        return max(1, min(self.evaluator_env_num, self.n_evaluator_episode))


@dataclass
class GymEnvParams(EnvParams):
    """The ``env`` section of a gymnasium env type (``GymEnvType``)."""

    env_kwargs: Dict[str, Any] = param({})
    """Keyword arguments of ``gymnasium.make`` (any keys)."""
    action_mask_key: str = param(ACTION_MASK_KEY)
    """Where the env gives its legal-action mask (discrete actions): ``info[key]`` or a key of its dict
    observation; found at the first reset and moved to the observation's ``action_mask`` key
    (``data.action_masks``). The default, gymnasium's and PettingZoo's name, needs no configuration; "": masks
    off (an info mask is ignored; a dict observation's own ``action_mask`` key stays a key of it)."""
    action_mask_check: bool = param(False)
    """Raise, naming the env, the step and the legal actions, when an action the env's mask forbids is taken
    (training and evaluation alike): a run that ends took no illegal action. A debugging aid for an env of
    your own; the bench's masked tasks run with it."""


def env_settings(env_type: Any, env_cfg: Mapping[str, Any]) -> EnvParams:
    """The ``env`` section ``env_cfg`` typed by ``env_type``'s declaration (its ``Params``); an env type that
    declares none gets the keys every env has (its own reach it as the dict, through ``make(env_cfg)``)."""
    declared = getattr(env_type, "Params", None)
    if isinstance(declared, type) and issubclass(declared, EnvParams):
        return declared.of(env_cfg, "env")
    return EnvParams.pick(env_cfg)


def episode_limit(env_cfg: Mapping[str, Any]) -> Optional[int]:
    """The most steps an episode of ``env_cfg``'s env lasts: ``env.max_episode_steps``, a ``max_episode_steps``
    in ``env.env_kwargs``, else the time limit gymnasium registered for ``env.env_id`` (an id already registered:
    nothing is imported); None when none is known.

    Examples:
        >>> episode_limit({"env_id": "CartPole-v1"}), episode_limit({"env_id": "CartPole-v1", "max_episode_steps": 50})
        (500, 50)
    """
    for value in (env_cfg.get("max_episode_steps"), (env_cfg.get("env_kwargs") or {}).get("max_episode_steps")):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    env_id = env_cfg.get("env_id")
    spec = gym.registry.get(env_id.split(":")[-1]) if isinstance(env_id, str) else None  # "module:EnvId" too
    limit = getattr(spec, "max_episode_steps", None)
    return limit if isinstance(limit, int) and limit >= 1 else None


def check_env_section(cfg: Mapping[str, Any], processes: bool = True) -> None:
    """The compiled config's ``env`` section against what it would ask of the machine, at compile time: an
    evaluation that would not end in reasonable time (``env.n_evaluator_episode`` above ``MAX_EVAL_EPISODES``), and,
    where the env type steps gymnasium envs in worker processes (``processes``: ``env.manager.type`` 'async'
    or 'subprocess'), more collector envs than this machine can run as processes.

    Raises:
        engine.config.ConfigError: naming the key, the value, the estimate and the fix.
    """
    env = cfg.get("env")
    if not isinstance(env, Mapping):
        return
    settings = EnvParams.pick(env)  # the keys every env type has, typed (a wrong type is refused here)
    _check_evaluation(settings, episode_limit(env), lookup(cfg, "policy.eval.evaluator.eval_freq"))
    if processes:
        _check_worker_processes(settings)


def highest_return(env_cfg: Mapping[str, Any], best_step_reward: Optional[float] = None,
                   best_return: Optional[float] = None) -> Optional[float]:
    """The highest return one episode of ``env_cfg``'s env can reach, where its env type knows a bound: the
    type's ``best_return``, or its ``best_step_reward`` times the episode limit (``episode_limit``), the lower of
    the two; None when neither is known.

    Examples:
        >>> highest_return({"env_id": "CartPole-v1"}, best_step_reward=1.0)
        500.0
        >>> highest_return({"env_id": "CartPole-v1", "max_episode_steps": 200}, best_step_reward=1.0)
        200.0
    """
    bounds = [float(best_return)] if best_return is not None else []
    limit = episode_limit(env_cfg)
    if best_step_reward is not None and limit:
        bounds.append(float(best_step_reward) * limit)
    return min(bounds) if bounds else None


def unreachable_stop_value(env_cfg: Mapping[str, Any], highest: Optional[float]) -> Optional[str]:
    """What to tell the user when ``env.stop_value`` is above ``highest``, the highest return an episode can
    reach (``highest_return``): no evaluation would stop the run. A warning, not a refusal: a huge stop value
    is a common way to say "never" (``env.stop_value=none`` is baton's); None when it is reachable or unset."""
    stop = EnvParams.pick(env_cfg).stop_value
    if highest is None or not math.isfinite(stop) or stop <= highest:
        return None
    return (f"env.stop_value={stop:g} is above the highest return an episode of {env_cfg.get('env_id')} can reach, "
            f"{highest:g}: no evaluation will stop the run (env.stop_value=none says never; <= {highest:g} stops "
            f"when solved)")


def _check_evaluation(env: EnvParams, limit: Optional[int], eval_freq: Any) -> None:
    episodes, envs = env.n_evaluator_episode, env.evaluator_envs
    if episodes <= MAX_EVAL_EPISODES:
        return
    steps = f", up to {episodes * limit:,} env steps of episodes of up to {limit:,}" if limit else ""
    every = f", and one comes every {eval_freq} train iterations (policy.eval.evaluator.eval_freq)" \
        if isinstance(eval_freq, int) else ""
    raise ConfigError(f"env.n_evaluator_episode={episodes}: every evaluation would play {episodes:,} episodes "
                      f"({math.ceil(episodes / envs):,} on each of the {envs} evaluator envs{steps}){every}, "
                      f"before training goes on; the mean of {MAX_EVAL_EPISODES:,} episodes already has a standard "
                      f"error of 1% of the returns' spread. Give env.n_evaluator_episode <= {MAX_EVAL_EPISODES:,}; "
                      f"to evaluate a saved run on more episodes: baton eval RUN_DIR --episodes N")


def _check_worker_processes(env: EnvParams) -> None:
    manager, count = env.manager.type, env.collector_env_num
    if manager not in ("async", "subprocess"):
        return
    reasons, fits = [], []
    procs = process_limit()
    if procs is not None:
        fits.append(procs)
        if count > procs:
            reasons.append(f"more processes than this user may run ({procs:,}: the kernel's pid_max or "
                           f"RLIMIT_NPROC, ulimit -u)")
    files = open_file_limit()
    if files is not None:
        fits.append(files)
        if count > files:
            reasons.append(f"more than this process's {files:,} open files (ulimit -n): each worker keeps a pipe")
    memory = host_memory_bytes()
    if memory is not None:
        fits.append(memory // WORKER_BYTES)
        if count * WORKER_BYTES > memory:
            reasons.append(f"at least {gib(count * WORKER_BYTES)} of host memory ({WORKER_BYTES >> 20} MiB a worker "
                           f"at the least), more than this machine's {gib(memory)}")
    if reasons:
        raise ConfigError(f"env.collector_env_num={count} with env.manager.type={manager!r} starts one process per env: "
                          + "; ".join(reasons) + f". Give env.collector_env_num <= {min(fits):,} (a few per core "
                          f"is what pays), or env.manager.type='sync' (every env in this process)")


class UnknownEnvIdError(ValueError):
    """A gymnasium env id that is not registered."""


def registered_id(env_id: str, config_key: str = "env.env_id") -> str:
    """The id gymnasium registers for ``env_id``: ``env_id`` itself, or for gymnasium's ``"module:EnvId-v0"``
    (an env your own module registers) ``"EnvId-v0"`` once ``module`` is imported. Every process imports the
    module the same way when it makes the env (``gym.make`` takes the same syntax), DDP ranks and env workers
    included.

    Raises:
        UnknownEnvIdError: the module cannot be imported (naming it and the path to put it on).
    """
    if ":" not in env_id:
        return env_id
    module, _, name = env_id.partition(":")
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise UnknownEnvIdError(f"{config_key}={env_id!r}: cannot import the module {module!r} that registers "
                                f"{name!r} ({type(err).__name__}: {err}); put the directory holding it on "
                                f"PYTHONPATH, or install its package") from None
    return name


def check_env_id(env_id: str, config_key: str = "env.env_id") -> None:
    """Raise UnknownEnvIdError naming ``env_id`` and listing registered ids when gymnasium lacks it (a
    ``"module:EnvId"`` id: after importing the module, ``registered_id``)."""
    name = registered_id(env_id, config_key)
    if name in gym.registry:
        return
    ids = sorted(gym.registry.keys())
    close = difflib.get_close_matches(name, ids, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    where = (f" The module {env_id.partition(':')[0]!r} was imported but registers no {name!r}." if name != env_id
             else " An id from a package of its own (ale_py, box2d) appears once its package is installed and "
                  "imported; an env of your own module: 'my_module:MyEnv-v0'.")
    raise UnknownEnvIdError(f"{config_key}={env_id!r} is not a registered gymnasium env id.{hint}{where} "
                            f"Registered ids ({len(ids)}): {', '.join(ids)}.")


class GymEnvType:
    """An env ``type`` for ``create_config``: a gymnasium id plus the defaults of its dizoo configs.

    Args:
        env_id: gymnasium id, e.g. ``"CartPole-v1"``.
        stop_value: evaluation return at which training stops by default: the env's "solved" level
            (gymnasium's ``reward_threshold`` where its spec has one; the registering module names the source).
        requires: ``(module, extra)`` pairs imported before ``gym.make``; a missing module raises an
            ImportError that names the pip extra to install.
        best_step_reward, best_return: what bounds an episode's return, where known (CartPole: 1 a step;
            Pendulum: 0): a run told a ``stop_value`` above the bound says so at start (``highest_return``).
        defaults: further default config values.
    """

    #: the keys of its ``env`` section
    Params: Type[EnvParams] = GymEnvParams

    def __init__(self, env_id: str, stop_value: float, requires: Sequence[tuple] = (), *,
                 best_step_reward: Optional[float] = None, best_return: Optional[float] = None,
                 **defaults: Any) -> None:
        self.env_id = env_id
        self.requires = list(requires)
        self.best_step_reward, self.best_return = best_step_reward, best_return
        self.params = self.Params.of(dict(env_id=env_id, stop_value=float(stop_value), **defaults), "env")

    def default_config(self) -> Dict[str, Any]:
        """Its ``env`` section's defaults (``Params`` with this type's own values)."""
        return self.params.to_dict()

    def check_config(self, cfg: Mapping[str, Any]) -> None:
        """The compiled config's ``env`` section at compile time (``check_env_section``: its envs run in worker
        processes with ``env.manager.type`` 'async')."""
        check_env_section(cfg, processes=True)

    def highest_return(self, env_cfg: Mapping[str, Any]) -> Optional[float]:
        """The highest return an episode of ``env_cfg``'s env can reach, where known (``highest_return``)."""
        return highest_return(env_cfg, self.best_step_reward, self.best_return)

    def check_requires(self, env_id: str) -> None:
        """Import each required module; a missing one raises a MissingExtraError naming the extra that installs it."""
        for module, extra in self.requires:
            try:
                __import__(module)
            except ImportError as err:
                raise MissingExtraError.of_import(f"env {env_id!r} needs the package {module!r} of the {extra!r} "
                                                  f"extra: pip install \"baton-rl[{extra}]\" (in a clone: pip install "
                                                  f"-c constraints.txt -e \".[{extra}]\")", err) from err

    def make(self, env_cfg: Mapping[str, Any]) -> gym.Env:
        """One env for ``env_cfg``; the vector helpers call this once per sub-env."""
        settings = self.Params.of(env_cfg, "env")
        self.check_requires(settings.env_id)
        kwargs = dict(settings.env_kwargs)
        if settings.max_episode_steps:
            kwargs["max_episode_steps"] = settings.max_episode_steps
        return as_trainable(self.adapt(gym.make(settings.env_id, **kwargs)), settings.action_mask_key,
                            settings.action_mask_check)

    def adapt(self, env: gym.Env) -> gym.Env:
        """``env`` as the family trains on it, before masks are looked for: itself here; a family whose envs
        observe something baton cannot batch wraps it (``dizoo/minigrid``: the mission dropped)."""
        return env


class AnyGymEnvType(GymEnvType):
    """Env type ``gym``: any gymnasium id, named by ``env.env_id`` (no id of its own, no stop value): an id
    gymnasium knows, or ``"my_module:MyEnv-v0"`` for an env of the user's own module (``registered_id``), with
    no baton code in it. ``baton train --algo A --env ID`` builds its configs on it."""

    def __init__(self) -> None:
        super().__init__("", stop_value=math.inf)


#: the name of ``AnyGymEnvType`` in ``create_config.env.type`` (``commands.catalog.GYM_TYPE`` says the same)
GYM_TYPE = "gym"
ENV_REGISTRY.register(GYM_TYPE, AnyGymEnvType())


def _takes_manager(make_vector: Callable[..., Any]) -> bool:
    """Whether an env type's ``make_vector`` takes ``manager`` (by name or ``**kwargs``)."""
    try:
        parameters = inspect.signature(make_vector).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it what the docstring says
        return True
    return any(p.name == "manager" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def make_vector_env(env_type: Any, env_cfg: Mapping[str, Any], num_envs: int, seed: int,
                    manager: Optional[str] = None, training: bool = True,
                    groups: Optional[int] = None) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_type``'s env, reset once with seeds ``seed, seed + 1, ...``.

    Args:
        manager: ``"sync"`` (``SyncVectorEnv``, for cheap envs) or ``"async"`` (``AsyncVectorEnv``: one
            process per env, for expensive ones); defaults to ``env_cfg.manager.type``.
        training: False for evaluation envs. Env types with training-only preprocessing (Atari's episodic
            life and reward clipping) drop it then.
        groups: build ``data.env_groups.EnvGroups`` of this many vector envs of consecutive envs (env
            ``i`` still seeded ``seed + i``), which a collector steps overlapped with its policy's forward;
            default 2 for training envs when ``env_cfg.manager.overlap`` is set, else 1 (one vector env).

    An env type with a ``make_vector(env_cfg, num_envs, seed, training, manager)`` method builds its own vector
    env (e.g. ale_py's threaded ``AtariVectorEnv``, mpe's ``ParallelEnvBatch``), given the manager type it may
    follow or not; it must use SAME_STEP autoreset.
    """
    settings = env_settings(env_type, env_cfg)
    if groups is None:
        groups = 2 if training and settings.manager.overlap else 1
    if groups > 1 and getattr(env_type, "batched", False):
        raise ConfigError(f"env.manager.overlap does not apply to env type {settings.type or env_type!r}: its "
                         f"envs step as one batched tensor operation (data.torch_env), with nothing to overlap; "
                         f"set env.manager.overlap=False")
    if groups > 1:
        return _make_env_groups(env_type, env_cfg, num_envs, seed, manager, training, groups)
    kind = manager or settings.manager.type
    if hasattr(env_type, "make_vector"):
        given = {"manager": kind} if _takes_manager(env_type.make_vector) else {}  # a plugin's from before it: none
        return env_type.make_vector(env_cfg, num_envs, seed, training, **given)
    if settings.manager.workers is not None:
        raise ConfigError(f"env.manager.workers={settings.manager.workers} applies to env types that batch several "
                          f"envs in each worker process (mpe); env type {settings.type or env_type!r} with "
                          f"env.manager.type='async' runs one process per env: leave env.manager.workers unset")
    check_env_id(settings.env_id)
    env_fns = [lambda: env_type.make(env_cfg) for _ in range(num_envs)]
    if kind in ("sync", "base"):
        venv = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    elif kind in ("async", "subprocess"):
        venv = gym.vector.AsyncVectorEnv([_WorkerSurvivesPreemption(fn) for fn in env_fns],
                                         autoreset_mode=AutoresetMode.SAME_STEP,
                                         shared_memory=settings.manager.shared_memory,
                                         context=settings.manager.context)
    else:
        raise ValueError(f"env.manager.type must be 'sync' or 'async', got {kind!r}")
    venv.reset(seed=[seed + i for i in range(num_envs)])
    venv.action_space.seed(seed)
    return venv


def _make_env_groups(env_type: Any, env_cfg: Mapping[str, Any], num_envs: int, seed: int, manager: Optional[str],
                     training: bool, groups: int) -> Any:
    from data.env_groups import EnvGroups, group_sizes

    if num_envs < 2:
        logger.warning("env.manager.overlap needs at least 2 envs to step one group while the policy acts on "
                       "another; %d env steps serially", num_envs)
        return make_vector_env(env_type, env_cfg, num_envs, seed, manager, training, groups=1)
    groups = min(groups, num_envs)
    kind = manager or env_settings(env_type, env_cfg).manager.type
    if not hasattr(env_type, "make_vector") and kind in ("sync", "base"):
        logger.warning("env.manager.overlap with env.manager.type=%r steps each env group on a worker thread, "
                       "which overlaps with the policy only where the env's step releases the GIL; for envs "
                       "written in Python set env.manager.type='async'", kind)
    envs, offset = [], 0
    for size in group_sizes(num_envs, groups):
        envs.append(make_vector_env(env_type, env_cfg, size, seed + offset, manager, training, groups=1))
        offset += size
    venv = EnvGroups(envs)
    venv.action_space.seed(seed)
    return venv


class _WorkerSurvivesPreemption:
    """An env factory that, called in an ``AsyncVectorEnv`` worker, first makes the worker outlast a
    preemption signal: a cluster signals every process of the job (Slurm's cgroup, a process-group kill),
    and a worker that died of it broke the run's last iteration (a broken pipe) before the run could write
    ``latest``. The worker records the signal and is closed with its envs as the run ends; one still alive a
    minute later (its parent stuck or gone) exits then (``engine.preemption``)."""

    GRACE_S = 60.0

    def __init__(self, make: Any) -> None:
        self._make = make

    def __call__(self) -> gym.Env:
        PreemptionGuard(DEFAULT_SIGNALS, self.GRACE_S, describe="env worker").install()
        return self._make()
