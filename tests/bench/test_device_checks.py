"""bench/device_checks.sh: a GPU call brings back little besides ``summary.txt``, so each step's figure lines must
reach it. The lines below are what the benches print (their f-strings filled in); the pattern is the script's."""
from __future__ import annotations

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "device_checks.sh")

PRINTED = [
    "bare EnvPool, sync, random actions:                      41234 env steps/s; ",
    "StepCollector serial on EnvPool + DQN:                   20345 env steps/s; ",
    "bare AtariVectorEnv, sync, random actions:               17500 env steps/s",
    "StepCollector overlapped + DQN (Nature CNN, eps 0.05):    15000 env steps/s; ",
    "DQN learner on cuda: 512.3 updates/s (batch 32)",
    "summary: none 503/s (1.00x), 0.55 ms busy; cudagraph_update 1500/s (2.98x)",
    "summary td3: none 300/s (1.00x); cudagraph_update 900/s (3.00x)",
    "sac cudagraph_update: update 20 not reached in the 65 s cap (--cap-s)",
    "halfcheetah_sac         5  3012.5 [2500.1, 3500.2]",
    "  seed 0, policy.compile=cudagraph: 3.1 s to the stop value at 1,000,000 env steps",
    "FAILED tests/gpu/test_update_graph_cuda.py::test_captured_two_step_updates_equal_eager - AssertionError",
    "3 passed, 1 failed in 98.2s",
]


def test_the_summary_keeps_every_bench_s_figure_lines():
    text = open(SCRIPT).read()
    figures = re.search(r"^FIGURES='(.*)'$", text, flags=re.M).group(1)
    missed = [line for line in PRINTED if not re.search(figures, line)]
    assert not missed, f"device_checks.sh's FIGURES misses: {missed}"
    assert not re.search(figures, "Using a slow image processor as `use_fast` is unset")  # the noise stays out


def test_an_unknown_part_is_refused_by_name(tmp_path):
    proc = subprocess.run(["bash", SCRIPT, "no_such_part"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, OUT=str(tmp_path / "out")), timeout=60)
    assert proc.returncode == 2 and "unknown part 'no_such_part' (updates | offpolicy | seeds | loop | envpool)" in proc.stdout
