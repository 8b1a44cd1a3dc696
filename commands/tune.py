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

Stopped (Ctrl-C, a preemption signal, a kill, a machine that went away, a full disk), the same command
continues the study: the trials that finished are kept, the ones cut short are run again with the same values,
and ``--trials`` counts the total. A signal exits with ``baton train``'s codes (130 for Ctrl-C, 128 + the
signal's number for SIGTERM and SIGUSR1, passed on to the ``--jobs`` processes); a full disk with 1, naming it.
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
from typing import Any, Dict, Optional, Sequence, Tuple

from engine.config import ConfigError
from engine.devices import usable_cores
from engine.overrides import apply_overrides, field_default
from engine.registry import UnknownTypeError

from pipelines.run_dir import RunDirError, RunLock
from .search_space import FORMS, Distribution, split_search_words, value_text
from .tune_store import (BEST_CONFIG, INSTALL, RECORD_ATTR, STUDY_FILE, STUDY_NAME, EnvironmentFailure, TuneError,
                         check_record, counted_trials, disk_full, load_optuna, open_study, requeue_cut_short,
                         study_storage, trial_dirs, trial_overrides)
from .tune_trials import TrialPruning, preempt_signals, run_jobs
from .user_errors import ENVIRONMENT_EXIT, print_user_error

__all__ = ["TuneError", "StudySpec", "TrialPruning", "add_tune_options", "tune_main", "prepare_study", "run_study",
           "trials_table", "write_best_config", "STUDY_FILE", "BEST_CONFIG"]

logger = logging.getLogger(__name__)





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
    parser.add_argument("--prune-after", type=int, default=None, metavar="E",
                        help="evaluations a trial always gets before it may be pruned (default 2)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=DIST|KEY=VALUE",
                        help="e.g. policy.learn.learning_rate=loguniform(1e-4,1e-2) "
                             "policy.learn.batch_size=choice(32,64,128) (searched), env.stop_value=none (fixed)")
    return parser


def tune_main(args: argparse.Namespace) -> int:
    """``baton tune``: 0 when the study holds its trials; 1 when none of them completed, or when its environment
    stopped it (a full disk: the trial it hit runs again with the next command); 2 on bad input; 128 + the
    signal's number when a preemption signal stopped it (SIGTERM 143, SIGUSR1 138), 130 when Ctrl-C did (the
    same command continues)."""
    from engine.preemption import Preempted, stop_signals

    if not logging.getLogger().handlers:  # the trials' own INFO lines (thread sizing, ...) would drown the table
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with stop_signals():  # from here on a signal stops the study with its code, whatever it is doing
        try:
            spec = prepare_study(args.config, args.overrides, n_trials=args.trials, jobs=args.jobs,
                                 study_dir=args.study_dir, seed=args.seed, max_env_step=args.max_env_step,
                                 max_train_iter=args.max_train_iter, prune=not args.no_prune,
                                 prune_after=args.prune_after)  # None: the default, or no pruning
        except (TuneError, FileNotFoundError, ValueError, UnknownTypeError) as err:  # SearchSpaceError, ConfigError
            print_user_error(err)
            return 2
        except KeyboardInterrupt as err:  # Preempted too
            print(f"baton: {f'stopped by {err.signal}' if isinstance(err, Preempted) else 'interrupted'} before the "
                  f"study started", file=sys.stderr, flush=True)
            return err.exit_code if isinstance(err, Preempted) else 130
        with stop_signals(preempt_signals(spec)):  # the trials' preempt.signals
            try:
                return run_study(spec)
            except (TuneError, RunDirError) as err:
                print_user_error(err)
                return 2
            except KeyboardInterrupt as err:  # Preempted too: the trials that finished are kept
                what = f"stopped by {err.signal}" if isinstance(err, Preempted) else "interrupted"
                print(f"baton: study {what}; the trials that finished are in "
                      f"{os.path.join(spec.study_dir, STUDY_FILE)}: the same command continues it", file=sys.stderr,
                      flush=True)
                return err.exit_code if isinstance(err, Preempted) else 130
            except Exception as err:  # the study's own files on a full disk: its environment, not its input
                line = disk_full(err, spec.study_dir)
                if line is None:
                    raise
                print_user_error(EnvironmentFailure(f"the study stopped: {line}. Free space there and run the same "
                                                    f"command: it continues the study"))
                return ENVIRONMENT_EXIT


