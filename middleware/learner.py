"""Learners: run the policy's updates on replayed or freshly collected data."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from data.replay.device import DeferredReadout
from engine.context import OnlineRLContext
from engine.devices import to_device_async
from engine.protocols import LearnPolicy, ReplayBuffer, require

__all__ = ["OffPolicyLearner", "OnPolicyLearner"]


class OffPolicyLearner:
    """``update_per_collect`` updates of ``batch_size`` transitions sampled from ``buffer`` per call.

    Updates start once the buffer holds ``warmup`` transitions (at least ``batch_size``). With
    ``priority`` the TD errors returned by the policy become the sampled transitions' priorities. Writes
    ``ctx.train_iter`` (one per update), ``ctx.train_data`` (the last batch) and ``ctx.train_output`` (floats
    of the last update; ``loss`` averaged over the call's updates). On a GPU ``ctx.train_output`` is read back
    without waiting for the device (``data.replay.device.DeferredReadout``): the newest call's the device has
    finished, a call or so behind the updates when the host runs ahead.

    Alone, a learner trains as soon as its buffer is ready. Under DDP no rank may skip a backward that the
    others run, so it follows ``ctx.learn_gate``, the readiness the ranks agreed on at the end of the
    previous iteration, and writes its own readiness there as its vote for the next (the field is declared
    ``sync=Sync.MIN``, "all ranks ready").

    Args:
        policy: ``policy.learn_mode``.
        buffer: the replay buffer the pusher fills.
        batch_size: transitions per update.
        update_per_collect: updates per call.
        warmup: transitions the buffer must hold before the first update (default ``batch_size``; at least the
            storage's ``min_fill`` where it has one).
        priority: write the policy's ``priority`` output back to the buffer (prioritized replay).
    """

    def __init__(self, policy: LearnPolicy, buffer: ReplayBuffer, *, batch_size: int, update_per_collect: int,
                 warmup: int = 0, priority: bool = False) -> None:
        self._policy = require(policy, LearnPolicy, "the learner's policy")
        self._buffer = require(buffer, ReplayBuffer, "the learner's replay buffer")
        self._updates = int(update_per_collect)
        self._batch_size = int(batch_size)
        # a storage of sequences (``data.replay.SequenceStorage``) has none to sample before each env has one
        self._warmup = max(self._batch_size, int(warmup), int(getattr(buffer.storage, "min_fill", 0)))
        self._priority = bool(priority)
        # policy.compile='cudagraph_update': the call's updates as one CUDA graph (policies.update_graph), built at
        # the first update (the buffer's storage exists by then); None: one forward per update
        self._graphed: Any = None
        self._graph_checked = False
        self._readout: Optional[DeferredReadout] = None  # the statistics' read-back, made at the first update

    def ready(self) -> bool:
        """Whether this rank's buffer holds enough transitions to train."""
        return len(self._buffer) >= self._warmup

    def __call__(self, ctx: OnlineRLContext) -> None:
        ready = ctx.learner_ready = self.ready()
        if ctx.learn_gate is None:  # one process: decide alone
            train = ready
        else:  # DDP: follow the agreed gate, vote for the next iteration
            train, ctx.learn_gate = ctx.learn_gate, ready
        if not train:
            return
        graphed = self._graphed_updates()
        if graphed is not None:
            out = graphed.run()
            if graphed.failed is None:
                ctx.train_iter += self._updates
                ctx.train_data = graphed.last_batch(out)
                names = [k for k, v in out.items() if k != "loss" and v.numel() == 1 and v.is_floating_point()]
                ctx.train_output = self._read(names + ["loss"], torch.stack([out[k] for k in names]
                                                                            + [out["loss"].mean()]))
                return
            ctx.train_iter += graphed.made  # a warm-up's updates made before it failed
            self._graphed = None  # the capture failed (named in a warning): the updates run one by one
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
        loss = torch.stack(losses).mean().float()
        on_device = {k: v for k, v in out.items() if k not in ("priority", "loss") and _is_scalar(v)
                     and isinstance(v, torch.Tensor) and v.device == loss.device}
        stats = {k: float(v) for k, v in out.items()
                 if k not in ("priority", "loss") and _is_scalar(v) and k not in on_device}
        stats.update(self._read(list(on_device) + ["loss"], torch.stack(
            [v.detach().reshape(()).float() for v in on_device.values()] + [loss])))  # one copy, not waited for
        ctx.train_output = stats

    def _read(self, names: list, values: torch.Tensor) -> Dict[str, float]:
        """The call's statistics as floats (``DeferredReadout``: on a GPU without waiting for it)."""
        if self._readout is None:
            self._readout = DeferredReadout(values.device)
        return self._readout.read(names, values)

    def _graphed_updates(self) -> Any:
        if not self._graph_checked:
            self._graph_checked = True
            build = getattr(self._policy, "graphed_updates", None)
            if build is not None:
                self._graphed = build(self._buffer, self._batch_size, self._updates, self._priority)
        return self._graphed


class OnPolicyLearner:
    """``epochs`` epochs over ``ctx.trajectories`` (what was just collected, with advantages), each a
    shuffled pass of minibatches of ``batch_size``; one update per minibatch. Writes ``ctx.train_iter``,
    ``ctx.train_data`` and ``ctx.train_output`` (means over the call).

    Every rank of a DDP job collects the same number of transitions, so every rank runs the same number of
    updates: there is no data-dependent skip to agree on.

    After each epoch it calls the policy's ``end_epoch()`` where it has one (PPO's adaptive learning rate,
    ``policies.ppo``, steers by each epoch's KL).

    Args:
        policy: ``policy.learn_mode``.
        epochs: passes over the collected data per call (``policy.learn.epoch_per_collect``).
        batch_size: minibatch size.
        generator: the shuffling RNG (default: torch's global one).
    """

    def __init__(self, policy: LearnPolicy, *, epochs: int, batch_size: int,
                 generator: Optional[torch.Generator] = None) -> None:
        self._policy = require(policy, LearnPolicy, "the learner's policy")
        self._epochs = int(epochs)
        self._batch_size = int(batch_size)
        self._generator = generator
        if self._epochs < 1 or self._batch_size < 1:
            raise ValueError(f"policy.learn.epoch_per_collect and batch_size must be >= 1, got "
                             f"{self._epochs} and {self._batch_size}")

    def __call__(self, ctx: OnlineRLContext) -> None:
        data = ctx.trajectories
        if data is None:
            return
        n = len(data.reward)
        # The rollout goes to the learner's device once, and each minibatch is gathered there: gathering on
        # the host and copying every minibatch moved each frame stack epochs times (PPO Pong on an H200: 42 ms
        # an update, the GPU 14% busy). The statistics stay tensors until the call ends: reading one after
        # each update would wait for the GPU every update.
        device = getattr(self._policy, "device", None)
        if device is not None:
            data = data.to(device)
        totals: Dict[str, list] = {}
        updates = 0
        end_epoch = getattr(self._policy, "end_epoch", None)
        # every epoch's order drawn at once (the same draws, in the same order, as one per epoch) and sent in one
        # copy that does not wait for the device (a pageable copy would wait for the previous epoch's updates)
        orders = torch.stack([torch.randperm(n, generator=self._generator) for _ in range(self._epochs)])
        if device is not None:
            orders = to_device_async(orders, device)
        for order in orders:
            for lo in range(0, n, self._batch_size):
                out = self._policy.forward(data[order[lo:lo + self._batch_size]])
                for key, value in out.items():
                    if _is_scalar(value):
                        totals.setdefault(key, []).append(value.detach().reshape(()).double()
                                                          if isinstance(value, torch.Tensor) else float(value))
                updates += 1
                ctx.train_iter += 1
            if end_epoch is not None:
                end_epoch()
        ctx.train_data = data
        ctx.train_output = _means(totals)


def _means(totals: Dict[str, list]) -> Dict[str, float]:
    """The mean of each statistic over a call's updates, the device's values read back in one copy (a read per
    statistic would wait for the device once each)."""
    sums = {k: sum(v for v in values if not isinstance(v, torch.Tensor)) for k, values in totals.items()}
    on_device = {k: [v for v in values if isinstance(v, torch.Tensor)] for k, values in totals.items()}
    keys = [k for k, tensors in on_device.items() if tensors]
    if keys:
        device = on_device[keys[0]][0].device
        read = torch.stack([torch.stack([t.to(device) for t in on_device[k]]).sum() for k in keys]).tolist()
        for k, value in zip(keys, read):
            sums[k] += value
    return {k: sums[k] / len(values) for k, values in totals.items()}


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1)
