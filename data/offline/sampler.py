"""The epoch sampler: batches drawn without replacement from a fixed set, reshuffled every pass.

An offline learner reads its shard in passes (epochs): each pass visits every transition once, in an order
drawn from ``seed`` and the pass number. The order of pass ``e`` depends on nothing else, so the sampler's
whole state is the count of transitions drawn so far (``seek`` restores it, e.g. from ``train_iter *
batch_size`` at a resume). A batch that runs past the end of a pass takes the rest from the next one:
every batch has ``batch_size`` rows, so every rank of a DDP job makes the same number of updates whatever
the size of its shard.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..replay.samplers import Sampler

__all__ = ["EpochSampler"]


class EpochSampler(Sampler):
    """Without replacement within a pass, a new permutation per pass.

    Args:
        seed: the permutation of pass ``e`` is ``randperm(size)`` from a generator seeded with
            ``seed * 1_000_003 + e``.
        device: where the indices live: the storage's device (a storage on a GPU gathers with indices
            there; the permutation is drawn on the host and moved once per pass).

    Examples:
        >>> s = EpochSampler(seed=0)
        >>> a, _ = s.sample(5, 3); b, _ = s.sample(5, 3)
        >>> sorted(a.tolist() + b.tolist()[:2]), s.epoch, s.drawn
        ([0, 1, 2, 3, 4], 1, 6)
    """

    def __init__(self, seed: int = 0, device: str | torch.device = "cpu") -> None:
        self.seed = int(seed)
        self.device = torch.device(device)
        self.drawn = 0
        self._size: Optional[int] = None
        self._order_epoch = -1
        self._order: Optional[torch.Tensor] = None

    @property
    def epoch(self) -> int:
        """Completed passes (0 before the first pass ends); needs one ``sample`` call for its size."""
        return self.drawn // self._size if self._size else 0

    def seek(self, drawn: int) -> None:
        """Continue as if ``drawn`` transitions had been sampled already."""
        self.drawn = int(drawn)

    def _permutation(self, epoch: int, size: int) -> torch.Tensor:
        if epoch != self._order_epoch or self._order is None or len(self._order) != size:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order = torch.randperm(size, generator=generator).to(self.device)
            self._order_epoch = epoch
        return self._order

    def sample(self, size: int, batch_size: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        if self._size is not None and size != self._size:  # the set grew or shrank: passes restart
            self.drawn = 0
        self._size = size
        parts = []
        need = batch_size
        while need > 0:
            epoch, pos = divmod(self.drawn, size)
            take = min(need, size - pos)
            parts.append(self._permutation(epoch, size)[pos:pos + take])
            self.drawn += take
            need -= take
        return (parts[0] if len(parts) == 1 else torch.cat(parts)), None

    def state_dict(self) -> dict:
        return {"seed": self.seed, "drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.drawn = int(state["seed"]), int(state["drawn"])
