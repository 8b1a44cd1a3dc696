"""PettingZoo's MPE tasks (the ``pettingzoo`` extra: ``mpe2``), several agents per env: env type ``mpe``.

``env.env_id`` names an mpe2 module (``simple_spread_v3`` by default, the MAPPO paper's cooperative task) and
``env.env_kwargs`` its ``parallel_env`` arguments, over the task's defaults (Simple Spread: ``N=3,
local_ratio=0.5, max_cycles=25, continuous_actions=False``, the settings of the MAPPO paper and of BenchMARL's
comparisons; ``TASK_KWARGS``). The collector's and
the evaluator's envs are one ``data.parallel_envs.ParallelEnvBatch`` each: the agents of an env on one axis,
mpe2's global ``state()`` beside them; ``env.manager.type='async'`` splits the collector's over worker processes
(``data.parallel_env_workers``), which pays off from a few dozen envs.

Units: an evaluation's return is per agent (BenchMARL's and EPyMARL's unit); in Simple Spread with these
settings a random policy scores about -27.6 per agent and a scripted one (each agent to its own landmark) -10.1
(measured over 200 episodes; the research notes of issue 32).
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Mapping

from data.envs import GymEnvType
from data.parallel_env_workers import ParallelEnvWorkers
from data.parallel_envs import ParallelEnvBatch
from engine.devices import usable_cores
from engine.registry import ENV_REGISTRY

__all__ = ["MpeEnvType", "MPE"]

#: each task's ``parallel_env`` arguments under ``env.env_kwargs`` given none: Simple Spread as in the MAPPO paper
#: (the others: mpe2's own, 25 cycles and discrete actions)
TASK_KWARGS = {"simple_spread_v3": dict(N=3, local_ratio=0.5, max_cycles=25, continuous_actions=False)}


class MpeEnvType(GymEnvType):
    """An mpe2 task (``env.env_id``: its module's name) as batched parallel envs."""

    def has_task(self, env_id: str) -> bool:
        """Whether ``env_id`` names an mpe2 task (``baton train --algo mappo --env simple_spread_v3``); False
        without mpe2."""
        if not env_id.startswith("simple") or not all(part.isidentifier() for part in env_id.split(".")):
            return False
        try:
            module = importlib.import_module(f"mpe2.{env_id}")
        except ImportError:
            return False
        return callable(getattr(module, "parallel_env", None))

    def make(self, env_cfg: Mapping[str, Any]) -> Any:
        """One parallel env (PettingZoo's API, not gymnasium's: ``make_vector`` batches them)."""
        settings = self.Params.of(env_cfg, "env")
        task = settings.env_id or self.env_id  # a config compiled without one: the type's own
        self.check_requires(task)
        try:
            module = importlib.import_module(f"mpe2.{task}")
        except ModuleNotFoundError as err:
            raise ValueError(f"env.env_id={task!r} is not an mpe2 task (e.g. simple_spread_v3, "
                             f"simple_reference_v3, simple_speaker_listener_v4)") from err
        kwargs = {**TASK_KWARGS.get(task, {}), **settings.env_kwargs}
        if settings.max_episode_steps:
            kwargs["max_cycles"] = settings.max_episode_steps
        return module.parallel_env(**kwargs)

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


    def make_render_twin(self, env_cfg: Mapping[str, Any]) -> "MpeRenderTwin":
        """One env of the same task whose observations are its RGB frames, stepped in lockstep with evaluation
        env 0 (same seed, same actions; mpe2 is deterministic under both): ``baton eval --video``."""
        settings = self.Params.of(env_cfg, "env")
        return MpeRenderTwin(self.make(dict(env_cfg, env_kwargs=dict(settings.env_kwargs, render_mode="rgb_array"))))

    def render_fps(self, env_cfg: Mapping[str, Any]) -> float:
        """Video frames per env step: mpe2's own rendering rate."""
        return 10.0


class MpeRenderTwin:
    """A one-env vector env of an mpe2 task's frames ``[1, H, W, 3]`` (``MpeEnvType.make_render_twin``): a
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


MPE = ENV_REGISTRY.register("mpe", MpeEnvType("simple_spread_v3", stop_value=float("inf"),
                                              requires=[("mpe2", "pettingzoo")]))
