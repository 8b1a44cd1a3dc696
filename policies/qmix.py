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

The agent network is feed-forward, or with ``policy.model.recurrent`` EPyMARL's recurrent agent, a GRU cell whose
memory is each agent's history (``policies.agent_q_networks``). The recurrent agent acts with a memory per env and
agent that the env loop carries and zeroes at episode ends, as ``ppo_lstm``'s; the collector stores with each
one-step transition the memory it acted from; the replay hands out sequences of ``learn.seq_len`` consecutive
steps of one env (``data.replay.SequenceStorage``), unrolled from their first step's stored memory, the first
``learn.burn_in`` steps only rebuilding it (R2D2, Kapturowski et al., 2019), every later step one row of the same
TD error. An update takes ``batch_size / seq_len`` sequences; its priorities are per sequence.

Measured on Simple Spread over seeds 0-2 at 200k env steps (BENCHMARKS.md, "Several agents"), the mean
evaluation over the last 20k: VDN -16.8, QMIX -17.2, IQL -18.6 (QMIX above IQL on each seed). QMIX's mixer reads
the state through a LayerNorm (``policy.model.state_norm``): without it ``Q_tot`` climbed past any return the
rewards allow from about 100k env steps on, whatever the loss, target updates, rate or discount, as the
hypernetworks' gain on the agents' values (``dQ_tot/dq_i``) grew from about 2 to about 20 and multiplied the bias
of the target's max; with it the gain stays near 7 and ``Q_tot`` near the returns.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

import gymnasium as gym
import torch
import torch.nn.functional as F

from data.obs import cat, to_device, to_plain
from data.parallel_envs import ALIVE_KEY, STATE_KEY
from engine.config import ConfigError
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from .accel import hot_path
from .agent_q_networks import AgentsQNetwork, QMixer, learnt_steps
from .agent_spaces import agent_rows
from .defaults import CollectParams, OnlineEvalParams
from .dqn import DQNOtherParams, DQNParams, QLearnParams, QValuePolicy
from .epsilon import EpsilonDraws, EpsilonParams
from .greedy import GreedyActor, NotExportableError
from .masks import action_mask, masked_argmax
from .optim import OptimizerStep
from .placement import DeviceGenerators
from .ppo_lstm import check_sequences

__all__ = ["QMixPolicy", "VDNPolicy", "IQLPolicy", "AgentsQNetwork", "QMixer", "QMixParams"]


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
    recurrent: bool = param(False)
    """EPyMARL's recurrent agent: the encoder (``hidden_size_list``), a GRU cell of ``hidden_size`` whose memory
    is each agent's history, then the values (``policies.agent_q_networks``); it learns from replayed sequences
    (``learn.seq_len``, ``learn.burn_in``). For agents that cannot see what they need in one observation."""
    hidden_size: int = param(64, rule="at_least_one")
    """The recurrent agent's memory width (EPyMARL's 64)."""


@dataclass
class QMixLearnParams(QLearnParams):
    """``policy.learn`` of QMIX, VDN and IQL."""

    update_per_collect: int = param(4, rule="at_least_one")
    """Learner updates after each collection of ``collect.n_sample`` transitions (env rows)."""
    seq_len: int = param(16, rule="at_least_one")
    """The recurrent agent (``model.recurrent``): consecutive steps of one env per replayed sequence, ``burn_in``
    included; an update takes ``batch_size / seq_len`` sequences (``data.replay.SequenceStorage``)."""
    burn_in: int = param(4, rule="not_negative")
    """The recurrent agent: a sequence's first steps, which only rebuild the memory from the one stored when they
    were collected (by weights since updated) and take no loss (R2D2's burn-in, Kapturowski et al., 2019)."""


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


