"""The logged scalars of a training run (rank 0 only under DDP): tensorboardX and ``progress.csv``."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

from engine.context import OnlineRLContext
from engine.distributed import get_world_size
from engine.params import Params, param, section
from engine.profile import StageProfile
from engine.registry import CONFIG_SECTIONS

import numpy as np

from .progress_csv import ProgressCSV
from .summary import RunClock
from .trackers import MlflowParams, WandbParams

__all__ = ["LogParams", "online_logger", "OnlineLogger"]


@dataclass
class LogParams(Params):
    """The config's ``log`` section: where a run's scalars go (docs/logging.md, docs/trackers.md)."""

    progress: bool = param(True)
    """A tqdm progress bar on rank 0, when the output is a terminal."""
    tensorboard: bool = param(True)
    """tensorboardX scalars under ``<exp_name>/log``."""
    csv: bool = param(True)
    """The same scalars as rows of ``<exp_name>/progress.csv``."""
    print_freq: int = param(0, rule="not_negative")
    """>0: log a line every N train iterations."""
    profile: bool = param(False)
    """Each stage's share of the iteration time: a table at the end, ``summary.json`` and TensorBoard."""
    wandb: WandbParams = section(WandbParams)
    """Weights & Biases (``middleware.trackers.WandbParams``)."""
    mlflow: MlflowParams = section(MlflowParams)
    """MLflow (``middleware.trackers.MlflowParams``)."""

    def trackers(self) -> Dict[str, Params]:
        """Each experiment tracker's section by its name (``middleware.trackers.TRACKERS``)."""
        return {"wandb": self.wandb, "mlflow": self.mlflow}


CONFIG_SECTIONS.register("log", LogParams)

logger = logging.getLogger(__name__)


