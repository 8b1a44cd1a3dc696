"""Hot paths without launch overhead: ``policy.compile`` and ``policy.amp`` (docs/performance.md).

A policy declares the functions that run on every env step or every update (the acting forward, the
learner's forward and loss) with ``@hot_path(mode)``; calling one calls its ``HotPath``, kept in the policy's
``HotPaths`` (``policy.hot_paths``): ``fn`` itself, or ``fn`` compiled, run under bf16 autocast, or both, as
the config asks::

    @hot_path("learn")
    def _loss(self, obs, action): ...                 # self._loss(obs, action) runs the learn hot path

    @hot_path("collect", "eval", name="pi")
    def _pi(self, model, obs): ...                    # self._pi[mode](model, obs): one hot path per mode

The driver around them (moving batches, backward, optimizer step, target update) stays eager. A mode whose
first call used no hot path while a switch is on logs once that the switch does not apply to it: a warning,
or, for an acting mode of a policy that says why it acts eagerly on purpose (``Policy.eager_acting``), an
info line. A collect call with ``random=True`` (the uniform warm-up, which needs no forward) is not judged.

- ``policy.compile``:
  - ``none`` (the default): eager PyTorch.
  - ``compile``: ``torch.compile(fn, dynamic=False)`` (TorchInductor; one graph per input shape, graph
    breaks allowed). Any device torch compiles for: CUDA, and the CPU where a C++ compiler is installed.
  - ``cudagraph``: ``torch.compile(fn, mode="reduce-overhead", dynamic=False)``: the compiled kernels are
    also recorded in CUDA graphs (torch's CUDA graph trees) and replayed with one launch. CUDA only: on
    another device, a warning and the eager path. Under DDP the learner's update uses ``compile`` instead
    (a warning says so): its gradient allreduce runs in DDP's hooks between the graphs, which baton does
    not capture; the acting forward, which DDP does not wrap, keeps ``cudagraph``.
- ``policy.amp``: ``none`` (fp32), or ``bf16``: ``torch.autocast(device_type, torch.bfloat16)`` around the
  hot function (matmuls and convolutions in bf16; on CPU too). Parameters, gradients, the optimizer and
  the losses stay fp32: the policies cast network outputs to float before any loss arithmetic.

Never a crash mid-run: a compile that cannot be done here (no C++ compiler, a torch build or Python
without ``torch.compile``, an operation the compiler rejects, a backward that does not lower) fails at the
hot path's first call (or at a recompile for a new shape), inside ``HotPath.__call__``; the call is then
run eagerly, and if that succeeds, a warning names the error and the function runs eagerly for the rest
of the process. If the eager call fails too, the error is the function's own and is raised as eager
raises it. The learner's backward is compiled together with its forward (not lazily at the first
``loss.backward()``, torch's default), so its failure is caught there too. Each warning is logged once
per process.

Model state is untouched: a hot path compiles a function, never a module, so ``state_dict()`` keys carry no
``_orig_mod.`` prefix and checkpoints of compiled and eager runs are interchangeable.
"""
from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Set, Tuple

import torch

from engine.config import ConfigError
from engine.config_rules import not_one_of

__all__ = ["COMPILE_MODES", "AMP_MODES", "HotPath", "HotPaths", "hot_path", "accel_modes", "warn_once"]

logger = logging.getLogger(__name__)

# policy.compile / policy.amp (checked at compile time too, Policy.check_config: a typo fails before any env starts)
COMPILE_MODES = ("none", "compile", "cudagraph", "cudagraph_update")
AMP_MODES = ("none", "bf16")


def accel_modes(compile: Optional[str] = "none", amp: Optional[str] = "none") -> Tuple[str, str]:
    """``(policy.compile, policy.amp)``, checked (None: ``none``).

    Raises:
        ConfigError: a value that is not one of the modes, naming the key, the choices and a close one.

    Examples:
        >>> accel_modes(compile="cudagraph")
        ('cudagraph', 'none')
        >>> accel_modes(amp="fp16")
        Traceback (most recent call last):
        ...
        engine.config.ConfigError: policy.amp='fp16' is not one of 'none', 'bf16' (did you mean 'bf16'?)
    """
    modes = []
    for key, value, choices in (("compile", compile, COMPILE_MODES), ("amp", amp, AMP_MODES)):
        value = "none" if value is None else value
        if value not in choices:
            raise ConfigError(not_one_of(f"policy.{key}", value, choices))
        modes.append(value)
    return modes[0], modes[1]

