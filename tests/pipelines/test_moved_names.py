"""What the renovation moved answers its old spelling with one line naming the new one (issue 30's bad
input): the standard pipeline's module, the command floor's names, ``python -m pipelines``."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def test_the_old_pipeline_module_names_the_new_spelling():
    with pytest.raises(ImportError, match=r"^baton: pipelines.serial was renamed: .*from pipelines import "
                                          r"build_pipeline"):
        importlib.import_module("pipelines.serial")


@pytest.mark.parametrize("name", ["cli_main", "parse_train_args"])
def test_a_command_name_imported_from_pipelines_names_commands(name):
    with pytest.raises(ImportError, match=rf"^baton: {name} moved to the command floor: from commands import {name}$"):
        exec(f"from pipelines import {name}", {})
    commands = importlib.import_module("commands")
    assert callable(getattr(commands, name))


def test_python_m_pipelines_names_the_command_in_one_line():
    done = subprocess.run([sys.executable, "-m", "pipelines", "train", "-c", "x.py"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("baton: the command moved: run `baton ...` or "
                                                                   "`python -m commands ...`")


@pytest.mark.parametrize("statement,message", [
    ("from middleware import DeviceStepCollector", r"^baton: DeviceStepCollector is now StepCollector"),
    ("import middleware.device_collector", r"^baton: middleware.device_collector is gone: StepCollector serves"),
    ("from data.env_groups import OverlappedEnvLoop", r"^baton: OverlappedEnvLoop is now data.env_loop.EnvLoop"),
])
def test_a_replaced_collector_names_the_one_collection_path(statement, message):
    with pytest.raises(ImportError, match=message):
        exec(statement, {})
