"""What this machine can hold, for the checks that refuse a config value before it allocates (a replay storage,
collector envs, their worker processes): physical memory, processes and open files. Each answer is None where
the platform does not say, and a check then refuses nothing."""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["host_memory_bytes", "host_available_bytes", "process_limit", "open_file_limit", "gib"]


def host_memory_bytes() -> Optional[int]:
    """The host's physical memory in bytes."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def host_available_bytes() -> Optional[int]:
    """The host's memory available to new allocations now, in bytes (``MemAvailable`` of ``/proc/meminfo``)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_limit() -> Optional[int]:
    """The most processes this user may have at once: the smaller of the kernel's ``pid_max`` and the soft
    ``RLIMIT_NPROC`` (either may be absent or unlimited)."""
    limits = []
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            limits.append(int(f.read().strip()))
    except (OSError, ValueError):
        pass
    soft = _soft_limit("RLIMIT_NPROC")
    if soft is not None:
        limits.append(soft)
    return min(limits) if limits else None


def open_file_limit() -> Optional[int]:
    """The soft limit of open files of this process (``ulimit -n``)."""
    return _soft_limit("RLIMIT_NOFILE")


def gib(nbytes: float) -> str:
    """``nbytes`` in GiB, as the refusals print it: ``'12.50 GiB'``."""
    return f"{nbytes / 2**30:,.2f} GiB"


def _soft_limit(name: str) -> Optional[int]:
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    try:
        soft = resource.getrlimit(getattr(resource, name))[0]
    except (AttributeError, ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)
