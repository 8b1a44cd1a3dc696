"""What ``baton train --list-algos`` and ``--list-envs`` print, without importing a policy or an env.

Asking the registries would import every policy (torch) and env family (gymnasium) for a table of names:
seconds on a busy machine. An algorithm is described by what its class declares (``pipeline``,
``action_spaces``), read from its source file (``commands.class_facts``) for each name setup.py, or another
installed package, declares in the ``baton.policies`` entry-point group: a new algorithm is listed truly with
no row to add here. The env families' facts are kept here, one row per name of the ``baton.envs`` group;
tests/pipelines/test_catalog.py checks both against the registered classes themselves and the gymnasium ids
against gymnasium's registry, so a change on either side fails there.

A name whose source cannot be read (an env family without a row) is listed too, with what the entry point
says (its module) and ``?`` for what only importing it would tell.
"""
from __future__ import annotations

import importlib.util
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

from .class_facts import declared_facts

__all__ = ["EnvFamilyRow", "ENV_FAMILIES", "TORCH_ENVS", "GYM_TYPE", "ATARI_TYPE", "GYM_IDS",
           "describe_algos", "describe_envs", "declared_action_spaces"]

#: the generic env type of ``--env`` (any gymnasium id with flat observations; commands/algo_env.py)
GYM_TYPE = "gym"
#: the env type of ale-py's games
ATARI_TYPE = "atari"


class EnvFamilyRow(NamedTuple):
    ids: str              # the gymnasium id of the family (its ``env_id``), or what ids it takes
    extra: Optional[str]  # the setup.py extra it needs, if any


ENV_FAMILIES: Dict[str, EnvFamilyRow] = {
    "ant": EnvFamilyRow("Ant-v5", "mujoco"),
    ATARI_TYPE: EnvFamilyRow("any ale-py game: ALE/<Game>-v5 or <Game>NoFrameskip-v4, e.g. ALE/Pong-v5", "atari"),
    "bit_flipping": EnvFamilyRow("BitFlipping-v0", None),  # goal-conditioned: hindsight replay (data.replay.her)
    "camera_reach": EnvFamilyRow("CameraReach-v0", None),  # an image key and a vector key, both needed
    "cartpole": EnvFamilyRow("CartPole-v1", None),
    "cartpole_masked": EnvFamilyRow("CartPole-v1", None),  # its velocities hidden: a partially observed task
    "fetch_reach": EnvFamilyRow("FetchReach-v4", "robotics"),  # goal-conditioned: hindsight replay
    "halfcheetah": EnvFamilyRow("HalfCheetah-v5", "mujoco"),
    "hopper": EnvFamilyRow("Hopper-v5", "mujoco"),
    "humanoid": EnvFamilyRow("Humanoid-v5", "mujoco"),
    "invertedpendulum": EnvFamilyRow("InvertedPendulum-v5", "mujoco"),
    "lunarlander": EnvFamilyRow("LunarLander-v3", "box2d"),
    "mpe": EnvFamilyRow("simple_spread_v3", "pettingzoo"),  # several agents; any mpe2 task by env.env_id
    "minigrid": EnvFamilyRow("any MiniGrid id, e.g. MiniGrid-DoorKey-5x5-v0 (its mission dropped)", "minigrid"),
    "pendulum": EnvFamilyRow("Pendulum-v1", None),
    "pettingzoo": EnvFamilyRow("any PettingZoo env by its module, e.g. mpe2.simple_spread_v3", "pettingzoo"),
    "taxi": EnvFamilyRow("Taxi-v4", None),  # its legal-action mask in info: masked acting and targets
    "walker2d": EnvFamilyRow("Walker2d-v5", "mujoco"),
}

#: batched torch env types (``data.torch_env``; registered by the modules of the families above) and their ids
TORCH_ENVS: Dict[str, str] = {"cartpole_torch": "CartPole-torch", "pendulum_torch": "Pendulum-torch"}

