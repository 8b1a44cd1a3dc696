"""Peer MAPPO on MPE2 Simple Spread, built from TorchRL's own parts (no baton code): the side-by-side of
BENCHMARKS.md, "Several agents". Its own virtual environment (TorchRL pins its torch range):

    python3 -m venv peer && . peer/bin/activate
    pip install -c constraints.txt torch==2.13.0 torchrl==0.11.1 tensordict==0.11.0 pettingzoo==1.27.0 mpe2==1.1.1
    python bench/peers_torchrl_mappo.py --steps 300000 --seed 0 --out peer_seed0.csv --actor-agent-id

BenchMARL 1.5.2 (which pins torchrl<0.12) installs too, but its PettingZoo tasks build envs through
``PettingZooEnv(task=...)``, which cannot find mpe2's tasks; hence TorchRL's parts, at the MAPPO settings baton's
config uses.

Task: mpe2.simple_spread_v3.parallel_env(N=3, local_ratio=0.5, max_cycles=25, continuous_actions=False),
wrapped with torchrl.envs.PettingZooWrapper (TorchRL's PettingZooEnv(task=...) cannot build it: it looks the
task up in pettingzoo.mpe, which pettingzoo>=1.25 replaced by an ImportError pointing at mpe2).

MAPPO (Yu et al., 2022), single process, torch.set_num_threads(1):
  * actor: one MLP shared by the 3 agents, on each agent's own 18-d observation -> 5 logits (Categorical);
  * critic: one MLP shared by the agents, on the env's global state (54-d, every agent's observation joined)
    with the agent's one-hot index appended -> one value per agent (centralised critic);
  * torchrl.objectives.ClipPPOLoss + GAE, torchrl.collectors.SyncDataCollector over a SerialEnv of --num-envs
    envs, rollouts of --rollout steps on each env (default 32 x 25 = 800 env steps per update), --epochs passes
    of --minibatches minibatches over each batch.

"Env steps" are steps of one env (all 3 agents act once = 1 step); TorchRL's collector counts frames the same
way (one frame per env of the batch per step).

Every --eval-every env steps (and at 0 and at the end) it runs --eval-episodes greedy episodes (argmax of the
logits) on a separate SerialEnv and writes a CSV row:
  env_steps, wall_seconds, eval_return_per_agent, eval_return_agent0..N-1, train_seconds
where an episode's return for one agent is the sum of its reward over the episode's 25 steps, and
eval_return_per_agent is the mean over agents and episodes. wall_seconds counts from the start of training
(after setup) and includes evaluation time; train_seconds excludes evaluation.
"""
from __future__ import annotations

import argparse
import csv
import os
import time
import warnings

import torch
from torch import nn

warnings.filterwarnings("ignore")

from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.envs import PettingZooWrapper, SerialEnv  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402
from torchrl.modules import ProbabilisticActor  # noqa: E402
from torchrl.objectives import ClipPPOLoss, ValueEstimators  # noqa: E402

GROUP = "agent"  # mpe2 names the agents agent_0..agent_{N-1}: PettingZooWrapper groups them as "agent"


def make_env(n_agents: int, local_ratio: float, max_cycles: int, seed: int | None = None):
    from mpe2 import simple_spread_v3

    pz = simple_spread_v3.parallel_env(N=n_agents, local_ratio=local_ratio, max_cycles=max_cycles,
                                       continuous_actions=False)
    return PettingZooWrapper(pz, categorical_actions=True, return_state=True, seed=seed)


