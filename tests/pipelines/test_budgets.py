"""Every run has an end, or says that it has none: a budget per algorithm family for ``--algo/--env``, an
update budget and a plateau stop for offline runs, a warning for an online run that can only be stopped."""
from __future__ import annotations

import copy
import json

import pytest

from engine.context import OnlineRLContext, StopReason
from middleware import termination_checker


def _evaluated(ctx, iteration, value):
    ctx.last_eval_iter, ctx.eval_value = iteration, value


def test_patience_stops_after_that_many_evaluations_without_a_new_best():
    check = termination_checker(patience=2)
    ctx = OnlineRLContext()
    for iteration, value in [(10, 1.0), (20, 3.0), (30, 2.0), (30, 2.0), (40, 3.5)]:  # 30 twice: one evaluation
        _evaluated(ctx, iteration, value)
        check(ctx)
        assert not ctx.finish, iteration
    _evaluated(ctx, 50, 3.5)  # as good as the best is not better
    check(ctx)
    assert not ctx.finish
    _evaluated(ctx, 60, 0.5)
    check(ctx)
    assert ctx.finish and ctx.stop_reason == StopReason.PLATEAU


@pytest.mark.parametrize("saved_after_counting", [True, False])
def test_patience_goes_on_across_a_resume(saved_after_counting):
    """A resumed run counts on from the evaluations without a new best that it had, against its best, not its
    last evaluation: a run requeued between its evaluations must stop where one that was never stopped does (it
    started over from the last evaluation, so a run preempted often never reached its patience). The checkpoint
    may be written before or after the termination stage counted the iteration's evaluation."""
    check = termination_checker(patience=2)
    ctx = OnlineRLContext()
    for iteration, value in [(10, 3.0), (20, 2.0)]:  # one evaluation without a new best
        _evaluated(ctx, iteration, value)
        if iteration == 20 and not saved_after_counting:
            saved = copy.deepcopy(ctx.persistent_state())  # what a checkpoint holds: a snapshot
        check(ctx)
    if saved_after_counting:
        saved = copy.deepcopy(ctx.persistent_state())
    resumed, check = OnlineRLContext(), termination_checker(patience=2)
    resumed.load_persistent_state(saved)
    check(resumed)  # the first iteration after the resume: no new evaluation yet
    assert not resumed.finish
    _evaluated(resumed, 30, 2.5)  # below the best (3.0), above the last (2.0): the second without a new best
    check(resumed)
    assert resumed.finish and resumed.stop_reason == StopReason.PLATEAU


def test_a_checkpoint_without_a_count_keeps_the_first_evaluation_of_its_resume():
    """A checkpoint written before the count was kept: the first resumed iteration may evaluate before the
    termination stage first runs (the summary records it after); that evaluation counts as the best it is."""
    check = termination_checker(patience=2)
    ctx = OnlineRLContext()
    ctx.evaluation_record = {"best_eval_return": 3.0}
    _evaluated(ctx, 40, 5.0)  # the resumed run's first evaluation, above the record's best
    check(ctx)
    for iteration, value in [(50, 4.0), (60, 4.5)]:  # two without a new best against 5.0
        assert not ctx.finish
        _evaluated(ctx, iteration, value)
        check(ctx)
    assert ctx.finish and ctx.stop_reason == StopReason.PLATEAU


def test_a_bad_patience_is_a_config_error(tmp_path):
    from engine.config import ConfigError
    from pipelines import build_pipeline

    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    main = copy.deepcopy(main_config)
    main.policy.eval.evaluator.patience = -1
    with pytest.raises(ConfigError, match=r"config key .policy.eval.evaluator.patience. is -1: it must be >= 0"):
        build_pipeline((main, create_config), exp_name=str(tmp_path / "run"))


def test_an_online_run_with_no_end_says_so(quick_cartpole_config, caplog):
    from pipelines import build_pipeline

    main, create = quick_cartpole_config
    main.env.stop_value = float("inf")
    with caplog.at_level("WARNING"):
        build_pipeline((main, create)).close()
    assert "this run has no end" in caplog.text and "--max-env-step N" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        build_pipeline((main, create), max_env_step=64).close()
    assert "this run has no end" not in caplog.text


