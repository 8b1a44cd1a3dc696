"""Replay: preallocated ring storage, frame-stack storage (one frame per transition),
sequence storage (consecutive steps for a recurrent learner), uniform and
prioritized (sum tree) samplers, and the buffer that composes a storage with a sampler; on the host or on
the learner's device (``data.replay.device``)."""
from .buffer import PrioritizedReplayParams, ReplayBuffer, ReplayBufferParams
from .device import ReplayMemoryError
from .frame_storage import FrameStackStorage
from .her import HerParams, HindsightStorage
from .samplers import PrioritizedSampler, Sampler, UniformSampler
from .sequence_storage import SequenceStorage
from .storage import RingStorage
from .sumtree import DeviceSumTree, SumTree

__all__ = ["ReplayBuffer", "ReplayBufferParams", "PrioritizedReplayParams", "Sampler", "UniformSampler", "PrioritizedSampler", "RingStorage", "SumTree",
           "DeviceSumTree", "FrameStackStorage", "HerParams", "HindsightStorage", "ReplayMemoryError",
           "SequenceStorage"]
