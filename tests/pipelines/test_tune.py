"""baton tune: distributions parsed without eval, keys and bounds checked against the config, a real study in
SQLite whose trials are run directories, a continued study, and the best configuration as a runnable file."""
from __future__ import annotations

import doctest
import json
import re
import math
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

import commands.config_writer
import commands.search_space
from commands import tune, tune_trials
from commands.cli import main
from commands.config_file import load_config_file
from commands.config_writer import write_config_file
from commands.search_space import SearchSpaceError, parse_distribution, split_search_words
from commands.tune import TrialPruning, TuneError, prepare_study

optuna = pytest.importorskip("optuna")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
#: a trial of a few seconds that still evaluates (every 4 updates) and learns a little
TINY = ["policy.collect.n_sample=32", "policy.learn.update_per_collect=4", "policy.eval.evaluator.eval_freq=4",
        "env.collector_env_num=4", "env.evaluator_env_num=2", "env.n_evaluator_episode=2"]
SPACE = ["policy.learn.learning_rate=loguniform(1e-4,1e-2)", "policy.learn.batch_size=choice(32,64)"]


def _tune_argv(study_dir, trials, jobs=1, extra=(), prune=True):
    return ["tune", "-c", CARTPOLE, "--trials", str(trials), "--jobs", str(jobs), "--study-dir", str(study_dir),
            "--max-env-step", "256", *SPACE, *TINY, *extra, *([] if prune else ["--no-prune"])]


def _trials(study_dir):
    study = optuna.load_study(study_name=tune.STUDY_NAME, storage=f"sqlite:///{study_dir}/{tune.STUDY_FILE}")
    return study.get_trials(deepcopy=False)


# ---- distributions on the command line --------------------------------------------------------------
def test_search_space_and_config_writer_doctests():
    assert doctest.testmod(commands.search_space).failed == 0
    assert doctest.testmod(commands.config_writer).failed == 0


@pytest.mark.parametrize("text,kind,low,high,choices", [
    ("loguniform(1e-4,1e-2)", "loguniform", 1e-4, 1e-2, ()),
    (" uniform( -1 , 0.5 ) ", "uniform", -1, 0.5, ()),
    ("int(1,5)", "int", 1, 5, ()),
    ("int(1.0,8)", "int", 1, 8, ()),
    ("choice(32,64,128)", "choice", None, None, (32, 64, 128)),
    ("choice(mse,'huber')", "choice", None, None, ("mse", "huber")),
    ("choice(true,false,none)", "choice", None, None, (True, False, None)),
    ("choice([64,64],[128, 128])", "choice", None, None, ("[64,64]", "[128, 128]")),
    ("choice(1,1.5)", "choice", None, None, (1, 1.5)),
])
def test_parse_distribution_forms(text, kind, low, high, choices):
    dist = parse_distribution("a.b", text)
    assert (dist.kind, dist.low, dist.high, dist.choices) == (kind, low, high, choices)
    if kind == "int":
        assert type(dist.low) is int and type(dist.high) is int


@pytest.mark.parametrize("text,message", [
    ("normal(0,1)", r"a\.b=normal\(0,1\): unknown distribution 'normal'; valid forms: loguniform\(LOW,HIGH\)"),
    ("loguniform(0,1e-2)", r"loguniform needs 0 < low .*got 0"),
    ("loguniform(1e-2,1e-4)", r"needs low < high, got 1e-2 and 1e-4"),
    ("uniform(1)", r"uniform takes 2 values, got 1"),
    ("uniform(a,1)", r"'a' is not a number"),
    ("uniform(0,inf)", r"'inf' is not a number"),
    ("int(1,2.5)", r"'2.5' is not an integer.*uniform\(LOW,HIGH\) draws floats"),
    ("int(3,3)", r"needs low < high, got 3 and 3"),
    ("choice(64)", r"at least two values \(one value is a fixed override: a\.b=64\)"),
    ("choice(32,32)", r"'32' is given twice"),
    ("choice(32,__import__('os'))", r"\"__import__\('os'\)\" is not a value \(.*\); choice"),
    ("choice(CartPole-v1,Acrobot-v1)", r"'CartPole-v1' is not a value .*quote a word with other characters: "
                                       r"'CartPole-v1'"),
    ("choice(1,2", r"not a distribution"),
    ("uniform(low=0,high=1)", r"takes its values in order, without names \(low=\.\.\.\)"),
    ("loguniform(1e-4;1e-2)", r"not a distribution"),
])
def test_parse_distribution_errors_name_the_bad_part(text, message):
    with pytest.raises(SearchSpaceError, match=message):
        parse_distribution("a.b", text)


