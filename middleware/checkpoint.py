"""Checkpoints you can always resume from: periodic, best evaluation, latest, and final; every file
written atomically, never a non-finite model, and nothing in them can run code when loaded.

Files under ``<save_dir>``:

- ``iteration_<train_iter>.pth.tar`` every ``train_freq`` train iterations (when set);
- ``best.pth.tar`` whenever an evaluation beats the best so far;
- ``latest.pth.tar``: the newest state of all: written every ``latest_every_s`` seconds (so a killed run can
  be resumed), with each periodic and best checkpoint, and at finish. ``--resume`` reads it, or the newest
  checkpoint that loads.

A checkpoint holds the policy's learn state (model, target model, optimizer, counters), the context's
persistent fields (env_step, train_iter, ...), what wrote it (``meta``: policy type, env), and the replay
buffer when asked: tensors and plain Python data only, read back with ``torch.load(weights_only=True)``,
which executes nothing. Before any write the weights are checked: a model with NaN or infinite values is
never written (``NonFiniteWeightsError`` names the update and the last good checkpoint). A run that ends in
an error writes no final checkpoint: the last good one stays as it was. A write that runs out of disk space
raises ``engine.fileio.DiskFullError`` naming the file (the previous checkpoint stays, its temporary file is
removed). Temporary files of writes cut short by a kill are removed when a saver starts.
"""
from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch

from engine.context import OnlineRLContext, StopReason
from engine.fileio import atomic_write
from engine.params import Params, param
from engine.registry import CONFIG_SECTIONS
from engine.rng import rng_state
from engine.protocols import ReplayBuffer, Saveable, require

from .evaluator import NewEvaluation

__all__ = ["CheckpointParams", "CkptSaver", "ShardSaver", "shard_path", "load_shard", "load_checkpoint", "load_newest_checkpoint", "CheckpointError", "check_policy_type", "NonFiniteWeightsError",
           "LATEST", "BEST"]


@dataclass
class CheckpointParams(Params):
    """The config's ``ckpt`` section: when checkpoints are written, beside the best one (always kept)."""

    save_freq: int = param(0, rule="not_negative")
    """>0: also save ``iteration_<N>.pth.tar`` every N train iterations; 0: only best and latest."""
    latest_every_s: float = param(120.0, rule="not_negative")
    """Write ``latest.pth.tar`` at least this often (s), so that a killed run resumes; 0: off."""
    save_replay_buffer: bool = param(False)
    """Keep the replay buffer's contents in ``latest`` (large), so that a resumed run samples the same data."""


CONFIG_SECTIONS.register("ckpt", CheckpointParams)


logger = logging.getLogger(__name__)

