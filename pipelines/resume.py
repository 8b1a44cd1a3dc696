"""``--resume``: the whole run state back from a run directory's newest loadable checkpoint, on as many
ranks as the run has now, whatever it had when it saved.

Rank 0 reads the checkpoint (weights, optimizer, counters, best evaluation) and checks it fits the config;
under DDP the ddp middleware then gives every rank rank 0's learn state. Every rank fills its replay
buffer from the saved shards its rank takes (``data.replay.reshard``: the same shard on the same number of
ranks, merged or dealt out on another) and takes back the RNG state its rank saved, if that rank existed.
Rank 0's shard is inside the checkpoint; rank r's is ``<checkpoint>.rank<r>.pth.tar`` beside it (on a
filesystem every node sees when the number of ranks changes across nodes).

What the run summary counts goes on too: the best evaluation (the checkpoint's ``best_eval_value``, what
``best.pth.tar`` holds), the evaluations and the training time (``middleware.summary.restore_record``).

Two warnings, one line each: a config that differs from the run's ``config.json`` (``warn_config_changes``:
the dotted keys, old -> new), and a run that has nothing left to train, which then stops at once without an
iteration: its checkpoint is at or past the budget given now, or it stopped at its stop value or its budget
and no larger budget is given (``finished_reason``). A run that reached its stop value, resumed with a budget
above its counters, trains on to that budget without stopping at the stop value again; one that stopped on its
patience counts it afresh. A third warning: an off-policy run with a random warm-up whose checkpoint holds no
replay buffer (``ckpt.save_replay_buffer=False``, the default) starts from an empty one and makes no update until
it holds the warm-up's transitions again.

What the ranks agreed on (the learner gate) is not restored: a resumed run agrees afresh, on its own number of
ranks. A replay that cannot merge shards keeps each rank's own whole shard on fewer ranks (``_restore_shards``).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from data.replay.reshard import load_shards, shard_plan
from engine.config import CONFIG_FILE, RunParams
from engine.context import OnlineRLContext, StopReason
from engine.distributed import broadcast_object
from engine.rng import set_rng_state
from engine.sync import DISTRIBUTED_DEFAULT_KEY
from middleware.checkpoint import CheckpointError, load_checkpoint, load_newest_checkpoint, load_shard, shard_path
from middleware.summary import restore_record
from middleware.termination import PLATEAU_FIELD, restart_count

from . import stages

__all__ = ["resume_run", "warn_config_changes", "config_changes", "finished_reason", "QUIET_KEYS"]

logger = logging.getLogger(__name__)


def resume_run(cfg: Mapping[str, Any], policy: Any, ctx: OnlineRLContext, buffer: Any, saver: Any, rank: int,
               world_size: int, empty_buffer: Callable[[], Any], *, max_env_step: Optional[int] = None,
               max_train_iter: Optional[int] = None) -> None:
    """Continue the run of ``cfg.exp_name`` (see the module docstring); call it on every rank.

    ``max_env_step``, ``max_train_iter``: this process's budgets. When the run has nothing left to train
    (``finished_reason``), ``ctx.finish`` is set with the reason, so the loop makes no iteration. When it
    reached its stop value and a larger budget is given, ``cfg.env.stop_value`` is turned off (inf) in
    ``cfg`` for this process, so that it trains on to the budget.

    Raises:
        CheckpointError: no loadable checkpoint, or one written by another policy, env or model.
    """
    found: Optional[Tuple[str, Dict[str, Any]]] = None
    error: Optional[str] = None
    if rank == 0:
        try:
            found = _load_learn_state(cfg, policy, ctx, saver, max_env_step, max_train_iter)
        except CheckpointError as err:
            error = str(err)
    if world_size > 1:  # every rank fails alike, or every rank learns what rank 0 read
        error, path, saved_ranks, persistent = broadcast_object(
            (error, found[0], found[1].get("world_size", 1), ctx.persistent_state()) if rank == 0 and found
            else (error, None, None, None), src=0)
        if error is not None:
            raise CheckpointError(error)
        if rank != 0:  # rank 0's state after its decision: go on, or stop at once for the reason it gave
            ctx.load_persistent_state(persistent)
            ctx.stop_reason = StopReason(ctx.stop_reason) if ctx.stop_reason else None
    else:
        if error is not None:
            raise CheckpointError(error)
        path, saved_ranks = found[0], found[1].get("world_size", 1)
    main_state = found[1] if found else None
    random_steps = ((cfg.get("policy") or {}).get("random_collect_size") or 0) if not ctx.finish else 0
    _restore_shards(path, int(saved_ranks), main_state, ctx.train_iter, rank, world_size, buffer, empty_buffer,
                    warmup=stages.rank_warmup(random_steps, world_size))


def _load_learn_state(cfg: Mapping[str, Any], policy: Any, ctx: OnlineRLContext, saver: Any,
                      max_env_step: Optional[int], max_train_iter: Optional[int]) -> Tuple[str, Dict[str, Any]]:
    ckpt_dir = os.path.join(RunParams.pick(cfg).exp_name, "ckpt")
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
    _forget_rank_agreements(ctx)
    saved_reason = ctx.stop_reason
    ctx.finish, ctx.stop_reason, ctx.stop_detail = False, None, None  # a resumed run goes on
    best = state.get("best_eval_value", float("-inf"))
    if saver is not None:
        saver.restore_best(best)
    restore_record(ctx, best)  # the summary's best, evaluations and training time go on from the checkpoint
    logger.info("resumed from %s at env_step=%d train_iter=%d (saved by %d rank(s))", path, ctx.env_step,
                ctx.train_iter, state.get("world_size", 1))
    _stop_if_finished(cfg, ctx, saved_reason, max_env_step, max_train_iter)
    return path, state


def _forget_rank_agreements(ctx: OnlineRLContext) -> None:
    """The fields data-parallel ranks agree on afresh (those declaring a ``distributed_default``: the learner
    gate) back to their one-process default. A checkpoint of N ranks holds their last agreement (an open
    gate), which a run of one process would follow instead of its own buffer: resumed without the saved replay,
    it trained on its first collect (a sequence replay then had nothing whole to sample, and the run failed).
    Under DDP the ddp middleware sets them to their distributed default before the ranks first agree."""
    for field in dataclasses.fields(ctx):
        if DISTRIBUTED_DEFAULT_KEY in field.metadata:
            setattr(ctx, field.name, field.default)


def _stop_if_finished(cfg: Mapping[str, Any], ctx: OnlineRLContext, saved_reason: Optional[str],
                      max_env_step: Optional[int], max_train_iter: Optional[int]) -> None:
    """Finish ``ctx`` before its first iteration when the run has nothing left to train, saying so; or turn
    the stop value off when a run that reached it is given a larger budget."""
    stop_value = stages.env_params(cfg).stop_value
    patience = ((cfg.get("policy") or {}).get("eval") or {}).get("evaluator", {}).get("patience", 0)
    plateau = getattr(ctx, PLATEAU_FIELD, None)
    reason, why = finished_reason(ctx, saved_reason, stop_value, max_env_step, max_train_iter, patience)
    run = RunParams.pick(cfg).exp_name
    if reason is not None:
        logger.warning("the run in %s has nothing left to train: %s; stopping without training", run, why)
        ctx.finish, ctx.stop_reason = True, reason
    elif saved_reason == StopReason.STOP_VALUE and ctx.eval_value >= stop_value:
        logger.warning("the run in %s reached its stop value (evaluation %.1f >= env.stop_value %g); training on "
                       "to the budget given (%s) without stopping at it", run, ctx.eval_value, stop_value,
                       _budgets(max_env_step, max_train_iter))
        cfg["env"]["stop_value"] = math.inf  # the compiled config: what the evaluator and config.json get
    elif saved_reason == StopReason.PLATEAU and plateau and patience and plateau["since"] >= patience:
        # its count would stop it again at its next evaluation that is no new best: the budget given is the goal
        logger.warning("the run in %s stopped after %d evaluations without a new best (policy.eval.evaluator."
                       "patience); training on to the budget given (%s), its patience counted afresh", run,
                       plateau["since"], _budgets(max_env_step, max_train_iter))
        restart_count(ctx)


def finished_reason(ctx: OnlineRLContext, saved_reason: Optional[str], stop_value: float,
                    max_env_step: Optional[int], max_train_iter: Optional[int], patience: int = 0
                    ) -> Tuple[Optional[StopReason], str]:
    """Why a run restored into ``ctx`` has nothing left to train, as ``(reason, words)``; ``(None, "")`` when
    it has. ``saved_reason``: the stop reason its checkpoint holds.

    Nothing is left when a budget given now is met already, or when the run stopped at its stop value (still
    met by its last evaluation under the ``stop_value`` of this config), at its budget, or after ``patience``
    evaluations without a new best (its count still meets this config's ``patience``), and no budget is given
    now: a budget above the counters (``max_env_step`` or ``max_train_iter``) trains on.

    Examples:
        >>> ctx = OnlineRLContext(env_step=1000, train_iter=80, eval_value=200.0)
        >>> finished_reason(ctx, "stop_value", 195.0, None, None)[0]
        <StopReason.STOP_VALUE: 'stop_value'>
        >>> finished_reason(ctx, "stop_value", 195.0, 5000, None)      # a larger budget: train on
        (None, '')
        >>> finished_reason(ctx, "stop_value", 250.0, None, None)      # a higher stop value: not reached yet
        (None, '')
        >>> finished_reason(ctx, "interrupted", 195.0, 1000, None)[1]
        'it is at env_step 1000, which meets max_env_step 1000 (--max-env-step): give a larger one to train on'
    """
    if max_env_step is not None and ctx.env_step >= max_env_step:
        return StopReason.MAX_ENV_STEP, (f"it is at env_step {ctx.env_step}, which meets max_env_step {max_env_step} "
                                         f"(--max-env-step): give a larger one to train on")
    if max_train_iter is not None and ctx.train_iter >= max_train_iter:
        return StopReason.MAX_TRAIN_ITER, (f"it is at train_iter {ctx.train_iter}, which meets max_train_iter "
                                           f"{max_train_iter} (--max-train-iter): give a larger one to train on")
    if max_env_step is not None or max_train_iter is not None:
        return None, ""
    more = (f"give a budget above its counters (--max-env-step above {ctx.env_step}, or --max-train-iter above "
            f"{ctx.train_iter}) to train on")
    if saved_reason == StopReason.STOP_VALUE and ctx.eval_value >= stop_value:
        return StopReason.STOP_VALUE, (f"it reached its stop value at env_step {ctx.env_step} (evaluation "
                                       f"{ctx.eval_value:.1f} >= env.stop_value {stop_value:g}); {more}")
    if saved_reason in (StopReason.MAX_ENV_STEP, StopReason.MAX_TRAIN_ITER):
        return StopReason(saved_reason), (f"it stopped at its budget ({saved_reason}) at env_step {ctx.env_step}, "
                                          f"train_iter {ctx.train_iter}; {more}")
    plateau = getattr(ctx, PLATEAU_FIELD, None)
    if saved_reason == StopReason.PLATEAU and plateau and patience and plateau["since"] >= patience:
        return StopReason.PLATEAU, (f"it stopped after {plateau['since']} evaluations in a row without a new best "
                                    f"(policy.eval.evaluator.patience {patience}) at train_iter {ctx.train_iter}; "
                                    f"{more}, or a larger patience")
    return None, ""


def _budgets(max_env_step: Optional[int], max_train_iter: Optional[int]) -> str:
    return ", ".join(f"{name} {value}" for name, value in (("max_env_step", max_env_step),
                                                            ("max_train_iter", max_train_iter)) if value is not None)


#: keys left out of ``warn_config_changes``: the run directory itself, how this invocation shows its
#: progress (``--no-progress``, ``--profile``), the modules the config imports (``import_names``: where its types
#: come from, not how it trains; a run saved before the key existed lacks it), and the stop value, a goal like the
#: budgets (which are no config keys): changing it is how a finished run is trained further, and it is logged, at
#: info level
QUIET_KEYS = ("exp_name", "log.progress", "log.profile", "import_names", "env.stop_value")


def config_changes(saved: Mapping[str, Any], now: Mapping[str, Any]) -> Dict[str, Tuple[Any, Any]]:
    """The dotted keys whose values differ between two configs, as ``{key: (saved, now)}`` (a key only one
    of them has: ``"(absent)"`` on the other side).

    Examples:
        >>> config_changes({"env": {"n": 8, "id": "a"}, "seed": 0}, {"env": {"n": 4, "id": "a"}, "lr": 1})
        {'env.n': (8, 4), 'lr': ('(absent)', 1), 'seed': (0, '(absent)')}
    """
    flat_saved, flat_now = _flatten(saved), _flatten(now)
    absent = "(absent)"
    return {key: (flat_saved.get(key, absent), flat_now.get(key, absent))
            for key in sorted(set(flat_saved) | set(flat_now))
            if key not in flat_saved or key not in flat_now or flat_saved[key] != flat_now[key]}


def _flatten(cfg: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    for key, value in cfg.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, path + "."))
        else:  # JSON's view, so a list and a tuple, 1 and 1.0, inf and Infinity compare as config.json has them
            flat[path] = json.loads(json.dumps(value, default=str))
    return flat


def warn_config_changes(cfg: Mapping[str, Any]) -> Dict[str, Tuple[Any, Any]]:
    """Before a resumed run writes its config: one warning line listing the keys (dotted, old -> new) in
    which ``cfg`` differs from the run's ``config.json``, leaving out ``QUIET_KEYS`` (a changed stop value
    is logged at info level). Returns every difference, quiet keys included (none when there is no
    ``config.json`` to compare with)."""
    run = RunParams.pick(cfg).exp_name
    path = os.path.join(run, CONFIG_FILE)
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    changes = config_changes(saved, cfg)
    loud = [f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items() if key not in QUIET_KEYS]
    if loud:
        logger.warning("resuming %s with a config that differs from its config.json in %d key(s): %s", run,
                       len(loud), "; ".join(loud))
    if "env.stop_value" in changes:
        logger.info("resuming %s with env.stop_value %r -> %r", run, *changes["env.stop_value"])
    return changes


def _restore_shards(path: str, saved_ranks: int, main_state: Optional[Dict[str, Any]], train_iter: int, rank: int,
                    world_size: int, buffer: Any, empty_buffer: Callable[[], Any], warmup: int = 0) -> None:
    """Fill ``buffer`` with the saved shards this rank takes (module docstring); ``warmup``: the transitions this
    rank's learner waits for in an empty buffer (its share of ``policy.random_collect_size``), said once when the
    checkpoint holds no replay (a wait of one batch goes unsaid)."""
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
        if rank == 0 and warmup > 0:  # unsaid, an off-policy run made no update for its whole warm-up again
            logger.warning("resuming with an empty replay buffer: %s holds none (ckpt.save_replay_buffer=False), so "
                           "the learner waits until the buffer holds %d transitions again (policy.random_collect_size, "
                           "now collected by the policy) before it updates; ckpt.save_replay_buffer=True keeps the "
                           "buffer in latest", path, warmup)
        return
    try:
        loaded = load_shards(buffer, plan, lambda n: read(n)["replay_buffer"], empty_buffer)
    except (TypeError, ValueError) as err:  # frame stacks, sequences, hindsight: only whole shards of the same envs
        _load_one_whole_shard(buffer, plan, read, rank, saved_ranks, world_size, err)
        return
    if saved_ranks != world_size:
        logger.info("rank %d of %d took %d transitions from saved shard(s) %s of %d", rank, world_size, loaded,
                    sorted({piece[0] for piece in plan}), saved_ranks)


def _load_one_whole_shard(buffer: Any, plan: list, read: Callable[[int], Any], rank: int, saved_ranks: int,
                          world_size: int, err: Exception) -> None:
    """What a storage that cannot merge shards (its transitions read their neighbours: frame stacks, sequences,
    hindsight episodes) keeps on fewer ranks than saved it: the first readable whole shard of ``plan`` (this
    rank's own, unless its file was missing or stale), as saved, rather than nothing; the other shards are left
    out, with a warning naming them. A shard dealt out in parts (more ranks than saved it), or of another env
    layout, leaves the buffer empty, with a warning; a plan of one whole shard failed as it is (not tried twice)."""
    whole = [shard for shard, _, parts in plan if parts == 1]
    if whole and len(plan) > 1:
        try:
            buffer.load_state_dict(read(whole[0])["replay_buffer"])
        except (TypeError, ValueError) as why:
            err = why
        else:
            logger.warning("rank %d keeps saved shard %d alone (%d transitions) and leaves out shard(s) %s: the %d "
                           "saved shard(s) cannot be merged into this run's %d rank(s) (%s)", rank, whole[0],
                           len(buffer), whole[1:], saved_ranks, world_size, err)
            return
    logger.warning("rank %d starts with an empty replay buffer: the %d saved shard(s) cannot be loaded into "
                   "this run's %d rank(s) (%s)", rank, saved_ranks, world_size, err)


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
