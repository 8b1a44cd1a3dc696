"""baton report and the IQM of baton plot: the interquartile mean over seeds with its stratified-bootstrap
confidence interval, the number of seeds shown; bad input is one line and exit 2."""
from __future__ import annotations

import doctest
import json
import os
import re

import numpy as np
import pytest

import commands.iqm
import commands.report
from middleware.progress_csv import ProgressCSV
from commands.cli import main
from commands.iqm import iqm, iqm_with_ci
from commands.plot import iqm_curve
from commands.report import report_runs


def _run(path, returns):
    """A run directory as the logger leaves it (progress.csv with evaluation rows)."""
    path.mkdir(parents=True)
    out = ProgressCSV(str(path / "progress.csv"))
    for i, value in enumerate(returns, start=1):
        out.write({"env_step": 100 * i, "train_iter": i, "wall_time_s": 0.5 * i, "eval/episode_return_mean": value})
    out.close()
    return str(path)


def test_iqm_cuts_a_quarter_from_each_end_as_scipy_does():
    scores = np.random.default_rng(0).normal(size=(9, 5))
    expected = np.array([np.sort(col)[2:7].mean() for col in scores.T])  # int(0.25 * 9) = 2 cut from each end
    np.testing.assert_allclose(iqm(scores), expected)
    stats = pytest.importorskip("scipy.stats")
    np.testing.assert_allclose(iqm(scores), stats.trim_mean(scores, 0.25, axis=0))
    assert doctest.testmod(commands.iqm).failed == 0 and doctest.testmod(commands.report).failed == 0


def test_bootstrap_is_stratified_by_task_and_seeded():
    # every run of task 0 scores 0, every run of task 1 scores 100: drawing runs within each task, every
    # replicate pools three 0s and three 100s (IQM 50); drawing from the pool would move it
    scores = np.array([[0.0, 100.0]] * 3)
    est = iqm_with_ci(scores, reps=500)
    assert (float(est.iqm), float(est.low), float(est.high), est.runs) == (50.0, 50.0, 50.0, 3)
    noisy = np.random.default_rng(1).normal(10.0, 2.0, size=20)
    a, b = iqm_with_ci(noisy, reps=500, seed=3), iqm_with_ci(noisy, reps=500, seed=3)
    assert a.low == b.low and a.high == b.high and a.low < a.iqm < a.high
    assert iqm_with_ci(noisy, confidence=0.5, reps=500).high - iqm_with_ci(noisy, confidence=0.5, reps=500).low < \
        a.high - a.low  # a narrower coverage, a narrower interval


