"""TD3's and SAC's updates are two backwards (the critics', then the actor's through the critics just stepped)
over one DDP-wrapped model: each pass must give DDP a gradient of every parameter, whatever DDP's settings."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import copy, importlib, sys
    import gymnasium as gym, numpy as np, torch, torch.distributed as dist
    from easydict import EasyDict
    from torch.nn.parallel import DistributedDataParallel
    from data.batch import make_batch
    from engine.config import deep_merge

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    cls = getattr(importlib.import_module(sys.argv[2]), sys.argv[3])
    torch.manual_seed(0)
    cfg = EasyDict(deep_merge(cls.default_config(), dict(model=dict(actor_head_hidden_size_list=[16],
                                                                    critic_head_hidden_size_list=[16]))))
    base = cls(cfg, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))
    for kwargs in (dict(), dict(static_graph=True), dict(find_unused_parameters=True)):
        one, ddp = copy.deepcopy(base), copy.deepcopy(base)
        ddp.learn_model = DistributedDataParallel(ddp.model, **kwargs)
        for update in range(4):  # TD3: updates 2 and 4 are actor steps
            g = torch.Generator().manual_seed(update)
            batch = make_batch(dict(obs=torch.randn(8, 3, generator=g), next_obs=torch.randn(8, 3, generator=g),
                                    action=torch.rand(8, 2, generator=g) * 2 - 1, reward=torch.randn(8, generator=g),
                                    discount=torch.full((8,), 0.99), terminated=torch.zeros(8, dtype=torch.bool),
                                    truncated=torch.zeros(8, dtype=torch.bool)))
            for policy in (one, ddp):
                torch.manual_seed(update)  # SAC samples from torch's generator
                policy.learn_mode.forward(batch)
        same = all(torch.allclose(p, q, rtol=1e-5, atol=1e-7) for p, q in zip(one.model.parameters(),
                                                                              ddp.model.parameters()))
        moved = all(not torch.equal(p, q) for p, q in zip(base.model.parameters(), ddp.model.parameters())
                    if p.requires_grad)
        print("equal" if same and moved else f"differs: {kwargs} (moved: {moved})")
    dist.destroy_process_group()
""")


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("module,cls", [("policies.td3", "TD3Policy"), ("policies.sac", "SACPolicy")])
def test_under_ddp_each_pass_reaches_every_parameter_whatever_ddps_settings(tmp_path, module, cls):
    """Each pass adds 0 times the sum of the parameters it does not use (``policies.optim.zero_for_ddp``: DDP's
    backward waits for every parameter's gradient), except under ``find_unused_parameters``, where DDP marks them
    itself and refuses a second gradient: 4 updates on one gloo rank, plain, with ``static_graph`` and with
    ``find_unused_parameters``, each equal to one process's and moving every trained parameter."""
    script = tmp_path / "ddp_two_steps.py"
    script.write_text(_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), module, cls], capture_output=True,
                          text=True, timeout=150, cwd=root, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["equal"] * 3, done.stdout
