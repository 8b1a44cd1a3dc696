"""``baton export``: a run's acting policy as one file that runs without baton.

    baton export RUN_DIR --format torchscript|onnx [--ckpt best|latest|PATH] [-o FILE]

The file holds the policy's greedy module (``Policy.greedy_module``, ``policies.greedy``): a batch of
observations as the env gives them in (``obs``: float32 vectors, or uint8 frame stacks for Atari), a batch of
actions out (``action``: int64 indices, or float32 vectors within the action bounds), the observation
preprocessing and the action scaling inside. The batch size is free. Run it with torch alone
(``torch.jit.load(FILE)(obs)``) or with onnxruntime
(``onnxruntime.InferenceSession(FILE).run(None, {"obs": obs})[0]``).

A Dict or Tuple observation is one input per key (neither format carries a tree), named by its key path
(``camera``, ``position``; ``pos.0`` for a Tuple's first space inside ``pos``), in the space's order with the
legal-action mask last: a masked env's policy takes ``(observation, action_mask)``, and its greedy action is the
best legal one. Only the keys acting reads are inputs (``acting_inputs``): a file of MAPPO, IPPO, QMIX, VDN or IQL
takes the agents' ``obs`` (and mask), not the global ``state`` or ``alive`` that only training reads. The inputs
and their order are printed and returned (``inputs``).

- ``torchscript`` (``.pt``): ``torch.jit.trace`` of the module (the acting path has no data-dependent
  control flow to lose in a trace). torch marks TorchScript as deprecated in favour of ``torch.export``; the
  format is kept because C++ (libtorch) and older deployments load it, and the warning is not repeated here.
- ``onnx`` (``.onnx``): torch's ``torch.export``-based ONNX exporter (``dynamo=True``; it needs ``onnx`` and
  ``onnxscript``, the ``export`` extra).

After writing, the file is loaded back and run on a batch of another size than the one it was traced or
exported with, and its actions compared with the module's (exactly for discrete actions, to 1e-5 for
continuous ones): a file that would act otherwise than the policy is an error, not a surprise later.
(``onnx`` files are run back through onnxruntime when it is installed, else checked with ``onnx.checker``.)
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import io
import logging
import os
import re
import sys
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

from engine.fileio import DiskFullError, atomic_write_path
from pipelines.stages import env_label, env_params
from data.obs import space_leaves
from policies.greedy import NotExportableError
from policies.masks import ACTION_MASK_KEY

from .run_options import FORMATS
from .saved_run import import_user_modules, load_saved_run

__all__ = ["export_policy", "export_run", "export_main", "observation_inputs", "acting_inputs", "input_name",
           "LeavesIn", "FORMATS", "ExportError"]

#: format -> file extension
EXPORT_EXTRA = 'pip install -c constraints.txt -e ".[export]"'


class ExportError(NotExportableError):
    """The written file does not act as the policy does, or the format's package is missing."""


def _example(observation_space: gym.spaces.Box, batch: int, seed: int) -> torch.Tensor:
    """A batch of observations drawn from the space in its own dtype (what the env gives); unbounded float
    dimensions drawn within +-10."""
    low, high, dtype = observation_space.low, observation_space.high, observation_space.dtype
    if dtype.kind == "f":
        low, high = np.clip(low, -10.0, 10.0), np.clip(high, -10.0, 10.0)
    bounded = gym.spaces.Box(low.astype(dtype), high.astype(dtype), observation_space.shape, dtype, seed=seed)
    return torch.as_tensor(np.stack([bounded.sample() for _ in range(batch)]))


def _leaf_example(space: gym.Space, batch: int, seed: int) -> torch.Tensor:
    """A batch of one observation leaf in the dtype the env loop gives it (discrete leaves int64)."""
    if isinstance(space, gym.spaces.Box):
        return _example(space, batch, seed)
    space.seed(seed)
    return torch.as_tensor(np.stack([np.asarray(space.sample()) for _ in range(batch)])).to(
        torch.int8 if isinstance(space, gym.spaces.MultiBinary) else torch.int64)


def observation_inputs(observation_space: gym.Space) -> List[Tuple[Tuple[str, ...], gym.Space]]:
    """The file's inputs: ``[((), space)]`` for a Box, else each leaf of a Dict/Tuple space with its key path
    (a Tuple's positions as "0", "1", ..., as ``data.obs`` keys them), in the space's order, the top-level
    ``action_mask`` last; a leaf no tensor holds is a ``NotExportableError``."""
    if isinstance(observation_space, gym.spaces.Box):
        return [((), observation_space)]
    found = list(space_leaves(observation_space))
    for path, space in found:
        if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                                  gym.spaces.MultiBinary)):
            raise NotExportableError(f"observation key {'.'.join(path)} is a {type(space).__name__} space, which "
                                     f"no exported input can hold")
    return sorted(found, key=lambda item: item[0] == (ACTION_MASK_KEY,))  # stable: the mask last


