"""Recurrent PPO (``create_config.policy.type='ppo_lstm'``): PPO whose actor-critic carries a memory (an LSTM or
GRU cell, ``policies.models.RecurrentActorCritic``), for tasks whose state is not in one observation (CartPole
with its velocities hidden, ``cartpole_masked``).

The loss is PPO's own (``PPOPolicy._loss``, the clipped surrogate, value and entropy terms, advantages
normalised over every rank's minibatch); what differs is where the memory lives and how learning replays it:

- acting: ``collect_mode.forward(obs, state=...)`` / ``eval_mode.forward(obs, state=...)`` take each env's
  memory and return the next one (``next_state``); the env loop holds it per env and zeroes the rows of envs
  whose episode ended, terminated and truncated alike (``data.env_loop``). The collect forward also returns
  the memory it acted from (``state``), which the collector stores with each step.
- GAE (``middleware.gae``): ``V(next_obs)`` is taken from the memory after the step (``next_state``, before any
  reset), so a truncated episode bootstraps from its real final observation with the memory that saw it.
- learning: the ``[T, E]`` rollout is cut per env into sequences of ``learn.seq_len`` steps
  (``data.sequences``), each with the memory before its first step and the flags of episodes that begin
  inside it; a minibatch is ``learn.batch_size / seq_len`` whole sequences, shuffled as sequences, unrolled
  from their stored memories with the memory zeroed at each episode start: in the first epoch it reproduces
  the acting forward exactly (tests/policies/test_ppo_lstm.py). One forward and one backward per update, so
  DDP wraps it like any model (``baton check-ddp``).

Dict and Tuple observations and legal-action masks are PPO's (``policies.ppo``): each core's encoder starts with
the keys' encoders (``policy.model.encoders``), and a sequence's stored observations hold the masks its actions
were sampled under, which the loss's distribution uses.

Checkpoints hold the model and optimizer, as PPO's. The acting memory is not kept: a resumed run restarts its
envs' episodes (an env's state is not in a checkpoint either), and an episode starts from zero memory.
``baton export`` refuses this policy: its action depends on a memory that a one-input module cannot carry.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

import gymnasium as gym
import torch

from data.obs import Obs, first_leaf
from data.sequences import SequenceError, check_seq_len
from engine.config import ConfigError
from engine.params import param, section
from engine.registry import POLICY_REGISTRY

from .accel import hot_path
from .greedy import NotExportableError
from .masks import masked_argmax
from .models import RNN_TYPES, RecurrentActorCritic
from .ppo import PPOLearnParams, PPOModelParams, PPOParams, PPOPolicy

__all__ = ["PPOLSTMPolicy", "PPOLSTMParams", "PPOLSTMModelParams", "PPOLSTMLearnParams", "check_sequences"]


@dataclass
class PPOLSTMModelParams(PPOModelParams):
    """PPO-LSTM's ``model`` section: PPO's heads after a recurrent core (``policies.models.RecurrentActorCritic``)."""

    encoder_hidden_size_list: List[int] = param([64])
    """The MLP (a Nature CNN and an MLP for image observations; the keys' encoders and an MLP for Dict or Tuple
    observations) before the recurrent layer."""
    rnn_type: str = param("lstm", choices=RNN_TYPES)
    """The recurrent cell: "lstm" or "gru"."""
    hidden_size: int = param(64)
    """The recurrent layer's width, and so the memory carried per env (at least 1)."""
    shared_core: bool = param(False)
    """One encoder and recurrent layer for actor and critic (CleanRL); False: one each (SB3-contrib's default),
    so that the value loss cannot drown the policy gradient in their common clipped gradient norm."""


@dataclass
class PPOLSTMLearnParams(PPOLearnParams):
    """PPO-LSTM's ``learn`` section: PPO's, replayed as sequences (module docstring)."""

    seq_len: int = param(32)
    """Steps per learning sequence, unrolled from the memory stored before its first step (at least 1): it must
    divide the steps per env of a collect (``collect.n_sample / env.collector_env_num``), and ``batch_size``
    must be a multiple of it."""


