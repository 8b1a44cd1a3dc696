"""Small dictionary-observation envs for the CUDA tests of issue 31 (``tests/gpu/test_dict_obs_cuda.py``),
importable in every process that makes them (``--env gpu_dict_envs:BatonGpuDict-v0``, gymnasium's syntax).

Each observation holds the three kinds of key the multi-input model encodes differently: a uint8 image (a CNN,
stored as uint8 in replay), a float vector (an MLP) and a discrete direction (an embedding). The discrete env adds
a legal-action mask in ``info["action_mask"]`` (gymnasium's convention, used with no configuration); the reward
asks for the action the direction names, so the task is learnable and any illegal pick would show."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

N_ACTIONS = 4


class GpuDictEnv(gym.Env):
    """``{"image": uint8[3, 8, 8], "vec": float32[3], "dir": Discrete(4)}``; discrete actions (``continuous``:
    a Box of 2). Episodes end after 16 steps (the registered limit)."""

    def __init__(self, continuous: bool = False):
        self.continuous = continuous
        self.observation_space = spaces.Dict({
            "image": spaces.Box(0, 255, (3, 8, 8), np.uint8),
            "vec": spaces.Box(-1.0, 1.0, (3,), np.float32),
            "dir": spaces.Discrete(N_ACTIONS)})
        self.action_space = (spaces.Box(-1.0, 1.0, (2,), np.float32) if continuous
                             else spaces.Discrete(N_ACTIONS))
        self._dir = 0

    def _obs(self):
        image = np.zeros((3, 8, 8), np.uint8)
        image[self._dir % 3, self._dir, :] = 255
        vec = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return {"image": image, "vec": vec, "dir": self._dir}

    def _info(self):
        if self.continuous:
            return {}
        mask = np.ones(N_ACTIONS, np.int8)
        mask[(self._dir + 1) % N_ACTIONS] = 0  # one illegal action each step
        return {"action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._dir = int(self.np_random.integers(N_ACTIONS))
        return self._obs(), self._info()

    def step(self, action):
        if self.continuous:
            target = np.array([np.cos(self._dir), np.sin(self._dir)], np.float32)
            reward = -float(np.square(np.asarray(action, np.float32) - target).sum())
        else:
            legal = self._info()["action_mask"]
            if not legal[int(action)]:
                raise AssertionError(f"illegal action {int(action)} taken (mask {legal.tolist()})")
            reward = 1.0 if int(action) == self._dir else 0.0
        self._dir = int(self.np_random.integers(N_ACTIONS))
        return self._obs(), reward, False, False, self._info()


for _id, _kwargs in (("BatonGpuDict-v0", {}), ("BatonGpuDictBox-v0", {"continuous": True})):
    if _id not in gym.registry:
        gym.register(_id, entry_point=GpuDictEnv, kwargs=_kwargs, max_episode_steps=16)
