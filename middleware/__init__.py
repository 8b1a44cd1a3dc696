"""Middleware: the pieces of a pipeline. Each is a function of ``ctx`` (or a generator yielding once);
objects with an ``on_finish(ctx)`` method get it called when the run ends. Constructors take explicit,
typed arguments (policies as ``engine.protocols`` modes, envs, buffers); the mapping from a nested config
to those arguments is ``pipelines``'s job."""
from engine.lazy import moved_names

from .background_eval import BackgroundEvaluationError, BackgroundEvaluator
from .checkpoint import CheckpointError, CkptSaver, load_checkpoint
from .collector import EpisodeCollector, StepCollector
from .ddp import DDPMiddleware
from .evaluator import InteractionEvaluator, NewEvaluation, evaluate_episodes
from .exploration import epsilon_schedule, eps_greedy_handler, random_collect_handler
from .gae import gae_estimator
from .learner import OffPolicyLearner, OnPolicyLearner
from .logger import OnlineLogger, online_logger
from .preemption import PreemptionStop
from .progress import progress_bar
from .pusher import data_pusher
from .refresh import actor_refresher
from .statistics import statistics_merger
from .summary import RunSummary
from .termination import termination_checker

__all__ = [
    "StepCollector", "EpisodeCollector", "eps_greedy_handler", "epsilon_schedule", "data_pusher",
    "OffPolicyLearner", "OnPolicyLearner", "gae_estimator", "random_collect_handler", "InteractionEvaluator",
    "NewEvaluation", "evaluate_episodes", "termination_checker", "online_logger", "OnlineLogger", "CkptSaver",
    "load_checkpoint", "CheckpointError", "progress_bar", "RunSummary", "DDPMiddleware", "actor_refresher", "statistics_merger",
    "BackgroundEvaluator", "BackgroundEvaluationError", "PreemptionStop",
]

#: names the one collection path replaced (issue 30): an import of them names the new spelling
__getattr__ = moved_names(__name__, {"DeviceStepCollector": "DeviceStepCollector is now StepCollector: one "
                                     "collector serves gymnasium and torch envs alike (from middleware import StepCollector)"})
