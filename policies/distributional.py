"""Distributional returns for the Q-value family: the categorical (C51) and the quantile (QR-DQN) head's
arithmetic, as pure tensor functions (no model, no config).

- Categorical (Bellemare et al., 2017): the return of ``(s, a)`` is a distribution over ``n`` fixed atoms
  ``z_i = v_min + i * (v_max - v_min) / (n - 1)``. The target ``r + discount * Z(s', a*)`` moves the atoms
  off the grid; ``categorical_projection`` puts each moved atom's probability back on its two grid
  neighbours in proportion to closeness (and clamps what falls outside the support onto its ends). The loss
  is the cross-entropy between that projected target and the predicted distribution.
- Quantile (Dabney et al., 2018): the return is ``n`` quantiles at the midpoints ``tau_i = (2i + 1) / 2n``,
  with free locations; the target is ``r + discount * theta_j(s', a*)`` and the loss the quantile Huber loss
  (``quantile_huber_loss``), whose minimiser is the true quantiles.

The shapes: a batch of ``B`` samples, ``n`` atoms or quantiles; ``discount`` already includes termination
(``gamma^k * (1 - terminated)`` of an n-step window), so a terminated sample's target is its reward alone.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["support", "categorical_projection", "quantile_midpoints", "quantile_huber_loss"]


def support(v_min: float, v_max: float, n_atoms: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The categorical head's atoms: ``n_atoms`` evenly spaced values from ``v_min`` to ``v_max``.

    Examples:
        >>> support(-1.0, 1.0, 3)
        tensor([-1.,  0.,  1.])
    """
    return torch.linspace(float(v_min), float(v_max), int(n_atoms), device=device)


def categorical_projection(next_probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
                           v_min: float, v_max: float) -> torch.Tensor:
    """The distributional Bellman target ``r + discount * Z'`` projected onto the support of ``Z'``.

    Args:
        next_probs: ``[B, n]`` probabilities of the next state's chosen action (target network).
        reward: ``[B]`` (n-step discounted) rewards.
        discount: ``[B]``, zero where the episode terminated.
        v_min, v_max: the support's ends.

    Returns:
        ``[B, n]`` probabilities on the same support (rows sum to the rows of ``next_probs``).

    Examples:
        >>> categorical_projection(torch.tensor([[0.2, 0.5, 0.3]]), torch.tensor([0.5]), torch.tensor([0.5]), -1.0, 1.0)
        tensor([[0.0000, 0.4500, 0.5500]])
    """
    n = next_probs.shape[-1]
    z = support(v_min, v_max, n, next_probs.device)
    delta = (float(v_max) - float(v_min)) / (n - 1)
    moved = (reward.unsqueeze(-1) + discount.unsqueeze(-1) * z).clamp(float(v_min), float(v_max))
    position = (moved - float(v_min)) / delta                  # fractional index on the grid, in [0, n - 1]
    lower = position.floor().clamp(0, n - 1)
    upper_share = position - lower                              # the upper neighbour's share, in [0, 1)
    lower = lower.long()
    upper = (lower + 1).clamp(max=n - 1)                        # at the top atom its share is 0: nothing is lost
    target = torch.zeros_like(next_probs)
    target.scatter_add_(-1, lower, next_probs * (1.0 - upper_share))
    target.scatter_add_(-1, upper, next_probs * upper_share)
    return target


def quantile_midpoints(n_quantiles: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The quantile fractions the QR-DQN head estimates: ``(2i + 1) / (2n)`` for ``i < n``.

    Examples:
        >>> quantile_midpoints(4)
        tensor([0.1250, 0.3750, 0.6250, 0.8750])
    """
    return (torch.arange(int(n_quantiles), device=device, dtype=torch.float32) + 0.5) / int(n_quantiles)


def quantile_huber_loss(quantiles: torch.Tensor, target: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """The quantile Huber loss of each sample (Dabney et al., 2018, eq. 10): for predicted quantiles
    ``theta_i`` at ``tau_i`` and target samples ``T_j``, with ``u_ij = T_j - theta_i``,

        sum_i mean_j |tau_i - 1{u_ij < 0}| * huber_kappa(u_ij) / kappa

    (``kappa = 0``: the plain quantile (pinball) loss ``|tau_i - 1{u < 0}| * |u|``).

    Args:
        quantiles: ``[B, n]`` predicted quantiles (keep the gradient).
        target: ``[B, m]`` target samples (no gradient).
        kappa: the Huber threshold.

    Returns:
        ``[B]`` per-sample losses (the prioritized replay's priorities, and the loss's terms).

    Examples:
        >>> quantile_huber_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]]))
        tensor([0.9062])
    """
    u = target.unsqueeze(-2) - quantiles.unsqueeze(-1)          # [B, n, m]
    tau = quantile_midpoints(quantiles.shape[-1], quantiles.device).unsqueeze(-1)
    if kappa > 0:
        elementwise = F.huber_loss(quantiles.unsqueeze(-1).expand_as(u), target.unsqueeze(-2).expand_as(u),
                                   reduction="none", delta=kappa) / kappa
    else:
        elementwise = u.abs()
    weight = (tau - (u.detach() < 0).float()).abs()
    return (weight * elementwise).mean(-1).sum(-1)
