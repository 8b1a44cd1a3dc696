"""Learning quality on MuJoCo: SAC balances InvertedPendulum-v5 from its dizoo config (issue 20, item 5).

Why this task: it is the MuJoCo task that a CI budget affords. Hopper-v5 at 1,000 needs tens of thousands of
SAC updates of 256 transitions (BENCHMARKS.md: Hopper SAC returned 237 after 15,000 env steps), several minutes
of an idle core, where InvertedPendulum is balanced for whole episodes after 11,000 to 12,000 env steps.
"""
from __future__ import annotations

import copy

import pytest

from pipelines import serial_pipeline

pytest.importorskip("mujoco")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_invertedpendulum_sac_reaches_950_within_20k_env_steps(tmp_path):
    """Measured with invertedpendulum_sac_config.py (CleanRL's SAC settings, 1,000 random warm-up steps, an
    evaluation of 5 greedy episodes every 1,000 updates), see BENCHMARKS.md: seed 0 returned 11 to 105 in
    its first 8,000 env steps, then 274 at 9,000, 914 at 10,000 and 1,000 (every episode balanced to its
    time limit) at 11,001, the stop; seed 1 stayed at 20 to 192 up to 10,000, then 792 at 11,000 and 1,000 at
    12,001. 315 s and 360 s of training with about a third of a core of a loaded 2-core machine (35 env
    steps/s, an update each). The budget of 20,000 env steps is 1.67 times the slower seed's."""
    from dizoo.mujoco.config import invertedpendulum_sac_config as config

    main = copy.deepcopy(config.main_config)
    main.exp_name = str(tmp_path / "exp")
    summary = serial_pipeline((main, copy.deepcopy(config.create_config)), seed=0, max_env_step=20_000,
                              progress=False)
    assert summary["stop_reason"] == "stop_value" and summary["eval_return"] >= 950
    assert summary["env_step"] <= 20_000
