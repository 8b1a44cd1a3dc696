"""The config keys every policy has: ``PolicyParams``, the base of each algorithm's ``Params`` (its ``policy``
section), the evaluation sections (``OnlineEvalParams``, ``OfflineEvalParams``), and ``check_policy_section``, what
``Policy.check_config`` checks at compile time for every algorithm (the rules its ``Params`` declare, and the
checks that span keys)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from data.envs import episode_limit
from data.nstep import check_nstep, collect_bytes
from engine.config import ConfigError
from engine.config_rules import ValueRules, lookup
from engine.host import gib, host_memory_bytes
from engine.params import Params, param, section

from .accel import accel_modes, warn_once
from .placement import DeviceParams

__all__ = ["PolicyParams", "OffPolicyParams", "CollectParams", "EvaluatorParams", "OnlineEvaluatorParams", "OfflineEvalParams", "OnlineEvalParams",
           "check_policy_section", "check_collection", "RECURRENT_KEYS", "refuse_recurrent_keys"]


@dataclass
class PolicyParams(Params):
    """The keys of every policy's ``policy`` section; an algorithm's ``Params`` derives from it and adds its
    ``model``, ``learn``, ``collect``, ``eval`` and ``other`` sections."""

    type: str = param("")
    """The registered policy type (``create_config.policy.type``)."""
    cuda: bool = param(False)
    """Shorthand: learn, collect and evaluate on this process's GPU."""
    multi_gpu: bool = param(False)
    """DI-engine's DDP switch, kept for its configs; a launcher decides (docs/distributed.md)."""
    device: DeviceParams = section(DeviceParams)
    """Where it learns and acts (``policies.placement.DeviceParams``)."""
    check_device: bool = param(False)
    """Check every tensor in and out of each mode (debugging; off: free)."""
    compile: str = param("none")
    """"none", "compile", "cudagraph" (CUDA) or "cudagraph_update" (CUDA, an off-policy learner's whole updates
    in one graph): the acting forward and the learner's update compiled (``policies.accel``,
    ``policies.update_graph``, docs/performance.md)."""
    amp: str = param("none")
    """"none" or "bf16": autocast the acting forward and the learner's forward and loss."""
    obs_norm: bool = param(False)
    """Normalise observations by their running mean and variance, updated from collected ones, checkpointed,
    merged across DDP ranks (``policies.obs_norm``)."""
    obs_norm_clip: float = param(10.0, rule="positive")
    """Normalised observations are clipped to [-clip, clip]."""


@dataclass
class OffPolicyParams(PolicyParams):
    """The keys a policy learning off-policy from its own collection (DQN, SAC, TD3, DDPG) has at the top of its
    ``policy`` section: the discount of the collector's returns and the random warm-up."""

    discount_factor: float = param(0.99, rule="unit_interval")
    """gamma, the discount of future rewards: the collector's n-step transitions carry gamma^n as their
    ``discount``, by which the TD target bootstraps."""
    nstep: int = param(1, rule="at_least_one")
    """Rewards summed into each stored transition before it bootstraps (n-step returns, ``data.nstep``);
    1: one-step TD. At most 255, the episode's time limit and the discount's float32 horizon
    (``data.nstep.check_nstep``)."""
    random_collect_size: int = param(1000, rule="not_negative")
    """Env steps acted uniformly at random (over the action bounds) before the policy acts (varied warm-up data);
    the learner also waits until the buffer holds as many transitions (and at least a batch; under DDP the
    count is of all ranks' env steps, and each rank's buffer waits for its share). 0: none."""


@dataclass
class CollectParams(Params):
    """A policy's ``collect`` section: how much each iteration collects."""

    n_sample: int = param(64, rule="at_least_one")
    """Transitions per collect, over all the collector's envs (rounded up to whole vector steps)."""


@dataclass
class EvaluatorParams(Params):
    """``policy.eval.evaluator`` of a policy learning offline: how often it is evaluated, and when it stops."""

    eval_freq: int = param(100, rule="at_least_one")
    """Learner updates between evaluations."""
    patience: int = param(0, rule="not_negative")
    """Stop after this many evaluations in a row without a new best; 0: never."""


@dataclass
class OnlineEvaluatorParams(EvaluatorParams):
    """``policy.eval.evaluator`` of a policy learning from its own collection."""

    background: bool = param(False)
    """Evaluate a snapshot in another process while training goes on (docs/middleware.md)."""