def prepare_study(config_path: str, words: Sequence[str], *, n_trials: int, jobs: int = 1,
                  study_dir: Optional[str] = None, seed: int = 0, max_env_step: Optional[int] = None,
                  max_train_iter: Optional[int] = None, prune: bool = True,
                  prune_after: Optional[int] = None) -> StudySpec:
    """The study of ``config_path`` searched by ``words`` (``KEY=DIST``, ``KEY=VALUE``), every key and bound
    checked against the config. Nothing is written.

    Raises:
        TuneError: optuna missing, no budget, no distribution, a bad count; a key or value the config refuses.
        SearchSpaceError: a malformed distribution.
        FileNotFoundError, ValueError: the config file (as ``baton train -c``).
    """
    if importlib.util.find_spec("optuna") is None:
        raise TuneError(f"baton tune needs optuna, which is not installed: {INSTALL}")
    if n_trials < 1:
        raise TuneError(f"--trials {n_trials}: give at least 1 trial")
    if jobs < 1:
        raise TuneError(f"--jobs {jobs}: give at least 1 job")
    if prune_after is not None and not prune:
        raise TuneError(f"--prune-after {prune_after} with --no-prune: no trial is pruned, so it would do nothing; "
                        f"give one of them")
    prune_after = 2 if prune_after is None else prune_after
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
        KeyboardInterrupt: Ctrl-C, or a preemption signal (``Preempted``: its ``exit_code`` is the command's),
            stopped the study; the trials it cut short run again with the next command.
    """
    optuna = load_optuna()
    db = os.path.join(spec.study_dir, STUDY_FILE)
    empty = not os.path.exists(db) or os.path.getsize(db) == 0  # a 0-byte file holds no study either
    if empty and os.path.isdir(spec.study_dir) and trial_dirs(spec.study_dir):
        raise TuneError(f"{spec.study_dir} holds trial runs ({', '.join(trial_dirs(spec.study_dir)[:3])}, ...) but "
                        f"{'an empty' if os.path.exists(db) else 'no'} {STUDY_FILE}: it was deleted, moved or cut "
                        f"short; give this study another --study-dir")
    lock = RunLock.acquire(spec.study_dir)
    try:
        study = open_study(optuna, spec, db)
        check_record(study, spec)
        retried = requeue_cut_short(study)
        done = counted_trials(study, running=False)
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
                failed_jobs = run_jobs(dataclasses.replace(spec, jobs=jobs))
            except EnvironmentFailure as err:  # a full disk: the trial it hit runs again with the next command
                print(trials_table(optuna.load_study(storage=study_storage(spec), study_name=STUDY_NAME), spec.space),
                      flush=True)
                print(f"baton: the study stopped: {err}. Free space there and run the same command: the trials "
                      f"the full disk stopped run again", file=sys.stderr, flush=True)
                return ENVIRONMENT_EXIT
            if failed_jobs:
                print(f"baton: {failed_jobs} trial process(es) failed (their error is above); the same command "
                      f"continues the study", file=sys.stderr, flush=True)
        study = optuna.load_study(storage=study_storage(spec), study_name=STUDY_NAME)
        print(trials_table(study, spec.space), flush=True)
        best = write_best_config(study, spec)
        if best is None:
            print("baton: no trial completed: nothing to write (each failed trial's error is above)",
                  file=sys.stderr, flush=True)
            return 1
        trial, path = best
        print(f"baton: best trial {trial.number}: best_eval_return={trial.value:.6g} "
              f"({' '.join(trial_overrides(spec, trial.params))}); its config: {path}; run it: "
              f"baton train -c {path} {spec.budget_flags()}", flush=True)
        return 0
    finally:
        lock.release()


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
    values = trial_overrides(spec, trial.params)
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
