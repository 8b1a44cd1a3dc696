"""``--resume``: the whole run state back from a run directory's newest loadable checkpoint, on as many
ranks as the run has now, whatever it had when it saved.

Rank 0 reads the checkpoint (weights, optimizer, counters, best evaluation) and checks it fits the config;
under DDP the ddp middleware then gives every rank rank 0's learn state. Every rank fills its replay
buffer from the saved shards its rank takes (``data.replay.reshard``: the same shard on the same number of
ranks, merged or dealt out on another) and takes back the RNG state its rank saved, if that rank existed.
Rank 0's shard is inside the checkpoint; rank r's is ``<checkpoint>.rank<r>.pth.tar`` beside it (on a
filesystem every node sees when the number of ranks changes across nodes).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from data.replay.reshard import load_shards, shard_plan
from engine.context import OnlineRLContext
from engine.distributed import broadcast_object
from engine.rng import set_rng_state
from middleware.checkpoint import CheckpointError, load_checkpoint, load_newest_checkpoint, load_shard, shard_path

from . import stages

__all__ = ["resume_run"]

logger = logging.getLogger(__name__)


def resume_run(cfg: Mapping[str, Any], policy: Any, ctx: OnlineRLContext, buffer: Any, saver: Any, rank: int,
               world_size: int, empty_buffer: Callable[[], Any]) -> None:
    """Continue the run of ``cfg.exp_name`` (see the module docstring); call it on every rank.

    Raises:
        CheckpointError: no loadable checkpoint, or one written by another policy, env or model.
    """
    found: Optional[Tuple[str, Dict[str, Any]]] = None
    error: Optional[str] = None
    if rank == 0:
        try:
            found = _load_learn_state(cfg, policy, ctx, saver)
        except CheckpointError as err:
            error = str(err)
    if world_size > 1:  # every rank fails alike, or every rank learns what rank 0 read
        error, path, saved_ranks, persistent = broadcast_object(
            (error, found[0], found[1].get("world_size", 1), ctx.persistent_state()) if rank == 0 and found
            else (error, None, None, None), src=0)
        if error is not None:
            raise CheckpointError(error)
        if rank != 0:
            ctx.load_persistent_state(persistent)
            ctx.finish, ctx.stop_reason, ctx.stop_detail = False, None, None
    else:
        if error is not None:
            raise CheckpointError(error)
        path, saved_ranks = found[0], found[1].get("world_size", 1)
    main_state = found[1] if found else None
    _restore_shards(path, int(saved_ranks), main_state, ctx.train_iter, rank, world_size, buffer, empty_buffer)


def _load_learn_state(cfg: Mapping[str, Any], policy: Any, ctx: OnlineRLContext,
                      saver: Any) -> Tuple[str, Dict[str, Any]]:
    ckpt_dir = os.path.join(cfg["exp_name"], "ckpt")
    path, state = load_newest_checkpoint(ckpt_dir)
    wrote, wants = state.get("meta") or {}, stages.checkpoint_meta(cfg)
    if wrote.get("policy_type", wants["policy_type"]) != wants["policy_type"] or \
            wrote.get("env_type", wants["env_type"]) != wants["env_type"]:
        raise CheckpointError(f"{path} was written by policy {wrote.get('policy_type')!r} on env "
                              f"{wrote.get('env_id') or wrote.get('env_type')!r}; this config trains "
                              f"{wants['policy_type']!r} on {wants['env_id'] or wants['env_type']!r}. Resume with "
                              f"the config that wrote it, or start a new run under another --exp-name")
    try:
        policy.learn_mode.load_state_dict(state["policy"])
    except (KeyError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"{path} does not fit this config's model ({str(err).splitlines()[0]}): resume with "
                              f"the config that wrote it, or start a new run under another --exp-name") from err
    ctx.load_persistent_state(state["ctx"])
    ctx.finish, ctx.stop_reason, ctx.stop_detail = False, None, None  # a resumed run goes on
    if saver is not None:
        saver.restore_best(state.get("best_eval_value", float("-inf")))
    logger.info("resumed from %s at env_step=%d train_iter=%d (saved by %d rank(s))", path, ctx.env_step,
                ctx.train_iter, state.get("world_size", 1))
    return path, state


def _restore_shards(path: str, saved_ranks: int, main_state: Optional[Dict[str, Any]], train_iter: int, rank: int,
                    world_size: int, buffer: Any, empty_buffer: Callable[[], Any]) -> None:
    shards: Dict[int, Optional[Dict[str, Any]]] = {}

    def read(n: int) -> Optional[Dict[str, Any]]:
        if n not in shards:
            shards[n] = _read_shard(path, n, main_state, train_iter)
        return shards[n]

    if rank < saved_ranks and read(rank) is not None and read(rank).get("rng") is not None:
        set_rng_state(read(rank)["rng"])
    if buffer is None:
        return
    plan = [piece for piece in shard_plan(saved_ranks, world_size, rank)
            if read(piece[0]) is not None and read(piece[0]).get("replay_buffer") is not None]
    if not plan:
        return
    try:
        loaded = load_shards(buffer, plan, lambda n: read(n)["replay_buffer"], empty_buffer)
    except TypeError as err:  # frame stacks: only whole shards on the same rank
        logger.warning("rank %d starts with an empty replay buffer: the %d saved shards cannot be dealt to %d "
                       "ranks (%s)", rank, saved_ranks, world_size, err)
        return
    if saved_ranks != world_size:
        logger.info("rank %d of %d took %d transitions from saved shard(s) %s of %d", rank, world_size, loaded,
                    sorted({piece[0] for piece in plan}), saved_ranks)


def _read_shard(path: str, n: int, main_state: Optional[Dict[str, Any]], train_iter: int) -> Optional[Dict[str, Any]]:
    """Saved rank ``n``'s buffer and RNG: from the checkpoint itself for rank 0, else its shard file; None
    (with a warning naming the file) when missing, unreadable or older than the checkpoint."""
    try:
        if n == 0:
            state = main_state if main_state is not None else load_checkpoint(path)
            return {"replay_buffer": state.get("replay_buffer"), "rng": state.get("rng")}
        file = shard_path(path, n)
        state = load_shard(file)
    except CheckpointError as err:
        logger.warning("resuming without saved rank %d's replay shard and RNG state: %s", n, err)
        return None
    if state.get("train_iter") != train_iter:
        logger.warning("resuming without saved rank %d's replay shard and RNG state: %s was written at train_iter "
                       "%s, the checkpoint at %d (the run stopped between the two writes)", n, file,
                       state.get("train_iter"), train_iter)
        return None
    return state