_WARNED: set = set()


def warn_once(message: str, *args: Any, key: Any = None) -> None:
    """``logger.warning(message % args)``, the first time ``key`` (default: the text) comes up in the process."""
    text = message % args if args else message
    key = text if key is None else key
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(text)


@functools.lru_cache(maxsize=None)
def cpu_has_native_bf16() -> Optional[bool]:
    """Whether this CPU multiplies bf16 natively (x86's avx512_bf16 or amx_bf16, Arm's bf16), read from Linux's
    ``/proc/cpuinfo``; None where that cannot be read (another OS): unknown, no warning."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = {word for line in f if line.lower().startswith(("flags", "features")) for word in line.split()}
    except OSError:
        return None
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"}) if flags else None


class HotPath:
    """``fn`` run as ``policy.compile`` / ``policy.amp`` ask, and eagerly where they cannot be done.

    Args:
        fn: the function (a policy's method: dynamo keeps its compiled graphs per code object, so each hot
            function should be its own ``def``). Its tensor outputs must be fp32 where losses follow.
        name: for messages, e.g. ``"DQNPolicy loss"``.
        compile_mode: one of ``COMPILE_MODES``.
        amp: one of ``AMP_MODES``.
        device: the device ``fn`` runs on.
        ddp: ``fn`` calls a DistributedDataParallel module (``cudagraph`` becomes ``compile``).
        train: ``fn``'s outputs take a backward (compiled eagerly, with the forward, so a failure shows here).
        captured: ``fn`` runs inside a captured update (``cudagraph_update``): compiled, not CUDA-graphed itself.

    Attributes:
        ddp: as given.
        mode: what runs now: ``"eager"``, ``"compile"`` or ``"cudagraph"`` (``"eager"`` after a fallback).
        fallback_error: the error that made it fall back to eager, or None.
    """

    def __init__(self, fn: Callable[..., Any], name: str, compile_mode: str, amp: str, device: torch.device,
                 ddp: bool = False, train: bool = False, captured: bool = False) -> None:
        self._fn = fn
        self.name = name
        self.device = torch.device(device)
        self.train = train
        self.ddp = ddp
        self.fallback_error: Optional[BaseException] = None
        self.amp = self._amp_mode(amp)
        self.mode = self._compile_mode(compile_mode, ddp, captured)
        self._compiled: Optional[Callable[..., Any]] = None
        if self.mode != "eager":
            try:
                if train:
                    _lower_backward_with_forward()
                self._compiled = torch.compile(fn, dynamic=False,
                                               mode="reduce-overhead" if self.mode == "cudagraph" else None)
            except Exception as err:  # a torch build or Python without torch.compile
                self._fall_back(err)

    def _compile_mode(self, requested: str, ddp: bool, captured: bool = False) -> str:
        if requested == "none":
            return "eager"
        if requested in ("cudagraph", "cudagraph_update"):
            if self.device.type != "cuda":
                warn_once("policy.compile=%r needs a CUDA device (CUDA graphs); on %s the acting forward "
                          "and the learner's update run eagerly (policy.compile='compile' compiles for it)",
                          requested, self.device.type)
                return "eager"
            if captured:  # inside the update's own graph: compiled kernels, captured with the rest
                return "compile"
            requested = "cudagraph"
            if ddp:
                warn_once("policy.compile='cudagraph' is not supported for the learner under DDP (its gradient "
                          "allreduce runs in DDP's hooks between the CUDA graphs): the learner's update uses "
                          "policy.compile='compile'; acting keeps CUDA graphs")
                return "compile"
        return requested

    def _amp_mode(self, requested: str) -> str:
        if requested == "bf16" and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            warn_once("policy.amp='bf16': %s does not support bfloat16; the hot paths run in fp32",
                      torch.cuda.get_device_name(self.device))
            return "none"
        if requested == "bf16" and self.device.type == "cpu" and cpu_has_native_bf16() is False:
            warn_once("policy.amp='bf16': this CPU has no bf16 instructions (avx512_bf16, amx_bf16 or Arm's bf16), "
                      "so its bf16 matmuls are emulated and slower than fp32's; policy.amp=none is the fast choice "
                      "here (docs/performance.md)")
        return requested

    def _fall_back(self, err: BaseException) -> None:
        cause = _describe(err)
        # one warning per cause: a missing compiler fails every hot path the same way
        warn_once("policy.compile=%r could not be done for %s on %s (%s); it runs eagerly from now on, as does "
                  "every hot path that fails the same way", "cudagraph" if self.mode == "cudagraph" else "compile",
                  self.name, self.device, cause, key=("fallback", self.device, cause))
        self.fallback_error = err
        self.mode = "eager"
        self._compiled = None

    def _autocast(self) -> Any:
        if self.amp == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            compiled = self._compiled
            if compiled is None:
                return self._fn(*args, **kwargs)
            cudagraph = self.mode == "cudagraph"
            if cudagraph:  # a new step: the previous replay's outputs may be overwritten (they were cloned)
                torch.compiler.cudagraph_mark_step_begin()
            try:
                out = compiled(*args, **kwargs)
            except Exception as err:
                if _capturing(self.device):  # inside a captured update: the capture fails, named by its owner
                    raise
                failure = err
            else:
                # a CUDA graph's outputs live in its memory pool and are overwritten by its next replay: the
                # caller keeps copies (the learner keeps each update's loss)
                return _clone_tensors(out) if cudagraph else out
            # eager again: if it fails too, the error is the function's own, raised as eager raises it; if it
            # succeeds, compiling is what failed
            out = self._fn(*args, **kwargs)
            self._fall_back(failure)
            return out

    def __repr__(self) -> str:
        return f"HotPath({self.name}, mode={self.mode!r}, amp={self.amp!r}, device={self.device})"


def _capturing(device: torch.device) -> bool:
    """Whether ``device``'s current stream is capturing a CUDA graph (``policies.update_graph``): a compiled path
    that fails there must not rerun eagerly, which would record eager kernels into the graph (or, after a CUDA
    error, fail for another reason than the real one) and make the path eager for good unnamed by the capture."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


