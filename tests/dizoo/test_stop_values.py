"""Stop values that mean "solved" (issue 35): each dizoo env type stops at its env's own threshold, and a run
says at start when no episode can reach its stop value, or nothing would end it."""
from __future__ import annotations

import copy
import logging
import math

import gymnasium as gym
import pytest

from data.envs import highest_return, unreachable_stop_value
from engine.registry import ENV_REGISTRY
from pipelines import build_pipeline


@pytest.mark.parametrize("env_type", ["cartpole", "cartpole_torch", "cartpole_masked", "lunarlander", "hopper",
                                      "halfcheetah", "ant", "invertedpendulum", "taxi"])
def test_each_stop_value_is_gymnasiums_reward_threshold(env_type):
    import dizoo  # noqa: F401  (registers the env types)
    import dizoo.box2d.lunarlander.envs  # noqa: F401
    import dizoo.mujoco.envs  # noqa: F401
    import dizoo.toy_text.envs  # noqa: F401

    kind = ENV_REGISTRY.get(env_type)
    env_id = getattr(kind, "gym_twin", None) or kind.default_config()["env_id"]
    assert kind.default_config()["stop_value"] == gym.spec(env_id).reward_threshold


def test_pendulum_has_no_gymnasium_threshold_and_stops_at_the_published_level():
    from dizoo.classic_control.pendulum.envs import PENDULUM, SOLVED

    assert gym.spec("Pendulum-v1").reward_threshold is None
    assert PENDULUM.default_config()["stop_value"] == SOLVED == -250


def test_the_highest_return_comes_from_the_step_reward_and_the_episode_limit():
    assert highest_return({"env_id": "CartPole-v1"}, best_step_reward=1.0) == 500
    assert highest_return({"env_id": "CartPole-v1", "max_episode_steps": 200}, best_step_reward=1.0) == 200
    assert highest_return({"env_id": "CartPole-v1"}, best_step_reward=1.0, best_return=21) == 21
    assert highest_return({"env_id": "Pendulum-v1"}, best_step_reward=0.0) == 0
    assert highest_return({"env_id": "LunarLander-v3"}) is None  # no bound known: nothing is refused


@pytest.mark.parametrize("env_type, stop, message", [
    ("cartpole", 600, "env.stop_value=600 is above the highest return an episode of CartPole-v1 can reach, 500: no "
                      "evaluation will stop the run (env.stop_value=none says never; <= 500 stops when solved)"),
    ("cartpole_torch", 501, "env.stop_value=501 is above the highest return an episode of CartPole-torch can reach, 500"),
    ("pendulum", 10, "env.stop_value=10 is above the highest return an episode of Pendulum-v1 can reach, 0"),
])
def test_a_stop_value_no_episode_reaches_is_told(env_type, stop, message):
    import dizoo  # noqa: F401

    kind = ENV_REGISTRY.get(env_type)
    env = dict(kind.default_config(), stop_value=stop)
    assert unreachable_stop_value(env, kind.highest_return(env)).startswith(message)


def test_a_reachable_or_absent_stop_value_is_not_told():
    for stop in (500, 475, -math.inf, math.inf):
        assert unreachable_stop_value({"env_id": "CartPole-v1", "stop_value": stop}, 500.0) is None
    assert unreachable_stop_value({"env_id": "LunarLander-v3", "stop_value": 1e9}, None) is None  # no bound known
    env = {"env_id": "CartPole-v1", "stop_value": 475, "max_episode_steps": 200}  # the episode limit the user set
    assert "can reach, 200" in unreachable_stop_value(env, highest_return(env, best_step_reward=1.0))


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "pipelines.stages"]


def test_a_run_says_at_start_when_its_stop_value_cannot_stop_it_or_nothing_would(quick_cartpole_config, caplog):
    main, create = copy.deepcopy(quick_cartpole_config)
    main.env.stop_value = 1000
    unreachable = ("env.stop_value=1000 is above the highest return an episode of CartPole-v1 can reach, 500: no "
                   "evaluation will stop the run (env.stop_value=none says never; <= 500 stops when solved)")
    with caplog.at_level(logging.WARNING, logger="pipelines.stages"):
        build_pipeline((main, create), max_env_step=64).close()
    assert _warnings(caplog) == [unreachable]
    endless = ("this run has no end: no --max-env-step or --max-train-iter, env.stop_value is {} and "
               "policy.eval.evaluator.patience is 0; it trains until stopped (Ctrl-C, which keeps latest); give "
               "--max-env-step N")
    for stop, told in ((1000, [unreachable, endless.format("out of reach")]), (math.inf, [endless.format("none")]),
                       (475, [])):
        main.env.stop_value = stop
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pipelines.stages"):
            build_pipeline((main, create), exp_name=main.exp_name, force=True).close()
        assert _warnings(caplog) == told