def acting_inputs(module: torch.nn.Module, observation_space: gym.Space) -> List[Tuple[Tuple[str, ...], gym.Space]]:
    """``observation_inputs`` less the leaves ``module`` (a greedy module) never reads: a file that acts needs only
    what acting reads. MAPPO's and QMIX's rows carry the global ``state`` (for the critic and the mixer) and each
    agent's ``alive`` beside the observations; their actors read neither, and a deployment that acts per agent
    has no global state to feed. Found by tracing the module once on every leaf: a leaf is read where the traced
    graph uses its input; where the trace fails, every leaf stays (the export names the failure)."""
    inputs = observation_inputs(observation_space)
    if isinstance(observation_space, gym.spaces.Box):
        return inputs
    example = tuple(_leaf_example(space, 2, seed=0) for _, space in inputs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = torch.jit.trace(LeavesIn(module, [p for p, _ in inputs]).eval(), example, check_trace=False).graph
    except Exception:  # noqa: BLE001 -- export_policy traces again and names the reason
        return inputs
    used = [bool(value.uses()) for value in list(graph.inputs())[1:]]  # the first input is the module itself
    kept = [item for item, read in zip(inputs, used) if read]
    return kept or inputs


def input_name(path: Tuple[str, ...]) -> str:
    """An input's name: ``obs`` for a Box observation, else the key path joined by dots."""
    return ".".join(path) if path else "obs"


class LeavesIn(torch.nn.Module):
    """A greedy module of Dict/Tuple observations with one tensor input per leaf (``paths``, as
    ``observation_inputs`` orders them), rebuilt into the nested dict the module takes: the export formats
    carry tensors, not trees."""

    def __init__(self, module: torch.nn.Module, paths: List[Tuple[str, ...]]) -> None:
        super().__init__()
        self.module, self.paths = module, paths

    def forward(self, *leaves: torch.Tensor) -> torch.Tensor:
        obs: Dict[str, Any] = {}
        for path, leaf in zip(self.paths, leaves):
            node = obs
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = leaf
        return self.module(obs)


def _describe(module: torch.nn.Module) -> str:
    return f"{type(module).__name__}({', '.join(type(child).__name__ for child in module.children())})"


def export_policy(policy: Any, observation_space: gym.Space, path: str, fmt: str) -> str:
    """Write ``policy.greedy_module()`` to ``path`` in format ``fmt`` (module docstring); returns ``path``.

    Raises:
        policies.greedy.NotExportableError: the policy defines no greedy module, or the exporter refused a
            part of it (named, with the exporter's reason).
        ExportError: the written file acts otherwise than the module, or the format's extra is missing.
        ValueError: an unknown format.
    """
    _write_policy(policy, observation_space, path, fmt)
    return path


def _write_policy(policy: Any, observation_space: gym.Space, path: str,
                  fmt: str) -> List[Tuple[Tuple[str, ...], gym.Space]]:
    """``export_policy``'s work; returns the file's inputs (``acting_inputs``), found once, for ``export_run``."""
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    module = policy.greedy_module().eval()
    inputs = acting_inputs(module, observation_space)
    if not isinstance(observation_space, gym.spaces.Box):
        module = LeavesIn(module, [path for path, _ in inputs]).eval()
    example = tuple(_leaf_example(space, 2, seed=0) for _, space in inputs)
    what = f"policy {type(policy).__name__}'s greedy module {_describe(module)}"
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit")
            try:
                traced = torch.jit.trace(module, example, check_trace=False)
            except Exception as err:
                raise NotExportableError(f"{what} cannot be traced to TorchScript: {_first_line(err)}") from err
        write = traced.save
    else:
        write = functools.partial(_export_onnx, module, example, [input_name(path) for path, _ in inputs], what=what)
    try:  # whole or not at all: a full disk or Ctrl-C leaves no part of a file where a good one belongs
        atomic_write_path(path, write, prefix="tmp-")
    except DiskFullError:
        raise
    except OSError as err:  # a read-only directory, a path under a file: the place, not the policy
        raise ExportError(f"cannot write {path}: {err.strerror or err} ({_place(path)}); give -o a file in a "
                          f"directory you can write") from None
    _check_file(module, inputs, path, fmt, what)
    return inputs


def _place(path: str) -> str:
    """Where the first part of ``path`` that is not a directory is (a file in the way), or its directory."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return f"{parent} is a file" if os.path.isfile(parent) else f"in {parent}"


def _export_onnx(module: torch.nn.Module, example: Tuple[torch.Tensor, ...], names: List[str], path: str, *,
                 what: str) -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as err:
        raise ExportError(f"--format onnx needs the export extra ({err.name} is not installed): {EXPORT_EXTRA}") \
            from None
    batch = torch.export.Dim("batch", min=1)
    per_input = tuple({0: batch} for _ in example)
    shapes = (per_input,) if isinstance(module, LeavesIn) else per_input  # LeavesIn's inputs are one *leaves
    try:
        with _quiet_exporter():
            torch.onnx.export(module, example, path, input_names=names, output_names=["action"],
                              dynamic_shapes=shapes, dynamo=True, external_data=False, verbose=False)
    except OSError:  # the file could not be written: not the policy's fault (export_policy names the place)
        raise
    except Exception as err:
        if isinstance(_root(err), OSError):
            raise _root(err) from err
        raise NotExportableError(f"{what} cannot be exported to ONNX: {_first_line(err)}") from err


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The ONNX exporter reports each of its steps (on stdout, and as log records of its optimizer passes
    and of the operators it skips): one line of ours says what was written."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnx_ir", "onnxscript")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _check_file(module: torch.nn.Module, inputs: List[Tuple[Tuple[str, ...], gym.Space]], path: str, fmt: str,
                what: str) -> None:
    """Run the written file on a batch of 3 and compare its actions with the module's."""
    obs = tuple(_leaf_example(space, 3, seed=1) for _, space in inputs)
    with torch.no_grad():
        expected = module(*obs).numpy()
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit")
            got = torch.jit.load(path)(*obs).numpy()
    else:
        try:
            import onnxruntime
        except ImportError:  # no runtime here: the graph is checked, not run
            import onnx

            onnx.checker.check_model(path)
            return
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), obs)})[0]
    same = np.array_equal(got, expected) if expected.dtype.kind in "iu" else \
        got.shape == expected.shape and np.allclose(got, expected, rtol=1e-5, atol=1e-5)
    if not same:
        raise ExportError(f"{path}: the {fmt} file of {what} acts otherwise than the module on a batch of "
                          f"{len(obs[0])} observations (does its forward depend on the batch size or on values "
                          f"through Python?); the file is left for inspection")


