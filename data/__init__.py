"""Data structures that never see a context: the batch type, replay storages and samplers, n-step
returns, GAE, vector-env construction and the one env-stepping loop. Imports only ``engine``."""
from .batch import Batch, make_batch
from .env_loop import EnvLoop, EnvStep, Finished
from .gae import gae_advantages
from .nstep import NStepBuilder

__all__ = ["Batch", "make_batch", "EnvLoop", "EnvStep", "Finished", "gae_advantages", "NStepBuilder"]
