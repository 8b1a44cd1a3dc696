"""Background evaluation (middleware.background_eval): results land later with their snapshot's counters,
training goes on meanwhile, the stop value stops the run (on every DDP rank in the same iteration), the best
checkpoint holds the evaluated weights, and every way a run ends leaves no process behind."""
from __future__ import annotations

import copy
import csv
import doctest
import functools
import json
import os
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import middleware.background_eval
from engine import OnlineRLContext, StopReason, Task
from engine.config import ConfigError, compile_config
from middleware.background_eval import BackgroundEvaluationError, BackgroundEvaluator
from middleware.checkpoint import BEST, LATEST, CkptSaver, load_checkpoint

EPISODE_LENGTH = 4


class ValueEnv(gym.Env):
    """Reward = the action taken; episodes of ``EPISODE_LENGTH`` steps, each ``delay`` seconds long, so an
    episode's return is ``EPISODE_LENGTH`` times the value the policy acts with."""

    def __init__(self, delay: float = 0.0, fail: bool = False):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1e9, 1e9, (1,), np.float32)
        self.delay, self.fail, self._t = delay, fail, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if self.fail:
            raise RuntimeError("the env broke on purpose")
        time.sleep(self.delay)
        self._t += 1
        return np.zeros(1, np.float32), float(action[0]), self._t >= EPISODE_LENGTH, False, {}


class ValuePolicy:
    """Acts with the value it was sent: the weights are ``{"value": v}``."""

    def __init__(self):
        self.value = 0.0

    def load(self, weights):
        self.value = float(weights["value"])

    def forward(self, obs):
        return {"action": torch.full((len(obs), 1), self.value)}


def value_side(delay=0.0, fail_env=False, fail_build=False, num_envs=2, build_s=0.0):
    """The evaluation process's side (``WorkerSide``): ValuePolicy on ``num_envs`` ValueEnvs, built in
    ``build_s`` seconds."""
    time.sleep(build_s)
    if fail_build:
        raise RuntimeError("the build failed on purpose")
    env = gym.vector.SyncVectorEnv([functools.partial(ValueEnv, delay, fail_env) for _ in range(num_envs)],
                                   autoreset_mode=AutoresetMode.SAME_STEP)
    policy = ValuePolicy()
    return policy, policy.load, env


class ToyLearner:
    """A learn state that every update changes: ``w`` = the number of updates."""

    def __init__(self):
        self.w = torch.zeros(3)

    def state_dict(self):
        return {"model": {"w": self.w}}

    def update(self, ctx):
        ctx.train_iter += 1
        ctx.env_step += 10
        self.w.add_(1.0)  # in place, as an optimizer step is


def _evaluator(delay=0.0, stop_value=float("inf"), learner=None, **kwargs):
    learner = learner or ToyLearner()
    side = functools.partial(value_side, delay, kwargs.pop("fail_env", False), kwargs.pop("fail_build", False),
                             build_s=kwargs.pop("build_s", 0.0))
    return BackgroundEvaluator(side, lambda: {"value": float(learner.w[0])}, eval_freq=kwargs.pop("eval_freq", 1),
                               n_episode=2, stop_value=stop_value, **kwargs), learner


def _run(evaluator, learner, max_step=2000, evaluations=None, extra=(), step_s=0.002, saver=None):
    """Task: evaluator, learner, [saver], a recorder of each new evaluation (with the train_iter and loop
    iteration it was published at; it finishes the run after ``evaluations``), extra stages."""
    seen, waited = [], []

    def record(ctx):
        if ctx.eval_output is not None and (not seen or seen[-1][0] is not ctx.eval_output):
            seen.append((ctx.eval_output, ctx.train_iter, ctx.total_step))
            ctx.finish = ctx.finish or (evaluations is not None and len(seen) >= evaluations)

    def learn(ctx):
        learner.update(ctx)
        time.sleep(step_s)

    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(evaluator)
        task.use(learn)
        if saver is not None:
            task.use(saver)
        task.use(record)
        for stage in extra:
            task.use(stage)
        task.run(max_step=max_step)
    return task.ctx, seen