@POLICY_REGISTRY.register("qmix")
class QMixPolicy(QValuePolicy):
    """QMIX: agents' Q values mixed monotonically by the state (``create_config.policy.type='qmix'``)."""

    pipeline = "off_policy"
    multi_agent = True
    algo = "QMIX"
    mixer = "qmix"
    default_env_steps = 1_000_000
    eager_acting = None
    #: with ``model.recurrent`` it learns off-policy from sequences (``OffPolicyShape``, ``data.replay.SequenceStorage``)
    replays_sequences = True
    Params = QMixParams
    params: QMixParams

    @classmethod
    def check_user_keys(cls, policy_type: str, user_policy: Mapping[str, Any]) -> None:
        """Its recurrent agent's keys (``model.hidden_size``, ``learn.seq_len``) are its own: nothing to refuse."""

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """DQN's checks, then the recurrent agent's: one-step transitions, a burn-in shorter than the sequence,
        and a batch of whole sequences.

        Raises:
            engine.config.ConfigError: naming the key and the fix.
        """
        super().check_config(cfg)
        policy = cfg["policy"]
        model, learn = policy["model"], policy["learn"]
        if not model.get("recurrent"):
            return
        check_sequences(model, learn)
        if int(policy.get("nstep", 1)) != 1:
            raise ConfigError(f"policy.nstep={policy['nstep']} with policy.model.recurrent=True: the recurrent agent "
                              f"replays one-step transitions in sequences (its memory follows every step); set "
                              f"policy.nstep=1")
        if int(learn["burn_in"]) >= int(learn["seq_len"]):
            raise ConfigError(f"policy.learn.burn_in={learn['burn_in']} leaves no step of a sequence of "
                              f"policy.learn.seq_len={learn['seq_len']} to learn from: give a burn_in below seq_len")
        envs, seq_len = int(cfg["env"]["collector_env_num"]), int(learn["seq_len"])
        capacity = int(policy["other"]["replay_buffer"]["replay_buffer_size"])
        collect = math.ceil(int(policy["collect"]["n_sample"]) / envs) * envs
        needed = max(2 * seq_len * envs, collect)
        if capacity < needed:
            raise ConfigError(f"policy.other.replay_buffer.replay_buffer_size={capacity} is too small for the "
                              f"recurrent agent's sequences: it must hold one collect ({collect} transitions) and "
                              f"2 x policy.learn.seq_len={seq_len} steps of each of env.collector_env_num={envs} "
                              f"envs; give at least {needed}")

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        self._agent_spaces(observation_space, action_space)
        model, learn = self.params.model, self.params.learn
        self.model = self.placement.build(lambda: AgentsQNetwork(
            self._obs_dim, self._state_dim, self._num_agents, self._action_dim, model.hidden_size_list,
            self.mixer, model.agent_id, model.feature_norm, model.mixing_embed_dim, model.hypernet_hidden,
            model.state_norm, model.hidden_size if model.recurrent else None))
        #: whether the agents act with a memory (``initial_state_on``) and learn from sequences
        self.recurrent = bool(model.recurrent)
        self._burn_in = int(learn.burn_in)
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
        obs = to_plain(to_device(obs, self.mode_devices[mode]))  # plain dicts: what torch.compile traces
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
        if self.recurrent:
            raise NotExportableError(f"policy {self.algo.lower()} with policy.model.recurrent=True acts from a memory "
                                     f"carried from step to step (its GRU state), which a module of observations "
                                     f"in, actions out cannot hold: it is not exported. Evaluate it with baton eval, "
                                     f"which carries the memory per env")
        return GreedyActor(self.model, discrete=True)

    # ---- the recurrent agent's acting --------------------------------------------------------------------
    def initial_state_on(self, mode: str) -> Optional[Callable[[int], torch.Tensor]]:
        """The recurrent agent's zero memory ``[num_envs, N, H]`` on ``mode``'s device (None: feed-forward)."""
        if not self.recurrent:
            return None
        device = self.mode_devices[mode]
        return lambda num_envs: self.model.initial_state(int(num_envs), device)

    def _greedy_from(self, obs: Any, state: Optional[torch.Tensor], mode: str) -> tuple:
        """Each agent's greedy action ``[B, N]`` from its memory, and the memory after the step."""
        if state is None:
            raise TypeError(f"policy {self.algo.lower()} with a recurrent agent acts with a memory: call its "
                            f"{mode}_mode.forward(obs, state=...) with {mode}_mode.initial_state(num_envs) at the "
                            f"episodes' start and the returned next_state after (data.env_loop.EnvLoop does this)")
        device = self.mode_devices[mode]
        obs = to_plain(to_device(obs, device))  # plain dicts: what torch.compile traces
        with torch.inference_mode():
            return self._greedy_step[mode](self.placement.actor(mode), obs, torch.as_tensor(state, device=device))

    @hot_path("collect", "eval", name="greedy_step")
    def _greedy_step(self, model: torch.nn.Module, obs: Any, memory: torch.Tensor) -> tuple:
        q, memory = model.step(obs, memory)
        return masked_argmax(q, action_mask(obs)), memory

    def _forward_collect(self, obs: Any, eps: float = 0.0, random: bool = False,
                         state: Optional[torch.Tensor] = None) -> Dict[str, Any]:
        """Epsilon-greedy per agent (``QValuePolicy._forward_collect``); the recurrent agent also returns the memory
        it acted from (``state``, stored with the step) and the next one (``next_state``, for the env loop)."""
        if not self.recurrent:
            return super()._forward_collect(obs, eps, random)
        greedy, next_state = self._greedy_from(obs, state, "collect")
        eps = 1.0 if random else eps
        mask = action_mask(obs) if eps > 0 else None
        action = self._explore(greedy, eps, None if mask is None else to_device(mask, greedy.device))
        return {"action": action, "state": torch.as_tensor(state, device=greedy.device), "next_state": next_state}

    def _forward_eval(self, obs: Any, state: Optional[torch.Tensor] = None) -> Dict[str, Any]:
        if not self.recurrent:
            return super()._forward_eval(obs)
        action, next_state = self._greedy_from(obs, state, "eval")
        return {"action": action, "next_state": next_state}

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        dev = self.device
        # plain dicts: what torch.compile traces (a tree breaks the graph at each key lookup, policies.normalisation)
        obs, next_obs = (to_plain(to_device(o, dev)) for o in (batch.obs, batch.next_obs))
        action = batch.action.to(dev).long()
        reward = batch.reward.to(dev).float()
        discount = batch.discount.to(dev).float()
        not_done = (~batch.terminated.to(dev)).float()
        truncated = batch.truncated.to(dev).bool()
        weight = batch.weight.to(dev).float() if self._use_weight else None
        if self.recurrent:  # sequences [B, L] (data.replay.SequenceStorage)
            memory, starts = batch.state.to(dev).float(), batch.episode_start.to(dev).bool()
            loss, q, target, priority = self._sequence_loss(obs, next_obs, action, memory, starts, reward, discount,
                                                            not_done, truncated, weight)
        else:
            loss, q, target, priority = self._loss(obs, next_obs, action, reward, discount, not_done, truncated,
                                                   weight)
        self._step(loss)
        return {"loss": loss.detach(), "q_value": q.mean(), "target_q": target.mean(), "priority": priority}

    @hot_path("learn")
    def _loss(self, obs: Any, next_obs: Any, action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
              not_done: torch.Tensor, truncated: torch.Tensor, weight: Optional[torch.Tensor]) -> tuple:
        """``(loss, q, target, priority)``: the team's TD error (module docstring); IQL's per agent, over the
        agents that acted. ``reward`` ``[B, N]`` (each agent's n-step return), ``discount``/``not_done`` ``[B]``."""
        n = len(action)
        q_all, q = self.learn_model(cat([obs, next_obs]), action)
        with torch.no_grad():
            next_target = self._target_model(next_obs)
        per_row, q, target, priority = self._td(q, q_all[n:].detach(), next_target, obs, next_obs, reward, discount,
                                                not_done, truncated)
        if weight is not None:
            per_row = per_row * weight
        return per_row.mean(), q, target, priority

    @hot_path("learn", name="sequence_loss")
    def _sequence_loss(self, obs: Any, next_obs: Any, action: torch.Tensor, memory: torch.Tensor,
                       starts: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor, not_done: torch.Tensor,
                       truncated: torch.Tensor, weight: Optional[torch.Tensor]) -> tuple:
        """The recurrent agent's ``(loss, q, target, priority)`` over sequences ``[B, L]`` unrolled from the stored
        ``memory`` ``[B, N, H]``: each step after the burn-in is one row of the TD error ``_td`` takes; a sequence's
        loss is its steps' mean, its priority R2D2's ``0.9 max + 0.1 mean`` of theirs."""
        k = self._burn_in
        next_online, q = self.learn_model(obs, action, memory=memory, episode_start=starts, next_obs=next_obs,
                                          burn_in=k)
        with torch.no_grad():
            next_target = self._target_model.sequence_values(obs, next_obs, memory, starts, k)[1].flatten(0, 1)
        per_row, q, target, priority = self._td(q, next_online.detach(), next_target,
                                                *(learnt_steps(v, k) for v in (obs, next_obs, reward, discount,
                                                                                not_done, truncated)))
        sequences = len(action)
        per_seq = per_row.view(sequences, -1).mean(1)
        if weight is not None:
            per_seq = per_seq * weight
        priority = priority.view(sequences, -1)
        return per_seq.mean(), q, target, 0.9 * priority.amax(1) + 0.1 * priority.mean(1)

    def _td(self, q: torch.Tensor, next_online: torch.Tensor, next_target: torch.Tensor, obs: Any, next_obs: Any,
            reward: torch.Tensor, discount: torch.Tensor, not_done: torch.Tensor, truncated: torch.Tensor) -> tuple:
        """``(per-row loss, q, target, per-row priority)`` of rows whose chosen values ``q`` are mixed already, from
        the next observations' online and target values ``[B, N, A]``."""
        alive = obs[ALIVE_KEY].float()
        with torch.no_grad():
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
        return per_row, q.detach(), target, priority


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

