"""Under DDP the logged training return is the mean over every rank's episodes (the summed counters), not
rank 0's alone (issue 24 item 4)."""
from __future__ import annotations

import csv

import pytest

from engine.context import OnlineRLContext
from middleware.logger import OnlineLogger


def test_the_logged_return_is_every_ranks_mean(tmp_path, monkeypatch):
    monkeypatch.setattr("middleware.logger.get_world_size", lambda: 2)
    log = OnlineLogger(str(tmp_path / "log"), train_show_freq=1, tensorboard=False, csv_path=str(tmp_path / "p.csv"))
    ctx = OnlineRLContext()
    # iteration 1 on rank 0: its own episode (return 10); the counters hold the agreed start (none) plus it
    ctx.env_episode, ctx.episode_return_total, ctx.episode_returns = 1, 10.0, [10.0]
    ctx.train_iter, ctx.env_step = 1, 64
    log(ctx)
    # iteration 2: the sum brought rank 1's episode of iteration 1 (return 30); rank 0 adds one of 20
    ctx.env_episode, ctx.episode_return_total, ctx.episode_returns = 3, 60.0, [20.0]
    ctx.train_iter, ctx.env_step = 2, 128
    log(ctx)
    log.on_finish(ctx)
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    returns = [float(r["collect/episode_return"]) for r in rows if r.get("collect/episode_return")]
    # one row (iteration 2): the mean of 10, rank 1's 30 and 20; rank 0's own episodes alone would give 15
    assert returns == [pytest.approx(20.0)]


def test_the_logged_collection_time_is_every_ranks(tmp_path, monkeypatch):
    """The summed ``collect_time_total`` divided by the ranks: rank 0's own 1 s and rank 1's 3 s give 2 s
    per iteration and 64 global env steps over 2 s of collecting, not rank 0's 1 s alone."""
    monkeypatch.setattr("middleware.logger.get_world_size", lambda: 2)
    log = OnlineLogger(str(tmp_path / "log"), train_show_freq=1, tensorboard=False, csv_path=str(tmp_path / "p.csv"))
    ctx = OnlineRLContext()
    ctx.train_iter, ctx.env_step, ctx.collect_time_total, ctx.total_step = 1, 32, 1.0, 0
    log(ctx)
    ctx.train_iter, ctx.env_step, ctx.collect_time_total, ctx.total_step = 2, 96, 5.0, 1  # + rank 1's 3 s and 32 steps
    log(ctx)
    log.on_finish(ctx)
    rows = [r for r in csv.DictReader(open(tmp_path / "p.csv")) if r.get("collect/duration_s")]
    assert [float(r["collect/duration_s"]) for r in rows] == [pytest.approx(2.0)]
    assert [float(r["speed/collect_env_steps_per_s"]) for r in rows] == [pytest.approx(32.0)]
