"""baton's engine, the core every other floor builds on: the task loop, contexts (with their cross-rank
sync declarations), events, config compilation, registries, the protocols between floors, and the
distributed runtime.

``import engine`` is cheap: it loads no torch and no gymnasium. Torch-backed parts (``engine.distributed``)
load when first used. ``engine.task`` is the default ``Task`` instance for DI-engine-style scripts; the
loop itself lives in the module ``engine.loop``.
"""
from __future__ import annotations

from .compose import parallel, serial
from .config import ConfigError, compile_config
from .context import Context, OfflineRLContext, OnlineRLContext, StopReason, per_step, persistent
from .events import EventBus
from .loop import MiddlewareError, Task
from .registry import ENV_REGISTRY, POLICY_REGISTRY
from .sync import Sync

__all__ = [
    "Task", "task", "serial", "parallel", "MiddlewareError",
    "Context", "OnlineRLContext", "OfflineRLContext", "persistent", "per_step", "Sync", "StopReason",
    "EventBus", "compile_config", "ConfigError", "POLICY_REGISTRY", "ENV_REGISTRY", "launch",
]

__version__ = "0.1.0"


def launch(*args, **kwargs):
    """``engine.launcher.launch``: run a function on every process of a data-parallel job, on one node or
    many (imports torch when called)."""
    from .launcher import launch as _launch

    return _launch(*args, **kwargs)


#: The default task for DI-engine-style scripts. Library code never reads it: middleware get ``ctx``.
task = Task()
