"""baton's engine: the task loop, contexts, events, config compilation and the distributed runtime.

``import engine`` is cheap: it loads no torch and no gymnasium. Torch-backed parts (``engine.distributed``,
``engine.envs``, ``engine.entry``) load when first used.
"""
from __future__ import annotations

from .compose import parallel, serial
from .config import ConfigError, compile_config
from .context import Context, OfflineRLContext, OnlineRLContext
from .events import EventBus
from .registry import ENV_REGISTRY, POLICY_REGISTRY
from .task import MiddlewareError, Task

__all__ = [
    "Task", "task", "serial", "parallel", "MiddlewareError",
    "Context", "OnlineRLContext", "OfflineRLContext", "EventBus",
    "compile_config", "ConfigError", "POLICY_REGISTRY", "ENV_REGISTRY", "launch",
]

__version__ = "0.1.0"


def launch(*args, **kwargs):
    """``engine.distributed.launch``: run a function on N local processes (imports torch when called)."""
    from .distributed import launch as _launch

    return _launch(*args, **kwargs)

#: The default task for DI-engine-style scripts. Library code never reads it: middleware get ``ctx``.
task = Task()