def test_parse_distribution_runs_nothing(monkeypatch):
    """The text is parsed, never evaluated: a call inside a choice is refused, not made."""
    monkeypatch.setattr(os, "system", lambda *_: pytest.fail("a distribution ran code"))
    with pytest.raises(SearchSpaceError):
        parse_distribution("a", "choice(1, os.system('true'))")


def test_split_search_words_separates_distributions_from_fixed_overrides():
    space, fixed = split_search_words(["a.b=int(1,3)", "c=5", "d=choice(x,y)", "e='f(x)'"])
    assert [d.key for d in space] == ["a.b", "d"] and fixed == ["c=5", "e='f(x)'"]
    with pytest.raises(SearchSpaceError, match="searched .* and fixed"):
        split_search_words(["a=int(1,3)", "a=2"])
    with pytest.raises(SearchSpaceError, match="has a distribution already"):
        split_search_words(["a=int(1,3)", "a=int(2,4)"])
    with pytest.raises(SearchSpaceError, match="write KEY=DIST"):
        split_search_words(["=int(1,3)"])


def test_distribution_values_become_typed_override_text():
    dist = parse_distribution("policy.model.encoder_hidden_size_list", "choice([64,64],[128])")
    assert dist.override("[64,64]") == "policy.model.encoder_hidden_size_list=[64,64]"
    assert parse_distribution("x", "choice(true,false)").override(False) == "x=false"


# ---- checked against the config before anything runs -----------------------------------------------
@pytest.mark.parametrize("words,message", [
    (["policy.learn.learnig_rate=loguniform(1e-4,1e-2)"], r"learnig_rate.*did you mean.*learning_rate"),
    (["policy.learn.batch_size=uniform(16,128)"], r"uniform draws floats, but policy.learn.batch_size is an int "
                                                  r"\(default \d+\): use int\(16,128\)"),
    (["policy.learn.batch_size=choice(0,64)"], r"batch_size=choice\(0,64\): the config refuses 0"),
    (["policy.learn.learning_rate=uniform(-1,1)"], r"the config refuses -1"),
    (["policy.learn.double_q=int(0,1)"], r"is a bool .*choice\(true,false\)"),
    (["policy.learn.learning_rate=uniform(1e-4,1e-3)", "policy.learn.batch_sise=64"], r"batch_sise.*did you mean"),
    (["policy.learn.batch_size=64"], r"nothing to search"),
])
def test_prepare_study_refuses_keys_and_bounds_the_config_refuses(words, message):
    with pytest.raises(ValueError, match=message):
        prepare_study(CARTPOLE, words, n_trials=2, max_env_step=256)


def test_prepare_study_needs_a_budget_and_counts():
    with pytest.raises(TuneError, match="--max-env-step N"):
        prepare_study(CARTPOLE, SPACE, n_trials=2)
    with pytest.raises(TuneError, match="--trials 0"):
        prepare_study(CARTPOLE, SPACE, n_trials=0, max_env_step=256)
    with pytest.raises(TuneError, match="--prune-after 3 with --no-prune: no trial is pruned"):
        prepare_study(CARTPOLE, SPACE, n_trials=2, max_env_step=256, prune=False, prune_after=3)
    assert prepare_study(CARTPOLE, SPACE, n_trials=2, max_env_step=256).prune_after == 2  # the default


