"""The interquartile mean over runs and its stratified-bootstrap confidence interval (Agarwal et al., 2021,
"Deep RL at the Edge of the Statistical Precipice"), as ``baton report`` and ``baton plot`` give them.

- **IQM**: the mean of the middle 50% of the scores of all runs (and tasks) pooled: ``int(0.25 * n)``
  scores cut from each end of the sorted scores, as ``scipy.stats.trim_mean(scores, 0.25)`` and rliable's
  ``metrics.aggregate_iqm`` cut them. Less moved by one outlying seed than the mean, with a smaller
  variance than the median at the handful of seeds RL runs have.
- **Stratified bootstrap CI**: each replicate draws, for each task, that task's runs with replacement (as
  many as it has); the IQM of every replicate gives the distribution, and the interval is its percentile
  interval (2.5% and 97.5% for 95%). This is rliable's ``get_interval_estimates`` with its defaults
  (``method="percentile"``, ``task_bootstrap=False``).

Why not the ``rliable`` package itself: it computes the interval through ``arch``'s bootstrap, and the
``arch`` release that installs with our dependencies (arch 7.2 with pandas 3) fails at import; and one
replicate per call (rliable's loop) is slow for a curve of 200 points. The method is a few vectorised numpy
lines: all replicates drawn as one index array, the IQM of every replicate and every curve point in one
sort.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

__all__ = ["iqm", "IntervalEstimate", "iqm_with_ci"]


def iqm(scores: np.ndarray, axis: int = 0) -> np.ndarray:
    """The interquartile mean of ``scores`` along ``axis`` (``scipy.stats.trim_mean(scores, 0.25, axis)``).

    Examples:
        >>> float(iqm(np.array([1.0, 2.0, 3.0, 100.0])))   # the middle two of four
        2.5
        >>> float(iqm(np.array([1.0, 2.0, 30.0])))           # int(0.25 * 3) = 0 cut: the mean
        11.0
        >>> iqm(np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [60.0, 70.0]])).tolist()  # per column
        [3.0, 4.0]
    """
    ordered = np.sort(np.asarray(scores, dtype=np.float64), axis=axis)
    n = ordered.shape[axis]
    cut = int(0.25 * n)
    return np.take(ordered, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


class IntervalEstimate(NamedTuple):
    """The IQM of the runs and its confidence interval (arrays of the scores' trailing shape)."""
    iqm: np.ndarray
    low: np.ndarray
    high: np.ndarray
    runs: int          # runs per task


def iqm_with_ci(scores: np.ndarray, *, confidence: float = 0.95, reps: int = 2000,
                seed: Optional[int] = 0) -> IntervalEstimate:
    """The IQM of ``scores`` and its stratified-bootstrap percentile interval (module docstring).

    Args:
        scores: ``[runs]`` (one task), ``[runs, tasks]``, or ``[runs, tasks, points]`` (a curve per run:
            one estimate per point, the same replicates for every point).
        confidence: the interval's coverage.
        reps: bootstrap replicates.
        seed: seeds the draws (None: fresh ones), so a report is the same every time it is made.

    Examples:
        >>> est = iqm_with_ci(np.array([10.0, 12.0, 11.0, 13.0, 50.0]), reps=1000)
        >>> round(float(est.iqm), 2), bool(est.low <= est.iqm <= est.high), est.runs
        (12.0, True, 5)
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.ndim not in (2, 3) or scores.shape[0] < 1:
        raise ValueError(f"scores must be [runs], [runs, tasks] or [runs, tasks, points] with a run, got shape "
                         f"{scores.shape}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    runs, tasks = scores.shape[:2]
    point = iqm(scores.reshape((runs * tasks,) + scores.shape[2:]))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, runs, size=(reps, runs, tasks))             # per replicate, per task: its runs
    resampled = scores[picks, np.arange(tasks)[None, None, :]]          # [reps, runs, tasks, *points]
    stats = iqm(resampled.reshape((reps, runs * tasks) + scores.shape[2:]), axis=1)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(stats, [tail, 100.0 - tail], axis=0)
    return IntervalEstimate(point, low, high, runs)
