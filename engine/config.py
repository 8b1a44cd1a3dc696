"""Config compilation: defaults merged under the user's values, with errors that say how to fix them.

``compile_config(main_config, create_config)`` looks up the policy and env named by ``create_config``'s
``type`` fields, deep-merges their ``default_config()`` under ``main_config``, and rejects what it does not
know: a misspelt key names its full path and the closest valid key; a value of the wrong type names the
field and both types. A default dict that is empty (``{}``) accepts any keys; a default of ``None``
accepts any value.
"""
from __future__ import annotations

import copy
import difflib
import math
import os
from typing import Any, Dict, List, Mapping, Optional

from easydict import EasyDict

from .config_rules import ConfigError, ValueRules, lookup
from .fileio import atomic_write_json
from .registry import ENV_REGISTRY, POLICY_REGISTRY

__all__ = ["ConfigError", "compile_config", "check_values", "ENGINE_RULES", "ValueRules", "plain", "deep_merge",
           "save_config", "base_config", "CONFIG_FILE"]

CONFIG_FILE = "config.json"
#: ``ddp.bucket_cap_mb``'s default (torch's own), also the ddp middleware's when it is built by hand
DDP_BUCKET_CAP_MB = 25.0


def base_config() -> Dict[str, Any]:
    """Top-level keys every pipeline understands, beside ``env`` and ``policy``."""
    return dict(
        exp_name="default_experiment",
        seed=0,
        torch_threads=0,            # torch's intra-op threads; 0: this process's share of the cores, less one (OMP_NUM_THREADS wins)
        log=dict(
            progress=True,          # tqdm progress bar on rank 0
            tensorboard=True,       # tensorboardX scalars under <exp_name>/log
            csv=True,               # the same scalars as rows of <exp_name>/progress.csv (docs/logging.md)
            print_freq=0,           # >0: log a line every N train iterations
            profile=False,          # each stage's share of the iteration time: table at the end, summary.json, TensorBoard
            wandb=dict(             # Weights & Biases from rank 0: config, every scalar, the best checkpoint (extra: wandb)
                enable=False,
                project="baton",
                entity="",          # "": W&B's default
                name="",            # "": the run directory's name
                mode="",            # "online" | "offline" (files under <exp_name>/wandb; wandb sync) | "disabled"; "": WANDB_MODE
                tags=[],
            ),
            mlflow=dict(            # MLflow from rank 0: config, every scalar, the best checkpoint (extra: mlflow)
                enable=False,
                tracking_uri="",    # "": MLflow's (MLFLOW_TRACKING_URI); "file:/path/mlruns", "sqlite:///m.db", "http://..."
                experiment="baton",
                run_name="",        # "": the run directory's name
            ),
        ),
        ckpt=dict(
            save_freq=0,            # >0: also save every N train iterations
            latest_every_s=120.0,   # write latest.pth.tar at least this often (s), so a killed run resumes; 0: off
            save_replay_buffer=False,
        ),
        preempt=dict(               # a cluster's stop signal ends the run cleanly (engine.preemption, docs/distributed.md)
            signals=["SIGTERM", "SIGUSR1"],  # each: end the iteration, write latest, exit with 128 + its number
            grace_s=20.0,           # a process still running this long after the signal exits then; 0: never
        ),
        ddp=dict(                   # docs/distributed.md, "Communication": when each of these helps
            bucket_cap_mb=DDP_BUCKET_CAP_MB,  # gradients per all-reduce bucket; larger: fewer, bigger messages
            static_graph=False,     # the same parameters take gradients in the same order every update
            gradient_as_bucket_view=False,  # gradients alias the buckets: one copy less, less memory
            comm_hook="none",       # gradient compression: "none" | "fp16" | "bf16" (nccl only) | "powersgd"
            powersgd_rank=1,        # PowerSGD's matrix approximation rank (comm_hook="powersgd")
            backend="auto",         # "auto" | "nccl" | "gloo" (engine.devices: gloo lets processes share GPUs)
        ),
        dataset=dict(               # offline policies train from it (docs/offline.md); online ones ignore it
            name="",                # a Minari dataset id, e.g. "cartpole/expert-v0"
            root="",                # its dataset root; "": $MINARI_DATASETS_PATH, else ~/.minari/datasets
            split="shard",          # under DDP: "shard" (each rank its own episodes) | "replicate" (all, own order)
        ),
    )


_CREATE_KEYS = {"env": {"type", "import_names"}, "policy": {"type", "import_names"},
                "env_manager": {"type", "shared_memory", "context", "overlap"}, "replay_buffer": {"type"}}


