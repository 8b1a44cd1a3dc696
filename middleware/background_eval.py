"""Evaluation in the background: a snapshot of the weights is evaluated in another process while training
goes on, and the result enters the context at a later iteration.

One evaluation, from iteration k to iteration m > k:

1. **iteration k**, an eval point (``evaluation_due``) with the evaluation process idle: the weights the
   policy acts with are copied (``acting_weights``) and sent to the process (``middleware.eval_worker``),
   which owns the evaluator's envs and its own copy of the policy. When a checkpoint saver wants them, the
   learn state and the context's persistent fields are copied to host memory too (a ``Snapshot``).
2. **iterations k+1 ...**: training goes on. An eval point that comes while the evaluation runs starts
   nothing and is not queued: evaluations never overlap, and the next one starts at the first eval point
   after the result is out (from the iteration after its publication, so the saver has read the snapshot).
3. **iteration m**, the first whose evaluator stage finds the job done: the result is published into
   ``ctx.eval_value`` / ``eval_output`` / ``last_eval_iter`` with the snapshot's ``train_iter`` and
   ``env_step`` (so logs plot it where the weights were; ``eval_output["background"]`` is True and
   ``lag_s`` says how old it is), and reaching ``stop_value`` finishes the run. Under DDP the ddp
   middleware carries these ``Sync.RANK0`` fields to every rank at the end of iteration m, as it does a
   blocking evaluation's: every rank sees the result, and stops, in iteration m.

The process starts at the evaluator's first call and builds while training begins; the first evaluation
starts at the first eval point once it is ready.

At the end of a run (``at_finish`` in the summary's ``background_eval``):

- ``final``: a budget (``max_env_step``, ``max_train_iter``) ended the run with updates no evaluation had seen
  or was seeing; its last weights were evaluated in the process and published in that last iteration (an
  evaluation of older weights still running was cancelled for it), so the logs, the summary and the best
  checkpoint speak of the policy the run ends with, as ``middleware.evaluator.final_evaluation`` makes them
  without background evaluation;
- ``waited``: the run finished (``ctx.finish``: a budget, the stop value) with an evaluation running and no
  final one due; its result was waited for (at most ``finish_timeout_s``) and published in that last
  iteration, so the logs, the summary and the best checkpoint have it (the stop reason stays what it was);
- ``timed_out``: that wait, or the final evaluation's (the process's build and the episodes, at most
  ``finish_timeout_s`` in all), ran out, and the evaluation was cancelled;
- ``cancelled``: the run ended otherwise (an error, Ctrl-C, ``task.run(max_step)``): the evaluation was
  cancelled without waiting (it stops within one env step; ``cancel_timeout_s`` bounds the wait for that);
- ``none``: no evaluation was running.

Then the process exits (it is terminated, then killed, if it does not within ``cancel_timeout_s``) and
closes its envs. Memory: one snapshot at a time (the weights under evaluation, or those of the result
published last).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch

from engine.context import OnlineRLContext
from engine.distributed import get_world_size

from .eval_worker import BackgroundEvaluationError, EvalReply, EvalWorker, WorkerSide
from .evaluator import evaluation_due, evaluation_output, final_evaluation_due, publish_evaluation
from .termination import global_env_step

__all__ = ["BackgroundEvaluator", "BackgroundEvaluationError", "FinishAction", "Snapshot", "host_copy"]

logger = logging.getLogger(__name__)

_EVAL_FIELDS = ("eval_value", "last_eval_value", "last_eval_iter", "eval_output")


class FinishAction(str, Enum):
    """What became of the evaluation running when the run ended (see the module docstring)."""

    NONE = "none"
    FINAL = "final"
    WAITED = "waited"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


@dataclass
class Snapshot:
    """Where training was when the weights under evaluation were taken.

    Attributes:
        train_iter, env_step: the context's counters then.
        taken_at: ``time.perf_counter()`` then.
        learn_state: a host copy of the learn state (model, target, optimizer), for the best checkpoint;
            None when nobody asked for it.
        ctx_state: the context's persistent fields then, with the evaluation's own fields once it is
            published (what a best checkpoint of these weights holds).
    """

    train_iter: int
    env_step: int
    taken_at: float
    learn_state: Optional[Dict[str, Any]] = None
    ctx_state: Optional[Dict[str, Any]] = None


def host_copy(value: Any) -> Any:
    """A copy of a state dict (nested dicts, lists, tuples, tensors, numbers) whose tensors are new host
    tensors: what training does to the original afterwards (in-place optimizer steps) does not reach it.

    Examples:
        >>> w = torch.zeros(2); copy = host_copy({"model": {"w": w}, "updates": 3})
        >>> _ = w.add_(1.0); copy["model"]["w"].tolist(), copy["updates"]
        ([0.0, 0.0], 3)
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, Mapping):
        return {key: host_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(host_copy(item) for item in value)
    return value


class BackgroundEvaluator:
    """Middleware: ``InteractionEvaluator``'s evaluations (same schedule, seeds, episodes and stop), run in
    another process on a snapshot of the weights while training goes on (the module docstring).

    Register it where the blocking evaluator goes: after the ddp middleware (whose sync at the end of the
    iteration carries the result to every rank; its code after ``yield`` waits for the last result when the
    run finishes, before that sync) and before the checkpoint saver (which reads the snapshot of a new best
    through ``evaluated_state``).

    Args:
        build: builds, in the evaluation process, the eval policy, its weight loader and the evaluator's
            envs (``middleware.eval_worker.WorkerSide``; it must pickle).
        weights: returns the weights to evaluate now, in the form ``build``'s loader takes
            (``policy.acting_weights``).
        eval_freq, n_episode, stop_value, seed: as ``InteractionEvaluator``.
        learn_state: returns the learn state to keep with each snapshot (``policy.learn_mode.state_dict``),
            for a best checkpoint of the evaluated weights; None: keep none.
        finish_timeout_s: how long the last iteration waits for a running evaluation (under DDP the other
            ranks wait in their collective meanwhile: keep it below ``BATON_DDP_TIMEOUT``).
        cancel_timeout_s: how long a cancelled evaluation, and then the process's exit, are waited for.
        start_method: how the process starts (``middleware.eval_worker``): None (fork on Linux), ``"fork"``,
            ``"spawn"`` (needed where the process acts on a GPU).
        seen: told of ``ctx`` before the final evaluation replaces one published earlier in the same iteration
            (the run summary's count, as ``middleware.evaluator.final_evaluation``'s ``seen``); an attribute, set
            by the pipeline once its summary exists.

    Raises:
        ValueError: ``n_episode`` not positive, a negative timeout.
        BackgroundEvaluationError: (when running) the process failed to start or build, an evaluation
            raised, or the process died; the message says which.
    """

    def __init__(self, build: WorkerSide, weights: Callable[[], Any], *, eval_freq: int, n_episode: int,
                 stop_value: float = float("inf"), seed: int = 0,
                 learn_state: Optional[Callable[[], Mapping[str, Any]]] = None, finish_timeout_s: float = 60.0,
                 cancel_timeout_s: float = 5.0, start_method: Optional[str] = None,
                 seen: Optional[Callable[[OnlineRLContext], None]] = None) -> None:
        if not callable(build) or not callable(weights):
            raise TypeError(f"BackgroundEvaluator needs callables for build and weights, got {build!r} and "
                            f"{weights!r}")
        self._worker = EvalWorker(build, start_method)
        self._weights = weights
        self._eval_freq = int(eval_freq)
        self._n_episode = int(n_episode)
        self._stop_value = float(stop_value)
        self._seed = seed + 100_000  # evaluation k resets env i with seed + 100000 + k * num_envs + i
        self._learn_state = learn_state
        self._finish_timeout = float(finish_timeout_s)
        self._cancel_timeout = float(cancel_timeout_s)
        self.seen = seen
        if self._n_episode <= 0:
            raise ValueError(f"env.n_evaluator_episode must be positive, got {self._n_episode}")
        if self._finish_timeout < 0 or self._cancel_timeout < 0:
            raise ValueError(f"finish_timeout_s and cancel_timeout_s must be >= 0, got {finish_timeout_s} and "
                             f"{cancel_timeout_s}")
        self._count = 0
        self._running: Optional[Snapshot] = None     # the snapshot under evaluation
        self._published: Optional[Snapshot] = None   # the snapshot of the result published last
        self.evaluations = 0
        self.at_finish = FinishAction.NONE
        self._lag_iters = 0
        self._lag_s = 0.0
        self._late = 0          # evaluations published while training went on (the lag's count)
        self._seconds = 0.0     # how long the last evaluation took in the process
        self._world_size = get_world_size()

    # ---- the middleware ----------------------------------------------------------------------------
    def __call__(self, ctx: OnlineRLContext):
        self._worker.start()  # once: the process builds while training begins
        reply = self._poll(0.0)
        if reply is not None:
            self._publish(ctx, reply, self._stop_value)
        elif self._running is None and self._worker.idle and evaluation_due(ctx, self._eval_freq):
            self._start(ctx)  # (not in the iteration of a publication: the saver reads that snapshot first)
        try:
            yield
        except GeneratorExit:  # the loop is closing after an error in a later stage
            self._end(FinishAction.CANCELLED)
            raise
        if ctx.finish and self._final_due(ctx):
            self._final_evaluation(ctx)
        elif ctx.finish and self._running is not None:
            self._finish_waiting(ctx)

    def on_finish(self, ctx: OnlineRLContext) -> None:
        self._end(FinishAction.CANCELLED)

    # ---- what the pipeline reads -------------------------------------------------------------------
    @property
    def running(self) -> Optional[Snapshot]:
        """The snapshot under evaluation now, or None."""
        return self._running

    def evaluated_state(self, train_iter: int) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
        """``(learn state, ctx state)`` of the weights whose result was published last, if that result is
        the evaluation of ``train_iter`` (``ctx.last_eval_iter``) and ``learn_state`` was given: what a
        best checkpoint must hold (the weights evaluated, not the current ones). Else None."""
        snap = self._published
        if snap is None or snap.train_iter != train_iter or snap.learn_state is None:
            return None
        return snap.learn_state, snap.ctx_state

    def finish_report(self) -> Dict[str, Any]:
        """For the run summary: evaluations published, what became of the one running at the end
        (``at_finish``), and their mean age when published. Ends the evaluation process first (cancelling a
        running evaluation), so that any ``finish`` listener may call it, whichever runs first."""
        self._end(FinishAction.CANCELLED)
        n = max(self._late, 1)
        return {"evaluations": self.evaluations, "at_finish": str(self.at_finish),
                "mean_lag_train_iter": self._lag_iters / n, "mean_lag_s": self._lag_s / n}

    # ---- helpers -----------------------------------------------------------------------------------
    def _start(self, ctx: OnlineRLContext, env_step: Optional[int] = None) -> None:
        """Snapshot the weights and send them to the idle process; ``env_step``: the count to label the
        evaluation with, where it is not ``ctx``'s (the final one under DDP: the ranks' agreed total)."""
        self._published = None  # one snapshot at a time: the saver read the last one in its iteration
        env_step = ctx.env_step if env_step is None else int(env_step)
        snapshot = Snapshot(ctx.train_iter, env_step, time.perf_counter())
        if self._learn_state is not None:
            snapshot.learn_state = host_copy(self._learn_state())
            snapshot.ctx_state = {**ctx.persistent_state(), "env_step": env_step}
        self._worker.submit(self._weights(), self._seed + self._count * self._worker.num_envs, self._n_episode)
        self._count += 1
        self._running = snapshot

    def _poll(self, timeout: float) -> Optional[EvalReply]:
        """The running evaluation's reply, if it ended within ``timeout`` s; its failure named by snapshot."""
        try:
            return self._worker.poll(timeout)
        except BackgroundEvaluationError as err:
            snap, self._running = self._running, None
            if snap is None:
                raise
            raise BackgroundEvaluationError(f"the background evaluation of the weights of train_iter "
                                            f"{snap.train_iter} (env_step {snap.env_step}) failed: {err}") from err

    def _publish(self, ctx: OnlineRLContext, reply: EvalReply, stop_value: float, late: bool = True) -> None:
        snap, self._running = self._running, None
        if reply.cancelled or snap is None:  # a cancel comes only from _end, which drops the snapshot first
            return
        output = evaluation_output(reply.episodes, train_iter=snap.train_iter, env_step=snap.env_step,
                                   duration=reply.seconds)
        lag_s = time.perf_counter() - snap.taken_at
        output.update(background=True, lag_s=lag_s, published_train_iter=ctx.train_iter,
                      published_env_step=ctx.env_step)
        publish_evaluation(ctx, output, stop_value)
        self.evaluations += 1
        self._seconds = reply.seconds
        if late:  # the final evaluation is waited for: no lag of a background result
            self._late += 1
            self._lag_iters += ctx.train_iter - snap.train_iter
            self._lag_s += lag_s
        if snap.ctx_state is not None:
            state = ctx.persistent_state()
            snap.ctx_state.update({name: state[name] for name in _EVAL_FIELDS if name in state})
        self._published = snap

    def _finish_waiting(self, ctx: OnlineRLContext) -> None:
        """The run finishes in this iteration: wait (bounded) for the running evaluation and publish it, so
        the logs, the summary and the checkpoint have it. It does not change why the run stopped."""
        reply = self._poll(self._finish_timeout)
        if reply is None:
            logger.warning("the background evaluation of train_iter %d did not finish within %.0f s of the end "
                           "of the run: cancelled", self._running.train_iter, self._finish_timeout)
            self._end(FinishAction.TIMED_OUT)
            return
        self._publish(ctx, reply, stop_value=float("inf"))
        self.at_finish = FinishAction.WAITED

    def _final_due(self, ctx: OnlineRLContext) -> bool:
        """A budget ends the run with updates that no evaluation has seen or is seeing, and the process is still
        there to evaluate its last weights (``middleware.evaluator.final_evaluation_due``)."""
        running = self._running.train_iter if self._running is not None else None
        return final_evaluation_due(ctx, running) and not self._worker.closed

    def _final_evaluation(self, ctx: OnlineRLContext) -> None:
        """The run ends at its budget: its last weights are evaluated once and published, so the summary,
        progress.csv and the best checkpoint speak of the policy it ends with, as without background evaluation.
        An evaluation of older weights still running is published if it has just ended, and otherwise cancelled
        for the final one, unless an evaluation takes longer than the time left (the last one's duration): then
        the running one is waited for, as before. At most ``finish_timeout_s`` in all is waited, for the process
        to be built and for the episodes; past it the run ends without (said, ``at_finish`` ``timed_out``)."""
        deadline = time.monotonic() + self._finish_timeout
        if self._running is not None:
            reply = self._poll(0.0)
            if reply is not None:  # it has just ended: published (and counted, before the final one replaces it)
                self._publish(ctx, reply, stop_value=float("inf"))
            elif self._seconds > self._finish_timeout / 2:  # a fresh one would not fit beside the cancel: wait
                self._finish_waiting(ctx)
                return
            else:
                self.at_finish, self._running = FinishAction.TIMED_OUT, None  # superseded by the final one
                cancel_s = min(self._cancel_timeout, self._finish_timeout)
                if not self._worker.cancel(cancel_s):
                    logger.warning("the evaluation process did not stop its evaluation within %.1f s of the cancel: "
                                   "no final evaluation", cancel_s)
                    self._end(FinishAction.TIMED_OUT)
                    return
        while self._worker.starting and time.monotonic() < deadline:  # a run shorter than the process's build
            self._poll(deadline - time.monotonic())
        if not self._worker.idle:
            logger.warning("the evaluation process was not ready at the end of the run (within finish_timeout_s, "
                           "%.1f s): no final evaluation", self._finish_timeout)
            self.at_finish = FinishAction.TIMED_OUT
            self._end(FinishAction.TIMED_OUT)
            return
        if self.seen is not None:
            self.seen(ctx)  # an evaluation published earlier in this iteration, before it is replaced
        self._start(ctx, env_step=global_env_step(ctx, self._world_size))
        reply = self._poll(max(0.0, deadline - time.monotonic()))
        if reply is None:
            logger.warning("the final evaluation (train_iter %d) did not finish within finish_timeout_s (%.1f s) "
                           "of the end of the run: cancelled", ctx.train_iter, self._finish_timeout)
            self._end(FinishAction.TIMED_OUT)
            return
        self._publish(ctx, reply, stop_value=float("inf"), late=False)
        self.at_finish = FinishAction.FINAL

    def _end(self, action: FinishAction) -> None:
        """Cancel the running evaluation, if any (recording ``action``), and end the process."""
        if self._running is not None:
            self.at_finish = action
            logger.info("background evaluation of train_iter %d %s at the end of the run", self._running.train_iter,
                        action)
            self._running = None
            if not self._worker.cancel(self._cancel_timeout):
                logger.warning("the evaluation process did not stop its evaluation within %.0f s of the cancel",
                               self._cancel_timeout)
        self._worker.close(self._cancel_timeout)