@dataclass
class OfflineEvalParams(Params):
    """The ``eval`` section of a policy learning from a dataset."""

    evaluator: EvaluatorParams = section(EvaluatorParams, eval_freq=500, patience=10)
    """Every 500 updates, stopping after 10 evaluations without a new best: a dataset's policy may never reach
    ``env.stop_value``."""


@dataclass
class OnlineEvalParams(Params):
    """A policy's ``eval`` section (online)."""

    evaluator: OnlineEvaluatorParams = section(OnlineEvaluatorParams)
    """The evaluator's settings."""


def check_policy_section(cfg: Mapping[str, Any], rules: ValueRules) -> None:
    """The ``policy`` section of a compiled config against ``rules`` (those its ``Params`` declare), the
    acceleration switches, the encoder's layers and a replay buffer that holds a batch.

    Raises:
        ConfigError: naming the key and the fix (e.g. ``policy.learn.batch_size=0``, a buffer below the batch).
    """
    rules.check(cfg)
    if lookup(cfg, "policy.model.encoder_hidden_size_list") == []:
        raise ConfigError("config key 'policy.model.encoder_hidden_size_list' is []: name at least one layer, "
                          "e.g. [64, 64]")
    for key, sizes in (lookup(cfg, "policy.model") or {}).items():
        if key.endswith("hidden_size_list") and isinstance(sizes, (list, tuple)):
            bad = [size for size in sizes if isinstance(size, bool) or not isinstance(size, int) or size < 1]
            if bad:
                raise ConfigError(f"config key 'policy.model.{key}' is {list(sizes)!r}: each layer's width must be "
                                  f"a whole number >= 1 (not {bad[0]!r}), e.g. [64, 64]")
    if isinstance(cfg.get("policy"), Mapping):
        accel_modes(lookup(cfg, "policy.compile"), lookup(cfg, "policy.amp"))
    size = lookup(cfg, "policy.other.replay_buffer.replay_buffer_size")
    batch = lookup(cfg, "policy.learn.batch_size")
    if size is not None and batch is not None and lookup(cfg, "policy.learn.update_per_collect") is not None \
            and size < batch:
        raise ConfigError(f"policy.other.replay_buffer.replay_buffer_size={size} is smaller than "
                          f"policy.learn.batch_size={batch}: the learner would never start. Make the buffer larger "
                          f"or the batch smaller")


def check_collection(cfg: Mapping[str, Any], pipeline: str) -> None:
    """What collection asks of the machine, at compile time, for a policy collecting from its envs (``pipeline``
    "off_policy" or "on_policy"): the n-step window (``data.nstep.check_nstep``), and collector envs far beyond what
    one collect uses or than their observations' memory can hold.

    Raises:
        ConfigError: naming each key involved, the value, the estimate (steps, transitions or bytes) and the fix.
    """
    if pipeline not in ("off_policy", "on_policy") or not isinstance(cfg.get("env"), Mapping):
        return
    env = cfg["env"]
    envs, n_sample = lookup(cfg, "env.collector_env_num"), lookup(cfg, "policy.collect.n_sample")
    nstep = lookup(cfg, "policy.nstep") if pipeline == "off_policy" else None
    if not isinstance(envs, int) or not isinstance(n_sample, int) or envs < 1 or n_sample < 1:
        return
    if isinstance(nstep, int):
        gamma = lookup(cfg, "policy.discount_factor")
        check_nstep(nstep, gamma if isinstance(gamma, (int, float)) else 1.0, episode_limit=episode_limit(env),
                    env_id=str(env.get("env_id") or ""), num_envs=envs)
    if pipeline == "on_policy" and envs > n_sample:
        raise ConfigError(f"env.collector_env_num={envs} is more than policy.collect.n_sample={n_sample}: a rollout is "
                          f"ceil(n_sample / collector_env_num) steps of each env, so every collect would be one step of "
                          f"all {envs:,} envs ({envs:,} transitions, not {n_sample:,}) and GAE would see one step per "
                          f"env. Give policy.collect.n_sample >= {envs} (a multiple of it), or env.collector_env_num "
                          f"<= {n_sample}")
    size = lookup(cfg, "policy.other.replay_buffer.replay_buffer_size")
    if pipeline == "off_policy" and isinstance(size, int) and envs > size:
        raise ConfigError(f"env.collector_env_num={envs}: one collect steps every env at least once, {envs:,} "
                          f"transitions (policy.collect.n_sample={n_sample} rounded up to whole steps of the envs), "
                          f"more than the replay buffer holds (policy.other.replay_buffer.replay_buffer_size={size:,}): "
                          f"every collect would overwrite its own transitions before the learner samples them. Give "
                          f"env.collector_env_num <= {size:,} (usually no more than policy.collect.n_sample), or a "
                          f"larger replay buffer")
    # one byte a number at the least (uint8 frames; float observations take 4): a certain lower bound
    obs = _obs_elements(lookup(cfg, "policy.model.obs_shape"))
    memory = host_memory_bytes()
    if obs is not None and memory is not None:
        window = nstep if isinstance(nstep, int) else 1
        needed = collect_bytes(obs, envs, n_sample, window)
        if needed > memory:
            fits = _most_envs(lambda count: collect_bytes(obs, count, n_sample, window) <= memory, envs)
            fix = (f"Give env.collector_env_num <= {fits:,}" if fits else
                   f"Give policy.collect.n_sample <= about {max(memory // (4 * obs), 1):,}")
            raise ConfigError(f"env.collector_env_num={envs} with policy.collect.n_sample={n_sample}: one collect holds "
                              f"the observations of {envs:,} envs x {math.ceil(n_sample / envs):,} steps"
                              + (f" and {window - 1} steps each waiting for their n-step windows" if window > 1 else "")
                              + f" (policy.model.obs_shape={lookup(cfg, 'policy.model.obs_shape')}), at least "
                              f"{gib(needed)} of host memory, more than this machine's {gib(memory)}. {fix}")


