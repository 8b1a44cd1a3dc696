"""The trials of a ``baton tune`` study (``commands.tune``): each trained by the standard pipeline with the
values Optuna draws, in this process or in ``--jobs`` processes of their own, each evaluation reported to the
trial so that its pruner may end it."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Tuple

from engine.overrides import apply_overrides

from .tune_store import (ENVIRONMENT_ATTR, STUDY_NAME, EnvironmentFailure, counted_trials, disk_full, load_optuna,
                         study_storage)

__all__ = ["run_jobs", "TrialPruning", "preempt_signals", "trial_pruner", "trial_sampler"]

#: a median pruner judges a trial only once this many trials finished
PRUNER_STARTUP_TRIALS = 5
_INTERRUPTED = 130  # a job's exit status when its trial was interrupted by Ctrl-C (128 + SIGINT)
_ENVIRONMENT = 75  # a job's exit status when a full disk stopped it (sysexits' EX_TEMPFAIL: run it again later)
_KILL_AFTER_S = 10.0  # a job still alive this long after its grace (preempt.grace_s) is killed


def preempt_signals(spec: Any) -> List[str]:
    """The trials' ``preempt.signals`` (as the config gives them; the default ones otherwise)."""
    from engine.preemption import DEFAULT_SIGNALS

    section = spec.base[0].get("preempt") if hasattr(spec.base[0], "get") else None
    signals = section.get("signals", DEFAULT_SIGNALS) if hasattr(section, "get") else DEFAULT_SIGNALS
    return list(signals) if isinstance(signals, (list, tuple)) else list(DEFAULT_SIGNALS)


def run_jobs(spec: Any) -> int:
    """Run the study's missing trials in ``spec.jobs`` processes (in this one when 1); the number of
    processes that failed.

    Raises:
        Preempted: a preemption signal stopped the study (this process's, passed on to the jobs, or a job's own):
            its ``exit_code`` is the command's.
        KeyboardInterrupt: Ctrl-C stopped it.
        EnvironmentFailure: a full disk stopped a trial (recorded to run again).
    """
    if spec.jobs == 1:
        _work(spec, worker=0, lock=None)
        return 0
    import multiprocessing

    from engine.preemption import Preempted, exit_code, signal_number

    context = multiprocessing.get_context("spawn")  # never fork a process that may hold threads or a lock
    lock, reports = context.Lock(), context.SimpleQueue()
    processes = [context.Process(target=_job_main, args=(spec, worker, lock, os.getpid(), reports),
                                 name=f"baton-tune-{worker}") for worker in range(spec.jobs)]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join()
    except Preempted as err:  # this process was signalled: each job stops its trial as a preemption does
        _pass_on(processes, signal_number(err.signal), _grace_s(spec))
        raise
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
    codes = [process.exitcode for process in processes]
    preempted = {}
    for name in preempt_signals(spec):
        with contextlib.suppress(ValueError):  # a name no signal has: the trials' config check names it
            preempted[exit_code(signal_number(name))] = signal.Signals(signal_number(name)).name
    stopped = next((code for code in codes if code in preempted), None)
    if stopped is not None:  # a job's trial was stopped by a signal to its process alone: the study stops too
        raise Preempted(preempted[stopped], stopped)
    if _INTERRUPTED in codes:
        raise KeyboardInterrupt  # a trial was interrupted (Ctrl-C to its process alone): stop as Ctrl-C does
    if _ENVIRONMENT in codes:
        lines = []
        while not reports.empty():
            lines.append(reports.get())
        raise EnvironmentFailure(lines[0] if lines else "a trial process stopped on a full disk (its line is above)")
    return sum(1 for code in codes if code not in (0, None))


def _grace_s(spec: Any) -> float:
    section = spec.base[0].get("preempt") if hasattr(spec.base[0], "get") else None
    grace = section.get("grace_s", 20.0) if hasattr(section, "get") else 20.0
    return float(grace) if isinstance(grace, (int, float)) else 20.0


def _pass_on(processes: List[Any], signum: int, grace_s: float) -> None:
    """Send ``signum`` to each job still running and wait for them (their trials stop at an iteration boundary
    and write ``latest``); one still alive ``grace_s`` + 10 s later (``preempt.grace_s`` 0: never) is killed."""
    for process in processes:
        if process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signum)
    deadline = time.monotonic() + grace_s + _KILL_AFTER_S if grace_s > 0 else None
    for process in processes:
        process.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _job_main(spec: Any, worker: int, lock: Any, tune_pid: int, reports: Any) -> None:
    """A ``--jobs`` process: its trials, then exit 0; 128 + the signal's number when a preemption signal
    stopped it, 130 when Ctrl-C did, 75 when a full disk did (its line in ``reports``). It ends with the ``baton
    tune`` process that started it, even one killed by SIGKILL (its trial cut short, as by a preemption: run
    again by the next command), rather than train on beside the trials that command would start."""
    from engine.launcher import end_with
    from engine.preemption import Preempted, stop_signals

    end_with(tune_pid)
    code = 0
    with stop_signals(preempt_signals(spec)):  # a signal between trials, or as a trial is built, stops it too
        try:
            _work(spec, worker, lock)
        except Preempted as err:
            code = err.exit_code
        except KeyboardInterrupt:
            code = _INTERRUPTED
        except EnvironmentFailure as err:
            reports.put(str(err))
            code = _ENVIRONMENT
        except Exception as err:  # the study itself on a full disk (its database): as for a trial
            line = disk_full(err, spec.study_dir)
            if line is None:
                raise
            print(f"baton: job {worker} stopped: {line}", file=sys.stderr, flush=True)
            reports.put(line)
            code = _ENVIRONMENT
    sys.exit(code)


