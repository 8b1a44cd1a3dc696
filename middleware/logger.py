"""tensorboardX scalars for a training run (rank 0 only under DDP)."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional

from engine.context import OnlineRLContext

import numpy as np

from .evaluator import NewEvaluation

__all__ = ["online_logger", "OnlineLogger"]

logger = logging.getLogger(__name__)


class OnlineLogger:
    """Write scalars against ``ctx.env_step`` to ``<log_dir>`` (a tensorboardX event file):

    - ``collect/episode_return`` (mean of training episodes finished since the last write),
      ``collect/eps``, ``eval/episode_return_mean``/``_std`` (at every evaluation),
    - ``train/loss``, ``train/q_value`` and the policy's other scalar outputs,
    - ``speed/env_steps_per_s``, ``speed/train_iter_per_s`` over the interval since the last write.

    Train and speed scalars are written every ``train_show_freq`` train iterations (and at least every 50
    iterations of the loop), evaluation scalars whenever an evaluation happened. ``print_freq > 0``
    also logs a line through ``logging`` every that many train iterations.
    """

    def __init__(self, log_dir: str, train_show_freq: int = 50, print_freq: int = 0) -> None:
        self._log_dir = log_dir
        self._show_freq = max(1, int(train_show_freq))
        self._print_freq = int(print_freq)
        self._writer: Optional[Any] = None
        self._returns: list = []
        self._new_evaluation = NewEvaluation()
        self._last = None  # (time, env_step, train_iter, loop step) at the last write
        self._last_print_iter = 0

    @property
    def writer(self) -> Any:
        if self._writer is None:
            from tensorboardX import SummaryWriter  # deferred: a second of imports, only when logging

            os.makedirs(self._log_dir, exist_ok=True)
            self._writer = SummaryWriter(self._log_dir)
        return self._writer

    def __call__(self, ctx: OnlineRLContext) -> None:
        now = time.perf_counter()
        if self._last is None:
            self._last = (now, ctx.env_step, ctx.train_iter, ctx.total_step)
        if ctx.episode_returns:
            self._returns.extend(ctx.episode_returns)
        step = ctx.env_step
        if self._new_evaluation(ctx):
            self.writer.add_scalar("eval/episode_return_mean", ctx.eval_output["mean"], step)
            self.writer.add_scalar("eval/episode_return_std", ctx.eval_output["std"], step)
        last_time, last_env, last_iter, last_loop = self._last
        if ctx.train_iter - last_iter >= self._show_freq or ctx.total_step - last_loop >= 50:
            self._write_interval(ctx, now)
        if self._print_freq and ctx.train_iter - self._last_print_iter >= self._print_freq:
            self._last_print_iter = ctx.train_iter
            logger.info("env_step=%d train_iter=%d eval=%.2f train=%s", ctx.env_step, ctx.train_iter,
                        ctx.eval_value, ctx.train_output)

    def _write_interval(self, ctx: OnlineRLContext, now: float) -> None:
        last_time, last_env, last_iter, _ = self._last
        w, step = self.writer, ctx.env_step
        elapsed = max(now - last_time, 1e-9)
        w.add_scalar("speed/env_steps_per_s", (ctx.env_step - last_env) / elapsed, step)
        w.add_scalar("speed/train_iter_per_s", (ctx.train_iter - last_iter) / elapsed, step)
        if self._returns:
            w.add_scalar("collect/episode_return", float(np.mean(self._returns)), step)
            self._returns = []
        if "eps" in ctx.collect_kwargs:
            w.add_scalar("collect/eps", ctx.collect_kwargs["eps"], step)
        for key, value in (ctx.train_output or {}).items():
            if isinstance(value, float):
                w.add_scalar(f"train/{key}", value, step)
        self._last = (now, ctx.env_step, ctx.train_iter, ctx.total_step)

    def on_finish(self, ctx: OnlineRLContext) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None


def online_logger(log_dir: str, train_show_freq: int = 50, print_freq: int = 0) -> OnlineLogger:
    return OnlineLogger(log_dir, train_show_freq, print_freq)
