"""The run summary and the run's clocks: the best and the evaluations of the whole run across a resume, one
clock read alike by the summary, progress.csv and the progress bar."""
from __future__ import annotations

import doctest
import io
import math
import sys

import middleware.summary
from engine import OnlineRLContext, Task
from middleware import OnlineLogger, progress_bar
from middleware.summary import RECORD_FIELD, WALL_TIME_FIELD, RunClock, RunSummary, restore_record


def test_summary_doctests_run():
    assert doctest.testmod(middleware.summary).failed == 0


def _evaluate(ctx, value):
    ctx.eval_value, ctx.last_eval_iter, ctx.eval_output = value, ctx.train_iter, {"mean": value, "std": 0.0}


def _one_evaluation_per_iteration(values):
    returns = iter(values)

    def stage(ctx):
        ctx.env_step += 10
        ctx.train_iter += 1
        _evaluate(ctx, next(returns))
    return stage


def test_summary_best_after_resume_is_the_checkpoints_not_its_last_evaluation(tmp_path):
    """The bug of issue 23: a resumed run counted the checkpoint's last evaluation (357.8) as its best and
    forgot the run's best (387.8), which the checkpoint's record holds."""
    first = RunSummary(str(tmp_path), write=False)
    ctx = OnlineRLContext()
    task = Task()
    with task.start(ctx=ctx):
        task.use(first)
        task.use(_one_evaluation_per_iteration([300.0, 387.8, 357.8]))
        task.run(max_step=3)
    assert first.result["best_eval_return"] == 387.8 and first.result["evaluations"] == 3
    saved = ctx.persistent_state()  # what a checkpoint at finish holds
    assert saved[RECORD_FIELD] == {"evaluations": 3, "eval_iter": 3, "best_eval_return": 387.8}
    assert saved[WALL_TIME_FIELD] == first.result["wall_time_s"]

    resumed = OnlineRLContext()
    resumed.load_persistent_state({k: v for k, v in saved.items() if k != RECORD_FIELD})  # an older checkpoint
    restore_record(resumed, best_eval_value=387.8)  # from the checkpoint's best_eval_value
    second = RunSummary(str(tmp_path), write=False)
    task = Task()
    with task.start(ctx=resumed):
        task.use(second)
        task.use(_one_evaluation_per_iteration([269.6, 301.0]))
        task.run(max_step=2)
    assert second.result["best_eval_return"] == 387.8
    assert second.result["evaluations"] == 2  # the restored evaluation is not counted again
    assert second.result["wall_time_s"] >= first.result["wall_time_s"]


def test_summary_of_a_run_that_ends_before_its_first_iteration_reports_what_it_resumed(tmp_path):
    ctx = OnlineRLContext(env_step=640, train_iter=80)
    _evaluate(ctx, 200.0)
    setattr(ctx, WALL_TIME_FIELD, 12.5)
    restore_record(ctx, best_eval_value=210.0)
    ctx.finish, ctx.stop_reason = True, "stop_value"
    summary = RunSummary(str(tmp_path))
    task = Task()
    with task.start(ctx=ctx):
        task.use(summary)
        task.run()
    assert summary.result["wall_time_s"] == 12.5 == summary.result["time_to_stop_value_s"]
    assert summary.result["best_eval_return"] == 210.0 and summary.result["stop_reason"] == "stop_value"
    assert summary.result["elapsed_s"] >= 0.0


def test_summary_logger_and_bar_read_one_clock(tmp_path, monkeypatch):
    class Terminal(io.StringIO):  # the bar draws on a terminal only
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    ticks = iter(float(t) for t in range(1000))
    clock = RunClock(lambda: next(ticks))
    summary = RunSummary(str(tmp_path), clock=clock)
    logger = OnlineLogger(str(tmp_path / "log"), train_show_freq=1, tensorboard=False,
                          csv_path=str(tmp_path / "progress.csv"))
    logger.clock = clock
    bar = progress_bar(total_env_step=30, clock=clock)
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(summary)
        task.use(_one_evaluation_per_iteration([1.0, 2.0, 3.0]))
        task.use(logger)
        task.use(bar)
        task.run(max_step=3)
    summary.close()
    with open(tmp_path / "progress.csv") as f:
        header = f.readline().strip().split(",")
        last = dict(zip(header, f.readlines()[-1].strip().split(",")))
    assert header[:4] == ["env_step", "train_iter", "wall_time_s", "elapsed_s"]
    assert set(summary.result) >= {"wall_time_s", "elapsed_s"}
    assert float(last["wall_time_s"]) <= summary.result["wall_time_s"] <= summary.result["elapsed_s"]
    err = sys.stderr.getvalue()
    assert "wall_time_s=" in err and "elapsed_s=" in err


def test_run_clock_resumes_from_the_larger_record_and_never_runs_backwards():
    ticks = iter([0.0, 1.0, 4.0, 9.0])
    clock = RunClock(lambda: next(ticks))
    clock.carry(5.0)
    clock.carry(None)
    clock.carry(3.0)  # progress.csv's last kept row, older than the checkpoint's record
    assert clock.carried_s == 5.0 and clock.wall_time_s() == 5.0 and not clock.started
    clock.start()
    clock.stop()
    clock.stop()
    assert clock.wall_time_s() == 8.0 and clock.elapsed_s() == 9.0
    assert math.isclose(RunClock().elapsed_s(), 0.0, abs_tol=1.0)


def test_an_evaluation_and_the_final_one_in_the_same_last_iteration_both_count(tmp_path):
    """The bug found with issue 35: the evaluator evaluated at the iteration's start (9.5), the budget ended the
    run in the same iteration and the final evaluation (9.0) replaced ``ctx.eval_output`` before the summary
    looked, so the run's best was 9.0 while progress.csv and best.pth.tar held 9.5 (a resume then reported 9.5)."""
    from middleware.evaluator import final_evaluation

    class FinalEvaluator:  # what InteractionEvaluator.evaluate publishes, with a scripted return
        def evaluate(self, ctx, stop_value=None):
            _evaluate(ctx, 9.0)

    summary = RunSummary(str(tmp_path), write=False)
    ctx = OnlineRLContext()

    def iteration(ctx):
        ctx.train_iter += 2
        _evaluate(ctx, 9.5)  # the evaluator, before the learner
        ctx.train_iter += 2  # the learner
        ctx.finish, ctx.stop_reason = True, "max_env_step"  # termination: the budget

    task = Task()
    with task.start(ctx=ctx):
        task.use(summary)
        task.use(iteration)
        task.use(final_evaluation(FinalEvaluator(), seen=summary.track_evaluation))
        task.run(max_step=1)
    assert ctx.eval_value == 9.0  # the final weights' evaluation is the last one
    assert summary.result["best_eval_return"] == 9.5 and summary.result["evaluations"] == 2