def test_report_groups_seeds_and_shows_their_number(tmp_path, capsys):
    finals = [10.0, 20.0, 30.0, 1000.0]
    for seed, final in enumerate(finals):
        _run(tmp_path / "runs" / f"cartpole_dqn_seed{seed}", [0.0, final + 5.0, final])
    _run(tmp_path / "runs" / "cartpole_ppo_seed0", [1.0, 7.0])
    assert main(["report", str(tmp_path / "runs"), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["group", "seeds", "IQM", "(final)"]
    dqn = next(line for line in out if line.startswith("cartpole_dqn")).split()
    assert dqn[1:3] == ["4", "25.0"]  # the middle two of four seeds: 20 and 30
    ppo = next(line for line in out if line.startswith("cartpole_ppo")).split()
    assert ppo[1:4] == ["1", "7.0", "-"]  # one seed: its score, no interval
    with open(tmp_path / "r.json") as f:
        rows = {row["label"]: row for row in json.load(f)}
    assert rows["cartpole_dqn"]["scores"] == finals and rows["cartpole_dqn"]["ci_low"] <= 25.0 <= rows["cartpole_dqn"]["ci_high"]
    best = report_runs([str(tmp_path / "runs")], score="best")
    assert best[0]["iqm"] == 30.0  # the best of each run: 15, 25, 35, 1005


def test_a_run_given_twice_counts_once(tmp_path):
    """The same directory named twice (or under its parent too) is one seed, not two of the same score."""
    first = _run(tmp_path / "runs" / "cartpole_dqn_seed0", [0.0, 100.0])
    second = _run(tmp_path / "runs" / "cartpole_dqn_seed1", [0.0, 10.0])
    rows = report_runs([first, first + "/", str(tmp_path / "runs"), second])
    assert [row["seeds"] for row in rows] == [2] and rows[0]["scores"] == [100.0, 10.0]
    assert rows[0]["iqm"] == 55.0


def _config(run, seed, policy="dqn", lr=1e-3, stop_reason="max_env_step", env_step=1000):
    """The run's config.json and summary.json as a finished run leaves them."""
    config = {"exp_name": run, "seed": seed, "log": {"csv": True}, "env": {"env_id": "CartPole-v1"},
              "policy": {"type": policy, "learn": {"learning_rate": lr}}}
    summary = {"stop_reason": stop_reason, "env_step": env_step}
    for name, content in (("config.json", config), ("summary.json", summary)):
        with open(f"{run}/{name}", "w") as f:
            json.dump(content, f)


def test_report_warns_of_a_group_that_pools_other_configs_a_seed_twice_or_an_unfinished_run(tmp_path, capsys):
    """A group by name alone may pool what is not seeds of one config: each such group is one warning line."""
    import commands.run_groups
    from engine.context import StopReason
    from middleware.summary import SUMMARY_FILE

    assert commands.run_groups.SUMMARY_FILE == SUMMARY_FILE
    assert set(commands.run_groups._ENDED) <= {reason.value for reason in StopReason}
    same = [_run(tmp_path / "same" / f"cartpole_seed{seed}", [1.0, 2.0]) for seed in range(2)]
    for seed, run in enumerate(same):
        _config(run, seed)
    assert main(["report", str(tmp_path / "same")]) == 0
    assert "warning" not in capsys.readouterr().err  # seeds of one config: nothing to say
    with open(f"{same[1]}/config.json") as f:  # one seed on another machine: its paths, devices, processes
        moved = json.load(f)
    moved["policy"].update(cuda=True, compile="cudagraph", device={"learn": "cuda:0"})
    moved.update(env=dict(moved["env"], manager={"type": "async"}), ddp={"backend": "nccl"},
                 dataset={"root": "/data/elsewhere"})
    with open(f"{same[1]}/config.json", "w") as f:
        json.dump(moved, f)
    assert main(["report", str(tmp_path / "same")]) == 0
    assert "warning" not in capsys.readouterr().err  # where and how fast it ran: still seeds of one config
    mixed = [_run(tmp_path / "a" / "cartpole_seed0", [1.0]), _run(tmp_path / "b" / "cartpole_seed1", [2.0]),
             _run(tmp_path / "b" / "cartpole_seed0_2", [3.0])]
    _config(mixed[0], 0)
    _config(mixed[1], 1, policy="ppo", lr=3e-4)
    _config(mixed[2], 0, stop_reason="interrupted")
    assert main(["report", *mixed]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(re.search(r"group 'cartpole' pools runs of different configs: .*cartpole_seed0 and .*cartpole_seed1 "
                         r"differ in policy.type 'dqn' vs 'ppo'; policy.learn.learning_rate", line) for line in err), err
    assert any(re.search(r"cartpole_seed0 and .*cartpole_seed0_2 both ran seed 0", line) for line in err), err
    assert any(re.search(r"cartpole_seed0_2 stopped with stop_reason 'interrupted'", line) for line in err), err
    longer = _run(tmp_path / "same" / "cartpole_seed2", [1.0, 2.0])
    _config(longer, 2, env_step=2000)
    assert main(["report", str(tmp_path / "same")]) == 0
    assert re.search(r"group 'cartpole': its runs ended at different budgets \(.*cartpole_seed0 at env_step 1000, "
                     r".*cartpole_seed2 at 2000\)", capsys.readouterr().err)
    os.remove(f"{mixed[0]}/summary.json")
    rows = report_runs(mixed, labels=["mine"])  # the user's own group: only the unfinished runs are named
    assert len(rows[0]["warnings"]) == 2 and "still running, or was killed" in rows[0]["warnings"][0]


def test_report_of_baton_eval_results(tmp_path, capsys):
    for seed, mean in enumerate([100.0, 200.0]):
        run = _run(tmp_path / f"a_seed{seed}", [1.0])
        with open(f"{run}/eval.json", "w") as f:
            json.dump({"mean": mean}, f)
    [row] = report_runs([str(tmp_path / "a_seed0"), str(tmp_path / "a_seed1")], score="eval")
    assert row["label"] == "a" and row["iqm"] == 150.0 and row["seeds"] == 2
    _run(tmp_path / "a_seed2", [1.0])  # no eval.json
    assert main(["report", str(tmp_path), "--score", "eval"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a_seed2" in err and "baton eval" in err


def test_report_without_runs_is_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such directory" in err


def test_plot_draws_the_iqm_and_its_interval(tmp_path):
    curves = [(np.array([0.0, 10.0]), np.array([v, v + 10.0])) for v in (0.0, 2.0, 4.0, 90.0)]
    grid, mid, lo, hi = iqm_curve(curves, points=3)
    assert mid.tolist() == [3.0, 8.0, 13.0] and (lo <= mid).all() and (mid <= hi).all() and (hi > lo).any()
    for seed in range(3):
        _run(tmp_path / f"x_seed{seed}", [seed, 10.0 + seed, 20.0])
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "p.png")]) == 0
