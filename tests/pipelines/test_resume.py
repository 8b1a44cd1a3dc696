"""A run resumed, as issue 23 found it: the best evaluation and the training time of the whole run across
resumes, the run's two clocks named alike everywhere, and the warnings of a resume (another config, a run
with nothing left to train)."""
from __future__ import annotations

import csv
import doctest
import json
import logging
import os

import pipelines.resume
from middleware.checkpoint import load_checkpoint
from middleware.evaluator import publish_evaluation
from pipelines import build_pipeline, serial_pipeline


def _rows(run_dir):
    with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def _on_disk(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def _checkpoint(run_dir, name="latest.pth.tar"):
    return load_checkpoint(os.path.join(run_dir, "ckpt", name))


def test_resume_doctests_run():
    assert doctest.testmod(pipelines.resume).failed == 0


class _Scripted:
    """The evaluator's publishing with each evaluation of this part of the run given the next of ``returns``
    (the last one again when they run out), as every stage sees it, the best checkpoint's writer included: the
    run of issue 23, whose best (387.8) was neither its last evaluation nor beaten after either resume."""

    def __init__(self, returns, publish):
        self._returns = list(returns)
        self._publish = publish

    def __call__(self, ctx, output, stop_value):
        value = self._returns.pop(0) if len(self._returns) > 1 else self._returns[0]
        self._publish(ctx, dict(output, mean=value), stop_value)


def test_resume_best_is_the_best_of_the_whole_run_after_two_resumes(quick_cartpole_config, monkeypatch):
    import middleware.evaluator

    main, create = quick_cartpole_config
    main.env.stop_value = 1e9  # run to the budgets
    main.log.tensorboard = False
    main.policy.eval.evaluator.eval_freq = 2  # evaluations in every part of the run
    run = main.exp_name
    evaluations_before = 0
    parts = [(320, [300.0, 387.8, 357.8]), (480, [300.1]), (640, [269.6])]
    for part, (budget, returns) in enumerate(parts):
        pipeline = build_pipeline((main, create), seed=0, max_env_step=budget, exp_name=run, resume=part > 0)
        pipeline.remove("final_evaluation")  # its evaluation after the last iteration would not be scripted
        monkeypatch.setattr(middleware.evaluator, "publish_evaluation",
                            _Scripted(returns, publish_evaluation))
        summary = pipeline.run()
        _, rows = _rows(run)
        logged = [float(r["eval/episode_return_mean"]) for r in rows if r["eval/episode_return_mean"]]
        assert len(logged) > evaluations_before and logged[-1] == returns[-1]  # this part evaluated
        evaluations_before = len(logged)
        # the best of every evaluation the run made, as progress.csv and best.pth.tar record it
        assert summary["best_eval_return"] == max(logged) == _checkpoint(run)["best_eval_value"] == 387.8
        assert _checkpoint(run, "best.pth.tar")["ctx"]["eval_value"] == 387.8
        assert summary["evaluations"] == len(logged) and summary["eval_return"] == logged[-1]
        assert _on_disk(run) == summary


def test_resume_wall_time_is_summed_and_elapsed_covers_the_process(quick_cartpole_config):
    main, create = quick_cartpole_config
    main.env.stop_value = 1e9
    main.log.tensorboard = False
    run = main.exp_name
    first = serial_pipeline((main, create), seed=0, max_env_step=256, exp_name=run)
    assert first["elapsed_s"] >= first["wall_time_s"] > 0.0
    assert _on_disk(run) == first  # summary.json rewritten with the elapsed_s of the run's very end
    assert _checkpoint(run)["ctx"]["wall_time_s"] == first["wall_time_s"]  # carried by the checkpoint
    header, rows = _rows(run)
    assert header[:4] == ["env_step", "train_iter", "wall_time_s", "elapsed_s"]  # the summary's names
    assert float(rows[-1]["wall_time_s"]) <= first["wall_time_s"]
    assert float(rows[-1]["elapsed_s"]) <= first["elapsed_s"]

    second = serial_pipeline((main, create), seed=0, max_env_step=512, exp_name=run, resume=True)
    trained_now = second["wall_time_s"] - first["wall_time_s"]
    assert 0.0 < trained_now <= second["elapsed_s"]  # the first part's training time, plus this one's
    assert _checkpoint(run)["ctx"]["wall_time_s"] == second["wall_time_s"]
    _, rows = _rows(run)
    walls = [float(r["wall_time_s"]) for r in rows]
    assert walls == sorted(walls) and walls[-1] <= second["wall_time_s"]
    assert all(r["elapsed_s"] for r in rows)


def test_resume_with_another_config_warns_with_the_keys_that_differ(quick_cartpole_config, caplog):
    main, create = quick_cartpole_config
    main.log.tensorboard = False
    main.env.stop_value = 1e9
    run = main.exp_name
    serial_pipeline((main, create), seed=0, max_env_step=64, exp_name=run)
    with caplog.at_level(logging.INFO, logger="pipelines.resume"):
        serial_pipeline((main, create), seed=0, max_env_step=128, exp_name=run, resume=True)  # a larger budget
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "pipelines.resume"
                and "replay buffer" not in r.getMessage()]  # its replay is not saved (the test below)
    caplog.clear()
    main.policy.learn.learning_rate = 0.001
    main.env.n_evaluator_episode = 3
    main.env.stop_value = 1e10  # a goal, like a budget: told at info level only
    with caplog.at_level(logging.INFO, logger="pipelines.resume"):
        serial_pipeline((main, create), seed=0, max_env_step=192, exp_name=run, resume=True)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "pipelines.resume"
                 and "replay buffer" not in r.getMessage()]
    assert f"resuming {run} with a config that differs from its config.json in 2 key(s): " \
           "env.n_evaluator_episode 2 -> 3; policy.learn.learning_rate 0.002 -> 0.001" in warning
    assert "stop_value" not in warning
    assert any("env.stop_value 1000000000.0 -> 10000000000.0" in r.getMessage() for r in caplog.records)


