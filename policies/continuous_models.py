"""The actors and critics of the continuous-action off-policy algorithms (SAC, TD3, DDPG; TD3+BC and BC's
deterministic actor): from a flat observation's size, or from a Dict/Tuple observation space that each encodes
key by key (``policies.encoders``).

Every model returns fp32 outputs, also under bf16 autocast (``policy.amp``), as ``policies.models`` says.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium as gym
import torch
from torch import nn

from engine.params import Params, param

from .base import resolve_shape, space_dims
from .models import OutputLinear, mlp
from .spaces import model_observation

__all__ = ["ObsInput", "SquashedGaussianActor", "DeterministicActor", "TwinQ", "SingleQ", "ActorCriticModelParams",
           "EncodedActorCriticModelParams", "model_input", "critic_pass", "held"]


#: what the SAC/TD3 models take for their input: a flat observation's size, or a Dict/Tuple observation space
ObsInput = Union[int, gym.Space]


def _actor_torso(obs: ObsInput, hidden_sizes: Sequence[int],
                 encoders: Optional[Mapping[str, Any]]) -> Tuple[nn.Module, int]:
    """An actor's torso and its output size: the MLP of a flat observation (the layers it always had, built in
    the same order, so a seed gives the same weights), or for a Dict/Tuple space the actor's own
    ``MultiInputEncoder`` followed by that MLP (``policies.encoders.build_torso``)."""
    if not isinstance(obs, gym.Space):
        return mlp(int(obs), hidden_sizes), int(hidden_sizes[-1]) if hidden_sizes else int(obs)
    from .encoders import build_torso  # encoders builds on this module's layers

    return build_torso(obs, encoders, hidden_sizes)


def _critic_encoder(obs: ObsInput, encoders: Optional[Mapping[str, Any]]) -> Tuple[Optional[nn.Module], int]:
    """A critic's observation encoder and its feature size: None and the size for a flat observation (the
    heads take it as it is), a ``MultiInputEncoder`` for a Dict/Tuple space."""
    if not isinstance(obs, gym.Space):
        return None, int(obs)
    from .encoders import MultiInputEncoder

    multi = MultiInputEncoder(obs, encoders)
    return multi, multi.out_dim


class SquashedGaussianActor(nn.Module):
    """SAC's actor: a Gaussian whose samples are squashed by tanh into (-1, 1), then scaled to the bounds.

    ``forward(obs)`` returns ``(mean, log_std)`` with log_std clamped to [-20, 2]. ``obs``: the size of a flat
    observation, or a Dict/Tuple space, encoded by an encoder of the actor's own (``TwinQ`` says why not
    shared), ``encoders`` its per-key settings (``policy.model.encoders``).
    """

    def __init__(self, obs: ObsInput, action_dim: int, hidden_sizes: Sequence[int],
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.torso, features = _actor_torso(obs, hidden_sizes, encoders)
        self.mean = OutputLinear(features, action_dim)
        self.log_std = OutputLinear(features, action_dim)

    def forward(self, obs: Any):
        x = self.torso(obs)
        return self.mean(x).float(), self.log_std(x).float().clamp(-20.0, 2.0)


class DeterministicActor(nn.Module):
    """``tanh(mu(obs))``: a deterministic action in (-1, 1) (continuous behaviour cloning, TD3, DDPG, TD3+BC).
    ``obs`` and ``encoders`` as ``SquashedGaussianActor``'s."""

    def __init__(self, obs: ObsInput, action_dim: int, hidden_sizes: Sequence[int],
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.torso, features = _actor_torso(obs, hidden_sizes, encoders)
        self.head = OutputLinear(features, action_dim)

    def forward(self, obs: Any) -> torch.Tensor:
        return torch.tanh(self.head(self.torso(obs)).float())


class TwinQ(nn.Module):
    """Two independent Q(s, a) MLPs; ``forward`` returns both, shape ``[B]`` each.

    A flat observation enters the heads as it is (``encoder`` None). A Dict/Tuple observation space (``obs``)
    gets one ``MultiInputEncoder`` (``encoder``, settings ``encoders``) whose features both heads take with
    the action, as SB3's ``ContinuousCritic`` shares one features extractor between its Q networks: the
    encoder learns from both TD errors, and an image is encoded once per critic call, not once per head.

    Why the actor has an encoder of its own, not this one (SB3's default for SAC and TD3,
    ``share_features_extractor=False``): the actor's loss reads Q through the critic with its parameters detached
    (so that it moves the actor only; the critics have stepped on their own loss before). A shared encoder
    would then either take the actor's gradient as well (the actor pushing the critic's features towards what
    flatters its own actions) or need the actor's features detached (the actor's torso would learn nothing
    below its MLP, which pixels need). Separate encoders keep each loss on its own network and give the
    target critic (a copy of this module) the critic's encoder and nothing else.

    ``encode(obs)`` gives the features (the observation itself when flat) and ``forward(features, action,
    encoded=True)`` takes them, so that a caller that needs Q of several actions of one observation (the actor's
    loss, with the parameters detached) encodes it once.
    """

    def __init__(self, obs: ObsInput, action_dim: int, hidden_sizes: Sequence[int],
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.encoder, obs_dim = _critic_encoder(obs, encoders)
        self.q1 = nn.Sequential(mlp(obs_dim + action_dim, hidden_sizes), OutputLinear(hidden_sizes[-1], 1))
        self.q2 = nn.Sequential(mlp(obs_dim + action_dim, hidden_sizes), OutputLinear(hidden_sizes[-1], 1))

    def encode(self, obs: Any) -> torch.Tensor:
        """The heads' input for ``obs``: the encoder's features, or a flat observation itself."""
        return obs if self.encoder is None else self.encoder(obs)

    def forward(self, obs: Any, action: torch.Tensor, encoded: bool = False):
        x = torch.cat([obs if encoded else self.encode(obs), action], dim=-1)
        return self.q1(x).squeeze(-1).float(), self.q2(x).squeeze(-1).float()


def critic_pass(critic: nn.Module, obs: Any, action: torch.Tensor,
                critics: bool) -> Tuple[torch.Tensor, Optional[Tuple[torch.Tensor, ...]]]:
    """``(features, Q_i(s, a) for each critic)`` of a ``TwinQ`` or ``SingleQ``, encoding ``obs`` once; with
    ``critics`` False, ``(features, None)``, the features computed without a graph (an actor's pass alone reads
    them detached, so none is needed)."""
    if critics:
        features = critic.encode(obs)
        return features, critic(features, action, encoded=True)
    with torch.no_grad():
        return critic.encode(obs), None


def held(module: nn.Module) -> Dict[str, torch.Tensor]:
    """``module``'s parameters by name, detached: ``torch.func.functional_call(module, held(module), args)`` runs
    it with them fixed, so that a loss through it (an actor's, through the critics) moves only what feeds it."""
    return {name: p.detach() for name, p in module.named_parameters()}


class SingleQ(nn.Module):
    """One Q(s, a) MLP with TwinQ's interface (``q1``, ``encoder``, ``encode``; ``forward`` returns a tuple, of
    one ``[B]`` tensor), so a loss written over "every critic" serves DDPG's single critic and TD3's twins
    alike."""

    def __init__(self, obs: ObsInput, action_dim: int, hidden_sizes: Sequence[int],
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.encoder, obs_dim = _critic_encoder(obs, encoders)
        self.q1 = nn.Sequential(mlp(obs_dim + action_dim, hidden_sizes), OutputLinear(hidden_sizes[-1], 1))

    def encode(self, obs: Any) -> torch.Tensor:
        """The head's input for ``obs`` (``TwinQ.encode``)."""
        return obs if self.encoder is None else self.encoder(obs)

    def forward(self, obs: Any, action: torch.Tensor, encoded: bool = False):
        return (self.q1(torch.cat([obs if encoded else self.encode(obs), action], dim=-1)).squeeze(-1).float(),)


@dataclass
class ActorCriticModelParams(Params):
    """``policy.model`` of an MLP actor and MLP critics of flat observations: the base of
    ``EncodedActorCriticModelParams``, which every actor-critic policy's model is."""

    obs_shape: Optional[Union[int, List[int]]] = param(None)
    """None: taken from the env's observation space (and recorded in the run's config); given: checked
    against it at start."""
    action_shape: Optional[Union[int, List[int]]] = param(None)
    """None: taken from the env's action space (its dimension); given: checked against it at start."""
    actor_head_hidden_size_list: List[int] = param([256, 256])
    """Widths of the actor's hidden layers (observation in; per action dimension out, the action before its
    ``tanh`` (TD3) or the mean and log-std of the Gaussian it samples (SAC))."""
    critic_head_hidden_size_list: List[int] = param([256, 256])
    """Widths of each critic's hidden layers (observation and action in, their Q value out)."""


@dataclass
class EncodedActorCriticModelParams(ActorCriticModelParams):
    """``policy.model`` of SAC, TD3 and DDPG: ``ActorCriticModelParams`` and the encoders of a Dict or Tuple
    observation."""

    encoders: Dict[str, Any] = param({})
    """Per-key encoder settings of a Dict or Tuple observation (``policies.encoders.EncoderParams`` under
    each key, nested keys as nested mappings, e.g. ``{"image": {"type": "cnn"}}``); a key not named gets
    "auto". The actor and the critics each build their encoders from them, before their hidden layers. Unused
    for a Box observation."""


def model_input(cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space, algo: str,
                structured: bool = True) -> Tuple[ObsInput, int]:
    """What an actor-critic model of SAC, TD3 or DDPG is built for: the size of a flat observation, or a Dict or
    Tuple observation space itself (where ``structured``: the model encodes it key by key), and the action
    dimension; ``cfg.model.obs_shape`` and ``action_shape`` filled from the env or checked against it.

    Raises:
        SpaceMismatchError: a space the algorithm does not take, or a declared shape that does not fit (a Dict
            observation has no shape to declare).
    """
    obs_shape, action_dim, _ = space_dims(observation_space, action_space, algo, continuous=True,
                                          structured=structured)
    model_observation(cfg["model"], observation_space, obs_shape, algo)  # cfg.model.obs_shape filled or checked
    obs_in: ObsInput = observation_space if obs_shape is None else int(obs_shape[0])
    resolve_shape(cfg["model"], "action_shape", action_dim, algo, f"action space {action_space}")
    return obs_in, action_dim
