"""Where a replay buffer lives: the device of its storage and sampler, host -> device pushes through pinned
staging buffers, and the memory check made before a storage is allocated on a GPU.

``policy.other.replay_buffer.device`` (``resolve_replay_device``):

- ``None`` (default) or ``"cpu"``: host memory, as always; nothing in this module does anything then.
- ``"learn"``: the learner's device, so sampled batches are already where the update runs.
- ``"cuda"`` / ``"cuda:N"``: that GPU.

On a GPU, each push is copied into a pinned host buffer per field (kept and grown as needed) and from there
to the device with one ``non_blocking`` copy per field (``PinnedStaging``). Before a storage allocates
device memory it compares its bytes with the device's free memory (``ensure_fits``) and raises
``ReplayMemoryError`` naming both and the fix, rather than failing mid-run with an out-of-memory error.
"""
from __future__ import annotations

import collections
import logging
from typing import Any, Deque, Dict, List, Mapping, Optional, Tuple, Union

import torch

from engine.config import ConfigError
from engine.devices import free_memory, parse_device
from engine.host import host_memory_bytes

from ..obs import Obs, map_leaves

__all__ = ["ReplayMemoryError", "resolve_replay_device", "as_device", "host_path", "free_bytes", "ensure_fits",
           "PinnedStaging", "DeferredCheck", "DeferredReadout"]

logger = logging.getLogger(__name__)

DEVICE_KEY = "policy.other.replay_buffer.device"
SIZE_KEY = "policy.other.replay_buffer.replay_buffer_size"

#: fields larger than this are copied straight from pageable memory instead of through a pinned buffer
#: (e.g. a whole offline dataset loaded once): pinned buffers are kept, and page-locking gigabytes of host
#: memory for one copy costs more than it saves. Pushes of Pong stacks (28 KB a transition) up to about 2,300
#: transitions are staged.
PINNED_LIMIT_BYTES = 64 << 20

#: a staging buffer's key: the field's name, or ``(field, *leaf path)`` for a leaf of a tree field
_Key = Union[str, Tuple[str, ...]]


class ReplayMemoryError(ConfigError):
    """A replay storage larger than the free memory of its device; the message gives both and the fix."""


def resolve_replay_device(spec: Any, learn_device: Optional[str | torch.device] = None) -> torch.device:
    """The device ``policy.other.replay_buffer.device`` names.

    Args:
        spec: ``None`` or ``"cpu"`` (host memory), ``"learn"`` (``learn_device``), ``"cuda"`` or ``"cuda:N"``.
        learn_device: the learner's device (the policy's ``device``), for ``"learn"``.

    Raises:
        engine.devices.DeviceError: an unknown value, or a GPU this process cannot see.

    Examples:
        >>> resolve_replay_device(None), resolve_replay_device("learn", "cpu")
        (device(type='cpu'), device(type='cpu'))
    """
    if spec is None:
        return torch.device("cpu")
    if spec == "learn":
        if learn_device is None:
            raise ValueError(f"{DEVICE_KEY}='learn' names the learner's device: pass the policy's device "
                             f"(learn_device=policy.device)")
        return as_device(learn_device)
    return as_device(parse_device(spec, DEVICE_KEY))


