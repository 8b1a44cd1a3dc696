"""Value decomposition for cooperative agents: QMIX, VDN, and independent Q-learners (IQL) beside them.

The env gives each row every agent (``data.parallel_envs``: ``obs`` ``[B, N, D]``, ``alive`` ``[B, N]``, the
global ``state`` ``[B, S]``, an ``action_mask`` ``[B, N, A]`` where the agents have one). One Q network is shared by
every agent, with the agent's index one-hot beside its observation (``policy.model.agent_id``); each agent acts
epsilon-greedily on its own ``Q_i(o_i, .)``, so acting stays decentralised. Learning is centralised: the agents'
chosen values are mixed into one team value, trained on the team's reward (the mean of the agents' rewards, the
per-agent unit every return of baton's is in)::

    Q_tot   = mix([Q_i(o_i, a_i)]_i, state)
    target  = r_team + discount * (1 - terminated) * mix_target([Q_target_i(o'_i, a*_i)]_i, state')
    a*_i    = argmax_a Q_i(o'_i, a)            (double Q: the online net picks, the target net rates)
    loss    = mean(huber(Q_tot - target))

- **QMIX** (``policy.type='qmix'``, Rashid et al., 2018): ``mix`` is a monotonic network of the agents' values
  whose weights a hypernetwork makes from the global state (their absolute values: ``dQ_tot/dQ_i >= 0``, so each
  agent's greedy action is the team's).
- **VDN** (``'vdn'``, Sunehag et al., 2018): ``mix`` is the sum.
- **IQL** (``'iql'``): no mix; each agent's own TD error against the team reward, the independent learners
  the decomposition methods are measured against.

An agent that has left its row's episode (``alive`` 0) adds nothing: its chosen and next values are zeroed before
the mix (IQL: it counts in no mean). The DQN pieces are DQN's (``policies.dqn``): the target network's hard or soft
update, double Q, the Huber or squared loss, the epsilon schedule, prioritized replay (the team's TD error), the
n-step returns of the collector (per agent, ``data.nstep``). Discrete actions, agents with one shared space.
The agent network is feed-forward: EPyMARL's recurrent agent (a GRU over each agent's history) is not built.

Measured on Simple Spread over seeds 0-2 at 200k env steps (BENCHMARKS.md, "Several agents"), the mean
evaluation over the last 20k: VDN -16.8, QMIX -17.2, IQL -18.6 (QMIX above IQL on each seed). QMIX's mixer reads
the state through a LayerNorm (``policy.model.state_norm``): without it ``Q_tot`` climbed past any return the
rewards allow from about 100k env steps on, whatever the loss, target updates, rate or discount, as the
hypernetworks' gain on the agents' values (``dQ_tot/dq_i``) grew from about 2 to about 20 and multiplied the bias
of the target's max; with it the gain stays near 7 and ``Q_tot`` near the returns.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from data.obs import cat, to_device
from data.parallel_envs import ALIVE_KEY, OBS_KEY, STATE_KEY
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from .accel import hot_path
from .agent_spaces import agent_rows, with_agent_ids
from .defaults import CollectParams, OnlineEvalParams
from .dqn import DQNOtherParams, DQNParams, QLearnParams, QValuePolicy
from .epsilon import EpsilonDraws, EpsilonParams
from .greedy import GreedyActor
from .masks import action_mask, masked_argmax
from .models import mlp
from .optim import OptimizerStep
from .placement import DeviceGenerators

__all__ = ["QMixPolicy", "VDNPolicy", "IQLPolicy", "AgentsQNetwork", "QMixer", "QMixParams"]

MIXERS = ("qmix", "vdn", "none")


@dataclass
class QMixModelParams(Params):
    """The agents' shared Q network and the mixer (``AgentsQNetwork``)."""

    hidden_size_list: List[int] = param([64, 64])
    """The agent network's layer widths (ReLU), one network for every agent."""
    agent_id: bool = param(True)
    """Append the agent's index, one-hot, to its observation."""
    feature_norm: bool = param(True)
    """A LayerNorm over the agent network's input first (as MAPPO's agents' model)."""
    mixing_embed_dim: int = param(32, rule="at_least_one")
    """QMIX: the mixing network's hidden width (Rashid et al.'s 32)."""
    hypernet_hidden: int = param(64, rule="at_least_one")
    """QMIX: the hidden width of the hypernetwork that makes the mixer's first weights from the state."""
    state_norm: bool = param(True)
    """QMIX: a LayerNorm over the global state before the hypernetworks. Without it the mixer's weights grew
    with the learning and ``Q_tot`` diverged on Simple Spread from about 100k env steps (BENCHMARKS.md)."""


