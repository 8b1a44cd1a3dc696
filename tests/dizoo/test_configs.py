"""Every dizoo config runs as a script for a few steps (CleanRL's habit), with the common options."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = sorted(p for p in glob.glob(os.path.join(ROOT, "dizoo", "**", "config", "**", "*_config.py"), recursive=True)
                 if not p.endswith("_ddp_config.py"))


def _needs(path):
    return ["Box2D", "pygame"] if "box2d" in path else ["ale_py"] if "atari" in path else []


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_dizoo_config_runs_as_script(path, tmp_path):
    for module in _needs(path):
        pytest.importorskip(module)
    exp = tmp_path / "exp"
    # --local-rank=0 is what torch.distributed.launch appends: it must be accepted
    cmd = [sys.executable, path, "--seed", "1", "--max-env-step", "200", "--exp-name", str(exp),
           "--no-progress", "--local-rank=0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["env_step"] >= 1 and summary["stop_reason"] in ("max_env_step", "stop_value")
    assert "baton: " in proc.stdout


def test_dizoo_config_module_defines_configs():
    import runpy
    for path in CONFIGS:
        ns = runpy.run_path(path, run_name="not_main")
        assert "main_config" in ns and "create_config" in ns, path
