"""Torch models: the MLP torso and the (dueling) Q-network head used by value-based policies, with the Q
head's options (distributional atoms, noisy layers) and the actor-critic models.

Every model returns fp32 outputs, also when it runs under bf16 autocast (``policy.amp``): losses and the
sampling arithmetic that follows a forward stay in fp32 (``.float()`` of an fp32 tensor is the tensor itself:
nothing is added to the fp32 path).
"""
from __future__ import annotations

import functools
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from data.obs import Obs, first_leaf, map_leaves

from .distributional import support
from .encoders import build_torso
from .layers import Linear, NatureCNN, OutputLinear, _orthogonal, encoder, mlp  # noqa: F401  (as models had them)
from .noisy import NoisyLinear
from .spaces import is_structured

__all__ = ["mlp", "encoder", "NatureCNN", "QNetwork", "Q_DISTRIBUTIONS", "ActorCritic", "RecurrentActorCritic",
           "RNN_TYPES"]


Q_DISTRIBUTIONS = ("none", "categorical", "quantile")


class QNetwork(nn.Module):
    """Q(s, .) for discrete actions: a torso and a plain or dueling head, scalar or distributional.

    The dueling head (Wang et al., 2016) computes ``V(s) + A(s, a) - mean_a A(s, a)``; with atoms it does so
    per atom (over the logits of a categorical head, as Rainbow does, or over the quantiles).

    ``forward(obs)`` returns what the loss needs: ``[B, A]`` values (``distribution="none"``), ``[B, A, n]``
    log-probabilities over the atoms (``"categorical"``, normalised over the atoms) or ``[B, A, n]``
    quantiles (``"quantile"``). ``expectation(out)`` turns any of them into ``[B, A]`` Q-values, which acting
    maximises. ``noisy``: every linear layer is a ``policies.noisy.NoisyLinear`` with initial scale
    ``sigma0`` (Hessel et al. replace all of them; the convolutions of an image torso stay deterministic).

    Examples:
        >>> q = QNetwork(4, 2, [64, 64], dueling=True)
        >>> q(torch.zeros(3, 4)).shape
        torch.Size([3, 2])
        >>> c51 = QNetwork(4, 2, [64], distribution="categorical", n_atoms=51, v_min=-10.0, v_max=10.0, noisy=True)
        >>> out = c51(torch.zeros(3, 4))
        >>> out.shape, c51.expectation(out).shape
        (torch.Size([3, 2, 51]), torch.Size([3, 2]))
    """

    def __init__(self, obs_shape: Sequence[int] | int | gym.Space, action_dim: int, hidden_sizes: Sequence[int],
                 dueling: bool = True, distribution: str = "none", n_atoms: int = 1, v_min: float = 0.0,
                 v_max: float = 0.0, noisy: bool = False, sigma0: float = 0.5,
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        if not hidden_sizes:
            raise ValueError("policy.model.encoder_hidden_size_list must name at least one layer")
        if distribution not in Q_DISTRIBUTIONS:
            raise ValueError(f"policy.model.distribution must be one of {Q_DISTRIBUTIONS}, got {distribution!r}")
        linear: Linear = functools.partial(NoisyLinear, sigma0=sigma0) if noisy else nn.Linear
        self.multi_input = isinstance(obs_shape, gym.Space)  # a Dict/Tuple space: one encoder per key
        if self.multi_input:
            from .encoders import build_torso  # it builds on this module's torsos

            self.is_image = False
            self.torso, feat = build_torso(obs_shape, encoders, hidden_sizes, linear=linear)
        else:
            obs_shape = [obs_shape] if isinstance(obs_shape, int) else list(obs_shape)
            self.is_image = len(obs_shape) == 3
            self.torso, feat = encoder(obs_shape, hidden_sizes, linear=linear)
        self.dueling = dueling
        self.distribution = distribution
        self.n_atoms = 1 if distribution == "none" else int(n_atoms)
        self.v_min, self.v_max = float(v_min), float(v_max)
        self.noisy = noisy
        self.action_dim = int(action_dim)
        head: Linear = linear if noisy else OutputLinear  # fp32 under policy.amp (OutputLinear says why)
        if dueling:
            self.value = head(feat, self.n_atoms)
            self.advantage = head(feat, self.action_dim * self.n_atoms)
        else:
            self.head = head(feat, self.action_dim * self.n_atoms)

        self._host_layers: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None

    @property
    def host_acting(self) -> bool:
        """Whether ``host_greedy_action`` serves this network (a deterministic, scalar MLP)."""
        return not self.is_image and not self.multi_input and not self.noisy and self.distribution == "none"

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.torso(obs)
        if self.distribution == "none":
            if not self.dueling:
                return self.head(x).float()
            adv = self.advantage(x).float()
            return self.value(x).float() + adv - adv.mean(dim=-1, keepdim=True)
        shape = (*x.shape[:-1], self.action_dim, self.n_atoms)  # x: [B, features]; [features]: one obs by hand
        if self.dueling:
            adv = self.advantage(x).float().view(shape)
            out = self.value(x).float().unsqueeze(-2) + adv - adv.mean(dim=-2, keepdim=True)
        else:
            out = self.head(x).float().view(shape)
        return out.log_softmax(dim=-1) if self.distribution == "categorical" else out

    def expectation(self, out: torch.Tensor) -> torch.Tensor:
        """``[B, A]`` Q-values from ``forward``'s output: itself, the categorical mean, or the quantiles' mean."""
        if self.distribution == "none":
            return out
        if self.distribution == "categorical":
            return (out.exp() * support(self.v_min, self.v_max, self.n_atoms, out.device)).sum(-1)
        return out.mean(-1)

    def host_greedy_action(self, obs: torch.Tensor) -> torch.Tensor:
        """``argmax_a Q(obs, a)`` for float32 observations on the CPU, computed by numpy on the tensors' own
        memory (views, no copy: on the host a tensor's ``.numpy()`` reads nothing back), without the module.

        Why: acting on a handful of envs is a batch of ~8 rows, where the module's call (hooks, a dispatch per
        layer and per activation, autograd bookkeeping) costs more than its arithmetic: between two env steps
        about 60 us for a [128, 128, 64] dueling MLP, 25 us for one ``addmm`` per layer, 11 us for numpy's
        matmuls. With a dueling head, ``argmax_a Q = argmax_a A`` (V and the mean of A are the same for every
        action), so the value stream is skipped. The weights are views of the live parameters (optimizer steps
        and ``load_state_dict`` write in place), so they never go stale; valid only while the parameters are on
        the CPU (a device's tensors take the module's hot path).
        """
        if not self.host_acting:
            raise TypeError("host_greedy_action serves deterministic, scalar MLP Q-networks; image observations, "
                            "noisy layers and distributional heads act through the module")
        if self._host_layers is None:
            linears = [m for m in self.torso if isinstance(m, nn.Linear)]
            linears.append(self.advantage if self.dueling else self.head)
            self._host_layers = [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in linears]
        x = obs.numpy()
        for w, b in self._host_layers[:-1]:
            x = x @ w
            x += b
            np.maximum(x, 0.0, out=x)
        w, b = self._host_layers[-1]
        action = (x @ w + b).argmax(axis=-1)
        return torch.from_numpy(action) if action.ndim else torch.tensor(int(action))  # one of an unbatched obs


#: what an actor-critic is built for: a Box observation's shape (its size for vectors), or a Dict/Tuple space
ObsSpec = Union[Sequence[int], int, gym.Space]


def _actor_critic_torso(obs: ObsSpec, encoders: Optional[Mapping[str, Any]]) -> Tuple[nn.Module, int, type]:
    """The torso an actor-critic's actor and critic share, its output size, and the activation of their MLPs.

    Flat vectors: none (each MLP reads the observation; tanh); images: one Nature CNN (the Atari PPO setup;
    ReLU); a Dict or Tuple space: one ``MultiInputEncoder`` (its keys' encoders, ReLU inside) with tanh MLPs on
    its features, as SB3's ``MultiInputPolicy`` puts its ``net_arch`` on ``CombinedExtractor``."""
    if is_structured(obs):
        torso, out_dim = build_torso(obs, encoders, [])  # [] hidden: the MultiInputEncoder alone
        return torso, out_dim, nn.Tanh
    shape = [obs] if isinstance(obs, int) else list(obs)
    activation = nn.Tanh if len(shape) == 1 else nn.ReLU
    if len(shape) == 3:
        cnn = NatureCNN(*shape)
        return cnn, cnn.out_dim, activation
    return nn.Identity(), int(shape[0]), activation


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (tanh, orthogonal init, as in the PPO paper's implementation details).

    ``forward(obs)`` returns ``(logits, value)`` for discrete actions or ``((mean, log_std), value)`` for
    continuous ones: learning goes through ``forward`` so that a DDP wrapper sees every parameter used.

    ``obs_shape`` is a Box observation's shape, or a Dict/Tuple observation space: its observations (trees,
    ``data.obs``) go through one ``MultiInputEncoder`` shared by actor and critic (``encoders``: the per-key
    settings, ``policy.model.encoders``), as an image's go through one CNN (``_actor_critic_torso``).

    Examples:
        >>> ac = ActorCritic(4, 2, [64, 64], [64, 64], continuous=False)
        >>> logits, value = ac(torch.zeros(3, 4))
        >>> logits.shape, value.shape
        (torch.Size([3, 2]), torch.Size([3]))
        >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,)), "room": gym.spaces.Discrete(4)})
        >>> logits, value = ActorCritic(space, 2, [8], [8], continuous=False)({"pos": torch.zeros(3, 3),
        ...                                                                     "room": torch.zeros(3).long()})
        >>> logits.shape, value.shape
        (torch.Size([3, 2]), torch.Size([3]))
    """

    def __init__(self, obs_shape: ObsSpec, action_dim: int, actor_hidden: Sequence[int],
                 critic_hidden: Sequence[int], continuous: bool, init_log_std: float = 0.0,
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.continuous = continuous
        # images and Dict/Tuple observations: one torso shared by actor and critic; flat: separate MLPs
        self.shared, in_dim, activation = _actor_critic_torso(obs_shape, encoders)
        self.actor = mlp(in_dim, actor_hidden, activation)
        self.critic = mlp(in_dim, critic_hidden, activation)
        for layer in list(self.actor) + list(self.critic) + list(self.shared.modules()):
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                _orthogonal(layer, 2 ** 0.5)
        self.actor_head = _orthogonal(OutputLinear(actor_hidden[-1] if actor_hidden else in_dim, action_dim), 0.01)
        self.critic_head = _orthogonal(OutputLinear(critic_hidden[-1] if critic_hidden else in_dim, 1), 1.0)
        if continuous:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, obs: Obs):
        features = self.shared(obs)
        value = self.critic_head(self.critic(features)).squeeze(-1).float()
        out = self.actor_head(self.actor(features)).float()
        if self.continuous:
            return (out, self.log_std.expand_as(out)), value
        return out, value

    def value(self, obs: Obs) -> torch.Tensor:
        return self.critic_head(self.critic(self.shared(obs))).squeeze(-1).float()

    def actor_out(self, obs: Obs) -> torch.Tensor:
        """The actor's output alone (logits, or the mean for continuous actions): ``forward``'s first part
        without the critic, for a module that only acts (``policies.greedy``)."""
        return self.actor_head(self.actor(self.shared(obs))).float()


#: the recurrent cells ``RecurrentActorCritic`` builds, by ``policy.model.rnn_type``
RNN_TYPES = ("lstm", "gru")


def _recurrent_encoder(obs: ObsSpec, hidden: Sequence[int],
                       encoders: Optional[Mapping[str, Any]]) -> Tuple[nn.Module, int]:
    """The encoder before a recurrent layer and its output size: an MLP of ``hidden`` on flat vectors (tanh), the
    Nature CNN and an MLP on images, a Dict or Tuple space's ``MultiInputEncoder`` and an MLP on its features
    (ReLU, as the keys' encoders and the CNN)."""
    if is_structured(obs):
        return build_torso(obs, encoders, hidden, nn.ReLU)
    return encoder(obs, hidden, nn.Tanh if len(obs) == 1 else nn.ReLU)


class _RecurrentCore(nn.Module):
    """An encoder and one LSTM or GRU layer: observations and a memory ``[B, S, H]`` in, features and the next
    memory out."""

    def __init__(self, obs_shape: ObsSpec, encoder_hidden: Sequence[int], lstm: bool, hidden_size: int,
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.lstm = lstm
        self.encoder, in_dim = _recurrent_encoder(obs_shape, encoder_hidden, encoders)
        self.rnn = (nn.LSTM if lstm else nn.GRU)(in_dim, hidden_size, batch_first=True)
        for layer in self.encoder.modules():
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                _orthogonal(layer, 2 ** 0.5)
        for name, param in self.rnn.named_parameters():  # CleanRL's LSTM init: orthogonal weights, zero biases
            if "weight" in name:
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)

    def encode(self, obs: Obs) -> torch.Tensor:
        """``obs [B, L, *obs_shape]`` (a tree: every leaf ``[B, L, ...]``) -> ``[B, L, in]``."""
        if not isinstance(obs, torch.Tensor):  # a tree, or its plain dicts (policies.normalisation.model_obs)
            batch, length = first_leaf(obs).shape[:2]
            rows = map_leaves(lambda leaf: leaf.reshape((batch * length,) + tuple(leaf.shape[2:])), obs)
            return self.encoder(rows).reshape(batch, length, -1)
        batch, length = obs.shape[:2]
        return self.encoder(obs.reshape((batch * length,) + tuple(obs.shape[2:]))).reshape(batch, length, -1)

    def run(self, x: torch.Tensor, state: torch.Tensor) -> tuple:
        """The recurrent layer over ``x [B, T, in]`` from ``state [B, S, H]``: ``(outputs [B, T, H], next state)``."""
        if self.lstm:
            out, (h, c) = self.rnn(x, (state[:, 0].unsqueeze(0).contiguous(), state[:, 1].unsqueeze(0).contiguous()))
            return out, torch.stack((h[0], c[0]), 1)
        out, h = self.rnn(x, state[:, 0].unsqueeze(0).contiguous())
        return out, h[0].unsqueeze(1)


class RecurrentActorCritic(nn.Module):
    """An actor-critic with a memory: an encoder and one LSTM or GRU layer (a core), and actor and critic heads on
    its output. By default the actor and the critic each have their own core, as in SB3-contrib's RecurrentPPO:
    one shared core (``shared_core``, CleanRL's ``ppo_atari_lstm.py``) lets the value loss, whose scale is the
    returns', drown the policy's gradient in their common clipped norm.

    The memory of a batch of envs is one tensor ``[B, S, H]``: for each core, 2 rows (h, c) for an LSTM or 1 (h)
    for a GRU (actor's first); zeros at an episode's start (``initial_state``).

    - ``step(obs, state) -> (head, value, next_state)``: one time step for ``B`` envs (acting);
    - ``forward(obs, state, episode_start) -> (head, value)``: the unroll of ``B`` sequences of ``L`` steps
      (``obs [B, L, *obs_shape]``, ``state [B, S, H]`` the memory before each sequence's first step,
      ``episode_start [B, L]`` True where an episode begins inside a sequence), with outputs for the ``B * L``
      steps in row order ``b * L + t``. The memory is zeroed before a step whose ``episode_start`` is set, as
      acting zeroed it there, so the unroll reproduces acting exactly. Learning goes through ``forward``: one
      forward per update for a DDP wrapper, every parameter used.

    ``obs_shape`` may be a Dict or Tuple observation space: each core's encoder is then its ``MultiInputEncoder``
    (``encoders``: ``policy.model.encoders``) and an MLP of ``encoder_hidden``, and observations are trees whose
    leaves are ``[B, ...]`` (acting) or ``[B, L, ...]`` (the unroll).

    The unroll runs the recurrent layers over whole stretches of time in one call (torch's fused LSTM/GRU, ~5x
    faster on a CPU than a Python loop over time steps), and splits the sequences only at the time steps where
    some sequence starts an episode, where the memory of those rows is zeroed. Finding those steps reads
    ``episode_start`` on the host: one small wait per update on a GPU.

    Examples:
        >>> net = RecurrentActorCritic(2, 2, [8], "lstm", 16, [8], [8], continuous=False)
        >>> logits, value, state = net.step(torch.zeros(3, 2), net.initial_state(3))
        >>> logits.shape, value.shape, state.shape
        (torch.Size([3, 2]), torch.Size([3]), torch.Size([3, 4, 16]))
        >>> logits, value = net(torch.zeros(3, 5, 2), net.initial_state(3), torch.zeros(3, 5, dtype=torch.bool))
        >>> logits.shape, value.shape
        (torch.Size([15, 2]), torch.Size([15]))
    """

    def __init__(self, obs_shape: Sequence[int] | int, action_dim: int, encoder_hidden: Sequence[int], rnn_type: str,
                 hidden_size: int, actor_hidden: Sequence[int], critic_hidden: Sequence[int], continuous: bool,
                 init_log_std: float = 0.0, shared_core: bool = False,
                 encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ValueError(f"policy.model.rnn_type={rnn_type!r} is not a recurrent layer baton builds: choose one "
                             f"of {', '.join(RNN_TYPES)}")
        if int(hidden_size) < 1:
            raise ValueError(f"policy.model.hidden_size must be >= 1, got {hidden_size}")
        self.continuous = continuous
        self.hidden_size = int(hidden_size)
        if not is_structured(obs_shape):
            obs_shape = [obs_shape] if isinstance(obs_shape, int) else list(obs_shape)
        lstm = rnn_type == "lstm"
        self.cores = nn.ModuleList(_RecurrentCore(obs_shape, encoder_hidden, lstm, self.hidden_size, encoders)
                                   for _ in range(1 if shared_core else 2))
        self.core_rows = 2 if lstm else 1
        self.actor = mlp(self.hidden_size, actor_hidden, nn.Tanh)
        self.critic = mlp(self.hidden_size, critic_hidden, nn.Tanh)
        for layer in list(self.actor) + list(self.critic):
            if isinstance(layer, nn.Linear):
                _orthogonal(layer, 2 ** 0.5)
        self.actor_head = _orthogonal(OutputLinear(actor_hidden[-1] if actor_hidden else self.hidden_size, action_dim),
                                      0.01)
        self.critic_head = _orthogonal(OutputLinear(critic_hidden[-1] if critic_hidden else self.hidden_size, 1), 1.0)
        if continuous:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def initial_state(self, batch: int, device: Optional[torch.device] = None) -> torch.Tensor:
        """The memory at an episode's start: zeros ``[batch, S, H]``."""
        return torch.zeros(batch, self.core_rows * len(self.cores), self.hidden_size, device=device)

    def _unroll(self, xs: list, state: torch.Tensor) -> tuple:
        """Every core over its encoded inputs ``xs[i] [B, T, in]`` from ``state``: features of the actor and the
        critic ``[B, T, H]`` each, and the next memory."""
        rows, outs, states = self.core_rows, [], []
        for i, (core, x) in enumerate(zip(self.cores, xs)):
            out, next_state = core.run(x, state[:, i * rows:(i + 1) * rows])
            outs.append(out)
            states.append(next_state)
        return outs[0], outs[-1], torch.cat(states, 1)

    def _heads(self, actor_features: torch.Tensor, critic_features: torch.Tensor) -> tuple:
        value = self.critic_head(self.critic(critic_features)).squeeze(-1).float()
        out = self.actor_head(self.actor(actor_features)).float()
        if self.continuous:
            return (out, self.log_std.expand_as(out)), value
        return out, value

    def step(self, obs: Obs, state: torch.Tensor) -> tuple:
        steps = obs.unsqueeze(1) if isinstance(obs, torch.Tensor) else map_leaves(lambda leaf: leaf.unsqueeze(1), obs)
        xs = [core.encode(steps) for core in self.cores]
        actor, critic, next_state = self._unroll(xs, state)
        head, value = self._heads(actor[:, 0], critic[:, 0])
        return head, value, next_state

    def value(self, obs: Obs, state: torch.Tensor) -> torch.Tensor:
        """V of ``obs`` for envs whose memory before it is ``state``."""
        return self.step(obs, state)[1]

    def forward(self, obs: Obs, state: torch.Tensor, episode_start: torch.Tensor) -> tuple:
        batch, length = episode_start.shape[:2]
        xs = [core.encode(obs) for core in self.cores]
        keep = (~episode_start.bool()).to(state.dtype).reshape(batch, length, 1, 1)
        # the stretches of time between the steps where some sequence starts an episode
        cuts = [0] + [t for t in episode_start.bool().any(0).nonzero().flatten().tolist() if t > 0] + [length]
        actor, critic = [], []
        for lo, hi in zip(cuts[:-1], cuts[1:]):  # the memory zeroed where an episode starts at lo
            a, c, state = self._unroll([x[:, lo:hi] for x in xs], state * keep[:, lo])
            actor.append(a)
            critic.append(c)
        return self._heads(torch.cat(actor, 1).reshape(batch * length, -1),
                           torch.cat(critic, 1).reshape(batch * length, -1))