@dataclass
class PPOLSTMParams(PPOParams):
    """PPO-LSTM's ``policy`` section: PPO's, with a recurrent model and sequences to learn from."""

    model: PPOLSTMModelParams = section(PPOLSTMModelParams, actor_head_hidden_size_list=[64],
                                        critic_head_hidden_size_list=[64])
    """The recurrent actor-critic: encoder, recurrent layer, then one hidden layer per head."""
    learn: PPOLSTMLearnParams = section(PPOLSTMLearnParams, batch_size=256)
    """PPO's updates, on minibatches of whole sequences (256 transitions: 8 sequences of 32 steps)."""


@POLICY_REGISTRY.register("ppo_lstm")
class PPOLSTMPolicy(PPOPolicy):
    """PPO with an LSTM (or GRU) actor-critic (module docstring)."""

    algo = "PPO-LSTM"
    recurrent = True

    Params = PPOLSTMParams
    params: PPOLSTMParams

    def __init__(self, cfg: Any, observation_space: Any, action_space: Any,
                 device: Optional[str | torch.device] = None) -> None:
        params = self.Params.of(cfg, "policy")  # the sequences checked before anything is built
        check_sequences(params.model.to_dict(), params.learn.to_dict())
        super().__init__(cfg, observation_space, action_space, device)

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """At compile time, before any env starts: the rules ``PPOLSTMParams`` declare (PPO's, and the recurrent
        cell's choices), then the recurrent model and the sequences, which must fit the steps per env of a collect
        (``check_sequences``)."""
        super().check_config(cfg)
        policy = cfg["policy"]
        envs = int(cfg["env"]["collector_env_num"])
        check_sequences(policy["model"], policy["learn"], math.ceil(int(policy["collect"]["n_sample"]) / envs), envs)

    def _make_model(self, obs: Union[tuple, gym.Space], action_dim: int) -> torch.nn.Module:
        model = self.params.model
        return RecurrentActorCritic(obs, action_dim, model.encoder_hidden_size_list, model.rnn_type,
                                    model.hidden_size, model.actor_head_hidden_size_list,
                                    model.critic_head_hidden_size_list, self.continuous, model.init_log_std,
                                    model.shared_core, encoders=model.encoders)

    # ---- memory --------------------------------------------------------------------------------------
    def initial_state_on(self, mode: str) -> Callable[[int], torch.Tensor]:
        device = self.mode_devices[mode]
        return lambda num_envs: self.model.initial_state(int(num_envs), device)

    def _state(self, state: Optional[torch.Tensor], mode: str) -> torch.Tensor:
        if state is None:
            raise TypeError(f"policy ppo_lstm acts with a memory: call its {mode}_mode.forward(obs, state=...) with "
                            f"{mode}_mode.initial_state(num_envs) at the episodes' start and the returned "
                            f"next_state after (data.env_loop.EnvLoop does this)")
        return torch.as_tensor(state, device=self.mode_devices[mode]).float()

    # ---- learn ---------------------------------------------------------------------------------------
    def _learn_inputs(self, batch: Any) -> tuple:
        """A batch of sequences ``[B, L]`` (``data.sequences``): observations, the memory before each sequence,
        and where episodes start inside them."""
        dev = self.device
        return self._obs(batch.obs), batch.state.to(dev).float(), batch.episode_start.to(dev).bool()

    def _rows(self, value: torch.Tensor) -> torch.Tensor:
        return value.flatten(0, 1)

    # ---- act -----------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward_collect(self, obs: Obs, state: Optional[torch.Tensor] = None,
                         random: bool = False) -> Dict[str, torch.Tensor]:
        """Sample an action from each env's memory ``state`` (among the legal ones, where the observations carry
        a mask); also return its log-prob, the state value, the memory it acted from (``state``, stored with the
        step) and the next one (``next_state``)."""
        state = self._state(state, "collect")
        obs = self._obs(obs, "collect")
        action, logp, value, next_state = self._sample_step(self.placement.actor("collect"), obs, state,
                                                            self._mask(obs))
        out = {"action": action, "logp": logp, "value": self.normalisation.denorm_value(value), "state": state,
               "next_state": next_state}
        if self.continuous:
            out["raw_action"], out["action"] = action, self._in_bounds(action)
        return out

    @torch.inference_mode()
    def _forward_eval(self, obs: Obs, state: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        """The most likely (legal) action from each env's memory; ``next_state`` for the loop to carry."""
        state = self._state(state, "eval")
        obs = self._obs(obs, "eval")
        action, next_state = self._mode_step(self.placement.actor("eval"), obs, state, self._mask(obs))
        return {"action": self._in_bounds(action) if self.continuous else action, "next_state": next_state}

    @torch.inference_mode()
    def _value(self, obs: Obs, state: Optional[torch.Tensor] = None) -> torch.Tensor:
        """V(obs) from the memory ``state`` each row had before it (GAE passes the steps' ``next_state``), on
        ``obs``'s device."""
        state = self._state(state, "collect")
        value = self._state_value_from(self.placement.actor("collect"), self._obs(obs, "collect"), state)
        return self.normalisation.denorm_value(value).to(first_leaf(obs).device)

    # the acting hot paths (compiled with policy.compile)
    @hot_path("collect", name="sample")
    def _sample_step(self, model: torch.nn.Module, obs: Obs, state: torch.Tensor,
                     mask: Optional[torch.Tensor] = None) -> tuple:
        head, value, next_state = model.step(obs, state)
        dist = self._dist(head, mask)
        action = dist.sample()
        return action, self._log_prob(dist, action), value, next_state

    @hot_path("eval", name="mode")
    def _mode_step(self, model: torch.nn.Module, obs: Obs, state: torch.Tensor,
                   mask: Optional[torch.Tensor] = None) -> tuple:
        head, _, next_state = model.step(obs, state)
        return (head[0] if self.continuous else masked_argmax(head, mask)), next_state

    @hot_path("collect", name="value")
    def _state_value_from(self, model: torch.nn.Module, obs: Obs, state: torch.Tensor) -> torch.Tensor:
        return model.value(obs, state)

    def greedy_module(self) -> torch.nn.Module:
        raise NotExportableError("policy ppo_lstm acts from a memory carried from step to step (its LSTM/GRU state), "
                                 "which a module of observations in, actions out cannot hold: it is not exported. "
                                 "Evaluate it with baton eval, which carries the memory per env")


def check_sequences(model: Mapping[str, Any], learn: Mapping[str, Any], steps: Optional[int] = None,
                    envs: Optional[int] = None) -> None:
    """The recurrent model and the learning sequences of a ``ppo_lstm`` config; with ``steps`` per env of a
    collect of ``envs`` envs, also that a sequence fits them (``data.sequences.check_seq_len``). (An unknown
    ``model.rnn_type`` is refused by the choices ``PPOLSTMModelParams`` declares.)

    Raises:
        ConfigError: ``model.hidden_size`` or ``learn.seq_len`` below 1, a ``seq_len`` that does not divide
            ``steps``, or a ``learn.batch_size`` that is not a whole number of sequences (names the nearest one
            that is).
    """
    if int(model["hidden_size"]) < 1:
        raise ConfigError(f"policy.model.hidden_size={model['hidden_size']} must be at least 1")
    seq_len, batch_size = int(learn["seq_len"]), int(learn["batch_size"])
    if seq_len < 1:
        raise ConfigError(f"policy.learn.seq_len={seq_len} must be at least 1 (steps per learning sequence)")
    if steps is not None:
        try:
            check_seq_len(steps, int(envs or 1), seq_len)
        except SequenceError as err:
            raise ConfigError(str(err)) from None
    if batch_size % seq_len:
        raise ConfigError(f"policy.learn.batch_size={batch_size} is not a whole number of sequences of "
                          f"policy.learn.seq_len={seq_len} steps: a recurrent minibatch is whole sequences; set "
                          f"batch_size to a multiple of seq_len (e.g. {max(1, batch_size // seq_len) * seq_len})")
