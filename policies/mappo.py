"""MAPPO and IPPO: PPO for the agents of one env (``data.parallel_envs``), one actor shared by every agent.

The env gives each row every agent (``obs`` ``[B, N, D]``, ``alive`` ``[B, N]``, the global ``state`` ``[B, S]``,
an ``action_mask`` ``[B, N, A]`` where the agents have one); the policy acts ``[B, N]`` and keeps a log-prob
and a value per agent. Everything else is PPO's (``policies.ppo``): GAE runs each agent's stream under its row's
episode ends (``data.gae``), the minibatches are of env rows with all their agents, the loss is PPO's over every
agent of the minibatch that acted (an agent that left its episode early is weighted out, ``_loss_weight``), and
advantages are normalised over those (across DDP ranks too).

- **IPPO** (``policy.type='ippo'``): the critic sees the agent's own observation (de Witt et al., 2020).
- **MAPPO** (``policy.type='mappo'``): the critic sees the env's global state (Yu et al., 2022: mpe2's
  ``state()``, every agent's observation joined), a centralised value for decentralised actors.

Both share the actor (and the critic) over agents, with the agent's index one-hot beside its input
(``policy.model.agent_id``), so that shared parameters can still act differently per agent.

The agents' actions are ``Discrete`` (a categorical over the actor's logits, masked where the env gives a mask), or
a flat ``Box`` each (mpe2's ``continuous_actions=True``, SISL's Multiwalker): a Gaussian whose mean is the actor's
output added to the middle of the bounds (so that an untrained actor's draws are spread over them, not half
clipped at a bound) and whose log standard deviation is one learned vector shared by the agents (PPO's,
``policy.model.init_log_std``), the sample clipped to the agent's bounds for the env and learned from as drawn
(``raw_action``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

import gymnasium as gym
import torch
from torch import nn

from data.parallel_envs import ALIVE_KEY, OBS_KEY, STATE_KEY
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from .agent_spaces import agent_rows, with_agent_ids
from .models import OutputLinear, _orthogonal, mlp
from .ppo import PPOParams, PPOPolicy

__all__ = ["MAPPOPolicy", "IPPOPolicy", "AgentsActorCritic", "MAPPOParams"]


@dataclass
class MAPPOModelParams(Params):
    """The shared actor and critic of MAPPO and IPPO (``AgentsActorCritic``)."""

    actor_head_hidden_size_list: List[int] = param([64, 64])
    """The actor MLP's layer widths (tanh), one network for every agent."""
    critic_head_hidden_size_list: List[int] = param([64, 64])
    """The critic MLP's layer widths (tanh): on the global state (MAPPO) or the agent's observation (IPPO)."""
    agent_id: bool = param(True)
    """Append the agent's index, one-hot, to the actor's and the critic's input."""
    feature_norm: bool = param(True)
    """A LayerNorm over each network's input first (MAPPO's ``use_feature_normalization``, on in its MPE runs):
    positions, velocities and the global state arrive in one scale."""
    activation: str = param("tanh", choices=("tanh", "relu"))
    """The hidden layers' activation (MAPPO's repository uses ReLU, CleanRL's PPO tanh)."""
    init_log_std: float = param(0.0)
    """Box actions: the Gaussian's initial log standard deviation, one learned value per action dimension shared
    by the agents."""


@dataclass
class MAPPOParams(PPOParams):
    """MAPPO's and IPPO's ``policy`` section: PPO's, with the agents' model."""

    model: MAPPOModelParams = section(MAPPOModelParams)
    """The shared actor-critic."""


