"""Taxi (issue 31 item 6, the masked task): ``--env Taxi-v4`` picks the taxi family, whose legal-action mask comes
from ``info["action_mask"]`` with no configuration. With ``env.action_mask_check`` every action of a run is checked
against its mask, so a finished run proves that DQN's epsilon-greedy (its random branch too), PPO's sampling and
the greedy evaluation never took an illegal action."""
from __future__ import annotations

import copy

import gymnasium as gym
import pytest

from commands.algo_env import build_config
from data.action_masks import ActionMaskError
from pipelines import serial_pipeline


def test_algo_env_picks_the_taxi_family_at_gymnasiums_threshold():
    from engine.registry import ENV_REGISTRY

    main, create = build_config("dqn", "Taxi-v4")
    assert create["env"]["type"] == "taxi" and "stop_value" not in main["env"]
    assert ENV_REGISTRY.get("taxi").default_config()["stop_value"] == gym.spec("Taxi-v4").reward_threshold == 8


def _short(algo, tmp_path, **env):
    main, create = build_config(algo, "Taxi-v4")
    main.update(exp_name=str(tmp_path / algo), log=dict(progress=False))
    main["env"].update(collector_env_num=4, evaluator_env_num=2, n_evaluator_episode=2, **env)
    learn = dict(batch_size=32, **(dict(epoch_per_collect=1) if algo == "ppo" else {}))
    main["policy"] = dict(collect=dict(n_sample=256), learn=learn, eval=dict(evaluator=dict(eval_freq=4)))
    return main, create


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_no_action_of_a_checked_run_is_illegal(tmp_path, algo):
    """Exploration (DQN starts at epsilon 0.95: mostly the random branch), sampling and greedy evaluations."""
    main, create = _short(algo, tmp_path, action_mask_check=True)
    summary = serial_pipeline((main, create), max_env_step=3_000)
    assert summary["env_step"] >= 3_000 and summary["eval_return"] is not None


def test_the_check_catches_a_policy_that_acts_without_the_mask(tmp_path, monkeypatch):
    """PPO made blind to the mask (its sampling unmasked) takes an illegal action within a few hundred steps, and
    the checked env names it: the check above can fail. Masks off in the observation but checked in the env is
    refused at the start."""
    import policies.ppo

    monkeypatch.setattr(policies.ppo, "masked_logits", lambda logits, mask: logits)
    main, create = _short("ppo", tmp_path, action_mask_check=True)
    with pytest.raises(ActionMaskError, match=r"action \d was taken, which the mask forbade"):
        serial_pipeline((copy.deepcopy(main), create), max_env_step=3_000)
    main, create = _short("dqn", tmp_path, action_mask_check=True, action_mask_key="")
    with pytest.raises(ActionMaskError, match="env.action_mask_check=True with env.action_mask_key=''"):
        serial_pipeline((main, create), max_env_step=256)