def _most_envs(fits: Any, upto: int) -> int:
    """The largest env count in ``1..upto`` that ``fits`` (0: none; the estimate grows with the count, so a
    bisection finds it)."""
    low, high = 0, upto
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _obs_elements(shape: Any) -> Optional[int]:
    """The numbers in one observation of ``policy.model.obs_shape`` (an int or a list of ints), None when the
    config leaves it to the env (filled from its space when the policy is built: the collector checks then)."""
    dims = [shape] if isinstance(shape, int) else shape
    if not isinstance(dims, (list, tuple)) or not dims or \
            not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        return None
    return math.prod(dims)


#: the keys of a recurrent policy (``ppo_lstm``): given to another one, the config asks for a memory it cannot have
RECURRENT_KEYS = ("model.rnn_type", "model.hidden_size", "learn.seq_len")


def refuse_recurrent_keys(policy_cls: type, policy_type: str, user_policy: Mapping[str, Any]) -> None:
    """Refuse a recurrent policy's keys on a policy without a memory, saying why that algorithm cannot have one
    (a replay-based one learns from shuffled single transitions) and which policy does, rather than reporting
    an unknown key."""
    if getattr(policy_cls, "recurrent", False):
        return
    for path in RECURRENT_KEYS:
        section, key = path.split(".")
        given = user_policy.get(section)
        if isinstance(given, Mapping) and key in given:
            pipeline = getattr(policy_cls, "pipeline", "")
            why = {"off_policy": "it learns from single transitions sampled from a replay buffer, in an order no "
                                 "memory can follow",
                   "offline": "it learns from single transitions of a dataset, in an order no memory can follow"}.get(
                pipeline, "its networks are feed-forward")
            raise ConfigError(f"policy.{path} asks for a recurrent policy, but policy {policy_type!r} is not "
                              f"recurrent ({why}): for recurrent PPO set policy.type='ppo_lstm' (baton train --algo "
                              f"ppo_lstm), for several agents' recurrent Q networks qmix, vdn or iql with "
                              f"policy.model.recurrent=true, or remove policy.{path}")


def warn_unread_other(other: Mapping[str, Any], algo: str) -> None:
    """Warn once where a policy that reads nothing under ``policy.other`` (the on-policy ones, whose section is
    free-form so that DI-engine configs load) is given settings there: a replay buffer, an exploration schedule
    or hindsight goals would change nothing."""
    if other:
        warn_once("policy.other holds %s, which %s does not read (it has no replay buffer and no exploration "
                  "schedule): these settings change nothing; remove them", sorted(other), algo)
