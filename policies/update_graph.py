"""``policy.compile='cudagraph_update'``: whole off-policy updates captured in one CUDA graph and replayed.

Why: a small network's update on a GPU is bound by the host, not the device. With ``cudagraph`` the
forward and backward are graphs, but around them the host still draws the batch, copies it in, runs
autograd's bookkeeping, the Adam step and the target update (DQN Pong on an H200: the GPU busy 0.55 ms of
2.0 ms an update). Here the whole of ``k = update_per_collect`` updates is one graph, LeanRL's approach:

    for each of the k updates:
        indices drawn on the device (``Sampler.draw``), the batch gathered there from the replay's storage,
        forward, backward, gradient clipping, the fused Adam step (a non-finite loss skips it, as
        ``policies.optim`` does on a GPU), the target network's update, the priorities written back

captured once after two warm-up calls and replayed with one launch per call. The learner reads its
statistics from the graph's outputs once per call.

What makes a program capturable, and how each rule is kept:

- no host read of a device value (``.item()``, ``bool(t)``, ``nonzero``): the replay's fill and the update
  count are device tensors the host writes before each replay (``fill_``, no wait); checks are flags read
  at a later call (``data.replay.device.DeferredCheck``). On a GPU the second warm-up call runs with CUDA's
  synchronizing calls made errors; on the CPU, where there are none, the tests run the program under
  ``no_host_sync``, which raises on such an op (and on a copy between the host and a device) on any device.
- Python runs once, at capture: anything that must change per update is a tensor (the count for a hard
  target update is ``(count % freq == 0)`` as a lerp weight, exact at 0 and 1), and host bookkeeping (the
  update count) happens after each replay (``finish``).
- the tensors the graph was captured over stay where they are: a buffer or optimizer state loaded from a
  checkpoint is new memory, so each call compares their addresses with the capture's and captures again
  when they moved (``_fingerprint``).

What cannot be captured is refused by name at the first update, and the update then runs as
``cudagraph`` runs it (the hot paths in CUDA graph trees, the rest eager): a device that is not CUDA, DDP
(its allreduce runs in hooks between graphs), a storage other than the ring and the frame stacks
(sequences, hindsight goals), a replay off the learner's device, running observation statistics, an
optimizer that is not capture-safe (``capture_refusal``). A capture that fails is named too, and the same
fallback follows.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from data.batch import make_batch
from data.obs import leaves
from data.replay.device import DeferredCheck
from data.replay.frame_storage import FrameStackStorage
from data.replay.storage import RingStorage

from .accel import warn_once
from .checks import NonFiniteLossError

__all__ = ["GraphedUpdates", "HostSyncError", "no_host_sync", "capture_refusal", "fall_back", "UpdateFn"]

logger = logging.getLogger(__name__)

#: calls run eagerly (on a side stream) before the capture: the fused Adam's state, cuBLAS's workspaces and
#: compiled kernels are made there, not inside the graph. The first compiles the learn hot path; the second runs
#: with CUDA's synchronizing calls made errors (``torch.cuda.set_sync_debug_mode``: a host read names itself
#: there, before the capture). Not ``no_host_sync``: a function dynamo first meets under a dispatch mode is never
#: compiled, and inductor's compile itself synchronizes. The capture refuses any compile (``fail_on_recompile``)
WARMUP_CALLS = 2

#: rounds of drawing again the rows a frame-stack storage cannot rebuild yet (``GraphedUpdates._redrawn``); each
#: is a few small kernels inside the graph
REDRAWS = 16

#: ``update_fn(batch, count, number)``: one graph-safe update of the policy on ``batch`` as its ``count``-th (a 0-d
#: int64 tensor, from 1; ``number``: the same as a Python int, exact modulo the program's ``period``: what Python
#: may branch on, e.g. TD3's delayed actor step); returns the statistics (0-d tensors), the new priorities (None:
#: none) and the non-finite flag
UpdateFn = Callable[[Any, torch.Tensor, int], Tuple[Dict[str, torch.Tensor], Optional[torch.Tensor], torch.Tensor]]

#: ops that make the host wait for a device value: refused inside a program that is to be captured
_SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "_unique", "_unique2", "unique_dim",
             "unique_consecutive", "repeat_interleave"}
#: ops whose boolean index sizes their result on the host
_INDEX_OPS = {"index", "index_put", "index_put_", "_index_put_impl_"}


class _Refused(RuntimeError):
    """A capture refused before it began (``capture_refusal``'s reason as its message)."""


class HostSyncError(RuntimeError):
    """A captured program read a device value on the host (the op and the fix in the message)."""


class _NoHostSync(TorchDispatchMode):
    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        boolean_index = name in _INDEX_OPS and any(  # t[mask]: the result's size is counted on the host
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ()) or ())
        if _host_to_device_copy(name, args, kwargs or {}):
            raise HostSyncError(f"{self.what} copies between the host and the device (aten.{name}), which a CUDA "
                                f"graph cannot capture (from the host: replayed from the address it was captured "
                                f"with; to the host: a wait): keep the tensor on the device "
                                f"(policies.placement.PerDevice)")
        if boolean_index or (name in _SYNC_OPS and not (name == "repeat_interleave" and (kwargs or {}).get("output_size"))):
            raise HostSyncError(f"{self.what} reads a device value on the host (aten.{name}: .item(), bool() or "
                                f"int() of a tensor, a boolean mask or nonzero), which a CUDA graph cannot capture: "
                                f"keep the value a tensor (torch.where, a mask as a weight)")
        return func(*args, **(kwargs or {}))


