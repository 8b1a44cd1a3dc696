"""The answers of ``baton`` that train nothing load neither torch nor gymnasium (issue 23, item 4): each
runs the CLI's ``main`` in a fresh interpreter and reports what it imported."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY = ("torch", "gymnasium")

# main(ARGV) with its SystemExit caught, then one JSON line: the exit status and which HEAVY modules loaded
SCRIPT = """
import json, sys
from commands.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as stop:
    status = stop.code
print(json.dumps({"status": status, "loaded": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)


def _answer(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT))
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


@pytest.mark.parametrize("argv, status", [
    (["--help"], 0),
    (["train", "--help"], 0),
    (["train", "--list-algos"], 0),
    (["train", "--list-envs"], 0),
    (["train", "--list-algos", "--list-envs"], 0),
    (["train", "--no-such-option"], 2),
    (["no-such-command"], 2),
    (["train", "-c", "missing_config.py"], 2),
    (["train", "-c", "missing_config.py", "--nproc", "0"], 2),
    (["train", "--algo", "dqn"], 2),
    (["eval", "no_such_run"], 2),        # a run directory that is not there: said before torch loads
    (["export", "no_such_run", "--format", "onnx"], 2),
    (["plot", "no_such_run"], 2),
    (["report", "no_such_run"], 2),
    (["eval", "--help"], 0),
    (["report", "--help"], 0),
])
def test_cli_answers_without_torch_or_gymnasium(argv, status, tmp_path):
    answer, proc = _answer(argv, tmp_path)
    assert answer == {"status": status, "loaded": []}, proc.stderr[-2000:]
    if status == 2:  # the error still names what is wrong
        assert "baton" in proc.stderr and any(word in proc.stderr for word in ("missing_config.py", "error:",
                                                                                "no_such_run"))


@pytest.mark.parametrize("command, option", [("record", "--episodes"), ("plot", "--label"), ("eval", "--video"),
                                             ("export", "--format"), ("report", "--score")])
def test_cli_commands_that_need_torch_still_get_their_options(command, option, capsys):
    """``record``'s, ``plot``'s and the after-training commands' options come from their modules, added when that
    command is given."""
    from commands.cli import main

    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0 and option in capsys.readouterr().out


def test_a_missing_run_directory_reads_as_the_working_module_says_it(tmp_path):
    """The early check (commands.run_options) and the modules that do the work word it alike, from one constant."""
    from commands.run_options import PROGRESS_FILE, missing_run_dirs
    from commands.saved_run import load_run_config
    from middleware.progress_csv import PROGRESS_FILE as WRITTEN
    from pipelines.run_dir import RunDirError

    assert PROGRESS_FILE == WRITTEN
    missing = str(tmp_path / "gone")
    with pytest.raises(RunDirError) as err:
        load_run_config(missing)
    assert missing_run_dirs("eval", argparse.Namespace(run_dir=missing)) == f"baton: {err.value}"