def test_tune_command_bad_input_is_one_line(tmp_path, capsys):
    assert main(["tune", "-c", CARTPOLE, "--trials", "2", "--max-env-step", "256",
                 "policy.learn.learning_rate=gauss(1,2)"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("baton: policy.learn.learning_rate=gauss(1,2): unknown distribution 'gauss'")
    assert "Traceback" not in err


def test_tune_without_optuna_names_the_extra(monkeypatch, capsys):
    real = tune.importlib.util.find_spec
    monkeypatch.setattr(tune.importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else real(name, *a))
    assert main(_tune_argv("unused", 2)) == 2
    assert 'optuna, which is not installed: pip install -c constraints.txt -e ".[tune]"' in capsys.readouterr().err


def test_tune_help_imports_neither_torch_nor_optuna(tmp_path):
    script = ("import sys\nfrom commands.cli import main\ntry:\n    main(['tune', '--help'])\nexcept SystemExit:\n"
              "    pass\nprint([m for m in ('torch', 'gymnasium', 'optuna') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert "loguniform(LOW,HIGH)" in proc.stdout and proc.stdout.strip().splitlines()[-1] == "[]", proc.stderr


# ---- the pieces of a trial --------------------------------------------------------------------------
class _Ctx:
    def __init__(self):
        self.eval_output, self.last_eval_iter, self.eval_value = None, -1, float("-inf")
        self.finish, self.stop_reason = False, None


class _Trial:
    def __init__(self, prune_at):
        self.reports, self._prune_at = [], prune_at

    def report(self, value, step):
        self.reports.append((step, value))

    def should_prune(self):
        return len(self.reports) >= self._prune_at


def test_trial_pruning_reports_each_evaluation_once_and_ends_the_run():
    trial, ctx = _Trial(prune_at=2), _Ctx()
    pruning = TrialPruning(trial)
    pruning(ctx)  # no evaluation yet
    for iteration, value in ((1, 10.0), (1, 10.0), (5, 20.0)):
        ctx.eval_output, ctx.last_eval_iter, ctx.eval_value = {"mean": value}, iteration, value
        pruning(ctx)
    assert trial.reports == [(1, 10.0), (2, 20.0)]
    assert pruning.pruned_at == 2 and ctx.finish and ctx.stop_reason == "finished"


@pytest.mark.parametrize("prune_after, first_pruned", [(0, 1), (2, 3), (3, 4)])
def test_the_pruner_spares_a_trials_first_prune_after_evaluations(prune_after, first_pruned):
    """--prune-after E: evaluations 1..E of a trial far below the median are never pruned, evaluation E+1 is."""
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=tune_trials.trial_pruner(optuna, True, prune_after))
    for _ in range(tune_trials.PRUNER_STARTUP_TRIALS):
        done = study.ask()
        for step in range(1, 6):
            done.report(100.0, step)
        study.tell(done, 100.0)
    trial = study.ask()
    verdicts = []
    for step in range(1, 6):
        trial.report(0.0, step)
        verdicts.append(trial.should_prune())
    assert verdicts.index(True) + 1 == first_pruned
    assert isinstance(tune_trials.trial_pruner(optuna, False, prune_after), optuna.pruners.NopPruner)


def test_the_sampler_counts_running_trials_whatever_optunas_default(monkeypatch):
    """Parallel jobs rest on TPE's constant liar, which Optuna before 5 leaves off unless it is asked for."""
    optuna = pytest.importorskip("optuna")
    made = []
    monkeypatch.setattr(optuna.samplers, "TPESampler", lambda **kwargs: made.append(kwargs) or kwargs)
    assert tune_trials.trial_sampler(optuna, 7) == {"seed": 7, "constant_liar": True}
    assert made == [{"seed": 7, "constant_liar": True}]


def test_config_writer_round_trips_through_load_config_file(tmp_path):
    main_config = {"exp_name": "x's \"run\"", "env": {"stop_value": math.inf, "env_kwargs": {}},
                   "policy": {"model": {"encoder_hidden_size_list": [64, 64]}, "cuda": False, "x": None,
                              "t": (1,), "lr": 1e-3}}
    create_config = {"env": {"type": "cartpole"}, "policy": {"type": "dqn"}}
    path = write_config_file(str(tmp_path / "c.py"), main_config, create_config, 'doc with """ quotes')
    loaded = load_config_file(path)
    assert loaded == (main_config, create_config)
    with pytest.raises(TypeError, match=r"main_config\.obj=.*plain data"):
        write_config_file(str(tmp_path / "d.py"), {"obj": object()}, create_config, "")


# ---- real studies -----------------------------------------------------------------------------------
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_tune_runs_a_study_in_two_jobs_and_writes_a_best_config_that_trains(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study_dir = tmp_path / "study"
    assert main(_tune_argv(study_dir, trials=3, jobs=2)) == 0
    out = capsys.readouterr().out
    assert "running 3 in 2 processes" in out
    trials = _trials(study_dir)
    assert len(trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for t in trials:  # each trial an ordinary run directory, its objective its summary's best evaluation return
        summary = json.loads((study_dir / f"trial_{t.number}" / "summary.json").read_text())
        assert t.value == summary["best_eval_return"] and summary["env_step"] >= 256
        config = json.loads((study_dir / f"trial_{t.number}" / "config.json").read_text())
        assert config["policy"]["learn"]["learning_rate"] == t.params["policy.learn.learning_rate"]
        assert config["policy"]["learn"]["batch_size"] == t.params["policy.learn.batch_size"]
        assert (study_dir / f"trial_{t.number}" / "progress.csv").is_file()
    best = max(trials, key=lambda t: t.value)
    assert f"best trial {best.number}:" in out and "trial  state" in out
    best_file = study_dir / tune.BEST_CONFIG
    main_config, _ = load_config_file(str(best_file))
    assert main_config["policy"]["learn"]["learning_rate"] == best.params["policy.learn.learning_rate"]
    assert main_config["policy"]["eval"]["evaluator"]["eval_freq"] == 4  # the fixed overrides too
    assert main(["train", "-c", str(best_file), "--max-env-step", "64", "--no-progress", "--exp-name",
                 str(tmp_path / "best_run")]) == 0
    assert json.loads((tmp_path / "best_run" / "summary.json").read_text())["env_step"] >= 64


def test_tune_continues_a_study_where_it_stopped(tmp_path, capsys, monkeypatch, caplog):
    """2 trials, then the same command with --trials 3 runs one more; a trial cut short (Ctrl-C, or a process
    killed while it ran) runs again with its values; other settings are refused. Without
    pruning: which trials the median pruner ends is not what this test is about (a pruned retry is not COMPLETE)."""
    monkeypatch.chdir(tmp_path)
    study_dir = tmp_path / "study"
    assert main(_tune_argv(study_dir, trials=2, prune=False)) == 0
    first = {t.number: t.datetime_start for t in _trials(study_dir)}
    assert main(_tune_argv(study_dir, trials=3, prune=False)) == 0
    assert "2 of 3 trials done; running 1 in 1 process" in capsys.readouterr().out
    trials = _trials(study_dir)
    assert len(trials) == 3 and {t.number: t.datetime_start for t in trials[:2]} == first
    assert sorted(p.name for p in study_dir.glob("trial_*")) == ["trial_0", "trial_1", "trial_2"]

    # Ctrl-C in the 2nd trial of this command: status 130, that trial cut short ...
    real_train, calls = tune_trials._train, []

    def interrupted_second(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_train(*args)

    monkeypatch.setattr(tune_trials, "_train", interrupted_second)
    assert main(_tune_argv(study_dir, trials=5, prune=False)) == 130
    assert "the same command continues it" in capsys.readouterr().err
    monkeypatch.setattr(tune_trials, "_train", real_train)
    # ... and a trial a killed process left running
    study = optuna.load_study(study_name=tune.STUDY_NAME, storage=f"sqlite:///{study_dir}/{tune.STUDY_FILE}")
    left_running = study.ask({"policy.learn.learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
                              "policy.learn.batch_size": optuna.distributions.CategoricalDistribution([32, 64])})
    cut = [t for t in _trials(study_dir) if t.state == optuna.trial.TrialState.FAIL] + [left_running]
    assert main(_tune_argv(study_dir, trials=6, prune=False)) == 0
    out = capsys.readouterr().out
    assert "4 of 6 trials done, 2 cut short run again; running 2 in 1 process" in out
    trials = _trials(study_dir)
    assert len([t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]) == 6
    for old in cut:  # each ran again with its values
        again = [t for t in trials if t.user_attrs.get("retry_of") == old.number]
        assert len(again) == 1 and again[0].params == old.params and again[0].state.name == "COMPLETE"
    assert sum(line.split()[1:3] == ["cut", "short"] for line in out.splitlines()) == 2  # the table marks them

    # more jobs than cores: a warning, and nothing left to run
    monkeypatch.setattr(tune, "usable_cores", lambda: 1)
    with caplog.at_level("WARNING"):
        assert main(_tune_argv(study_dir, trials=6, jobs=2, prune=False)) == 0
    assert "--jobs 2 on 1 usable CPU cores" in caplog.text

    # another budget is another study
    assert main(_tune_argv(study_dir, trials=7, extra=["env.n_evaluator_episode=3"], prune=False)) == 2
    assert "was run with other settings (config_sha256:" in capsys.readouterr().err


def _children(pid):
    """The pids of ``pid``'s children (Linux /proc)."""
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found.update(int(p) for p in f.read().split())
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_trial_processes_end_with_a_killed_tune_and_their_trials_are_cut_short(tmp_path):
    """Issue 34: ``kill -9`` of ``baton tune --jobs 2`` left its two trial processes training (and the same
    command then ran the trials again beside them). Now each ends with it, its trial cut short, as a preemption
    cuts it: failed without an error, so the next command runs it again."""
    import signal
    import subprocess
    import sys
    import time

    study_dir = tmp_path / "study"
    argv = [a if a != "256" else "1000000" for a in _tune_argv(study_dir, trials=2, jobs=2, extra=["env.stop_value=none"],
                                                                    prune=False)]
    tuner = subprocess.Popen([sys.executable, "-m", "commands", *argv], cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 180
        while not all((study_dir / f"trial_{n}" / "config.json").exists() for n in (0, 1)):
            assert tuner.poll() is None and time.monotonic() < deadline, "the trials never started"
            time.sleep(0.2)
        jobs = sorted(_children(tuner.pid))  # the trial processes (and the resource tracker they hold)
        tuner.send_signal(signal.SIGKILL)
        tuner.wait()
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in jobs if _alive(pid)], "trial processes outlived the killed tune"
    finally:
        if tuner.poll() is None:
            tuner.kill()
        for pid in [pid for pid in locals().get("jobs", ()) if _alive(pid)]:  # a failed check leaves no orphan
            os.kill(pid, signal.SIGKILL)
    states = {t.number: (t.state, "error" in t.user_attrs) for t in _trials(study_dir)}
    assert states == {0: (optuna.trial.TrialState.FAIL, False), 1: (optuna.trial.TrialState.FAIL, False)}


@pytest.mark.parametrize("content,trial_runs,message", [
    (b"not a database, " * 200, False, r"study.db is not a study baton tune can read \(DatabaseError: .*file is not "
                                       r"a database\): move it aside"),
    (b"", True, r"holds trial runs \(trial_0, \.\.\.\) but an empty study.db: it was deleted, moved or cut short"),
], ids=["corrupt", "empty-beside-trials"])
def test_a_broken_study_file_is_one_line(content, trial_runs, message, tmp_path, capsys):
    """Issue 34: a corrupt study.db was an Optuna/SQLAlchemy traceback; an empty one beside an earlier study's
    trials was taken for a new study whose every trial then failed on its run directory."""
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    (study_dir / tune.STUDY_FILE).write_bytes(content)
    if trial_runs:
        (study_dir / "trial_0").mkdir()
    assert main(_tune_argv(study_dir, trials=1)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search("^baton: .*" + message, err)


# ---- signals and a full disk (issue 34) -------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize("jobs,signum,code", [
    (1, signal.SIGUSR1, 138),
    pytest.param(2, signal.SIGTERM, 143, marks=pytest.mark.distributed),
], ids=["1-job-SIGUSR1", "2-jobs-SIGTERM"])
def test_a_preemption_signal_ends_tune_with_its_code_and_its_jobs(jobs, signum, code, tmp_path):
    """Issue 34: SIGTERM made ``baton tune`` exit 130 (one job) or die by the signal, its jobs training on
    (--jobs 2); ``baton train`` exits 128 + the signal's number. Now the study stops as a run does: the signal
    passed on to the jobs, each trial cut short (run again by the next command), exit 128 + its number, no
    process left."""
    study_dir = tmp_path / "study"
    argv = [a if a != "256" else "1000000" for a in _tune_argv(study_dir, trials=3, jobs=jobs, prune=False,
                                                                    extra=["env.stop_value=none"])]
    tuner = subprocess.Popen([sys.executable, "-m", "commands", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 120
        while not all((study_dir / f"trial_{n}" / "progress.csv").exists() for n in range(jobs)):
            assert tuner.poll() is None and time.monotonic() < deadline, "the trials never started"
            time.sleep(0.1)
        jobs_pids = sorted(_children(tuner.pid)) if jobs > 1 else []
        tuner.send_signal(signum)  # the tune process alone: it passes the signal on
        out, err = tuner.communicate(timeout=90)
    finally:
        if tuner.poll() is None:
            os.killpg(tuner.pid, signal.SIGKILL)
    assert tuner.returncode == code, err[-3000:]
    name = signal.Signals(signum).name
    assert "Traceback" not in err, err[-3000:]
    assert err.count(f"stopped by {name}") == jobs + 1, err  # each trial's line, and the study's
    assert f"baton: study stopped by {name}; the trials that finished are in" in err
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in jobs_pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in jobs_pids if _alive(pid)], "trial processes outlived the stopped tune"
    states = {t.number: (t.state, "error" in t.user_attrs) for t in _trials(study_dir)}
    assert states == {n: (optuna.trial.TrialState.FAIL, False) for n in range(jobs)}  # cut short: run again


def _mount_namespace() -> list:
    """The command prefix that runs a shell in a mount namespace of its own (root: ``unshare -m``; otherwise a
    user namespace too), or skip where neither is allowed."""
    for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
        try:
            if subprocess.run(prefix + ["sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"], capture_output=True,
                              timeout=30).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            break
    pytest.skip("no mount namespace here (unshare -m / -rm) to make a full filesystem in")


@pytest.mark.timeout(180)
def test_a_full_disk_stops_the_study_exit_1_and_its_trial_runs_again(tmp_path, capsys, monkeypatch):
    """Issue 34: on a full disk each trial failed with a clear line but was recorded as a failure of its values
    (never run again once space was freed) and the command exited 0. A real full filesystem (a 16 KiB tmpfs
    where trial 1 writes): the trial is recorded as cut short, the study stops with one line naming the disk and
    exit status 1, and once space is back the same command runs it again."""
    prefix = _mount_namespace()
    monkeypatch.chdir(tmp_path)
    study_dir = tmp_path / "study"
    assert main(_tune_argv(study_dir, trials=1, prune=False)) == 0
    (study_dir / "trial_1").mkdir()
    command = shlex.join([sys.executable, "-m", "commands", *_tune_argv(study_dir, trials=2, prune=False)])
    full = subprocess.run(prefix + ["sh", "-c", f"mount -t tmpfs -o size=16k tmpfs {shlex.quote(str(study_dir))}/trial_1 "
                                                f"&& exec {command}"], capture_output=True, text=True, timeout=150,
                          cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert full.returncode == 1, full.stderr[-3000:]
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    last = full.stderr.strip().splitlines()[-1]
    assert re.fullmatch(rf"baton: the study stopped: no space left on device writing {study_dir}/trial_1/\S+ \(the "
                        rf"disk mounted at {study_dir}/trial_1, [\d.]+ MiB free\)\. Free space there and run the same "
                        rf"command: the trials the full disk stopped run again", last), last
    trial = _trials(study_dir)[1]
    assert trial.state == optuna.trial.TrialState.FAIL and "error" not in trial.user_attrs  # not its values
    assert "no space left on device" in trial.user_attrs["environment_error"]
    capsys.readouterr()
    assert main(_tune_argv(study_dir, trials=2, prune=False)) == 0  # space back (the tmpfs went with its namespace)
    assert "1 of 2 trials done, 1 cut short run again" in capsys.readouterr().out
    again = [t for t in _trials(study_dir) if t.user_attrs.get("retry_of") == 1]
    assert len(again) == 1 and again[0].state == optuna.trial.TrialState.COMPLETE and again[0].params == trial.params


def test_what_a_full_disk_looks_like(tmp_path):
    import errno
    import sqlite3

    from commands.tune_store import disk_full
    from engine.fileio import DiskFullError

    assert disk_full(ValueError("no"), str(tmp_path)) is None
    assert disk_full(OSError(errno.EACCES, "Permission denied", str(tmp_path)), str(tmp_path)) is None
    line = disk_full(DiskFullError("cannot write x", str(tmp_path / "x")), "elsewhere")
    assert line.startswith(f"no space left on device writing {tmp_path}/x (the disk mounted at /")
    quota = RuntimeError("torch's writer")
    quota.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert disk_full(quota, str(tmp_path)).startswith(f"disk quota exceeded writing {tmp_path} (")
    database = sqlite3.OperationalError("database or disk is full")
    database.sqlite_errorcode = 13
    wrapped = type("OperationalError", (Exception,), {})("(sqlite3.OperationalError) database or disk is full")
    wrapped.orig = database  # as SQLAlchemy wraps it
    assert disk_full(wrapped, str(tmp_path / "study")).startswith(f"no space left on device writing {tmp_path}/study")