@dataclass
class QMixLearnParams(QLearnParams):
    """``policy.learn`` of QMIX, VDN and IQL."""

    update_per_collect: int = param(4, rule="at_least_one")
    """Learner updates after each collection of ``collect.n_sample`` transitions (env rows)."""


@dataclass
class QMixOtherParams(DQNOtherParams):
    """``policy.other`` of QMIX, VDN and IQL: exploration (EPyMARL's: from 1 to 0.05 in a straight line) and the
    replay buffer."""

    eps: EpsilonParams = section(EpsilonParams, type="linear", start=1.0, end=0.05, decay=100_000)
    """The epsilon-greedy schedule, each agent drawing its own."""


@dataclass
class QMixParams(DQNParams):
    """QMIX's, VDN's and IQL's ``policy`` section: DQN's, with the agents' model."""

    model: QMixModelParams = section(QMixModelParams)  # type: ignore[assignment]
    """The shared agent network and the mixer."""
    learn: QMixLearnParams = section(QMixLearnParams, batch_size=256, learning_rate=5e-4, target_update_freq=200,
                                     grad_clip_norm=10.0, td_loss="mse")  # type: ignore[assignment]
    """The update (EPyMARL's QMIX settings where they carry over from episodes to transitions: rate 5e-4, the
    target network every 200 updates, gradients clipped at 10, the squared TD error)."""
    collect: CollectParams = section(CollectParams, n_sample=64)
    """Collection: env rows (each with every agent) per collect."""
    eval: OnlineEvalParams = section(OnlineEvalParams)
    """Evaluation."""
    other: QMixOtherParams = section(QMixOtherParams)  # type: ignore[assignment]
    """Exploration and replay."""


class QMixer(nn.Module):
    """QMIX's monotonic mixer: ``Q_tot = w2 . elu(W1 q + b1) + b2``, with ``W1``, ``w2`` the absolute values of
    what hypernetworks make from the state, so that ``Q_tot`` never decreases in any agent's value.

    Examples:
        >>> mixer = QMixer(num_agents=3, state_dim=6, embed_dim=8, hypernet_hidden=16)
        >>> mixer(torch.zeros(4, 3), torch.zeros(4, 6)).shape
        torch.Size([4])
    """

    def __init__(self, num_agents: int, state_dim: int, embed_dim: int, hypernet_hidden: int,
                 state_norm: bool = True) -> None:
        super().__init__()
        self.num_agents, self.embed_dim = num_agents, embed_dim
        # the state's scale sets the hypernetworks' outputs, the mixer's gain on each agent's value: unnormalised,
        # that gain grew and multiplied the max's bias in the target until Q_tot diverged
        self.state_norm = nn.LayerNorm(state_dim) if state_norm else nn.Identity()
        self.hyper_w1 = nn.Sequential(nn.Linear(state_dim, hypernet_hidden), nn.ReLU(),
                                      nn.Linear(hypernet_hidden, num_agents * embed_dim))
        self.hyper_b1 = nn.Linear(state_dim, embed_dim)
        self.hyper_w2 = nn.Sequential(nn.Linear(state_dim, hypernet_hidden), nn.ReLU(),
                                      nn.Linear(hypernet_hidden, embed_dim))
        self.hyper_b2 = nn.Sequential(nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1))

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``q`` ``[B, N]`` the agents' chosen values, ``state`` ``[B, S]``: ``Q_tot`` ``[B]``."""
        state = self.state_norm(state)
        w1 = self.hyper_w1(state).abs().view(-1, self.num_agents, self.embed_dim)
        hidden = F.elu(torch.bmm(q.unsqueeze(1), w1).squeeze(1) + self.hyper_b1(state))
        w2 = self.hyper_w2(state).abs()
        return (hidden * w2).sum(-1) + self.hyper_b2(state).squeeze(-1)


