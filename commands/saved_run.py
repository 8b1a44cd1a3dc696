"""A trained run read back from its directory: its config and a checkpoint's policy, for ``baton eval`` and
``baton export``.

A run directory holds ``config.json`` (the compiled config the run trained with) and ``ckpt/`` with
``best.pth.tar`` (the best evaluation so far) and ``latest.pth.tar`` (the newest state). A run trained under
DDP is read the same way: rank 0 writes these files, and the other ranks' ``*.rank<r>.pth.tar`` shards hold
replay and RNG state only, no weights. The checkpoint is read with ``torch.load(weights_only=True)``: nothing
in it runs; nor does anything of ``config.json``: the modules it records (``import_names``, an algorithm of the
user's own) are imported by ``--import`` (``import_user_modules``), or by the caller, never from the file.

The policy is rebuilt from ``config.json`` on the CPU, acting eagerly (``policy.cuda``, ``policy.device``,
``policy.compile`` and ``policy.amp`` are reset: the run's GPU may not be here, and a few episodes gain
nothing from compiling), and loads the checkpoint's learn state.
"""
from __future__ import annotations

import copy
import json
import os
import sys
from typing import Any, Dict, NamedTuple, Optional, Sequence

from easydict import EasyDict

from engine.config import CONFIG_FILE, compile_config
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from middleware.checkpoint import BEST, LATEST, CheckpointError, check_policy_type, load_checkpoint

from pipelines.run_dir import RunDirError

from .run_options import RUN_DIR_HINT

__all__ = ["SavedRun", "load_run_config", "checkpoint_path", "load_saved_run", "import_user_modules", "CKPT_CHOICES"]

#: what ``--ckpt`` names besides a path
CKPT_CHOICES = {"best": BEST, "latest": LATEST}


class SavedRun(NamedTuple):
    """A run's config, the checkpoint chosen and the policy rebuilt from them (``load_saved_run``)."""
    run_dir: str
    cfg: EasyDict          # the compiled config, its device and acceleration switches reset (module docstring)
    ckpt: str              # the checkpoint file read
    state: Dict[str, Any]  # what it holds (``policy``, ``ctx``, ``meta``, ...)
    policy: Any            # the policy, holding the checkpoint's weights
    env_type: Any          # the registered env type of ``cfg.env.type``


def load_run_config(run_dir: str) -> EasyDict:
    """The compiled config of the run in ``run_dir`` (its ``config.json``), checked again against the
    registered defaults, acting on the CPU (module docstring).

    Raises:
        RunDirError: no such directory, or no ``config.json`` in it (naming what was looked for).
        engine.config.ConfigError: a ``config.json`` this version of baton does not read.
    """
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir}: no such run directory ({RUN_DIR_HINT})")
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise RunDirError(f"{run_dir} holds no run: {path} is missing (a training run writes it at its start)")
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path} cannot be read as JSON ({err})") from err
    saved = copy.deepcopy(saved)
    _check_env_module(run_dir, saved)
    policy = saved.setdefault("policy", {})
    policy.update(cuda=False, compile="none", amp="none")
    policy["device"] = {**(policy.get("device") or {}), "learn": None, "collect": None, "eval": None}
    return compile_config(saved, save=False)


def _check_env_module(run_dir: str, saved: Dict[str, Any]) -> None:
    """Refuse a run whose env id names a module (``my_module:MyEnv-v0``, which gymnasium imports to make the env)
    that this process has not imported: the id comes from a run directory, and nothing read from one runs. The
    user's ``--import`` (or their own import) is the consent."""
    env_id = (saved.get("env") or {}).get("env_id")
    module = env_id.partition(":")[0] if isinstance(env_id, str) and ":" in env_id else None
    if module and module not in sys.modules:
        raise RunDirError(f"{run_dir}'s env {env_id!r} comes from the module {module!r}, which baton does not import "
                          f"from a run's files (nothing read from a run directory runs): give --import {module} "
                          f"(in Python, import {module} before load_saved_run)")


def import_user_modules(modules: Sequence[str]) -> None:
    """Import the modules ``--import`` names (an algorithm or env type of the user's own): the only way a module a
    run's ``config.json`` records is imported, by the user's word (``engine.config``: a run directory runs nothing).

    Raises:
        engine.registry.ImportNamesError: a module that cannot be imported, named.
    """
    POLICY_REGISTRY.import_modules(list(modules), key="--import")


def checkpoint_path(run_dir: str, ckpt: Optional[str] = None) -> str:
    """The checkpoint file ``--ckpt`` names: ``best`` or ``latest`` of ``run_dir/ckpt``, or a path; None:
    ``best`` when the run wrote one, else ``latest``.

    Raises:
        CheckpointError: the file is missing; the message lists the checkpoints the run has.
    """
    ckpt_dir = os.path.join(run_dir, "ckpt")
    if ckpt is None:
        best = os.path.join(ckpt_dir, BEST)
        return best if os.path.isfile(best) else checkpoint_path(run_dir, "latest")
    path = os.path.join(ckpt_dir, CKPT_CHOICES[ckpt]) if ckpt in CKPT_CHOICES else ckpt
    if os.path.isfile(path):
        return path
    have = sorted(name for name in (os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else [])
                  if name.endswith(".pth.tar") and ".rank" not in name and not name.startswith("."))
    if not have:
        raise CheckpointError(f"{run_dir} holds no checkpoint ({ckpt_dir} has no *.pth.tar): the run ended before "
                              f"it wrote one; train it longer (baton train ... --resume)")
    raise CheckpointError(f"checkpoint not found: {path}; {ckpt_dir} has {', '.join(have)} (--ckpt best, --ckpt "
                          f"latest or --ckpt PATH)")


def load_saved_run(run_dir: str, ckpt: Optional[str] = None) -> SavedRun:
    """The run in ``run_dir`` with the policy of checkpoint ``ckpt`` (``checkpoint_path``), on the CPU.

    The policy is built for the spaces of one evaluation env of the run's env type, built and closed here.

    Raises:
        RunDirError, CheckpointError: no run, no checkpoint, a checkpoint of another policy or model.
        ImportError: the env family's extra is missing (the message names it).
    """
    cfg = load_run_config(run_dir)
    path = checkpoint_path(run_dir, ckpt)
    state = load_checkpoint(path)
    check_policy_type(state, path, cfg.policy.type, f"but {run_dir}/{CONFIG_FILE}", "give a checkpoint of this run")
    env_type = ENV_REGISTRY.get(cfg.env.type)
    from data.envs import make_vector_env

    env = make_vector_env(env_type, cfg.env, 1, int(cfg.seed), manager="sync", training=False, groups=1)
    try:
        spaces = env.single_observation_space, env.single_action_space
    finally:
        env.close()
    policy = POLICY_REGISTRY.get(cfg.policy.type)(cfg.policy, *spaces, device="cpu")
    try:
        policy.learn_mode.load_state_dict(state["policy"])
    except (KeyError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"{path} does not fit the model of {run_dir}/{CONFIG_FILE} "
                              f"({str(err).splitlines()[0]}): give a checkpoint of this run") from err
    return SavedRun(run_dir, cfg, path, state, policy, env_type)
