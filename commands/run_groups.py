"""What ``baton report`` and ``baton plot`` say about a group of runs before they pool its seeds.

A group is found by its directory names (``commands.plot.group_runs``: names that agree up to ``_seed<N>``), and a
name says nothing of what ran: ``runs_lr1/cartpole_seed0`` and ``runs_lr2/cartpole_seed1`` form one group, as do a
DQN and a PPO run given the same ``--exp-name`` stem, or a run and its re-run numbered ``_seed0_2``. Pooled, their
IQM and interval describe no config. Each such group gets one warning line naming what differs (the run's
``config.json``: keys beyond its seed and its bookkeeping; a seed twice), and each run that has not ended at its
budget or stop value (no ``summary.json``: still running, or killed; or stopped by a signal or an error), whose
score is of wherever it stopped, and runs that ended at budgets over 5% apart (``summary.json``'s ``env_step``).
The rows are made all the same: the warning is for the reader to judge.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence

from engine.config import CONFIG_FILE

__all__ = ["group_warnings"]

SUMMARY_FILE = "summary.json"  # middleware.summary.SUMMARY_FILE (middleware imports torch; this module does not)
#: config keys that differ between seeds of one config, say how a run was kept and shown, or where and how fast it
#: ran (a machine's paths, devices, env processes, DDP's transport and compilation), not what it learned
_BOOKKEEPING = ("exp_name", "seed", "torch_threads", "import_names", "dataset.root", "policy.cuda",
                "policy.check_device", "policy.compile", "policy.other.replay_buffer.device")
_BOOKKEEPING_SECTIONS = ("log.", "ckpt.", "preempt.", "env.manager.", "ddp.", "policy.device.")
#: the keys named first when they differ: what ran, before how
_FIRST = ("policy.type", "env.type", "env.env_id")
#: how a run ends when it has done what it was asked (``engine.context.StopReason``)
_ENDED = ("stop_value", "max_env_step", "max_train_iter", "max_step", "plateau", "finished")
_BUDGETS = ("max_env_step", "max_train_iter")


def group_warnings(label: str, runs: Sequence[str], by_name: bool = True) -> List[str]:
    """The warning lines for the group ``label`` of ``runs`` (module docstring); ``by_name``: the group was formed
    from directory names (a ``--label`` the user gave is their choice: only unfinished runs are named then).

    Examples:
        >>> group_warnings("x", [])
        []
    """
    summaries = {run: _summary(run) for run in runs}
    lines = [line for line in (_unfinished(run, summaries[run]) for run in runs) if line]
    lines += _budgets(label, summaries)
    if by_name and len(runs) > 1:
        configs = {run: _flat_config(run) for run in runs}
        lines += _config_differences(label, runs, configs)
    return lines


def _summary(run: str) -> Optional[Dict[str, Any]]:
    """The run's summary.json; ``{}`` when it cannot be read, None when there is none."""
    try:
        with open(os.path.join(run, SUMMARY_FILE), encoding="utf-8") as f:
            summary = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _unfinished(run: str, summary: Optional[Dict[str, Any]]) -> Optional[str]:
    if summary is None:
        return f"{run} has no {SUMMARY_FILE}: it is still running, or was killed; its score is of its last evaluation"
    reason = summary.get("stop_reason")
    if not summary or reason in _ENDED:
        return None
    return f"{run} stopped with stop_reason {reason!r}: its score is of where it stopped, not of its budget"


def _budgets(label: str, summaries: Dict[str, Optional[Dict[str, Any]]]) -> List[str]:
    """A line when the group's runs that ended at a budget trained for different lengths (over 5% apart): each
    final score is then of another amount of training, which seeds of one experiment do not differ in."""
    steps = {run: s.get("env_step") for run, s in summaries.items()
             if s and s.get("stop_reason") in _BUDGETS and isinstance(s.get("env_step"), (int, float))}
    if len(steps) < 2:
        return []
    low, high = min(steps, key=steps.get), max(steps, key=steps.get)
    if steps[high] <= 1.05 * steps[low]:
        return []
    return [f"group {label!r}: its runs ended at different budgets ({low} at env_step {steps[low]}, {high} at "
            f"{steps[high]}): their scores are of different lengths of training"]


def _flat_config(run: str) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(run, CONFIG_FILE), encoding="utf-8") as f:
            return _flatten(json.load(f))
    except (OSError, ValueError, AttributeError):
        return None


def _flatten(tree: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _config_differences(label: str, runs: Sequence[str], configs: Dict[str, Optional[Dict[str, Any]]]) -> List[str]:
    known = [run for run in runs if configs[run] is not None]
    if len(known) < 2:
        return []
    first = configs[known[0]]
    lines = []
    for run in known[1:]:
        other = configs[run]
        keys = [key for key in sorted(set(first) | set(other)) if not _bookkeeping(key)
                and first.get(key, "(absent)") != other.get(key, "(absent)")]
        if keys:
            keys.sort(key=lambda key: (key not in _FIRST, key))
            shown = "; ".join(f"{key} {first.get(key, '(absent)')!r} vs {other.get(key, '(absent)')!r}"
                              for key in keys[:3])
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            lines.append(f"group {label!r} pools runs of different configs: {known[0]} and {run} differ in "
                         f"{shown}{more}; give each config its own --label (one per run) to keep them apart")
            break
    seeds: Dict[Any, str] = {}
    for run in known:
        seed = configs[run].get("seed")
        if seed in seeds:
            lines.append(f"group {label!r}: {seeds[seed]} and {run} both ran seed {seed}, counted as two seeds")
            break
        seeds[seed] = run
    return lines


def _bookkeeping(key: str) -> bool:
    return key in _BOOKKEEPING or key.startswith(_BOOKKEEPING_SECTIONS)
