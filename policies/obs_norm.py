"""Observation normalisation (``policy.obs_norm=True``): a running mean and variance of the observations a
policy collects, and ``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` before every network.

The algorithm is gymnasium's ``NormalizeObservation`` (its ``RunningMeanStd``: batch moments merged with the
parallel-variance formula of Chan et al.; ``eps`` 1e-8 under the square root) with the clip of SB3's
``VecNormalize`` and CleanRL's PPO (10). Why it lives in the policy and not in an env wrapper:

- a wrapper keeps one set of statistics per env process, which nothing checkpoints: a resumed run, ``baton
  eval`` and ``baton export`` would start from other statistics than the ones the networks learned with;
- under DDP each rank's wrapper would normalise with its own statistics, so the ranks would train one network
  on differently scaled inputs; here every rank merges its new observations into the same statistics
  (``engine.distributed.allreduce_moments``: one all-reduce per iteration), so all normalise alike;
- the replay buffer keeps the raw observations, normalised at each update with the current statistics (as
  SB3 does), and the evaluator acts with the statistics frozen (it never updates them).

When the statistics move (``RunningObsNorm.merge``): once per pipeline iteration, after the learner, on every
rank at once. Within an iteration they are constant, so PPO's learner sees its rollout normalised exactly as
the collector saw it (the ratio of the first epoch is 1), and what was collected since the last merge
(``observe``) waits in per-rank pending moments that no checkpoint needs (they are merged before it is written).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from engine.distributed import allreduce_moments

__all__ = ["RunningObsNorm", "FrozenObsNorm", "ObsNormMismatchError", "combine_moments"]

#: the state-dict keys of the statistics (a checkpoint without them was written without policy.obs_norm)
STAT_KEYS = ("count", "mean", "m2")


class ObsNormMismatchError(ValueError):
    """A checkpoint's observation statistics do not fit the config (present without ``policy.obs_norm`` or
    missing with it); the message names the fix."""


def combine_moments(n_a: torch.Tensor, mean_a: torch.Tensor, m2_a: torch.Tensor, n_b: torch.Tensor,
                    mean_b: torch.Tensor, m2_b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The count, mean and sum of squared deviations (M2) of two sets of data joined (Chan et al.'s parallel
    formula), in tensors: no read to the host, and an empty set (count 0) leaves the other unchanged.

    Examples:
        >>> x = torch.arange(6.0, dtype=torch.float64)
        >>> a, b = x[:2], x[2:]
        >>> n, mean, m2 = combine_moments(torch.tensor(2.0, dtype=torch.float64), a.mean(), ((a - a.mean()) ** 2).sum(),
        ...                               torch.tensor(4.0, dtype=torch.float64), b.mean(), ((b - b.mean()) ** 2).sum())
        >>> float(n), float(mean), float(m2 / n), float(x.var(unbiased=False))
        (6.0, 2.5, 2.9166666666666665, 2.9166666666666665)
    """
    n = n_a + n_b
    weight_b = n_b / n.clamp_min(1e-300)  # 0 when both are empty
    delta = mean_b - mean_a
    return n, mean_a + delta * weight_b, m2_a + m2_b + delta * delta * n_a * weight_b


