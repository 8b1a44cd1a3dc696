"""Observation normalisation under DDP (policies.obs_norm): every rank normalises with the statistics of all
ranks' observations, and a run saved by 2 ranks resumes in one process with them."""
from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest
import torch

import ddp_workers
from engine import launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


def test_ranks_merge_their_observations_into_the_same_statistics_and_resume_on_one(tmp_path):
    launch(ddp_workers.obs_norm_run, nprocs=2, args=(str(tmp_path),), timeout=30.0)
    r0, r1 = [json.load(open(tmp_path / f"obs_norm_rank{r}.json")) for r in range(2)]
    # the merge: both ranks hold the moments of the joined data (5 + 17 rows)
    joined = np.concatenate([np.asarray(r0["merged"]["data"]), np.asarray(r1["merged"]["data"])])
    for r in (r0, r1):
        assert r["merged"]["count"] == len(joined) == 22
        np.testing.assert_allclose(r["merged"]["mean"], joined.mean(0), rtol=1e-12)
        np.testing.assert_allclose(r["merged"]["var"], joined.var(0), rtol=1e-9)
    # the run: the same statistics on both ranks, over every env step of both
    assert r0["stats"] == r1["stats"]
    assert r0["env_step"] == r1["env_step"] >= 128 and r0["stats"]["count"] == r0["env_step"]

    # resumed in one process (another world size): the checkpoint's statistics, then this process's steps
    from dizoo.classic_control.pendulum.config.pendulum_sac_config import create_config, main_config
    from pipelines import build_pipeline

    main = copy.deepcopy(main_config)
    main.policy.obs_norm = True
    main.policy.learn.batch_size = 16
    main.policy.model = dict(actor_head_hidden_size_list=[16, 16], critic_head_hidden_size_list=[16, 16])
    main.env.stop_value = 1e9
    main.log = dict(progress=False, tensorboard=False, csv=False)
    pipeline = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=r0["env_step"] + 16,
                              exp_name=str(tmp_path / "exp_seed0"), resume=True)
    loaded = {k: v.tolist() for k, v in pipeline.policy.learn_mode.state_dict()["obs_norm"].items()}
    assert loaded == r0["stats"]
    summary = pipeline.run()
    assert float(pipeline.policy.learn_mode.state_dict()["obs_norm"]["count"]) == summary["env_step"]
