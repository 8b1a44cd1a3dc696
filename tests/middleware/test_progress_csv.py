"""progress.csv: the logger's rows match what it sends to TensorBoard; late columns, resume, and the
standard pipeline writing it with or without TensorBoard."""
from __future__ import annotations

import csv
import doctest
import math
import os

import numpy as np
import pytest
from tensorboard_events import event_scalars  # tests/, on the path as test_doc_commands is

import middleware.progress_csv
from engine import OnlineRLContext, Task
from middleware import OnlineLogger
from middleware.progress_csv import LEADING_COLUMNS, ProgressCSV, read_progress
from pipelines import serial_pipeline


def _rows(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def _fake_pipeline(ctx):
    """Ten env steps and one update per iteration; training returns from iteration 2, the learner's loss
    from iteration 3 (a column that appears after the header was written), an evaluation at 3 and 6."""
    ctx.env_step += 10
    ctx.train_iter += 1
    ctx.collect_kwargs["eps"] = 0.5
    if ctx.total_step >= 2:
        ctx.episode_returns = [float(ctx.total_step)]
    if ctx.total_step >= 3:
        ctx.train_output = {"loss": 1.0 / ctx.total_step, "q_value": 2.0, "note": "not a float: not logged"}
    if ctx.total_step in (3, 6):
        ctx.eval_value, ctx.last_eval_iter = 7.0 + ctx.total_step, ctx.train_iter
        ctx.eval_output = {"mean": 7.0 + ctx.total_step, "std": 0.5}


def test_progress_csv_rows_match_the_scalars_sent_to_tensorboard(tmp_path):
    path = str(tmp_path / "progress.csv")
    logger = OnlineLogger(str(tmp_path / "log"), train_show_freq=2, csv_path=path)
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(_fake_pipeline)
        task.use(logger)
        task.run(max_step=8)
    logger.on_finish(task.ctx)  # the event file closed (nothing more to write)
    scalars = event_scalars(str(tmp_path / "log"))
    header, rows = _rows(path)
    assert header[:4] == list(LEADING_COLUMNS) + ["elapsed_s"]
    assert set(header[4:]) == set(scalars)  # every tag a column, no column without a tag
    assert "train/note" not in header
    # TensorBoard keeps float32 (simple_value)
    from_csv = {tag: [(int(r["env_step"]), float(np.float32(r[tag]))) for r in rows if r[tag] != ""]
                for tag in header[4:]}
    assert from_csv == scalars  # the same values at the same env steps, none dropped
    assert [int(r["env_step"]) for r in rows] == sorted({step for points in scalars.values()
                                                          for step, _ in points})  # one row per logging step
    eval_rows = [r for r in rows if r["eval/episode_return_mean"] != ""]
    assert [(r["env_step"], r["train_iter"], float(r["eval/episode_return_mean"])) for r in eval_rows] == \
        [("40", "4", 10.0), ("70", "7", 13.0)]  # total_step counts from 0
    walls = [float(r["wall_time_s"]) for r in rows]
    assert walls == sorted(walls) and walls[0] >= 0.0


def test_progress_csv_late_column_widens_the_header_and_keeps_earlier_rows(tmp_path):
    path = str(tmp_path / "progress.csv")
    out = ProgressCSV(path)
    out.write({"env_step": 10, "train_iter": 1, "wall_time_s": 0.1, "speed/env_steps_per_s": 100.0})
    assert _rows(path)[0] == list(LEADING_COLUMNS) + ["speed/env_steps_per_s"]  # flushed as written
    out.write({"env_step": 20, "train_iter": 2, "wall_time_s": 0.2, "train/loss": 0.5})
    out.close()
    out.write({"env_step": 30, "train_iter": 3, "wall_time_s": 0.3, "speed/env_steps_per_s": 300.0})
    out.close()  # written again after close: appended, not a new file
    header, rows = _rows(path)
    assert header == list(LEADING_COLUMNS) + ["speed/env_steps_per_s", "train/loss"]
    assert [(r["env_step"], r["speed/env_steps_per_s"], r["train/loss"]) for r in rows] == \
        [("10", "100.0", ""), ("20", "", "0.5"), ("30", "300.0", "")]
    columns = read_progress(path)
    assert columns["train/loss"][1] == 0.5 and math.isnan(columns["train/loss"][0])
    assert not [name for name in os.listdir(tmp_path) if name != "progress.csv"]  # no temporary file left


def test_progress_csv_new_run_replaces_and_resumed_run_continues(tmp_path):
    path = str(tmp_path / "progress.csv")
    first = ProgressCSV(path)
    for step in (10, 20, 30):  # the killed run logged 30, but its checkpoint holds env_step 20
        first.write({"env_step": step, "train_iter": step // 10, "wall_time_s": step / 10, "train/loss": 1.0})
    first.close()
    resumed = ProgressCSV(path, resume_env_step=20)
    assert resumed.resumed_wall_time_s == 2.0
    assert _rows(path)[1][-1]["env_step"] == "30"  # nothing rewritten before the first write
    resumed.write({"env_step": 25, "train_iter": 3, "wall_time_s": 2.5, "eval/episode_return_mean": 9.0})
    resumed.close()
    header, rows = _rows(path)
    assert [r["env_step"] for r in rows] == ["10", "20", "25"] and header[3] == "train/loss"
    fresh = ProgressCSV(path)  # a new run in the same directory
    fresh.write({"env_step": 5, "train_iter": 1, "wall_time_s": 0.0})
    fresh.close()
    assert _rows(path) == (list(LEADING_COLUMNS), [{"env_step": "5", "train_iter": "1", "wall_time_s": "0.0"}])


def test_progress_csv_docstring_example_holds():
    assert doctest.testmod(middleware.progress_csv).failed == 0


@pytest.mark.parametrize("tensorboard", [False, True])
def test_progress_csv_written_by_the_standard_pipeline(quick_cartpole_config, tensorboard):
    main, create = quick_cartpole_config
    main.log.tensorboard = tensorboard
    summary = serial_pipeline((main, create), seed=0, max_env_step=192, exp_name=main.exp_name)
    header, rows = _rows(os.path.join(main.exp_name, "progress.csv"))
    assert os.path.isdir(os.path.join(main.exp_name, "log")) == tensorboard
    for tag in ("eval/episode_return_mean", "eval/episode_return_std", "collect/eps", "train/loss",
                "speed/env_steps_per_s"):
        assert tag in header, tag
    evals = [float(r["eval/episode_return_mean"]) for r in rows if r["eval/episode_return_mean"]]
    assert len(evals) == summary["evaluations"] and evals[-1] == summary["eval_return"]


def test_progress_csv_off_and_tensorboard_off_means_no_logger_stage(quick_cartpole_config):
    from pipelines import build_pipeline
    main, create = quick_cartpole_config
    main.log.update(tensorboard=False, csv=False)
    pipeline = build_pipeline((main, create), max_env_step=64, exp_name=main.exp_name)
    try:
        assert "logger" not in pipeline.names
    finally:
        pipeline.close()
    assert not os.path.exists(os.path.join(main.exp_name, "progress.csv"))


def test_progress_csv_resumed_run_keeps_one_row_per_evaluation(quick_cartpole_config):
    main, create = quick_cartpole_config
    main.env.stop_value = 1e9  # run to the budget
    main.log.tensorboard = False
    main.policy.eval.evaluator.eval_freq = 4  # an evaluation in each part of the run
    first = serial_pipeline((main, create), seed=0, max_env_step=192, exp_name=main.exp_name)
    second = serial_pipeline((main, create), seed=0, max_env_step=384, exp_name=main.exp_name, resume=True)
    _, rows = _rows(os.path.join(main.exp_name, "progress.csv"))
    steps = [int(r["env_step"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] <= second["env_step"]
    eval_iters = [int(r["train_iter"]) for r in rows if r["eval/episode_return_mean"]]
    assert len(eval_iters) == len(set(eval_iters))  # the checkpoint's evaluation is not logged twice
    assert len(eval_iters) > first["evaluations"]  # the resumed run's evaluations come after the first's
    walls = [float(r["wall_time_s"]) for r in rows]
    assert walls == sorted(walls)  # the resumed clock goes on from the kept rows
