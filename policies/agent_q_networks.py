"""The networks of value decomposition (``policies.qmix``): the agents' shared Q network, feed-forward or
recurrent, and QMIX's monotonic mixer.

The recurrent agent is EPyMARL's (Papoudakis et al., 2021): an encoder, a GRU cell whose memory is each agent's
history, and a linear head, ``q_t, h_t = head(h_t), GRU(enc(o_t), h_{t-1})``. It learns from replayed sequences
(``data.replay.SequenceStorage``) unrolled from the memory stored with their first step; ``sequence_values`` gives
each step's values and, for the TD target, the values of each step's next observation from the memory after the
step, ``head(GRU(enc(o'_t), h_t))``: one batched GRU call for the whole sequence, equal to the next step's own
values wherever the episode goes on, and right at an episode's end too, where ``o'_t`` is the final observation
that no step acts on.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from data.obs import map_leaves
from data.parallel_envs import ALIVE_KEY, OBS_KEY, STATE_KEY

from .agent_spaces import with_agent_ids
from .models import OutputLinear, mlp

__all__ = ["AgentsQNetwork", "QMixer", "MIXERS", "learnt_steps"]

MIXERS = ("qmix", "vdn", "none")


def learnt_steps(value: Any, burn_in: int) -> Any:
    """The steps of sequences ``[B, L, ...]`` after the first ``burn_in``, as rows ``[B * (L - burn_in), ...]``
    (every leaf of a tree alike): one row per step the TD error is taken on."""
    return map_leaves(lambda leaf: leaf[:, burn_in:].flatten(0, 1), value)


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
    wrapper sees per update. With ``recurrent_size`` the agent carries a GRU memory of that width: it acts through
    ``step`` and learns through ``forward(obs, action, memory=...)`` over sequences (``sequence_values``).

    Examples:
        >>> from data.obs import from_plain
        >>> net = AgentsQNetwork(18, 54, 3, 5, [64], mixer="qmix")
        >>> obs = from_plain({"obs": torch.zeros(4, 3, 18), "alive": torch.ones(4, 3), "state": torch.zeros(4, 54)})
        >>> q, team = net(obs, torch.zeros(2, 3, dtype=torch.long))
        >>> q.shape, team.shape
        (torch.Size([4, 3, 5]), torch.Size([2]))
        >>> rnn = AgentsQNetwork(18, 54, 3, 5, [64], mixer="qmix", recurrent_size=32)
        >>> q, memory = rnn.step(obs, rnn.initial_state(4, torch.device("cpu")))
        >>> q.shape, memory.shape
        (torch.Size([4, 3, 5]), torch.Size([4, 3, 32]))
    """

    def __init__(self, obs_dim: int, state_dim: Optional[int], num_agents: int, action_dim: int,
                 hidden: List[int], mixer: str = "qmix", agent_id: bool = True, feature_norm: bool = True,
                 embed_dim: int = 32, hypernet_hidden: int = 64, state_norm: bool = True,
                 recurrent_size: Optional[int] = None) -> None:
        super().__init__()
        self.num_agents, self.agent_id, self.mixer_type = num_agents, agent_id, mixer
        self.recurrent_size = recurrent_size
        width = obs_dim + (num_agents if agent_id else 0)
        encoded = hidden[-1] if hidden else width
        encoder = [*([nn.LayerNorm(width)] if feature_norm else []), *mlp(width, hidden, nn.ReLU)]
        if recurrent_size:
            self.encoder = nn.Sequential(*encoder)
            self.rnn = nn.GRUCell(encoded, recurrent_size)
            self.head = OutputLinear(recurrent_size, action_dim)
        else:
            self.agent = nn.Sequential(*encoder, OutputLinear(encoded, action_dim))
        self.mixer = (QMixer(num_agents, state_dim, embed_dim, hypernet_hidden, state_norm) if mixer == "qmix"
                      else None)

    def _inputs(self, obs: Any) -> torch.Tensor:
        x = obs[OBS_KEY].float()
        return with_agent_ids(x, self.num_agents) if self.agent_id else x

    def agent_values(self, obs: Any) -> torch.Tensor:
        """Each agent's action values ``[..., N, A]`` (the feed-forward agent)."""
        return self.agent(self._inputs(obs)).float()

    # ---- the recurrent agent -----------------------------------------------------------------------------
    def initial_state(self, rows: int, device: torch.device) -> torch.Tensor:
        """The memory an episode starts from: zeros ``[rows, N, H]``."""
        return torch.zeros(rows, self.num_agents, self.recurrent_size, device=device)

    def _cell(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """One GRU step of encoded inputs ``[..., N, F]`` from ``memory`` ``[..., N, H]``, for any leading dims."""
        lead = x.shape[:-1]
        return self.rnn(x.reshape(-1, x.shape[-1]), memory.reshape(-1, memory.shape[-1])).view(*lead, -1)

    def step(self, obs: Any, memory: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Acting: each agent's values ``[B, N, A]`` and its memory after the step ``[B, N, H]``."""
        memory = self._cell(self.encoder(self._inputs(obs)), memory)
        return self.head(memory).float(), memory

    def sequence_values(self, obs: Any, next_obs: Any, memory: torch.Tensor, episode_start: torch.Tensor,
                        burn_in: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
        """Over sequences ``[B, L]`` unrolled from ``memory`` ``[B, N, H]`` (the memory before their first step,
        zeroed where ``episode_start``): the values of each step after the first ``burn_in`` (which only warm
        the memory, without gradients), and of each such step's next observation (module docstring), both
        ``[B, L - burn_in, N, A]``."""
        x = self.encoder(self._inputs(obs))                                   # [B, L, N, F]
        keep = (~episode_start.bool()).to(x.dtype).view(*episode_start.shape, 1, 1)
        after: List[torch.Tensor] = []
        for t in range(x.shape[1]):
            memory = memory * keep[:, t]
            if t < burn_in:
                with torch.no_grad():
                    memory = self._cell(x[:, t], memory)
            else:
                memory = self._cell(x[:, t], memory)
                after.append(memory)
        hidden = torch.stack(after, 1)                                        # [B, L', N, H]
        next_x = self.encoder(self._inputs(map_leaves(lambda leaf: leaf[:, burn_in:], next_obs)))
        return self.head(hidden).float(), self.head(self._cell(next_x, hidden)).float()

    # ---- the team -----------------------------------------------------------------------------------------
    def mix(self, chosen: torch.Tensor, counts: torch.Tensor, state: Optional[torch.Tensor]) -> torch.Tensor:
        """The agents' chosen values ``[B, N]``, those not in ``counts`` zeroed, as the team's ``[B]`` (IQL: as they
        are); ``state`` ``[B, S]`` (QMIX's hypernetworks)."""
        chosen = chosen * counts.to(chosen.dtype)
        if self.mixer_type == "vdn":
            return chosen.sum(-1)
        if self.mixer_type == "qmix":
            return self.mixer(chosen, state.float())
        return chosen

    def forward(self, obs: Any, action: Optional[torch.Tensor] = None, memory: Optional[torch.Tensor] = None,
                episode_start: Optional[torch.Tensor] = None, next_obs: Any = None, burn_in: int = 0) -> Any:
        """Feed-forward: ``(q [B, N, A], team [b])`` as the class docstring says. Recurrent (``memory`` given):
        ``obs``/``next_obs``/``action`` are sequences ``[B, L]``; returns the next observations' values
        ``[B * L', N, A]`` and the team's value of ``action`` ``[B * L']``, one row per learnt step (the steps
        after ``burn_in``)."""
        if memory is not None:
            q, next_q = self.sequence_values(obs, next_obs, memory, episode_start, burn_in)
            chosen = q.flatten(0, 1).gather(-1, learnt_steps(action, burn_in).unsqueeze(-1)).squeeze(-1)
            state = learnt_steps(obs[STATE_KEY], burn_in) if self.mixer is not None else None
            return next_q.flatten(0, 1), self.mix(chosen, learnt_steps(obs[ALIVE_KEY], burn_in), state)
        q = self.agent_values(obs)
        if action is None:
            return q
        rows = len(action)
        chosen = q[:rows].gather(-1, action.unsqueeze(-1)).squeeze(-1)
        state = obs[STATE_KEY][:rows] if self.mixer is not None else None
        return q, self.mix(chosen, obs[ALIVE_KEY][:rows], state)
