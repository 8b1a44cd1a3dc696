"""The config keys every policy has: ``common_config()`` is merged into each ``default_config``, and
``evaluator_config(eval_freq)`` is the ``policy.eval`` section."""
from __future__ import annotations

from typing import Any, Dict

__all__ = ["common_config", "evaluator_config"]


def common_config() -> Dict[str, Any]:
    """Config keys every policy has, merged into each ``default_config``."""
    return dict(
        cuda=False,                 # shorthand: learn, collect and evaluate on this process's GPU
        multi_gpu=False,            # DI-engine's DDP switch; a launcher decides (docs/distributed.md)
        device=dict(
            learn=None,             # e.g. "cuda:0"; None: the process's device (cuda=True: its GPU)
            collect=None,           # e.g. "cpu" or "cuda:1": acts through its own copy; None: the learner's model
            eval=None,              # likewise for evaluation
            refresh_every=1,        # iterations between copies of the learner's weights to the others
        ),
        check_device=False,         # check every tensor in and out of each mode (debugging; off: free)
        compile="none",             # "none" | "compile" | "cudagraph" (CUDA): the acting forward and the learner's
                                    # update compiled; docs/performance.md
        amp="none",                 # "none" | "bf16": autocast the acting forward and the learner's forward/loss
        obs_norm=False,             # normalise observations by their running mean and variance, updated from
                                    # collected ones, checkpointed, merged across DDP ranks (policies.obs_norm)
        obs_norm_clip=10.0,         # normalised observations are clipped to [-clip, clip]
    )


def evaluator_config(eval_freq: int) -> Dict[str, Any]:
    """The ``policy.eval`` section every policy has, with its own ``eval_freq``."""
    return dict(evaluator=dict(
        eval_freq=eval_freq,        # learner updates between evaluations
        background=False,           # evaluate a snapshot in another process while training goes on (docs/middleware.md)
        patience=0,                 # stop after this many evaluations in a row without a new best (0: never)
    ))