def test_background_eval_result_lands_later_with_the_snapshots_counters():
    evaluator, learner = _evaluator(delay=0.02, eval_freq=5)
    ctx, seen = _run(evaluator, learner, evaluations=2)
    assert len(seen) == 2
    for output, published_iter, _ in seen:
        # the episodes acted with the snapshot's weights (w = train_iter at the snapshot)
        assert output["mean"] == EPISODE_LENGTH * output["train_iter"]
        assert output["env_step"] == 10 * output["train_iter"]
        assert output["background"] and output["published_train_iter"] > output["train_iter"]
    assert ctx.last_eval_iter == seen[-1][0]["train_iter"]


def test_background_eval_training_continues_while_evaluation_runs():
    evaluator, learner = _evaluator(delay=0.05, eval_freq=1)  # 2 episodes x 4 steps x 50 ms: 0.2 s or more
    ctx, seen = _run(evaluator, learner, evaluations=2, step_s=0.005)
    first, published_iter, _ = seen[0]
    assert published_iter - first["train_iter"] >= 5, "the loop waited for the evaluation"
    # evaluations never overlap and none is queued: each starts after the previous one was published
    for (prev, _, _), (nxt, _, _) in zip(seen, seen[1:]):
        assert nxt["train_iter"] > prev["published_train_iter"]


def test_background_eval_stop_value_reached_stops_the_run():
    evaluator, learner = _evaluator(delay=0.01, stop_value=EPISODE_LENGTH * 8, eval_freq=4)
    ctx, seen = _run(evaluator, learner)
    assert ctx.stop_reason == StopReason.STOP_VALUE and ctx.eval_value >= EPISODE_LENGTH * 8
    assert seen[-1][2] == ctx.total_step - 1  # it stopped in the iteration the result was published
    assert evaluator.finish_report()["at_finish"] == "none"
    assert not evaluator._worker.busy


def test_background_eval_best_checkpoint_holds_the_evaluated_snapshot(tmp_path):
    learner = ToyLearner()
    evaluator, _ = _evaluator(delay=0.02, eval_freq=3, learner=learner, learn_state=learner.state_dict)
    saver = CkptSaver(learner, str(tmp_path / "ckpt"))
    saver.save_best_from(evaluator.evaluated_state)
    ctx, seen = _run(evaluator, learner, evaluations=3, saver=saver)
    best = load_checkpoint(str(tmp_path / "ckpt" / BEST))
    last = seen[-1][0]  # values grow with w: the last evaluation is the best
    assert best["best_eval_value"] == last["mean"] == ctx.eval_value
    # the weights evaluated (w at the snapshot), not those of when the result came in
    assert best["policy"]["model"]["w"].tolist() == [float(last["train_iter"])] * 3
    assert best["ctx"]["train_iter"] == last["train_iter"] and best["ctx"]["env_step"] == last["env_step"]
    assert best["ctx"]["eval_value"] == last["mean"] and best["ctx"]["last_eval_iter"] == last["train_iter"]
    latest = load_checkpoint(str(tmp_path / "ckpt" / LATEST))  # the newest state, at finish
    assert latest["policy"]["model"]["w"].tolist() == [float(ctx.train_iter)] * 3


def test_background_eval_waits_for_the_running_evaluation_when_the_run_finishes():
    evaluator, learner = _evaluator(delay=0.03, eval_freq=1)

    def finish(ctx):  # a stage of the user's ends the run (not a budget) while an evaluation runs
        if evaluator.running is not None and ctx.train_iter >= evaluator.running.train_iter + 2:
            ctx.finish, ctx.stop_reason = True, StopReason.STOP_VALUE

    ctx, seen = _run(evaluator, learner, extra=[finish])
    report = evaluator.finish_report()
    assert report["at_finish"] == "waited" and ctx.stop_reason == StopReason.STOP_VALUE
    # published in the last iteration (after the recorder ran), with its snapshot's counters
    assert ctx.eval_output["published_train_iter"] == ctx.train_iter > ctx.last_eval_iter
    assert ctx.eval_value == EPISODE_LENGTH * ctx.last_eval_iter and not any(o is ctx.eval_output for o, *_ in seen)


