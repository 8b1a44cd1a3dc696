"""``baton tune -c CONFIG --trials N [--jobs K] [--study-dir DIR] KEY=DIST ... [KEY=VALUE ...]``: a hyperparameter
study of a config with Optuna (``pip install -e ".[tune]"``).

1. The ``KEY=DIST`` words are the search space (``commands.search_space``: ``loguniform``, ``uniform``,
   ``int``, ``choice``), the ``KEY=VALUE`` words fixed overrides. Every key and every bound is checked
   against the config before anything runs: an unknown key names the closest valid one, a bound the config
   refuses (``policy.learn.batch_size=choice(0,64)``) names the value.
2. The study lives in ``DIR/study.db`` (SQLite; default ``DIR``: ``<exp_name>_tune``). Each trial is an
   ordinary run directory, ``DIR/trial_<n>`` (``config.json``, ``progress.csv``, checkpoints, ``summary.json``),
   trained by the standard pipeline with the trial's values, the same seed and the same budget
   (``--max-env-step``/``--max-train-iter``, required: a trial that never reaches ``env.stop_value`` would
   never end).
3. The objective is the run's best evaluation return (``summary.json``'s ``best_eval_return``), maximised by
   Optuna's TPE sampler. Each evaluation's return is reported to the trial as it happens (step: the
   evaluation's number), and a median pruner ends a trial whose return falls below the median of earlier
   trials at the same evaluation (after 5 trials, from the evaluation after ``--prune-after``; ``--no-prune``:
   never). A pruned run stops where it is and keeps its directory.
4. ``--jobs K`` runs K trials at a time, each in its own process with torch threads sized to its share of the
   cores (``engine.devices.size_torch_threads`` over K processes; ``OMP_NUM_THREADS`` wins). The trial count
   is shared: the processes together run ``--trials`` trials, never more.
5. At the end: a table of the trials, and the best trial's configuration written as a runnable config file,
   ``DIR/best_config.py`` (``baton train -c DIR/best_config.py``).

Stopped (Ctrl-C, a kill, a machine that went away), the same command continues the study: the trials that
finished are kept, the ones cut short are run again with the same values, and ``--trials`` counts the total.
Only ``--trials`` and ``--jobs`` may change between the commands of one study; anything else is refused,
naming the difference (a study whose trials ran different budgets or spaces compares nothing).

One ``baton tune`` works on a study at a time (a lock on ``DIR``, ``pipelines.run_dir.RunLock``).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import sys
import textwrap
import time
import traceback
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from engine.config import ConfigError
from engine.devices import usable_cores
from engine.overrides import apply_overrides, field_default
from engine.registry import UnknownTypeError

from pipelines.run_dir import RunDirError, RunLock
from .search_space import FORMS, Distribution, SearchSpaceError, split_search_words, value_text
from .user_errors import print_user_error

__all__ = ["TuneError", "StudySpec", "TrialPruning", "add_tune_options", "tune_main", "prepare_study", "run_study",
           "trials_table", "write_best_config", "STUDY_FILE", "BEST_CONFIG"]

logger = logging.getLogger(__name__)

STUDY_FILE = "study.db"
BEST_CONFIG = "best_config.py"
STUDY_NAME = "baton"
#: the study's user attribute holding what its trials were run with (checked when the study continues)
RECORD_ATTR = "baton_search"
#: a median pruner judges a trial only once this many trials finished
PRUNER_STARTUP_TRIALS = 5
_INTERRUPTED = 130  # a job's exit status when its trial was interrupted (128 + SIGINT)
_INSTALL = "pip install -e \".[tune]\" (or pip install optuna)"


class TuneError(ValueError):
    """Input ``baton tune`` cannot run; the message names what to change."""


@dataclasses.dataclass(frozen=True)
class StudySpec:
    """Everything a study's processes need, as plain picklable data (``--jobs`` sends it to each).

    Attributes:
        study_dir: the study's directory: ``study.db``, the ``trial_<n>`` runs, ``best_config.py``.
        config_path: the config file the study tunes (for the record and the best config's docstring).
        base: ``(main_config, create_config)`` with the fixed overrides set.
        space: the distributions, in command-line order.
        fixed: the fixed ``KEY=VALUE`` overrides (already in ``base``; kept for the record).
        n_trials: trials the study holds when done (finished ones of earlier commands included).
        jobs: trials at a time, one process each.
        seed: every trial's seed (trials differ in their values only); the sampler's seed derives from it.
        max_env_step, max_train_iter: every trial's budget.
        prune: end trials the median pruner judges worse; prune_after: evaluations a trial always gets.
    """

    study_dir: str
    config_path: str
    base: Tuple[Dict[str, Any], Dict[str, Any]]
    space: Tuple[Distribution, ...]
    fixed: Tuple[str, ...]
    n_trials: int
    jobs: int = 1
    seed: int = 0
    max_env_step: Optional[int] = None
    max_train_iter: Optional[int] = None
    prune: bool = True
    prune_after: int = 2

    @property
    def storage_url(self) -> str:
        return f"sqlite:///{os.path.abspath(os.path.join(self.study_dir, STUDY_FILE))}"

    def record(self) -> Dict[str, Any]:
        """What the trials of this study must share (stored in the study, compared when it continues)."""
        digest = hashlib.sha256(json.dumps(self.base, sort_keys=True, default=repr).encode()).hexdigest()[:16]
        return {"config": os.path.abspath(self.config_path), "config_sha256": digest,
                "space": {dist.key: dist.text for dist in self.space}, "fixed": list(self.fixed), "seed": self.seed,
                "max_env_step": self.max_env_step, "max_train_iter": self.max_train_iter}

    def budget_flags(self) -> str:
        return " ".join(f"--{name.replace('_', '-')} {value}" for name, value in
                        (("max_env_step", self.max_env_step), ("max_train_iter", self.max_train_iter))
                        if value is not None)


# ---- the command line ------------------------------------------------------------------------------
def add_tune_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ("An Optuna study over config keys (TPE sampler, median pruning on the evaluation "
                          "returns; SQLite in --study-dir, so the same command continues a stopped study). "
                          "Distributions: " + "; ".join(FORMS.values()) + ".")
    parser.add_argument("-c", "--config", required=True, help="path of a config file (main_config, create_config)")
    parser.add_argument("--trials", type=int, required=True, metavar="N",
                        help="trials the study holds when done (those of earlier commands on it included)")
    parser.add_argument("--jobs", type=int, default=1, metavar="K",
                        help="trials at a time, one process each, torch threads sized to a share of the cores")
    parser.add_argument("--study-dir", default=None, metavar="DIR",
                        help="where study.db, the trial runs (trial_<n>) and best_config.py go "
                             "(default: <config exp_name>_tune)")
    parser.add_argument("-s", "--seed", type=int, default=0, help="every trial's seed (default 0)")
    parser.add_argument("--max-env-step", type=int, default=None, help="each trial's budget in env steps")
    parser.add_argument("--max-train-iter", type=int, default=None, help="... or in updates")
    parser.add_argument("--no-prune", action="store_true", help="run every trial to its budget")
    parser.add_argument("--prune-after", type=int, default=2, metavar="E",
                        help="evaluations a trial always gets before it may be pruned (default 2)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=DIST|KEY=VALUE",
                        help="e.g. policy.learn.learning_rate=loguniform(1e-4,1e-2) "
                             "policy.learn.batch_size=choice(32,64,128) (searched), env.stop_value=none (fixed)")
    return parser


def tune_main(args: argparse.Namespace) -> int:
    """``baton tune``: 0 when the study holds its trials, 1 when none of them completed, 2 on bad input, 130
    when interrupted (the same command continues)."""
    if not logging.getLogger().handlers:  # the trials' own INFO lines (thread sizing, ...) would drown the table
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        spec = prepare_study(args.config, args.overrides, n_trials=args.trials, jobs=args.jobs,
                             study_dir=args.study_dir, seed=args.seed, max_env_step=args.max_env_step,
                             max_train_iter=args.max_train_iter, prune=not args.no_prune, prune_after=args.prune_after)
    except (TuneError, FileNotFoundError, ValueError, UnknownTypeError) as err:  # SearchSpaceError, ConfigError
        print_user_error(err)
        return 2
    try:
        return run_study(spec)
    except (TuneError, RunDirError) as err:
        print_user_error(err)
        return 2


def prepare_study(config_path: str, words: Sequence[str], *, n_trials: int, jobs: int = 1,
                  study_dir: Optional[str] = None, seed: int = 0, max_env_step: Optional[int] = None,
                  max_train_iter: Optional[int] = None, prune: bool = True, prune_after: int = 2) -> StudySpec:
    """The study of ``config_path`` searched by ``words`` (``KEY=DIST``, ``KEY=VALUE``), every key and bound
    checked against the config. Nothing is written.

    Raises:
        TuneError: optuna missing, no budget, no distribution, a bad count; a key or value the config refuses.
        SearchSpaceError: a malformed distribution.
        FileNotFoundError, ValueError: the config file (as ``baton train -c``).
    """
    if importlib.util.find_spec("optuna") is None:
        raise TuneError(f"baton tune needs optuna, which is not installed: {_INSTALL}")
    if n_trials < 1:
        raise TuneError(f"--trials {n_trials}: give at least 1 trial")
    if jobs < 1:
        raise TuneError(f"--jobs {jobs}: give at least 1 job")
    if prune_after < 0:
        raise TuneError(f"--prune-after {prune_after}: give 0 or more evaluations")
    if max_env_step is None and max_train_iter is None:
        raise TuneError("give each trial a budget: --max-env-step N (or --max-train-iter N); a trial that never "
                        "reaches env.stop_value would run until stopped")
    for name, value in (("--max-env-step", max_env_step), ("--max-train-iter", max_train_iter)):
        if value is not None and value < 1:
            raise TuneError(f"{name} {value}: give a budget of at least 1")
    space, fixed = split_search_words(words)
    if not space:
        raise TuneError("nothing to search: give at least one KEY=DIST, e.g. "
                        "policy.learn.learning_rate=loguniform(1e-4,1e-2); " + "; ".join(FORMS.values()))
    from .config_file import load_config_file

    main_config, create_config = load_config_file(config_path)
    try:
        base = apply_overrides(main_config, create_config, fixed)
    except ConfigError as err:
        raise TuneError(f"{config_path}: {err}") from None
    for dist in space:
        _check_distribution(dist, base)
    if study_dir is None:
        study_dir = f"{base[0].get('exp_name') or os.path.splitext(os.path.basename(config_path))[0]}_tune"
    return StudySpec(study_dir=study_dir, config_path=config_path, base=base, space=tuple(space), fixed=tuple(fixed),
                     n_trials=n_trials, jobs=jobs, seed=seed, max_env_step=max_env_step,
                     max_train_iter=max_train_iter, prune=prune, prune_after=prune_after)


def _check_distribution(dist: Distribution, base: Tuple[Dict[str, Any], Dict[str, Any]]) -> None:
    """The key exists, draws values of its type, and the config takes each bound (or choice)."""
    word = f"{dist.key}={dist.text}"
    try:
        default = field_default(base[0], base[1], dist.key)
    except ConfigError as err:
        raise TuneError(f"{word}: {err}") from None
    if isinstance(default, bool) and dist.kind != "choice":
        raise TuneError(f"{word}: {dist.key} is a bool (default {default}): search it with choice(true,false)")
    if isinstance(default, int) and not isinstance(default, bool) and dist.kind in ("uniform", "loguniform"):
        raise TuneError(f"{word}: {dist.kind} draws floats, but {dist.key} is an int (default {default}): use "
                        f"int({value_text(dist.low)},{value_text(dist.high)})")
    if isinstance(default, (str, list, dict)) and dist.kind != "choice":
        raise TuneError(f"{word}: {dist.key} is a {type(default).__name__} (default {default!r}): search it "
                        f"with choice(A,B,...)")
    for value in dist.probes():
        try:
            apply_overrides(base[0], base[1], [dist.override(value)])
        except ConfigError as err:
            raise TuneError(f"{word}: the config refuses {value_text(value)}: {err}") from None


# ---- running the study -----------------------------------------------------------------------------
def run_study(spec: StudySpec) -> int:
    """Open (or continue) the study of ``spec``, run its missing trials, print the table and write the best
    config. Returns the exit status (``tune_main``).

    Raises:
        TuneError: the study directory holds another study, or trials without a study.
        RunDirError: another ``baton tune`` works on the study.
    """
    optuna = _optuna()
    db = os.path.join(spec.study_dir, STUDY_FILE)
    if not os.path.exists(db) and os.path.isdir(spec.study_dir) and _trial_dirs(spec.study_dir):
        raise TuneError(f"{spec.study_dir} holds trial runs ({', '.join(_trial_dirs(spec.study_dir)[:3])}, ...) but no "
                        f"{STUDY_FILE}: it was deleted or moved; give this study another --study-dir")
    lock = RunLock.acquire(spec.study_dir)
    try:
        study = optuna.create_study(storage=_storage(spec), study_name=STUDY_NAME, direction="maximize",
                                    load_if_exists=True)
        _check_record(study, spec)
        retried = _requeue_cut_short(study)
        done = _counted(study, running=False)
        remaining = max(0, spec.n_trials - done)
        jobs = max(1, min(spec.jobs, remaining))
        cores = usable_cores()
        if spec.jobs > cores:
            logger.warning("--jobs %d on %d usable CPU cores: the trials take turns on the cores, so the study runs "
                           "no faster than with --jobs %d", spec.jobs, cores, cores)
        print(f"baton: study {db}: {done} of {spec.n_trials} trials done"
              + (f", {retried} cut short run again" if retried else "")
              + (f"; running {remaining} in {jobs} process{'es' if jobs > 1 else ''}" if remaining else ""),
              flush=True)
        if remaining:
            try:
                failed_jobs = _run_jobs(dataclasses.replace(spec, jobs=jobs))
            except KeyboardInterrupt:
                print(f"baton: study interrupted; the trials that finished are in {db}: the same command "
                      f"continues it", file=sys.stderr, flush=True)
                return 130
            if failed_jobs:
                print(f"baton: {failed_jobs} trial process(es) failed (their error is above); the same command "
                      f"continues the study", file=sys.stderr, flush=True)
        study = optuna.load_study(storage=_storage(spec), study_name=STUDY_NAME)
        print(trials_table(study, spec.space), flush=True)
        best = write_best_config(study, spec)
        if best is None:
            print("baton: no trial completed: nothing to write (each failed trial's error is above)",
                  file=sys.stderr, flush=True)
            return 1
        trial, path = best
        print(f"baton: best trial {trial.number}: best_eval_return={trial.value:.6g} "
              f"({' '.join(_overrides(spec, trial.params))}); its config: {path}; run it: "
              f"baton train -c {path} {spec.budget_flags()}", flush=True)
        return 0
    finally:
        lock.release()


def _run_jobs(spec: StudySpec) -> int:
    """Run the study's missing trials in ``spec.jobs`` processes (in this one when 1); the number of
    processes that failed."""
    if spec.jobs == 1:
        if not _work(spec, worker=0, lock=None):
            raise KeyboardInterrupt
        return 0
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # never fork a process that may hold threads or a lock
    lock = context.Lock()
    processes = [context.Process(target=_job_main, args=(spec, worker, lock), name=f"baton-tune-{worker}")
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


def _job_main(spec: StudySpec, worker: int, lock: Any) -> None:
    """A ``--jobs`` process: its trials, then exit 0 (130 when interrupted)."""
    try:
        interrupted = not _work(spec, worker, lock)
    except KeyboardInterrupt:
        interrupted = True
    sys.exit(_INTERRUPTED if interrupted else 0)


def _work(spec: StudySpec, worker: int, lock: Any) -> bool:
    """Run trials until the study holds ``spec.n_trials`` (counting those the other jobs are running);
    False when a trial was interrupted."""
    import contextlib

    from engine.devices import size_torch_threads

    optuna = _optuna()
    if not os.environ.get("OMP_NUM_THREADS"):  # this process's share of the cores, kept by the trials' pipelines
        os.environ["OMP_NUM_THREADS"] = str(size_torch_threads(0, local_world=spec.jobs))
    storage = _storage(spec)
    existing = len(optuna.load_study(storage=storage, study_name=STUDY_NAME).trials)
    # seeded per job and per command: jobs alike, or a continued study, would draw the same values again
    sampler = optuna.samplers.TPESampler(seed=(spec.seed * 1_000_003 + worker * 7919 + existing) % 2**32)
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS, n_warmup_steps=spec.prune_after)
              if spec.prune else optuna.pruners.NopPruner())
    study = optuna.load_study(storage=storage, study_name=STUDY_NAME, sampler=sampler, pruner=pruner)
    while True:
        with lock if lock is not None else contextlib.nullcontext():
            if _counted(study, running=True) >= spec.n_trials:
                return True
            trial = study.ask()  # a trial cut short earlier (enqueued) first
        if not _run_trial(spec, study, trial):
            return False


def _run_trial(spec: StudySpec, study: Any, trial: Any) -> bool:
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


def _train(spec: StudySpec, trial: Any, overrides: List[str], run_dir: str) -> Tuple[Dict[str, Any], "TrialPruning"]:
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


# ---- the study's bookkeeping -----------------------------------------------------------------------
def _optuna() -> Any:
    try:
        import optuna
    except ImportError as err:
        raise TuneError(f"baton tune needs optuna ({err}): {_INSTALL}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # baton prints one line per trial itself
    return optuna


def _storage(spec: StudySpec) -> Any:
    """The study's SQLite storage; several jobs write it, so a writer waits for another's lock (60 s)."""
    import optuna

    return optuna.storages.RDBStorage(spec.storage_url, engine_kwargs={"connect_args": {"timeout": 60}})


def _check_record(study: Any, spec: StudySpec) -> None:
    """A new study records what its trials run with; a continued one must be given the same."""
    record = spec.record()
    stored = study.user_attrs.get(RECORD_ATTR)
    if stored is None:
        if study.trials:
            raise TuneError(f"{spec.study_dir}/{STUDY_FILE} holds a study that baton tune did not start: give "
                            f"another --study-dir")
        study.set_user_attr(RECORD_ATTR, record)
        return
    changed = [name for name in record if name != "config" and stored.get(name) != record[name]]
    if changed:
        details = "; ".join(f"{name}: {_short(stored.get(name))} before, {_short(record[name])} now" for name in changed)
        raise TuneError(f"the study in {spec.study_dir} was run with other settings ({details}): continue it with the "
                        f"command that started it (only --trials and --jobs may change), or give --study-dir a new "
                        f"directory")


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def _requeue_cut_short(study: Any) -> int:
    """Trials a stopped command left running are failed, and every trial cut short (failed without an
    ``error``: interrupted, or its process gone) is queued again with its values, once. Returns how many."""
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):  # the lock says: nobody runs it
        study.tell(trial.number, state=TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    retried = {trial.user_attrs.get("retry_of") for trial in trials}
    count = 0
    for trial in trials:
        if (trial.state == TrialState.FAIL and "error" not in trial.user_attrs and trial.number not in retried
                and trial.params):
            study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
            count += 1
    return count


def _counted(study: Any, running: bool) -> int:
    """Trials that count toward ``--trials``: complete, pruned, failed on their values; with ``running``,
    also those running now."""
    from optuna.trial import TrialState

    states = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL] + ([TrialState.RUNNING] if running else [])
    return sum(1 for trial in study.get_trials(deepcopy=False, states=tuple(states))
               if trial.state != TrialState.FAIL or "error" in trial.user_attrs)


def _trial_dirs(study_dir: str) -> List[str]:
    return sorted(name for name in os.listdir(study_dir) if name.startswith("trial_"))


def _overrides(spec: StudySpec, params: Mapping[str, Any]) -> List[str]:
    return [dist.override(params[dist.key]) for dist in spec.space if dist.key in params]


# ---- the results -----------------------------------------------------------------------------------
def trials_table(study: Any, space: Sequence[Distribution]) -> str:
    """One row per trial that ran: number, state, objective (``*``: the best), evaluations, seconds, the
    values drawn and the run directory."""
    from optuna.trial import TrialState

    trials = [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.value).number if complete else None
    header = ["trial", "state", "best_eval_return", "evals", "seconds"] + [d.key for d in space] + ["run_dir"]
    rows = [header]
    for t in trials:
        value = "" if t.value is None else f"{t.value:.6g}{' *' if t.number == best else ''}"
        if t.state == TrialState.PRUNED:
            value = f"({t.value:.6g})" if t.value is not None else ""
        state = t.state.name.lower() if t.state != TrialState.FAIL or "error" in t.user_attrs else "cut short"
        evals = t.user_attrs.get("evaluations", len(t.intermediate_values) or "")
        seconds = f"{t.duration.total_seconds():.1f}" if t.duration is not None else ""
        params = [_cell(t.params[d.key]) if d.key in t.params else "" for d in space]
        rows.append([str(t.number), state, value, str(evals), seconds] + params + [t.user_attrs.get("run_dir", "")])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _cell(value: Any) -> str:
    """A drawn value in the table: floats to 4 significant digits (best_config.py has them exact)."""
    return f"{value:.4g}" if isinstance(value, float) else value_text(value)


def write_best_config(study: Any, spec: StudySpec) -> Optional[Tuple[Any, str]]:
    """The best complete trial's configuration as ``DIR/best_config.py`` (``commands.config_writer``):
    the config file's ``main_config`` with the fixed overrides and the trial's values, its ``exp_name``
    ``<exp_name>_tuned``. Returns ``(trial, path)``, or None when no trial completed."""
    from optuna.trial import TrialState

    from .config_writer import write_config_file

    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not complete:
        return None
    trial = max(complete, key=lambda t: t.value)
    values = _overrides(spec, trial.params)
    name = f"{spec.base[0].get('exp_name') or 'tuned'}_tuned"
    main_config, create_config = apply_overrides(spec.base[0], spec.base[1], values + [f"exp_name={name}"])
    path = os.path.join(spec.study_dir, BEST_CONFIG)
    lines = "\n".join(f"    {item}" for item in list(spec.fixed) + values)
    head = textwrap.fill(f"The best configuration of the baton tune study in {spec.study_dir} ({STUDY_FILE}): "
                         f"trial {trial.number}, best evaluation return {trial.value:.6g} with seed {spec.seed} and "
                         f"{spec.budget_flags()}, of "
                         f"{study.user_attrs.get(RECORD_ATTR, {}).get('config', spec.config_path)} with", 110)
    doc = f"{head}\n\n{lines}\n\nRun it: baton train -c {path} {spec.budget_flags()}"
    write_config_file(path, main_config, create_config, doc)
    return trial, path
