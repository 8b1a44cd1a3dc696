"""The env-step budget under DDP: the run stops in the iteration that reaches it (each rank counts the
others' equal share before the ranks' counts are summed), not one iteration later."""
from __future__ import annotations

import json

import pytest

import ddp_workers
from engine import launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


@pytest.mark.parametrize("budget", [1000, 1024])
def test_the_budget_is_overshot_by_less_than_one_iteration_of_the_ranks(budget, tmp_path):
    # 2 ranks x 32 transitions an iteration: 64 global env steps per iteration
    launch(ddp_workers.cartpole_run, nprocs=2, args=(str(tmp_path), {}, budget), timeout=60)
    summary = json.load(open(tmp_path / "run_rank0.json"))["summary"]
    assert summary["stop_reason"] == "max_env_step"
    assert budget <= summary["env_step"] < budget + 64, summary["env_step"]