def test_a_budget_ends_the_run_with_an_evaluation_of_its_last_weights():
    """As without background evaluation (middleware.evaluator.final_evaluation): a budget that ends the run with
    updates no evaluation has seen gets its last weights evaluated and published in that last iteration; an
    evaluation of older weights still running is cancelled for it."""
    evaluator, learner = _evaluator(delay=0.03, eval_freq=1)

    def budget(ctx):  # the budget runs out while an evaluation of older weights runs
        if evaluator.running is not None and ctx.train_iter >= evaluator.running.train_iter + 2:
            ctx.finish, ctx.stop_reason = True, StopReason.MAX_TRAIN_ITER

    ctx, seen = _run(evaluator, learner, extra=[budget])
    assert evaluator.finish_report()["at_finish"] == "final" and ctx.stop_reason == StopReason.MAX_TRAIN_ITER
    assert evaluator.evaluations == len(seen) + 1  # the older one was cancelled, not published
    assert ctx.last_eval_iter == ctx.train_iter == ctx.eval_output["published_train_iter"]
    assert ctx.eval_value == EPISODE_LENGTH * ctx.train_iter  # the episodes acted with the last weights
    assert not any(o is ctx.eval_output for o, *_ in seen) and not evaluator._worker.busy


def test_a_budget_shorter_than_the_process_s_build_still_ends_with_an_evaluation():
    evaluator, learner = _evaluator(eval_freq=10**6, build_s=0.5)  # built after the run: only the final one

    def budget(ctx):
        if ctx.train_iter >= 3:
            ctx.finish, ctx.stop_reason = True, StopReason.MAX_ENV_STEP

    ctx, seen = _run(evaluator, learner, extra=[budget], step_s=0.0)
    assert evaluator.finish_report()["at_finish"] == "final" and evaluator.evaluations == 1
    assert ctx.last_eval_iter == ctx.train_iter == 3 and ctx.eval_value == EPISODE_LENGTH * 3


def test_an_evaluation_published_in_the_last_iteration_is_counted_before_the_final_one_replaces_it():
    evaluator, learner = _evaluator(delay=0.0, eval_freq=1)
    counted = []
    evaluator.seen = lambda ctx: counted.append(ctx.eval_output)

    def budget(ctx):  # the budget ends the run in the iteration a (background) evaluation is published (before
        # this iteration's update: published_train_iter is the count then)
        if ctx.eval_output is not None and ctx.eval_output["published_train_iter"] == ctx.train_iter - 1:
            ctx.finish, ctx.stop_reason = True, StopReason.MAX_TRAIN_ITER

    ctx, seen = _run(evaluator, learner, extra=[budget])
    assert evaluator.finish_report()["at_finish"] == "final" and counted == [seen[-1][0]]
    assert ctx.last_eval_iter == ctx.train_iter > seen[-1][0]["train_iter"]


def test_where_an_evaluation_takes_longer_than_the_time_left_the_running_one_is_waited_for():
    # finish_timeout_s generous: the evaluation process runs at a lower priority, and on a loaded machine its 0.4 s
    # of episodes took longer than a 0.7 s limit; the last evaluation's duration is set to say it would not fit
    evaluator, learner = _evaluator(delay=0.05, eval_freq=1, finish_timeout_s=60)

    def budget(ctx):
        if evaluator.evaluations >= 1 and evaluator.running is not None:
            evaluator._seconds = evaluator._finish_timeout  # longer than half the time left: wait, do not cancel
            ctx.finish, ctx.stop_reason = True, StopReason.MAX_TRAIN_ITER

    ctx, _ = _run(evaluator, learner, extra=[budget], step_s=0.01)
    assert evaluator.finish_report()["at_finish"] == "waited" and ctx.last_eval_iter < ctx.train_iter


def test_a_final_evaluation_that_cannot_be_made_in_time_says_so():
    evaluator, learner = _evaluator(eval_freq=10**6, build_s=3.0, finish_timeout_s=0.2)
    start = time.perf_counter()

    def budget(ctx):
        if ctx.train_iter >= 2:
            ctx.finish, ctx.stop_reason = True, StopReason.MAX_ENV_STEP

    ctx, _ = _run(evaluator, learner, extra=[budget])
    assert evaluator.finish_report()["at_finish"] == "timed_out" and ctx.eval_output is None
    assert time.perf_counter() - start < 2.5