def mlp(inp: int, hidden: list[int], out: int, act: type[nn.Module], out_gain: float, norm: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.LayerNorm(inp)] if norm else []
    last = inp
    for h in hidden:
        lin = nn.Linear(last, h)
        nn.init.orthogonal_(lin.weight, gain=nn.init.calculate_gain("tanh" if act is nn.Tanh else "relu"))
        nn.init.zeros_(lin.bias)
        layers += [lin, act()]
        last = h
    head = nn.Linear(last, out)
    nn.init.orthogonal_(head.weight, gain=out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


class SharedActor(nn.Module):
    """obs [..., N, D] -> logits [..., N, A]; one set of parameters for every agent."""

    def __init__(self, obs_dim, n_agents, n_actions, hidden, act, agent_id: bool, norm: bool):
        super().__init__()
        self.n_agents, self.agent_id = n_agents, agent_id
        self.net = mlp(obs_dim + (n_agents if agent_id else 0), hidden, n_actions, act, 0.01, norm)

    def forward(self, obs):
        if self.agent_id:
            ids = torch.eye(self.n_agents, dtype=obs.dtype).expand(*obs.shape[:-1], self.n_agents)
            obs = torch.cat([obs, ids], -1)
        return self.net(obs)


class CentralCritic(nn.Module):
    """global state [..., S] -> values [..., N, 1]: one MLP shared by the agents, on (state, agent one-hot)."""

    def __init__(self, state_dim, n_agents, hidden, act, norm: bool):
        super().__init__()
        self.n_agents = n_agents
        self.net = mlp(state_dim + n_agents, hidden, 1, act, 1.0, norm)

    def forward(self, state):
        s = state.unsqueeze(-2).expand(*state.shape[:-1], self.n_agents, state.shape[-1])
        ids = torch.eye(self.n_agents, dtype=state.dtype).expand(*state.shape[:-1], self.n_agents, self.n_agents)
        return self.net(torch.cat([s, ids], -1))


def evaluate(eval_env, policy, n_rounds: int, max_cycles: int) -> torch.Tensor:
    """Greedy episodes; returns each episode's per-agent return, [episodes, N]."""
    out = []
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        for _ in range(n_rounds):
            td = eval_env.rollout(max_cycles, policy, auto_reset=True, break_when_any_done=False)
            # td: [E, T]; every env ends at T == max_cycles (truncation), so each row is one whole episode
            assert bool(td["next", "done"][:, -1].all()), "an eval episode did not end at max_cycles"
            out.append(td["next", GROUP, "reward"].sum(1).squeeze(-1))  # [E, N]
    return torch.cat(out, 0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=2_000_000, help="env-step budget (one env, all agents = 1 step)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="peer_mappo.csv", help="CSV path")
    p.add_argument("--eval-every", type=int, default=20_000)
    p.add_argument("--eval-episodes", type=int, default=32)
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--rollout", type=int, default=25, help="steps per env per update (batch = num-envs*rollout)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--lr", type=float, default=7e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lmbda", type=float, default=0.95)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--entropy", type=float, default=0.01)
    p.add_argument("--critic-coef", type=float, default=1.0)
    p.add_argument("--max-grad-norm", type=float, default=10.0)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--activation", choices=["tanh", "relu"], default="tanh")
    p.add_argument("--feature-norm", action="store_true", help="LayerNorm on the networks' inputs (MAPPO paper)")
    p.add_argument("--actor-agent-id", action="store_true", help="append the agent's one-hot index to the actor input")
    p.add_argument("--n-agents", type=int, default=3)
    p.add_argument("--local-ratio", type=float, default=0.5)
    p.add_argument("--max-cycles", type=int, default=25)
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    act = nn.Tanh if args.activation == "tanh" else nn.ReLU
    N = args.n_agents

    def env_fn():
        return make_env(N, args.local_ratio, args.max_cycles)

    env = SerialEnv(args.num_envs, env_fn)
    env.set_seed(args.seed)
    eval_n = min(args.eval_episodes, args.num_envs)
    eval_rounds = -(-args.eval_episodes // eval_n)
    eval_env = SerialEnv(eval_n, env_fn)
    eval_env.set_seed(args.seed + 10_000)

    obs_dim = env.observation_spec[GROUP, "observation"].shape[-1]
    state_dim = env.observation_spec["state"].shape[-1]
    n_actions = env.full_action_spec[GROUP, "action"].space.n

    actor_net = TensorDictModule(
        SharedActor(obs_dim, N, n_actions, args.hidden, act, args.actor_agent_id, args.feature_norm),
        in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "logits")])
    policy = ProbabilisticActor(
        module=actor_net, spec=env.full_action_spec[GROUP, "action"], in_keys=[(GROUP, "logits")],
        out_keys=[(GROUP, "action")], distribution_class=torch.distributions.Categorical,
        return_log_prob=True, log_prob_key=(GROUP, "log_prob"))
    critic = TensorDictModule(CentralCritic(state_dim, N, args.hidden, act, args.feature_norm),
                              in_keys=["state"], out_keys=[(GROUP, "state_value")])

    loss_module = ClipPPOLoss(actor_network=policy, critic_network=critic, clip_epsilon=args.clip,
                              entropy_coeff=args.entropy, critic_coeff=args.critic_coef, loss_critic_type="l2",
                              normalize_advantage=True)
    loss_module.set_keys(reward=(GROUP, "reward"), action=(GROUP, "action"), done=(GROUP, "done"),
                         terminated=(GROUP, "terminated"), advantage=(GROUP, "advantage"),
                         value_target=(GROUP, "value_target"), value=(GROUP, "state_value"),
                         sample_log_prob=(GROUP, "log_prob"))
    loss_module.make_value_estimator(ValueEstimators.GAE, gamma=args.gamma, lmbda=args.lmbda)
    optim = torch.optim.Adam(loss_module.parameters(), lr=args.lr, eps=1e-5)

    frames_per_batch = args.num_envs * args.rollout
    total = -(-args.steps // frames_per_batch) * frames_per_batch
    collector = SyncDataCollector(env, policy, frames_per_batch=frames_per_batch, total_frames=total)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    f = open(args.out, "w", newline="")
    w = csv.writer(f)
    w.writerow(["env_steps", "wall_seconds", "eval_return_per_agent"]
               + [f"eval_return_agent{i}" for i in range(N)] + ["train_seconds"])

    t0 = time.perf_counter()
    eval_time = 0.0

    def log(steps):
        nonlocal eval_time
        te = time.perf_counter()
        rets = evaluate(eval_env, policy, eval_rounds, args.max_cycles)[: args.eval_episodes]
        eval_time += time.perf_counter() - te
        wall = time.perf_counter() - t0
        per_agent = rets.mean(0)
        w.writerow([steps, f"{wall:.2f}", f"{rets.mean().item():.4f}"]
                   + [f"{x:.4f}" for x in per_agent.tolist()] + [f"{wall - eval_time:.2f}"])
        f.flush()
        print(f"env_steps={steps} wall={wall:.1f}s train={wall - eval_time:.1f}s "
              f"eval_return_per_agent={rets.mean().item():.3f} sps(train)={steps / max(wall - eval_time, 1e-9):.0f}",
              flush=True)

    steps, next_eval = 0, args.eval_every
    log(0)
    for batch in collector:
        steps += batch.numel()
        with torch.no_grad():
            loss_module.value_estimator(batch, params=loss_module.critic_network_params,
                                        target_params=loss_module.target_critic_network_params)
        flat = batch.reshape(-1)
        mb = flat.numel() // args.minibatches
        for _ in range(args.epochs):
            perm = torch.randperm(flat.numel())
            for k in range(args.minibatches):
                sub = flat[perm[k * mb:(k + 1) * mb]]
                lv = loss_module(sub)
                loss = lv["loss_objective"] + lv["loss_critic"] + lv["loss_entropy"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_module.parameters(), args.max_grad_norm)
                optim.step()
        collector.update_policy_weights_()
        if steps >= next_eval or steps >= total:
            log(steps)
            while next_eval <= steps:
                next_eval += args.eval_every
    collector.shutdown()
    f.close()


if __name__ == "__main__":
    main()
