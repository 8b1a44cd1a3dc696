"""EnvPool's Atari as the ``atari`` env type's backend (``env.backend='envpool'``, the ``envpool`` extra).

EnvPool (Weng et al., 2022) steps a batch of Atari games on its own C++ threads, as ale-py's ``AtariVectorEnv`` (which
was modelled on it) does; which of the two is faster depends on the machine (BENCHMARKS.md, "Atari backends").
This wrapper makes EnvPool's vector env behave as the ale-py backend's does for baton's env loop:

- the same preprocessing: up to 30 no-op actions at reset, frame skip 4 with max-pooling over the last two
  frames, 84x84 grayscale, a stack of ``env.frame_stack`` frames, FIRE at reset where the game needs it; in
  training episodic life (a lost life ends the training episode, the game goes on) and rewards clipped to
  their sign; evaluation plays full games with raw rewards;
- the same seeding: env ``i`` of a vector env seeded ``s`` plays with seed ``s + i`` (``data.parallel_envs.env_seeds``);
  EnvPool takes its seeds when it is built, so a seeded reset builds it again (the same seeds, the same games);
- gymnasium's SAME_STEP autoreset: EnvPool resets an env on the step after its episode ended (NEXT_STEP); here a
  game that ended is reset in the same step, its real last observation in ``info["final_obs"]``, and a lost life's
  real next observation (the game goes on from it) there too.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from engine.registry import MissingExtraError

__all__ = ["EnvPoolAtari", "envpool_task", "EnvPoolMissingError"]


class EnvPoolMissingError(MissingExtraError):
    """``env.backend='envpool'`` without EnvPool installed."""


def _import_envpool() -> Any:
    try:
        import envpool
    except ImportError as err:
        raise EnvPoolMissingError.of_import("env.backend='envpool' needs EnvPool: pip install -c constraints.txt -e "
                                            "\".[envpool]\" (or env.backend='ale', ale-py's vector env)", err) from err
    return envpool


def envpool_task(game: str) -> str:
    """EnvPool's id of ale-py's game name: ``pong`` -> ``Pong-v5``, ``space_invaders`` -> ``SpaceInvaders-v5``.

    Raises:
        ValueError: a game EnvPool does not have, naming the closest it has.
    """
    envpool = _import_envpool()
    task = "".join(part.capitalize() for part in game.split("_")) + "-v5"
    known = [name for name in envpool.list_all_envs() if name.endswith("-v5")]
    if task not in known:
        import difflib

        close = difflib.get_close_matches(task, known, n=3, cutoff=0.6)
        raise ValueError(f"env.backend='envpool': EnvPool has no Atari game {task!r} (ale-py's {game!r})"
                         f"{'; did you mean ' + ', '.join(close) + '?' if close else ''}; set env.backend='ale' "
                         f"to play it with ale-py")
    return task


def _first_seed(seed: Any, num_envs: int) -> Optional[int]:
    """The base seed of ``seed`` (an int, or one per env that must be ``s, s + 1, ...``); None: keep the seeds."""
    if seed is None:
        return None
    seeds = np.atleast_1d(np.asarray(seed, dtype=np.int64))
    if seeds.size == 1:
        return int(seeds[0])
    if seeds.size != num_envs or not np.array_equal(seeds, seeds[0] + np.arange(num_envs)):
        raise ValueError(f"env.backend='envpool' seeds env i with seed + i; got the seeds {seeds.tolist()}")
    return int(seeds[0])


class EnvPoolAtari(gym.vector.VectorEnv):
    """``num_envs`` Atari games of EnvPool, stepped in SAME_STEP autoreset mode (module docstring).

    Examples:
        >>> envs = EnvPoolAtari("Pong-v5", num_envs=2, seed=0, training=True)  # doctest: +SKIP
        >>> envs.reset(seed=[0, 1])[0].shape  # doctest: +SKIP
        (2, 4, 84, 84)
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, task: str, num_envs: int, seed: int, training: bool, frame_stack: int = 4,
                 num_threads: int = 0, max_episode_steps: Optional[int] = None,
                 env_kwargs: Optional[Dict[str, Any]] = None) -> None:
        self._envpool = _import_envpool()
        self._task, self.num_envs, self._training = task, int(num_envs), bool(training)
        # episodic life is this wrapper's (a lost life: terminated, the game goes on with the agent's actions);
        # EnvPool's own would restart the game's no-ops and FIRE on the next step, the agent's action lost
        self._options = dict(num_envs=self.num_envs, batch_size=self.num_envs, num_threads=int(num_threads),
                             stack_num=int(frame_stack), frame_skip=4, noop_max=30, img_height=84, img_width=84,
                             gray_scale=True, use_fire_reset=True, episodic_life=False,
                             reward_clip=self._training, repeat_action_probability=0.0)
        if max_episode_steps:
            self._options["max_episode_steps"] = int(max_episode_steps)
        known = set(self._envpool.make_spec(task).config._fields) - {"num_envs", "batch_size", "seed", "task"}
        unknown = sorted(set(env_kwargs or {}) - known)
        if unknown:
            raise ValueError(f"env.env_kwargs {unknown}: not settings of EnvPool's Atari (env.backend='envpool'); "
                             f"it takes {', '.join(sorted(known))}")
        self._options.update(env_kwargs or {})
        self._stack, self._age = int(frame_stack), np.zeros(self.num_envs, np.int64)  # age: steps since reset
        self._lives = np.zeros(self.num_envs, np.int64)  # each game's lives after the last step
        self._seed, self._fresh = int(seed), True  # fresh: built with these seeds and not yet reset
        self._env = self._build(self._seed)
        self.single_observation_space = gym.spaces.Box(0, 255, (int(frame_stack), 84, 84), np.uint8)
        self.single_action_space = gym.spaces.Discrete(int(self._env.action_space.n))
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.num_envs, self.single_action_space.n))

    def _build(self, seed: int) -> Any:
        return self._envpool.make_gymnasium(self._task, seed=seed, **self._options)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple:
        base = _first_seed(seed, self.num_envs)
        if base is not None and not (base == self._seed and self._fresh):  # EnvPool seeds its envs when built:
            self._env.close()  # a seeded reset plays the same games each time, as gymnasium's does
            self._seed, self._env = base, self._build(base)
        self._fresh = False
        obs, info = self._env.reset()
        self._age[:] = 0
        self._lives[:] = info["lives"]
        self._zero_before_first(obs)
        return obs, {}

    def _zero_before_first(self, obs: np.ndarray) -> None:
        """Zero, in place, the stack's frames from before each game's first, as ale-py's backend gives them
        (EnvPool repeats the first frame there). EnvPool returns new arrays from every reset and step."""
        for row in np.flatnonzero(self._age < self._stack - 1):
            obs[row, :self._stack - 1 - self._age[row]] = 0

    def step(self, actions: Sequence[int]) -> tuple:
        obs, reward, game_over, truncated, info = self._env.step(np.asarray(actions, dtype=np.int32))
        reward = np.asarray(reward, dtype=np.float32)
        game_over, truncated = np.asarray(game_over, bool), np.asarray(truncated, bool)
        lives = np.asarray(info["lives"], dtype=np.int64)
        # in training a lost life ends the episode (Nature DQN's episodic life) but not the game
        terminated = game_over | (lives < self._lives) if self._training else game_over
        self._lives = lives
        ended = terminated | truncated
        self._age += 1
        self._zero_before_first(obs)
        out_info: Dict[str, Any] = {"lives": lives}
        if ended.any():
            final = np.zeros_like(obs)
            final[ended] = obs[ended]  # a lost life's: the observation the game goes on from
            reset = np.flatnonzero(game_over | truncated)  # the games that are over (or cut), reset now
            if len(reset):
                first, first_info = self._env.reset(reset.astype(np.int32))
                rows = np.asarray(first_info["env_id"])
                self._age[rows] = 0
                self._lives[rows] = first_info["lives"]
                obs[rows] = first
                self._zero_before_first(obs)
            out_info["final_obs"], out_info["_final_obs"] = final, ended
        return obs, reward, terminated, truncated, out_info

    def close(self, **kwargs: Any) -> None:
        self._env.close()