def _root(err: BaseException) -> BaseException:
    """The root cause of ``err`` (the exporters wrap the reason in errors of their steps)."""
    while err.__cause__ is not None:
        err = err.__cause__
    return err


def _first_line(err: BaseException) -> str:
    """The first line of the root cause of ``err``."""
    err = _root(err)
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()  # the exporter colours its messages
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def default_output(run_dir: str, ckpt_path: str, fmt: str) -> str:
    """``RUN_DIR/policy_<checkpoint name>.<pt|onnx>``, e.g. ``policy_best.onnx``."""
    return os.path.join(run_dir, f"policy_{os.path.basename(ckpt_path).split('.')[0]}{FORMATS[fmt]}")


def export_run(run_dir: str, fmt: str, ckpt: Optional[str] = None, output: Optional[str] = None) -> Dict[str, Any]:
    """Export the policy of checkpoint ``ckpt`` of the run in ``run_dir`` (``export_policy``).

    Returns:
        ``{"path", "format", "ckpt", "policy", "env_id", "env" (as baton eval's), "inputs", "action_space"}``;
        ``inputs``: the file's inputs in order, each ``{"name", "dtype", "shape"}`` (without the batch).

    Raises:
        As ``commands.saved_run.load_saved_run`` and ``export_policy``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    run = load_saved_run(run_dir, ckpt)
    space = run.policy.observation_space
    path = output or default_output(run_dir, run.ckpt, fmt)
    inputs = [dict(name=input_name(p), dtype=_input_dtype(leaf), shape=list(leaf.shape or ()))
              for p, leaf in _write_policy(run.policy, space, path, fmt)]
    return {"path": path, "format": fmt, "ckpt": run.ckpt, "policy": run.cfg.policy.type,
            "env_id": env_params(run.cfg).env_id, "env": env_label(run.cfg), "inputs": inputs,
            "action_space": str(run.policy.action_space)}


def _input_dtype(space: gym.Space) -> str:
    """The dtype of an input as the file takes it (``_leaf_example``'s)."""
    if isinstance(space, gym.spaces.Box):
        return str(space.dtype)
    return "int8" if isinstance(space, gym.spaces.MultiBinary) else "int64"


def export_main(args: argparse.Namespace) -> int:
    """``baton export``: one line naming the file and its input and output, or one ``baton:`` line (status 2)."""
    from .user_errors import USER_ERRORS, exit_status, print_user_error

    try:
        import_user_modules(args.imports)
        info = export_run(args.run_dir, args.format, args.ckpt, args.output)
    except (ValueError, ImportError, NotExportableError, *USER_ERRORS) as err:
        print_user_error(err)
        return exit_status(err)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; the file is renamed into place whole or not
        print("baton export: interrupted; no file was written", file=sys.stderr, flush=True)
        return 130
    inputs = ", ".join(f"{i['name']} {i['dtype']}[{', '.join(['batch'] + [str(d) for d in i['shape']])}]"
                       for i in info["inputs"])
    print(f"baton export: wrote {info['path']} ({info['format']}: {info['policy']} on {info['env']}, from "
          f"{os.path.basename(info['ckpt'])}): {inputs} -> action of {info['action_space']}", flush=True)
    return 0