def test_no_final_evaluation_where_the_last_weights_were_evaluated_or_the_run_did_not_end_at_a_budget():
    from middleware.background_eval import Snapshot

    evaluator, learner = _evaluator(eval_freq=10**6)
    ctx = OnlineRLContext()
    ctx.finish, ctx.stop_reason, ctx.train_iter, ctx.last_eval_iter = True, StopReason.MAX_TRAIN_ITER, 5, 4
    assert evaluator._final_due(ctx)
    ctx.last_eval_iter = 5  # the last weights were evaluated
    assert not evaluator._final_due(ctx)
    ctx.last_eval_iter, evaluator._running = 4, Snapshot(5, 50, time.perf_counter())  # they are being evaluated
    assert not evaluator._final_due(ctx)
    evaluator._running, ctx.stop_reason = None, StopReason.STOP_VALUE  # not a budget
    assert not evaluator._final_due(ctx)
    evaluator.finish_report()
    interrupted, learner = _evaluator(delay=0.0, eval_freq=10**6)
    ctx, _ = _run(interrupted, learner, max_step=5)  # task.run(max_step): no budget of the run's
    assert interrupted.finish_report()["at_finish"] != "final" and ctx.last_eval_iter < ctx.train_iter


def test_background_eval_finish_wait_is_bounded_then_cancelled():
    evaluator, learner = _evaluator(delay=0.5, eval_freq=1, finish_timeout_s=0.1)
    finished_at = []

    def end(ctx):  # timed from the end of the run: the process's start (at a lower priority) is not the wait's
        if evaluator.running is not None:
            ctx.finish = True
            finished_at.append(time.perf_counter())

    ctx, _ = _run(evaluator, learner, extra=[end])
    assert evaluator.finish_report()["at_finish"] == "timed_out"
    assert time.perf_counter() - finished_at[0] < 3.0 and ctx.eval_output is None


@pytest.mark.parametrize("how", [RuntimeError, KeyboardInterrupt])
def test_background_eval_error_or_ctrl_c_cancels_and_leaves_no_process(how):
    evaluator, learner = _evaluator(delay=0.5, eval_freq=1)

    raised_at = []

    def trouble(ctx):
        if evaluator.running is not None:
            raised_at.append(time.perf_counter())  # timed from here: the process's start is not the cancel's
            raise how("stopped on purpose")

    with pytest.raises(how):
        _run(evaluator, learner, extra=[trouble])
    assert evaluator.finish_report()["at_finish"] == "cancelled"
    assert time.perf_counter() - raised_at[0] < 5.0
    assert evaluator._worker._process is None  # closed: joined, not left running


def test_background_eval_failures_are_named():
    evaluator, learner = _evaluator(fail_build=True)
    with pytest.raises(BackgroundEvaluationError, match="building its policy and envs(.|\n)*build failed on purpose"):
        _run(evaluator, learner)
    evaluator, learner = _evaluator(fail_env=True, eval_freq=2)
    with pytest.raises(BackgroundEvaluationError, match=r"weights of train_iter \d+ (.|\n)*env broke on purpose"):
        _run(evaluator, learner)


def test_background_eval_bad_arguments_are_named():
    with pytest.raises(TypeError, match="needs callables"):
        BackgroundEvaluator("not a builder", dict, eval_freq=1, n_episode=1)
    with pytest.raises(ValueError, match="n_evaluator_episode must be positive"):
        BackgroundEvaluator(value_side, dict, eval_freq=1, n_episode=0)
    with pytest.raises(ValueError, match="start_method"):
        BackgroundEvaluator(value_side, dict, eval_freq=1, n_episode=1, start_method="thread")
    # spawn pickles the build function: a lambda cannot go, and the error says why
    spawned = BackgroundEvaluator(lambda: value_side(), dict, eval_freq=1, n_episode=1, start_method="spawn")
    with pytest.raises(BackgroundEvaluationError, match="must pickle"):
        _run(spawned, ToyLearner(), max_step=1)


def test_background_eval_config_key_is_a_checked_bool(quick_cartpole_config):
    main, create = quick_cartpole_config
    assert compile_config(main, create, save=False).policy.eval.evaluator.background is False
    main.policy.eval.evaluator.background = "yes"
    with pytest.raises(ConfigError, match="background"):
        compile_config(main, create, save=False)


