"""The env's spaces against a policy's model: the shapes it declares, the action type it needs.

Each algorithm checks the spaces it is built for at construction, so a mistake shows at start with both
shapes named, not inside a matmul.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import gymnasium as gym

__all__ = ["SpaceMismatchError", "resolve_shape", "space_dims", "is_structured", "model_observation"]


class SpaceMismatchError(ValueError):
    """The model's declared shapes or the algorithm's action type do not fit the env's spaces."""


def resolve_shape(cfg_model: Dict[str, Any], key: str, actual: Sequence[int] | int, policy: str,
                  env_desc: str) -> Any:
    """Fill ``cfg_model[key]`` from the env when None, or check it against the env.

    Raises:
        SpaceMismatchError: naming both shapes, so the mistake shows at start and not inside a matmul.
    """
    declared = cfg_model.get(key)
    if declared is None:
        cfg_model[key] = list(actual) if isinstance(actual, (tuple, list)) else actual
        return cfg_model[key]
    norm = lambda v: [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v)]  # noqa: E731
    if norm(declared) != norm(actual):
        raise SpaceMismatchError(f"policy.model.{key}={declared!r} of {policy} does not match the env "
                                 f"{env_desc}: expected {actual!r}")
    return declared



def is_structured(space: gym.Space) -> bool:
    """Whether observations of ``space`` are trees of tensors (a ``Dict`` or ``Tuple`` space, encoded key by key
    by ``policies.encoders``) rather than one tensor."""
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


def space_dims(observation_space: gym.Space, action_space: gym.Space, policy: str,
               continuous: Optional[bool] = None, images: bool = False, structured: bool = False) -> tuple:
    """``(obs_shape, action_dim, is_continuous)`` of Box observations (flat, or ``[C, H, W]`` image stacks
    where ``images``), or of ``Dict``/``Tuple`` observations where ``structured`` (``obs_shape`` None: the
    model's encoders take the space itself), and a Discrete or Box action space.

    Raises:
        SpaceMismatchError: naming the policy, the space and what it needs.
    """
    ndim = len(getattr(observation_space, "shape", ()) or ())
    if structured and is_structured(observation_space):
        ndim = None
    elif not isinstance(observation_space, gym.spaces.Box) or ndim not in ((1, 3) if images else (1,)):
        raise SpaceMismatchError(f"policy {policy!r} needs a flat Box observation space"
                                 f"{' or [C, H, W] images' if images else ''}"
                                 f"{' or a Dict/Tuple of them' if structured else ''}, got {observation_space}")
    if isinstance(action_space, gym.spaces.Discrete):
        is_continuous, action_dim = False, int(action_space.n)
    elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        is_continuous, action_dim = True, int(action_space.shape[0])
    else:
        raise SpaceMismatchError(f"policy {policy!r} does not support the action space {action_space}")
    if continuous is True and not is_continuous:
        raise SpaceMismatchError(f"policy {policy!r} needs a continuous (Box) action space, but the env's action "
                                 f"space is {action_space}; use a discrete-action policy such as 'dqn' or 'ppo'")
    if continuous is False and is_continuous:
        raise SpaceMismatchError(f"policy {policy!r} needs a discrete action space, but the env's action space "
                                 f"is {action_space}; use a continuous-action policy such as 'sac' or 'ppo'")
    obs_shape = None if ndim is None else tuple(int(d) for d in observation_space.shape)
    return obs_shape, action_dim, is_continuous


def model_observation(cfg_model: Dict[str, Any], observation_space: gym.Space, obs_shape: Optional[tuple],
                      policy: str) -> Any:
    """What a model is built for: a Box observation's shape (``policy.model.obs_shape`` filled from the env, or
    checked against it), or a Dict/Tuple observation space itself (``obs_shape`` None, from ``space_dims``),
    which the model's encoders take key by key.

    Raises:
        SpaceMismatchError: a declared shape that does not fit; any declared shape for a Dict/Tuple observation,
            which has none (a config written for a Box env), told with the fix.
    """
    if obs_shape is not None:
        return resolve_shape(cfg_model, "obs_shape", observation_space.shape, policy,
                             f"observation shape {observation_space.shape}")
    declared = cfg_model.get("obs_shape")
    if declared is not None:
        raise SpaceMismatchError(
            f"policy.model.obs_shape={declared!r} of {policy}: the env's observations are {observation_space}, a "
            f"{type(observation_space).__name__} of keys with shapes of their own, which the encoders take key by "
            f"key; remove policy.model.obs_shape (set a key's encoder under policy.model.encoders)")
    return observation_space
