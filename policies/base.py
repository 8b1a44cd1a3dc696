"""The policy base class: one object owns the model and optimizer, and exposes three modes.

Middleware talk to a policy only through its modes, never by importing an algorithm; the modes implement
the contracts of ``engine.protocols``:

- ``learn_mode`` (``LearnPolicy``): ``forward(batch) -> dict`` runs one update on a batch and returns
  statistics; ``model`` is the module that takes gradients (the ddp middleware wraps it in
  ``DistributedDataParallel``); ``state_dict()/load_state_dict()`` cover everything an update changes
  (model, target model, optimizer, counters).
- ``collect_mode`` (``CollectPolicy``): ``forward(obs, **collect_kwargs) -> dict`` acts for data
  collection (at least ``action``); ``value(obs)`` for actor-critic algorithms, else None.
- ``eval_mode`` (``EvalPolicy``): ``forward(obs) -> dict`` acts greedily for evaluation.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import gymnasium as gym
import torch

__all__ = ["Policy", "LearnMode", "CollectMode", "EvalMode", "NonFiniteLossError", "SpaceMismatchError"]

logger = logging.getLogger(__name__)


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf; raised before the optimizer step, so parameters stay the last good ones."""


class SpaceMismatchError(ValueError):
    """The model's declared shapes or the algorithm's action type do not fit the env's spaces."""


class LearnMode:
    """What a learner middleware may use of a policy (``engine.protocols.LearnPolicy``)."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[[Any], Dict[str, Any]] = policy._forward_learn
        self.state_dict = policy.state_dict
        self.load_state_dict = policy.load_state_dict
        self.cfg = policy.cfg

    @property
    def model(self) -> torch.nn.Module:
        """The module that takes gradients; assign a wrapper (e.g. DDP) to train through it."""
        return self.policy._learn_model

    @model.setter
    def model(self, module: torch.nn.Module) -> None:
        self.policy._learn_model = module

    @property
    def device(self) -> torch.device:
        return self.policy.device


class CollectMode:
    """What a collector (and the GAE estimator) may use (``engine.protocols.CollectPolicy``):
    ``forward(obs, **collect_kwargs)`` and, for actor-critic policies, ``value(obs)`` (None for value-free
    ones)."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[..., Dict[str, Any]] = policy._forward_collect
        self.value: Optional[Callable[[Any], Any]] = getattr(policy, "_value", None)
        self.cfg = policy.cfg

    @property
    def device(self) -> torch.device:
        return self.policy.device


class EvalMode:
    """What an evaluator may use (``engine.protocols.EvalPolicy``): ``forward(obs)``."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[..., Dict[str, Any]] = policy._forward_eval
        self.cfg = policy.cfg

    @property
    def device(self) -> torch.device:
        return self.policy.device


class Policy:
    """Base class of algorithms. Subclasses implement ``default_config`` and the three ``_forward_*``.

    Args:
        cfg: the compiled ``policy`` section of a config.
        observation_space, action_space: the env's single-env spaces; the model shapes are checked
            against them at construction (filled in from them when the config leaves them None).
        device: overrides ``cfg.cuda`` (the ddp runtime passes ``cuda:LOCAL_RANK``).
    """

    #: "off_policy" (replay buffer) or "on_policy" (learn on what was just collected)
    pipeline: str = "off_policy"

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        raise NotImplementedError

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        self.cfg = cfg
        self.device = torch.device(device) if device is not None else _device_from_cfg(cfg)
        self.observation_space = observation_space
        self.action_space = action_space
        self._learn_model: torch.nn.Module
        self._learn_mode = self._collect_mode = self._eval_mode = None

    @property
    def learn_mode(self) -> LearnMode:
        if self._learn_mode is None:
            self._learn_mode = LearnMode(self)
        return self._learn_mode

    @property
    def collect_mode(self) -> CollectMode:
        if self._collect_mode is None:
            self._collect_mode = CollectMode(self)
        return self._collect_mode

    @property
    def eval_mode(self) -> EvalMode:
        if self._eval_mode is None:
            self._eval_mode = EvalMode(self)
        return self._eval_mode

    def state_dict(self) -> Dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def _forward_collect(self, obs: Any, **kwargs: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def _forward_eval(self, obs: Any) -> Dict[str, Any]:
        raise NotImplementedError


def _device_from_cfg(cfg: Mapping[str, Any]) -> torch.device:
    if cfg.get("cuda", False):
        if torch.cuda.is_available():
            return torch.device("cuda")
        logger.warning("policy.cuda=True but CUDA is not available: running on the CPU")
    return torch.device("cpu")


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


def make_adam(params: Any, **kwargs: Any) -> torch.optim.Optimizer:
    """Adam, fused where this torch supports it (CPU fused Adam since torch 2.4: ~20% faster updates for
    small networks, where per-parameter Python loops dominate)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.Adam(params, foreach=True, **kwargs)


def check_finite(loss: torch.Tensor, algo: str, update: int) -> None:
    """Raise NonFiniteLossError before the optimizer step, so the parameters stay the last good ones."""
    if not torch.isfinite(loss):
        raise NonFiniteLossError(f"{algo} loss is {loss.item()} at update {update}; the parameters are left at "
                                 f"their last finite values. Lower policy.learn.learning_rate or clip gradients")


def space_dims(observation_space: gym.Space, action_space: gym.Space, policy: str,
               continuous: Optional[bool] = None, images: bool = False) -> tuple:
    """``(obs_shape, action_dim, is_continuous)`` of Box observations (flat, or ``[C, H, W]`` image stacks
    where ``images``) and a Discrete or Box action space.

    Raises:
        SpaceMismatchError: naming the policy, the space and what it needs.
    """
    ndim = len(getattr(observation_space, "shape", ()) or ())
    if not isinstance(observation_space, gym.spaces.Box) or ndim not in ((1, 3) if images else (1,)):
        raise SpaceMismatchError(f"policy {policy!r} needs a flat Box observation space"
                                 f"{' or [C, H, W] images' if images else ''}, got {observation_space}")
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
    return tuple(int(d) for d in observation_space.shape), action_dim, is_continuous