def test_background_eval_in_the_standard_pipeline(quick_cartpole_config):
    from pipelines import build_pipeline

    main, create = quick_cartpole_config
    main.policy.eval.evaluator.background = True
    main.env.stop_value = 1e9
    main.policy.eval.evaluator.eval_freq = 10
    pipeline = build_pipeline((main, create), max_env_step=1536)
    seen, waited = [], []

    def record(ctx):
        if ctx.eval_output is not None and (not seen or seen[-1] is not ctx.eval_output):
            seen.append(ctx.eval_output)
        if not seen:  # on a loaded machine the worker may start after the whole budget: hold the loop back for it
            time.sleep(0.2)
            if ctx.env_step >= 1536 - 64 and not waited:  # the last iterations: give a slow worker up to 30 s more
                waited.append(True)
                time.sleep(30)

    pipeline.insert_after("evaluator", record, name="record")
    summary = pipeline.run()
    assert summary["background_eval"]["evaluations"] == summary["evaluations"] >= 2
    # the budget ends the run: its last weights are evaluated, counted, and in progress.csv's last row
    assert summary["background_eval"]["at_finish"] == "final"
    assert pipeline.ctx.last_eval_iter == summary["train_iter"] and summary["eval_return"] == pipeline.ctx.eval_value
    with open(os.path.join(pipeline.cfg.exp_name, "progress.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["eval/episode_return_mean"]]
    assert len(rows) == summary["evaluations"] and int(rows[-1]["train_iter"]) == summary["train_iter"]
    # every evaluation row sits at its snapshot's env_step and train_iter, and only there
    assert [(int(r["env_step"]), int(r["train_iter"])) for r in rows][:len(seen)] == \
        [(o["env_step"], o["train_iter"]) for o in seen]
    best = load_checkpoint(os.path.join(pipeline.cfg.exp_name, "ckpt", BEST))
    assert best["ctx"]["train_iter"] == best["ctx"]["last_eval_iter"]  # the evaluated weights' own state
    with open(os.path.join(pipeline.cfg.exp_name, "summary.json")) as f:
        assert json.load(f)["background_eval"]["evaluations"] == summary["evaluations"]


def test_acting_weights_are_a_copy_that_loads_into_another_policy(quick_cartpole_config):
    from engine.registry import POLICY_REGISTRY

    main, create = quick_cartpole_config
    cfg = compile_config(main, create, save=False)
    space = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)
    policy_cls = POLICY_REGISTRY.get("dqn")
    torch.manual_seed(0)
    trained = policy_cls(cfg.policy, *space)
    torch.manual_seed(1)
    other = policy_cls(cfg.policy, *space)
    weights = trained.acting_weights()
    other.load_acting_weights(copy.deepcopy(weights))
    obs = torch.from_numpy(np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32))
    assert (other.eval_mode.forward(obs)["action"] == trained.eval_mode.forward(obs)["action"]).all()
    with torch.no_grad():
        next(trained.model.parameters()).add_(1.0)
    assert not np.allclose(next(iter(weights.values())), next(trained.model.parameters()).detach().numpy())


def _evaluate_once(worker, weights, n_episode):
    """Start ``worker``, wait until it is ready, and check one evaluation of ``n_episode`` episodes."""
    worker.start()
    deadline = time.monotonic() + 60
    while not worker.idle and time.monotonic() < deadline:
        worker.poll(0.1)
    assert worker.idle
    worker.submit(weights, seed=0, n_episode=n_episode)
    reply = worker.poll(30)
    assert reply is not None and not reply.cancelled and len(reply.episodes["returns"]) == n_episode


def test_eval_side_pickles_and_evaluates_in_a_spawned_process(quick_cartpole_config):
    """The spawn path (a process acting on a GPU): the pipeline's EvalSide goes by pickle and builds there."""
    from middleware.eval_worker import EvalWorker
    from pipelines import build_pipeline
    from pipelines.stages import EvalSide

    pipeline = build_pipeline(quick_cartpole_config)
    try:
        worker = EvalWorker(EvalSide.of(pipeline.cfg, pipeline.policy), start_method="spawn")
        _evaluate_once(worker, pipeline.policy.acting_weights(), n_episode=3)
        assert worker.num_envs == pipeline.cfg.env.evaluator_env_num
    finally:
        worker.close()
        pipeline.close()
    assert worker._process is None


