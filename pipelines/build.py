"""The standard pipeline of a dizoo-style config: ``build_pipeline`` (extend it, then run it) and
``serial_pipeline`` (build and run in one call, DI-engine's name).

The stages, in order (one iteration); (0) marks rank 0 only under DDP, [off] / [on] / [offline] a shape's::

    preemption       a caught SIGTERM / SIGUSR1 ends the run at an iteration boundary, on every rank together
    shards           (DDP, every rank but 0) its replay shard and RNG beside each checkpoint rank 0 writes
    ddp              DDP-wrapped learner; the context's declared fields agreed once per iteration (no-op alone)
    summary          the clocks (wall_time_s: training; elapsed_s: since the build); summary.json at finish
    evaluator        (0) every eval_freq updates; stops the run at env.stop_value (background: in a process)
    exploration      [off, on] epsilon of ctx.env_step (policies with other.eps)
    random_collect   [off, on] random actions below policy.random_collect_size env steps (when > 0)
    collector        [off, on] n_sample transitions into ctx.trajectories: [off] n-step, [on] time-major
    pusher           [off] into the replay buffer
    gae              [on] advantages and returns per env stream
    fetcher          [offline] this rank's shard of the dataset; update_per_iter batches per iteration
    learner          [off] update_per_collect updates of batch_size; [on] epochs of minibatches; [offline] a
                     batch each
    statistics       (policy.obs_norm, reward_norm) what was collected merged into the running statistics (all ranks)
    refresh          the learner's weights copied to collection/evaluation on other devices (policy.device.*)
    checkpoint       (0) best / periodic / final checkpoints
    logger           (0) tensorboardX scalars (log.tensorboard), the same as rows of progress.csv (log.csv) and to
                     W&B / MLflow (log.wandb, log.mlflow)
    termination      max_env_step / max_train_iter
    final_evaluation (0) where a budget ended the run, its last weights evaluated once (a background evaluator: its own)
    progress         (0) tqdm (log.progress)

The shape is the policy class's ``pipeline`` (``SHAPES``); the head and tail are ``pipelines.assembly``'s.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional, Tuple, Type, Union

from engine.distributed import is_distributed, launched_world_size

from .assembly import RunRequest, Shape, assemble
from .offline import OfflineShape
from .online import OffPolicyShape, OnPolicyShape
from .pipeline import Pipeline

__all__ = ["build_pipeline", "serial_pipeline", "SHAPES"]

logger = logging.getLogger(__name__)

ConfigPair = Tuple[Mapping[str, Any], Mapping[str, Any]]

#: the standard pipeline of each shape a policy class may declare (``Policy.pipeline``)
SHAPES: Dict[str, Type[Shape]] = {"off_policy": OffPolicyShape, "on_policy": OnPolicyShape, "offline": OfflineShape}


def build_pipeline(input_cfg: ConfigPair, seed: Optional[int] = None, max_env_step: Optional[int] = None,
                   max_train_iter: Optional[int] = None, *, exp_name: Optional[str] = None,
                   resume: Union[bool, str] = False, force: bool = False, progress: Optional[bool] = None,
                   context: Optional[type] = None) -> Pipeline:
    """The standard pipeline for the policy of ``(main_config, create_config)``, ready to extend and run.

    Joins the process group when launched data-parallel (``WORLD_SIZE > 1``: torchrun,
    ``torch.distributed.launch``, ``engine.launch``; see docs/distributed.md), compiles the config, builds
    the envs (or opens the dataset of an offline policy: docs/offline.md), the policy and the replay buffer,
    and lists the stages (the module docstring). The envs and the process group are released when ``run()``
    ends (or by ``close()``).

    Args:
        input_cfg: ``(main_config, create_config)`` as in a dizoo config file.
        seed: base seed (None: the config's ``seed``, 0 unless it says otherwise). Rank r seeds torch, numpy
            and random with ``seed + r * RANK_SEED_OFFSET``, and its collector env i with that plus i.
        max_env_step, max_train_iter: budgets (global env steps under DDP; for an offline policy, transitions
            drawn from the dataset); the run also stops at ``env.stop_value``.
        exp_name: the run directory, used as given. Without it the run writes to
            ``<config exp_name>_seed<seed>``, or ``..._seed<seed>_<n>`` when that holds a run already
            (``pipelines.run_dir``); ``pipeline.cfg.exp_name`` and the summary's ``run_dir`` say which. It
            is claimed (``config.json`` written) once the envs and the policy are built; a pipeline closed
            without ``run()`` removes it again, and a build that fails leaves none.
        resume: continue the run of that directory (without ``exp_name``: the newest run of this config and
            seed) from its newest loadable checkpoint; ``"auto"``: continue it if there is one, else start
            it (a requeued job). A worker group torchrun restarted continues its run without being told.
        force: start over in a directory that holds a run, after moving it aside to ``<dir>.old-<time>``.
        progress: show the progress bar (default: the config's ``log.progress``).
        context: the context class: None for the shape's own (``OnlineRLContext``, an offline policy's
            ``OfflineRLContext``), or a subclass of it with fields of your own (declare ``sync=...`` on those
            that must agree across ranks).

    Examples:
        >>> pipeline = build_pipeline((main_config, create_config))          # doctest: +SKIP
        >>> pipeline.insert_after("learner", my_middleware, name="mine")    # doctest: +SKIP
        >>> summary = pipeline.run()                                        # doctest: +SKIP
    """
    main_config, create_config = input_cfg
    if main_config.get("policy", {}).get("multi_gpu", False) and launched_world_size() == 1 \
            and not is_distributed():
        logger.warning("policy.multi_gpu=True but the process was not started by a launcher: world size is 1, "
                       "running in one process (use torchrun --nproc_per_node=N, see docs/distributed.md)")
    return assemble(RunRequest(main_config, create_config, seed, max_env_step, max_train_iter, exp_name, resume, force,
                               progress, context), SHAPES)


def serial_pipeline(input_cfg: ConfigPair, seed: Optional[int] = None, max_env_step: Optional[int] = None,
                    max_train_iter: Optional[int] = None, *, exp_name: Optional[str] = None,
                    resume: Union[bool, str] = False, force: bool = False,
                    progress: Optional[bool] = None) -> Dict[str, Any]:
    """Train the policy of ``(main_config, create_config)`` with the standard pipeline and return the run
    summary (``build_pipeline(...).run()``; the same arguments)."""
    return build_pipeline(input_cfg, seed, max_env_step, max_train_iter, exp_name=exp_name, resume=resume,
                          force=force, progress=progress).run()