def test_an_offline_run_given_no_budget_stops_at_a_plateau_or_the_default(tmp_path, caplog):
    from pipelines import serial_pipeline
    from pipelines.stages import OFFLINE_DEFAULT_UPDATES

    from dizoo.classic_control.cartpole.config.cartpole_bc_config import create_config, main_config
    main = copy.deepcopy(main_config)
    main.exp_name, main.log = str(tmp_path / "run"), dict(progress=False)
    main.env.stop_value = 1e9
    main.policy.eval.evaluator.eval_freq = 5
    main.policy.eval.evaluator.patience = 2
    with caplog.at_level("WARNING"):
        summary = serial_pipeline((main, create_config))
    assert f"stops at {OFFLINE_DEFAULT_UPDATES:,} updates or after 2 evaluations in a row" in caplog.text
    assert summary["stop_reason"] == "plateau" and summary["train_iter"] < OFFLINE_DEFAULT_UPDATES
    assert json.load(open(f"{summary['run_dir']}/summary.json"))["stop_reason"] == "plateau"


def test_a_run_stopped_on_its_patience_resumes_to_a_larger_budget_with_a_fresh_count(tmp_path, caplog):
    """The count is in the checkpoint: given no budget, a run that stopped on its patience has nothing left to
    train; given a larger one, it trains on to it with its patience counted afresh (its saved count would stop it
    at the next evaluation that is no new best, whatever the budget)."""
    from pipelines import serial_pipeline

    from dizoo.classic_control.cartpole.config.cartpole_bc_config import create_config, main_config
    main = copy.deepcopy(main_config)
    main.exp_name, main.log = str(tmp_path / "run"), dict(progress=False)
    main.env.stop_value = 1e9
    main.policy.eval.evaluator.eval_freq = 5
    main.policy.eval.evaluator.patience = 2
    first = serial_pipeline((copy.deepcopy(main), create_config))
    assert first["stop_reason"] == "plateau"
    with caplog.at_level("WARNING"):
        again = serial_pipeline((copy.deepcopy(main), create_config), resume=True)
    assert again["train_iter"] == first["train_iter"] and again["stop_reason"] == "plateau"
    assert "nothing left to train: it stopped after 2 evaluations in a row without a new best" in caplog.text
    caplog.clear()
    budget = first["train_iter"] + 40  # eight evaluations more
    with caplog.at_level("WARNING"):
        more = serial_pipeline((copy.deepcopy(main), create_config), resume=True, max_train_iter=budget)
    assert "its patience counted afresh" in caplog.text
    assert more["train_iter"] >= first["train_iter"] + 10  # at least the two evaluations of a fresh count
    assert more["stop_reason"] in ("plateau", "max_train_iter")


def test_algo_env_runs_get_their_familys_budget(tmp_path, monkeypatch, capsys):
    from commands.algo_env import default_budget
    from commands.cli import main

    assert default_budget("dqn") == 500_000 and default_budget("ppo") == 1_000_000 and default_budget("bc") is None
    seen = {}
    monkeypatch.setattr("commands.cli.run_from_args", lambda cfg, args: seen.update(budget=args.max_env_step))
    main(["train", "--algo", "dqn", "--env", "CartPole-v1"])
    assert seen["budget"] == 500_000
    main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--max-train-iter", "10"])
    assert seen["budget"] is None


@pytest.mark.parametrize("budget, ends_at", [(1024, 1024), (1030, 1032)])
def test_an_off_policy_run_ends_at_its_env_step_budget_not_a_collect_past_it(budget, ends_at, tmp_path):
    """CartPole DQN collects 96 transitions a call on 8 envs: the last call collects what is left, rounded up to
    whole vector steps of 8 (issue 34: 1,024 ended at 1,056); the progress bar and summary say the same."""
    from pipelines import build_pipeline

    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    main = copy.deepcopy(main_config)
    main.env.stop_value = float("inf")
    summary = build_pipeline((main, create_config), max_env_step=budget, exp_name=str(tmp_path / "run"),
                             progress=False).run()
    assert summary["env_step"] == ends_at and summary["stop_reason"] == StopReason.MAX_ENV_STEP


def test_an_on_policy_rollout_is_never_cut(tmp_path):
    """PPO's rollout length is what GAE and recurrent sequences are built for: the budget stops it after a whole
    rollout."""
    from pipelines import build_pipeline

    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config
    main = copy.deepcopy(main_config)
    main.env.stop_value = float("inf")
    rollout = main.policy.collect.n_sample
    summary = build_pipeline((main, create_config), max_env_step=rollout + 1, exp_name=str(tmp_path / "run"),
                             progress=False).run()
    assert summary["env_step"] == 2 * rollout
