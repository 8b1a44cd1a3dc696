"""The env-step budget under DDP: the run stops in the iteration that reaches it (each rank counts the
others' equal share before the ranks' counts are summed), not one iteration later; the final evaluation of a
run the budget ends is placed at the env_step the run ends at, and every rank reports rank 0's best."""
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


def test_the_final_evaluation_is_at_the_env_step_the_run_ends_at_and_every_rank_reports_rank0s_best(tmp_path):
    """The final evaluation runs after the iteration's collection, when rank 0's ``ctx.env_step`` holds only its
    own share of it (it was labelled 40 of 48); and it replaces the iteration's periodic evaluation (the best,
    10) before the ranks agree, so rank 1 counted 2 evaluations and a best of 5."""
    launch(ddp_workers.final_evaluation_run, nprocs=2, args=(str(tmp_path),), timeout=60)
    ranks = [json.load(open(tmp_path / f"final_rank{r}.json")) for r in (0, 1)]
    for r in ranks:
        assert r["summary"]["stop_reason"] == "max_env_step" and r["summary"]["env_step"] == 48
        assert (r["eval_env_step"], r["eval_train_iter"], r["eval_return"]) == (48, 3, 5.0)
        assert r["summary"]["best_eval_return"] == 10.0 and r["summary"]["evaluations"] == 3
