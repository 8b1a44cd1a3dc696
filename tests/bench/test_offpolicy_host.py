"""bench/offpolicy_host.py: each stage's host time per env step of the one-env off-policy loop, run briefly."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("mujoco")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import offpolicy_host  # noqa: E402


@pytest.mark.parametrize("per_collect", [1, 4])
def test_each_stage_is_timed_per_env_step(per_collect):
    import torch

    threads = torch.get_num_threads()
    try:
        stages = offpolicy_host.child("td3", warmup=60, env_steps=16, per_collect=per_collect)
    finally:  # the bench's one thread, not this worker's later files'
        torch.set_num_threads(threads)
    assert {"collector", "pusher", "learner", "logger"} <= stages.keys() and "clock" not in stages
    assert all(us >= 0 for us in stages.values()) and stages["collector"] > 0 and stages["learner"] > 0
