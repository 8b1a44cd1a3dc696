"""Stopping by budget (env steps or train iterations) or when evaluations stop improving."""
from __future__ import annotations

from typing import Any, Callable, Optional

from engine.context import OnlineRLContext, StopReason
from engine.distributed import get_world_size

__all__ = ["termination_checker", "global_env_step", "restart_count", "PLATEAU_FIELD"]


def global_env_step(ctx: OnlineRLContext, world_size: int) -> int:
    """``ctx.env_step`` as the ranks will agree on it at the end of the current iteration.

    Under DDP ``ctx.env_step`` holds, until the ddp middleware sums the ranks' counts at the end of the
    iteration, the global count before it plus this rank's own collection. Every rank collects as much per
    iteration (``ctx.collect_stats``), so the global count after the iteration is this one plus the other
    ranks' equal share. In one process, or before the iteration's collection, it is ``ctx.env_step``."""
    stats = getattr(ctx, "collect_stats", None) if world_size > 1 else None
    return ctx.env_step + ((world_size - 1) * stats.get("env_steps", 0) if stats else 0)


def termination_checker(max_env_step: Optional[int] = None, max_train_iter: Optional[int] = None,
                        patience: int = 0) -> Callable[[OnlineRLContext], None]:
    """Middleware that finishes the task once ``ctx.env_step >= max_env_step`` or
    ``ctx.train_iter >= max_train_iter``, or after ``patience`` evaluations in a row that did not beat the
    best one (``patience`` > 0; the evaluation fields are rank 0's on every rank) (``ctx.stop_reason`` says
    which).

    Under DDP ``ctx.env_step`` holds, until the ddp middleware sums the ranks' counts at the end of the
    iteration, the global count before it plus this rank's own collection: the budget would be seen an
    iteration late, and every rank would collect once more. The budget is checked against the count the
    ranks will agree on (``global_env_step``): the run stops in the iteration that reaches the budget,
    overshooting it by less than the ranks' share of one iteration."""
    for name, value in (("max_env_step", max_env_step), ("max_train_iter", max_train_iter)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a non-negative int or None, got {value!r}")
    if not isinstance(patience, int) or patience < 0:
        raise ValueError(f"policy.eval.evaluator.patience must be a non-negative int (0: off), got {patience!r}")
    world_size = get_world_size()

    def _no_better_evaluation(ctx: OnlineRLContext) -> bool:
        plateau = getattr(ctx, PLATEAU_FIELD, None)
        if plateau is None:  # first call of a run without a count: its restored evaluation is no new one
            record = getattr(ctx, "evaluation_record", None) or {}
            # the larger: a checkpoint from before the count was kept has the record's best, which lacks an
            # evaluation the resumed run's first iteration made (the summary records it after this stage)
            best = max(float(record.get("best_eval_return", float("-inf"))), ctx.eval_value) \
                if ctx.last_eval_iter >= 0 else float("-inf")
            _count(ctx, best=best, since=0, seen=ctx.last_eval_iter)
            return False
        if ctx.last_eval_iter < 0 or ctx.last_eval_iter == plateau["seen"]:
            return False
        better = ctx.eval_value > plateau["best"]
        since = 0 if better else plateau["since"] + 1
        _count(ctx, best=ctx.eval_value if better else plateau["best"], since=since, seen=ctx.last_eval_iter)
        return since >= patience

    def _termination_checker(ctx: OnlineRLContext) -> None:
        if max_env_step is not None and global_env_step(ctx, world_size) >= max_env_step:
            ctx.finish = True
            ctx.stop_reason = ctx.stop_reason or StopReason.MAX_ENV_STEP
        if max_train_iter is not None and ctx.train_iter >= max_train_iter:
            ctx.finish = True
            ctx.stop_reason = ctx.stop_reason or StopReason.MAX_TRAIN_ITER
        if patience and _no_better_evaluation(ctx):
            ctx.finish = True
            ctx.stop_reason = ctx.stop_reason or StopReason.PLATEAU

    return _termination_checker


#: the context field of the patience count, ``{"best", "since", "seen"}`` (the best evaluation, the evaluations
#: since it, the ``last_eval_iter`` counted last): kept in the context, so checkpoints hold it and a resumed run
#: counts on (it counted from its last evaluation again, so a run requeued often never reached its patience);
#: one counted after its checkpoint was written is counted again at the resume, from ``seen``
PLATEAU_FIELD = "evaluation_plateau"


def restart_count(ctx: OnlineRLContext) -> None:
    """Count the evaluations without a new best afresh, against the run's best so far (a resumed run that had
    stopped on its patience and is given a larger budget)."""
    plateau = getattr(ctx, PLATEAU_FIELD, None)
    if plateau:
        _count(ctx, **dict(plateau, since=0))


def _count(ctx: OnlineRLContext, **plateau: Any) -> None:
    """Replace the patience count in ``ctx`` (never changed in place: a checkpoint of an earlier state, a
    background evaluation's best, keeps the count of its time), kept across iterations and in checkpoints."""
    setattr(ctx, PLATEAU_FIELD, plateau)
    ctx.keep(PLATEAU_FIELD)
