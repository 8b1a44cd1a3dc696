"""Offline pipelines inside 2-process gloo jobs (engine.launch pickles these by module name)."""
from __future__ import annotations

import copy
import json
import os

from engine.distributed import get_rank


def offline_run(out_dir, root, dataset, module="dizoo.classic_control.cartpole.config.cartpole_cql_config",
                max_train_iter=40):
    """The offline DDP config on ``dataset``; each rank dumps its summary, its shard and its parameters."""
    import importlib

    from pipelines import build_pipeline

    mod = importlib.import_module(module)
    main = copy.deepcopy(mod.main_config)
    main.exp_name = os.path.join(out_dir, "exp")
    main.dataset.name, main.dataset.root = dataset, root
    main.log = dict(progress=False)
    main.env.stop_value = 1e9
    main.env.n_evaluator_episode = 2
    main.policy.eval.evaluator.eval_freq = 20
    pipeline = build_pipeline((main, copy.deepcopy(mod.create_config)), seed=0, max_train_iter=max_train_iter)
    shard = pipeline.shard.tolist()
    learn_mode = pipeline.policy.learn_mode
    summary = pipeline.run()
    params = {k: v.flatten().tolist() for k, v in learn_mode.state_dict()["model"].items()}
    with open(os.path.join(out_dir, f"offline_rank{get_rank()}.json"), "w") as f:
        json.dump({"summary": summary, "shard": shard, "params": params}, f)
