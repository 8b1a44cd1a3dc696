"""Tiny trained runs for the after-training commands' tests (``baton eval``, ``baton export``): each a real
run directory (config.json, ckpt/best and latest, progress.csv) from a few hundred env steps, built once per
test module by a module fixture."""
from __future__ import annotations

import os
from typing import List

from engine.overrides import apply_overrides
from pipelines import serial_pipeline
from commands.algo_env import build_config

#: what shrinks a run of any algorithm to a second or two: few envs, small batches, an early evaluation
SMALL = ["env.collector_env_num=2", "env.evaluator_env_num=2", "env.n_evaluator_episode=2",
         "log.progress=false", "log.tensorboard=false"]
SMALL_BY_ALGO = {
    "dqn": ["policy.collect.n_sample=32", "policy.learn.batch_size=16", "policy.learn.update_per_collect=1",
            "policy.eval.evaluator.eval_freq=2", "policy.other.replay_buffer.replay_buffer_size=1000",
            "policy.model.encoder_hidden_size_list=[16,16]"],
    "rainbow": ["policy.collect.n_sample=32", "policy.learn.batch_size=16", "policy.learn.update_per_collect=1",
                "policy.eval.evaluator.eval_freq=2", "policy.other.replay_buffer.replay_buffer_size=1000",
                "policy.model.encoder_hidden_size_list=[16,16]"],
    "ppo": ["policy.collect.n_sample=64", "policy.learn.batch_size=32", "policy.learn.epoch_per_collect=1",
            "policy.eval.evaluator.eval_freq=1", "policy.model.actor_head_hidden_size_list=[16,16]",
            "policy.model.critic_head_hidden_size_list=[16,16]"],
    "sac": ["policy.collect.n_sample=16", "policy.learn.batch_size=16", "policy.random_collect_size=32",
            "policy.eval.evaluator.eval_freq=4", "policy.other.replay_buffer.replay_buffer_size=1000",
            "policy.model.actor_head_hidden_size_list=[16,16]", "policy.model.critic_head_hidden_size_list=[16,16]"],
}


def train_tiny(root: str, algo: str, env_id: str, max_env_step: int = 256, extra: List[str] = ()) -> str:
    """Train ``algo`` on ``env_id`` for ``max_env_step`` env steps into ``root/<algo>_<env>`` and return the
    run directory (it holds best and latest checkpoints: the evaluations come early)."""
    main, create = build_config(algo, env_id)
    main, create = apply_overrides(main, create, SMALL + SMALL_BY_ALGO.get(algo, []) + list(extra))
    exp_name = os.path.join(root, main["exp_name"])
    summary = serial_pipeline((main, create), seed=0, max_env_step=max_env_step, exp_name=exp_name)
    assert os.path.isfile(os.path.join(summary["run_dir"], "ckpt", "best.pth.tar")), summary
    return summary["run_dir"]
