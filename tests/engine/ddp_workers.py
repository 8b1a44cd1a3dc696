"""Functions run inside 2-process gloo jobs (engine.launch pickles them by module name)."""
from __future__ import annotations

import copy
import json
import os
import time

import torch

from engine import OnlineRLContext, Task
from engine.distributed import allreduce_data, broadcast_object, get_rank, get_world_size


class ToyLearn:
    """The least a ddp middleware wraps: a model and its state."""

    def __init__(self):
        # an instance attribute: a DDP module kept alive until interpreter shutdown (e.g. on a class) outlives
        # the process group and can abort the process when it is finally destroyed
        self.model = torch.nn.Linear(1, 1)

    def state_dict(self):
        return {"w": self.model.state_dict()}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["w"])


def _dump(out_dir, name, obj):
    with open(os.path.join(out_dir, f"{name}_rank{get_rank()}.json"), "w") as f:
        json.dump(obj, f)


def cartpole_run(out_dir, overrides_by_rank=None, max_env_step=1024,
                 config="dizoo.classic_control.cartpole.config.cartpole_dqn_ddp_config"):
    """A DDP config through serial_pipeline; each rank dumps its summary and parameters."""
    import importlib

    from pipelines import build_pipeline

    module = importlib.import_module(config)
    main_config, create_config = module.main_config, module.create_config
    main = copy.deepcopy(main_config)
    main.exp_name = os.path.join(out_dir, "exp")
    main.env.stop_value = 1e9
    main.env.collector_env_num = 4
    main.policy.collect.n_sample = 32
    if "update_per_collect" in main.policy.learn:
        main.policy.learn.update_per_collect = 2
    for key, value in (overrides_by_rank or {}).get(str(get_rank()), {}).items():
        node = main.policy
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    pipeline = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=max_env_step,
                              progress=False)
    learn_mode = pipeline.policy.learn_mode
    summary = pipeline.run()
    state = learn_mode.state_dict()
    params = {k: v.flatten().tolist() for k, v in state["model"].items()}
    target_key = next((k for k in ("target_model", "target_critic") if k in state), None)
    target = {k: v.flatten().tolist() for k, v in state[target_key].items()} if target_key else {}
    _dump(out_dir, "run", {"summary": summary, "params": params, "target": target})


def one_learner_step(out_dir):
    """One DQN update under DDP on a rank-specific batch; dumps the resulting parameters."""
    from tests_support import dqn_policy_and_batches
    from middleware.ddp import DDPMiddleware

    policy, batches = dqn_policy_and_batches(seed=get_rank())  # ranks start different: DDP must sync them
    DDPMiddleware(policy.learn_mode)
    policy.learn_mode.forward(batches[get_rank()])
    _dump(out_dir, "step", {k: v.flatten().tolist() for k, v in policy.model.state_dict().items()})


def counters_and_stop(out_dir):
    """A toy pipeline: rank r collects 3 + 2r env steps per iteration; rank 0's 'evaluator' stops at
    iteration 3. Dumps every rank's view of the counters."""
    from middleware.ddp import DDPMiddleware

    rank = get_rank()
    seen = []
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(DDPMiddleware(ToyLearn()))

        def collector(ctx):
            steps = 3 + 2 * rank
            ctx.env_step += steps
            ctx.env_episode += rank

        def rank0_evaluator(ctx):
            if rank == 0 and ctx.total_step == 3:
                ctx.eval_value, ctx.last_eval_iter = 42.0, ctx.train_iter
                ctx.eval_output = {"mean": 42.0}
                ctx.finish, ctx.stop_reason = True, "stop_value"
            if rank == 1 and ctx.total_step == 1:
                ctx.finish = True  # a non-zero rank cannot stop the job on its own

        task.use(collector)
        task.use(rank0_evaluator)
        task.use(lambda ctx: seen.append((ctx.total_step, ctx.env_step)))
        task.run(max_step=50)
        ctx = task.ctx
        _dump(out_dir, "toy", {"total_step": ctx.total_step, "env_step": ctx.env_step,
                               "env_episode": ctx.env_episode, "eval_value": ctx.eval_value,
                               "stop_reason": ctx.stop_reason, "seen": seen})


class ConstantPolicy:
    """An eval policy that always acts 0."""

    def forward(self, obs, **kwargs):
        return {"action": torch.zeros(len(obs), dtype=torch.long)}


