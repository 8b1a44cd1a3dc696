"""The contracts between floors: the policies' modes satisfy them; a wrong argument is named at once."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from engine.protocols import CollectPolicy, EvalPolicy, LearnPolicy, ReplayBuffer, ValuePolicy, require


def test_policy_modes_satisfy_the_protocols():
    from data.replay import ReplayBuffer as Buffer
    from policies import DQNPolicy, PPOPolicy

    obs, act = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)
    for cls in (DQNPolicy, PPOPolicy):
        policy = cls(cls.default_config(), obs, act)
        assert isinstance(policy.learn_mode, LearnPolicy)
        assert isinstance(policy.collect_mode, CollectPolicy)
        assert isinstance(policy.eval_mode, EvalPolicy)
    assert isinstance(PPOPolicy(PPOPolicy.default_config(), obs, act).collect_mode, ValuePolicy)
    assert isinstance(Buffer(8), ReplayBuffer)


def test_require_names_the_argument_the_protocol_and_what_is_missing():
    class HalfBuffer:
        capacity = 4

        def __len__(self):
            return 0

        def push(self, batch):
            pass

    with pytest.raises(TypeError) as err:
        require(HalfBuffer(), ReplayBuffer, "the learner's replay buffer")
    message = str(err.value)
    assert message.startswith("the learner's replay buffer must be a ReplayBuffer")
    assert "HalfBuffer lacks: load_state_dict, sample, state_dict, update_priority" in message


def test_middleware_reject_a_wrong_policy_at_construction():
    from middleware import OffPolicyLearner
    from data.replay import ReplayBuffer as Buffer

    with pytest.raises(TypeError, match=r"learner's policy must be a LearnPolicy \(e.g. policy.learn_mode\)"):
        OffPolicyLearner(object(), Buffer(8), batch_size=4, update_per_collect=1)