class AgentsActorCritic(nn.Module):
    """One actor and one critic for ``num_agents`` agents: ``forward(obs)`` gives logits ``[B, N, A]`` (``continuous``:
    the Gaussian's ``(mean, log_std)``, each ``[B, N, A]``) and values ``[B, N]`` for a row's tree (module
    docstring); ``state_dim`` None: the critic reads each agent's own observation (IPPO), else the global state
    (MAPPO).

    Examples:
        >>> net = AgentsActorCritic(18, 54, 3, 5, [64], [64])
        >>> logits, value = net({"obs": torch.zeros(4, 3, 18), "state": torch.zeros(4, 54)})
        >>> logits.shape, value.shape
        (torch.Size([4, 3, 5]), torch.Size([4, 3]))
        >>> (mean, log_std), _ = AgentsActorCritic(18, 54, 3, 2, [64], [64], continuous=True)(
        ...     {"obs": torch.zeros(4, 3, 18), "state": torch.zeros(4, 54)})
        >>> mean.shape, log_std.shape
        (torch.Size([4, 3, 2]), torch.Size([4, 3, 2]))
    """

    def __init__(self, obs_dim: int, state_dim: Optional[int], num_agents: int, action_dim: int,
                 actor_hidden: List[int], critic_hidden: List[int], agent_id: bool = True,
                 feature_norm: bool = False, activation: str = "tanh", continuous: bool = False,
                 init_log_std: float = 0.0, action_center: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        self.num_agents, self.agent_id, self.centralised = num_agents, agent_id, state_dim is not None
        self.continuous = continuous
        ids = num_agents if agent_id else 0
        act = {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
        actor_in, critic_in = obs_dim + ids, (state_dim if self.centralised else obs_dim) + ids
        norm = (lambda width: [nn.LayerNorm(width)]) if feature_norm else (lambda width: [])  # noqa: E731
        self.actor = nn.Sequential(*norm(actor_in), *mlp(actor_in, actor_hidden, act))
        self.critic = nn.Sequential(*norm(critic_in), *mlp(critic_in, critic_hidden, act))
        for layer in list(self.actor) + list(self.critic):
            if isinstance(layer, nn.Linear):
                _orthogonal(layer, 2 ** 0.5)
        self.actor_head = _orthogonal(OutputLinear(actor_hidden[-1] if actor_hidden else actor_in, action_dim), 0.01)
        self.critic_head = _orthogonal(OutputLinear(critic_hidden[-1] if critic_hidden else critic_in, 1), 1.0)
        if continuous:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
            # the mean starts at the middle of the bounds (mpe2's [0, 1]: 0.5, not 0, where half the draws clip)
            center = torch.zeros(action_dim) if action_center is None else torch.as_tensor(action_center).float()
            self.register_buffer("action_center", center)

    def _with_ids(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., N, F]`` with each agent's one-hot index appended (``agent_id``)."""
        return with_agent_ids(x, self.num_agents) if self.agent_id else x

    def actor_out(self, obs: Any) -> torch.Tensor:
        """The logits ``[..., N, A]``, or the Gaussian's mean (``continuous``): the actor's output alone, for a
        module that only acts (``policies.greedy``)."""
        out = self.actor_head(self.actor(self._with_ids(obs[OBS_KEY].float()))).float()
        return out + self.action_center if self.continuous else out

    def value(self, obs: Any) -> torch.Tensor:
        """Each agent's value ``[..., N]``."""
        own = obs[OBS_KEY].float()
        if self.centralised:
            state = obs[STATE_KEY].float()
            critic_in = state.unsqueeze(-2).expand(*own.shape[:-1], state.shape[-1])
        else:
            critic_in = own
        return self.critic_head(self.critic(self._with_ids(critic_in))).squeeze(-1).float()

    def forward(self, obs: Any):
        out = self.actor_out(obs)
        if self.continuous:
            return (out, self.log_std.expand_as(out)), self.value(obs)
        return out, self.value(obs)


@POLICY_REGISTRY.register("mappo")
class MAPPOPolicy(PPOPolicy):
    """MAPPO: shared actor, centralised critic on the global state (``create_config.policy.type='mappo'``)."""

    action_spaces = ("discrete", "continuous")
    multi_agent = True
    algo = "MAPPO"
    supports_obs_norm = False
    centralised = True
    Params = MAPPOParams
    params: MAPPOParams

    def _model_input(self, model_cfg: Any, observation_space: gym.Space, action_space: gym.Space) -> tuple:
        """The agents' spaces: a ``data.parallel_envs`` row (``obs`` ``[N, D]``, ``alive``, and ``state`` for a
        centralised critic) and the agents' shared actions: ``Discrete`` (a ``MultiDiscrete`` of equal sizes) or a
        flat ``Box`` (a Box ``[N, A]``)."""
        rows = agent_rows(observation_space, action_space, self.params.type or self.algo.lower(),
                          *(("its critic reads", "use policy 'ippo', whose critic reads each agent's observation")
                            if self.centralised else ()), continuous=True)
        self.continuous, self._structured, self._image = rows.continuous, True, False
        self._center = self._action_center(action_space) if rows.continuous else None
        self._masked = rows.masked
        self._num_agents, self._obs_dim = rows.num_agents, rows.obs_dim
        self._state_dim = rows.state_dim if self.centralised else None
        return observation_space, rows.action_dim

    @staticmethod
    def _action_center(action_space: gym.spaces.Box) -> torch.Tensor:
        """The middle of an agent's bounds (a Box ``[N, A]`` of agents that share one space), where the Gaussian's
        mean starts; 0 where a bound is infinite."""
        center = (torch.as_tensor(action_space.low[0], dtype=torch.float64)
                  + torch.as_tensor(action_space.high[0], dtype=torch.float64)) / 2
        return torch.where(torch.isfinite(center), center, torch.zeros_like(center)).float()

    def _loss_weight(self, inputs: tuple) -> torch.Tensor:
        """The agents that acted (``alive`` 1): one that left its row's episode early is in the batch, with its
        zeros, but out of the advantages' statistics and every mean of the loss (``policies.advantages``)."""
        return inputs[0][ALIVE_KEY].float()

    def _make_model(self, obs: Any, action_dim: int) -> nn.Module:
        model = self.params.model
        return AgentsActorCritic(self._obs_dim, self._state_dim, self._num_agents, action_dim,
                                 model.actor_head_hidden_size_list, model.critic_head_hidden_size_list,
                                 model.agent_id, model.feature_norm, model.activation, self.continuous,
                                 model.init_log_std, self._center)


@POLICY_REGISTRY.register("ippo")
class IPPOPolicy(MAPPOPolicy):
    """IPPO: shared actor, each agent's critic on its own observation (``create_config.policy.type='ippo'``)."""

    algo = "IPPO"
    centralised = False
