"""``baton plot RUN_DIR... [-o out.png] [--x env_step|wall_time_s] [--label NAME]``: evaluation curves.

Reads each run's ``progress.csv`` (``middleware.progress_csv``) and draws ``eval/episode_return_mean``
against env steps and against wall time (two panels; ``--x`` draws one). Runs of one config with several
seeds form a group: directories whose names agree up to a ``_seed<N>`` (or ``_seed<N>_<n>``) suffix
(``cartpole_dqn_seed0``, ``cartpole_dqn_seed1``, ``cartpole_dqn_seed0_2``), or that were given the same
``--label``. A group of several runs is drawn as the interquartile mean (IQM) of its runs with a band for its
95% stratified-bootstrap confidence interval (``commands.iqm``, the method of ``baton report``), over the x
range that every run covers (each run is interpolated linearly onto a common grid there), and each run as a
thin line over its own whole range: runs that stop at ``env.stop_value`` end at different x, and the IQM
holds no value a run did not log. The legend gives the number of seeds.
When the runs' ``config.json`` agree on ``env.stop_value``, it is drawn as a dashed line.

A directory without ``progress.csv`` is searched one level down, so ``baton plot runs/`` plots every run
under ``runs/``. matplotlib is imported only here (``pip install -e ".[plot]"``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engine.config import CONFIG_FILE
from middleware.progress_csv import PROGRESS_FILE, read_progress

from .run_groups import group_warnings
from .run_options import X_AXES

__all__ = ["PlotError", "find_runs", "group_runs", "mean_curve", "iqm_curve", "plot_runs",
           "plot_main"]

METRIC = "eval/episode_return_mean"
_SEED_SUFFIX = re.compile(r"_seed\d+(_\d+)?$")  # a repeated run of a seed is numbered (pipelines.run_dir)

Curve = Tuple[np.ndarray, np.ndarray]


class PlotError(ValueError):
    """Input ``baton plot`` cannot draw; the message names the path and what was looked for."""


def find_runs(paths: Sequence[str]) -> List[str]:
    """The run directories of ``paths``: each path holding ``progress.csv`` (or that file itself), else its
    subdirectories that do. Each run once: one given twice (``runs/a runs/a/``, ``runs/*`` beside ``runs``)
    would count as two seeds of its group, pulling the IQM and narrowing the interval toward its score.

    Raises:
        PlotError: a path that holds no run at either level.
    """
    runs = _found_runs(paths)
    seen: set = set()
    unique = []
    for run in runs:
        key = os.path.realpath(run)
        if key not in seen:
            seen.add(key)
            unique.append(run)
    return unique


def _found_runs(paths: Sequence[str]) -> List[str]:
    """``find_runs`` before repeats are dropped."""
    runs: List[str] = []
    for path in paths:
        if os.path.basename(path) == PROGRESS_FILE and os.path.isfile(path):  # the file itself was given
            path = os.path.dirname(path) or "."
        if os.path.isfile(os.path.join(path, PROGRESS_FILE)):
            runs.append(path)
            continue
        if not os.path.exists(path):
            raise PlotError(f"{path}: no such directory (looked for the run's {PROGRESS_FILE} there)")
        children = sorted(os.path.join(path, name) for name in os.listdir(path)) if os.path.isdir(path) else []
        found = [child for child in children if os.path.isfile(os.path.join(child, PROGRESS_FILE))]
        if not found:
            raise PlotError(f"{path}: no run there: looked for {os.path.join(path, PROGRESS_FILE)} and "
                            f"{os.path.join(path, '*', PROGRESS_FILE)} (a run writes it when log.csv is on)")
        runs.extend(found)
    return runs


def group_runs(run_dirs: Sequence[str], labels: Optional[Sequence[str]] = None) -> "OrderedDict[str, List[str]]":
    """Runs by label, in first-seen order: the directory name less a ``_seed<N>`` suffix, or ``labels``
    (one for all runs, or one per run).

    Raises:
        PlotError: when the number of labels is neither 1 nor the number of runs.
    """
    if labels and len(labels) not in (1, len(run_dirs)):
        raise PlotError(f"{len(labels)} --label values for {len(run_dirs)} runs: give one label for all runs, or "
                        f"one per run in the order of the run directories")
    groups: "OrderedDict[str, List[str]]" = OrderedDict()
    for i, run in enumerate(run_dirs):
        if labels:
            label = labels[0] if len(labels) == 1 else labels[i]
        else:
            label = _SEED_SUFFIX.sub("", os.path.basename(os.path.abspath(run)))
        groups.setdefault(label, []).append(run)
    return groups


def mean_curve(curves: Sequence[Curve], points: int = 200) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                             np.ndarray]]:
    """``(grid, mean, min, max)`` of ``curves`` (``(x, y)``, x increasing) interpolated onto ``points``
    evenly spaced x over the range all curves cover; None when they share no range.

    Examples:
        >>> grid, mean, lo, hi = mean_curve([(np.array([0., 10.]), np.array([0., 10.])),
        ...                                  (np.array([0., 20.]), np.array([10., 30.]))], points=3)
        >>> grid.tolist(), mean.tolist(), lo.tolist(), hi.tolist()
        ([0.0, 5.0, 10.0], [5.0, 10.0, 15.0], [0.0, 5.0, 10.0], [10.0, 15.0, 20.0])
    """
    common = _on_common_grid(curves, points)
    if common is None:
        return None
    grid, ys = common
    return grid, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def iqm_curve(curves: Sequence[Curve], points: int = 200, confidence: float = 0.95, reps: int = 2000
              ) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """``(grid, iqm, ci_low, ci_high)`` of ``curves`` on the grid of ``mean_curve``: at each point the
    interquartile mean of the runs and its stratified-bootstrap interval (``commands.iqm.iqm_with_ci``, the
    same replicates for every point, seeded); None when the curves share no range.

    Examples:
        >>> grid, mid, lo, hi = iqm_curve([(np.array([0., 10.]), np.array([0., 10.])),
        ...                                (np.array([0., 10.]), np.array([2., 12.])),
        ...                                (np.array([0., 10.]), np.array([4., 14.])),
        ...                                (np.array([0., 10.]), np.array([90., 90.]))], points=2)
        >>> mid.tolist()                  # the middle two runs of four
        [3.0, 13.0]
        >>> bool((lo <= mid).all() and (mid <= hi).all())
        True
    """
    from .iqm import iqm_with_ci

    common = _on_common_grid(curves, points)
    if common is None:
        return None
    grid, ys = common
    estimate = iqm_with_ci(ys[:, None, :], confidence=confidence, reps=reps, seed=0)
    return grid, estimate.iqm, estimate.low, estimate.high


def _on_common_grid(curves: Sequence[Curve], points: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(grid, ys)``: ``points`` evenly spaced x over the range every curve covers, and each curve
    interpolated linearly there (``[curves, points]``); None when they share no range."""
    start = max(float(x[0]) for x, _ in curves)
    stop = min(float(x[-1]) for x, _ in curves)
    if not stop > start:
        return None
    grid = np.linspace(start, stop, points)
    return grid, np.stack([np.interp(grid, x, y) for x, y in curves])


def _eval_curves(run: str, x_axes: Sequence[str]) -> Dict[str, Curve]:
    """The run's evaluation return against each of ``x_axes``, over the rows that logged one."""
    path = os.path.join(run, PROGRESS_FILE)
    columns = read_progress(path)
    missing = [name for name in (METRIC, *x_axes) if name not in columns]
    if missing:
        raise PlotError(f"{path} has no column {missing[0]!r} (the run logged no evaluation yet)")
    curves = {}
    for x_name in x_axes:
        x, y = columns[x_name], columns[METRIC]
        keep = np.isfinite(x) & np.isfinite(y)
        if not keep.any():
            raise PlotError(f"{path} has no {METRIC} value yet: the run logged no evaluation")
        order = np.argsort(x[keep], kind="stable")
        curves[x_name] = (x[keep][order], y[keep][order])
    return curves


def _stop_value(runs: Sequence[str]) -> Optional[float]:
    """The ``env.stop_value`` of the runs' ``config.json`` when they all have the same one (a reference
    line: where a run counts as solved), else None."""
    values = set()
    for run in runs:
        try:
            with open(os.path.join(run, CONFIG_FILE), encoding="utf-8") as f:
                values.add(json.load(f)["env"]["stop_value"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    value = values.pop() if len(values) == 1 else None
    return float(value) if isinstance(value, (int, float)) and abs(value) < 1e8 else None


def plot_runs(paths: Sequence[str], out: str = "progress.png", x_axes: Sequence[str] = tuple(X_AXES),
              labels: Optional[Sequence[str]] = None, on_warning: Optional[Callable[[str], None]] = None) -> str:
    """Draw the evaluation return of the runs under ``paths`` against each of ``x_axes`` (one panel each)
    into the image ``out``; returns ``out``. ``on_warning`` is given each line of ``commands.run_groups`` (a group
    pooling different configs, a run that has not ended), as ``baton plot`` prints them.

    Raises:
        PlotError: no run under a path, a run without evaluations, labels that do not fit.
        ImportError: matplotlib is missing (the message says how to install it).
    """
    try:
        from matplotlib.figure import Figure  # no pyplot: no backend or global figure state for a file
    except ImportError as err:
        raise ImportError('baton plot needs matplotlib: pip install -e ".[plot]" (or pip install matplotlib)') \
            from err
    groups = group_runs(find_runs(paths), labels)
    per_run = {run: _eval_curves(run, x_axes) for runs in groups.values() for run in runs}
    for label, runs in groups.items():  # once every run has a curve: a run without one is the error, alone
        for line in group_warnings(label, runs, by_name=not labels):
            if on_warning is not None:
                on_warning(line)
    stop_value = _stop_value(list(per_run))
    fig = Figure(figsize=(6.0 * len(x_axes), 4.0), layout="constrained")
    axes = fig.subplots(1, len(x_axes), squeeze=False)[0]
    for ax, x_name in zip(axes, x_axes):
        for color, label in enumerate(groups):
            _draw_group(ax, f"C{color}", label, [per_run[run][x_name] for run in groups[label]])
        if stop_value is not None:
            ax.axhline(stop_value, color="gray", linestyle="--", linewidth=1, label=f"env.stop_value {stop_value:g}")
        ax.set_xlabel(X_AXES[x_name])
        ax.set_ylabel("evaluation return (mean over episodes)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="best")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    return out


def _draw_group(ax: Any, color: str, label: str, curves: List[Curve]) -> None:
    """One run as a line; several as thin lines under their IQM and its 95% bootstrap CI band."""
    if len(curves) == 1:
        ax.plot(*curves[0], color=color, marker=".", label=f"{label} (1 seed)")
        return
    for i, (x, y) in enumerate(curves):
        ax.plot(x, y, color=color, alpha=0.35, linewidth=0.8, label=None if i else f"{label}: each run")
    summary = iqm_curve(curves)
    if summary is None:  # the runs share no x range: the thin lines are all there is
        return
    grid, mid, lo, hi = summary
    ax.plot(grid, mid, color=color, linewidth=2, label=f"{label}: IQM of {len(curves)} seeds")
    ax.fill_between(grid, lo, hi, color=color, alpha=0.2, linewidth=0, label=f"{label}: 95% bootstrap CI")


def plot_main(args: argparse.Namespace) -> int:
    """``baton plot``: 0 when the image was written, 2 (one line on stderr) when it could not be."""
    try:
        out = plot_runs(args.runs, args.output, (args.x,) if args.x else tuple(X_AXES), args.label,
                        on_warning=lambda line: print(f"baton plot: warning: {line}", file=sys.stderr))
    except (ValueError, ImportError, OSError) as err:  # PlotError, an unreadable CSV, a path not writable
        print(f"baton plot: {err}", file=sys.stderr)
        return 2
    print(f"baton plot: wrote {out}")
    return 0
