"""The run assembly (``pipelines.assembly``): one head and tail for every shape, the shape chosen by the
policy class's ``pipeline``; a new shape is a ``Shape`` subclass and a row in the table."""
from __future__ import annotations

import os

import pytest

from engine.config import ConfigError
from engine.context import OnlineRLContext
from pipelines import build_pipeline
from pipelines.assembly import RunRequest, assemble
from pipelines.build import SHAPES
from pipelines.online import OffPolicyShape
from policies.dqn import DQNPolicy

TAIL = ["checkpoint", "logger", "termination", "final_evaluation"]


def test_each_shape_shares_the_head_and_tail(quick_cartpole_config):
    main, create = quick_cartpole_config
    main.log.csv = True
    with build_pipeline((main, create), max_env_step=64) as pipeline:
        names = pipeline.names
        assert names[:4] == ["preemption", "ddp", "summary", "evaluator"]
        assert names[-4:] == TAIL
        assert names[4:-4] == ["exploration", "collector", "pusher", "learner"]
        assert pipeline.cfg.policy.type == "dqn" and pipeline.buffer is not None
        # wiring given at construction, not patched after it: the logger keeps the summary's clock
        assert pipeline["logger"].clock is pipeline["summary"].clock


class CountingShape(OffPolicyShape):
    """A new shape: the off-policy middle with a stage of its own after the learner."""

    def middle(self, run, pipeline, buffer):
        super().middle(run, pipeline, buffer)
        pipeline.append(lambda ctx: None, name="counted")


def test_a_new_shape_is_a_row_in_the_table(quick_cartpole_config, monkeypatch):
    main, create = quick_cartpole_config
    monkeypatch.setattr(DQNPolicy, "pipeline", "counting")
    shapes = dict(SHAPES, counting=CountingShape)
    with assemble(RunRequest(main, create, max_env_step=64), shapes) as pipeline:
        assert pipeline.names[-6:] == ["learner", "counted"] + TAIL
        assert isinstance(pipeline.ctx, OnlineRLContext)


def test_an_undeclared_shape_names_the_policy_and_the_known_ones(quick_cartpole_config, monkeypatch, tmp_path):
    main, create = quick_cartpole_config
    monkeypatch.setattr(DQNPolicy, "pipeline", "multi_agent")
    with pytest.raises(ConfigError, match=r"policy 'dqn' .*declares pipeline = 'multi_agent'.*off_policy, offline, "
                                          r"on_policy"):
        build_pipeline((main, create), max_env_step=64)
    assert not (tmp_path / "exp_seed0").exists()  # refused before the run directory


def test_a_context_of_another_shape_is_refused(quick_cartpole_config):
    from engine.context import OfflineRLContext

    main, create = quick_cartpole_config
    with pytest.raises(TypeError, match="wants OnlineRLContext or a subclass"):
        build_pipeline((main, create), max_env_step=64, context=OfflineRLContext)


def test_a_run_its_budget_ends_evaluates_its_last_weights_once(quick_cartpole_config):
    """Issue 34: the summary's eval_return was the evaluation of eval_freq updates before the end. Now the
    final weights are evaluated once after the last iteration, and every record of the run agrees."""
    import csv

    main, create = quick_cartpole_config
    main.env.stop_value = 1e9  # only the budget ends it
    main.policy.eval.evaluator.eval_freq = 1000  # one scheduled evaluation (after the first update)
    summary = build_pipeline((main, create), max_env_step=320).run()
    assert summary["stop_reason"] == "max_env_step" and summary["evaluations"] == 2
    with open(os.path.join(summary["run_dir"], "progress.csv"), newline="") as f:
        evaluated = [row for row in csv.DictReader(f) if row.get("eval/episode_return_mean")]
    assert len(evaluated) == 2 and int(evaluated[-1]["train_iter"]) == summary["train_iter"]
    assert float(evaluated[-1]["eval/episode_return_mean"]) == summary["eval_return"]


@pytest.mark.parametrize("world_size, warmup", [(1, 1000), (2, 500), (3, 334)])
def test_the_learner_waits_for_its_share_of_the_random_warm_up(quick_cartpole_config, monkeypatch, world_size,
                                                               warmup):
    """``random_collect_size`` counts global env steps: under DDP each rank's buffer holds its share of the random
    data, and its learner starts there, not once its own buffer alone holds all ranks' random data."""
    main, create = quick_cartpole_config
    main.policy.random_collect_size = 1000
    monkeypatch.setattr("pipelines.stages.get_world_size", lambda: world_size)
    with build_pipeline((main, create), max_env_step=64) as pipeline:
        assert pipeline["learner"]._warmup == warmup