class hot_path:
    """Declare a policy method a hot path of ``modes`` (module docstring).

    With one mode, ``self.<method>`` is that mode's ``HotPath``; with several, ``self.<method>[mode]`` is.
    The path is built at its first use and kept in ``policy.hot_paths`` under ``(mode, name)``.

    Args:
        modes: "learn" (on the learner's device; its outputs take a backward through ``policy.learn_model``,
            which may be a DDP wrapper), "collect" or "eval" (on that mode's device).
        name: the key and the name in messages; default: the method's name without its leading underscores.
    """

    def __init__(self, *modes: str, name: Optional[str] = None) -> None:
        unknown = [mode for mode in modes if mode not in ("learn", "collect", "eval")]
        if not modes or unknown:
            raise ValueError(f"hot_path takes one or more of the modes 'learn', 'collect', 'eval', got {modes!r}")
        self.modes, self.name = modes, name
        self.fn: Callable[..., Any]
        self.attr = ""
        self.key: Optional[Tuple[str, str]] = None  # (mode, name) of a one-mode path

    def __call__(self, fn: Callable[..., Any]) -> "hot_path":
        self.fn = fn
        self.name = self.name or fn.__name__.lstrip("_")
        self.key = (self.modes[0], self.name) if len(self.modes) == 1 else None
        self.__doc__ = fn.__doc__
        return self

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def __get__(self, policy: Any, owner: Optional[type] = None) -> Any:
        if policy is None:
            return self
        key = self.key
        if key is not None:
            paths = policy.hot_paths
            return paths._paths.get(key) or paths.get(key[0], self.name, self.fn, policy)
        view = policy.__dict__[self.attr] = ModePaths(self, policy)  # kept: later reads skip this method
        return view


class ModePaths:
    """``[mode]``: the ``HotPath`` of a method declared hot for several modes."""

    __slots__ = ("_declared", "_policy")

    def __init__(self, declared: hot_path, policy: Any) -> None:
        self._declared, self._policy = declared, policy

    def __getitem__(self, mode: str) -> HotPath:
        declared, paths = self._declared, self._policy.hot_paths
        return paths._paths.get((mode, declared.name)) or paths.get(mode, declared.name, declared.fn, self._policy)