def test_a_forked_evaluation_worker_never_initialises_cuda(quick_cartpole_config, monkeypatch):
    """The default start on Linux is fork, from a trainer that may hold a CUDA context (issue 24): the child
    must never initialise CUDA. The trap below is inherited by the forked child (CUDA initialises through
    ``torch.cuda._lazy_init``, C++ allocations included), so a CUDA call anywhere on the worker's path (its
    build, the weights it loads, the evaluation) fails the evaluation."""
    from middleware.eval_worker import EvalWorker
    from pipelines import build_pipeline
    from pipelines.stages import EvalSide

    def trap(*args, **kwargs):
        raise RuntimeError("CUDA was initialised in the evaluation worker")

    pipeline = build_pipeline(quick_cartpole_config)
    monkeypatch.setattr(torch.cuda, "_lazy_init", trap)
    worker = EvalWorker(EvalSide.of(pipeline.cfg, pipeline.policy), start_method="fork")
    try:
        _evaluate_once(worker, pipeline.policy.acting_weights(), n_episode=2)
    finally:
        worker.close()
        pipeline.close()


def _children(pid):
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(name))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the worker through /proc")
def test_a_trainer_killed_outright_leaves_no_evaluation_process(tmp_path, outliving):
    """kill -9 (the OOM killer, a scheduler's last word) runs no cleanup: the forked evaluation process must see its
    parent gone by itself. It held the parent's end of their pipe too, so it waited for a job for good."""
    import signal
    import subprocess
    import sys

    config = os.path.join(os.path.dirname(middleware.background_eval.__file__), "..", "dizoo", "classic_control",
                          "cartpole", "config", "cartpole_dqn_config.py")
    trainer = subprocess.Popen([sys.executable, "-m", "commands", "train", "-c", config, "--no-progress",
                                "--exp-name", str(tmp_path / "run"), "--max-env-step", "10000000",
                                "env.stop_value=none", "policy.eval.evaluator.background=true",
                                "policy.eval.evaluator.eval_freq=20"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _children(trainer.pid) and time.monotonic() < deadline and trainer.poll() is None:
            time.sleep(0.2)
        workers = _children(trainer.pid)
        assert workers, "the trainer started no evaluation process"
        time.sleep(1.0)  # the worker built and waiting for a job
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    alive = outliving(workers)
    assert not alive, f"evaluation process(es) {alive} outlived their killed trainer"


def test_background_eval_doctests():
    assert doctest.testmod(middleware.background_eval).failed == 0


# ---- 2 ranks ----------------------------------------------------------------------------------------
def ddp_stop_worker(out_dir):
    """Rank 0 evaluates in the background and reaches the stop value; both ranks record where they stop."""
    from engine.distributed import get_rank
    from middleware.ddp import DDPMiddleware

    class Learn:
        def __init__(self):
            self.model = torch.nn.Linear(1, 1)

        def state_dict(self):
            return {"w": self.model.state_dict()}

        def load_state_dict(self, state):
            self.model.load_state_dict(state["w"])

    rank = get_rank()
    learner = ToyLearner()
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(DDPMiddleware(Learn()))
        if rank == 0:
            task.use(_evaluator(delay=0.02, stop_value=EPISODE_LENGTH * 6, eval_freq=3, learner=learner)[0])

        def learn(ctx):
            ctx.train_iter += 1
            learner.w.add_(1.0)
            time.sleep(0.005)

        task.use(learn)
        task.run(max_step=2000)
        ctx = task.ctx
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"total_step": ctx.total_step, "stop_reason": str(ctx.stop_reason), "eval_value": ctx.eval_value,
                   "last_eval_iter": ctx.last_eval_iter, "train_iter": ctx.train_iter}, f)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_background_eval_under_ddp_stops_both_ranks_in_the_same_iteration(tmp_path):
    from engine import launch

    launch(ddp_stop_worker, nprocs=2, args=(str(tmp_path),), timeout=30.0)
    r0, r1 = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert r0 == r1, (r0, r1)
    assert r0["stop_reason"] == "stop_value" and r0["eval_value"] >= EPISODE_LENGTH * 6
    assert r0["train_iter"] > r0["last_eval_iter"]  # the result came in later than its snapshot