def as_device(device: str | torch.device) -> torch.device:
    """``device`` as the device its tensors report: ``cuda`` as ``cuda:N`` (the current GPU), so a replay's
    device, its tensors' and the learner's compare equal."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def host_path(device: torch.device) -> bool:
    """Whether replay code on ``device`` takes its host path: reads device values as numbers when that is
    free (a CPU), pushes without staging, and keeps the prioritized tree in numpy. Off the host path nothing
    is read back while sampling and pushing. The one switch for every such choice in ``data.replay`` and for the
    collector's finite check (``data.obs.all_finite``: numpy reads a host tensor in place), so a test can run the
    device path on CPU tensors by patching it."""
    return device.type == "cpu"


def free_bytes(device: torch.device) -> Optional[int]:
    """Memory of ``device`` a new tensor can take, in bytes: what the driver reports free
    (``torch.cuda.mem_get_info``) plus what torch's allocator holds unused (it gives that back before
    failing an allocation). None where nothing is checked (host memory: a CPU storage is committed page by
    page as the ring fills)."""
    if device.type != "cuda":
        return None
    free = free_memory(device)
    if torch.cuda.is_initialized():
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return free


def ensure_fits(nbytes: int, device: torch.device, what: str, capacity: Optional[int] = None) -> None:
    """Raise before allocating ``nbytes`` on ``device`` if its free memory is smaller.

    Raises:
        ReplayMemoryError: giving the bytes needed and available, and the fix.
    """
    available = free_bytes(device)
    if available is None:  # host memory, committed page by page: refused only where it can never be filled
        total = host_memory_bytes()
        if total is not None and nbytes > total:
            raise ReplayMemoryError(
                f"{what} needs {nbytes:,} bytes ({nbytes / 2**30:.2f} GiB) of host memory once full, more than this "
                f"machine's {total / 2**30:.2f} GiB. Make {SIZE_KEY} smaller (" + (
                    f"about {capacity * total // nbytes:,} transitions fill it" if capacity else
                    f"at most about {_fraction(total, nbytes)} of it fits") + ")")
        return
    if nbytes > available:
        raise ReplayMemoryError(
            f"{what} needs {nbytes:,} bytes ({nbytes / 2**30:.2f} GiB) on {device}, which has {available:,} bytes "
            f"({available / 2**30:.2f} GiB) free. Make {SIZE_KEY} smaller (at most about "
            f"{_fraction(available, nbytes)} of it fits), or keep the replay in host memory ({DEVICE_KEY}='cpu')")
    if available - nbytes < 1 << 30:
        logger.warning("%s takes %.2f GiB of the %.2f GiB free on %s: less than 1 GiB is left for the learner",
                       what, nbytes / 2**30, available / 2**30, device)


def _fraction(available: int, needed: int) -> str:
    return f"{int(100 * available / needed)}%"


class PinnedStaging:
    """Host -> device copies of pushed chunks: each field is copied into a reusable pinned host buffer
    (one per field, grown as needed) and from there to the device with one ``non_blocking`` copy.

    ``depth`` sets of buffers are used in turn; a set is written again only after the device has read it
    (an event recorded after its copies), so the host runs up to ``depth`` calls ahead of the copies. On
    the host path (a CPU storage) it does nothing: ``to_device`` returns the tensors it is given. Pinning
    needs CUDA; on another device (or where CUDA is absent) the same path runs with pageable buffers and
    copies that wait.

    Args:
        device: where the storage lives.
        depth: buffer sets in turn (2 for pushes; samplers use more for their few hundred bytes a batch).
    """

    def __init__(self, device: str | torch.device, depth: int = 2) -> None:
        self.device = as_device(device)
        self.staged = not host_path(self.device)                     # host tensors pass through buffers
        self.pinned = self.staged and _can_pin(self.device)          # ... page-locked ones (async copies)
        self._sets: List[Dict[_Key, torch.Tensor]] = [{} for _ in range(depth)]
        self._copied: List[Optional[Any]] = [None] * depth          # events: the device has read set i
        self._turn = 0

    def to_device(self, fields: Mapping[str, Obs]) -> Dict[str, Obs]:
        """``fields`` (tensors, or trees of them) on the device: host tensors through one set of staging
        buffers, device tensors as they are (or moved device to device)."""
        if not self.staged:
            return dict(fields)
        buffers = self._next_set()
        # a tree field (a dictionary observation) is staged leaf by leaf, each leaf with a buffer of its own
        out = {key: map_leaves(lambda leaf, path, key=key: self._stage(buffers, (key,) + path if path else key, leaf),
                               value, with_path=True) for key, value in fields.items()}
        self._mark_copied()
        return out

    def write_rows(self, rings: Mapping[str, torch.Tensor], fields: Mapping[str, torch.Tensor], start: int) -> None:
        """Each tensor of ``fields`` written into its ring (``rings[key]``, on the device) from row ``start`` on,
        wrapping at the ring's end: a host tensor from its staging buffer straight into the ring's rows, one copy
        each (``to_device`` then a write would make a device tensor and copy it once more: two operations more a
        field at every push, which a GPU learner's host pays once per env step). Only on the staged path."""
        buffers = self._next_set()
        try:
            for key, value in fields.items():
                ring, n = rings[key], len(value)
                if value.device.type != "cpu" or value.numel() * value.element_size() > PINNED_LIMIT_BYTES:
                    source = self._stage(buffers, key, value)
                else:
                    source = self._buffer(buffers, key, value)
                    source.copy_(value)
                first = min(n, len(ring) - start)
                ring[start:start + first].copy_(source[:first], non_blocking=self.pinned)
                if first < n:
                    ring[:n - first].copy_(source[first:], non_blocking=self.pinned)
        finally:  # the copies queued before a failing one read this set too
            self._mark_copied()

    def _next_set(self) -> Dict[_Key, torch.Tensor]:
        """The next set of staging buffers, once the device has read what was copied from it last."""
        turn = self._turn % len(self._sets)
        self._turn += 1
        if self._copied[turn] is not None:
            self._copied[turn].synchronize()
            self._copied[turn] = None
        return self._sets[turn]

    def _mark_copied(self) -> None:
        """Record that the device reads the set just written once the stream passes here."""
        if self.pinned:
            turn = (self._turn - 1) % len(self._sets)
            self._copied[turn] = torch.cuda.Event()
            self._copied[turn].record(torch.cuda.current_stream(self.device))

    def __getstate__(self) -> Dict[str, Any]:
        """A copy (``copy.deepcopy`` of a replay, a pickle) is taken once the staged copies are done: CUDA events
        cannot be copied, and the copy's buffers are free to reuse."""
        for event in self._copied:
            if event is not None:
                event.synchronize()
        state = dict(self.__dict__)
        state["_copied"] = [None] * len(self._copied)
        return state

    def _stage(self, buffers: Dict[_Key, torch.Tensor], key: _Key, value: torch.Tensor) -> torch.Tensor:
        """One tensor on the device: a host one through its staging buffer (unless larger than
        ``PINNED_LIMIT_BYTES``), a device one as it is (or moved device to device)."""
        if value.device.type != "cpu" or value.numel() * value.element_size() > PINNED_LIMIT_BYTES:
            return value.to(self.device)
        staging = self._buffer(buffers, key, value)
        staging.copy_(value)
        return torch.empty(value.shape, dtype=value.dtype, device=self.device).copy_(staging,
                                                                                     non_blocking=self.pinned)

    def _buffer(self, buffers: Dict[_Key, torch.Tensor], key: _Key, value: torch.Tensor) -> torch.Tensor:
        """A view of this field's staging buffer shaped like ``value``, growing the buffer (doubling) when
        ``value`` is larger than any chunk before."""
        flat = buffers.get(key)
        n = value.numel()
        if flat is None or flat.dtype != value.dtype or flat.numel() < n:
            size = max(n, 2 * flat.numel() if flat is not None and flat.dtype == value.dtype else n)
            flat = buffers[key] = torch.empty(size, dtype=value.dtype, pin_memory=self.pinned)
        return flat[:n].view(value.shape)

    def buffer_bytes(self) -> int:
        """Bytes held in staging buffers (host memory)."""
        return sum(b.numel() * b.element_size() for buffers in self._sets for b in buffers.values())


def _can_pin(device: torch.device) -> bool:
    """Page-locked staging for copies to a CUDA device; pinning needs a CUDA runtime."""
    return device.type == "cuda" and torch.cuda.is_available()


def _copied_behind_event(value: torch.Tensor, device: torch.device) -> Tuple[torch.Tensor, Any]:
    """``value`` (on the CUDA ``device``) copied to pinned host memory without waiting, and the event after the
    copy on the device's stream: the host copy may be read once the event has passed."""
    host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
    host.copy_(value, non_blocking=True)
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return host, event


class DeferredCheck:
    """A condition computed on the device and raised on the host without waiting for the device.

    On the CPU ``report`` raises at once. On a GPU each flag is copied to pinned host memory behind an event,
    and a later ``report`` reads the flags whose events the device has passed (``Event.query``: no wait), so
    the host runs on ahead of the device as far as it can: the error comes at a later call, as soon as the
    host sees it, and the caller keeps its data valid meanwhile (the fused Adam skips a non-finite step, the
    sum tree ignores bad priorities). Only past ``MAX_PENDING`` unread flags is the oldest waited for (a
    device that many calls behind). ``flush`` waits for them all. Where pinning is not available (another
    device; tests running the device path on CPU tensors) the flag is read at the next ``report``.
    """

    #: flags kept unread while the device works on them; past this, the oldest is waited for
    MAX_PENDING = 32

    def __init__(self, device: str | torch.device, error: type = ValueError) -> None:
        self.device = as_device(device)
        self.error = error  # the exception class raised
        self._pending: Deque[tuple] = collections.deque()   # (host flag, event or None, message), oldest first

    def report(self, bad: torch.Tensor, message: str) -> None:
        """``bad``: a 0-d bool tensor on the device; ``message``: the error if it is true."""
        if host_path(self.device):
            if bool(bad):
                raise self.error(message)
            return
        self._read(wait=False)
        if _can_pin(self.device):
            self._pending.append((*_copied_behind_event(bad, self.device), message))
        else:
            self._pending.append((bad, None, message))
        while len(self._pending) > self.MAX_PENDING:
            self._read_oldest()

    def flush(self) -> None:
        """Raise the first pending condition that held (waits for the device to have computed them all)."""
        self._read(wait=True)

    def __getstate__(self) -> Dict[str, Any]:
        """A copy (``copy.deepcopy`` of a replay, a pickle) is taken after the pending flags are read: CUDA
        events cannot be copied, and a flag left unread in the original would be raised twice or never."""
        self.flush()
        state = dict(self.__dict__)
        state["_pending"] = collections.deque()
        return state

    def _read(self, wait: bool) -> None:
        """Read the pending flags in order: those the device has computed, or (``wait``) all of them."""
        while self._pending:
            event = self._pending[0][1]
            if event is not None and not wait and not event.query():
                return  # the device is still behind: nothing is waited for
            self._read_oldest()

    def _read_oldest(self) -> None:
        flag, event, message = self._pending.popleft()
        if event is not None:
            event.synchronize()
        if bool(flag):
            self._pending.clear()
            raise self.error(message)


class DeferredReadout:
    """Statistics computed on the device, read on the host without waiting for the device.

    On the CPU ``read`` returns them at once. On a GPU each call's values are copied to pinned host memory behind
    an event, and ``read`` returns the newest call's whose event the device has passed (``Event.query``: no wait):
    the learner's ``ctx.train_output`` is then a call or so behind when the host runs ahead, as a log may be,
    where reading the current values would wait for the device at every call (with one update a call, every
    update). Only the first call, and past ``MAX_PENDING`` unread calls the oldest, is waited for.
    """

    #: calls kept unread while the device works on them; past this, the oldest is waited for
    MAX_PENDING = 32

    def __init__(self, device: str | torch.device) -> None:
        self.device = as_device(device)
        self._pending: Deque[tuple] = collections.deque()  # (names, host copy, event), oldest first
        self._latest: Optional[Dict[str, float]] = None

    def read(self, names: List[str], values: torch.Tensor) -> Dict[str, float]:
        """``values``: a 1-d tensor on the device, one per name. Returns a dict of floats (module docstring)."""
        if host_path(self.device) or not _can_pin(self.device):
            return dict(zip(names, values.tolist()))
        self._pending.append((list(names), *_copied_behind_event(values, self.device)))
        return self._newest()

    def _newest(self) -> Dict[str, float]:
        """Read the pending calls the device has finished (the first one, and past ``MAX_PENDING`` the oldest,
        waited for); the newest read."""
        while self._pending and (self._latest is None or len(self._pending) > self.MAX_PENDING
                                 or self._pending[0][2].query()):
            done_names, done, done_event = self._pending.popleft()
            done_event.synchronize()
            self._latest = dict(zip(done_names, done.tolist()))
        return dict(self._latest)