class HotPaths:
    """A policy's hot paths by ``(mode, name)``, and the check that each mode used one.

    Args:
        owner: the policy's class name, for messages.
        compile_mode, amp: ``policy.compile`` and ``policy.amp``.
        devices: each mode's device ("learn", "collect", "eval").
        eager_acting: why an acting mode may use no hot path on purpose (``Policy.eager_acting``), or None.
    """

    def __init__(self, owner: str, compile_mode: str, amp: str, devices: Mapping[str, torch.device],
                 eager_acting: Optional[str] = None) -> None:
        self.owner, self.compile_mode, self.amp = owner, compile_mode, amp
        self.devices = dict(devices)
        self.eager_acting = eager_acting
        self.ddp = False  # the learner runs a DistributedDataParallel module (``drop``)
        self.captured = False  # the learner's updates are captured whole (``capture_learn``)
        self._paths: Dict[Tuple[str, str], HotPath] = {}
        self._used: Set[str] = set()  # modes that used a hot path

    def get(self, mode: str, name: str, fn: Callable[..., Any], policy: Any) -> HotPath:
        """The hot path of ``fn`` (a method of ``policy``) for ``mode``, built at its first use."""
        path = self._paths.get((mode, name))
        if path is None:
            learn = mode == "learn"
            path = HotPath(fn.__get__(policy), f"{self.owner} {name}", self.compile_mode, self.amp, self.devices[mode],
                           ddp=learn and self.ddp, train=learn, captured=learn and self.captured)
            self._paths[(mode, name)] = path
            self._used.add(mode)
        return path

    def drop(self, mode: str, ddp: bool = False) -> None:
        """Forget ``mode``'s hot paths (built again at their next use): the learn model changed, and is a
        DistributedDataParallel module when ``ddp``."""
        if mode == "learn":
            self.ddp = ddp
        for key in [key for key in self._paths if key[0] == mode]:
            del self._paths[key]

    def capture_learn(self) -> None:
        """The learner's updates are captured whole from now on (``policies.update_graph``): its hot paths are
        built again, compiled rather than CUDA-graphed themselves."""
        self.captured = True
        self.drop("learn", self.ddp)

    def watched(self, mode: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, or (a switch on) ``fn`` followed at its first judged call by the check that ``mode`` used a
        hot path (module docstring)."""
        if self.compile_mode == "none" and self.amp == "none":
            return fn
        checked = False

        def watched(*args: Any, **kwargs: Any) -> Any:
            nonlocal checked
            out = fn(*args, **kwargs)
            if not checked and not kwargs.get("random"):
                checked = True
                self._judge(mode)
            return out

        return watched

    def _judge(self, mode: str) -> None:
        if mode in self._used:
            return
        if mode != "learn" and self.eager_acting:
            logger.info("%s %s acts %s; policy.compile and policy.amp do not apply to it", self.owner, mode,
                        self.eager_acting)
            return
        warn_once("%s's %s mode does not route its forward through policy.compile/policy.amp "
                  "(policies.accel.hot_path): it runs eagerly in fp32", self.owner, mode)

    def __getitem__(self, key: Tuple[str, str]) -> HotPath:
        return self._paths[key]

    def __len__(self) -> int:
        return len(self._paths)

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        return iter(self._paths)

    def values(self) -> Any:
        return self._paths.values()


def _lower_backward_with_forward() -> None:
    """Lower training graphs' backward with their forward, in this process (torch otherwise lowers it at the
    first ``loss.backward()``, outside the hot path, where a failure would end the run). A process-wide
    setting of AOTAutograd (the same compiled code, built earlier), set rather than patched around each call,
    which would cost more per call than a small CUDA-graph update's launch."""
    import torch._functorch.config as functorch_config

    functorch_config.force_non_lazy_backward_lowering = True


def _describe(err: BaseException) -> str:
    """``Type: first line`` of an error, and of its root cause when torch wraps it (BackendCompilerFailed)."""
    def line(e: BaseException) -> str:
        text = (str(e).strip().splitlines() or [""])[0]
        return f"{type(e).__name__}: {text}" if text else type(e).__name__

    root, seen = err, {id(err)}
    while True:
        inner = getattr(root, "inner_exception", None) or root.__cause__
        if inner is None or id(inner) in seen:
            break
        root = inner
        seen.add(id(root))
    return line(err) if root is err else f"{type(err).__name__}: {line(root)}"


def _clone_tensors(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_clone_tensors(v) for v in value)
    if isinstance(value, list):
        return [_clone_tensors(v) for v in value]
    if isinstance(value, dict):
        return {k: _clone_tensors(v) for k, v in value.items()}
    return value
