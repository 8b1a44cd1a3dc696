"""The frame-stack replay rebuilds exactly the stacks the env returned, from one frame per transition."""
from __future__ import annotations


import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from dizoo.atari.envs import ATARI  # noqa: E402
from engine import OnlineRLContext  # noqa: E402
from data.envs import make_vector_env  # noqa: E402
from middleware import StepCollector  # noqa: E402
from data.replay import FrameStackStorage, RingStorage  # noqa: E402


class RandomPolicy:
    def __init__(self, n):
        self.rng = np.random.default_rng(0)
        self.n = n

    def forward(self, obs, **kwargs):
        return {"action": torch.from_numpy(self.rng.integers(0, self.n, len(obs)))}


@pytest.mark.parametrize("nstep", [1, 3])
def test_frame_stack_storage_rebuilds_env_stacks(nstep):
    envs = 2
    env_cfg = dict(ATARI.default_config(), env_id="BreakoutNoFrameskip-v4")  # lives: life-loss endings too
    env = make_vector_env(ATARI, env_cfg, envs, seed=0, training=True)
    collector = StepCollector(RandomPolicy(4), env, n_sample=64, nstep=nstep, gamma=0.99)
    capacity = 512  # smaller than what is pushed: the ring wraps
    frames = FrameStackStorage(capacity, envs, 4)
    plain = RingStorage(capacity)
    ctx = OnlineRLContext()
    try:
        for _ in range(12):
            collector(ctx)
            batch = {k: getattr(ctx.trajectories, k) for k in ctx.trajectories.keys()}
            frames.extend(batch)
            plain.extend(batch)
            ctx.renew()
    finally:
        env.close()
    idx = torch.arange(len(plain))
    ok = frames.sampleable(idx)
    assert ok.float().mean() > 0.9  # only the newest and the oldest few slots wait
    expected = plain.gather(idx[ok])
    rebuilt = frames.gather(idx[ok])
    assert torch.equal(rebuilt["obs"], expected["obs"])
    assert torch.equal(rebuilt["next_obs"], expected["next_obs"])
    assert torch.equal(rebuilt["reward"], expected["reward"])
    assert expected["terminated"].any()  # the check covered episode ends
    restored = FrameStackStorage(capacity, envs, 4)
    restored.load_state_dict(frames.state_dict())
    assert torch.equal(restored.gather(idx[ok])["next_obs"], expected["next_obs"])
    assert torch.equal(restored.sampleable(idx), ok)
    # about one frame per transition plus whole final stacks for the windows that ended an episode (random
    # Breakout play loses a life every ~20 steps, so those are frequent here), against 2 * 4 frames
    assert frames.bytes_per_transition() < 84 * 84 * 2


def test_frame_stack_storage_rejects_pushes_that_break_the_layout():
    s = FrameStackStorage(64, 2, 4)
    batch = dict(obs=torch.zeros(3, 4, 8, 8, dtype=torch.uint8), next_obs=torch.zeros(3, 4, 8, 8, dtype=torch.uint8),
                 terminated=torch.zeros(3, dtype=torch.bool), truncated=torch.zeros(3, dtype=torch.bool),
                 span=torch.ones(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="whole vector steps of 2 envs"):
        s.extend(batch)