class AgentsQNetwork(nn.Module):
    """The agents' shared Q network and the team's mixer. ``forward(obs)`` gives each agent's values ``[B, N, A]``
    (acting, ``greedy_module``); ``forward(obs, action)`` also mixes the values of ``action`` (``[b, N]``, for the
    first ``b`` rows of ``obs``) into the team's ``[b]`` (IQL: the agents' ``[b, N]``), in the one forward a DDP
    wrapper sees per update.

    Examples:
        >>> from data.obs import from_plain
        >>> net = AgentsQNetwork(18, 54, 3, 5, [64], mixer="qmix")
        >>> obs = from_plain({"obs": torch.zeros(4, 3, 18), "alive": torch.ones(4, 3), "state": torch.zeros(4, 54)})
        >>> q, team = net(obs, torch.zeros(2, 3, dtype=torch.long))
        >>> q.shape, team.shape
        (torch.Size([4, 3, 5]), torch.Size([2]))
    """

    def __init__(self, obs_dim: int, state_dim: Optional[int], num_agents: int, action_dim: int,
                 hidden: List[int], mixer: str = "qmix", agent_id: bool = True, feature_norm: bool = True,
                 embed_dim: int = 32, hypernet_hidden: int = 64, state_norm: bool = True) -> None:
        super().__init__()
        self.num_agents, self.agent_id, self.mixer_type = num_agents, agent_id, mixer
        width = obs_dim + (num_agents if agent_id else 0)
        self.agent = nn.Sequential(*([nn.LayerNorm(width)] if feature_norm else []), *mlp(width, hidden, nn.ReLU),
                                   nn.Linear(hidden[-1] if hidden else width, action_dim))
        self.mixer = (QMixer(num_agents, state_dim, embed_dim, hypernet_hidden, state_norm) if mixer == "qmix"
                      else None)

    def agent_values(self, obs: Any) -> torch.Tensor:
        """Each agent's action values ``[..., N, A]``."""
        x = obs[OBS_KEY].float()
        return self.agent(with_agent_ids(x, self.num_agents) if self.agent_id else x).float()

    def mix(self, chosen: torch.Tensor, counts: torch.Tensor, state: Optional[torch.Tensor]) -> torch.Tensor:
        """The agents' chosen values ``[B, N]``, those not in ``counts`` zeroed, as the team's ``[B]`` (IQL: as they
        are); ``state`` ``[B, S]`` (QMIX's hypernetworks)."""
        chosen = chosen * counts.to(chosen.dtype)
        if self.mixer_type == "vdn":
            return chosen.sum(-1)
        if self.mixer_type == "qmix":
            return self.mixer(chosen, state.float())
        return chosen

    def forward(self, obs: Any, action: Optional[torch.Tensor] = None) -> Any:
        q = self.agent_values(obs)
        if action is None:
            return q
        rows = len(action)
        chosen = q[:rows].gather(-1, action.unsqueeze(-1)).squeeze(-1)
        state = obs[STATE_KEY][:rows] if self.mixer is not None else None
        return q, self.mix(chosen, obs[ALIVE_KEY][:rows], state)


