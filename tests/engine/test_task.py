"""The task loop: onion order, every way the loop ends, events, isolation and bad input."""
from __future__ import annotations

import pytest

from engine import Context, MiddlewareError, OnlineRLContext, Task, parallel, serial


def _recorder(log, name):
    def mw(ctx):
        log.append(f"{name}>")
        yield
        log.append(f"<{name}")
    mw.__qualname__ = name
    return mw


def test_task_onion_order_forward_then_reverse():
    log = []
    task = Task()
    with task.start(ctx=Context()):
        task.use(_recorder(log, "a"))
        task.use(lambda ctx: log.append("plain"))
        task.use(_recorder(log, "b"))
        task.run(max_step=1)
    assert log == ["a>", "plain", "b>", "<b", "<a"]


def test_task_iteration_renews_context_after_backward():
    seen = []
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        def producer(ctx):
            assert ctx.trajectories is None  # reset by the previous renew
            ctx.trajectories = [1]
            yield
            seen.append(ctx.trajectories)  # still there on the way back
        task.use(producer)
        task.run(max_step=3)
        assert task.ctx.total_step == 3
    assert seen == [[1], [1], [1]]


@pytest.mark.parametrize("how", ["finish", "max_step", "exception", "keyboard_interrupt"])
def test_task_every_ending_closes_generators_and_emits_finish_once(how):
    events = []
    closed = []
    task = Task()
    task.start(ctx=OnlineRLContext())

    def guarded(ctx):
        try:
            yield
        finally:
            closed.append(ctx.total_step)

    def trigger(ctx):
        if ctx.total_step == 2:
            if how == "finish":
                task.finish = True
            elif how == "exception":
                raise ValueError("boom")
            elif how == "keyboard_interrupt":
                raise KeyboardInterrupt

    task.use(guarded)
    task.use(trigger)
    task.on("finish", lambda ctx: events.append(ctx.total_step))
    expected = {"exception": ValueError, "keyboard_interrupt": KeyboardInterrupt}.get(how)
    if expected:
        with pytest.raises(expected):
            task.run()
    else:
        task.run(max_step=3 if how == "max_step" else None)
    task.stop()
    assert len(events) == 1
    # the generator of every iteration got its teardown, the interrupted one included
    assert closed == [0, 1, 2]
    if how == "finish":
        assert task.ctx.total_step == 3  # the iteration that set finish completed its backward pass


def test_task_finish_stops_after_current_backward():
    log = []
    task = Task()
    with task.start(ctx=Context()):
        def stopper(ctx):
            task.finish = True
            log.append("forward")
        task.use(_recorder(log, "outer"))
        task.use(stopper)
        task.use(lambda ctx: log.append("after"))
        task.run()
    assert log == ["outer>", "forward", "after", "<outer"]


def test_task_finish_listener_exception_reaches_caller():
    task = Task()
    with task.start(ctx=Context()):
        task.use(lambda ctx: None)
        task.on("finish", lambda ctx: (_ for _ in ()).throw(OSError("disk full")))
        with pytest.raises(OSError, match="disk full"):
            task.run(max_step=1)


def test_task_on_finish_method_of_middleware_is_subscribed():
    class Saver:
        def __init__(self):
            self.final = None

        def __call__(self, ctx):
            pass

        def on_finish(self, ctx):
            self.final = ctx.total_step

    saver = Saver()
    task = Task()
    with task.start(ctx=Context()):
        task.use(saver)
        task.run(max_step=4)
    assert saver.final == 4


def test_two_tasks_in_one_process_share_nothing():
    t1, t2 = Task(), Task()
    calls1, calls2, fin1, fin2 = [], [], [], []
    t1.start(ctx=OnlineRLContext())
    t2.start(ctx=OnlineRLContext())
    t1.use(lambda ctx: calls1.append(1))
    t2.use(lambda ctx: calls2.append(2))
    t1.on("finish", fin1.append)
    t2.on("finish", fin2.append)
    t1.ctx.env_step = 7
    t1.run(max_step=2)
    t2.run(max_step=5)
    assert (len(calls1), len(calls2)) == (2, 5)
    assert (len(fin1), len(fin2)) == (1, 1)
    assert t2.ctx.env_step == 0 and t1.ctx is not t2.ctx
    t1.finish = True
    assert not t2.finish


