"""PettingZoo envs, several agents per env: env types ``pettingzoo`` (any PettingZoo env, by its module) and
``mpe`` (mpe2's MPE tasks by their names; the ``pettingzoo`` extra installs mpe2).

``pettingzoo``: ``env.env_id`` is the module that makes the env, ``'mpe2.simple_reference_v3'``,
``'pettingzoo.sisl.multiwalker_v9'`` or one of your own (``'my_package.my_env_v0'``), and ``env.env_kwargs`` its
arguments (what trains on it is the algorithm's to say: baton's multi-agent algorithms take a flat observation per
agent and Discrete actions, MAPPO and IPPO a flat Box of actions too, so QMIX, VDN and IQL refuse multiwalker's Box
actions by name). The module's ``parallel_env`` is used
where it has one. A turn-based env (PettingZoo's AEC API: a module with ``env`` alone) goes through PettingZoo's
``aec_to_parallel`` where the env says that is safe (its ``metadata['is_parallelizable']``: every agent acts once
per cycle and the env updates at the cycle's end); one that does not (chess, tic-tac-toe: agents take turns on one
board) is refused by name, as the conversion would be wrong for it. ``env.max_episode_steps`` sets PettingZoo's
``max_cycles`` argument.

``mpe``: ``env.env_id`` names an mpe2 module (``simple_spread_v3`` by default, the MAPPO paper's cooperative task)
and ``env.env_kwargs`` its ``parallel_env`` arguments, over the task's defaults (Simple Spread: ``N=3,
local_ratio=0.5, max_cycles=25, continuous_actions=False``, the settings of the MAPPO paper and of BenchMARL's
comparisons; ``TASK_KWARGS``).

The collector's and the evaluator's envs are one ``data.parallel_envs.ParallelEnvBatch`` each: the agents of an
env on one axis, the env's global ``state()`` beside them where it has one; ``env.manager.type='async'`` splits the
collector's over worker processes (``data.parallel_env_workers``), which pays off from a few dozen envs.

Units: an evaluation's return is per agent (BenchMARL's and EPyMARL's unit); in Simple Spread with these
settings a random policy scores about -27.6 per agent and a scripted one (each agent to its own landmark) -10.1
(measured over 200 episodes; the research notes of issue 32).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Mapping

from data.agent_padding import PaddedAgents
from data.envs import GymEnvParams, GymEnvType
from data.parallel_env_workers import ParallelEnvWorkers
from data.parallel_envs import MASK_KEY, AgentSpaceError, EnvModuleError, ParallelEnvBatch
from engine.devices import usable_cores
from engine.config import ConfigError
from engine.params import param
from engine.registry import ENV_REGISTRY

__all__ = ["PettingZooEnvType", "MpeEnvType", "PettingZooParams", "PETTINGZOO", "MPE", "as_parallel"]

#: each task's ``parallel_env`` arguments under ``env.env_kwargs`` given none: Simple Spread as in the MAPPO paper
#: (the others: mpe2's own, 25 cycles and discrete actions)
TASK_KWARGS = {"simple_spread_v3": dict(N=3, local_ratio=0.5, max_cycles=25, continuous_actions=False)}


def as_parallel(env: Any, name: str) -> Any:
    """``env`` as a PettingZoo parallel env: as it is, or a turn-based (AEC) one through PettingZoo's
    ``aec_to_parallel`` where its metadata says that is safe; else ``AgentSpaceError`` naming the env and why."""
    if not hasattr(env, "agent_iter"):  # not an AEC env: the parallel API (reset and step take every agent)
        return env
    if not env.metadata.get("is_parallelizable", False):
        env.close()
        raise AgentSpaceError(
            f"env {name} is turn-based (PettingZoo's AEC API) and its metadata does not say is_parallelizable, so it "
            f"cannot run with every agent acting each step (PettingZoo's aec_to_parallel refuses it: the agents take "
            f"turns on a state each move changes). baton batches parallel envs; give the env a parallel_env if its "
            f"agents can act at once")
    from pettingzoo.utils.conversions import aec_to_parallel

    return aec_to_parallel(env)


@dataclass
class PettingZooParams(GymEnvParams):
    """The ``env`` section of the ``pettingzoo`` and ``mpe`` env types."""

    pad_agents: bool = param(False)
    """Agents whose spaces differ on one axis: each agent's observation zero-padded to the largest and its actions
    masked to its own (``data.agent_padding``, Terry et al., 2020), so that one network with agent ids serves
    them all (mpe2's Speaker-Listener). Off: such agents are refused by name."""


class PettingZooEnvType(GymEnvType):
    """Any PettingZoo env by the module that makes it (``env.env_id``), as batched parallel envs (module
    docstring)."""

    Params = PettingZooParams

    def module_name(self, task: str) -> str:
        """The module that makes ``task``'s env."""
        return task

    def _names_a_module(self, env_id: str) -> bool:
        """Whether ``env_id`` has the shape of a module path (no gymnasium id, nothing to run): dotted, or one name
        of a module outside the standard library that exists (a word given to ``--env`` imports nothing else:
        Python's ``this`` or ``antigravity`` would run as they are imported)."""
        if not all(part.isidentifier() for part in env_id.split(".")):
            return False
        if "." in env_id:
            return True
        if env_id in sys.stdlib_module_names:
            return False
        if env_id in sys.modules:
            return True
        try:
            return importlib.util.find_spec(env_id) is not None
        except (ImportError, ValueError):
            return False

    def has_task(self, env_id: str) -> bool:
        """Whether ``env_id`` names a module that makes a PettingZoo env (``baton train --algo mappo --env
        mpe2.simple_reference_v3``); False where no such module exists."""
        if not self._names_a_module(env_id):
            return False
        try:
            module = importlib.import_module(self.module_name(env_id))
        except ModuleNotFoundError as err:
            # no such module: not an id of this type; a module that exists but lacks a package it imports is
            # one (make names what is missing)
            return not self._is_missing(self.module_name(env_id), err)
        except Exception:  # noqa: BLE001 - the module exists and fails as it imports: make says how
            return True
        return callable(getattr(module, "parallel_env", None)) or callable(getattr(module, "env", None))

    @staticmethod
    def _is_missing(name: str, err: ModuleNotFoundError) -> bool:
        """Whether ``err`` says module ``name`` itself (or a package above it) does not exist, not a package it
        imports."""
        return err.name is not None and (name == err.name or name.startswith(err.name + "."))

    def _module(self, task: str) -> ModuleType:
        name = self.module_name(task)
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            if self._is_missing(name, err):
                raise EnvModuleError(self._not_found(task, err)) from err
            raise EnvModuleError(f"env.env_id={task!r}: module {name} imports {err.name!r}, which is not installed: "
                              f"pip install the package that provides it (PettingZoo's families have extras: "
                              f"pip install 'pettingzoo[butterfly]', 'pettingzoo[classic]', ...)") from err
        except Exception as err:
            raise EnvModuleError(f"env.env_id={task!r}: importing module {name} failed: "
                              f"{type(err).__name__}: {err}") from err

    def _not_found(self, task: str, err: Exception) -> str:
        return (f"env.env_id={task!r}: no module {self.module_name(task)!r} ({err}); name the module that makes the "
                f"env, e.g. 'mpe2.simple_reference_v3'")

    def _kwargs(self, task: str, settings: Any, factory: Any) -> dict:
        """``factory``'s arguments: ``env.env_kwargs``, and ``max_cycles`` from ``env.max_episode_steps``."""
        kwargs = dict(settings.env_kwargs)
        if settings.max_episode_steps:
            parameters = inspect.signature(factory).parameters
            if "max_cycles" not in parameters and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
                raise ConfigError(self._no_max_cycles(task))
            kwargs["max_cycles"] = settings.max_episode_steps
        return kwargs

    @staticmethod
    def _given(settings: Any) -> str:
        """What the user gave the env, to begin an error about making it: ``env.env_kwargs`` where set."""
        return f"env.env_kwargs={dict(settings.env_kwargs)}: " if settings.env_kwargs else ""

    @staticmethod
    def _arguments(module: Any, factory: Any) -> str:
        """The arguments the env's class takes (PettingZoo's ``raw_env``, which ``parallel_env`` passes them to)."""
        target = getattr(module, "raw_env", None) or factory
        try:
            names = [name for name, p in inspect.signature(target).parameters.items()
                     if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        except (TypeError, ValueError):
            return "arguments its module documents"
        return ", ".join(names) or "no arguments"

    @staticmethod
    def _no_max_cycles(task: str) -> str:
        return (f"env.max_episode_steps: {task} takes no max_cycles argument (PettingZoo's episode length); leave "
                f"env.max_episode_steps unset for this env")

    def make(self, env_cfg: Mapping[str, Any]) -> Any:
        """One parallel env (PettingZoo's API, not gymnasium's: ``make_vector`` batches them)."""
        settings = self.Params.of(env_cfg, "env")
        task = settings.env_id or self.env_id  # a config compiled without one: the type's own
        if settings.action_mask_key != MASK_KEY or settings.action_mask_check:
            raise ConfigError(f"env.action_mask_key={settings.action_mask_key!r}, env.action_mask_check="
                              f"{settings.action_mask_check}: these choose and check a single-agent env's mask; the "
                              f"agents of a PettingZoo env give theirs in their observation ({{'observation', "
                              f"{MASK_KEY!r}}}, PettingZoo's convention), which is always applied: leave both at "
                              f"their defaults")
        self.check_requires(task)
        module = self._module(task)
        factory = getattr(module, "parallel_env", None) or getattr(module, "env", None)
        if not callable(factory):
            raise EnvModuleError(f"env.env_id={task!r}: module {module.__name__} has no parallel_env or env to make a "
                             f"PettingZoo env with")
        kwargs = self._kwargs(task, settings, factory)
        try:
            env = factory(**kwargs)
        except TypeError as err:
            if "max_cycles" in kwargs and "max_cycles" in str(err):
                raise ConfigError(self._no_max_cycles(task)) from err
            raise ConfigError(f"{self._given(settings)}{task} refused its arguments ({err}); it takes "
                              f"{self._arguments(module, factory)}") from err
        except Exception as err:  # noqa: BLE001 - the env's own check of a value (mpe2's N=0): named, one line
            raise ConfigError(f"{self._given(settings)}making {task} failed with {type(err).__name__}: {err}; it "
                              f"takes {self._arguments(module, factory)}") from err
        env = as_parallel(env, task)
        return PaddedAgents(env) if settings.pad_agents else env

    def make_vector(self, env_cfg: Mapping[str, Any], num_envs: int, seed: int, training: bool = True,
                    manager: str = "sync") -> Any:
        """``num_envs`` envs as one ``ParallelEnvBatch`` in this process (``env.manager.type='sync'``), or split
        over worker processes (``'async'``: ``env.manager.workers`` of them, default one per usable core)."""
        make = functools.partial(self.make, env_cfg)
        if manager in ("async", "subprocess"):
            settings = self.Params.of(env_cfg, "env").manager
            workers = settings.workers or usable_cores()
            envs = ParallelEnvWorkers([make] * num_envs, workers, context=settings.context)
        else:
            envs = ParallelEnvBatch([make] * num_envs)
        envs.reset(seed=seed)
        return envs

    def make_render_twin(self, env_cfg: Mapping[str, Any]) -> "RenderTwin":
        """One env of the same task whose observations are its RGB frames, stepped in lockstep with evaluation
        env 0 (same seed, same actions; the env must be deterministic under both, as mpe2's are): ``baton eval
        --video``."""
        settings = self.Params.of(env_cfg, "env")
        env = self.make(dict(env_cfg, env_kwargs=dict(settings.env_kwargs, render_mode="rgb_array")))
        modes = list(env.metadata.get("render_modes") or [])
        if "rgb_array" not in modes:
            env.close()
            raise ValueError(f"env {settings.env_id or self.env_id} renders no RGB frames (its render modes: "
                             f"{modes or 'none'}): --video needs rgb_array rendering; evaluate it without --video")
        return RenderTwin(env)

    def render_fps(self, env_cfg: Mapping[str, Any]) -> float:
        """Video frames per env step: the env's own rendering rate (``metadata['render_fps']`` of the module's
        env class where it has one, as PettingZoo's and mpe2's do; else of an env made for it)."""
        settings = self.Params.of(env_cfg, "env")
        module = self._module(settings.env_id or self.env_id)
        metadata = getattr(getattr(module, "raw_env", None), "metadata", None)
        if not isinstance(metadata, Mapping):
            env = self.make(env_cfg)
            metadata = dict(env.metadata)
            env.close()
        return float(metadata.get("render_fps") or 30)


class MpeEnvType(PettingZooEnvType):
    """An mpe2 task (``env.env_id``: its module's name, ``simple_spread_v3``) as batched parallel envs."""

    def module_name(self, task: str) -> str:
        return f"mpe2.{task}"

    def _names_a_module(self, env_id: str) -> bool:
        """mpe2's task names: ``simple_spread_v3`` (``baton train --algo mappo --env simple_spread_v3``)."""
        return env_id.startswith("simple") and env_id.isidentifier()

    def _not_found(self, task: str, err: Exception) -> str:
        return (f"env.env_id={task!r} is not an mpe2 task (e.g. simple_spread_v3, simple_reference_v3, "
                f"simple_speaker_listener_v4)")

    def _kwargs(self, task: str, settings: Any, factory: Any) -> dict:
        """The task's defaults (``TASK_KWARGS``) under ``env.env_kwargs``."""
        return {**TASK_KWARGS.get(task, {}), **super()._kwargs(task, settings, factory)}


class RenderTwin:
    """A one-env vector env of a PettingZoo env's frames ``[1, H, W, 3]`` (``make_render_twin``): a
    one-row ``ParallelEnvBatch`` (the same actions, rewards and ends as env 0 of the run's), its episode's last
    frame in ``info["final_obs"]``."""

    def __init__(self, env: Any) -> None:
        self.batch = ParallelEnvBatch([lambda: env], render_final=True)

    def _frame(self) -> Any:
        return self.batch.envs[0].render()[None]

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple:
        self.batch.reset(seed=None if seed is None else [int(seed[0])], options=options)
        return self._frame(), {}

    def step(self, actions: Any) -> tuple:
        _, reward, terminated, truncated, info = self.batch.step(actions)
        twin_info = {"final_obs": info["final_frame"][0][None]} if "final_frame" in info else {}
        return self._frame(), reward, terminated, truncated, twin_info

    def close(self) -> None:
        self.batch.close()


PETTINGZOO = ENV_REGISTRY.register("pettingzoo", PettingZooEnvType("mpe2.simple_spread_v3",
                                                                  stop_value=float("inf"),
                                                                  requires=[("pettingzoo", "pettingzoo")]))
MPE = ENV_REGISTRY.register("mpe", MpeEnvType("simple_spread_v3", stop_value=float("inf"),
                                              requires=[("mpe2", "pettingzoo")]))