def _host_to_device_copy(name: str, args: Any, kwargs: Any) -> bool:
    """Whether an op copies between the host and a device: a host tensor (more than a scalar) to a device
    (``t.to(device)`` of a CPU tensor, ``device_tensor.copy_(cpu_tensor)``), or a device tensor to the host
    (``.cpu()``, ``.tolist()``: a wait for the device)."""
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor):
        target = kwargs.get("device")
        if target is None:
            return False
        source, target = args[0].device.type, torch.device(target).type
        return (source == "cpu" and args[0].dim() > 0 and target != "cpu") or (source != "cpu" and target == "cpu")
    if name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
        source, target = args[1].device.type, args[0].device.type
        return (source == "cpu" and args[1].dim() > 0 and target != "cpu") or (source != "cpu" and target == "cpu")
    return False


def no_host_sync(what: str = "the update") -> TorchDispatchMode:
    """A context in which an op that reads a device value on the host, or copies a host tensor to a device,
    raises ``HostSyncError`` (reads on any device: the CPU tests run the GPU's programs under it)."""
    return _NoHostSync(what)


def capture_refusal(policy: Any, buffer: Any) -> Optional[str]:
    """Why ``policy``'s updates on ``buffer`` cannot be captured here, or None (module docstring)."""
    device = policy.device
    if device.type != "cuda":
        return f"it needs a CUDA device and the learner is on {device.type}"
    if policy.hot_paths.ddp:
        return "under DDP the gradient allreduce runs in DDP's hooks between graphs"
    if type(buffer.storage) not in (RingStorage, FrameStackStorage):
        return (f"the replay's {type(buffer.storage).__name__} is not captured (the ring and frame-stack storages "
                f"are)")
    if getattr(buffer, "her", None) is not None:
        return "hindsight goals are relabelled on the host"
    if buffer.device != device:
        return (f"the replay is on {buffer.device}, the learner on {device}: set "
                f"policy.other.replay_buffer.device='learn'")
    if not hasattr(buffer.sampler, "draw"):
        return f"the replay's {type(buffer.sampler).__name__} cannot draw on the device"
    if hasattr(buffer.storage, "sampleable") and not getattr(policy, "graph_masks_rows", False):
        return (f"{type(policy).__name__}'s update cannot leave out the rows a {type(buffer.storage).__name__} "
                f"could not rebuild (DQN's can)")
    if policy.normalisation.obs_norm is not None:
        return "policy.obs_norm's running statistics change between updates"
    for group in policy.optimizer_step.optimizer.param_groups:
        if not group.get("fused"):
            return ("its optimizer is not the fused Adam (the one that skips a non-finite step on the device, "
                    "and that a CUDA graph can step)")
    return None


