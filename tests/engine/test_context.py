from __future__ import annotations

import pytest

from engine import Context, OfflineRLContext, OnlineRLContext


def test_context_renew_resets_per_step_and_keeps_persistent():
    ctx = OnlineRLContext()
    ctx.env_step, ctx.train_iter, ctx.eval_value = 10, 3, 1.5
    ctx.trajectories, ctx.train_output, ctx.episodes, ctx.train_data = [1], {"loss": 1}, [2], [3]
    ctx.collect_kwargs["eps"] = 0.1
    ctx.renew()
    assert (ctx.env_step, ctx.train_iter, ctx.eval_value, ctx.total_step) == (10, 3, 1.5, 1)
    assert ctx.trajectories is None and ctx.train_output is None and ctx.episodes is None
    assert ctx.train_data is None and ctx.collect_kwargs == {}


def test_context_declares_required_persistent_fields():
    ctx = OnlineRLContext()
    for name in ["total_step", "env_step", "env_episode", "train_iter", "last_eval_value",
                 "last_eval_iter", "eval_value"]:
        assert name in ctx.persistent_state()


def test_context_user_attribute_is_per_step_unless_kept():
    ctx = OnlineRLContext()
    ctx.scratch = 1
    ctx.renew()
    assert not hasattr(ctx, "scratch")
    ctx.keep("best")
    ctx.best = 5
    for _ in range(3):  # every later renew, not just one
        ctx.renew()
        assert ctx.best == 5


def test_context_keep_declared_per_step_field():
    ctx = OnlineRLContext()
    ctx.keep("train_output", "collect_kwargs")
    ctx.train_output = {"loss": 2.0}
    ctx.collect_kwargs["eps"] = 0.5
    ctx.renew()
    assert ctx.train_output == {"loss": 2.0} and ctx.collect_kwargs == {"eps": 0.5}
    assert OnlineRLContext().train_output is None  # other instances unaffected


def test_context_keep_rejects_non_string():
    with pytest.raises(TypeError):
        Context().keep(3)


def test_offline_context_fields():
    ctx = OfflineRLContext()
    ctx.train_data = 1
    ctx.train_iter = 4
    ctx.renew()
    assert ctx.train_data is None and ctx.train_iter == 4


def test_context_persistent_state_round_trip():
    ctx = OnlineRLContext(env_step=5, train_iter=2)
    other = OnlineRLContext()
    other.load_persistent_state(ctx.persistent_state())
    assert other.env_step == 5 and other.train_iter == 2
