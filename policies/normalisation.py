"""The running statistics a policy keeps, and what it does with them (``policies.obs_norm`` holds the statistics).

- ``policy.obs_norm``: observations are normalised before every network (``norm_obs``) with statistics that
  the collect mode updates (``observing`` wraps its forward: collected observations only, random warm-up
  steps included; the eval mode never updates them), sent with ``acting_weights()``, frozen inside
  ``greedy_module()`` (``frozen_obs_norm``).
- PPO's ``policy.reward_norm``: the return statistics of reward scaling, which PPO assigns to ``reward_norm``.

Both are merged across ranks once per iteration (``merge``) and checkpointed under their config key; a
checkpoint whose statistics do not match the config's switches is refused before anything is loaded
(``check_state``).

A policy composes one ``Normalisation`` (``policy.normalisation``); one that routes its observations through
``norm_obs`` says so with ``supports_obs_norm = True``, and the others refuse ``policy.obs_norm=True``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch

from data.obs import to_device, to_plain
from engine.devices import to_device_async

from .obs_norm import ObsNormMismatchError, RunningObsNorm

__all__ = ["Normalisation", "OBS_NORM_PREFIX", "model_obs"]

#: the keys of the observation statistics among ``acting_weights()``
OBS_NORM_PREFIX = "obs_norm:"


class Normalisation:
    """A policy's running statistics: ``obs_norm``, ``reward_norm`` and ``value_norm`` (``RunningObsNorm``, or None
    when off).

    Examples:
        >>> norm = Normalisation()
        >>> x = torch.ones(2, 3)
        >>> norm.norm_obs(x) is x, norm.kept()
        (True, {})
    """

    def __init__(self, obs_norm: Optional[RunningObsNorm] = None) -> None:
        self.obs_norm = obs_norm
        self.reward_norm: Optional[RunningObsNorm] = None
        self.value_norm: Optional[RunningObsNorm] = None
        self._running_return: Optional[torch.Tensor] = None  # each env's discounted return so far (reward_norm)

    @classmethod
    def from_config(cls, settings: Any, observation_space: gym.Space, policy_cls: type,
                    device: torch.device) -> "Normalisation":
        """With ``obs_norm`` on ``device`` when ``settings.obs_norm`` is on (``settings``: the policy's
        ``policies.defaults.PolicyParams``).

        Raises:
            ValueError: the policy does not normalise, learns offline, or the observations are not flat floats.
        """
        if not settings.obs_norm:
            return cls()
        name = policy_cls.__name__
        if policy_cls.pipeline == "offline":
            raise ValueError(f"policy.obs_norm=True: {name} learns offline from a dataset, and the statistics "
                             f"are updated from collected observations only; set policy.obs_norm=False "
                             f"(normalise the dataset's observations instead)")
        if not policy_cls.supports_obs_norm:
            raise ValueError(f"policy.obs_norm=True: {name} does not normalise observations (policies that "
                             f"do: ppo, a2c, sac, td3, ddpg); set policy.obs_norm=False")
        if isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):  # per vector key, never images
            from .keyed_obs_norm import KeyedObsNorm

            encoders = getattr(getattr(settings, "model", None), "encoders", None)
            return cls(KeyedObsNorm(observation_space, encoders, settings.obs_norm_clip).to(device))
        shape = getattr(observation_space, "shape", None) or ()
        if not isinstance(observation_space, gym.spaces.Box) or len(shape) != 1:
            raise ValueError(f"policy.obs_norm=True needs flat Box observations (a vector per step), got "
                             f"{observation_space}; set policy.obs_norm=False")
        return cls(RunningObsNorm(shape, settings.obs_norm_clip).to(device))

    # ---- rewards -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def scale_rewards(self, reward: torch.Tensor, done: torch.Tensor, gamma: float) -> torch.Tensor:
        """A time-major ``[T, E]`` rollout's rewards divided by the running standard deviation of the
        discounted return and clipped (``policy.reward_norm``), with the statistics as they stood before it; its
        discounted returns (SB3's ``VecNormalize``: ``G = gamma G + r``, 0 again after an episode's end)
        join the pending statistics, merged after the learner (``merge_statistics``)."""
        reward_norm = self.reward_norm
        if reward_norm is None:
            return reward
        shape = tuple(reward.shape[1:])
        running = self._running_return
        if running is None or tuple(running.shape) != shape or running.device != reward.device:
            running = torch.zeros(shape, dtype=torch.float64, device=reward.device)
        returns = torch.empty(reward.shape, dtype=torch.float64, device=reward.device)
        not_done = ~done.bool()
        if not_done.dim() < reward.dim():  # a row's episode ends over its agents ([T, E] against [T, E, N])
            not_done = not_done.reshape(not_done.shape + (1,) * (reward.dim() - not_done.dim()))
        for t in range(len(reward)):
            running = running * gamma + reward[t]
            returns[t] = running
            running = running * not_done[t]
        self._running_return = running
        reward_norm.observe(returns.reshape(-1))
        return reward_norm.scale(reward)

    # ---- values --------------------------------------------------------------------------------------
    @torch.no_grad()
    def observe_returns(self, returns: torch.Tensor) -> None:
        """A rollout's value targets join the pending statistics of ``value_norm`` (merged after the learner,
        with the others); nothing when it is off."""
        if self.value_norm is not None:
            self.value_norm.observe(returns.reshape(-1))

    def norm_value(self, value: torch.Tensor) -> torch.Tensor:
        """A value in the env's units as the critic learns it: ``(value - mean) / std`` of the value targets seen
        (``policy.value_norm``), or as it is."""
        return value if self.value_norm is None else self.value_norm(value)

    def denorm_value(self, value: torch.Tensor) -> torch.Tensor:
        """The critic's output in the env's units (``norm_value``'s inverse), or as it is."""
        return value if self.value_norm is None else self.value_norm.inverse(value)

    # ---- observations --------------------------------------------------------------------------------
    def norm_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs`` normalised by the statistics (``policy.obs_norm``), or as it is."""
        return obs if self.obs_norm is None else self.obs_norm(obs)

    def observing(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (the collect forward), which first adds its observations to the pending statistics when
        ``policy.obs_norm`` is on; ``fn`` itself otherwise."""
        if self.obs_norm is None:
            return fn
        norm = self.obs_norm

        def observing(obs: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            norm.observe(obs)
            return fn(obs, *args, **kwargs)

        return observing

    def frozen_obs_norm(self) -> Optional[torch.nn.Module]:
        """The normalisation as it stands, for ``greedy_module`` (``GreedyActor(preprocess=...)``), or None."""
        return None if self.obs_norm is None else self.obs_norm.frozen()

    # ---- every statistic -----------------------------------------------------------------------------
    def kept(self) -> Dict[str, RunningObsNorm]:
        """The statistics kept, by state key: ``obs_norm``, ``reward_norm`` and ``value_norm`` when on."""
        return {key: norm for key, norm in (("obs_norm", self.obs_norm), ("reward_norm", self.reward_norm),
                                            ("value_norm", self.value_norm)) if norm is not None}

    def merge(self) -> None:
        """Merge what was collected since the last call (all ranks' under DDP: one all-reduce per statistic)."""
        for norm in self.kept().values():
            norm.merge()

    def state_dict(self) -> Dict[str, Any]:
        return {key: norm.state_dict() for key, norm in self.kept().items()}

    def check_state(self, state: Mapping[str, Any]) -> None:
        """The checkpoint's running statistics and the config's switches agree (``policy.obs_norm``,
        ``policy.reward_norm``).

        Raises:
            ObsNormMismatchError: naming the switch and both fixes.
        """
        kept = self.kept()
        for key, what in (("obs_norm", "observation-normalisation"), ("reward_norm", "reward-scaling"),
                          ("value_norm", "value-normalisation")):
            if key in kept and key not in state:
                raise ObsNormMismatchError(
                    f"the checkpoint holds no {what} statistics (it was written by a run without policy.{key}, or "
                    f"by an older baton), but this config sets policy.{key}=True: load it with policy.{key}=False "
                    f"(the override policy.{key}=false), or train a new run with it")
            if key not in kept and key in state:
                raise ObsNormMismatchError(
                    f"the checkpoint holds {what} statistics (its run set policy.{key}=True), but this config has "
                    f"policy.{key}=False, so it would not act or learn as that run did: load it with "
                    f"policy.{key}=True (the override policy.{key}=true)")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key, norm in self.kept().items():
            norm.load_state_dict(state[key])

    # ---- acting weights ------------------------------------------------------------------------------
    def acting_weights(self) -> Dict[str, np.ndarray]:
        """The observation statistics as numpy copies, under keys no model has (``OBS_NORM_PREFIX``)."""
        if self.obs_norm is None:
            return {}
        return {OBS_NORM_PREFIX + name: tensor.detach().to("cpu", copy=True).numpy()
                for name, tensor in self.obs_norm.state_dict().items()}

    def load_acting_weights(self, weights: Mapping[str, Any]) -> Dict[str, Any]:
        """Load the observation statistics among ``weights``; returns the others (the model's)."""
        stats = {name[len(OBS_NORM_PREFIX):]: torch.as_tensor(value) for name, value in weights.items()
                 if name.startswith(OBS_NORM_PREFIX)}
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(stats)
        return {name: value for name, value in weights.items() if not name.startswith(OBS_NORM_PREFIX)}


def model_obs(obs: Any, device: torch.device, normalisation: Normalisation, image: bool = False) -> Any:
    """Observations as the networks take them, on ``device`` and normalised (``policy.obs_norm``): a flat one as a
    float tensor (``image``: uint8 frames left to the CNN, which scales them); a tree (a Dict/Tuple observation)
    as nested plain dicts of its leaves in their own dtypes, its vector keys normalised
    (``policies.keyed_obs_norm``). Why not cast a tree: its encoders cast each key themselves (an image stays uint8
    until scaled); why plain dicts: ``torch.compile`` traces them, where a treetensor breaks the graph at every
    key lookup (``policies.encoders``), so each algorithm's hot paths compile with either kind of observation."""
    if isinstance(obs, np.ndarray):  # a policy called by hand on an env's own array: cast as a tensor of it is
        obs = torch.from_numpy(obs)
    if isinstance(obs, torch.Tensor):
        # through pinned memory to a GPU: a copy from pageable memory would wait for the update queued before it
        obs = to_device_async(obs, device)
        return obs if image else normalisation.norm_obs(obs.float())
    return normalisation.norm_obs(to_plain(to_device(obs, device)))
