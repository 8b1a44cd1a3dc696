"""DQN with the usual improvements: double Q, dueling head, n-step targets, hard or soft target network,
optional prioritized replay with importance weights.

The algorithm, on one screen (``_loss``; ``_forward_learn`` drives it: batch in, backward, step)::

    q        = Q(obs)[action]
    a*       = argmax_a Q(next_obs)                 (double Q: the online net picks ...)
    target   = reward + discount * (1 - terminated) * Q_target(next_obs)[a*]   (... the target net rates)
    loss     = mean(weight * huber(q - target))

``reward`` and ``discount`` come from the n-step builder: the discounted window sum and gamma^(window
length); ``terminated`` cuts the bootstrap, truncation does not.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from engine.registry import POLICY_REGISTRY

from .base import Policy, common_config, evaluator_config, make_adam, resolve_shape, space_dims
from .greedy import GreedyActor
from .models import QNetwork

__all__ = ["DQNPolicy"]


class QValuePolicy(Policy):
    """What a discrete Q-learning policy shares, online (DQN) or offline (CQL): an online and a target
    Q network, greedy acting, the target update, and the learn state. A subclass builds ``_model``,
    ``_target_model``, ``_optimizer``, ``_target_update_freq``, ``_target_theta`` and ``_updates`` and
    writes its own update."""

    def _step(self, loss: torch.Tensor) -> None:
        """After the loss: backward, gradient clipping (``grad_clip_norm`` > 0), the optimizer step, the update
        count and the target network's update."""
        self._optimize(loss, self._grad_clip)
        self._update_target()

    def _update_target(self) -> None:
        if self._target_theta > 0:
            with torch.no_grad():
                torch._foreach_lerp_(list(self._target_model.parameters()), list(self._model.parameters()),
                                     self._target_theta)
        elif self._updates % self._target_update_freq == 0:
            self._target_model.load_state_dict(self._model.state_dict())

    # ---- act -------------------------------------------------------------------------------------
    def _greedy(self, obs: Any, mode: str) -> np.ndarray:
        model = self._actor(mode)
        device = self.mode_devices[mode]
        if device.type == "cpu" and not model.is_image:  # numpy acting, see QNetwork.numpy_greedy_action
            self._faster_than_hot_path(mode, "through numpy on the CPU (faster than torch for an MLP)")
            return model.numpy_greedy_action(np.asarray(obs))
        with torch.inference_mode():
            obs_t = torch.as_tensor(np.asarray(obs), device=device)
            action = self._hot("greedy", self._greedy_action, mode)(model, obs_t if model.is_image else obs_t.float())
            return action.cpu().numpy()

    def _greedy_action(self, model: torch.nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """The acting hot path: ``argmax_a Q(obs, a)``."""
        return model(obs).argmax(dim=1)

    def _forward_eval(self, obs: Any) -> Dict[str, Any]:
        return {"action": self._greedy(obs, "eval")}

    def greedy_module(self) -> torch.nn.Module:
        """``argmax_a Q(obs, a)`` (``Policy.greedy_module``)."""
        return GreedyActor(self._model, discrete=True, image=self._model.is_image)

    def _explore_on_device(self, obs: torch.Tensor, eps: float) -> torch.Tensor:
        """``_forward_collect``'s epsilon-greedy rule on tensors, on the collect device."""
        device = self.mode_devices["collect"]
        model = self._actor("collect")
        with torch.inference_mode():
            obs_t = obs.to(device)
            action = self._hot("greedy", self._greedy_action, "collect")(model, obs_t if model.is_image else
                                                                          obs_t.float())
            if eps > 0:
                u = torch.rand(len(action), generator=self._generator(device), device=device)
                random_action = (u * (self._action_dim / eps)).long() % self._action_dim
                action = torch.where(u < eps, random_action, action)
        return action

    # ---- state -----------------------------------------------------------------------------------
    _checkpointed = (("model", "_model"), ("target_model", "_target_model"))

    def _optimizer_settings(self) -> List[Dict[str, float]]:
        learn = self.cfg["learn"]
        return [dict(lr=learn["learning_rate"], weight_decay=learn["weight_decay"])]


@POLICY_REGISTRY.register("dqn")
class DQNPolicy(QValuePolicy):
    """Deep Q-learning for discrete actions (``create_config.policy.type='dqn'``)."""

    pipeline = "off_policy"
    default_env_steps = 500_000

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        return dict(
            **common_config(),
            priority=False,             # prioritized replay (sum tree)
            priority_IS_weight=False,   # weight the loss by importance weights
            discount_factor=0.99,
            nstep=1,
            random_collect_size=0,      # transitions collected before the first update
            model=dict(
                obs_shape=None,         # None: taken from the env's observation space
                action_shape=None,      # None: taken from the env's action space
                encoder_hidden_size_list=[128, 128, 64],
                dueling=True,
            ),
            learn=dict(
                update_per_collect=3,
                batch_size=64,
                learning_rate=1e-3,
                target_update_freq=100,  # hard update every N learner updates (when target_theta == 0)
                target_theta=0.0,        # > 0: soft (Polyak) update with this rate after every update
                double_q=True,
                ignore_done=False,       # treat termination as truncation (bootstrap anyway)
                td_loss="huber",         # "huber" or "mse"
                grad_clip_norm=0.0,      # > 0: clip the gradient norm
                weight_decay=0.0,
            ),
            collect=dict(n_sample=96),
            eval=evaluator_config(eval_freq=100),
            other=dict(
                eps=dict(type="exp", start=0.95, end=0.05, decay=10000),
                replay_buffer=dict(replay_buffer_size=100000, alpha=0.6, beta=0.4,
                                   device=None),  # None/"cpu", "learn", "cuda[:N]" (docs/performance.md)
            ),
        )

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        space_dims(observation_space, action_space, "dqn", continuous=False, images=True)
        model_cfg = cfg["model"]
        obs_shape = resolve_shape(model_cfg, "obs_shape", observation_space.shape, "dqn",
                                  f"observation shape {observation_space.shape}")
        action_shape = resolve_shape(model_cfg, "action_shape", int(action_space.n), "dqn",
                                     f"action space {action_space}")
        action_dim = int(action_shape if not isinstance(action_shape, list) else action_shape[0])
        self._init_model(lambda: QNetwork(obs_shape, action_dim, model_cfg["encoder_hidden_size_list"],
                                          model_cfg["dueling"]))
        self._target_model = copy.deepcopy(self._model).requires_grad_(False)
        learn = cfg["learn"]
        self._optimizer = make_adam(self._model.parameters(), **self._optimizer_settings()[0])
        self._target_update_freq = int(learn["target_update_freq"])
        self._target_theta = float(learn["target_theta"])
        self._double_q = bool(learn["double_q"])
        self._ignore_done = bool(learn["ignore_done"])
        self._use_weight = bool(cfg["priority"] and cfg["priority_IS_weight"])
        self._grad_clip = float(learn["grad_clip_norm"])
        if learn["td_loss"] not in ("huber", "mse"):
            raise ValueError(f"policy.learn.td_loss must be 'huber' or 'mse', got {learn['td_loss']!r}")
        self._td_loss = F.smooth_l1_loss if learn["td_loss"] == "huber" else F.mse_loss
        self._updates = 0
        self._action_dim = action_dim
        # its RNG is drawn from torch's, so torch.manual_seed still makes collection reproducible
        self._rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, ()).item()))

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        obs = batch.obs.to(self.device, non_blocking=True)
        next_obs = batch.next_obs.to(self.device, non_blocking=True)
        if not self._model.is_image:  # image frames stay uint8 until the CNN scales them
            obs, next_obs = obs.float(), next_obs.float()
        action = batch.action.to(self.device).long()
        reward = batch.reward.to(self.device).float()
        discount = batch.discount.to(self.device).float()
        not_done = (~batch.terminated.to(self.device)).float() if not self._ignore_done else torch.ones_like(reward)
        weight = batch.weight.to(self.device).float() if self._use_weight else None

        loss, q, target = self._hot("loss", self._loss, "learn")(obs, next_obs, action, reward, discount, not_done,
                                                                 weight)
        self._check_finite(loss, "DQN")
        self._step(loss)
        return {"loss": loss.detach(), "q_value": q.mean(), "target_q": target.mean(), "priority": (q - target).abs()}

    def _loss(self, obs: torch.Tensor, next_obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
              discount: torch.Tensor, not_done: torch.Tensor, weight: Optional[torch.Tensor]) -> tuple:
        """The learner's hot path (compiled with ``policy.compile``): ``(loss, q, target)``, q detached."""
        n = len(obs)
        # one forward of the online net over obs and next_obs: fewer kernel launches, one DDP forward
        q_both = self._learn_model(torch.cat([obs, next_obs]))
        q_all, q_next_online = q_both[:n], q_both[n:].detach()
        q = q_all.gather(1, action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            q_next_target = self._target_model(next_obs)
            if self._double_q:
                next_action = q_next_online.argmax(dim=1, keepdim=True)
                next_value = q_next_target.gather(1, next_action).squeeze(1)
            else:
                next_value = q_next_target.max(dim=1).values
            target = reward + discount * not_done * next_value

        elementwise = self._td_loss(q, target, reduction="none")
        if weight is not None:
            elementwise = elementwise * weight
        return elementwise.mean(), q.detach(), target

    # ---- act -------------------------------------------------------------------------------------
    def _forward_collect(self, obs: Any, eps: float = 0.0, random: bool = False) -> Dict[str, Any]:
        """Epsilon-greedy: each env acts at random with probability ``eps`` (always when ``random``, as
        during ``random_collect_size``). Returns numpy actions; for a tensor ``obs`` (a device env) a tensor
        on the collect device, drawn there with nothing read back to the host."""
        eps = 1.0 if random else eps
        if isinstance(obs, torch.Tensor):
            return {"action": self._explore_on_device(obs, eps)}
        action = self._greedy(obs, "collect")
        if eps > 0:
            # one uniform draw per env decides both: explore when u < eps, and then u / eps is itself
            # uniform on [0, 1), so it picks the random action
            u = self._rng.random(len(action))
            explore = u < eps
            if explore.any():
                # u * (A / eps) < A for u < eps; the modulo guards against the float rounding up to A
                random_action = (u * (self._action_dim / eps)).astype(np.int64) % self._action_dim
                action = np.where(explore, random_action, action)
        return {"action": action}