def final_evaluation_run(out_dir):
    """The standard head and tail around a toy middle: each rank collects 8 env steps and makes one update per
    iteration, the budget (48) ends the third iteration; rank 0 evaluates (scores 1, 10) at the start of the
    second and third, and its final evaluation (score 5) the last weights. Dumps every rank's summary and
    its view of the last evaluation."""
    import middleware.evaluator as evaluator_module
    from data.envs import make_vector_env
    from engine.registry import ENV_REGISTRY
    from middleware import InteractionEvaluator, RunSummary, termination_checker
    from middleware.ddp import DDPMiddleware

    scores = iter([1.0, 10.0, 5.0])
    evaluator_module.evaluate_episodes = lambda *args, **kwargs: {"returns": [next(scores)], "lengths": [1]}
    rank = get_rank()

    def collector(ctx):
        ctx.env_step += 8
        ctx.collect_stats = {"samples": 8, "env_steps": 8, "episodes": 0, "duration": 0.0}

    def learner(ctx):
        ctx.train_iter += 1

    env_type = ENV_REGISTRY.get("cartpole")  # never stepped: the evaluations' returns are scripted
    env = make_vector_env(env_type, env_type.default_config(), 1, seed=0)
    summary = RunSummary(out_dir, write=False)
    task = Task()
    try:
        with task.start(ctx=OnlineRLContext()):
            task.use(DDPMiddleware(ToyLearn()))
            task.use(summary)
            evaluator = InteractionEvaluator(ConstantPolicy(), env, eval_freq=1, n_episode=1)
            if rank == 0:
                task.use(evaluator)
            task.use(collector)
            task.use(learner)
            task.use(termination_checker(max_env_step=48))
            if rank == 0:
                task.use(evaluator_module.final_evaluation(evaluator, seen=summary.track_evaluation))
            task.run(max_step=10)
            output = task.ctx.eval_output
    finally:
        env.close()
    _dump(out_dir, "final", {"summary": summary.result, "eval_env_step": output["env_step"],
                             "eval_train_iter": output["train_iter"], "eval_return": output["mean"]})


def first_observations(out_dir):
    """The first observations of this rank's collector envs, seeded as serial_pipeline seeds them."""
    from pipelines.assembly import rank_seed
    from data.envs import make_vector_env
    from engine.registry import ENV_REGISTRY

    env_type = ENV_REGISTRY.get("cartpole")
    seed = rank_seed(0, get_rank())
    env = make_vector_env(env_type, env_type.default_config(), 2, seed)
    obs, _ = env.reset(seed=[seed + i for i in range(2)])
    _dump(out_dir, "obs", obs.tolist())


def raise_on_rank1(out_dir):
    """Rank 1 fails in its third iteration; rank 0 goes on into the next collective."""
    vec = torch.zeros(1)
    for step in range(100):
        if get_rank() == 1 and step == 2:
            raise RuntimeError("rank 1 failed on purpose at step 2")
        allreduce_data(vec)
        time.sleep(0.01)


def collectives(out_dir):
    _dump(out_dir, "coll", {"sum": allreduce_data(get_rank() + 1.0), "max": allreduce_data(float(get_rank()), "max"),
                            "mean": allreduce_data([1.0, 3.0 * get_rank()], "mean"),
                            "obj": broadcast_object({"from": get_rank()}), "world": get_world_size()})


def environment(out_dir):
    """What a rank sees of its caller: an environment variable, the working directory, the meeting port."""
    import torch

    _dump(out_dir, "env", {"mark": os.environ.get("BATON_TEST_MARK"), "cwd": os.getcwd(),
                           "port": os.environ["MASTER_PORT"], "threads": torch.get_num_threads(),
                           "pid": os.getpid()})


def mismatched_collectives(out_dir, kind):
    """Rank 0 and rank 1 make different collectives at the same point (``kind``: op or shape)."""
    from engine.distributed import all_gather_rows

    if get_rank() == 0 or kind == "shape":
        all_gather_rows([1.0] * (1 + get_rank() if kind == "shape" else 2))
    else:
        broadcast_object({"x": 1})


def failing_pipeline(out_dir, how):
    """A toy DDP pipeline in which rank 1 hangs, raises or is killed in iteration 3."""
    import signal

    from middleware.ddp import DDPMiddleware

    def trouble(ctx):
        ctx.env_step += 1
        if get_rank() == 1 and ctx.total_step == 3:
            if how == "hang":
                time.sleep(600)
            elif how == "raise":
                raise RuntimeError("rank 1 raised on purpose")
            else:
                os.kill(os.getpid(), signal.SIGKILL)

    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(DDPMiddleware(ToyLearn()))
        task.use(trouble)
        task.run(max_step=50)


def group_of_one(out_dir):
    """The DDP CartPole config in a process group of a single process (what one GPU with nccl runs)."""
    import torch.distributed as dist

    from dizoo.classic_control.cartpole.config.cartpole_dqn_ddp_config import create_config, main_config
    from pipelines import serial_pipeline

    main = copy.deepcopy(main_config)
    main.exp_name, main.log = os.path.join(out_dir, "exp"), dict(progress=False)
    summary = serial_pipeline((main, copy.deepcopy(create_config)), max_env_step=256)
    _dump(out_dir, "one", {"world": dist.get_world_size(), "env_step": summary["env_step"]})


