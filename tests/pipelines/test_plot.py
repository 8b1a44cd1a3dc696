"""baton plot: evaluation curves from progress.csv, seeds grouped; bad input is one line and exit 2."""
from __future__ import annotations

import doctest
import json
import sys

import numpy as np
import pytest

import commands.plot
from middleware.progress_csv import ProgressCSV
from commands.cli import main
from commands.plot import PlotError, find_runs, group_runs, mean_curve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _fake_run(path, returns, steps_per_eval=100, seconds_per_eval=0.5, stop_value=195.0):
    """A run directory as the logger leaves it: interval rows between evaluation rows, and config.json."""
    path.mkdir(parents=True)
    out = ProgressCSV(str(path / "progress.csv"))
    for i, value in enumerate(returns, start=1):
        step, wall = i * steps_per_eval, i * seconds_per_eval
        out.write({"env_step": step - 50, "train_iter": i, "wall_time_s": wall - 0.1, "train/loss": 1.0 / i})
        out.write({"env_step": step, "train_iter": i, "wall_time_s": wall, "eval/episode_return_mean": value,
                   "eval/episode_return_std": 1.0})
    out.close()
    (path / "config.json").write_text(json.dumps({"env": {"stop_value": stop_value}}))
    return str(path)


def test_plot_writes_a_png_for_two_seeds(tmp_path, capsys):
    seed0 = _fake_run(tmp_path / "cartpole_dqn_seed0", [10.0, 50.0, 200.0])
    seed1 = _fake_run(tmp_path / "cartpole_dqn_seed1", [20.0, 30.0, 90.0, 210.0], seconds_per_eval=0.7)
    out = tmp_path / "img" / "curves.png"
    assert main(["plot", seed0, seed1, "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert str(out) in capsys.readouterr().out


def test_plot_one_panel_per_x_and_a_parent_directory_of_runs(tmp_path):
    import matplotlib.image
    _fake_run(tmp_path / "runs" / "a_seed0", [1.0, 2.0])
    _fake_run(tmp_path / "runs" / "a_seed1", [2.0, 3.0])
    both, one = tmp_path / "both.png", tmp_path / "one.png"
    assert main(["plot", str(tmp_path / "runs"), "-o", str(both)]) == 0
    assert main(["plot", str(tmp_path / "runs"), "--x", "wall_time_s", "-o", str(one)]) == 0
    assert matplotlib.image.imread(str(both)).shape[1] == 2 * matplotlib.image.imread(str(one)).shape[1]


def test_plot_groups_runs_by_name_less_seed_or_by_label(tmp_path):
    runs = ["x/cartpole_dqn_seed0", "x/cartpole_dqn_seed12/", "x/cartpole_ppo_seed0", "x/seedless",
            "x/cartpole_dqn_seed0_2"]
    assert group_runs(runs) == {"cartpole_dqn": [runs[0], runs[1], runs[4]], "cartpole_ppo": [runs[2]],
                                "seedless": [runs[3]]}
    assert group_runs(runs[:2], ["mine"]) == {"mine": runs[:2]}
    assert group_runs(runs[:2], ["a", "b"]) == {"a": [runs[0]], "b": [runs[1]]}
    with pytest.raises(PlotError, match="2 --label values for 3 runs"):
        group_runs(runs[:3], ["a", "b"])


def test_plot_mean_is_over_the_range_every_run_covers():
    grid, mean, lo, hi = mean_curve([(np.array([0.0, 10.0]), np.array([0.0, 10.0])),
                                     (np.array([5.0, 20.0, 40.0]), np.array([5.0, 35.0, 0.0]))], points=3)
    assert grid.tolist() == [5.0, 7.5, 10.0]  # from the latest start to the earliest end
    assert mean.tolist() == [5.0, 8.75, 12.5] and lo.tolist() == [5.0, 7.5, 10.0] and hi.tolist() == [5.0, 10.0, 15.0]
    assert mean_curve([(np.array([0.0, 1.0]), np.zeros(2)), (np.array([2.0, 3.0]), np.zeros(2))]) is None
    assert doctest.testmod(commands.plot).failed == 0


@pytest.mark.parametrize("make", ["empty", "missing", "no_eval"])
def test_plot_without_a_run_is_one_line_and_exit_2(tmp_path, capsys, make):
    target = tmp_path / "nothing"
    if make == "empty":
        target.mkdir()
    elif make == "no_eval":
        target.mkdir()
        out = ProgressCSV(str(target / "progress.csv"))
        out.write({"env_step": 64, "train_iter": 8, "wall_time_s": 0.1, "train/loss": 1.0})
        out.close()
    assert main(["plot", str(target), "-o", str(tmp_path / "out.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(target) in err and "progress.csv" in err
    assert not (tmp_path / "out.png").exists()


def test_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    run = _fake_run(tmp_path / "r_seed0", [1.0, 2.0])
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    assert main(["plot", run, "-o", str(tmp_path / "out.png")]) == 2
    assert 'pip install -e ".[plot]"' in capsys.readouterr().err
    with pytest.raises(PlotError, match="no such directory"):
        find_runs([str(tmp_path / "absent")])
    assert find_runs([str(tmp_path / "r_seed0" / "progress.csv")]) == [run]  # the file itself names its run
