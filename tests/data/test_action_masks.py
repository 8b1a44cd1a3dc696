"""Action masks travel in the observation (issue 31, item 3): gymnasium's info["action_mask"] (Taxi-v4) and a dict
observation's mask under another name both reach the policies as the observation's ``action_mask`` key; a mask
missing in a step, of the wrong width, or on continuous actions is named with its env and step."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from data.action_masks import ActionMaskError, ActionMaskInObservation, with_action_mask


class _DictMasked(gym.Env):
    """A dict observation with its mask under a name of its own (``legal``); ``drop_at`` leaves it out once."""

    def __init__(self, drop_at: int = -1, width: int = 3, zero_at: int = -1):
        self.observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32),
                                                  "legal": gym.spaces.MultiBinary(width)})
        self.action_space = gym.spaces.Discrete(3)
        self._t, self._drop_at, self._width, self._zero_at = 0, drop_at, width, zero_at

    def _obs(self):
        obs = {"pos": np.zeros(2, np.float32), "legal": np.eye(self._width, dtype=np.int8)[self._t % self._width]}
        if self._t == self._drop_at:
            del obs["legal"]
        if self._t == self._zero_at:
            obs["legal"] = np.zeros(self._width, np.int8)
        return obs

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        return self._obs(), 0.0, False, self._t >= 5, {}


def test_taxi_info_mask_joins_the_observation_in_every_step_and_vector_env():
    env = with_action_mask(gym.make("Taxi-v4"))
    assert isinstance(env, ActionMaskInObservation)
    assert env.observation_space["observation"] == gym.spaces.Discrete(500)
    obs, info = env.reset(seed=3)
    for _ in range(20):
        assert np.array_equal(obs["action_mask"], info["action_mask"]) and obs["action_mask"].dtype == np.int8
        assert env.observation_space.contains(obs)
        legal = np.flatnonzero(obs["action_mask"])
        obs, _, terminated, truncated, info = env.step(int(legal[0]))
        if terminated or truncated:
            obs, info = env.reset()
    vector = gym.vector.SyncVectorEnv([lambda: with_action_mask(gym.make("Taxi-v4")) for _ in range(3)])
    batched, _ = vector.reset(seed=0)
    assert batched["action_mask"].shape == (3, 6) and batched["observation"].shape == (3,)


def test_a_dict_observation_s_mask_under_another_name_is_renamed():
    env = with_action_mask(_DictMasked(), key="legal")
    assert sorted(env.observation_space.spaces) == ["action_mask", "pos"]
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"].tolist() == [1, 0, 0] and "legal" not in obs
    assert env.step(0)[0]["action_mask"].tolist() == [0, 1, 0]


def test_envs_without_a_mask_and_dicts_with_the_conventional_key_are_left_alone():
    plain = gym.make("CartPole-v1")
    assert with_action_mask(plain) is plain
    conventional = gym.make("Taxi-v4")
    conventional.observation_space = gym.spaces.Dict({"action_mask": gym.spaces.MultiBinary(6)})
    assert with_action_mask(conventional) is conventional


def test_bad_masks_are_named_with_env_and_step():
    env = with_action_mask(_DictMasked(drop_at=2), key="legal")
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(ActionMaskError, match=r"env _DictMasked, step 2 of its episode: no action mask in the "
                                              r"observation\['legal'\], though its first reset had one"):
        env.step(0)
    wide = ActionMaskInObservation(_DictMasked(width=4), key="legal", source="obs")
    with pytest.raises(ActionMaskError, match=r"step 0 of its episode: the action mask obs\['legal'\] has shape "
                                              r"\(4,\), but the action space has 3 actions"):
        wide.reset(seed=0)
    with pytest.raises(ActionMaskError, match=r"env.action_mask_key='legal_moves': env _DictMasked has no such key "
                                              r"in its observation \(keys \['legal', 'pos'\]\)"):
        with_action_mask(_DictMasked(), key="legal_moves")
    with pytest.raises(ActionMaskError, match=r"env Pendulum-v1: an action mask \(info key 'action_mask'\) applies "
                                              r"to Discrete actions"):
        ActionMaskInObservation(gym.make("Pendulum-v1"))


def test_a_mask_that_allows_no_action_is_named_unless_the_episode_ends_there():
    from commands.user_errors import USER_ERRORS

    env = ActionMaskInObservation(_DictMasked(zero_at=2), key="legal", source="obs")
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(ActionMaskError, match=r"env _DictMasked, step 2 of its episode: the action mask "
                                              r"obs\['legal'\] allows no action, and the episode goes on"):
        env.step(0)
    last = ActionMaskInObservation(_DictMasked(zero_at=5), key="legal", source="obs")  # truncated at step 5
    last.reset(seed=0)
    for _ in range(5):
        obs, _, _, truncated, _ = last.step(0)
    assert truncated and not obs["action_mask"].any()  # nothing acts on an ended episode's mask
    assert ActionMaskError in USER_ERRORS  # the command line names it in one line, exit 2


def test_an_empty_key_switches_masks_off():
    taxi = gym.make("Taxi-v4")
    assert with_action_mask(taxi, key="") is taxi


def test_a_lone_discrete_observation_becomes_a_key_of_a_dict():
    from data.action_masks import as_trainable

    frozen = as_trainable(gym.make("FrozenLake-v1"))
    assert frozen.observation_space == gym.spaces.Dict({"observation": gym.spaces.Discrete(16)})
    assert frozen.reset(seed=0)[0] == {"observation": 0}
    unmasked_taxi = as_trainable(gym.make("Taxi-v4"), mask_key="")
    assert sorted(unmasked_taxi.observation_space.spaces) == ["observation"]
    cartpole = gym.make("CartPole-v1")
    assert as_trainable(cartpole) is cartpole


def test_a_checked_mask_raises_on_an_illegal_action_naming_it_and_the_legal_ones():
    env = with_action_mask(gym.make("Taxi-v4"), check=True)
    obs, _ = env.reset(seed=0)
    legal = np.flatnonzero(obs["action_mask"])
    obs, *_ = env.step(int(legal[0]))  # a legal action passes
    illegal = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    with pytest.raises(ActionMaskError, match=rf"env Taxi-v4, step 1 of its episode: action {illegal} was taken, "
                                              rf"which the mask forbade \(legal: \["):
        env.step(illegal)
    unchecked = with_action_mask(gym.make("Taxi-v4"))
    obs, _ = unchecked.reset(seed=0)
    unchecked.step(int(np.flatnonzero(obs["action_mask"] == 0)[0]))  # not checked: the env's own rules apply


def test_a_dict_observation_with_the_conventional_key_is_wrapped_only_to_be_checked():
    env = _DictMasked()
    env.observation_space = gym.spaces.Dict({**env.observation_space.spaces})
    checked = with_action_mask(with_action_mask(env, key="legal"), check=True)
    assert isinstance(checked, ActionMaskInObservation) and "action_mask" in checked.observation_space.spaces
    obs, _ = checked.reset(seed=0)
    assert obs["action_mask"].tolist() == [1, 0, 0]
    with pytest.raises(ActionMaskError, match="action 2 was taken, which the mask forbade"):
        checked.step(2)


def test_a_check_without_a_mask_to_check_against_is_refused_by_name():
    with pytest.raises(ActionMaskError, match=r"env.action_mask_check=True with env.action_mask_key='' \(masks off\)"):
        with_action_mask(gym.make("Taxi-v4"), key="", check=True)
    with pytest.raises(ActionMaskError, match=r"env.action_mask_check=True: env CartPole-v1 gives no legal-action "
                                              r"mask"):
        with_action_mask(gym.make("CartPole-v1"), check=True)
    with pytest.raises(ActionMaskError, match=r"env.action_mask_check=True: env Pendulum-v1 gives no legal-action"):
        with_action_mask(gym.make("Pendulum-v1"), check=True)