#: gymnasium ids ``--env`` takes (flat Box, Dict/Tuple or discrete observations, Discrete or Box actions), newest
#: version of each,
#: by the extra they need
GYM_IDS: Dict[Optional[str], List[str]] = {
    None: ["Acrobot-v1", "CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1",
           "Blackjack-v1", "CliffWalking-v1", "CliffWalkingSlippery-v1", "FrozenLake-v1", "FrozenLake8x8-v1", "Taxi-v4"],
    "box2d": ["BipedalWalker-v3", "BipedalWalkerHardcore-v3", "LunarLander-v3", "LunarLanderContinuous-v3"],
    "mujoco": ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5",
               "InvertedDoublePendulum-v5", "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5",
               "Walker2d-v5"],
}
#: the module each extra installs (looked up, not imported, to say whether it is there)
_EXTRA_PROVIDES = {"box2d": "Box2D", "mujoco": "mujoco", "atari": "ale_py", "robotics": "gymnasium_robotics", "minigrid": "minigrid",
                   "pettingzoo": "mpe2"}


def describe_algos() -> str:
    """The ``--list-algos`` table: each algorithm, the action spaces it takes and its pipeline, as its class
    declares them."""
    lines = ["algo      discrete  continuous  agents   pipeline"]
    for name, target in _declared("baton.policies", {}):
        facts = declared_facts(target, name, ("pipeline", "action_spaces", "multi_agent")) if target else None
        if not facts or "action_spaces" not in facts or "pipeline" not in facts:
            lines.append(f"{name:<9} {'?':<9} {'?':<11} {'?':<8} ? ({(target or '').partition(':')[0]})")
            continue
        spaces = facts["action_spaces"]
        agents = "several" if facts.get("multi_agent") else "one"
        lines.append(f"{name:<9} {_yes('discrete' in spaces):<9} {_yes('continuous' in spaces):<11} {agents:<8} "
                     f"{facts['pipeline'].replace('_', '-')}")
    return "\n".join(lines)


def declared_action_spaces() -> Dict[str, Tuple[str, ...]]:
    """Each registered single-agent algorithm's declared ``action_spaces`` ("discrete", "continuous"), read from
    its source (what a gymnasium id's env takes); an algorithm whose source cannot be read, or that trains the
    several agents of an env (``multi_agent``), is left out."""
    found: Dict[str, Tuple[str, ...]] = {}
    for name, target in _declared("baton.policies", {}):
        facts = declared_facts(target, name, ("action_spaces", "multi_agent")) if target else None
        if facts and "action_spaces" in facts and not facts.get("multi_agent"):
            found[name] = tuple(facts["action_spaces"])
    return found


def describe_envs() -> str:
    """The ``--list-envs`` text: env families with their ids, then the gymnasium ids ``gym`` takes."""
    lines = ["env families (--env ID uses the family whose id it is):"]
    for name, module in _declared("baton.envs", ENV_FAMILIES):
        if name == GYM_TYPE:  # any other id: its own line, last
            continue
        row = ENV_FAMILIES.get(name)
        ids = f"? ({module})" if row is None else f"{row.ids}{_extra_note(row.extra)}"
        lines.append(f"  {name:<12} {ids}")
    for name, env_id in TORCH_ENVS.items():
        lines.append(f"  {name:<14} {env_id} (batched torch envs on a device; docs/performance.md)")
    lines.append(f"  {GYM_TYPE:<12} any other gymnasium id with a flat Box, Dict/Tuple or discrete observation and "
                 f"Discrete or Box actions (a legal-action mask in info['action_mask'] is used); stop value: the "
                 f"id's reward_threshold (docs/observations.md)")
    lines.append("gymnasium ids that fit --env, newest versions (older ones, and other packages' ids with such "
                 "observations, fit too):")
    for extra, ids in GYM_IDS.items():
        lines.append(f"  {', '.join(ids)}{_extra_note(extra)}")
    lines.append("every gymnasium id: python -c \"import gymnasium; gymnasium.pprint_registry()\"")
    return "\n".join(lines)


# ---- helpers ---------------------------------------------------------------------------------------
def _declared(group: str, rows: Mapping[str, object]) -> List[Tuple[str, Optional[str]]]:
    """``(name, module)`` of each entry point of ``group`` (read from the installed metadata, nothing
    imported) and of each row, sorted by name; the module is None for a row no entry point declares."""
    from importlib import metadata

    modules: Dict[str, Optional[str]] = {name: None for name in rows}
    for ep in metadata.entry_points(group=group):
        modules.setdefault(ep.name, ep.value)
    return sorted(modules.items())


def _extra_note(extra: Optional[str]) -> str:
    if extra is None:
        return ""
    installed = importlib.util.find_spec(_EXTRA_PROVIDES[extra]) is not None
    return f" (extra: .[{extra}]{'' if installed else ', not installed'})"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
