"""The run summary, ``<exp_name>/summary.json``, written at finish however the run ended, and the run's two
clocks, named alike wherever they show (the progress bar, ``progress.csv`` columns, ``summary.json``, the
final ``baton:`` line):

- ``wall_time_s``: training time: from the start of the first iteration to the end of the last, summed
  over the processes of a resumed run (every checkpoint carries it, in its ``ctx``);
- ``elapsed_s``: this process's time for the run: from the start of the pipeline's build (config, envs,
  policy, checkpoint load) to its end (the last iteration, the final checkpoint); not summed over a resume.

The summary's ``best_eval_return`` and ``evaluations`` are the whole run's too: a resume takes them back
from the checkpoint (``restore_record``), whose ``best_eval_value`` is what ``best.pth.tar`` holds. They are
counted in the context (``RECORD_FIELD``, rank 0's under DDP), so every rank reports rank 0's count: another
rank sees only the last of the evaluations rank 0 published in an iteration (a final evaluation replaces the
iteration's periodic one).
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Dict, Optional

from engine.context import Context, OnlineRLContext, StopReason
from engine.fileio import atomic_write_json

__all__ = ["RunSummary", "RunClock", "restore_record", "SUMMARY_FILE", "WALL_TIME_FIELD", "RECORD_FIELD"]

SUMMARY_FILE = "summary.json"
#: the ctx fields the summary keeps (so every checkpoint holds them) and takes back at a resume: the run's
#: training seconds so far, and ``{"evaluations", "eval_iter", "best_eval_return"}`` of the evaluations it
#: counted (``eval_iter``: the ``last_eval_iter`` of the latest one), a context field with ``Sync.RANK0``
#: (``engine.context``). The record is replaced, never changed in place: a checkpoint of older weights (a
#: background evaluation's best) keeps the record of its time.
WALL_TIME_FIELD = "wall_time_s"
RECORD_FIELD = "evaluation_record"


class RunClock:
    """The run's ``wall_time_s`` and ``elapsed_s`` (the module docstring), one object that the summary,
    the logger and the progress bar read, so that they show the same values.

    Args:
        clock: the time source, in seconds (tests pass their own). ``elapsed_s`` counts from construction.

    Examples:
        >>> ticks = iter([0.0, 2.0, 5.0, 6.0, 7.0, 8.0])
        >>> clock = RunClock(lambda: next(ticks))   # the pipeline is built at 0
        >>> clock.carry(10.0)                        # 10 s of training in the run's earlier processes
        >>> clock.start()                            # the first iteration starts at 2
        >>> clock.wall_time_s(), clock.elapsed_s()  # read at 5, then at 6
        (13.0, 6.0)
        >>> clock.stop()                             # the last iteration ends at 7
        >>> clock.wall_time_s(), clock.elapsed_s()  # training stopped at 7; the process goes on to 8
        (15.0, 8.0)
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._built = clock()
        self._started: Optional[float] = None
        self._stopped: Optional[float] = None
        self.carried_s = 0.0

    @property
    def started(self) -> bool:
        return self._started is not None

    def carry(self, seconds: Optional[float]) -> None:
        """The training seconds of the run's earlier processes (a resume): the largest of those given, so the
        checkpoint's record and ``progress.csv``'s last kept row can both be told, in either order."""
        if seconds is not None:
            self.carried_s = max(self.carried_s, float(seconds))

    def start(self) -> None:
        """The first iteration begins (later calls do nothing)."""
        if self._started is None:
            self._started = self._clock()

    def stop(self) -> None:
        """The last iteration ended: ``wall_time_s`` keeps its value from now on (later calls do nothing)."""
        if self._started is not None and self._stopped is None:
            self._stopped = self._clock()

    def wall_time_s(self) -> float:
        """Training seconds of the whole run so far."""
        if self._started is None:
            return self.carried_s
        end = self._stopped if self._stopped is not None else self._clock()
        return self.carried_s + end - self._started

    def elapsed_s(self) -> float:
        """Seconds since this process built the pipeline."""
        return self._clock() - self._built


def restore_record(ctx: Context, best_eval_value: float) -> None:
    """At a resume, after ``ctx.load_persistent_state``: the checkpoint's best evaluation
    (``best_eval_value``, the one ``best.pth.tar`` holds) becomes the summary's best so far, and the
    summary's fields persist, so the process group's broadcast of the state carries them. A checkpoint
    without a record (written before there was one) counts its own evaluation as seen."""
    record = dict(getattr(ctx, RECORD_FIELD, None) or {"evaluations": 0, "eval_iter": ctx.last_eval_iter})
    record["best_eval_return"] = max(float(record.get("best_eval_return", -math.inf)), float(best_eval_value))
    setattr(ctx, RECORD_FIELD, record)
    ctx.keep(WALL_TIME_FIELD, RECORD_FIELD)


