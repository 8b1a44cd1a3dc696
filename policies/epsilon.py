"""Epsilon-greedy exploration of the discrete Q-learning policies: its config section (``policy.other.eps``,
``EpsilonParams``, whose schedule ``middleware.exploration`` follows over collected env steps) and the draws that
decide, on the acting device, which envs act at random and how (``EpsilonDraws``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

from engine.params import Params, param

from .masks import random_legal
from .placement import DeviceGenerators

__all__ = ["EpsilonParams", "EpsilonDraws"]


@dataclass
class EpsilonParams(Params):
    """``policy.other.eps``: the epsilon-greedy schedule over collected env steps (``middleware.exploration``)."""

    type: str = param("exp", choices=("exp", "linear"))
    """"exp": exponential decay from start to end; "linear": a straight line reaching end after ``decay``."""
    start: float = param(0.95, rule="unit_interval")
    """Epsilon at the first step."""
    end: float = param(0.05, rule="unit_interval")
    """Epsilon it decays to."""
    decay: int = param(10_000, rule="at_least_one")
    """The decay's length in env steps (exp: its time constant)."""


class EpsilonDraws:
    """Epsilon-greedy's random choices, drawn on the acting device ``ahead`` steps at a time.

    One uniform draw ``u`` per env and step decides both: the env explores when ``u < eps``, and then ``u / eps``
    is itself uniform on [0, 1), so it picks the random action. The draws of ``ahead`` steps are one call and
    their rows are spent one per step: on a CPU each operation on a handful of rows costs a few microseconds
    (five per step would cost as much as the Q-network's forward), on a GPU one kernel launch each. A new
    ``eps`` (the schedule moves once per collection) or a new row count (env groups) starts new draws.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> draws = EpsilonDraws(DeviceGenerators(), action_dim=3)
        >>> greedy = torch.zeros(1000, dtype=torch.long)
        >>> explored = draws.apply(greedy, eps=0.3)
        >>> 0.15 < float((explored != 0).float().mean()) < 0.25, sorted(explored.unique().tolist())  # 0.3 * 2/3
        (True, [0, 1, 2])
    """

    def __init__(self, generators: DeviceGenerators, action_dim: int, ahead: int = 32) -> None:
        self._generators = generators
        self._action_dim = int(action_dim)
        self._ahead = int(ahead)
        self._rows: Dict[tuple, List[tuple]] = {}  # (device, envs, eps) -> (explore, random action) per step

    def apply(self, action: torch.Tensor, eps: float, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``action`` with the rows that explore replaced by their random action (``action`` itself for an
        ``eps`` of 0); with a legal-action ``mask`` (``[B, A]`` bool) the random action is drawn among the legal
        ones (``policies.masks.random_legal``, from the same uniform draw)."""
        if eps <= 0:
            return action
        key = (action.device, action.shape[0], eps)
        rows = self._rows.get(key)
        if not rows:
            if key not in self._rows:
                self._rows = {k: v for k, v in self._rows.items() if k[2] == eps}  # an old eps's draws go
            rows = self._rows[key] = self._draw(action.device, action.shape[0], eps)
        explore, random_action, scaled = rows.pop()
        if mask is not None:
            random_action = random_legal(scaled, mask)
        return random_action if eps >= 1 else torch.where(explore, random_action, action)  # eps 1: every row

    def _draw(self, device: torch.device, envs: int, eps: float) -> List[tuple]:
        u = torch.rand((self._ahead, envs), generator=self._generators.on(device), device=device)
        # u * (A / eps) < A for u < eps; the modulo guards against the float rounding up to A
        random_action = (u * (self._action_dim / eps)).long() % self._action_dim
        scaled = u / eps  # uniform on [0, 1) where the env explores: a masked draw picks its legal action by it
        rows = list(zip((u < eps).unbind(0), random_action.unbind(0), scaled.unbind(0)))
        rows.reverse()  # spent from the end: the first step takes the first row
        return rows
