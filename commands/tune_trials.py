"""The trials of a ``baton tune`` study (``commands.tune``): each trained by the standard pipeline with the
values Optuna draws, in this process or in ``--jobs`` processes of their own, each evaluation reported to the
trial so that its pruner may end it."""
from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Tuple

from engine.overrides import apply_overrides

from .tune_store import STUDY_NAME, counted_trials, load_optuna, study_storage

__all__ = ["run_jobs", "TrialPruning"]

#: a median pruner judges a trial only once this many trials finished
PRUNER_STARTUP_TRIALS = 5
_INTERRUPTED = 130  # a job's exit status when its trial was interrupted (128 + SIGINT)


def run_jobs(spec: Any) -> int:
    """Run the study's missing trials in ``spec.jobs`` processes (in this one when 1); the number of
    processes that failed."""
    if spec.jobs == 1:
        if not _work(spec, worker=0, lock=None):
            raise KeyboardInterrupt
        return 0
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # never fork a process that may hold threads or a lock
    lock = context.Lock()
    processes = [context.Process(target=_job_main, args=(spec, worker, lock, os.getpid()), name=f"baton-tune-{worker}")
                 for worker in range(spec.jobs)]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join()
    except KeyboardInterrupt:  # the terminal told the jobs too: let their trials close, tell the ones it did not
        deadline = time.monotonic() + 5.0
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, 2)  # SIGINT: the run writes latest and ends
        for process in processes:
            process.join()
        raise
    if any(process.exitcode == _INTERRUPTED for process in processes):
        raise KeyboardInterrupt  # a trial was interrupted (a signal to its process alone): stop as Ctrl-C does
    return sum(1 for process in processes if process.exitcode not in (0, None))


def _job_main(spec: Any, worker: int, lock: Any, tune_pid: int) -> None:
    """A ``--jobs`` process: its trials, then exit 0 (130 when interrupted). It ends with the ``baton tune``
    process that started it, even one killed by SIGKILL (its trial cut short, as by a preemption: run again by
    the next command), rather than train on beside the trials that command would start."""
    from engine.launcher import end_with

    end_with(tune_pid)
    try:
        interrupted = not _work(spec, worker, lock)
    except KeyboardInterrupt:
        interrupted = True
    sys.exit(_INTERRUPTED if interrupted else 0)


def _work(spec: Any, worker: int, lock: Any) -> bool:
    """Run trials until the study holds ``spec.n_trials`` (counting those the other jobs are running);
    False when a trial was interrupted."""
    from engine.devices import size_torch_threads

    optuna = load_optuna()
    if not os.environ.get("OMP_NUM_THREADS"):  # this process's share of the cores, kept by the trials' pipelines
        os.environ["OMP_NUM_THREADS"] = str(size_torch_threads(0, local_world=spec.jobs))
    storage = study_storage(spec)
    existing = len(optuna.load_study(storage=storage, study_name=STUDY_NAME).trials)
    # seeded per job and per command: jobs alike, or a continued study, would draw the same values again
    sampler = optuna.samplers.TPESampler(seed=(spec.seed * 1_000_003 + worker * 7919 + existing) % 2**32)
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS, n_warmup_steps=spec.prune_after)
              if spec.prune else optuna.pruners.NopPruner())
    study = optuna.load_study(storage=storage, study_name=STUDY_NAME, sampler=sampler, pruner=pruner)
    while True:
        with lock if lock is not None else contextlib.nullcontext():
            if counted_trials(study, running=True) >= spec.n_trials:
                return True
            trial = study.ask()  # a trial cut short earlier (enqueued) first
        if not _run_trial(spec, study, trial):
            return False


