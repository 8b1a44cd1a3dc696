"""The bookkeeping of a ``baton tune`` study (``commands.tune``): its SQLite storage, the record of what its
trials run with, which trials count toward ``--trials``, and which were cut short and run again."""
from __future__ import annotations

import errno
import json
import os
import shutil
from typing import Any, List, Mapping, Optional

from engine.fileio import error_chain

__all__ = ["TuneError", "STUDY_FILE", "BEST_CONFIG", "STUDY_NAME", "RECORD_ATTR", "load_optuna", "study_storage",
           "open_study",
           "check_record", "requeue_cut_short", "counted_trials", "trial_dirs", "trial_overrides", "EnvironmentFailure",
           "disk_full", "ENVIRONMENT_ATTR"]

STUDY_FILE = "study.db"
BEST_CONFIG = "best_config.py"
STUDY_NAME = "baton"
#: the study's user attribute holding what its trials were run with (checked when the study continues)
RECORD_ATTR = "baton_search"
INSTALL = "pip install -c constraints.txt -e \".[tune]\" (or pip install optuna)"


#: the trial's user attribute holding why its environment failed it (a full disk): not ``error``, so the trial
#: counts as cut short and the next command runs it again
ENVIRONMENT_ATTR = "environment_error"
_SQLITE_FULL = 13  # sqlite3's SQLITE_FULL: "database or disk is full"


class TuneError(ValueError):
    """Input ``baton tune`` cannot run; the message names what to change."""


class EnvironmentFailure(Exception):
    """The study stopped because of where it runs, not what it was given: a full disk (or a spent quota). The
    trial it hit is recorded as cut short (run again by the next command) and ``baton tune`` exits with status
    1; the message names the disk and the fix."""


def disk_full(err: BaseException, where: str) -> Optional[str]:
    """The line for ``err`` when it is a write that failed on a full filesystem (an ``ENOSPC``/``EDQUOT``
    ``OSError``, ``engine.fileio.DiskFullError``, SQLite's "database or disk is full", anywhere in its chain),
    naming the path, its filesystem's mount point and the space left there; None for any other error.
    ``where``: the path to name when the error names none (the study directory)."""
    for e in error_chain(err):
        full = isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)
        if full or getattr(e, "sqlite_errorcode", None) == _SQLITE_FULL:
            path = getattr(e, "path", None) or getattr(e, "filename", None) or where
            return _full_line(os.fspath(path), e.errno if full else errno.ENOSPC)
    return None


def _full_line(path: str, code: int) -> str:
    mount = os.path.abspath(path)
    while not os.path.ismount(mount) and os.path.dirname(mount) != mount:
        mount = os.path.dirname(mount)
    try:
        free = f"{shutil.disk_usage(mount).free / 2**20:.1f} MiB free"
    except OSError:
        free = "its free space unknown"
    return f"{os.strerror(code).lower()} writing {path} (the disk mounted at {mount}, {free})"


def load_optuna() -> Any:
    try:
        import optuna
    except ImportError as err:
        raise TuneError(f"baton tune needs optuna ({err}): {INSTALL}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # baton prints one line per trial itself
    return optuna


def study_storage(spec: Any) -> Any:
    """The study's SQLite storage; several jobs write it, so a writer waits for another's lock (60 s)."""
    import optuna

    return optuna.storages.RDBStorage(spec.storage_url, engine_kwargs={"connect_args": {"timeout": 60}})


def open_study(optuna: Any, spec: Any, db: str) -> Any:
    """The study in ``db``, created when new.

    Raises:
        TuneError: ``db`` is not a readable study (a corrupt or truncated file), naming it and the fix.
    """
    try:
        return optuna.create_study(storage=study_storage(spec), study_name=STUDY_NAME, direction="maximize",
                                   load_if_exists=True)
    except Exception as err:  # sqlalchemy's DatabaseError, optuna's StorageInternalError: a broken file
        if not any(name in type(err).__module__ for name in ("sqlalchemy", "optuna", "sqlite3")):
            raise
        raise TuneError(f"{db} is not a study baton tune can read ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:200]}): move it aside (its trial runs stay in their "
                        f"directories) and start the study again, or give --study-dir a new directory") from err


def check_record(study: Any, spec: Any) -> None:
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
        details = "; ".join(f"{name}: {_short(stored.get(name))} before, {_short(record[name])} now"
                            for name in changed)
        raise TuneError(f"the study in {spec.study_dir} was run with other settings ({details}): continue it with the "
                        f"command that started it (only --trials and --jobs may change), or give --study-dir a new "
                        f"directory")


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def requeue_cut_short(study: Any) -> int:
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


def counted_trials(study: Any, running: bool) -> int:
    """Trials that count toward ``--trials``: complete, pruned, failed on their values; with ``running``,
    also those running now."""
    from optuna.trial import TrialState

    states = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL] + ([TrialState.RUNNING] if running else [])
    return sum(1 for trial in study.get_trials(deepcopy=False, states=tuple(states))
               if trial.state != TrialState.FAIL or "error" in trial.user_attrs)


def trial_dirs(study_dir: str) -> List[str]:
    return sorted(name for name in os.listdir(study_dir) if name.startswith("trial_"))


def trial_overrides(spec: Any, params: Mapping[str, Any]) -> List[str]:
    return [dist.override(params[dist.key]) for dist in spec.space if dist.key in params]