class RunningObsNorm(nn.Module):
    """The statistics (float64 buffers ``count``, ``mean``, ``m2``: checkpointed with the policy) and the
    normalisation of one observation shape (module docstring).

    Args:
        shape: one observation's shape (a flat Box: ``(obs_dim,)``).
        clip: normalised values are clipped to ``[-clip, clip]`` (> 0).
        eps: added to the variance under the square root (gymnasium's 1e-8).
        var_floor: the least variance used once something is merged (PPO's ``value_norm``: 1e-2, as MAPPO's
            ValueNorm clamps it), so that values that barely varied yet are not blown up.
        name: the config key of ``clip``, for the error a bad value gets.

    Examples:
        >>> norm = RunningObsNorm((2,))
        >>> norm.observe(torch.tensor([[0.0, 10.0], [2.0, 30.0]]))
        >>> norm(torch.tensor([[1.0, 20.0]]))    # nothing merged yet: the identity
        tensor([[ 1., 10.]])
        >>> norm.merge()
        >>> norm(torch.tensor([[1.0, 20.0], [2.0, 30.0]]))
        tensor([[0., 0.],
                [1., 1.]])
    """

    def __init__(self, shape: Sequence[int], clip: float = 10.0, eps: float = 1e-8,
                 name: str = "policy.obs_norm_clip", var_floor: float = 0.0) -> None:
        super().__init__()
        if not (isinstance(clip, (int, float)) and clip > 0 and clip != float("inf")):
            raise ValueError(f"{name} must be a finite number > 0 (normalised values are clipped to [-clip, clip]; "
                             f"10 is SB3's and CleanRL's), got {clip!r}")
        shape = tuple(int(d) for d in shape)
        self.clip, self.eps, self.var_floor = float(clip), float(eps), float(var_floor)
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(shape, dtype=torch.float64))
        self._pending: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None  # observed, not merged
        self._frozen: Dict[torch.device, Tuple[torch.Tensor, torch.Tensor]] = {}  # float32 mean and std, per device

    # ---- collection: observe, then merge at the iteration's end --------------------------------------
    @torch.no_grad()
    def observe(self, obs: Any) -> None:
        """Add a batch of collected observations (rows) to this rank's pending moments; nothing changes the
        normalisation before ``merge``. On the statistics' device, without a read to the host."""
        x = torch.as_tensor(obs).to(self.mean.device, torch.float64).reshape(-1, *self.mean.shape)
        n = torch.full((), float(len(x)), dtype=torch.float64, device=x.device)  # a fill, not a copy from the host
        mean = x.mean(0)
        batch = (n, mean, ((x - mean) ** 2).sum(0))
        self._pending = batch if self._pending is None else combine_moments(*self._pending, *batch)

    @torch.no_grad()
    def merge(self) -> None:
        """Merge every rank's pending moments into the statistics (under DDP one all-reduce, which every rank
        must call at the same point: ``pipelines`` does it once per iteration, after the learner)."""
        if self._pending is None:
            zero = self.count.new_zeros(())
            self._pending = (zero, self.mean.new_zeros(self.mean.shape), self.m2.new_zeros(self.m2.shape))
        n, mean, m2 = allreduce_moments(*self._pending, center=self.mean)
        self._pending = None
        count, mean, m2 = combine_moments(self.count, self.mean, self.m2, n, mean, m2)
        self.count.copy_(count)
        self.mean.copy_(mean)
        self.m2.copy_(m2)
        self._frozen.clear()

    # ---- normalising ---------------------------------------------------------------------------------
    def var(self) -> torch.Tensor:
        """The population variance of what was merged, at least ``var_floor`` (1 before anything was: the
        identity)."""
        merged = (self.m2 / self.count.clamp_min(1e-300)).clamp_min(self.var_floor)
        return torch.where(self.count > 0, merged, torch.ones_like(self.m2))

    def _on(self, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        """float32 mean and std on ``device``, made once per merge (a copy per device, not per call)."""
        frozen = self._frozen.get(device)
        if frozen is None:
            frozen = self._frozen[device] = (self.mean.to(device, torch.float32),
                                             (self.var() + self.eps).sqrt().to(device, torch.float32))
        return frozen

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``clip((obs - mean) / sqrt(var + eps))`` in float32, on ``obs``'s device."""
        mean, std = self._on(obs.device)
        return ((obs.float() - mean) / std).clamp(-self.clip, self.clip)

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        """``x * sqrt(var + eps) + mean`` in float32: a normalised value back in its own units (PPO's
        ``policy.value_norm``: the critic's output)."""
        mean, std = self._on(x.device)
        return x.float() * std + mean

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """``clip(x / sqrt(var + eps))`` in float32, not centred: reward scaling (PPO's ``policy.reward_norm``)
        divides rewards by the standard deviation of the discounted return; subtracting a mean would change
        which policy is optimal (a constant added to every reward rewards living or dying)."""
        _, std = self._on(x.device)
        return (x.float() / std).clamp(-self.clip, self.clip)

    def frozen(self) -> "FrozenObsNorm":
        """The normalisation as it stands, a small module on the CPU for ``baton export``."""
        mean, std = self._on(torch.device("cpu"))
        return FrozenObsNorm(mean.clone(), std.clone(), self.clip)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._frozen.clear()
        self._pending = None


class FrozenObsNorm(nn.Module):
    """``clip((obs - mean) / std, -clip, clip)`` with fixed float32 buffers (``RunningObsNorm.frozen``): what
    the exported greedy module does to an observation first."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, clip: float) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.clip = float(clip)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) / self.std).clamp(-self.clip, self.clip)
