"""Env type ``atari``: ale-py's threaded ``AtariVectorEnv`` with the standard DQN preprocessing.

Training envs: up to 30 no-op actions at reset, frame skip 4 with max-pooling over the last two frames,
84x84 grayscale, a stack of ``env.frame_stack`` frames (zeros before the game's first frame), episodic
life (a lost life ends the training episode, the game goes on) and rewards clipped to their sign. Evaluation envs play full
games with raw rewards. The ROMs ship with ale-py; install with ``pip install -c constraints.txt -e
".[atari]"``.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping

import numpy as np

from data.envs import GymEnvParams, check_env_section
from engine.params import param
from engine.registry import ENV_REGISTRY, MissingExtraError

__all__ = ["AtariParams", "AtariEnvType", "game_name", "UnknownGameError"]


class UnknownGameError(ValueError):
    """An Atari game that ale-py does not ship."""


def _import_ale() -> Any:
    try:
        import ale_py
        import ale_py.roms
        from ale_py.vector_env import AtariVectorEnv  # noqa: F401
    except ImportError as err:
        raise MissingExtraError.of_import("Atari envs need ale-py (its ROMs ship with it): pip install -c "
                                          "constraints.txt -e \".[atari]\"", err) from err
    return ale_py


def game_name(env_id: str) -> str:
    """ale-py's game name for a gym-style id: ``PongNoFrameskip-v4``, ``ALE/Pong-v5`` and ``pong`` all
    give ``pong``; ``SpaceInvaders`` gives ``space_invaders``.

    Raises:
        UnknownGameError: naming the id, the closest games and how to list them all.
    """
    ale_py = _import_ale()
    name = env_id.split("/")[-1]
    name = re.sub(r"(NoFrameskip|Deterministic)?-v\d+$", "", name)
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    games = ale_py.roms.get_all_rom_ids()
    if name not in games:
        close = difflib.get_close_matches(name, games, n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownGameError(f"env.env_id={env_id!r} (game {name!r}) is not an Atari game that ale-py "
                               f"ships.{hint} List them with: python -c 'import ale_py.roms; "
                               f"print(ale_py.roms.get_all_rom_ids())'")
    return name


@dataclass
class AtariParams(GymEnvParams):
    """The ``env`` section of the ``atari`` env type."""

    env_id: str = param("PongNoFrameskip-v4")
    """A ``...NoFrameskip-v4`` id of a game ale-py ships (``game_name``)."""
    evaluator_env_num: int = param(8, rule="at_least_one")
    """Envs the evaluator steps together."""
    n_evaluator_episode: int = param(8, rule="at_least_one")
    """Episodes per evaluation; their mean return is the evaluation's. At most 10,000 (``MAX_EVAL_EPISODES``)."""
    stop_value: float = param(20.0)
    """Training stops when an evaluation's mean return reaches it (Pong: 21 is a perfect game)."""
    frame_stack: int = param(4, rule="at_least_one")
    """The last N frames make one observation."""
    num_threads: int = param(0, rule="not_negative")
    """The backend's threads stepping the collector's envs; 0: its own choice."""
    backend: str = param("ale", choices=("ale", "envpool"))
    """What plays the games: 'ale', ale-py's ``AtariVectorEnv``; 'envpool', EnvPool's (the ``envpool`` extra), with
    the same preprocessing, seeding and episode ends (``dizoo/atari/envpool_backend.py``). Which is faster depends
    on the machine (BENCHMARKS.md, "Atari backends"); ``baton eval --video`` films with 'ale'."""


