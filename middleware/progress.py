"""A progress bar for long runs (tqdm), on rank 0, off with ``log.progress=False`` or ``--no-progress``, and
drawn only on a terminal: where stderr is a file or a pipe (a cluster job's log, ``2> run.log``) it writes
nothing, as tqdm's ``disable=None`` does, instead of a carriage-return update per refresh.

It shows env steps (of the whole run: a resumed run's bar starts where the checkpoint stands), train
iterations, the last evaluation and the run's two clocks by the names they have everywhere else,
``wall_time_s`` and ``elapsed_s`` (``middleware.summary``), in place of tqdm's own elapsed time.
"""
from __future__ import annotations

from typing import Optional

from engine.context import OnlineRLContext

from .summary import RunClock

__all__ = ["progress_bar"]

_WITH_TOTAL = "{l_bar}{bar}| {n_fmt}/{total_fmt} [eta {remaining}, {rate_fmt}{postfix}]"
_WITHOUT_TOTAL = "{desc}: {n_fmt} [{rate_fmt}{postfix}]"


class _ProgressBar:
    def __init__(self, total_env_step: Optional[int] = None, refresh_every: int = 10,
                 clock: Optional[RunClock] = None) -> None:
        self._total = total_env_step
        self._bar = None
        self._shown = 0
        self._every = refresh_every
        self._clock = clock if clock is not None else RunClock()

    def __call__(self, ctx: OnlineRLContext) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._clock.start()  # its own clock only: a shared one started with the run
            self._shown = ctx.env_step
            self._bar = tqdm(total=self._total, initial=ctx.env_step, unit="step", desc="env steps",
                             dynamic_ncols=True, bar_format=_WITH_TOTAL if self._total else _WITHOUT_TOTAL,
                             disable=None)  # None: drawn only where its stream is a terminal
        if ctx.total_step % self._every and not ctx.finish:
            return
        self._show(ctx)

    def _show(self, ctx: OnlineRLContext) -> None:
        postfix = {"train_iter": ctx.train_iter}
        if ctx.eval_output is not None:
            postfix["eval"] = f"{ctx.eval_value:.1f}"
        postfix["wall_time_s"] = f"{self._clock.wall_time_s():.1f}"
        postfix["elapsed_s"] = f"{self._clock.elapsed_s():.1f}"
        self._bar.set_postfix(postfix, refresh=False)  # before update(), whose refresh then shows it: current
        self._bar.update(ctx.env_step - self._shown)
        self._shown = ctx.env_step

    def on_finish(self, ctx: OnlineRLContext) -> None:
        if self._bar is not None:
            self._show(ctx)
            self._bar.close()
            self._bar = None


def progress_bar(total_env_step: Optional[int] = None, clock: Optional[RunClock] = None) -> _ProgressBar:
    """Middleware showing env steps, train iterations, the last evaluation, ``wall_time_s`` and
    ``elapsed_s`` in a tqdm bar. ``clock``: the run's ``RunClock`` (the pipeline's, shared with the summary
    and the logger); default: one of its own, training from the bar's first iteration."""
    return _ProgressBar(total_env_step, clock=clock)
