"""Middleware: the pieces of a pipeline. Each is a function of ``ctx`` (or a generator yielding once);
objects with an ``on_finish(ctx)`` method get it called when the run ends."""
from .checkpoint import CheckpointError, CkptSaver, load_checkpoint
from .collector import EpisodeCollector, StepCollector
from .evaluator import InteractionEvaluator, evaluate_episodes, interaction_evaluator
from .exploration import epsilon_schedule, eps_greedy_handler, random_collect_handler
from .gae import gae_advantages, gae_estimator
from .learner import OffPolicyLearner, OnPolicyLearner, multistep_trainer
from .logger import OnlineLogger, online_logger
from .progress import progress_bar
from .pusher import data_pusher
from .replay import PrioritizedSampler, ReplayBuffer, UniformSampler, make_replay_buffer
from .summary import RunSummary
from .termination import termination_checker

__all__ = [
    "StepCollector", "EpisodeCollector", "eps_greedy_handler", "epsilon_schedule", "data_pusher",
    "OffPolicyLearner", "OnPolicyLearner", "multistep_trainer", "gae_estimator", "gae_advantages",
    "random_collect_handler", "interaction_evaluator", "InteractionEvaluator", "evaluate_episodes",
    "termination_checker", "online_logger", "OnlineLogger", "CkptSaver", "load_checkpoint",
    "CheckpointError", "progress_bar", "RunSummary", "ReplayBuffer", "UniformSampler",
    "PrioritizedSampler", "make_replay_buffer",
]
