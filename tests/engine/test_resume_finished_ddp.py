"""A finished run resumed data-parallel (issue 23): rank 0 reads the checkpoint and decides that nothing is
left to train, and every rank stops with it before a first iteration, none waiting in a collective."""
from __future__ import annotations

import json
import os

import pytest

import ddp_workers
from engine import launch


@pytest.mark.distributed
def test_a_run_at_its_budget_resumed_on_two_ranks_stops_on_both_at_once(tmp_path):
    ddp_workers.sharded_replay_run(str(tmp_path), max_env_step=128)
    with open(tmp_path / "fresh_rank0.json") as f:
        fresh = json.load(f)["summary"]
    launch(ddp_workers.sharded_replay_run, nprocs=2, args=(str(tmp_path), True, 128), timeout=30.0)
    for rank in range(2):
        with open(os.path.join(tmp_path, f"resumed_rank{rank}.json")) as f:
            summary = json.load(f)["summary"]
        assert summary["stop_reason"] == "max_env_step", summary
        assert (summary["env_step"], summary["train_iter"]) == (fresh["env_step"], fresh["train_iter"])
        assert summary["wall_time_s"] == fresh["wall_time_s"]  # no training, the run's time as it was