def compile_config(main_config: Mapping[str, Any], create_config: Optional[Mapping[str, Any]] = None, *,
                   seed: Optional[int] = None, exp_name: Optional[str] = None, save: bool = True) -> EasyDict:
    """Merge registered defaults under ``main_config`` and validate every key and type.

    Args:
        main_config: the user's config (``exp_name``, ``env``, ``policy``, ...).
        create_config: ``env=dict(type=...)``, ``policy=dict(type=...)``, optionally
            ``env_manager=dict(type='sync'|'async')``; a DI-engine ``import_names`` list is honoured.
        seed, exp_name: override the config's values (the CLI's ``--seed`` and ``--exp-name``).
        save: write the compiled config to ``<exp_name>/config.json``.

    Returns:
        The compiled config as an EasyDict, with ``env.type``, ``policy.type`` and ``env.manager`` filled.

    Raises:
        ConfigError: unknown key, wrong type, missing ``type``.
        engine.registry.UnknownTypeError: a ``type`` that is not registered (lists the registered ones).
    """
    if not isinstance(main_config, Mapping):
        raise ConfigError(f"main_config must be a dict, got {type(main_config).__name__}")
    main_config = plain(main_config)
    create_config = plain(create_config or {})
    _check_create_config(create_config)

    user_policy = dict(main_config.get("policy", {}))
    user_env = dict(main_config.get("env", {}))
    policy_type = _type_name(create_config, main_config, "policy")
    env_type = _type_name(create_config, main_config, "env")
    POLICY_REGISTRY.import_modules(create_config.get("policy", {}).get("import_names", []))
    ENV_REGISTRY.import_modules(create_config.get("env", {}).get("import_names", []))
    policy_cls = POLICY_REGISTRY.get(policy_type)
    env_cls = ENV_REGISTRY.get(env_type)

    defaults = base_config()
    defaults["policy"] = dict(type=policy_type, **_without(policy_cls.default_config(), "type"))
    # manager.overlap: the collector's envs in 2 groups, one stepping while the policy acts on the other
    # (data.env_groups; pays off where the policy's forward is not cheap next to the env step, e.g. Atari)
    defaults["env"] = dict(type=env_type,
                           manager=dict(type="sync", shared_memory=False, context=None, overlap=False),
                           **_without(env_cls.default_config(), "type", "manager"))
    if "env_manager" in create_config:
        defaults["env"]["manager"] = deep_merge(defaults["env"]["manager"],
                                                create_config["env_manager"], path="create_config.env_manager")
    user_policy.pop("type", None)
    user_env.pop("type", None)
    if hasattr(policy_cls, "check_user_keys"):  # keys the policy refuses by name, before they read as unknown
        policy_cls.check_user_keys(policy_type, user_policy)
    user = dict(main_config, policy=user_policy, env=user_env)
    merged = deep_merge(defaults, user, path="")
    if seed is not None:
        merged["seed"] = int(seed)
    if exp_name is not None:
        merged["exp_name"] = str(exp_name)
    if not merged["exp_name"]:
        raise ConfigError("exp_name must be a non-empty path")
    cfg = EasyDict(merged)
    check_values(cfg)
    if hasattr(policy_cls, "check_config"):
        policy_cls.check_config(cfg)
    if save:
        save_config(cfg)
    return cfg