def _run_trial(spec: Any, study: Any, trial: Any) -> bool:
    """Train one trial and tell the study how it ended; False when it was interrupted."""
    from optuna.trial import TrialState

    from .user_errors import USER_ERRORS

    run_dir = os.path.join(spec.study_dir, f"trial_{trial.number}")
    trial.set_user_attr("run_dir", run_dir)
    values = {dist.key: dist.suggest(trial) for dist in spec.space}
    overrides = [dist.override(values[dist.key]) for dist in spec.space]
    shown = " ".join(overrides)
    try:
        summary, pruning = _train(spec, trial, overrides, run_dir)
    except KeyboardInterrupt:  # Ctrl-C, a preemption signal: run again by the next command (no "error")
        study.tell(trial, state=TrialState.FAIL)
        print(f"baton: trial {trial.number} interrupted ({shown})", file=sys.stderr, flush=True)
        return False
    except USER_ERRORS as err:  # a value the config or the policy refuses: this trial fails, the study goes on
        return _failed(study, trial, shown, str(err))
    except Exception as err:  # a bug: its traceback, and the study goes on (the next values may not hit it)
        traceback.print_exc()
        return _failed(study, trial, shown, f"{type(err).__name__}: {err}")
    for key in ("env_step", "wall_time_s", "stop_reason", "evaluations"):
        trial.set_user_attr(key, summary.get(key))
    if pruning.pruned_at is not None:
        study.tell(trial, state=TrialState.PRUNED)
        print(f"baton: trial {trial.number} pruned at evaluation {pruning.pruned_at} "
              f"(return {pruning.last:.6g}; {shown})", flush=True)
        return True
    value = summary.get("best_eval_return")
    if value is None:
        return _failed(study, trial, shown, f"no evaluation within the trial's budget ({spec.budget_flags()}): raise "
                                            f"it, or evaluate more often (policy.eval.evaluator.eval_freq)")
    study.tell(trial, float(value))
    print(f"baton: trial {trial.number} complete: best_eval_return={value:.6g} in {summary['wall_time_s']:.1f} s "
          f"({shown})", flush=True)
    return True


def _failed(study: Any, trial: Any, shown: str, message: str) -> bool:
    from optuna.trial import TrialState

    trial.set_user_attr("error", message)  # a failure of the values: counted, never run again
    study.tell(trial, state=TrialState.FAIL)
    print(f"baton: trial {trial.number} failed ({shown}): {message}", file=sys.stderr, flush=True)
    return True


def _train(spec: Any, trial: Any, overrides: List[str], run_dir: str) -> Tuple[Dict[str, Any], "TrialPruning"]:
    """The trial's run: the standard pipeline with the trial's values, reporting each evaluation to it."""
    from pipelines.build import build_pipeline

    main_config, create_config = apply_overrides(spec.base[0], spec.base[1], overrides)
    pipeline = build_pipeline((main_config, create_config), spec.seed, spec.max_env_step, spec.max_train_iter,
                              exp_name=run_dir, progress=False)
    pruning = TrialPruning(trial)
    if "evaluator" in pipeline:
        pipeline.insert_after("evaluator", pruning, name="pruning", main_only=True)
    else:
        pipeline.append(pruning, name="pruning", main_only=True)
    return pipeline.run(), pruning


class TrialPruning:
    """Middleware: each new evaluation's return goes to the Optuna trial (step: the evaluation's number, 1, 2,
    ...), and when the trial's pruner says so the run ends at this iteration (``pruned_at``: that number).

    It reads the context's evaluation fields (``eval_output``, ``last_eval_iter``, ``eval_value``), so a
    background evaluation's result counts when it arrives."""

    def __init__(self, trial: Any) -> None:
        self._trial = trial
        self._seen: Optional[int] = None
        self.evaluations = 0
        self.last = float("nan")
        self.pruned_at: Optional[int] = None

    def __call__(self, ctx: Any) -> None:
        if ctx.eval_output is None or ctx.last_eval_iter == self._seen:
            return
        self._seen = ctx.last_eval_iter
        self.evaluations += 1
        self.last = float(ctx.eval_value)
        self._trial.report(self.last, self.evaluations)
        if self.pruned_at is None and self._trial.should_prune():
            from engine.context import StopReason

            self.pruned_at = self.evaluations
            ctx.finish = True
            ctx.stop_reason = ctx.stop_reason or StopReason.FINISHED
