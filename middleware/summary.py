"""The run summary, ``<exp_name>/summary.json``, written at finish however the run ended."""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Optional

from engine.context import OnlineRLContext, StopReason
from engine.fileio import atomic_write_json

from .evaluator import NewEvaluation

__all__ = ["RunSummary", "SUMMARY_FILE"]

SUMMARY_FILE = "summary.json"


class RunSummary:
    """Tracks the best evaluation and the wall time; writes ``summary.json`` at finish.

    Register it first: it is a generator middleware whose clock starts before the first iteration's
    forward pass, and which reads each iteration's evaluation on the way back.

    Fields: ``stop_reason`` (a ``StopReason`` value; ``error`` comes with ``error``, what was raised),
    ``eval_return`` (last evaluation), ``best_eval_return``, ``env_step``,
    ``env_episode``, ``train_iter``, ``wall_time_s`` (from the first iteration to finish),
    ``time_to_stop_value_s`` (when the stop value was reached, else None), ``evaluations``, and what
    ``extra()`` returns at finish (the pipeline adds ``world_size`` and DDP collective time under DDP).
    """

    def __init__(self, exp_dir: str, write: bool = True, extra: Optional[Callable[[], Dict[str, Any]]] = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._path = os.path.join(exp_dir, SUMMARY_FILE)
        self._write = write
        self._extra = extra
        self._clock = clock
        self._start: Optional[float] = None
        self._best = float("-inf")
        self._evals = 0
        self._new_evaluation = NewEvaluation()
        self.result: Dict[str, Any] = {}

    def __call__(self, ctx: OnlineRLContext):
        if self._start is None:
            self._start = self._clock()
        yield
        self._track_eval(ctx)

    def _track_eval(self, ctx: OnlineRLContext) -> None:
        if self._new_evaluation(ctx):
            self._evals += 1
            self._best = max(self._best, ctx.eval_value)

    def on_finish(self, ctx: OnlineRLContext) -> None:
        self._track_eval(ctx)  # an evaluation in an iteration cut short by an error
        wall = self._clock() - self._start if self._start is not None else 0.0
        reason = ctx.stop_reason or (StopReason.FINISHED if ctx.finish else StopReason.MAX_STEP)
        self.result = {
            "stop_reason": str(reason),
            "eval_return": ctx.eval_value if ctx.eval_output is not None else None,
            "best_eval_return": self._best if self._evals else None,
            "env_step": ctx.env_step,
            "env_episode": ctx.env_episode,
            "train_iter": ctx.train_iter,
            "wall_time_s": wall,
            "time_to_stop_value_s": wall if reason == StopReason.STOP_VALUE else None,
            "evaluations": self._evals,
        }
        if reason == StopReason.ERROR:
            self.result["error"] = ctx.stop_detail
        if self._extra is not None:
            self.result.update(self._extra())
        if self._write:
            atomic_write_json(self._path, self.result)
