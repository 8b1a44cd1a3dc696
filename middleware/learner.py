"""Learners: run the policy's updates on replayed data."""
from __future__ import annotations

from typing import Any, Dict, Mapping

import torch

__all__ = ["OffPolicyLearner", "OnPolicyLearner", "multistep_trainer"]


class OffPolicyLearner:
    """``policy.learn.update_per_collect`` updates of ``policy.learn.batch_size`` sampled from ``buffer``.

    Updates start once the buffer holds ``max(batch_size, policy.random_collect_size)`` transitions. With
    prioritized replay the TD errors returned by the policy become the sampled transitions' priorities.
    Writes ``ctx.train_iter`` (one per update), ``ctx.train_data`` (the last batch) and
    ``ctx.train_output`` (floats of the last update; ``loss`` averaged over the call's updates).

    ``ready(ctx)`` says whether this rank has enough data (written to ``ctx.learner_ready``). Alone, that
    decides; under DDP the ddp middleware agrees ``ctx.learn_gate`` across ranks at the end of each
    iteration and the learner follows it, so no rank skips a backward that the others run.
    """

    def __init__(self, cfg: Mapping[str, Any], policy: Any, buffer: Any) -> None:
        pcfg = cfg["policy"]
        self._policy = policy
        self._buffer = buffer
        self._updates = int(pcfg["learn"]["update_per_collect"])
        self._batch_size = int(pcfg["learn"]["batch_size"])
        self._warmup = max(self._batch_size, int(pcfg.get("random_collect_size", 0)))
        self._priority = bool(pcfg.get("priority", False))

    def ready(self, ctx: Any) -> bool:
        return len(self._buffer) >= self._warmup

    def __call__(self, ctx: Any) -> None:
        ctx.learner_ready = self.ready(ctx)
        # under DDP, ctx.learn_gate is the readiness all ranks agreed on, so none skips alone
        if not (ctx.learner_ready if ctx.learn_gate is None else ctx.learn_gate):
            return
        losses = []
        out: Dict[str, Any] = {}
        for _ in range(self._updates):
            data = self._buffer.sample(self._batch_size)
            out = self._policy.forward(data)
            if self._priority:
                self._buffer.update_priority(data.index, out["priority"])
            losses.append(out["loss"])
            ctx.train_iter += 1
        ctx.train_data = data
        stats = {k: float(v) for k, v in out.items() if k != "priority" and _is_scalar(v)}
        stats["loss"] = float(torch.stack(losses).mean()) if losses else float("nan")
        ctx.train_output = stats


class OnPolicyLearner:
    """``policy.learn.epoch_per_collect`` epochs over ``ctx.trajectories`` (what was just collected, with
    advantages), each a shuffled pass of minibatches of ``policy.learn.batch_size``; one update per
    minibatch. Writes ``ctx.train_iter``, ``ctx.train_data`` and ``ctx.train_output`` (means over the call).

    Every rank of a DDP job collects the same number of transitions, so every rank runs the same number of
    updates: there is no data-dependent skip to agree on.
    """

    def __init__(self, cfg: Mapping[str, Any], policy: Any, generator: torch.Generator | None = None) -> None:
        learn = cfg["policy"]["learn"]
        self._policy = policy
        self._epochs = int(learn["epoch_per_collect"])
        self._batch_size = int(learn["batch_size"])
        self._generator = generator
        if self._epochs < 1 or self._batch_size < 1:
            raise ValueError(f"policy.learn.epoch_per_collect and batch_size must be >= 1, got "
                             f"{self._epochs} and {self._batch_size}")

    def __call__(self, ctx: Any) -> None:
        data = ctx.trajectories
        if data is None:
            return
        n = len(data.reward)
        totals: Dict[str, float] = {}
        updates = 0
        for _ in range(self._epochs):
            order = torch.randperm(n, generator=self._generator)
            for lo in range(0, n, self._batch_size):
                out = self._policy.forward(data[order[lo:lo + self._batch_size]])
                for key, value in out.items():
                    if _is_scalar(value):
                        totals[key] = totals.get(key, 0.0) + float(value)
                updates += 1
                ctx.train_iter += 1
        ctx.train_data = data
        ctx.train_output = {k: v / updates for k, v in totals.items()}


def multistep_trainer(cfg: Mapping[str, Any], policy: Any) -> OnPolicyLearner:
    """DI-engine's name for ``OnPolicyLearner(cfg, policy.learn_mode)``."""
    return OnPolicyLearner(cfg, policy)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1)
