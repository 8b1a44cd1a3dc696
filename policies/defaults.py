"""The config keys every policy has, and their rules: ``common_config()`` is merged into each
``default_config``, ``evaluator_config(eval_freq)`` is the ``policy.eval`` section, and
``check_policy_section`` is what ``Policy.check_config`` checks at compile time for every algorithm (with the
algorithm's own ``config_rules``)."""
from __future__ import annotations

from typing import Any, Dict, Mapping

from engine.config import ConfigError
from engine.config_rules import ValueRules, lookup

from .accel import accel_modes

__all__ = ["common_config", "evaluator_config", "POLICY_RULES", "check_policy_section", "RECURRENT_KEYS",
           "refuse_recurrent_keys"]

#: the keys every policy (or most) has: values that would train nothing or fail deep inside a run
POLICY_RULES = ValueRules(
    at_least_one=("policy.nstep", "policy.collect.n_sample", "policy.learn.batch_size",
                  "policy.learn.update_per_collect", "policy.eval.evaluator.eval_freq",
                  "policy.other.replay_buffer.replay_buffer_size", "policy.device.refresh_every"),
    positive=("policy.learn.learning_rate",),
    not_negative=("policy.random_collect_size",),
    unit_interval=("policy.discount_factor",),
)


def check_policy_section(cfg: Mapping[str, Any], rules: ValueRules) -> None:
    """The ``policy`` section of a compiled config against ``POLICY_RULES`` and an algorithm's ``rules``, the
    acceleration switches, the encoder's layers and a replay buffer that holds a batch.

    Raises:
        ConfigError: naming the key and the fix (e.g. ``policy.learn.batch_size=0``, a buffer below the batch).
    """
    (POLICY_RULES + rules).check(cfg)
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
        accel_modes(cfg["policy"])
    size = lookup(cfg, "policy.other.replay_buffer.replay_buffer_size")
    batch = lookup(cfg, "policy.learn.batch_size")
    if size is not None and batch is not None and lookup(cfg, "policy.learn.update_per_collect") is not None \
            and size < batch:
        raise ConfigError(f"policy.other.replay_buffer.replay_buffer_size={size} is smaller than "
                          f"policy.learn.batch_size={batch}: the learner would never start. Make the buffer larger "
                          f"or the batch smaller")


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
                              f"ppo_lstm), or remove policy.{path}")


def common_config() -> Dict[str, Any]:
    """Config keys every policy has, merged into each ``default_config``."""
    return dict(
        cuda=False,                 # shorthand: learn, collect and evaluate on this process's GPU
        multi_gpu=False,            # DI-engine's DDP switch; a launcher decides (docs/distributed.md)
        device=dict(
            learn=None,             # e.g. "cuda:0"; None: the process's device (cuda=True: its GPU)
            collect=None,           # e.g. "cpu" or "cuda:1": acts through its own copy; None: the learner's model
            eval=None,              # likewise for evaluation
            refresh_every=1,        # iterations between copies of the learner's weights to the others
        ),
        check_device=False,         # check every tensor in and out of each mode (debugging; off: free)
        compile="none",             # "none" | "compile" | "cudagraph" (CUDA): the acting forward and the learner's
                                    # update compiled; docs/performance.md
        amp="none",                 # "none" | "bf16": autocast the acting forward and the learner's forward/loss
        obs_norm=False,             # normalise observations by their running mean and variance, updated from
                                    # collected ones, checkpointed, merged across DDP ranks (policies.obs_norm)
        obs_norm_clip=10.0,         # normalised observations are clipped to [-clip, clip]
    )


def evaluator_config(eval_freq: int) -> Dict[str, Any]:
    """The ``policy.eval`` section every policy has, with its own ``eval_freq``."""
    return dict(evaluator=dict(
        eval_freq=eval_freq,        # learner updates between evaluations
        background=False,           # evaluate a snapshot in another process while training goes on (docs/middleware.md)
        patience=0,                 # stop after this many evaluations in a row without a new best (0: never)
    ))