def deep_merge(defaults: Mapping[str, Any], user: Mapping[str, Any], path: str = "", *,
               root: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Return ``defaults`` updated by ``user``, recursively; unknown keys and wrong types raise ConfigError.

    ``root``: the whole tree ``path`` lies in (default: ``defaults`` itself when ``path`` is empty), searched
    for a key misplaced at another depth (``batch_size`` at the top: did you mean ``policy.learn.batch_size``).
    """
    result = copy.deepcopy(dict(defaults))
    free_form = len(defaults) == 0
    root = defaults if root is None and not path else root
    for key, value in user.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in defaults:
            if free_form:
                result[key] = copy.deepcopy(value)
                continue
            raise ConfigError(_unknown_key_message(key_path, key, defaults, root=root))
        default = defaults[key]
        if isinstance(default, Mapping):
            if not isinstance(value, Mapping):
                raise ConfigError(f"config key {key_path!r} must be a dict (type dict), got "
                                  f"{type(value).__name__}: {value!r}")
            result[key] = deep_merge(default, value, key_path, root=root)
        else:
            _check_type(key_path, default, value)
            result[key] = copy.deepcopy(value)
    return result


def save_config(cfg: Mapping[str, Any]) -> str:
    """Write ``cfg`` to ``<exp_name>/config.json`` atomically and return the path."""
    return atomic_write_json(os.path.join(cfg["exp_name"], CONFIG_FILE), plain(cfg))


#: the engine's own sections: values that would make a run not run, or fail deep inside (the ``policy`` section's
#: rules are the policy class's, ``Policy.config_rules``)
ENGINE_RULES = ValueRules(
    at_least_one=("env.collector_env_num", "env.evaluator_env_num", "env.n_evaluator_episode"),
    positive=("ddp.bucket_cap_mb", "ddp.powersgd_rank"),
    not_negative=("ckpt.save_freq", "ckpt.latest_every_s", "log.print_freq", "torch_threads"),
    # words a key takes, checked here with a "did you mean" rather than where the env is built
    choices={"env.manager.type": ("sync", "async", "subprocess"), "ddp.comm_hook": ("none", "fp16", "bf16", "powersgd"),
             "dataset.split": ("shard", "replicate")},
)


def check_values(cfg: Mapping[str, Any]) -> None:
    """Refuse values of the engine's sections that would not run or fail deep inside a run, naming the key and
    the fix (``ENGINE_RULES``, ``ddp.backend``); ``compile_config`` then asks the policy class for its section.

    Raises:
        ConfigError: e.g. ``env.collector_env_num=0``, ``ddp.comm_hook='fp32'``.
    """
    ENGINE_RULES.check(cfg)
    seed = cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed={seed!r}: a seed is a whole number >= 0 (gymnasium's envs refuse negative ones): "
                          f"give --seed N or seed=N with N >= 0")
    backend = lookup(cfg, "ddp.backend")
    if backend is not None and backend not in ("auto", "nccl", "gloo"):
        raise ConfigError(f"config key 'ddp.backend' is {backend!r}: use 'auto', 'nccl' (one GPU per process) or "
                          f"'gloo' (CPU, or processes sharing GPUs)")


# ---- helpers ---------------------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """EasyDicts and tuples to new plain dicts and lists, so merging and JSON see one shape."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _without(d: Mapping[str, Any], *keys: str) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def _type_name(create_config: Mapping[str, Any], main_config: Mapping[str, Any], section: str) -> str:
    name = create_config.get(section, {}).get("type") or main_config.get(section, {}).get("type")
    if not name:
        raise ConfigError(f"create_config.{section}.type is missing: name the registered {section} type, "
                          f"e.g. create_config = dict({section}=dict(type=...))")
    if not isinstance(name, str):
        raise ConfigError(f"create_config.{section}.type must be a str, got {type(name).__name__}")
    return name


def _check_create_config(create_config: Mapping[str, Any]) -> None:
    for section, value in create_config.items():
        if section not in _CREATE_KEYS:
            raise ConfigError(_unknown_key_message(f"create_config.{section}", section,
                                                   {k: None for k in _CREATE_KEYS}))
        if not isinstance(value, Mapping):
            raise ConfigError(f"create_config.{section} must be a dict, got {type(value).__name__}")
        for key in value:
            if key not in _CREATE_KEYS[section]:
                raise ConfigError(_unknown_key_message(f"create_config.{section}.{key}", key,
                                                       {k: None for k in _CREATE_KEYS[section]}))


def _type_label(value: Any) -> str:
    return type(value).__name__


def _check_type(key_path: str, default: Any, value: Any) -> None:
    if default is None:
        return
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif isinstance(default, (list, tuple)):
        ok = isinstance(value, (list, tuple))
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(f"config key {key_path!r} expects {_type_label(default)} "
                          f"(default {default!r}), got {_type_label(value)}: {value!r}")
    if isinstance(default, float) and isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"config key {key_path!r} is NaN")


def _unknown_key_message(key_path: str, key: Any, valid: Mapping[str, Any], *, root: Optional[Mapping[str, Any]] = None,
                         rest: Optional[str] = None) -> str:
    """``key`` is not among ``valid`` (the keys at ``key_path``'s depth): the message names the full path and
    the key meant. That is the same key at another depth of ``root`` (the whole tree) when there is one
    (``batch_size`` -> ``policy.learn.batch_size``; ``rest``: the dotted words from ``key`` on, as typed), else
    the closest key at this depth.

    Examples:
        >>> tree = {"seed": 0, "policy": {"learn": {"batch_size": 64}}}
        >>> _unknown_key_message("batch_size", "batch_size", tree, root=tree)
        "unknown config key 'batch_size'; did you mean 'policy.learn.batch_size'? Valid keys: policy, seed"
    """
    candidates = [str(k) for k in valid]
    parent = key_path.rsplit(".", 1)[0] if "." in key_path else ""
    elsewhere = _paths_ending(root, rest or str(key)) if root is not None else []
    close = difflib.get_close_matches(str(key), candidates, n=1, cutoff=0.5)
    msg = f"unknown config key {key_path!r}"
    if elsewhere:
        msg += f"; did you mean {' or '.join(map(repr, elsewhere[:3]))}?"
    elif close:
        suggestion = f"{parent}.{close[0]}" if parent else close[0]
        msg += f"; did you mean {suggestion!r}?"
    msg += f" Valid keys{' under ' + repr(parent) if parent else ''}: {', '.join(sorted(candidates))}"
    return msg


def _paths_ending(tree: Mapping[str, Any], suffix: str) -> List[str]:
    """The dotted paths of ``tree`` (sections and values) that end in the words of ``suffix``, shortest first."""
    found, stack = [], [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if path == suffix or path.endswith(f".{suffix}"):
                found.append(path)
            if isinstance(value, Mapping):
                stack.append((path, value))
    return sorted(found, key=lambda p: (p.count("."), p))