def _work(spec: Any, worker: int, lock: Any) -> None:
    """Run trials until the study holds ``spec.n_trials`` (counting those the other jobs are running).

    Raises:
        KeyboardInterrupt (Preempted included): a trial was stopped, or the process between trials.
        EnvironmentFailure: a full disk stopped a trial.
    """
    from engine.devices import size_torch_threads

    optuna = load_optuna()
    if not os.environ.get("OMP_NUM_THREADS"):  # this process's share of the cores, kept by the trials' pipelines
        os.environ["OMP_NUM_THREADS"] = str(size_torch_threads(0, local_world=spec.jobs))
    storage = study_storage(spec)
    existing = len(optuna.load_study(storage=storage, study_name=STUDY_NAME).trials)
    # seeded per job and per command: jobs alike, or a continued study, would draw the same values again
    sampler = trial_sampler(optuna, (spec.seed * 1_000_003 + worker * 7919 + existing) % 2**32)
    study = optuna.load_study(storage=storage, study_name=STUDY_NAME, sampler=sampler,
                              pruner=trial_pruner(optuna, spec.prune, spec.prune_after))
    while True:
        with lock if lock is not None else contextlib.nullcontext():
            if counted_trials(study, running=True) >= spec.n_trials:
                return
            trial = study.ask()  # a trial cut short earlier (enqueued) first
        _run_trial(spec, study, trial)


def trial_sampler(optuna: Any, seed: int) -> Any:
    """TPE with its constant liar: the trials other jobs are running count as bad draws, so parallel jobs do not
    all try one region (docs/tuning.md). Optuna before 5 leaves it off by default and calls it experimental."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def trial_pruner(optuna: Any, prune: bool, prune_after: int) -> Any:
    """The study's pruner: a median pruner that never ends a trial in its first ``prune_after`` evaluations.

    Evaluations are reported at steps 1, 2, ... (``TrialPruning``), and Optuna judges a step once it is not below
    ``n_warmup_steps``: ``prune_after`` itself as the warm-up would judge evaluation ``prune_after`` already (the
    first evaluation is usually of the untrained policy: a default of 2 pruned on one evaluation of trained weights).
    """
    if not prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS, n_warmup_steps=prune_after + 1)


def _run_trial(spec: Any, study: Any, trial: Any) -> None:
    """Train one trial and tell the study how it ended.

    Raises:
        KeyboardInterrupt (Preempted included): it was stopped; recorded as cut short (the next command runs it
            again).
        EnvironmentFailure: a full disk failed it; recorded as cut short too.
    """
    from optuna.trial import TrialState

    from engine.preemption import Preempted

    from .user_errors import USER_ERRORS

    run_dir = os.path.join(spec.study_dir, f"trial_{trial.number}")
    trial.set_user_attr("run_dir", run_dir)
    values = {dist.key: dist.suggest(trial) for dist in spec.space}
    overrides = [dist.override(values[dist.key]) for dist in spec.space]
    shown = " ".join(overrides)
    try:
        summary, pruning = _train(spec, trial, overrides, run_dir)
    except KeyboardInterrupt as err:  # Ctrl-C, a preemption signal: run again by the next command (no "error")
        how = f"stopped by {err.signal}" if isinstance(err, Preempted) else "interrupted"
        study.tell(trial, state=TrialState.FAIL)
        print(f"baton: trial {trial.number} {how} ({shown}); the next command runs it again", file=sys.stderr,
              flush=True)
        raise
    except Exception as err:
        line = disk_full(err, run_dir)
        if line is not None:  # where it ran, not its values: recorded to run again, and the study stops here
            with contextlib.suppress(Exception):  # the study's own disk may be the full one: then it stays
                trial.set_user_attr(ENVIRONMENT_ATTR, line)  # running, which the next command also runs again
                study.tell(trial, state=TrialState.FAIL)
            print(f"baton: trial {trial.number} stopped ({shown}): {line}; the next command runs it again",
                  file=sys.stderr, flush=True)
            raise EnvironmentFailure(line) from err
        if isinstance(err, USER_ERRORS):  # a value the config or the policy refuses: this trial fails, the study
            _failed(study, trial, shown, str(err))  # goes on
            return
        traceback.print_exc()  # a bug: its traceback, and the study goes on (the next values may not hit it)
        _failed(study, trial, shown, f"{type(err).__name__}: {err}")
        return
    for key in ("env_step", "wall_time_s", "stop_reason", "evaluations"):
        trial.set_user_attr(key, summary.get(key))
    if pruning.pruned_at is not None:
        study.tell(trial, state=TrialState.PRUNED)
        print(f"baton: trial {trial.number} pruned at evaluation {pruning.pruned_at} "
              f"(return {pruning.last:.6g}; {shown})", flush=True)
        return
    value = summary.get("best_eval_return")
    if value is None:
        _failed(study, trial, shown, f"no evaluation within the trial's budget ({spec.budget_flags()}): raise "
                                     f"it, or evaluate more often (policy.eval.evaluator.eval_freq)")
        return
    study.tell(trial, float(value))
    print(f"baton: trial {trial.number} complete: best_eval_return={value:.6g} in {summary['wall_time_s']:.1f} s "
          f"({shown})", flush=True)


def _failed(study: Any, trial: Any, shown: str, message: str) -> None:
    from optuna.trial import TrialState

    trial.set_user_attr("error", message)  # a failure of the values: counted, never run again
    study.tell(trial, state=TrialState.FAIL)
    print(f"baton: trial {trial.number} failed ({shown}): {message}", file=sys.stderr, flush=True)


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
