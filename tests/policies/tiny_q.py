"""An algorithm added from outside the package, the way docs/architecture.md ("Adding an algorithm") says: one
file, registered by name, found through ``create_config.policy.import_names`` (what an entry point does for
an installed package). Neural Q-learning without a target network (Riedmiller 2005's online form): one
network, the one-step TD target of its own next-state values, epsilon-greedy acting.

tests/policies/test_adding_an_algorithm.py trains it with the standard pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

import torch
import torch.nn.functional as F

from data.replay import ReplayBufferParams
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY
from policies.accel import hot_path
from policies.base import OnlineEvalParams, Policy, PolicyParams, space_dims
from policies.defaults import CollectParams
from policies.dqn import EpsilonParams
from policies.optim import OptimizerStep


@dataclass
class TinyQModel(Params):
    hidden: int = param(64, rule="at_least_one")
    """The hidden layer's width."""


@dataclass
class TinyQLearn(Params):
    update_per_collect: int = param(4, rule="at_least_one")
    """Updates after each collection."""
    batch_size: int = param(64, rule="at_least_one")
    """Transitions per update."""
    learning_rate: float = param(1e-3, rule="positive")
    """Adam's learning rate."""
    grad_clip: float = param(10.0, rule="not_negative")
    """The gradient norm's clip."""


@dataclass
class TinyQOther(Params):
    eps: EpsilonParams = section(EpsilonParams, type="linear", start=1.0, end=0.05, decay=3000)
    """Epsilon-greedy exploration (DQN's schedule, so the pipeline's exploration stage drives it)."""
    replay_buffer: ReplayBufferParams = section(ReplayBufferParams, replay_buffer_size=20000)
    """The replay buffer."""


@dataclass
class TinyQParams(PolicyParams):
    """The ``policy`` section of tiny_q: each key's default, rule and meaning in one place."""

    discount_factor: float = param(0.99, rule="unit_interval")
    """gamma."""
    nstep: int = param(1, rule="at_least_one")
    """n-step returns."""
    model: TinyQModel = section(TinyQModel)
    """The Q network."""
    learn: TinyQLearn = section(TinyQLearn)
    """The update."""
    collect: CollectParams = section(CollectParams)
    """Collection."""
    eval: OnlineEvalParams = section(OnlineEvalParams, evaluator=dict(eval_freq=50))
    """Evaluation."""
    other: TinyQOther = section(TinyQOther)
    """Exploration and replay."""


@POLICY_REGISTRY.register("tiny_q")
class TinyQPolicy(Policy):
    """Online neural Q-learning for discrete actions (``create_config.policy.type='tiny_q'``)."""

    pipeline = "off_policy"
    action_spaces = ("discrete",)
    Params = TinyQParams

    def __init__(self, cfg: Any, observation_space: Any, action_space: Any, device: Any = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        (obs_dim,), n_actions, _ = space_dims(observation_space, action_space, "tiny_q", continuous=False)
        hidden = self.params.model.hidden
        self.model = self.placement.build(lambda: torch.nn.Sequential(
            torch.nn.Linear(obs_dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, n_actions)))
        self.optimizer_step = OptimizerStep.adam([self.model.parameters()], self.optimizer_settings(), "tiny_q")
        self._gamma = self.params.discount_factor
        self._grad_clip = self.params.learn.grad_clip
        self._n_actions = n_actions

    def optimizer_settings(self) -> List[Dict[str, float]]:
        return [dict(lr=self.params.learn.learning_rate)]

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        b_obs, b_next_obs = batch.obs.to(self.device).float(), batch.next_obs.to(self.device).float()
        b_action = batch.action.to(self.device).long()
        b_bootstrap = batch.discount.to(self.device).float() * (~batch.terminated.to(self.device)).float()
        loss = self._loss(b_obs, b_next_obs, b_action, batch.reward.to(self.device).float(), b_bootstrap)
        self.optimizer_step.step(loss, self._grad_clip)
        return {"loss": loss.detach()}

    @hot_path("learn")
    def _loss(self, obs: torch.Tensor, next_obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
              bootstrap: torch.Tensor) -> torch.Tensor:
        q = self.learn_model(obs).gather(1, action[:, None])[:, 0]
        with torch.no_grad():
            target = reward + bootstrap * self.model(next_obs).max(dim=1).values
        return F.smooth_l1_loss(q, target)

    # ---- act -------------------------------------------------------------------------------------
    @hot_path("collect", "eval", name="greedy")
    def _greedy(self, model: torch.nn.Module, obs: torch.Tensor) -> torch.Tensor:
        return model(obs).argmax(dim=1)

    def _act(self, obs: Any, mode: str) -> torch.Tensor:
        with torch.inference_mode():
            obs_t = torch.as_tensor(obs, device=self.mode_devices[mode]).float()
            return self._greedy[mode](self.placement.actor(mode), obs_t)

    def _forward_collect(self, obs: Any, eps: float = 0.0, random: bool = False) -> Dict[str, Any]:
        action = self._act(obs, "collect")
        explore = torch.rand(len(action), device=action.device) < (1.0 if random else eps)
        uniform = torch.randint(self._n_actions, action.shape, device=action.device)
        return {"action": torch.where(explore, uniform, action)}

    def _forward_eval(self, obs: Any) -> Dict[str, Any]:
        return {"action": self._act(obs, "eval")}
