"""The standard pipeline as named stages: what it contains, how a user extends it, and the errors."""
from __future__ import annotations

import copy

import pytest

from engine import Context, OnlineRLContext
from pipelines import Pipeline, StageError, build_pipeline

OFF_POLICY = ["preemption", "ddp", "summary", "evaluator", "exploration", "collector", "pusher", "learner", "checkpoint",
              "logger", "termination", "final_evaluation"]


def test_standard_stages_off_and_on_policy(quick_cartpole_config):
    main, create = quick_cartpole_config
    with build_pipeline((main, create)) as pipeline:
        assert pipeline.names == OFF_POLICY
    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config
    ppo = copy.deepcopy(main_config)
    ppo.exp_name, ppo.log = main.exp_name + "_ppo", dict(progress=True)
    with build_pipeline((ppo, copy.deepcopy(create_config))) as pipeline:
        assert pipeline.names == ["preemption", "ddp", "summary", "evaluator", "collector", "gae", "learner", "checkpoint",
                                  "logger", "termination", "final_evaluation", "progress"]


def test_inserted_middleware_runs_in_place_and_sees_the_learner_output(quick_cartpole_config):
    main, create = quick_cartpole_config
    order, losses = [], []
    pipeline = build_pipeline((main, create), max_env_step=256)
    pipeline.insert_after("learner", lambda ctx: losses.append((ctx.train_output or {}).get("loss")), name="mine")
    pipeline.insert_before("collector", lambda ctx: order.append("before collector"), name="first")
    pipeline.append(lambda ctx: order.append("last"), name="last")
    assert pipeline.names.index("mine") == pipeline.names.index("learner") + 1
    summary = pipeline.run()
    assert summary["env_step"] >= 256 and any(loss is not None for loss in losses)
    assert order[:2] == ["before collector", "last"]


def test_replace_and_remove(quick_cartpole_config):
    main, create = quick_cartpole_config
    calls = []
    pipeline = build_pipeline((main, create), max_env_step=64)
    pipeline.replace("evaluator", lambda ctx: calls.append(ctx.total_step)).remove("logger")
    assert "logger" not in pipeline and pipeline.names.index("evaluator") == 3
    pipeline.run()
    assert calls[0] == 0
    with pytest.raises(RuntimeError, match="has run already"):
        pipeline.run()


def test_unknown_stage_names_the_stages_that_exist(quick_cartpole_config):
    main, create = quick_cartpole_config
    with build_pipeline((main, create)) as pipeline:
        with pytest.raises(StageError) as err:
            pipeline.insert_after("lerner", lambda ctx: None)
        message = str(err.value)
        assert "no stage named 'lerner'" in message and "Did you mean 'learner'?" in message
        assert "Stages: preemption, ddp, summary, evaluator" in message


def test_not_callable_and_duplicate_names_are_errors(quick_cartpole_config):
    main, create = quick_cartpole_config
    with build_pipeline((main, create)) as pipeline:
        with pytest.raises(TypeError, match=r"stage 'mine': a middleware must be callable.*Stages: preemption, ddp"):
            pipeline.insert_after("learner", "not a function", name="mine")
        with pytest.raises(StageError, match="a stage named 'learner' exists already"):
            pipeline.append(lambda ctx: None, name="learner")


def test_context_must_extend_online_context(quick_cartpole_config):
    with pytest.raises(TypeError, match="OnlineRLContext or a subclass"):
        build_pipeline(quick_cartpole_config, context=Context)


def test_main_only_stages_keep_their_place_on_other_ranks():
    ran = []
    pipeline = Pipeline(OnlineRLContext(), rank=1)
    pipeline.append(lambda ctx: ran.append("everywhere"), name="a")
    pipeline.append(None, name="evaluator", main_only=True)          # not built on rank 1
    pipeline.insert_after("evaluator", lambda ctx: ran.append("rank 0 only"), name="mine", main_only=True)
    assert pipeline.names == ["a", "evaluator", "mine"] and pipeline["mine"] is None
    pipeline.run(max_step=2)
    assert ran == ["everywhere", "everywhere"]
    with pytest.raises(TypeError, match="must be callable"):
        Pipeline(OnlineRLContext(), rank=0).append(None, name="evaluator", main_only=True)


def test_a_failed_run_tells_its_resources_the_error():
    """The process group is a resource: told of the error, it skips the final barrier, which a peer that
    failed elsewhere would never reach (under torchrun that hid rank 1's error behind a collective mismatch)."""
    import contextlib

    seen = []

    @contextlib.contextmanager
    def group():
        try:
            yield
        except BaseException as err:
            seen.append(type(err))
            raise
        else:
            seen.append(None)

    def fail(ctx):
        raise RuntimeError("stage failed")

    for stages, expected in (([fail], RuntimeError), ([lambda ctx: setattr(ctx, "finish", True)], None)):
        resources = contextlib.ExitStack()
        resources.enter_context(group())
        pipeline = Pipeline(OnlineRLContext(), rank=0, resources=resources)
        for i, stage in enumerate(stages):
            pipeline.append(stage, name=f"s{i}")
        with contextlib.suppress(RuntimeError):
            pipeline.run(max_step=3)
        assert seen.pop() is expected


def test_the_best_checkpoint_holds_the_weights_its_evaluation_scored(quick_cartpole_config):
    """The evaluator runs first in an iteration and the checkpoint stage after the learner: a new best is written
    as the evaluation is published, from the weights it evaluated, not from the ones the learner has made since.
    Checked at the end of every iteration, against the weights each evaluation saw."""
    import os

    import torch

    from middleware import load_checkpoint

    main, create = quick_cartpole_config
    main.env.stop_value = float("inf")
    evaluated, checked = {}, []
    pipeline = build_pipeline((main, create), max_env_step=1024)
    policy = pipeline.policy
    best_path = f"{main.exp_name}_seed0/ckpt/best.pth.tar"

    def remember(ctx):
        if ctx.eval_output is not None and ctx.last_eval_iter == ctx.train_iter:  # evaluated in this iteration
            evaluated[ctx.train_iter] = (ctx.eval_value, copy.deepcopy(policy.learn_mode.state_dict()["model"]))

    def check(ctx):
        if not os.path.isfile(best_path):
            return
        best = load_checkpoint(best_path)
        value, weights = evaluated[best["ctx"]["train_iter"]]  # a KeyError: best is of weights never evaluated
        assert value == best["best_eval_value"]
        for key, tensor in weights.items():
            assert torch.equal(best["policy"]["model"][key], tensor), key
        checked.append(best["ctx"]["train_iter"])

    pipeline.insert_after("evaluator", remember, name="remember")
    pipeline.insert_after("final_evaluation", remember, name="remember_final")  # the run's last weights
    pipeline.append(check, name="check")
    pipeline.run()
    assert len(evaluated) >= 3 and len(checked) > 10
