from __future__ import annotations

import io
import sys

import pytest

from engine import OnlineRLContext, Task
from data.envs import make_vector_env
from engine.registry import ENV_REGISTRY
from middleware import OnlineLogger, progress_bar
from tensorboard_events import event_scalars  # tests/, on the path as test_doc_commands is


def test_online_logger_writes_the_documented_scalars(tmp_path):
    logger = OnlineLogger(str(tmp_path), train_show_freq=2)
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        def fake_pipeline(ctx):
            ctx.env_step += 10
            ctx.train_iter += 1
            ctx.episode_returns = [5.0]
            ctx.collect_kwargs["eps"] = 0.5
            ctx.train_output = {"loss": 1.0, "q_value": 2.0}
            if ctx.total_step == 1:
                ctx.eval_value, ctx.last_eval_iter = 7.0, ctx.train_iter
                ctx.eval_output = {"mean": 7.0, "std": 0.0}
        task.use(fake_pipeline)
        task.use(logger)
        task.run(max_step=4)
    logger.on_finish(task.ctx)  # closes the event file
    scalars = event_scalars(str(tmp_path))
    for tag in ("collect/episode_return", "collect/eps", "eval/episode_return_mean", "train/loss", "train/q_value",
                "speed/env_steps_per_s", "speed/train_iter_per_s"):
        assert tag in scalars, tag
    assert scalars["eval/episode_return_mean"] == [(20, 7.0)]  # against env_step
    assert scalars["train/loss"] == [(30, 1.0), (40, 1.0)] and scalars["collect/eps"] == [(30, 0.5), (40, 0.5)]


def test_a_row_is_one_event_with_add_scalar_s_tags_and_values(tmp_path):
    """The logger writes a row of scalars as one TensorBoard event (a tenth of add_scalar's time for a row of 20):
    each value as add_scalar would write it, a tag TensorBoard refuses cleaned as add_scalar cleans it."""
    from tensorboardX import SummaryWriter

    row = {"train/loss": 0.25, "profile/learner#2_share": 0.5, "speed/env steps": 3.0}
    apart = SummaryWriter(str(tmp_path / "apart"))
    for tag, value in row.items():
        apart.add_scalar(tag, value, 7)
    apart.close()
    logger = OnlineLogger(str(tmp_path / "row"))
    logger._write(7, 1, row)
    logger.on_finish(OnlineRLContext())
    assert event_scalars(str(tmp_path / "row")) == event_scalars(str(tmp_path / "apart"))
    assert "profile/learner_2_share" in event_scalars(str(tmp_path / "row"))


def test_a_row_after_the_writer_was_closed_opens_it_again(tmp_path):
    """``logger.writer`` is public: a row written after someone closed it lands, as add_scalar's would."""
    logger = OnlineLogger(str(tmp_path))
    logger._write(10, 1, {"train/loss": 0.5})
    logger.writer.close()
    logger._write(20, 2, {"train/loss": 0.25})
    logger.on_finish(OnlineRLContext())
    assert (20, 0.25) in event_scalars(str(tmp_path))["train/loss"]  # a new event file (as add_scalar's would be)


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, as an interactive shell's is."""

    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_bar_is_drawn_on_a_terminal_only(terminal, monkeypatch):
    """On a terminal the bar is drawn and closed at finish; into a file or a pipe (a job's log) it writes
    nothing, rather than a carriage-return update per refresh."""
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    task = Task()
    bar = progress_bar(total_env_step=40)
    with task.start(ctx=OnlineRLContext()):
        task.use(lambda ctx: setattr(ctx, "env_step", ctx.env_step + 10))
        task.use(bar)
        task.run(max_step=4)
    assert bar._bar is None  # closed at finish
    assert ("env steps" in stderr.getvalue() and "40/40" in stderr.getvalue()) if terminal else \
        stderr.getvalue() == ""


def test_async_env_manager_steps_in_subprocesses():
    from middleware import StepCollector
    import torch
    env_type = ENV_REGISTRY.get("cartpole")
    env_cfg = dict(env_type.default_config(), manager=dict(type="async", shared_memory=False, context=None))
    env = make_vector_env(env_type, env_cfg, 2, seed=0)
    try:
        assert type(env).__name__ == "AsyncVectorEnv"

        class Zero:
            def forward(self, obs, **kw):
                return {"action": torch.zeros(len(obs), dtype=torch.long)}

        ctx = OnlineRLContext()
        StepCollector(Zero(), env, n_sample=8)(ctx)
        assert len(ctx.trajectories.reward) == 8 and ctx.env_step == 8
    finally:
        env.close()


def _tensorboard_threads():
    import threading
    return [t for t in threading.enumerate() if type(t).__name__ == "_EventLoggerThread" and t.is_alive()]


def test_a_full_disk_at_the_end_leaves_no_tensorboard_thread_behind(tmp_path, monkeypatch):
    """tensorboardX stops its writer thread only after a flush that succeeded: on a full disk the thread was left
    reading a queue that was then collected, and printed "OSError: handle is closed" after each trial a full
    disk stopped (issue 34, baton tune --jobs). The logger's end stops it whatever the flush and the CSV did,
    and still raises the disk's error."""
    import errno

    from tensorboardX.event_file_writer import EventFileWriter

    before = len(_tensorboard_threads())
    logger = OnlineLogger(str(tmp_path / "log"), csv_path=str(tmp_path / "progress.csv"))
    ctx = OnlineRLContext()
    ctx.env_step, ctx.train_iter = 10, 1
    logger.writer.add_scalar("train/loss", 1.0, 10)
    assert len(_tensorboard_threads()) == before + 1

    def full(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(EventFileWriter, "flush", full)
    with pytest.raises(OSError, match="No space left"):
        logger.on_finish(ctx)
    assert len(_tensorboard_threads()) == before and logger._writer is None