LATEST = "latest.pth.tar"
BEST = "best.pth.tar"
FORMAT_VERSION = 1
_TMP_PREFIX = ".tmp-"  # engine.fileio.atomic_write's temporary files


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable, unsafe, or not one of ours; the message names the path."""


class NonFiniteWeightsError(FloatingPointError):
    """The weights hold NaN or infinite values; nothing was saved."""


def save_checkpoint(path: str, state: Dict[str, Any]) -> str:
    return atomic_write(path, lambda f: torch.save(state, f))


def shard_path(path: str, rank: int) -> str:
    """Where rank ``rank`` keeps its part of checkpoint ``path``: ``latest.pth.tar`` -> ``latest.rank1.pth.tar``."""
    stem = path[:-len(".pth.tar")] if path.endswith(".pth.tar") else path
    return f"{stem}.rank{rank}.pth.tar"


_SHARD = re.compile(r"\.rank\d+\.pth\.tar$")


def load_shard(path: str) -> Dict[str, Any]:
    """Read a rank's shard (``ShardSaver``), executing nothing in it.

    Raises:
        CheckpointError: naming ``path`` when it is missing, corrupt or not a shard.
    """
    state = _load(path, "shard")
    if state.get("shard") is not True:
        raise CheckpointError(f"{path} is not a baton checkpoint shard (format {FORMAT_VERSION})")
    return state


def _load(path: str, what: str) -> Dict[str, Any]:
    if not os.path.isfile(path):
        raise CheckpointError(f"{what} not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(f"{what} {path} is corrupt, or holds objects other than tensors and plain data "
                              f"(refused, not executed): {str(err).splitlines()[0] if str(err) else err!r}") from err
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a baton {what} (format {FORMAT_VERSION})")
    return state


def load_checkpoint(path: str) -> Dict[str, Any]:
    """Read a checkpoint written by ``CkptSaver``, executing nothing in it (``weights_only=True``).

    Raises:
        CheckpointError: naming ``path`` when it is missing, corrupt, holds anything but tensors and plain
            data (such a file is refused, never run), or lacks the expected fields.
    """
    state = _load(path, "checkpoint")
    if "policy" not in state:
        raise CheckpointError(f"{path} is not a baton checkpoint (format {FORMAT_VERSION})")
    return state


def check_policy_type(state: Mapping[str, Any], path: str, policy_type: str, builder: str, fix: str) -> None:
    """Refuse a checkpoint whose record names another policy than ``policy_type`` (one written before the
    record existed passes): ``"{path} was written by policy ..., {builder} builds ...: {fix}"``.

    Raises:
        CheckpointError: naming both policies and ``fix``.
    """
    wrote = (state.get("meta") or {}).get("policy_type")
    if wrote is not None and wrote != policy_type:
        raise CheckpointError(f"{path} was written by policy {wrote!r}, {builder} builds {policy_type!r}: {fix}")


def non_finite_tensors(state: Any, path: str = "") -> List[str]:
    """Key paths of the floating-point tensors in ``state`` that hold NaN or infinite values."""
    if isinstance(state, torch.Tensor):
        return [path or "tensor"] if state.is_floating_point() and not bool(torch.isfinite(state).all()) else []
    if isinstance(state, Mapping):
        return [p for k, v in state.items() for p in non_finite_tensors(v, f"{path}.{k}" if path else str(k))]
    if isinstance(state, (list, tuple)):
        return [p for i, v in enumerate(state) for p in non_finite_tensors(v, f"{path}[{i}]")]
    return []


def _candidates(ckpt_dir: str) -> List[str]:
    """Checkpoints in ``ckpt_dir``: ``latest`` first, then the others, newest first."""
    others = [p for p in glob.glob(os.path.join(ckpt_dir, "*.pth.tar"))
              if os.path.basename(p) != LATEST and not os.path.basename(p).startswith(_TMP_PREFIX)
              and not _SHARD.search(p)]
    others.sort(key=os.path.getmtime, reverse=True)
    latest = os.path.join(ckpt_dir, LATEST)
    return ([latest] if os.path.isfile(latest) else []) + others


def load_newest_checkpoint(ckpt_dir: str) -> Tuple[str, Dict[str, Any]]:
    """The newest checkpoint of ``ckpt_dir`` that loads and holds finite weights: ``latest`` if it does,
    else the newest other one, with a warning saying which and why.

    Raises:
        CheckpointError: naming the directory and what was wrong with each file, when none loads.
    """
    problems = []
    for path in _candidates(ckpt_dir):
        try:
            state = load_checkpoint(path)
        except CheckpointError as err:
            problems.append(str(err))
            continue
        bad = non_finite_tensors(state["policy"])
        if bad:
            problems.append(f"{path} holds non-finite weights ({', '.join(bad[:3])})")
            continue
        if problems:
            logger.warning("resuming from %s, the newest loadable checkpoint; skipped: %s", path, "; ".join(problems))
        return path, state
    if not problems:
        raise CheckpointError(f"no checkpoint to resume from in {ckpt_dir}: start without --resume, or point "
                              f"--exp-name at the run to continue")
    raise CheckpointError(f"no loadable checkpoint in {ckpt_dir}: " + "; ".join(problems))


#: ``train_iter -> (learn state, ctx state)`` of the weights evaluated at ``train_iter``, or None
EvaluatedState = Callable[[int], Optional[Tuple[Dict[str, Any], Dict[str, Any]]]]


def _copy_atomically(src: str, dst: str) -> None:
    with open(src, "rb") as f:  # through atomic_write: fsynced before the rename, a full disk named
        atomic_write(dst, lambda out: shutil.copyfileobj(f, out, 16 << 20))


class CkptSaver:
    """Middleware that saves checkpoints of ``policy`` (anything with ``state_dict()``) into ``save_dir``.

    Args:
        policy: usually ``policy.learn_mode`` (anything with ``state_dict()``).
        save_dir: directory of the checkpoint files.
        train_freq: also save ``iteration_<n>`` every this many train iterations (None or 0: never).
        buffer: a replay buffer to include in every checkpoint (for exact resumes; can be large).
        latest_every_s: write ``latest`` at least this often, in seconds of wall time (0: only with the
            periodic checkpoints and at finish).
        meta: plain data stored with every checkpoint (what wrote it: policy type, env), checked at resume.
        clock: the time source (tests pass their own).
        world_size: the run's processes; with more than one, the other ranks write their replay shard and
            RNG state beside each checkpoint (``ShardSaver``), told through ``ctx.checkpoints_saved``.

    ``best`` holds the weights that were evaluated: a blocking evaluator hands each evaluation over as it
    publishes it (``on_evaluation``: the weights then current, before the iteration's learner moves them on),
    a background one the snapshot it evaluated (``save_best_from``).
    """

    def __init__(self, policy: Saveable, save_dir: str, train_freq: Optional[int] = None,
                 buffer: Optional[ReplayBuffer] = None, latest_every_s: float = 0.0,
                 meta: Optional[Mapping[str, Any]] = None, clock: Callable[[], float] = time.monotonic,
                 world_size: int = 1) -> None:
        self._policy = require(policy, Saveable, "the checkpoint saver's policy")
        self._dir = save_dir
        self._train_freq = int(train_freq or 0)
        self._buffer = buffer
        self._latest_every = float(latest_every_s)
        self._meta = dict(meta or {})
        self._world_size = int(world_size)
        self._clock = clock
        self._last_latest = clock()
        self._last_save_iter = 0
        self._last_good: Optional[str] = None
        self._best = float("-inf")
        self._new_evaluation = NewEvaluation()
        self._evaluated_state: Optional[EvaluatedState] = None
        self._latest_due = False  # a blocking evaluation wrote a new best: latest at this stage's turn
        self._remove_stale_temporaries()

    def save_best_from(self, source: EvaluatedState) -> None:
        """Write ``best`` from ``source(ctx.last_eval_iter)``, ``(learn state, ctx state)``, when it returns
        one: the weights a background evaluation evaluated (``BackgroundEvaluator.evaluated_state``), older
        than the current ones. Such a ``best`` is not copied to ``latest`` (which stays the newest state) nor
        announced to the other ranks' ``ShardSaver`` (their buffers are newer than these weights)."""
        self._evaluated_state = source

    def _remove_stale_temporaries(self) -> None:
        for path in glob.glob(os.path.join(self._dir, _TMP_PREFIX + "*")):
            logger.info("removing %s, left by an interrupted write", path)
            os.unlink(path)

    def _state(self, ctx: OnlineRLContext, evaluated: Optional[Tuple[Dict[str, Any], Dict[str, Any]]] = None
               ) -> Dict[str, Any]:
        policy_state, ctx_state = evaluated or (self._policy.state_dict(), ctx.persistent_state())
        state = {"format": FORMAT_VERSION, "policy": policy_state, "ctx": ctx_state,
                 "best_eval_value": self._best, "meta": self._meta, "world_size": self._world_size,
                 "rng": rng_state()}
        bad = non_finite_tensors(state["policy"])
        if bad:
            raise NonFiniteWeightsError(
                f"the weights hold NaN or infinite values after update {ctx_state.get('train_iter')} "
                f"({', '.join(bad[:5])}"
                f"{', ...' if len(bad) > 5 else ''}): nothing was saved. The last good checkpoint is "
                f"{self._last_good or 'none of this run'}. Lower policy.learn.learning_rate or clip gradients")
        if self._buffer is not None:
            state["replay_buffer"] = self._buffer.state_dict()
        return state

    def _save(self, ctx: OnlineRLContext, name: str,
              evaluated: Optional[Tuple[Dict[str, Any], Dict[str, Any]]] = None) -> None:
        """Write ``name`` and make ``latest`` the same state (not for ``evaluated``, an older state)."""
        path = save_checkpoint(os.path.join(self._dir, name), self._state(ctx, evaluated))
        self._last_good = path
        if evaluated is not None:
            return
        self._last_latest = self._clock()
        if name != LATEST:
            _copy_atomically(path, os.path.join(self._dir, LATEST))
        ctx.checkpoints_saved = [name] if name == LATEST else [name, LATEST]

    def on_evaluation(self, ctx: OnlineRLContext) -> None:
        """A blocking evaluator has just published an evaluation of the current weights: a new best is written
        now, from them, not at this stage's turn, after the iteration's learner has updated them (the evaluator
        runs first in an iteration). Such a best is not copied to ``latest``: this stage writes ``latest`` at its
        turn instead, the iteration's end (a resume point as soon as there is a best, every rank's shard beside
        it), as it did when it wrote the best itself."""
        if self._save_new_best(ctx, evaluated_now=True):
            self._latest_due = True

    def _save_new_best(self, ctx: OnlineRLContext, evaluated_now: bool = False) -> bool:
        """Write ``best`` if ``ctx`` holds a new evaluation that beats it; whether it did."""
        if not (self._new_evaluation(ctx) and ctx.eval_value > self._best):
            return False
        self._best = ctx.eval_value
        if evaluated_now:  # at the env_step its evaluation is labelled with: under DDP the final evaluation runs
            # after the iteration's collection, when ctx.env_step holds only this rank's share of it
            ctx_state = ctx.persistent_state()
            ctx_state["env_step"] = ctx.eval_output.get("env_step", ctx.env_step)
            evaluated = (self._policy.state_dict(), ctx_state)
        else:
            evaluated = self._evaluated_state(ctx.last_eval_iter) if self._evaluated_state is not None else None
        self._save(ctx, BEST, evaluated)  # latest stays the newest of all: a resume after a kill starts here
        return True

    def __call__(self, ctx: OnlineRLContext) -> None:
        self._save_new_best(ctx)
        if self._train_freq and ctx.train_iter - self._last_save_iter >= self._train_freq:
            self._last_save_iter = ctx.train_iter
            self._save(ctx, f"iteration_{ctx.train_iter}.pth.tar")
        elif self._latest_due or (self._latest_every and self._clock() - self._last_latest >= self._latest_every):
            self._save(ctx, LATEST)
        self._latest_due = False

    def on_finish(self, ctx: OnlineRLContext) -> None:
        if ctx.stop_reason == StopReason.ERROR:
            logger.warning("run ended with an error (%s): no final checkpoint written; the last good one in %s "
                           "stays", ctx.stop_detail, self._dir)
            return
        self._save_new_best(ctx)  # an evaluation published after this stage ran (a background one's last)
        self._save(ctx, LATEST)

    @property
    def best_eval_value(self) -> float:
        return self._best

    def restore_best(self, value: float) -> None:
        """Carry the best evaluation over a resume, so ``best.pth.tar`` is only replaced by a better one."""
        self._best = value


class ShardSaver:
    """On each rank but 0 under DDP: this rank's replay buffer and RNG state, written beside every
    checkpoint rank 0 writes (``<name>.rank<r>.pth.tar``), so the whole run resumes, on any number of
    ranks (``data.replay.reshard``).

    Rank 0 writes its checkpoint in the iteration's checkpoint stage and names the files in
    ``ctx.checkpoints_saved``; the ddp middleware carries that to every rank at the end of the iteration.
    Register this stage before the ddp middleware: its code after ``yield`` runs after that agreement, on
    the state the checkpoint holds (nothing changes the buffer after the learner). The shard carries the
    checkpoint's ``train_iter``, so a shard older than its checkpoint (a kill between the two writes) is
    recognised at resume and left out.
    """

    def __init__(self, save_dir: str, rank: int, buffer: Optional[ReplayBuffer] = None) -> None:
        self._dir = save_dir
        self._rank = int(rank)
        self._buffer = buffer

    def __call__(self, ctx: OnlineRLContext):
        yield
        if ctx.checkpoints_saved and self._rank != 0:  # rank 0's part is inside its checkpoint
            self._save(ctx, ctx.checkpoints_saved)

    def on_finish(self, ctx: OnlineRLContext) -> None:
        if self._rank != 0 and ctx.stop_reason != StopReason.ERROR:  # rank 0 writes latest at finish then
            self._save(ctx, [LATEST])

    def _save(self, ctx: OnlineRLContext, names: List[str]) -> None:
        state = {"format": FORMAT_VERSION, "shard": True, "rank": self._rank, "train_iter": ctx.train_iter,
                 "rng": rng_state(),
                 "replay_buffer": self._buffer.state_dict() if self._buffer is not None else None}
        first = save_checkpoint(shard_path(os.path.join(self._dir, names[0]), self._rank), state)
        for name in names[1:]:
            _copy_atomically(first, shard_path(os.path.join(self._dir, name), self._rank))
