"""``policy.learn.lr_schedule='linear'`` through the pipeline: the learning rate follows the env steps done out of
the budget, a resume continues the same line, and a run without a budget is refused before it makes a directory."""
from __future__ import annotations

import copy
import os

import pytest

from engine.config import ConfigError
from pipelines import build_pipeline


def _config(tmp_path):
    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config

    main = copy.deepcopy(main_config)
    main.exp_name = str(tmp_path / "run")
    main.log = dict(progress=False, print_freq=1)
    main.env.stop_value = float("inf")
    main.env.collector_env_num = 4
    main.policy.collect.n_sample = 64
    main.policy.learn.batch_size = 64
    main.policy.learn.epoch_per_collect = 1
    main.policy.learn.lr_schedule = "linear"
    return main, copy.deepcopy(create_config)


def _train(main, create, max_env_step, **kwargs):
    """``(env steps done before the iteration, the rate its updates used)`` of each iteration of a run."""
    pipeline = build_pipeline((main, create), seed=0, max_env_step=max_env_step, **kwargs)
    rates, before = [], {}
    pipeline.insert_before("lr_schedule", lambda ctx: before.update(step=ctx.env_step), name="before")
    pipeline.insert_after("learner", lambda ctx: rates.append(
        (before["step"], pipeline.policy.optimizer_step.optimizer.param_groups[0]["lr"])), name="rate")
    summary = pipeline.run()
    return summary["run_dir"], rates


def test_the_rate_falls_linearly_with_the_env_steps_and_a_resume_continues_the_line(tmp_path):
    main, create = _config(tmp_path)
    rate = main.policy.learn.learning_rate
    run_dir, rates = _train(main, create, 256)
    assert rates == [(done, pytest.approx(rate * (1 - done / 256))) for done in (0, 64, 128, 192)]
    _, rates = _train(main, create, 512, exp_name=run_dir, resume=True)  # the same line over the larger budget
    assert rates == [(done, pytest.approx(rate * (1 - done / 512))) for done in (256, 320, 384, 448)]


def test_a_linear_schedule_without_a_budget_is_refused_before_the_run_directory(tmp_path):
    main, create = _config(tmp_path)
    with pytest.raises(ConfigError, match=r"lr_schedule='linear' anneals the learning rate to 0 over the run's env "
                                          r"steps, and this run has no --max-env-step: give --max-env-step N, "
                                          r"policy.learn.lr_anneal_env_steps=N"):
        build_pipeline((main, create), exp_name=main.exp_name)
    assert not os.path.exists(main.exp_name)


def test_a_config_that_states_its_span_anneals_over_it_whatever_the_budget(tmp_path):
    main, create = _config(tmp_path)
    main.policy.learn.lr_anneal_env_steps = 128
    rate = main.policy.learn.learning_rate
    _, rates = _train(main, create, 256)  # the budget is twice the span: the rate stays at 0 after it
    assert rates == [(done, pytest.approx(rate * max(0.0, 1 - done / 128))) for done in (0, 64, 128, 192)]
    main.exp_name = str(tmp_path / "unbudgeted")
    main.policy.learn.lr_anneal_env_steps = 256
    _, rates = _train(main, create, None, max_train_iter=2)  # no env-step budget: the span alone
    assert rates == [(done, pytest.approx(rate * (1 - done / 256))) for done in (0, 64)]


def test_the_span_wins_over_a_longer_budget_and_says_so(tmp_path, caplog):
    main, create = _config(tmp_path)
    main.policy.learn.lr_anneal_env_steps = 512
    rate = main.policy.learn.learning_rate
    with caplog.at_level("WARNING", logger="pipelines.stages"):
        _, rates = _train(main, create, 256)  # the span, not the shorter budget, sets the line
    assert rates == [(done, pytest.approx(rate * (1 - done / 512))) for done in (0, 64, 128, 192)]
    assert not [r for r in caplog.records if "lr_anneal_env_steps" in r.getMessage()]
    main.exp_name = str(tmp_path / "longer")
    with caplog.at_level("WARNING", logger="pipelines.stages"):
        _train(main, create, 640)
    assert [r for r in caplog.records if "the learning rate is 0 from env step 512 to the budget, --max-env-step 640"
            in r.getMessage()]


def test_a_span_that_is_not_a_number_is_named(tmp_path):
    main, create = _config(tmp_path)
    main.policy.learn.lr_anneal_env_steps = "100k"  # as the command line passes text it cannot read as a number
    with pytest.raises(ConfigError, match=r"'policy.learn.lr_anneal_env_steps' is '100k': it must be a number"):
        build_pipeline((main, create), exp_name=main.exp_name, max_env_step=256)
