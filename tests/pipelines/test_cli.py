from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from commands.cli import main
from commands.config_file import load_config_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")


def test_baton_train_and_the_config_as_a_script_print_alike(tmp_path):
    """The console script trains; the same options through ``python CONFIG.py`` print the same lines
    (log.print_freq's included, which the script used to drop)."""
    outputs = {}
    for how, head in (("baton", ["baton", "train", "-c", CARTPOLE]), ("script", [sys.executable, CARTPOLE])):
        exp = tmp_path / how
        proc = subprocess.run(head + ["-s", "2", "--max-env-step", "128", "--exp-name", str(exp), "--no-progress",
                                      "log.print_freq=4"], capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads((exp / "config.json").read_text())["seed"] == 2
        assert json.loads((exp / "summary.json").read_text())["env_step"] >= 128
        printed = [line.split(": ", 1)[1] for line in proc.stderr.splitlines() if "middleware.logger:" in line]
        assert printed and all(line.startswith("env_step=") for line in printed)
        outputs[how] = (len(printed), proc.stdout.strip().splitlines()[-1].rsplit(" wall_time_s=", 1)[0])
    assert outputs["baton"] == outputs["script"]


def test_python_m_commands_is_the_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "commands", "train", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--max-env-step" in proc.stdout and "--resume" in proc.stdout


def test_cli_resume_flag_continues(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "-c", CARTPOLE, "--max-env-step", "64", "--exp-name", "r", "--no-progress"]) == 0
    assert main(["train", "-c", CARTPOLE, "--max-env-step", "128", "--exp-name", "r", "--no-progress",
                 "--resume"]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["env_step"] == 128 or summary["stop_reason"] == "stop_value"


def test_cli_missing_config_file_is_a_clear_error(tmp_path, capsys):
    assert main(["train", "-c", str(tmp_path / "missing.py")]) == 2
    assert "missing.py" in capsys.readouterr().err


def test_load_config_file_requires_both_names(tmp_path):
    bad = tmp_path / "bad_config.py"
    bad.write_text("main_config = {}\n")
    with pytest.raises(ValueError, match="create_config"):
        load_config_file(str(bad))


def test_load_config_file_does_not_run_main_block():
    main_config, create_config = load_config_file(CARTPOLE)
    assert create_config.policy.type == "dqn"


def test_the_final_line_prints_returns_to_six_digits():
    import doctest

    import commands.options

    assert doctest.testmod(commands.options).failed == 0


def test_a_run_prints_baton_s_info_lines_and_other_libraries_warnings_only():
    """An experiment tracker's, its database's and HTTP clients' INFO lines do not flood a run's output
    (issue 34); baton's own INFO lines and everyone's warnings still show."""
    import subprocess
    import sys

    code = ("import logging; from commands.options import configure_logging; configure_logging(); "
            "logging.getLogger('alembic.runtime.migration').info('third-party info'); "
            "logging.getLogger('mlflow.store').warning('third-party warning'); "
            "logging.getLogger('pipelines.assembly').info('baton info')")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stderr
    assert "baton info" in err and "third-party warning" in err and "third-party info" not in err


def test_mlflow_s_own_handler_prints_no_info_lines():
    """MLflow gives its logger a handler of its own, past the root's level: its database's set-up lines
    ("Creating initial MLflow database tables...") stayed in a run's output until MLFLOW_LOGGING_LEVEL was set."""
    import subprocess
    import sys

    pytest.importorskip("mlflow")
    code = ("import logging; from commands.options import configure_logging; configure_logging(); import mlflow; "
            "logging.getLogger('mlflow.store.db.utils').info('mlflow info'); "
            "logging.getLogger('mlflow.store.db.utils').warning('mlflow warning')")
    env = {key: value for key, value in os.environ.items() if key != "MLFLOW_LOGGING_LEVEL"}
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env).stderr
    assert "mlflow warning" in err and "mlflow info" not in err
