"""Algorithms and their torch models. Each policy registers under a ``type`` name for ``create_config``."""
from .base import CollectMode, EvalMode, LearnMode, NonFiniteLossError, Policy, SpaceMismatchError
from .dqn import DQNPolicy
from .a2c import A2CPolicy
from .ppo import PPOPolicy
from .ppo_lstm import PPOLSTMPolicy
from .rainbow import RainbowPolicy
from .sac import SACPolicy

__all__ = ["Policy", "LearnMode", "CollectMode", "EvalMode", "NonFiniteLossError", "SpaceMismatchError",
           "DQNPolicy", "RainbowPolicy", "PPOPolicy", "A2CPolicy", "PPOLSTMPolicy", "SACPolicy"]
