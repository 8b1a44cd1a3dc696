"""The answers of ``baton`` that train nothing load neither torch nor gymnasium (issue 23, item 4): each
runs the CLI's ``main`` in a fresh interpreter and reports what it imported."""
from __future__ import annotations

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
])
def test_cli_answers_without_torch_or_gymnasium(argv, status, tmp_path):
    answer, proc = _answer(argv, tmp_path)
    assert answer == {"status": status, "loaded": []}, proc.stderr[-2000:]
    if status == 2:  # the error still names what is wrong
        assert "baton: " in proc.stderr and ("missing_config.py" in proc.stderr or "error:" in proc.stderr)


@pytest.mark.parametrize("command, option", [("record", "--episodes"), ("plot", "--label"), ("eval", "--video"),
                                             ("export", "--format"), ("report", "--score")])
def test_cli_commands_that_need_torch_still_get_their_options(command, option, capsys):
    """``record``'s, ``plot``'s and the after-training commands' options come from their modules, added when that
    command is given."""
    from commands.cli import main

    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0 and option in capsys.readouterr().out
