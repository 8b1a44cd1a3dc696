"""Env groups: one vector env made of groups that step in the background, for collection overlapped with the
policy's inference (``env.manager.overlap``).

``EnvGroups`` is one vector env of ``E`` envs made of ``G`` groups (vector envs of consecutive envs), each of
which can step in the background while Python goes on:

- ale-py's ``AtariVectorEnv``: ``send`` / ``recv`` (its C++ threads step while the policy runs);
- gymnasium's ``AsyncVectorEnv``: ``step_async`` / ``step_wait`` (one process per env);
- any other vector env: ``step`` on a worker thread, which overlaps only where the env's step releases the
  GIL (a ``SyncVectorEnv`` of pure-Python envs gains nothing: use ``env.manager.type='async'`` there).

``data.env_loop.EnvLoop`` steps the groups so that while the policy acts on one group, the others step (its
docstring shows the schedule); env ``i`` keeps row ``i`` and seed ``seed + i``, so the data are the serial
loop's.
"""
from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from gymnasium.vector.utils import batch_space

from engine.lazy import moved_names
from engine.protocols import VectorEnv

from .obs import cat_numpy

__all__ = ["EnvGroups", "group_sizes"]

logger = logging.getLogger(__name__)

StepResult = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]


def group_sizes(num_envs: int, groups: int) -> List[int]:
    """Sizes of ``groups`` groups of consecutive envs, the first ones one larger where it does not divide.

    Examples:
        >>> group_sizes(8, 2), group_sizes(5, 2), group_sizes(3, 3)
        ([4, 4], [3, 2], [1, 1, 1])
    """
    if groups < 1 or groups > num_envs:
        raise ValueError(f"cannot split {num_envs} envs into {groups} groups: need 1 <= groups <= envs")
    return [num_envs // groups + (1 if g < num_envs % groups else 0) for g in range(groups)]


class _ThreadStepper:
    """``send``/``recv`` for a vector env without an asynchronous mode: ``step`` on a worker thread."""

    def __init__(self, env: VectorEnv) -> None:
        self._env = env
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baton-env-group")
        self._future: Optional[Future] = None

    def send(self, actions: np.ndarray) -> None:
        self._future = self._pool.submit(self._env.step, actions)

    def recv(self) -> StepResult:
        future, self._future = self._future, None
        return future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _async_calls(env: VectorEnv) -> Tuple[Callable[[np.ndarray], None], Callable[[], StepResult], Optional[Callable]]:
    """``(send, recv, close)`` for one group: the env's own asynchronous mode where it has one."""
    if callable(getattr(env, "send", None)) and callable(getattr(env, "recv", None)):  # ale-py AtariVectorEnv
        return env.send, env.recv, None
    if callable(getattr(env, "step_async", None)) and callable(getattr(env, "step_wait", None)):  # AsyncVectorEnv
        return env.step_async, env.step_wait, None
    stepper = _ThreadStepper(env)
    return stepper.send, stepper.recv, stepper.close


def _merge_info(infos: Sequence[Mapping[str, Any]], sizes: Sequence[int], offsets: Sequence[int]) -> Dict[str, Any]:
    """One vector info from the groups' infos: per-env arrays concatenated in env order; where a group
    lacks a key (gymnasium adds ``final_obs`` only in steps where an episode ended) its rows are empty
    (``None`` for object arrays, zeros / False otherwise); ale-py's ``env_id`` becomes the env's index."""
    merged: Dict[str, Any] = {}
    keys = list(dict.fromkeys(key for info in infos for key in info))
    for key in keys:
        present = [info[key] for info in infos if key in info]
        if all(isinstance(value, Mapping) for value in present):
            merged[key] = _merge_info([info.get(key, {}) for info in infos], sizes, offsets)
            continue
        ref = np.asarray(present[0])
        parts = []
        for info, size, offset in zip(infos, sizes, offsets):
            if key in info:
                part = np.asarray(info[key])
                parts.append(part + offset if key == "env_id" else part)
            else:
                parts.append(np.empty((size,) + ref.shape[1:], dtype=object) if ref.dtype == object
                             else np.zeros((size,) + ref.shape[1:], dtype=ref.dtype))
        merged[key] = np.concatenate(parts)
    return merged


class EnvGroups:
    """A vector env made of groups of consecutive envs that can step concurrently.

    As a plain vector env (``reset``, ``step``) it sends every group its actions, then waits for all: the
    groups step in parallel. The overlapped ``data.env_loop.EnvLoop`` uses ``send(g, ...)`` / ``recv(g)`` per
    group instead.

    Args:
        groups: vector envs with equal single observation and action spaces, in SAME_STEP autoreset mode;
            env ``i`` of the whole is env ``i - offset`` of the group that holds it.
    """

    def __init__(self, groups: Sequence[VectorEnv]) -> None:
        if len(groups) < 1:
            raise ValueError("EnvGroups needs at least one group")
        self.groups = list(groups)
        self.sizes = [int(group.num_envs) for group in self.groups]
        self.offsets = [int(o) for o in np.cumsum([0] + self.sizes[:-1])]
        self.num_envs = sum(self.sizes)
        first = self.groups[0]
        for g, group in enumerate(self.groups[1:], 1):
            if (group.single_observation_space != first.single_observation_space
                    or group.single_action_space != first.single_action_space):
                raise ValueError(f"env group {g} has spaces {group.single_observation_space} / "
                                 f"{group.single_action_space}, group 0 {first.single_observation_space} / "
                                 f"{first.single_action_space}: the groups must hold the same env")
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = getattr(first, "metadata", {})
        calls = [_async_calls(group) for group in self.groups]
        self._send = [c[0] for c in calls]
        self._recv = [c[1] for c in calls]
        self._close = [c[2] for c in calls if c[2] is not None]
        self._in_flight = [False] * len(self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    def send(self, group: int, actions: np.ndarray) -> None:
        """Start one step of ``group`` (its rows of the actions); ``recv(group)`` collects it."""
        if self._in_flight[group]:
            raise RuntimeError(f"env group {group} is still stepping: recv({group}) before sending it again")
        self._in_flight[group] = True
        self._send[group](actions)

    def recv(self, group: int) -> StepResult:
        """Wait for the step ``send(group, ...)`` started: ``(obs, reward, terminated, truncated, info)``."""
        if not self._in_flight[group]:
            raise RuntimeError(f"env group {group} has no step in flight: send({group}, actions) first")
        self._in_flight[group] = False
        return self._recv[group]()

    def reset(self, *, seed: Any = None, options: Any = None) -> Tuple[np.ndarray, Dict[str, Any]]:
        """Reset every group; ``seed``: an int (env ``i`` gets ``seed + i``), one seed per env, or None."""
        if any(self._in_flight):
            raise RuntimeError("reset while env groups are stepping: recv every group first")
        results = []
        for group, size, offset in zip(self.groups, self.sizes, self.offsets):
            if seed is None:
                group_seed = None
            elif isinstance(seed, (int, np.integer)):
                group_seed = [int(seed) + offset + i for i in range(size)]
            else:
                group_seed = [int(s) for s in list(seed)[offset:offset + size]]
            results.append(group.reset(seed=group_seed, options=options))
        return (cat_numpy([obs for obs, _ in results]),
                _merge_info([info for _, info in results], self.sizes, self.offsets))

    def step(self, actions: Any) -> StepResult:
        actions = np.asarray(actions)
        for g, offset, size in zip(range(len(self.groups)), self.offsets, self.sizes):
            self.send(g, actions[offset:offset + size])
        results = [self.recv(g) for g in range(len(self.groups))]
        return (cat_numpy([r[0] for r in results]), np.concatenate([r[1] for r in results]),
                np.concatenate([r[2] for r in results]), np.concatenate([r[3] for r in results]),
                _merge_info([r[4] for r in results], self.sizes, self.offsets))

    def close(self) -> None:
        for g in range(len(self.groups)):
            if self._in_flight[g]:  # let a step in flight finish before its env goes away
                try:
                    self.recv(g)
                except Exception:  # noqa: BLE001 - closing anyway
                    logger.debug("env group %d failed while closing", g, exc_info=True)
        for close in self._close:
            close()
        for group in self.groups:
            group.close()


#: replaced by the one loop (issue 30): an import of it names the new spelling
__getattr__ = moved_names(__name__, {"OverlappedEnvLoop": "OverlappedEnvLoop is now data.env_loop.EnvLoop over "
                                     "data.env_groups.EnvGroups (the groups step in turn: env.manager.overlap=True)"})
