"""Cross-rank rules declared on context fields, packed and unpacked as the ddp middleware does, with the
ranks simulated in one process (tests/engine/test_distributed.py runs them for real)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pytest

from engine import OnlineRLContext, StopReason, Sync, persistent, per_step
from engine.sync import SyncPlan


@dataclass
class RulesContext(OnlineRLContext):
    hits: int = persistent(0, sync=Sync.SUM)
    loss: float = per_step(0.0, sync=Sync.MEAN)
    all_ok: bool = persistent(True, sync=Sync.MIN)
    any_bad: bool = persistent(False, sync=Sync.MAX)
    note: Optional[Any] = persistent(None, sync=Sync.RANK0)
    own: int = persistent(0)


def _sync(ctxs, plans):
    """One synchronisation of ``ctxs[r]`` (rank r), as DDPMiddleware does it."""
    rows = [plan.pack(ctx, rank) for rank, (ctx, plan) in enumerate(zip(ctxs, plans))]
    values = plans[0].rank0_values(ctxs[0]) if plans[0].rank0_changed(rows) else None
    for rank, (ctx, plan) in enumerate(zip(ctxs, plans)):
        plan.unpack(ctx, rows, rank, values)


def _ranks(n=3):
    ctxs = [RulesContext() for _ in range(n)]
    plans = [SyncPlan(RulesContext) for _ in range(n)]
    for ctx, plan in zip(ctxs, plans):
        plan.begin(ctx)
    return ctxs, plans


def test_each_rule_agrees_across_ranks():
    ctxs, plans = _ranks()
    for rank, ctx in enumerate(ctxs):
        ctx.hits += rank + 1          # 1 + 2 + 3
        ctx.env_step += 10 * (rank + 1)
        ctx.loss = float(rank)        # mean 1.0
        ctx.all_ok = rank != 2
        ctx.any_bad = rank == 1
        ctx.own = rank
    _sync(ctxs, plans)
    for rank, ctx in enumerate(ctxs):
        assert (ctx.hits, ctx.env_step, ctx.loss, ctx.all_ok, ctx.any_bad) == (6, 60, 1.0, False, True)
        assert type(ctx.hits) is int and type(ctx.all_ok) is bool
        assert ctx.own == rank        # undeclared: left alone


def test_sum_adds_increments_to_the_agreed_start():
    ctxs, plans = _ranks(2)
    for ctx in ctxs:
        ctx.hits += 2
    _sync(ctxs, plans)
    for ctx, plan in zip(ctxs, plans):  # second iteration starts from the agreed 4
        plan.begin(ctx)
        ctx.hits += 1
    _sync(ctxs, plans)
    assert [c.hits for c in ctxs] == [6, 6]


def test_rank0_values_win_and_other_ranks_changes_are_discarded():
    ctxs, plans = _ranks(2)
    ctxs[1].finish, ctxs[1].note = True, "rank 1's own idea"
    _sync(ctxs, plans)
    assert not ctxs[1].finish and ctxs[1].note is None  # nothing changed on rank 0: the agreed start stays
    for ctx, plan in zip(ctxs, plans):
        plan.begin(ctx)
    ctxs[0].finish, ctxs[0].stop_reason = True, StopReason.STOP_VALUE
    ctxs[0].eval_output, ctxs[0].note = {"mean": 42.0}, {"any": ["object"]}
    _sync(ctxs, plans)
    assert ctxs[1].finish and ctxs[1].stop_reason == "stop_value"
    assert ctxs[1].eval_output == {"mean": 42.0} and ctxs[1].note == {"any": ["object"]}


def test_rank0_flag_is_set_only_when_rank0_changed_something():
    ctx = RulesContext()
    plan = SyncPlan(RulesContext)
    plan.begin(ctx)
    assert plan.pack(ctx, 0)[-1] == 0.0
    ctx.eval_value = 3.0
    assert plan.pack(ctx, 0)[-1] == 1.0 and plan.pack(ctx, 1)[-1] == 0.0


def test_distributed_default_of_the_learner_gate():
    assert SyncPlan(OnlineRLContext).distributed_defaults == {"learn_gate": False}


def test_unknown_sync_rule_fails_at_class_definition():
    with pytest.raises(ValueError, match=r"unknown sync rule 'summ'.*Sync\.SUM.*Sync\.RANK0"):
        @dataclass
        class Bad(OnlineRLContext):
            x: int = persistent(0, sync="summ")


def test_numeric_rule_on_a_non_number_names_the_field():
    @dataclass
    class Odd(OnlineRLContext):
        tags: Any = persistent(None, sync=Sync.SUM)

    ctx, plan = Odd(), SyncPlan(Odd)
    plan.begin(ctx)
    ctx.tags = ["a"]
    with pytest.raises(TypeError, match="'tags' is declared sync=SUM but holds list"):
        plan.pack(ctx, 0)


def test_checkpointed_state_holds_plain_values():
    ctx = OnlineRLContext()
    ctx.stop_reason = StopReason.MAX_ENV_STEP
    state = ctx.persistent_state()
    assert state["stop_reason"] == "max_env_step" and type(state["stop_reason"]) is str
