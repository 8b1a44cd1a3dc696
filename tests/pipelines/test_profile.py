"""Where the time goes (``log.profile``, ``--profile``): each stage's share of the iteration time, from the
task loop (``engine.profile``) to the end-of-run table, ``summary.json`` and TensorBoard."""
from __future__ import annotations

import json
import os
import time

import pytest
from tensorboard_events import event_scalars  # tests/, on the path as test_doc_commands is

from engine import OnlineRLContext, Task
from engine.profile import LOOP, StageProfile
from pipelines import build_pipeline
from commands.cli import main
from commands.options import parse_train_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")


def test_profile_generator_stage_is_charged_both_halves_and_not_the_stages_inside():
    def wrap(ctx):
        time.sleep(0.005)
        yield
        time.sleep(0.005)

    def inner(ctx):
        time.sleep(0.05)

    profile = StageProfile()
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(wrap)
        task.use(inner, name="inner")
        task.run(max_step=4, profile=profile)
    seconds = profile.totals()
    assert profile.names == ["wrap", "inner", LOOP] and profile.iterations == 4
    assert seconds["wrap"] >= 4 * 0.010          # forward and backward halves
    assert seconds["wrap"] < 4 * 0.05            # but not inner's sleep, which ran between them
    assert seconds["inner"] >= 4 * 0.05
    assert sum(profile.shares().values()) == pytest.approx(1.0, abs=1e-12)


def test_profile_shares_sum_to_one_in_summary_and_tensorboard(quick_cartpole_config, tmp_path):
    main_cfg, create = quick_cartpole_config
    main_cfg.log.profile = True
    main_cfg.env.stop_value = 1e9  # run the whole budget: 30 iterations, 60 updates, one logger interval
    pipeline = build_pipeline((main_cfg, create), max_env_step=960, exp_name=str(tmp_path / "prof"))
    summary = pipeline.run()
    profile = summary["profile"]
    assert set(profile["share"]) == set(pipeline.names) | {LOOP}
    assert sum(profile["share"].values()) == pytest.approx(1.0, abs=1e-9)
    assert profile["iterations"] == 30
    assert profile["iteration_s"] == pytest.approx(sum(profile["seconds"].values()))
    assert profile["share"]["learner"] > profile["share"]["termination"]
    with open(tmp_path / "prof" / "summary.json") as f:
        on_disk = json.load(f)["profile"]
    assert on_disk["share"] == pytest.approx(profile["share"]) and on_disk["iterations"] == 30
    scalars = event_scalars(str(tmp_path / "prof" / "log"))
    shares = {tag: [value for _, value in pairs] for tag, pairs in scalars.items() if tag.startswith("profile/")}
    assert {f"profile/{name}_share" for name in ("collector", "learner", "logger", LOOP)} <= set(shares)
    assert sum(values[0] for values in shares.values()) == pytest.approx(1.0, abs=1e-4)


def test_profile_deliberately_slow_stage_gets_the_biggest_share(quick_cartpole_config, tmp_path):
    main_cfg, create = quick_cartpole_config
    main_cfg.log.profile = True
    pipeline = build_pipeline((main_cfg, create), max_env_step=320, exp_name=str(tmp_path / "slow"))
    # 0.15 s an iteration: the learner's and the evaluations' CPU time grows with the machine's load, a sleep does not
    pipeline.insert_after("learner", lambda ctx: time.sleep(0.15), name="slow")
    share = pipeline.run()["profile"]["share"]
    assert max(share, key=share.get) == "slow", share


def test_profile_off_by_default_no_profile_key(quick_cartpole_config, tmp_path):
    main_cfg, create = quick_cartpole_config
    pipeline = build_pipeline((main_cfg, create), max_env_step=64, exp_name=str(tmp_path / "plain"))
    assert pipeline.profile is None
    summary = pipeline.run()
    assert "profile" not in summary
    with open(tmp_path / "plain" / "summary.json") as f:
        assert "profile" not in json.load(f)


def test_profile_cli_flag_prints_table_and_writes_profile(tmp_path, monkeypatch, capsys):
    assert parse_train_args([]).profile is False and parse_train_args(["--profile"]).profile is True
    monkeypatch.chdir(tmp_path)
    assert main(["train", "-c", CARTPOLE, "--max-env-step", "64", "--exp-name", "p", "--no-progress",
                 "--profile"]) == 0
    out = capsys.readouterr().out
    assert "where the time went" in out and "learner" in out and "total" in out
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert sum(summary["profile"]["share"].values()) == pytest.approx(1.0, abs=1e-9)
