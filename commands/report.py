"""``baton report RUN_DIR...``: one row per group of runs (a config over seeds): the interquartile mean of
the runs' scores with its 95% stratified-bootstrap confidence interval (``commands.iqm``), and the number of
seeds it rests on.

    baton report RUN_DIR... [--score final|best|eval] [--label NAME] [--confidence 0.95] [--reps 2000]
                 [--json FILE]

Runs are found and grouped as ``baton plot`` does (``commands.plot``: a directory without
``progress.csv`` is searched one level down; names that agree up to ``_seed<N>`` form a group, or
``--label``). A run's score is, by ``--score``:

- ``final`` (default): its last evaluation return in ``progress.csv`` (the mean over the evaluator's
  episodes), what the run ended with;
- ``best``: its highest evaluation return (optimistic: the maximum of noisy evaluations);
- ``eval``: the mean return of ``baton eval`` (its ``eval.json`` in the run directory): more episodes,
  fresh seeds, the checkpoint ``baton eval`` was given.

The bootstrap draws are seeded: the same runs give the same table. With one seed there is no interval
(the row shows the score, and ``seeds 1``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from engine.fileio import atomic_write_json
from middleware.progress_csv import PROGRESS_FILE, read_progress

from .iqm import iqm_with_ci
from .plot import METRIC, PlotError, find_runs, group_runs
from .run_groups import group_warnings
from .run_options import EVAL_FILE, SCORES

__all__ = ["ReportError", "run_score", "report_runs", "format_report", "report_main", "SCORES"]



class ReportError(PlotError):
    """A run without the score asked for; the message names the run and the file looked in."""


def run_score(run: str, score: str = "final") -> float:
    """The score of one run (module docstring).

    Raises:
        ReportError: the run holds no such score yet.
    """
    if score == "eval":

        path = os.path.join(run, EVAL_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                return float(json.load(f)["mean"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ReportError(f"{run}: no baton eval result ({path}: {err}); run baton eval {run} first, or "
                              f"report --score final") from None
    if score not in SCORES:
        raise ReportError(f"--score {score!r}: choose one of {', '.join(SCORES)}")
    path = os.path.join(run, PROGRESS_FILE)
    values = read_progress(path).get(METRIC)
    values = values[np.isfinite(values)] if values is not None else np.array([])
    if values.size == 0:
        raise ReportError(f"{path} has no {METRIC} value yet: the run logged no evaluation")
    return float(values[-1] if score == "final" else values.max())


def report_runs(paths: Sequence[str], score: str = "final", labels: Optional[Sequence[str]] = None,
                confidence: float = 0.95, reps: int = 2000) -> List[Dict[str, Any]]:
    """One row per group of the runs under ``paths``: ``{"label", "seeds", "iqm", "ci_low", "ci_high",
    "mean", "min", "max", "scores", "runs", "score", "confidence", "warnings"}`` (no interval, None, for one seed;
    ``warnings``: what pooling the group's runs hides, ``commands.run_groups``).

    Raises:
        ReportError / commands.plot.PlotError: no run under a path, a run without the score.
    """
    rows = []
    for label, runs in group_runs(find_runs(paths), labels).items():
        scores = np.array([run_score(run, score) for run in runs])
        estimate = iqm_with_ci(scores, confidence=confidence, reps=reps, seed=0)
        several = len(runs) > 1
        rows.append({"label": label, "seeds": len(runs), "iqm": float(estimate.iqm),
                     "ci_low": float(estimate.low) if several else None,
                     "ci_high": float(estimate.high) if several else None,
                     "mean": float(scores.mean()), "min": float(scores.min()), "max": float(scores.max()),
                     "scores": scores.tolist(), "runs": list(runs), "score": score, "confidence": confidence,
                     "warnings": group_warnings(label, runs, by_name=not labels)})
    return rows


def format_report(rows: Sequence[Dict[str, Any]]) -> str:
    """The rows as a text table.

    Examples:
        >>> print(format_report([{"label": "cartpole_dqn", "seeds": 3, "iqm": 200.0, "ci_low": 190.5,
        ...                       "ci_high": 210.0, "mean": 201.0, "min": 190.5, "max": 212.5, "score": "final",
        ...                       "confidence": 0.95}]))
        group         seeds  IQM (final)  95% CI          mean   min    max
        cartpole_dqn  3      200.0        [190.5, 210.0]  201.0  190.5  212.5
    """
    pct = f"{100 * rows[0]['confidence']:g}% CI" if rows else "CI"
    header = ["group", "seeds", f"IQM ({rows[0]['score'] if rows else 'final'})", pct, "mean", "min", "max"]
    table = [header] + [[row["label"], str(row["seeds"]), f"{row['iqm']:.1f}",
                         f"[{row['ci_low']:.1f}, {row['ci_high']:.1f}]" if row["ci_low"] is not None else "-",
                         f"{row['mean']:.1f}", f"{row['min']:.1f}", f"{row['max']:.1f}"] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table)


def report_main(args: argparse.Namespace) -> int:
    """``baton report``: the table on stdout, or one ``baton report:`` line on stderr (status 2)."""
    try:
        if args.reps < 1:
            raise ReportError(f"--reps must be >= 1, got {args.reps}")
        rows = report_runs(args.runs, args.score, args.label, args.confidence, args.reps)
        if args.json:
            atomic_write_json(args.json, rows)
    except (ValueError, OSError) as err:  # ReportError, PlotError, a bad --confidence, an unwritable --json
        print(f"baton report: {err}", file=sys.stderr)
        return 2
    for row in rows:
        for line in row["warnings"]:
            print(f"baton report: warning: {line}", file=sys.stderr)
    print(format_report(rows))
    if args.json:
        print(f"baton report: wrote {args.json}")
    return 0
