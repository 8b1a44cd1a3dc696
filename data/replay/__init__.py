"""Replay: preallocated ring storage, frame-stack storage (one frame per transition), uniform and
prioritized (sum tree) samplers, and the buffer that composes a storage with a sampler."""
from .buffer import ReplayBuffer
from .frame_storage import FrameStackStorage
from .samplers import PrioritizedSampler, Sampler, UniformSampler
from .storage import RingStorage
from .sumtree import SumTree

__all__ = ["ReplayBuffer", "Sampler", "UniformSampler", "PrioritizedSampler", "RingStorage", "SumTree",
           "FrameStackStorage"]