def test_default_task_is_a_task_instance():
    from engine import task
    assert isinstance(task, Task)


def test_events_are_synchronous_and_ordered():
    task = Task()
    task.start()
    out = []
    task.on("x", lambda v: out.append(("a", v)))
    task.once("x", lambda v: out.append(("once", v)))
    task.on("x", lambda v: out.append(("b", v)))
    task.emit("x", 1)
    task.emit("x", 2)
    assert out == [("a", 1), ("once", 1), ("b", 1), ("a", 2), ("b", 2)]
    task.off("x")
    task.emit("x", 3)
    assert len(out) == 5


def test_event_listener_error_surfaces_at_emit():
    task = Task()
    task.start()
    task.on("bad", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        task.emit("bad")


def test_event_off_removes_one_listener():
    task = Task()
    task.start()
    out = []
    fn = out.append
    task.on("e", fn)
    task.on("e", lambda v: out.append(-v))
    task.off("e", fn)
    task.emit("e", 1)
    assert out == [-1]


def test_use_rejects_non_callable_naming_it():
    task = Task()
    task.start()
    with pytest.raises(TypeError, match="42"):
        task.use(42)


def test_generator_yielding_twice_is_an_error_naming_it():
    def greedy(ctx):
        yield
        yield

    task = Task()
    with task.start(ctx=Context()):
        task.use(greedy)
        with pytest.raises(MiddlewareError, match="greedy"):
            task.run(max_step=1)


def test_run_outside_start_is_a_clear_error():
    with pytest.raises(RuntimeError, match="start"):
        Task().run(max_step=1)
    with pytest.raises(RuntimeError, match="start"):
        Task().use(lambda ctx: None)


def test_start_rejects_non_context():
    with pytest.raises(TypeError, match="Context"):
        Task().start(ctx={"env_step": 0})


def test_serial_composes_with_onion_semantics():
    log = []
    task = Task()
    with task.start(ctx=Context()):
        task.use(serial(_recorder(log, "a"), _recorder(log, "b")))
        task.use(_recorder(log, "c"))
        task.run(max_step=1)
    assert log == ["a>", "b>", "c>", "<c", "<b", "<a"]


def test_serial_closes_inner_generators_on_error():
    closed = []

    def inner(ctx):
        try:
            yield
        finally:
            closed.append(True)

    def fail(ctx):
        raise RuntimeError("x")

    task = Task()
    with task.start(ctx=Context()):
        task.use(serial(inner))
        task.use(fail)
        with pytest.raises(RuntimeError):
            task.run(max_step=1)
    assert closed == [True]


def test_parallel_runs_all_and_keeps_onion_order_around_rest():
    import threading
    log = []
    barrier = threading.Barrier(2, timeout=5)

    def side(name):
        def mw(ctx):
            barrier.wait()  # both forward parts must be running at once
            log.append(name + ">")
            yield
            log.append("<" + name)
        return mw

    task = Task()
    with task.start(ctx=Context()):
        task.use(parallel(side("x"), side("y")))
        task.use(lambda ctx: log.append("mid"))
        task.run(max_step=1)
    assert sorted(log[:2]) == ["x>", "y>"] and log[2] == "mid" and sorted(log[3:]) == ["<x", "<y"]


def test_parallel_propagates_error():
    def bad(ctx):
        raise ValueError("in thread")

    task = Task()
    with task.start(ctx=Context()):
        task.use(parallel(bad, lambda ctx: None))
        with pytest.raises(ValueError, match="in thread"):
            task.run(max_step=1)


def test_default_task_instance_does_not_shadow_a_module():
    import importlib
    import types

    import engine
    from engine.loop import Task as LoopTask

    assert isinstance(engine.task, LoopTask)
    assert isinstance(importlib.import_module("engine.loop"), types.ModuleType)
    with pytest.raises(ModuleNotFoundError):  # no module hides behind the instance's name
        importlib.import_module("engine.task")