@POLICY_REGISTRY.register("qmix")
class QMixPolicy(QValuePolicy):
    """QMIX: agents' Q values mixed monotonically by the state (``create_config.policy.type='qmix'``)."""

    pipeline = "off_policy"
    multi_agent = True
    algo = "QMIX"
    mixer = "qmix"
    default_env_steps = 1_000_000
    eager_acting = None
    Params = QMixParams
    params: QMixParams

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        self._agent_spaces(observation_space, action_space)
        model, learn = self.params.model, self.params.learn
        self.model = self.placement.build(lambda: AgentsQNetwork(
            self._obs_dim, self._state_dim, self._num_agents, self._action_dim, model.hidden_size_list,
            self.mixer, model.agent_id, model.feature_norm, model.mixing_embed_dim, model.hypernet_hidden,
            model.state_norm))
        self._target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.optimizer_step = OptimizerStep.adam([self.model.parameters()], self.optimizer_settings(), self.mixer)
        self._target_update_freq = learn.target_update_freq
        self._target_theta = float(learn.target_theta)
        self._double_q = learn.double_q
        self._use_weight = self.params.priority and self.params.priority_IS_weight
        self._grad_clip = float(learn.grad_clip_norm)
        self._td_loss = F.smooth_l1_loss if learn.td_loss == "huber" else F.mse_loss
        self._eps_draws = EpsilonDraws(DeviceGenerators(), self._action_dim)

    def _agent_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """The agents' spaces: a ``data.parallel_envs`` row and the agents' shared ``Discrete`` actions."""
        rows = agent_rows(observation_space, action_space, self.params.type or self.algo.lower(),
                          *(("its mixer reads", "use policy 'vdn', whose mixer is a sum") if self.mixer == "qmix"
                            else ()))
        self._masked = rows.masked
        self._num_agents, self._obs_dim, self._state_dim, self._action_dim = rows[:4]

    # ---- act -------------------------------------------------------------------------------------
    def _greedy(self, obs: Any, mode: str) -> torch.Tensor:
        """Each agent's ``argmax_a Q_i(o_i, a)`` ``[B, N]`` (over its legal actions where it has a mask)."""
        obs = to_device(obs, self.mode_devices[mode])
        with torch.inference_mode():
            return self._greedy_action[mode](self.placement.actor(mode), obs)

    @hot_path("collect", "eval", name="greedy")
    def _greedy_action(self, model: torch.nn.Module, obs: Any) -> torch.Tensor:
        return masked_argmax(model(obs), action_mask(obs))

    def _explore(self, action: torch.Tensor, eps: float, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Each agent explores on its own draw (``QValuePolicy._explore`` over the rows' agents)."""
        flat_mask = None if mask is None else mask.reshape(-1, mask.shape[-1])
        return self._eps_draws.apply(action.reshape(-1), eps, flat_mask).reshape(action.shape)

    def greedy_module(self) -> torch.nn.Module:
        """Each agent's greedy action from the row's tree (``Policy.greedy_module``)."""
        return GreedyActor(self.model, discrete=True)

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        obs, next_obs = (to_device(o, self.device) for o in (batch.obs, batch.next_obs))
        action = batch.action.to(self.device).long()
        reward = batch.reward.to(self.device).float()
        discount = batch.discount.to(self.device).float()
        not_done = (~batch.terminated.to(self.device)).float()
        truncated = batch.truncated.to(self.device).bool()
        weight = batch.weight.to(self.device).float() if self._use_weight else None
        loss, q, target, priority = self._loss(obs, next_obs, action, reward, discount, not_done, truncated, weight)
        self._step(loss)
        return {"loss": loss.detach(), "q_value": q.mean(), "target_q": target.mean(), "priority": priority}

    @hot_path("learn")
    def _loss(self, obs: Any, next_obs: Any, action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
              not_done: torch.Tensor, truncated: torch.Tensor, weight: Optional[torch.Tensor]) -> tuple:
        """``(loss, q, target, priority)``: the team's TD error (module docstring); IQL's per agent, over the
        agents that acted. ``reward`` ``[B, N]`` (each agent's n-step return), ``discount``/``not_done`` ``[B]``."""
        n = len(action)
        q_all, q = self.learn_model(cat([obs, next_obs]), action)
        alive = obs[ALIVE_KEY].float()
        with torch.no_grad():
            next_online = q_all[n:].detach()
            next_target = self._target_model(next_obs)
            pick = next_online if self._double_q else next_target
            next_action = masked_argmax(pick, action_mask(next_obs))
            next_chosen = next_target.gather(-1, next_action.unsqueeze(-1)).squeeze(-1)
            # the agents the bootstrap counts: those that act next, and at a row's truncation (its final
            # observation has no agent acting) those that acted; one that left while the row played on, none
            counts = (next_obs[ALIVE_KEY] != 0) | ((alive != 0) & truncated.unsqueeze(-1))
            next_state = next_obs[STATE_KEY] if self.mixer == "qmix" else None
            next_value = self._target_model.mix(next_chosen, counts, next_state)
            bootstrap = discount * not_done
            if self.mixer == "none":  # each agent on the team's reward
                team = reward.mean(-1, keepdim=True)
                target = team + bootstrap.unsqueeze(-1) * next_value
            else:
                target = reward.mean(-1) + bootstrap * next_value
        elementwise = self._td_loss(q, target, reduction="none")
        if self.mixer == "none":
            per_row = (elementwise * alive).sum(-1) / alive.sum(-1).clamp_min(1.0)
            priority = ((q.detach() - target).abs() * alive).sum(-1) / alive.sum(-1).clamp_min(1.0)
        else:
            per_row, priority = elementwise, (q.detach() - target).abs()
        if weight is not None:
            per_row = per_row * weight
        return per_row.mean(), q.detach(), target, priority


@POLICY_REGISTRY.register("vdn")
class VDNPolicy(QMixPolicy):
    """VDN: the team's value is the sum of the agents' (``create_config.policy.type='vdn'``)."""

    algo = "VDN"
    mixer = "vdn"


@POLICY_REGISTRY.register("iql")
class IQLPolicy(QMixPolicy):
    """Independent Q-learners sharing one network, each on the team's reward (``create_config.policy.type='iql'``)."""

    algo = "IQL"
    mixer = "none"

