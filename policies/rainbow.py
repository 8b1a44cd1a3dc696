"""Rainbow (Hessel et al., 2018): DQN with all six of its improvements on at once, registered as ``rainbow``.

It is ``policies.dqn.DQNPolicy`` with other defaults, not new code: the pieces are DQN's switchable options,
so any of them can be turned off here (``policy.model.noisy=False``, ``policy.model.distribution='none'``, ...)
and any combination works or is refused at start with the reason (``policies.dqn.check_q_head``,
``check_exploration``). What is on:

- double Q (``learn.double_q``): the online network's expected values pick the next action;
- prioritized replay (``priority``, ``priority_IS_weight``; alpha 0.5, beta 0.4 as in the paper, which anneals
  beta to 1: baton's sampler keeps it fixed), the priority being each sample's cross-entropy loss;
- dueling (``model.dueling``), over the atoms' logits;
- 3-step returns (``nstep``);
- the categorical C51 head (``model.distribution='categorical'``, 51 atoms);
- noisy linear layers (``model.noisy``, sigma0 0.5), so the epsilon schedule is zero (``other.eps``).

The support defaults to [-100, 100], not the paper's [-10, 10]: the paper's Atari rewards are clipped to
[-1, 1], where [-10, 10] covers the returns that matter; the defaults serve ``baton train --algo rainbow --env
ID`` on the classic-control tasks, whose rewards of up to 1 per step at discount 0.99 make returns up to
1 / (1 - 0.99) = 100 (CartPole) or down to -100 (Acrobot). The Atari config sets [-10, 10]. The other learning
settings are DQN's small-env defaults (Adam at 1e-3, batches of 64).
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.params import param, section
from engine.registry import POLICY_REGISTRY

from .dqn import DQNModelParams, DQNOtherParams, DQNParams, DQNPolicy

__all__ = ["RainbowPolicy", "RainbowParams"]


@dataclass
class RainbowParams(DQNParams):
    """Rainbow's ``policy`` section: DQN's keys with every improvement on."""

    priority: bool = param(True)
    priority_IS_weight: bool = param(True)
    nstep: int = param(3, rule="at_least_one")
    model: DQNModelParams = section(DQNModelParams, distribution="categorical", v_min=-100.0, v_max=100.0, noisy=True)
    other: DQNOtherParams = section(DQNOtherParams, eps=dict(type="linear", start=0.0, end=0.0, decay=1),
                                    replay_buffer=dict(alpha=0.5))
    """Noisy layers explore, so the epsilon schedule is zero; priorities with alpha 0.5 (the paper's)."""


@POLICY_REGISTRY.register("rainbow")
class RainbowPolicy(DQNPolicy):
    """Rainbow for discrete actions (``create_config.policy.type='rainbow'``): DQN with Rainbow's defaults."""

    Params = RainbowParams

    @property
    def _name(self) -> str:
        return "rainbow"