class RunSummary:
    """Tracks the evaluations and the clocks; writes ``summary.json`` at finish.

    Register it first: it is a generator middleware whose training clock starts before the first
    iteration's forward pass, and which reads each iteration's evaluation on the way back.

    Fields: ``stop_reason`` (a ``StopReason`` value; ``error`` comes with ``error``, what was raised),
    ``eval_return`` (last evaluation), ``best_eval_return`` (the best of the whole run, resumes included),
    ``env_step``, ``env_episode``, ``train_iter``, ``wall_time_s`` and ``elapsed_s`` (the module docstring),
    ``time_to_stop_value_s`` (the ``wall_time_s`` at which the stop value was reached, else None),
    ``evaluations`` (of the whole run), and what ``extra()`` returns at finish (the pipeline adds
    ``world_size`` and DDP collective time under DDP).

    Args:
        exp_dir: where ``summary.json`` goes.
        write: write it (rank 0); else only ``result`` is filled.
        extra: more fields, read at finish.
        clock: the run's ``RunClock``, shared with the logger and the progress bar (default: one of its own,
            whose ``elapsed_s`` counts from here).

    ``close()``, once the pipeline's other finish listeners (the final checkpoint) have run, brings
    ``elapsed_s`` up to then and writes ``summary.json`` again; ``result`` is updated in place.
    """

    def __init__(self, exp_dir: str, write: bool = True, extra: Optional[Callable[[], Dict[str, Any]]] = None,
                 clock: Optional[RunClock] = None) -> None:
        self._path = os.path.join(exp_dir, SUMMARY_FILE)
        self._write = write
        self._extra = extra
        self.clock = clock if clock is not None else RunClock()
        self._adopted = False
        self._no_record: Dict[str, Any] = {"evaluations": 0, "eval_iter": -1, "best_eval_return": -math.inf}
        self.result: Dict[str, Any] = {}

    def __call__(self, ctx: OnlineRLContext):
        if not self.clock.started:
            self._adopt(ctx)
            self.clock.start()
        setattr(ctx, WALL_TIME_FIELD, self.clock.wall_time_s())  # what this iteration's checkpoints carry
        yield
        self.track_evaluation(ctx)
        if ctx.finish:
            self.clock.stop()

    def _adopt(self, ctx: OnlineRLContext) -> None:
        """Take back what the run's earlier processes counted (a resumed ctx), once; mark the fields kept. An
        evaluation that ``ctx`` holds without a record (a context made by hand) counts as seen."""
        if self._adopted:
            return
        self._adopted = True
        self._no_record = {**self._no_record, "eval_iter": ctx.last_eval_iter}
        self.clock.carry(getattr(ctx, WALL_TIME_FIELD, None))
        ctx.keep(WALL_TIME_FIELD, RECORD_FIELD)

    def _record(self, ctx: OnlineRLContext) -> Dict[str, Any]:
        """The evaluations counted so far: ``ctx``'s record (a resumed one's), its missing keys filled in."""
        return {**self._no_record, **(getattr(ctx, RECORD_FIELD, None) or {})}

    def track_evaluation(self, ctx: OnlineRLContext) -> None:
        """Count the evaluation in ``ctx`` (once) into the best return and the number of evaluations: after each
        iteration, and from a stage that is about to replace it (``middleware.evaluator.final_evaluation``).
        Under DDP the record then reaches the other ranks with the evaluation: they count nothing themselves."""
        record = self._record(ctx)
        if ctx.eval_output is None or ctx.last_eval_iter == record["eval_iter"]:
            return
        setattr(ctx, RECORD_FIELD, {"evaluations": int(record["evaluations"]) + 1, "eval_iter": ctx.last_eval_iter,
                                    "best_eval_return": max(float(record["best_eval_return"]), ctx.eval_value)})

    def on_finish(self, ctx: OnlineRLContext) -> None:
        self._adopt(ctx)  # a run that ended before its first iteration: what it resumed from
        self.track_evaluation(ctx)  # an evaluation in an iteration cut short by an error
        self.clock.stop()
        wall = self.clock.wall_time_s()
        setattr(ctx, WALL_TIME_FIELD, wall)  # the final checkpoint, written after this, carries it
        reason = ctx.stop_reason or (StopReason.FINISHED if ctx.finish else StopReason.MAX_STEP)
        record = self._record(ctx)
        best = float(record["best_eval_return"])
        self.result = {
            "stop_reason": str(reason),
            "eval_return": ctx.eval_value if ctx.eval_output is not None else None,
            "best_eval_return": best if math.isfinite(best) else None,
            "env_step": ctx.env_step,
            "env_episode": ctx.env_episode,
            "train_iter": ctx.train_iter,
            "wall_time_s": wall,
            "elapsed_s": self.clock.elapsed_s(),
            "time_to_stop_value_s": wall if reason == StopReason.STOP_VALUE else None,
            "evaluations": int(record["evaluations"]),
        }
        agent_means = (ctx.eval_output or {}).get("agent_means")
        if agent_means is not None:  # several agents per env: the last evaluation's return of each
            self.result["eval_agent_returns"] = list(agent_means)
        if reason == StopReason.ERROR:
            self.result["error"] = ctx.stop_detail
        if self._extra is not None:
            self.result.update(self._extra())
        if self._write:
            atomic_write_json(self._path, self.result)

    def close(self) -> None:
        """``elapsed_s`` up to now, in ``result`` and ``summary.json``; nothing when the run never finished
        (a pipeline closed without running)."""
        if not self.result:
            return
        self.result["elapsed_s"] = self.clock.elapsed_s()
        if self._write:
            atomic_write_json(self._path, self.result)