def replay_rows(buffer):
    """The stored transitions' observations as rows (to compare buffers as multisets)."""
    fields, _ = buffer.transitions()
    return [[round(x, 5) for x in row] for row in fields["obs"].tolist()] if fields else []


def sharded_replay_run(out_dir, resume=False, max_env_step=256):
    """CartPole DQN with the replay buffer in its checkpoints, fresh or resumed; each rank dumps its buffer
    right after the resume (before training) and at the end."""
    from pipelines import build_pipeline
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    main = copy.deepcopy(main_config)
    main.exp_name = os.path.join(out_dir, "exp")
    main.env.stop_value = 1e9
    main.env.collector_env_num = 2
    main.policy.collect.n_sample = 16
    main.ckpt = dict(save_replay_buffer=True)
    main.log = dict(progress=False, tensorboard=False, csv=False)
    pipeline = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=max_env_step,
                              resume=resume)
    resumed = replay_rows(pipeline.buffer)
    summary = pipeline.run()
    _dump(out_dir, "resumed" if resume else "fresh", {"after_resume": resumed, "end": replay_rows(pipeline.buffer),
                                                       "summary": summary})


def learn_gate_run(out_dir, resume=False, max_env_step=256):
    """CartPole DQN without its replay buffer in the checkpoints (the default), fresh or resumed; each rank dumps,
    per iteration, whether its learner's buffer was ready and how many updates it made."""
    from pipelines import build_pipeline
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    main = copy.deepcopy(main_config)
    main.exp_name = os.path.join(out_dir, "exp")
    main.env.stop_value = 1e9
    main.env.collector_env_num = 2
    main.policy.collect.n_sample = 16
    main.policy.learn.batch_size = 64
    main.log = dict(progress=False, tensorboard=False, csv=False)
    pipeline = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=max_env_step,
                              resume=resume)
    steps = []
    before = {"train_iter": pipeline.ctx.train_iter}

    def record(ctx):
        steps.append([bool(ctx.learner_ready), ctx.train_iter - before["train_iter"]])
        before["train_iter"] = ctx.train_iter

    pipeline.insert_after("learner", record, name="record_gate")
    summary = pipeline.run()
    _dump(out_dir, "resumed" if resume else "fresh", {"steps": steps, "summary": summary})


def obs_norm_run(out_dir):
    """Observation normalisation under DDP: a RunningObsNorm fed different data per rank, merged; then a tiny
    SAC Pendulum run with ``policy.obs_norm=True`` (a merge every iteration) that writes a checkpoint."""
    import numpy as np

    from pipelines import build_pipeline
    from policies.obs_norm import RunningObsNorm
    from dizoo.classic_control.pendulum.config.pendulum_sac_config import create_config, main_config

    rank = get_rank()
    norm = RunningObsNorm((2,))
    rng = np.random.default_rng(rank)
    data = rng.normal(size=(5 + 12 * rank, 2)) * [1.0 + rank, 0.1] + [10.0 * rank, -1.0]
    norm.observe(data[:3])
    norm.observe(data[3:])
    norm.merge()
    merged = {"count": float(norm.count), "mean": norm.mean.tolist(), "var": norm.var().tolist(), "data": data.tolist()}

    main = copy.deepcopy(main_config)
    main.exp_name = os.path.join(out_dir, "exp")
    main.env.stop_value = 1e9
    main.policy.obs_norm = True
    main.policy.random_collect_size = 32
    main.policy.learn.batch_size = 16
    main.policy.model = dict(actor_head_hidden_size_list=[16, 16], critic_head_hidden_size_list=[16, 16])
    main.log = dict(progress=False, tensorboard=False, csv=False)
    pipeline = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=128)
    summary = pipeline.run()
    stats = {k: v.tolist() for k, v in pipeline.policy.learn_mode.state_dict()["obs_norm"].items()}
    _dump(out_dir, "obs_norm", {"merged": merged, "stats": stats, "env_step": summary["env_step"]})


def weighted_loss_run(out_dir):
    """PPO's weighted means under DDP (``policies.advantages``): rank 0's minibatch has 3 acting elements of 4,
    rank 1's one; a DDP-wrapped linear model's gradient of the weighted loss, after DDP's average."""
    from torch.nn.parallel import DistributedDataParallel

    from policies.advantages import mean_shares, normalise_advantages, weighted_mean

    rank = get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    ddp = DistributedDataParallel(model)
    x = torch.arange(16, dtype=torch.float32).reshape(2, 4, 2)[rank] * (1 + rank)
    weight = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])[rank]
    adv = normalise_advantages(torch.tensor([[1.0, 2.0, 3.0, 50.0], [-9.0, 4.0, -7.0, 8.0]])[rank], weight)
    loss = weighted_mean(ddp(x).squeeze(-1) * adv, mean_shares(weight))
    loss.backward()
    _dump(out_dir, "weighted", {"grad": [p.grad.flatten().tolist() for p in model.parameters()]})