class OnlineLogger:
    """Log scalars against ``ctx.env_step`` to a tensorboardX event file in ``log_dir`` and/or as rows of
    ``csv_path`` (``middleware.progress_csv``; docs/logging.md lists the tags):

    - ``collect/episode_return`` (mean of training episodes finished since the last write; under DDP of
      every rank's, from the summed ``env_episode`` and ``episode_return_total``),
      ``collect/eps``, ``eval/episode_return_mean``/``_std`` (at every evaluation; ``eval/success_rate`` where the
      envs say whether an episode met its goal); where each env holds several agents, also each one's:
      ``eval/agent<i>_return_mean`` and ``collect/agent<i>_episode_return`` (this rank's episodes), ``i`` the
      agent's place in the env's agent order,
    - ``train/loss``, ``train/q_value`` and the policy's other scalar outputs,
    - ``speed/env_steps_per_s``, ``speed/train_iter_per_s`` over the interval since the last write,
    - ``collect/duration_s`` (seconds a rank spent collecting per iteration) and
      ``speed/collect_env_steps_per_s`` (env steps per second of collecting), over that interval; under DDP
      every rank's, from the summed ``collect_time_total`` and ``env_step``,
    - ``profile/<stage>_share``: each stage's share of the loop's time over that interval, with a
      ``profile`` (the ``engine.profile.StageProfile`` the loop fills; ``log.profile``).

    ``trackers`` (``middleware.trackers``: W&B, MLflow) get every scalar of the same write, under the same tags.

    Train and speed scalars are written every ``train_show_freq`` train iterations (and at least every 50
    iterations of the loop) and at the end of the run, evaluation scalars whenever an evaluation happened.
    The scalars of one iteration go to both sinks from one dict, so the CSV holds exactly what TensorBoard
    shows: one row per iteration that logged anything, with ``env_step``, ``train_iter``, ``wall_time_s``
    and ``elapsed_s`` when the row was written (the run's clocks, ``middleware.summary.RunClock``: the
    pipeline gives the logger its clock, ``logger.clock = ...``; without one, the logger's own trains from its
    first iteration, on from a resumed ``progress.csv``'s last kept row).
    ``print_freq > 0`` also logs a line through ``logging`` every that many train iterations.

    Args:
        log_dir: the tensorboardX directory.
        tensorboard: write the event file (tensorboardX is imported only then).
        csv_path: write ``progress.csv`` there; None: no CSV.
        profile: the run's ``StageProfile``, read at each interval; None: no ``profile/*`` scalars.
        trackers: more sinks of each write (``log_scalars(scalars, env_step)``): experiment trackers.
    """

    def __init__(self, log_dir: str, train_show_freq: int = 50, print_freq: int = 0, *, tensorboard: bool = True,
                 csv_path: Optional[str] = None, profile: Optional[StageProfile] = None,
                 trackers: Sequence[Any] = ()) -> None:
        self.profile = profile
        self._trackers = list(trackers)
        self._profile_last: Dict[str, float] = {}  # the profile's totals at the last interval
        self._log_dir = log_dir
        self._show_freq = max(1, int(train_show_freq))
        self._print_freq = int(print_freq)
        self._tensorboard = tensorboard
        self._csv_path = csv_path
        self._csv: Optional[ProgressCSV] = ProgressCSV(csv_path) if csv_path else None
        self._writer: Optional[Any] = None
        self._returns: list = []
        self._agent_returns: list = []  # several agents per env: each episode's returns per agent
        self._ranks = get_world_size()
        self._episodes_at_write = (0, 0.0)  # (env_episode, episode_return_total) at the last write
        self._collect_at_write = (0.0, 0, 0)  # (collect_time_total, env_step, loop step) at the last write
        self._step_outputs: Any = (None, None)  # (eps, train_output) of the latest iteration, for on_finish
        self._logged_eval_iter = -1  # ctx.last_eval_iter of the evaluation logged last
        self._clock = RunClock()
        self._resumed_wall_s: Optional[float] = None  # the last kept row's wall_time_s, after resume()
        self._last = None  # (time, env_step, train_iter, loop step) at the last write
        self._last_print_iter = 0

    def resume(self, env_step: int, last_eval_iter: int) -> None:
        """Continue a run restored from a checkpoint taken at ``env_step``: the CSV keeps its rows up to
        there and its ``wall_time_s`` goes on from them, and the checkpoint's evaluation (already logged) is
        not logged again."""
        self._logged_eval_iter = last_eval_iter
        if self._csv_path:
            self._csv = ProgressCSV(self._csv_path, resume_env_step=env_step)
            self._resumed_wall_s = self._csv.resumed_wall_time_s
            self._clock.carry(self._resumed_wall_s)

    @property
    def clock(self) -> RunClock:
        """The run's clocks that the rows' ``wall_time_s`` and ``elapsed_s`` read."""
        return self._clock

    @clock.setter
    def clock(self, clock: RunClock) -> None:
        """Share the run's clock (the summary starts and stops it). A resumed run's clock goes on from the
        later of the checkpoint's record and the last kept row, so the column never steps back."""
        clock.carry(self._resumed_wall_s)
        self._clock = clock

    @property
    def writer(self) -> Any:
        if self._writer is None:
            from tensorboardX import SummaryWriter  # deferred: a second of imports, only when logging

            os.makedirs(self._log_dir, exist_ok=True)
            self._writer = SummaryWriter(self._log_dir)
        return self._writer

    def __call__(self, ctx: OnlineRLContext) -> None:
        now = time.perf_counter()
        if self._last is None:
            self._clock.start()  # its own clock only: a shared one started with the run
            self._last = (now, ctx.env_step, ctx.train_iter, ctx.total_step)
            own = getattr(ctx, "episode_returns", None) or []  # the counters as agreed when this iteration began
            self._episodes_at_write = (getattr(ctx, "env_episode", 0) - len(own),
                                       getattr(ctx, "episode_return_total", 0.0) - float(sum(own)))
            self._collect_at_write = (getattr(ctx, "collect_time_total", 0.0), ctx.env_step, ctx.total_step)
        if ctx.episode_returns:
            self._returns.extend(ctx.episode_returns)
        if getattr(ctx, "agent_episode_returns", None):
            self._agent_returns.extend(ctx.agent_episode_returns)
        # per-step fields are gone by on_finish (renewed): keep references to this iteration's
        self._step_outputs = (ctx.collect_kwargs.get("eps"), ctx.train_output)
        scalars = self._evaluation_scalars(ctx)
        last_time, last_env, last_iter, last_loop = self._last
        if ctx.train_iter - last_iter >= self._show_freq or ctx.total_step - last_loop >= 50:
            scalars.update(self._interval_scalars(ctx, now))
        self._write(ctx.env_step, ctx.train_iter, scalars)
        if self._print_freq and ctx.train_iter - self._last_print_iter >= self._print_freq:
            self._last_print_iter = ctx.train_iter
            logger.info("env_step=%d train_iter=%d eval=%.2f train=%s", ctx.env_step, ctx.train_iter,
                        ctx.eval_value, ctx.train_output)

    def _evaluation_scalars(self, ctx: OnlineRLContext) -> Dict[str, float]:
        """A new evaluation's scalars, for this iteration's row; a background evaluation's result (of weights
        some iterations old) gets a row of its own, at the env_step, train_iter and wall time of its snapshot."""
        output = ctx.eval_output
        if output is None or ctx.last_eval_iter == self._logged_eval_iter:
            return {}
        self._logged_eval_iter = ctx.last_eval_iter
        scalars = {"eval/episode_return_mean": float(output["mean"]), "eval/episode_return_std": float(output["std"])}
        if "success_rate" in output:  # envs that say whether an episode met its goal (info["is_success"])
            scalars["eval/success_rate"] = float(output["success_rate"])
        for i, mean in enumerate(output.get("agent_means", ())):  # several agents per env, in the env's order
            scalars[f"eval/agent{i}_return_mean"] = float(mean)
        # at the counters of the weights it evaluated: a background result is some iterations old, and under
        # DDP ctx.env_step mid-iteration holds only this rank's share of the iteration's steps (the sum
        # arrives at the end), while an evaluation reads the agreed count at the start
        at = (output.get("env_step", ctx.env_step), output.get("train_iter", ctx.train_iter))
        if at != (ctx.env_step, ctx.train_iter):
            self._write(at[0], at[1], scalars, lag_s=output.get("lag_s", 0.0))
            return {}
        return scalars

    def _interval_scalars(self, ctx: OnlineRLContext, now: float) -> Dict[str, float]:
        last_time, last_env, last_iter, _ = self._last
        elapsed = max(now - last_time, 1e-9)
        scalars = {"speed/env_steps_per_s": (ctx.env_step - last_env) / elapsed,
                   "speed/train_iter_per_s": (ctx.train_iter - last_iter) / elapsed}
        if self._ranks > 1 and hasattr(ctx, "episode_return_total"):  # every rank's episodes: the summed counters
            episodes, total = ctx.env_episode, ctx.episode_return_total
            last = self._episodes_at_write
            if episodes > last[0]:
                scalars["collect/episode_return"] = (total - last[1]) / (episodes - last[0])
            self._episodes_at_write = (episodes, total)
            self._returns = []
        elif self._returns:
            scalars["collect/episode_return"] = float(np.mean(self._returns))
            self._returns = []
        if self._agent_returns:  # this rank's episodes, each agent's mean
            for i, mean in enumerate(np.mean(self._agent_returns, axis=0)):
                scalars[f"collect/agent{i}_episode_return"] = float(mean)
            self._agent_returns = []
        scalars.update(self._collect_scalars(ctx))
        eps, train_output = self._step_outputs
        if eps is not None:
            scalars["collect/eps"] = float(eps)
        for key, value in (train_output or {}).items():
            if isinstance(value, float):
                scalars[f"train/{key}"] = value
        if self.profile is not None:  # this interval's shares: a stage that slows down later shows it
            totals = self.profile.totals()
            for name, share in self.profile.shares(since=self._profile_last).items():
                scalars[f"profile/{name}_share"] = share
            self._profile_last = totals
        self._last = (now, ctx.env_step, ctx.train_iter, ctx.total_step)
        return scalars

    def _collect_scalars(self, ctx: OnlineRLContext) -> Dict[str, float]:
        """How long collection took since the last write: the summed seconds of every rank (under DDP)
        divided by the ranks, so both figures describe the group, not rank 0 alone."""
        if not hasattr(ctx, "collect_time_total"):
            return {}
        total, env_step, loop_step = self._collect_at_write
        seconds = (ctx.collect_time_total - total) / self._ranks
        iterations = ctx.total_step - loop_step
        self._collect_at_write = (ctx.collect_time_total, ctx.env_step, ctx.total_step)
        if seconds <= 0 or iterations <= 0:
            return {}
        return {"collect/duration_s": seconds / iterations,
                "speed/collect_env_steps_per_s": (ctx.env_step - env_step) / seconds}

    def _write(self, env_step: int, train_iter: int, scalars: Dict[str, float], lag_s: float = 0.0) -> None:
        """One iteration's scalars to TensorBoard and as one CSV row, whose clocks read ``lag_s`` ago."""
        if not scalars:
            return
        if self._tensorboard:
            _tensorboard_row(self.writer, scalars, env_step)
        for tracker in self._trackers:
            tracker.log_scalars(scalars, env_step)
        if self._csv is not None:
            self._csv.write({"env_step": env_step, "train_iter": train_iter,
                             "wall_time_s": self._clock.wall_time_s() - lag_s,
                             "elapsed_s": self._clock.elapsed_s() - lag_s, **scalars})

    def on_finish(self, ctx: OnlineRLContext) -> None:
        # the last evaluation (in an iteration an error cut short) and the last, partial interval
        now = time.perf_counter()
        scalars = self._evaluation_scalars(ctx)
        if self._last is not None and ctx.env_step > self._last[1]:
            scalars.update(self._interval_scalars(ctx, now))
        try:
            self._write(ctx.env_step, ctx.train_iter, scalars)
        finally:  # a write a full disk refused still ends the writer's thread and closes the CSV
            writer, self._writer = self._writer, None
            try:
                if writer is not None:
                    _close_writer(writer)
            finally:
                if self._csv is not None:
                    self._csv.close()


