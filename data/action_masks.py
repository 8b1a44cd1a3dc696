"""Legal-action masks where the policies look for them: the ``action_mask`` key of a dictionary observation.

Envs give masks in two places. PettingZoo's and RLlib's convention puts one beside the observation, in a dict
(``{"observation": ..., "action_mask": ...}``); gymnasium's own Taxi-v4 (and envs written after it) return one
in ``info["action_mask"]``. Acting needs the mask of the observation it acts on, and the Q-learning target the
mask of the next observation, so the mask must travel with the observation: through the env loop, the replay
(``next_obs`` included), the rollouts and DDP. ``ActionMaskInObservation`` moves an info mask into the
observation, or renames a dict observation's mask key, once, in the env itself; every floor above then sees one
convention and carries the mask as the observation tree's leaf (``policies.masks`` reads it).

``with_action_mask(env, key)`` wraps an env whose first reset shows a mask under ``key`` (in its info, or as a
key of its dict observation other than ``action_mask``) and leaves any other env as it is: the conventional
names need no configuration.

Examples:
    >>> import gymnasium as gym
    >>> env = with_action_mask(gym.make("Taxi-v4"))
    >>> sorted(env.observation_space.keys())
    ['action_mask', 'observation']
    >>> obs, info = env.reset(seed=0)
    >>> obs["action_mask"].tolist(), int(obs["observation"]) == int(env.unwrapped.s)
    ([1, 1, 0, 0, 0, 0], True)
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np

__all__ = ["ACTION_MASK_KEY", "OBSERVATION_KEY", "ActionMaskInObservation", "with_action_mask", "ActionMaskError",
           "ObservationInDict", "as_trainable"]

#: where the policies read a mask (``policies.masks.ACTION_MASK_KEY`` is the same name)
ACTION_MASK_KEY = "action_mask"
#: the key of a non-dict observation once its info mask joins it
OBSERVATION_KEY = "observation"


class ActionMaskError(ValueError):
    """An env's action mask that cannot be used: missing in a step, of the wrong width, or of no discrete
    action space. The message names the env, the step and the fix."""


class ActionMaskInObservation(gym.Wrapper):
    """An env whose observations carry its legal-action mask under ``action_mask``.

    Args:
        env: the env; its action space must be ``Discrete``.
        key: where the env gives its mask: ``info[key]``, or ``obs[key]`` of a dict observation.
        source: ``"info"`` or ``"obs"``.
        check: raise an ``ActionMaskError`` when a step's action is one the last mask forbade
            (``env.action_mask_check``: a run that ends took no illegal action; the bench's masked tasks run so).

    A non-dict observation becomes ``{"observation": obs, "action_mask": mask}``; a dict observation gains (or
    renames to) ``action_mask``. The mask is int8 (1: legal), one entry per action.
    """

    def __init__(self, env: gym.Env, key: str = ACTION_MASK_KEY, source: str = "info", check: bool = False) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ActionMaskError(f"env {_name(env)}: an action mask ({source} key {key!r}) applies to Discrete "
                                  f"actions, and this env's action space is {env.action_space}: leave "
                                  f"env.action_mask_key at its default, or use a discrete-action env")
        self._key, self._source, self._steps = key, source, 0
        self._check, self._mask = check, None
        self._n = int(env.action_space.n)
        mask_space = gym.spaces.Box(0, 1, (self._n,), np.int8)
        inner = env.observation_space
        if isinstance(inner, gym.spaces.Dict):
            spaces = {k: v for k, v in inner.spaces.items() if not (source == "obs" and k == key)}
            self._wrap = False
        else:
            spaces = {OBSERVATION_KEY: inner}
            self._wrap = True
        spaces[ACTION_MASK_KEY] = mask_space
        self.observation_space = gym.spaces.Dict(spaces)

    def reset(self, **kwargs: Any) -> Tuple[Any, Dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._steps = 0
        return self._with_mask(obs, info, ended=False), info

    def step(self, action: Any) -> Tuple[Any, float, bool, bool, Dict[str, Any]]:
        if self._check and self._mask is not None and not self._mask[int(action)]:
            raise ActionMaskError(f"{self._where()}: action {int(action)} was taken, which the mask forbade (legal: "
                                  f"{np.flatnonzero(self._mask).tolist()}); env.action_mask_check=True raises on it. "
                                  f"The policy acted without this env's mask: check that the observation's "
                                  f"action_mask reaches it")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        return self._with_mask(obs, info, terminated or truncated), reward, terminated, truncated, info

    def _with_mask(self, obs: Any, info: Dict[str, Any], ended: bool) -> Dict[str, Any]:
        """``obs`` with the step's mask under ``action_mask``; ``ended``: the episode's last step, whose mask
        nothing acts on (it may allow no action)."""
        found = (obs.get(self._key) if isinstance(obs, dict) else None) if self._source == "obs" else info.get(self._key)
        if found is None:
            raise ActionMaskError(f"{self._where()}: no action mask in {'the observation' if self._source == 'obs' else 'info'}"
                                  f"[{self._key!r}], though its first reset had one: an env gives its mask at every "
                                  f"reset and step")
        mask = np.asarray(found)
        if mask.shape != (self._n,):
            raise ActionMaskError(f"{self._where()}: the action mask {self._source}[{self._key!r}] has shape {mask.shape}, "
                                  f"but the action space has {self._n} actions: a mask holds one entry per action "
                                  f"(1: legal)")
        mask = mask.astype(np.int8, copy=False)
        if not ended and not mask.any():
            raise ActionMaskError(f"{self._where()}: the action mask {self._source}[{self._key!r}] allows no action, "
                                  f"and the episode goes on: a mask must leave at least one legal action (1) at every "
                                  f"reset and every step that does not end the episode")
        if self._check:
            self._mask = mask
        if self._wrap:
            return {OBSERVATION_KEY: obs, ACTION_MASK_KEY: mask}
        out = {k: v for k, v in obs.items() if not (self._source == "obs" and k == self._key)}
        out[ACTION_MASK_KEY] = mask
        return out

    def _where(self) -> str:
        """The env and the step, for an error's message (built only when one is raised: this runs every step)."""
        return f"env {_name(self.env)}, step {self._steps} of its episode"


def with_action_mask(env: gym.Env, key: str = ACTION_MASK_KEY, seed: Optional[int] = None,
                     check: bool = False) -> gym.Env:
    """``env`` wrapped in ``ActionMaskInObservation`` when its first reset shows a mask under ``key`` (a dict
    observation already holding ``action_mask`` is left as it is, unless ``check`` asks for its actions to be
    checked against it); ``env`` itself otherwise, and for a ``key`` of "" (masks off: an info mask is ignored).
    A ``key`` other than the conventional name that is found nowhere is an ``ActionMaskError`` (it was asked
    for by name)."""
    space = env.observation_space
    if check and not key:
        raise ActionMaskError(f"env.action_mask_check=True with env.action_mask_key='' (masks off): there is no mask "
                              f"to check env {_name(env)}'s actions against; drop one of the two settings")
    if not key:  # masks switched off (env.action_mask_key=""): the env acts as if it gave none
        return env
    if key == ACTION_MASK_KEY and not isinstance(env.action_space, gym.spaces.Discrete) and not check:
        return env  # masks are of discrete actions: nothing to look for (a key asked for by name is checked)
    if key == ACTION_MASK_KEY and isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces and not check:
        return env
    if isinstance(space, gym.spaces.Dict) and key in space.spaces:
        return ActionMaskInObservation(env, key, source="obs", check=check)
    _, info = env.reset(seed=seed)
    if key in info:
        return ActionMaskInObservation(env, key, source="info", check=check)
    if key != ACTION_MASK_KEY:
        raise ActionMaskError(f"env.action_mask_key={key!r}: env {_name(env)} has no such key in its observation "
                              f"({_keys(space)}) nor in the info of its reset ({sorted(info) or 'empty'}); name "
                              f"the key it gives its legal-action mask under")
    if check:
        raise ActionMaskError(f"env.action_mask_check=True: env {_name(env)} gives no legal-action mask (no "
                              f"{key!r} in its observation, {_keys(space)}, nor in the info of its reset) to check "
                              f"its actions against; drop the setting, or name the mask's key (env.action_mask_key)")
    return env


def _name(env: gym.Env) -> str:
    spec = getattr(env, "spec", None)
    return getattr(spec, "id", None) or type(env.unwrapped).__name__


def _keys(space: gym.Space) -> str:
    return f"keys {sorted(space.spaces)}" if isinstance(space, gym.spaces.Dict) else f"a {type(space).__name__}"


class ObservationInDict(gym.ObservationWrapper):
    """An env whose observation is a lone ``Discrete``, ``MultiDiscrete`` or ``MultiBinary`` (FrozenLake's cell,
    Taxi's state without its mask), given as ``{"observation": obs}``: the models take a Box as a tensor and
    everything else key by key (``policies.encoders``: an embedding for a discrete key), so the one key makes
    such an env trainable with no code of the user's. The key is the one an info mask's env gets too
    (``ActionMaskInObservation``)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({OBSERVATION_KEY: env.observation_space})

    def observation(self, observation: Any) -> Dict[str, Any]:
        return {OBSERVATION_KEY: observation}


#: observation spaces a model takes only as a key of a dict (``ObservationInDict``)
KEYED_ONLY = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def as_trainable(env: gym.Env, mask_key: str = ACTION_MASK_KEY, check_mask: bool = False) -> gym.Env:
    """``env`` as the policies take it: its legal-action mask in its observation (``with_action_mask``, each
    action checked against it with ``check_mask``) and a lone discrete observation in a dict
    (``ObservationInDict``)."""
    env = with_action_mask(env, mask_key, check=check_mask)
    return ObservationInDict(env) if isinstance(env.observation_space, KEYED_ONLY) else env
