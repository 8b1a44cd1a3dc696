"""Replay: preallocated ring storage, uniform and prioritized samplers, and the n-step builder."""
from .buffer import ReplayBuffer, make_replay_buffer
from .frame_storage import FrameStackStorage
from .nstep import NStepBuilder
from .samplers import PrioritizedSampler, Sampler, UniformSampler
from .storage import RingStorage
from .sumtree import SumTree

__all__ = ["ReplayBuffer", "make_replay_buffer", "NStepBuilder", "Sampler", "UniformSampler",
           "PrioritizedSampler", "RingStorage", "SumTree", "FrameStackStorage"]
