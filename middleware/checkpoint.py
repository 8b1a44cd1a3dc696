"""Checkpoints: periodic, best evaluation, and final; every file written atomically.

Files under ``<save_dir>``:

- ``iteration_<train_iter>.pth.tar`` every ``train_freq`` train iterations (when set);
- ``best.pth.tar`` whenever an evaluation beats the best so far;
- ``latest.pth.tar``: the newest of all of them, and the one written at finish. ``--resume`` reads it.

A checkpoint holds the policy's learn state (model, target model, optimizer, counters), the context's
persistent fields (env_step, train_iter, ...), and the replay buffer when asked. A run that ends in an
error (a NaN loss included) writes no final checkpoint: the last good one stays as it was.
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import Any, Dict, Optional

import torch

from engine.context import OnlineRLContext, StopReason
from engine.fileio import atomic_write
from engine.protocols import ReplayBuffer, Saveable, require

from .evaluator import NewEvaluation

__all__ = ["CkptSaver", "load_checkpoint", "CheckpointError", "LATEST", "BEST"]

logger = logging.getLogger(__name__)

LATEST = "latest.pth.tar"
BEST = "best.pth.tar"
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable, or not one of ours; the message names the path."""


def save_checkpoint(path: str, state: Dict[str, Any]) -> str:
    return atomic_write(path, lambda f: torch.save(state, f))


def load_checkpoint(path: str) -> Dict[str, Any]:
    """Read a checkpoint written by ``CkptSaver``.

    Raises:
        CheckpointError: naming ``path`` when it is missing, corrupt, or lacks the expected fields.
    """
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: {err}") from err
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION or "policy" not in state:
        raise CheckpointError(f"{path} is not a baton checkpoint (format {FORMAT_VERSION})")
    return state


class CkptSaver:
    """Middleware that saves checkpoints of ``policy`` (anything with ``state_dict()``) into ``save_dir``.

    Args:
        policy: usually ``policy.learn_mode`` (anything with ``state_dict()``).
        save_dir: directory of the checkpoint files.
        train_freq: also save every this many train iterations (None or 0: never periodically).
        buffer: a replay buffer to include in every checkpoint (for exact resumes; can be large).
    """

    def __init__(self, policy: Saveable, save_dir: str, train_freq: Optional[int] = None,
                 buffer: Optional[ReplayBuffer] = None) -> None:
        self._policy = require(policy, Saveable, "the checkpoint saver's policy")
        self._dir = save_dir
        self._train_freq = int(train_freq or 0)
        self._buffer = buffer
        self._last_save_iter = 0
        self._best = float("-inf")
        self._new_evaluation = NewEvaluation()

    def _state(self, ctx: OnlineRLContext) -> Dict[str, Any]:
        state = {"format": FORMAT_VERSION, "policy": self._policy.state_dict(), "ctx": ctx.persistent_state(),
                 "best_eval_value": self._best}
        if self._buffer is not None:
            state["replay_buffer"] = self._buffer.state_dict()
        return state

    def _save(self, ctx: OnlineRLContext, name: str, also_latest: bool = True) -> None:
        path = save_checkpoint(os.path.join(self._dir, name), self._state(ctx))
        if also_latest and name != LATEST:
            tmp = os.path.join(self._dir, ".tmp-" + LATEST)
            shutil.copyfile(path, tmp)
            os.replace(tmp, os.path.join(self._dir, LATEST))

    def __call__(self, ctx: OnlineRLContext) -> None:
        if self._new_evaluation(ctx):
            if ctx.eval_value > self._best:
                self._best = ctx.eval_value
                self._save(ctx, BEST, also_latest=False)
        if self._train_freq and ctx.train_iter - self._last_save_iter >= self._train_freq:
            self._last_save_iter = ctx.train_iter
            self._save(ctx, f"iteration_{ctx.train_iter}.pth.tar")

    def on_finish(self, ctx: OnlineRLContext) -> None:
        if ctx.stop_reason == StopReason.ERROR:
            logger.warning("run ended with an error (%s): no final checkpoint written; the last good one in %s "
                           "stays", ctx.stop_detail, self._dir)
            return
        self._save(ctx, LATEST)

    @property
    def best_eval_value(self) -> float:
        return self._best

    def restore_best(self, value: float) -> None:
        """Carry the best evaluation over a resume, so ``best.pth.tar`` is only replaced by a better one."""
        self._best = value