def _tensorboard_row(writer: Any, scalars: Dict[str, float], step: int) -> None:
    """A row's scalars as one TensorBoard event. ``add_scalar`` writes an event per scalar: 38 us each on the
    development machine, 0.76 ms for a row of 20, which at 8 env steps and 8 updates an iteration was the loop's
    largest host cost after the env and the acting forward (BENCHMARKS.md, "The host's time around the update"). One
    summary of several values, as ``tf.summary.merge`` writes them, reads the same in TensorBoard (each value
    ``tensorboardX.summary.scalar``'s, its tag cleaned as ``add_scalar`` cleans it)."""
    from tensorboardX.proto.summary_pb2 import Summary
    from tensorboardX.summary import scalar

    values = [value for tag, number in scalars.items() for value in scalar(tag, number).value]
    # as add_scalar does: the file writer, opened again where the writer was closed (close() drops it)
    file_writer = writer._get_file_writer() if hasattr(writer, "_get_file_writer") else writer.file_writer
    file_writer.add_summary(Summary(value=values), step)


def _close_writer(writer: Any) -> None:
    """Close a tensorboardX ``SummaryWriter`` so that its writer threads end whatever its flush does.

    tensorboardX stops each event file's thread only after a flush that succeeded; on a full disk the flush
    raises, the thread is left reading its queue, and when the queue is collected the thread dies with a
    traceback ("OSError: handle is closed", after every trial a full disk stopped in ``baton tune --jobs``).
    The flush's error is still raised: the run says what failed."""
    try:
        writer.close()
    finally:
        for file_writer in list((getattr(writer, "all_writers", None) or {}).values()):
            events = getattr(file_writer, "event_writer", None)
            worker = getattr(events, "_worker", None)  # tensorboardX's own, left running by the failed close
            if worker is not None and worker.is_alive():
                worker.stop()
            if events is not None:
                events._closed = True


def online_logger(log_dir: str, train_show_freq: int = 50, print_freq: int = 0, *, tensorboard: bool = True,
                  csv_path: Optional[str] = None, profile: Optional[StageProfile] = None,
                  trackers: Sequence[Any] = ()) -> OnlineLogger:
    return OnlineLogger(log_dir, train_show_freq, print_freq, tensorboard=tensorboard, csv_path=csv_path,
                        profile=profile, trackers=trackers)