def test_resume_of_a_run_at_its_budget_stops_at_once_unless_given_a_larger_one(quick_cartpole_config, caplog):
    main, create = quick_cartpole_config
    main.log.tensorboard = False
    main.env.stop_value = 1e9
    run = main.exp_name
    first = serial_pipeline((main, create), seed=0, max_env_step=128, exp_name=run)
    assert first["stop_reason"] == "max_env_step"
    for budget in (None, 128, 64):  # no budget, or one the run has met
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pipelines.resume"):
            again = serial_pipeline((main, create), seed=0, max_env_step=budget, exp_name=run, resume=True)
        assert (again["env_step"], again["train_iter"]) == (first["env_step"], first["train_iter"])  # no training
        assert again["stop_reason"] == "max_env_step" and again["wall_time_s"] == first["wall_time_s"]
        assert again["best_eval_return"] == first["best_eval_return"]
        [line] = [r.getMessage() for r in caplog.records if r.name == "pipelines.resume"]  # 1e9: "unreachable" too
        assert line.startswith(f"the run in {run} has nothing left to train: ") and "--max-env-step" in line
    more = serial_pipeline((main, create), seed=0, max_env_step=256, exp_name=run, resume=True)
    assert more["stop_reason"] == "max_env_step" and more["env_step"] == 256


def test_resume_of_a_run_at_its_stop_value_stops_at_once_unless_given_a_budget(quick_cartpole_config, caplog):
    main, create = quick_cartpole_config
    main.log.tensorboard = False
    main.env.stop_value = 0.0  # every evaluation reaches it: the first one stops the run
    main.policy.eval.evaluator.eval_freq = 2
    run = main.exp_name
    first = serial_pipeline((main, create), seed=0, max_env_step=100000, exp_name=run)
    assert first["stop_reason"] == "stop_value" and first["evaluations"] == 1
    with caplog.at_level(logging.WARNING, logger="pipelines.resume"):
        again = serial_pipeline((main, create), seed=0, exp_name=run, resume=True)
    assert again["stop_reason"] == "stop_value" and again["train_iter"] == first["train_iter"]
    assert again["time_to_stop_value_s"] == first["time_to_stop_value_s"] == again["wall_time_s"]
    [line] = [r.getMessage() for r in caplog.records]
    assert "has nothing left to train: it reached its stop value" in line and "--max-env-step above" in line
    caplog.clear()
    budget = first["env_step"] + 256  # several evaluations away, each of which reaches the stop value
    with caplog.at_level(logging.WARNING, logger="pipelines.resume"):
        more = serial_pipeline((main, create), seed=0, max_env_step=budget, exp_name=run, resume=True)
    assert more["stop_reason"] == "max_env_step" and more["env_step"] == budget and more["evaluations"] > 2
    assert "training on to the budget given (max_env_step" in caplog.records[0].getMessage()
    with open(os.path.join(run, "config.json")) as f:
        assert json.load(f)["env"]["stop_value"] == 0.0  # the run's own goal, as it was


def test_resume_without_a_saved_replay_buffer_says_the_learner_starts_from_an_empty_one(quick_cartpole_config, caplog):
    """An off-policy run resumed from a checkpoint without its replay (``ckpt.save_replay_buffer=False``, the
    default) fills its buffer again before it learns (Pendulum SAC resumed at 800 of its 1,000 warm-up steps
    made no update in the 400 steps after): one warning says so, naming the wait, and none where the buffer was
    saved or the wait is one batch (no random warm-up)."""
    main, create = quick_cartpole_config
    main.log.tensorboard = False
    run = main.exp_name
    serial_pipeline((main, create), seed=0, max_env_step=64, exp_name=run)
    with caplog.at_level(logging.WARNING, logger="pipelines.resume"):
        serial_pipeline((main, create), seed=0, max_env_step=128, exp_name=run, resume=True)
    assert not [r for r in caplog.records if r.name == "pipelines.resume"]  # random_collect_size 0: a batch
    main.policy.random_collect_size = 200
    with caplog.at_level(logging.WARNING, logger="pipelines.resume"):
        serial_pipeline((main, create), seed=0, max_env_step=192, exp_name=run, resume=True)
    [warning] = [r.getMessage() for r in caplog.records if "empty replay" in r.getMessage()]  # and the change
    assert "holds 200 transitions" in warning
    assert "ckpt.save_replay_buffer=True" in warning
    caplog.clear()
    main.ckpt = dict(save_replay_buffer=True)
    serial_pipeline((main, create), seed=0, max_env_step=64, exp_name=run + "_saved")
    with caplog.at_level(logging.WARNING, logger="pipelines.resume"):
        serial_pipeline((main, create), seed=0, max_env_step=128, exp_name=run + "_saved", resume=True)
    assert not [r for r in caplog.records if r.name == "pipelines.resume"]