class GraphedUpdates:
    """``updates`` updates of a policy per ``run()``, captured in one CUDA graph (module docstring).

    Args:
        name: for messages, e.g. ``"DQNPolicy update"``.
        buffer: a ``data.replay.ReplayBuffer`` on ``device`` whose sampler can ``draw`` on the device.
        batch_size: transitions per update.
        updates: updates per ``run()`` (``update_per_collect``).
        update_fn: one graph-safe update (``UpdateFn``).
        count: the updates taken so far (read before each run: the first update of a run is ``count() + 1``).
        finish: host bookkeeping after each run, given the updates it made (the policy's update count).
        bound: the tensors the graph binds besides the buffer's (parameters, optimizer state), read at each
            call to see whether they moved since the capture.
        priority: write each update's priorities back to the sampler.
        capture: capture a CUDA graph (False: every run eagerly, the same program: the CPU's tests).
        on_failure: called when the capture fails (the policy's learn hot paths go back to ``cudagraph``).
        period: the updates after which the Python side of an update repeats (TD3's actor delay; 1: every update
            alike): one graph is captured per phase ``count() % period`` a run starts at, each after warm-up
            calls of its own (an optimizer's state made lazily at a first actor step is made there, not in a
            capture, which would leave it unwritten).
        refusal: why the updates cannot be captured now (``capture_refusal``), asked again before each capture
            (a checkpoint's optimizer, loaded since, may not be capture-safe).
    """

    def __init__(self, name: str, buffer: Any, batch_size: int, updates: int, update_fn: UpdateFn,
                 count: Callable[[], int], finish: Callable[[int], None],
                 bound: Callable[[], Iterable[torch.Tensor]], priority: bool = False, capture: bool = True,
                 on_failure: Optional[Callable[[], None]] = None, period: int = 1,
                 refusal: Optional[Callable[[], Optional[str]]] = None) -> None:
        self.name = name
        self.buffer, self.batch_size, self.updates = buffer, int(batch_size), int(updates)
        self.device = buffer.device
        self.priority = priority
        self.capture = capture
        self._update_fn, self._count, self._finish, self._bound = update_fn, count, finish, bound
        self._on_failure = on_failure
        self._refusal = refusal
        self._progress = 0  # updates of the running call done so far (eagerly: a warm-up's, counted on failure)
        self.made = 0       # updates the last ``run()`` made (``updates``; on a failure, what a warm-up made first)
        self._size = torch.zeros((), dtype=torch.int64, device=self.device)      # the replay's fill
        self._start = torch.zeros((), dtype=torch.int64, device=self.device)     # updates before this run
        self._loss_check = DeferredCheck(self.device, NonFiniteLossError)
        self._priority_check = DeferredCheck(self.device, ValueError)
        self.period = max(1, int(period))
        self._graphs: Dict[int, Tuple[Any, Dict[str, torch.Tensor]]] = {}   # by phase: the graph and its outputs
        self._warm: Dict[int, int] = {}                                      # by phase: warm-up calls made
        self._captured_over: Optional[Tuple[int, ...]] = None
        self._redraws = hasattr(buffer.storage, "sampleable")  # frame stacks (``_redrawn``)
        self._host_start = 0
        self.failed: Optional[BaseException] = None  # a capture that failed: the caller runs its eager path
        self.captures = 0                            # graphs captured (a second one: the bound tensors moved)

    def run(self) -> Dict[str, torch.Tensor]:
        """``updates`` updates; returns their statistics: ``loss`` (one per update) and the last update's others,
        and ``index`` (each update's drawn slots, ``[updates, batch_size]``). Where the capture fails, nothing
        is updated, ``failed`` holds the error (named in a warning) and the caller runs its updates itself."""
        if self.failed is not None:
            raise RuntimeError(f"{self.name}: its capture failed ({self.failed!r}); run the updates eagerly")
        self.made = 0
        self._host_start = int(self._count())
        self._size.fill_(len(self.buffer))
        self._start.fill_(self._host_start)
        if not self.capture:
            phase = self._host_start % self.period
            out = self._checked_program() if not self._warm.get(phase) else self._program()
            self._warm[phase] = self._warm.get(phase, 0) + 1
        else:
            try:
                out = self._run_graphed()
            except Exception as err:  # what torch refuses to capture: the updates run one by one from now on
                self._fail(err)
                return {}
        self.made = self.updates
        self._finish(self.updates)  # counted before a deferred error is raised: the updates were made
        self._report(out, self._host_start)
        return out

    def flush(self) -> None:
        """Raise a non-finite loss or priority the device has flagged and the host has not read yet (waits for
        the device: before a checkpoint is written)."""
        self._loss_check.flush()
        self._priority_check.flush()

    def _fail(self, err: BaseException) -> None:
        self.failed = err
        self._graphs.clear()
        # inside a capture the body's error surfaces as capture_end's "a previous error during capture": name the body's
        root = err.__context__ if err.__context__ is not None and not isinstance(err, _Refused) else err
        cause = err.args[0] if isinstance(err, _Refused) else (
            f"the capture failed ({type(root).__name__}: {(str(root).strip().splitlines() or [''])[0]})")
        fall_back(self.name, cause)
        if self._on_failure is not None:
            self._on_failure()
        self.flush()  # what the warm-ups flagged is said now, not lost with this object

    def last_batch(self, out: Dict[str, torch.Tensor]) -> Any:
        """The run's last batch, gathered again from its slots (``ctx.train_data``; its own copy: the graph's
        outputs are overwritten by the next replay)."""
        idx = out["index"][-1].clone()
        return make_batch(dict(self.buffer.storage.gather(idx), index=idx))

    # ---- the program --------------------------------------------------------------------------------
    def _program(self) -> Dict[str, torch.Tensor]:
        """The graph-safe program of ``updates`` updates; its outputs are fresh tensors (at capture: the graph's)."""
        losses, indices, bads, priority_bads = [], [], [], []
        stats: Dict[str, torch.Tensor] = {}
        sampler, storage = self.buffer.sampler, self.buffer.storage
        for j in range(self.updates):
            idx, weight = sampler.draw(self._size, self.batch_size)
            fields = {}
            if self._redraws:
                idx, weight, valid = self._redrawn(idx, weight)
                fields["valid"] = valid
            batch = make_batch(dict(storage.gather(idx), index=idx, weight=weight, **fields))
            stats, priority, bad = self._update_fn(batch, self._start + (j + 1), self._host_start + j + 1)
            self._progress = j + 1  # the step is made (eagerly; at capture, recorded)
            if self.priority:
                priority_bads.append(sampler.write_priority(idx, priority, keep=~fields["valid"] if fields else None))
            losses.append(stats["loss"].detach().float().reshape(()))
            indices.append(idx)
            bads.append(bad.reshape(()))
        out = {k: v.detach().float().reshape(()) for k, v in stats.items() if k != "loss"}
        out["loss"] = torch.stack(losses)
        out["index"] = torch.stack(indices)
        out["non_finite"] = torch.stack(bads).any()
        out["bad_priority"] = (torch.stack(priority_bads).any() if priority_bads
                               else torch.zeros((), dtype=torch.bool, device=self.device))
        return out

    def _redrawn(self, idx: torch.Tensor, weight: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A storage that rebuilds transitions from their neighbours (frame stacks) cannot hand out a slot whose
        neighbours are not written yet or are overwritten: such rows are drawn again ``REDRAWS`` times, in place
        (``torch.where``; the eager learner loops until all are whole, which needs a host read). A row still not
        whole after that (at a share ``f`` of such slots, ``f ** (REDRAWS + 1)`` of the rows: 1e-34 at 1%, the
        share when Pong's DQN starts learning) is marked in ``valid``; the update gives it weight 0 and leaves
        its priority."""
        sampler, storage = self.buffer.sampler, self.buffer.storage
        for _ in range(REDRAWS):
            whole = storage.sampleable(idx)
            again, again_weight = sampler.draw(self._size, self.batch_size)
            idx, weight = torch.where(whole, idx, again), torch.where(whole, weight, again_weight)
        return idx, weight, storage.sampleable(idx)

    def _checked_program(self) -> Dict[str, torch.Tensor]:
        with no_host_sync(self.name):
            return self._program()

    def _run_graphed(self) -> Dict[str, torch.Tensor]:
        if self._graphs and self._fingerprint() != self._captured_over:
            logger.info("%s: the tensors the CUDA graph was captured over moved (a checkpoint was loaded, or an "
                        "optimizer made its state); capturing again", self.name)
            self._graphs.clear()
            self._warm.clear()
        phase = self._host_start % self.period
        warm = self._warm.get(phase, 0)
        with torch.cuda.device(self.device):  # capture and replay on the learner's GPU, whichever is current
            if phase not in self._graphs and warm < WARMUP_CALLS:
                return self._warm_up(phase, warm)
            if phase not in self._graphs:
                self._capture(phase)
            graph, outputs = self._graphs[phase]
            graph.replay()
        return outputs

    def _warm_up(self, phase: int, warm: int) -> Dict[str, torch.Tensor]:
        """One eager call of the program on a side stream (torch's recipe before a capture); a failure counts
        the updates it made before raising, and the caller's stream waits for them either way."""
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        self._progress = 0
        try:
            with torch.cuda.stream(side), (_sync_errors() if warm == WARMUP_CALLS - 1 else contextlib.nullcontext()):
                out = self._program()
        except Exception:
            self.made = self._progress
            self._finish(self._progress)
            raise
        finally:
            current.wait_stream(side)
        self._warm[phase] = warm + 1
        return out

    def _capture(self, phase: int) -> None:
        """Capture the program for ``phase``, after asking again whether it can be (a loaded checkpoint may have
        changed the optimizer). A recompile inside the capture is made an error (compiling there fails in CUDA,
        past Python's reach), and the process's stream is put back if the capture's end fails."""
        why = self._refusal() if self._refusal is not None else None
        if why is not None:
            raise _Refused(why)
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(self.device)
        stance = (torch.compiler.set_stance("fail_on_recompile") if hasattr(torch.compiler, "set_stance")
                  else contextlib.nullcontext())
        try:
            with stance, torch.cuda.graph(graph, stream=torch.cuda.Stream(self.device),
                                          capture_error_mode="thread_local"):
                outputs = self._program()
        except Exception:
            torch.cuda.set_stream(current)
            raise
        self._graphs[phase] = (graph, outputs)
        self._captured_over = self._fingerprint()
        self.captures += 1

    def bound_tensors(self) -> List[torch.Tensor]:
        """The tensors the graph reads and writes in place: the replay's storage and sampler, and ``bound``'s."""
        tensors: List[torch.Tensor] = [t for field in self.buffer.storage.fields.values() for t in _leaves(field)]
        tensors += list(getattr(self.buffer.storage, "bound_tensors", tuple)())
        return tensors + list(self.buffer.sampler.bound_tensors()) + list(self._bound())

    def _fingerprint(self) -> Tuple[Any, ...]:
        """Where and how each tensor the graph binds lies (its address, shape, strides and dtype). Read before
        every replay, so it is the learner's largest host cost after the replay itself on a one-env task (a
        hundred tensors for SAC): one flat list, no per-tensor tuple."""
        tensors = self.bound_tensors()
        return (tuple([t.data_ptr() for t in tensors]), tuple([t.shape for t in tensors]),
                tuple([t.stride() for t in tensors]), tuple([t.dtype for t in tensors]))

    def _report(self, out: Dict[str, torch.Tensor], first: int) -> None:
        self._loss_check.report(out["non_finite"], f"{self.name}: the loss is not finite (NaN or inf) in updates "
                                                   f"{first}-{first + self.updates - 1}; those losses' steps were "
                                                   f"skipped, so the parameters they move are left at their last "
                                                   f"finite values. "
                                                   f"Lower policy.learn.learning_rate or clip gradients")
        if self.priority:
            self._priority_check.report(out["bad_priority"], f"{self.name}: priorities must be finite: updates "
                                                             f"{first}-{first + self.updates - 1} gave NaN or "
                                                             f"infinite ones (left out of the sum tree)")


@contextlib.contextmanager
def _sync_errors() -> Iterator[None]:
    """CUDA's synchronizing calls (a host read of a device value, a copy to pageable host memory) raise inside."""
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


def module_tensors(module: torch.nn.Module) -> List[torch.Tensor]:
    """Every parameter and buffer of ``module`` and its submodules, read from their live registries at each call
    (a parameter or submodule put in since is in): ``parameters()`` and ``buffers()`` give the same tensors through
    nested generators and a set of the modules met, about twenty times the Python calls, which ``_fingerprint``
    would pay at every replay. A tensor shared by two modules is listed twice."""
    out: List[torch.Tensor] = []
    stack = [module]
    while stack:
        m = stack.pop()
        out += [t for t in m._parameters.values() if t is not None]
        out += [t for t in m._buffers.values() if t is not None]
        stack += [child for child in m._modules.values() if child is not None]
    return out


def _leaves(field: Any) -> Iterator[torch.Tensor]:
    if isinstance(field, torch.Tensor):
        yield field
        return
    for _, leaf in leaves(field):
        yield leaf


def fall_back(name: str, why: str) -> None:
    """Say once that ``name``'s updates are not captured and why; they run as ``cudagraph`` runs them."""
    warn_once("policy.compile='cudagraph_update' cannot capture %s in one CUDA graph: %s. Its updates run as "
              "policy.compile='cudagraph' runs them (the forward and backward in CUDA graphs, the rest eager)",
              name, why)