class AtariEnvType:
    """The ``atari`` env type (``create_config.env.type='atari'``)."""

    #: the keys of its ``env`` section
    Params = AtariParams

    def default_config(self) -> Dict[str, Any]:
        """Its ``env`` section's defaults."""
        return AtariParams.defaults()

    def check_config(self, cfg: Mapping[str, Any]) -> None:
        """The compiled config's ``env`` section at compile time (``data.envs.check_env_section``; ale-py steps
        its envs on threads, no worker processes)."""
        check_env_section(cfg, processes=False)

    def make_vector(self, env_cfg: Mapping[str, Any], num_envs: int, seed: int, training: bool,
                    manager: str = "sync") -> Any:
        settings = AtariParams.of(env_cfg, "env")
        if settings.backend == "envpool":
            from .envpool_backend import EnvPoolAtari, envpool_task

            return EnvPoolAtari(envpool_task(game_name(settings.env_id)), num_envs, seed, training,
                                settings.frame_stack, settings.num_threads, settings.max_episode_steps,
                                dict(settings.env_kwargs))
        _import_ale()
        from ale_py.vector_env import AtariVectorEnv
        from gymnasium.vector import AutoresetMode

        class _SeedListAtariVectorEnv(AtariVectorEnv):
            """Accepts a list of seeds (what the collectors pass) as well as an int or array, and gives a lost
            life's real next observation in ``info["final_obs"]``.

            A lost life ends the training episode (``terminated``) but resets nothing, and ale-py leaves that
            env's row of ``final_obs`` unwritten (it held arbitrary bytes, differing from run to run). The
            observation the game goes on from is the real next one: it is copied there. A reset is told
            apart by its episode frame counter starting again."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._episode_frames = np.zeros(self.num_envs, dtype=np.int64)

            def reset(self, *, seed: Any = None, options: Any = None):
                if isinstance(seed, (list, tuple)):
                    seed = np.asarray(seed, dtype=np.int64)
                obs, info = super().reset(seed=seed, options=options)
                self._episode_frames[info["env_id"]] = info["episode_frame_number"]
                return obs, info

            def step(self, actions: np.ndarray):
                self.send(actions)
                return self.recv()

            def recv(self):
                obs, reward, terminated, truncated, info = super().recv()
                ids, frames = info["env_id"], info["episode_frame_number"]
                went_on = (terminated | truncated) & (frames > self._episode_frames[ids])
                if went_on.any():
                    final = info.get("final_obs")
                    final = np.zeros_like(obs) if final is None else np.array(final, copy=True)
                    final[went_on] = obs[went_on]
                    info["final_obs"] = final
                self._episode_frames[ids] = frames
                return obs, reward, terminated, truncated, info

        return _SeedListAtariVectorEnv(
            game=game_name(settings.env_id), num_envs=num_envs, num_threads=settings.num_threads,
            stack_num=settings.frame_stack, autoreset_mode=AutoresetMode.SAME_STEP,
            # Nature DQN's episodic life: a lost life ends the training episode (terminated, no bootstrap)
            # but the game goes on; ale-py's own `episodic_life` would restart the whole game instead
            episodic_life=False, life_loss_info=training, reward_clipping=training, noop_max=30, frameskip=4,
            maxpool=True,
            grayscale=True, img_height=84, img_width=84, **_ale_kwargs(settings))


    def make_render_twin(self, env_cfg: Mapping[str, Any]) -> Any:
        """One env of the same game and dynamics as an evaluation env, whose observations are the full RGB
        screen ``[1, 1, 210, 160, 3]`` (the newest frame of each frame skip, not max-pooled): stepped with the
        same seed and actions as evaluation env 0, it shows what that env plays (``baton eval --video``;
        ale-py's vector env does not render). Its ``episode_frame_number`` matches env 0's at every step."""
        _import_ale()
        from ale_py.vector_env import AtariVectorEnv
        from gymnasium.vector import AutoresetMode

        settings = AtariParams.of(env_cfg, "env")
        return AtariVectorEnv(game=game_name(settings.env_id), num_envs=1, num_threads=1, stack_num=1,
                              autoreset_mode=AutoresetMode.SAME_STEP, episodic_life=False, life_loss_info=False,
                              reward_clipping=False, noop_max=30, frameskip=4, maxpool=False, grayscale=False,
                              img_height=210, img_width=160, **_ale_kwargs(settings))

    def for_video(self, env_cfg: Mapping[str, Any]) -> Dict[str, Any]:
        """The ``env`` section ``baton eval --video`` plays with: ale-py's backend, whose emulator the render twin
        runs (with 'envpool' the twin's game would not be env 0's), the same preprocessing and seeds."""
        return dict(env_cfg, backend="ale")

    def render_fps(self, env_cfg: Mapping[str, Any]) -> float:
        """Video frames per env step at the game's speed: 60 Hz over the frame skip of 4."""
        return 15.0


def _ale_kwargs(settings: AtariParams) -> Dict[str, Any]:
    """``env.env_kwargs`` for ale-py's vector env, with ``max_episode_steps`` as its frame limit (4 per step)."""
    kwargs = dict(settings.env_kwargs)
    if settings.max_episode_steps:
        kwargs["max_num_frames_per_episode"] = int(settings.max_episode_steps) * 4
    return kwargs


ATARI = ENV_REGISTRY.register("atari", AtariEnvType())
