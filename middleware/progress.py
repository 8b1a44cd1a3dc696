"""A progress bar for long runs (tqdm), on rank 0, off with ``log.progress=False`` or ``--no-progress``."""
from __future__ import annotations

from typing import Optional

from engine.context import OnlineRLContext

__all__ = ["progress_bar"]


class _ProgressBar:
    def __init__(self, total_env_step: Optional[int] = None, refresh_every: int = 10) -> None:
        self._total = total_env_step
        self._bar = None
        self._shown = 0
        self._every = refresh_every

    def __call__(self, ctx: OnlineRLContext) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=self._total, unit="step", desc="env steps", dynamic_ncols=True)
        if ctx.total_step % self._every and not ctx.finish:
            return
        postfix = {"train_iter": ctx.train_iter}
        if ctx.eval_output is not None:
            postfix["eval"] = f"{ctx.eval_value:.1f}"
        self._bar.set_postfix(postfix, refresh=False)  # before update(), whose refresh then shows it: current
        self._bar.update(ctx.env_step - self._shown)
        self._shown = ctx.env_step

    def on_finish(self, ctx: OnlineRLContext) -> None:
        if self._bar is not None:
            self._bar.update(ctx.env_step - self._shown)
            self._bar.close()
            self._bar = None


def progress_bar(total_env_step: Optional[int] = None) -> _ProgressBar:
    """Middleware showing env steps, train iterations and the last evaluation in a tqdm bar."""
    return _ProgressBar(total_env_step)
