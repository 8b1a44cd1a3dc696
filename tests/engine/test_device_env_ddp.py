"""Device envs under DDP: the torch-env configs run data-parallel like any other (two gloo ranks)."""
from __future__ import annotations

import json
import os

import pytest

import ddp_workers
from engine import launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


@pytest.mark.parametrize("config", ["dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config",
                                    "dizoo.classic_control.cartpole.config.cartpole_dqn_torch_config"])
def test_ddp_on_torch_envs_keeps_ranks_identical_and_counters_global(config, tmp_path):
    launch(ddp_workers.cartpole_run, nprocs=2, args=(str(tmp_path), {}, 512, config), timeout=30.0)
    r0, r1 = [json.load(open(os.path.join(tmp_path, f"run_rank{r}.json"))) for r in range(2)]
    assert r0["summary"]["train_iter"] == r1["summary"]["train_iter"] > 0
    assert r0["params"] == r1["params"] and r0["target"] == r1["target"]
    assert r0["summary"]["env_step"] == r1["summary"]["env_step"] >= 512 and r0["summary"]["world_size"] == 2
