"""An agent with a camera and a sense of its own position (env type ``camera_reach``, the gymnasium id
``CameraReach-v0``): a task that needs an image key and a vector key together.

Multi-sensor agents observe a picture beside proprioception (a robot's camera and its joint readings). This
task keeps the two apart so that neither alone solves it: on a ``size`` x ``size`` grid, the target is seen only
in ``camera``, a uint8 ``[size, size, 3]`` top-down picture (channels last, the target's cell lit in the red
channel), and the agent's own cell only in ``position``, two float32 coordinates in [0, 1]. Four actions move one
cell (up, down, left, right; a move into the wall stays). baton gives the picture the small convolution stack and
the position an MLP (``policies.key_encoders``), joined into the algorithm's head.

Rewards follow MiniGrid's: ``1 - 0.9 * steps / max_steps`` on reaching the target (the episode ends, its final
``info["is_success"]`` True), 0 when the ``4 * size`` steps run out (the env truncates the episode itself, so
another ``env.env_kwargs.size`` needs no other setting). Start and target are drawn apart at each reset.

Stop value 0.8 (for the default 8x8): the shortest paths average 5.3 steps, an optimal return of about 0.85; a
mean of 0.8 is within two steps of the shortest path on average. A random policy scores about 0.12.
"""
from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

__all__ = ["CameraReachEnv", "CAMERA_REACH"]

ENV_ID = "CameraReach-v0"
#: the moves of the four actions, as (row, column) steps
_MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])


class CameraReachEnv(gym.Env):
    """Reach a target seen only in the camera, knowing one's position only from ``position`` (the module
    docstring).

    Examples:
        >>> env = CameraReachEnv(size=5)
        >>> obs, _ = env.reset(seed=0)
        >>> obs["camera"].shape, obs["camera"].dtype, obs["position"].shape
        ((5, 5, 3), dtype('uint8'), (2,))
        >>> int(obs["camera"].sum() // 255)  # the target's one lit cell
        1
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, size: int = 8, render_mode: Optional[str] = None) -> None:
        if size < 2:
            raise ValueError(f"size must be >= 2 (a start and a target apart), got {size}")
        self.size, self.render_mode = int(size), render_mode
        self.max_steps = 4 * self.size
        self.observation_space = gym.spaces.Dict({
            "camera": gym.spaces.Box(0, 255, (self.size, self.size, 3), np.uint8),
            "position": gym.spaces.Box(0.0, 1.0, (2,), np.float32)})
        self.action_space = gym.spaces.Discrete(4)
        self._agent = np.zeros(2, np.int64)
        self._target = np.zeros(2, np.int64)
        self._steps = 0

    def _obs(self) -> dict:
        camera = np.zeros((self.size, self.size, 3), np.uint8)
        camera[self._target[0], self._target[1], 0] = 255
        return {"camera": camera, "position": (self._agent / (self.size - 1)).astype(np.float32)}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        cells = self.np_random.choice(self.size * self.size, size=2, replace=False)
        self._agent = np.array(divmod(int(cells[0]), self.size))
        self._target = np.array(divmod(int(cells[1]), self.size))
        self._steps = 0
        return self._obs(), {}

    def step(self, action: Any):
        self._agent = np.clip(self._agent + _MOVES[int(action)], 0, self.size - 1)
        self._steps += 1
        reached = bool((self._agent == self._target).all())
        reward = 1.0 - 0.9 * self._steps / self.max_steps if reached else 0.0
        return self._obs(), reward, reached, not reached and self._steps >= self.max_steps, {"is_success": reached}

    def render(self) -> np.ndarray:
        """The camera's picture with the agent's cell lit in green, scaled up 16 times (``baton eval --video``)."""
        frame = self._obs()["camera"]
        frame[self._agent[0], self._agent[1], 1] = 255
        return np.kron(frame, np.ones((16, 16, 1), np.uint8))


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CameraReachEnv)  # no TimeLimit: the env ends its episodes at 4 * size steps

CAMERA_REACH = ENV_REGISTRY.register("camera_reach", GymEnvType(ENV_ID, stop_value=0.8, best_return=1.0))
