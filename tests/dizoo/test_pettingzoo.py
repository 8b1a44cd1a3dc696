"""The ``mpe`` env type (dizoo/pettingzoo): which ids it takes, its worker processes, and the frames of
``baton eval --video``."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("mpe2")

from dizoo.pettingzoo.envs import MPE  # noqa: E402
from data.parallel_env_workers import ParallelEnvWorkers  # noqa: E402
from data.parallel_envs import ParallelEnvBatch  # noqa: E402


def test_it_takes_the_mpe2_tasks_by_their_module_names():
    assert MPE.has_task("simple_spread_v3") and MPE.has_task("simple_reference_v3")
    assert not MPE.has_task("CartPole-v1") and not MPE.has_task("simple_nothing_v9")
    assert not MPE.has_task("simple_spread_v3; import os")
    reference = MPE.make_vector(dict(type="mpe", env_id="simple_reference_v3"), 2, 0)
    assert reference.num_agents == 2  # mpe2's own defaults: Simple Spread's N=3 is Spread's alone
    reference.close()


def test_async_splits_the_envs_over_worker_processes():
    cfg = dict(type="mpe", manager=dict(type="async", workers=2))
    envs = MPE.make_vector(cfg, 4, 0, manager="async")
    try:
        assert isinstance(envs, ParallelEnvWorkers) and envs.workers == 2
    finally:
        envs.close()
    assert isinstance(MPE.make_vector(cfg, 4, 0, manager="sync"), ParallelEnvBatch)


def test_the_render_twin_shows_env_0_step_for_step_and_its_episode_s_last_frame():
    cfg = dict(type="mpe")
    envs, twin = MPE.make_vector(cfg, 2, 0, training=False), MPE.make_render_twin(cfg)
    envs.reset(seed=5)
    first, _ = twin.reset(seed=np.array([5]))
    assert first.shape[0] == 1 and first.shape[-1] == 3 and first.dtype == np.uint8
    rng = np.random.default_rng(0)
    frames = [first]
    for t in range(25):
        actions = rng.integers(0, 5, (2, 3))
        _, reward, terminated, truncated, info = envs.step(actions)
        frame, twin_reward, twin_term, twin_trunc, twin_info = twin.step(actions[:1])
        assert bool(twin_term[0] or twin_trunc[0]) == bool(terminated[0] or truncated[0])
        np.testing.assert_array_equal(twin_reward[0], reward[0])  # the same dynamics as env 0, step for step
        frames.append(frame)
    assert "final_obs" in twin_info and truncated[0]  # max_cycles: the row and the twin end together
    assert np.abs(frames[10].astype(int) - frames[0].astype(int)).mean() > 1  # the agents moved
    twin.close()
    envs.close()


def test_baton_eval_films_a_multi_agent_run(tmp_path, monkeypatch):
    pytest.importorskip("imageio")
    from commands.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--algo", "mappo", "--env", "simple_spread_v3", "--max-env-step", "400", "--no-progress",
                 "--exp-name", "run", "policy.collect.n_sample=200", "env.collector_env_num=4"]) == 0
    assert main(["eval", "run", "--episodes", "1", "--video", "videos", "--gif"]) == 0
    assert (tmp_path / "videos" / "run-best-episode0.gif").stat().st_size > 0


# ---- the pettingzoo env type: any PettingZoo env by its module ---------------------------------------------
def _aec_only_module(monkeypatch, name="my_envs.spread_turns"):
    """A module of the user's own that makes a turn-based (AEC) env alone: mpe2's Simple Spread as ``env()``,
    whose metadata says is_parallelizable (each agent acts once a cycle)."""
    import sys
    import types

    from mpe2 import simple_spread_v3

    package, module = types.ModuleType(name.split(".")[0]), types.ModuleType(name)
    module.env = simple_spread_v3.env
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, name, module)
    return name


def _top_level_module(monkeypatch, name="my_pz_top_v0"):
    """A module of the user's own, outside any package, that makes a parallel env."""
    import sys
    import types

    from mpe2 import simple_reference_v3

    module = types.ModuleType(name)
    module.parallel_env = simple_reference_v3.parallel_env
    monkeypatch.setitem(sys.modules, name, module)
    return name


def test_the_pettingzoo_type_takes_any_env_by_the_module_that_makes_it(monkeypatch):
    from dizoo.pettingzoo.envs import PETTINGZOO

    assert PETTINGZOO.has_task("mpe2.simple_reference_v3") and PETTINGZOO.has_task("pettingzoo.classic.tictactoe_v3")
    assert PETTINGZOO.has_task(_aec_only_module(monkeypatch))
    assert PETTINGZOO.has_task(_top_level_module(monkeypatch))  # one name, no package: --env my_pz_module
    for not_an_env in ("CartPole-v1", "simple_spread_v3", "os.path", "no_such_package.env_v0", "a.b; import os"):
        assert not PETTINGZOO.has_task(not_an_env), not_an_env
    envs = PETTINGZOO.make_vector(dict(type="pettingzoo", env_id="mpe2.simple_reference_v3"), 2, 0)
    assert envs.num_agents == 2 and "state" in envs.single_observation_space.spaces
    envs.close()


def test_a_turn_based_env_that_can_run_in_parallel_is_converted_and_steps_as_the_parallel_one(monkeypatch):
    from dizoo.pettingzoo.envs import PETTINGZOO

    converted = PETTINGZOO.make_vector(dict(type="pettingzoo", env_id=_aec_only_module(monkeypatch)), 2, 3)
    parallel = MPE.make_vector(dict(type="mpe"), 2, 3)
    assert converted.single_observation_space == parallel.single_observation_space
    rng = np.random.default_rng(0)
    for _ in range(30):  # past one episode end (25 cycles)
        actions = rng.integers(0, 5, (2, 3))
        got, want = converted.step(actions), parallel.step(actions)
        for key in ("obs", "state", "alive"):
            np.testing.assert_array_equal(got[0][key], want[0][key])
        for got_part, want_part in zip(got[1:4], want[1:4]):  # rewards, terminated, truncated
            np.testing.assert_array_equal(got_part, want_part)
    converted.close()
    parallel.close()


def test_a_turn_based_game_is_refused_by_name_with_the_reason(monkeypatch, capsys):
    from commands.cli import main
    from data.parallel_envs import AgentSpaceError
    from dizoo.pettingzoo.envs import PETTINGZOO
    from engine.config import ConfigError

    with pytest.raises(AgentSpaceError, match=r"pettingzoo.classic.tictactoe_v3 is turn-based .*is_parallelizable"):
        PETTINGZOO.make_vector(dict(type="pettingzoo", env_id="pettingzoo.classic.tictactoe_v3"), 1, 0)
    env_id = _aec_only_module(monkeypatch, "my_envs.fixed_length")
    import sys

    from mpe2 import simple_spread_v3
    sys.modules[env_id].env = lambda render_mode=None: simple_spread_v3.env(render_mode=render_mode)
    with pytest.raises(ConfigError, match="my_envs.fixed_length takes no max_cycles"):
        PETTINGZOO.make(dict(type="pettingzoo", env_id=env_id, max_episode_steps=5))
    assert main(["train", "--algo", "mappo", "--env", "pettingzoo.classic.tictactoe_v3", "--max-env-step", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("baton: env pettingzoo.classic.tictactoe_v3 is turn-based") and "\n" not in err


def test_mappo_trains_on_a_converted_env_of_the_user_s_module(tmp_path, monkeypatch):
    from commands.cli import main

    monkeypatch.chdir(tmp_path)
    env_id = _aec_only_module(monkeypatch)
    assert main(["train", "--algo", "mappo", "--env", env_id, "--max-env-step", "400", "--no-progress",
                 "--exp-name", "run", "policy.collect.n_sample=200", "env.collector_env_num=4"]) == 0
    assert json.load(open(tmp_path / "run" / "summary.json"))["env_step"] >= 400


def test_a_module_that_fails_to_import_is_named_with_its_cause_not_taken_for_a_gymnasium_id(monkeypatch, tmp_path):
    import sys

    from commands.algo_env import AlgoEnvError, build_config
    from data.parallel_envs import EnvModuleError
    from dizoo.pettingzoo.envs import PETTINGZOO

    (tmp_path / "my_broken_envs").mkdir()
    (tmp_path / "my_broken_envs" / "__init__.py").write_text("")
    (tmp_path / "my_broken_envs" / "needs_a_package_v0.py").write_text("import no_such_dependency_xyz\n")
    (tmp_path / "my_broken_envs" / "raises_v0.py").write_text("raise RuntimeError('the env module is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("my_broken_envs")]:
        monkeypatch.delitem(sys.modules, name)
    assert PETTINGZOO.has_task("my_broken_envs.needs_a_package_v0") and PETTINGZOO.has_task("my_broken_envs.raises_v0")
    assert not PETTINGZOO.has_task("my_broken_envs.no_such_v0")
    with pytest.raises(EnvModuleError, match="imports 'no_such_dependency_xyz', which is not installed"):
        build_config("mappo", "my_broken_envs.needs_a_package_v0")
    with pytest.raises(EnvModuleError, match="RuntimeError: the env module is broken"):
        build_config("mappo", "my_broken_envs.raises_v0")
    with pytest.raises(AlgoEnvError, match="is not a gymnasium id"):
        build_config("mappo", "my_broken_envs.no_such_v0")


def test_a_multi_agent_algorithm_that_does_not_fit_says_its_own_reason(monkeypatch):
    from commands.algo_env import AlgoEnvError, build_config

    pytest.importorskip("pettingzoo.sisl.multiwalker_v9")
    build_config("mappo", "pettingzoo.sisl.multiwalker_v9")  # Box actions: MAPPO's Gaussian
    with pytest.raises(AlgoEnvError, match="one Discrete action space each \\(a Box is continuous: use 'mappo' or "
                                           "'ippo'\\)") as err:
        build_config("qmix", "pettingzoo.sisl.multiwalker_v9")
    assert "does not train" not in str(err.value)
    with pytest.raises(AlgoEnvError, match="several agents in each env, which dqn does not train"):
        build_config("dqn", "mpe2.simple_reference_v3")


def test_env_kwargs_the_env_refuses_and_single_agent_mask_keys_are_named():
    from engine.config import ConfigError

    with pytest.raises(ConfigError, match=r"env.env_kwargs=\{'foo': 3\}: simple_spread_v3 refused its arguments "
                                          r"\(.*'foo'\); it takes N, local_ratio, max_cycles"):
        MPE.make(dict(type="mpe", env_kwargs=dict(foo=3)))
    with pytest.raises(ConfigError, match=r"env.env_kwargs=\{'N': 0\}: making simple_spread_v3 failed with "
                                          r"ValueError: .*; it takes N, "):
        MPE.make(dict(type="mpe", env_kwargs=dict(N=0)))
    with pytest.raises(ConfigError, match=r"env.action_mask_key='', .* the agents of a PettingZoo env give theirs "
                                          r"in their observation"):
        MPE.make(dict(type="mpe", action_mask_key=""))


def test_hindsight_replay_on_a_multi_agent_env_is_refused_by_name():
    from commands.algo_env import build_config
    from engine.config import ConfigError
    from pipelines import build_pipeline

    main, create = build_config("iql", "simple_spread_v3")
    main["policy"].setdefault("other", {}).setdefault("replay_buffer", {})["her"] = dict(strategy="future")
    with pytest.raises(ConfigError, match=r"her relabels the goals of a goal-conditioned gymnasium env \(one agent\); "
                                          r".* set her.strategy='none'"):
        build_pipeline((main, create), max_env_step=64)


def test_a_word_given_to_env_imports_no_module_of_the_standard_library():
    """``has_task`` imports the module an id names: a word of the standard library's (``this`` prints, and
    ``antigravity`` opens a browser, as they are imported) is never taken for one."""
    import sys

    from dizoo.pettingzoo.envs import PETTINGZOO

    for word in ("this", "antigravity", "no_such_module_xyz"):
        assert not PETTINGZOO.has_task(word), word
        assert word not in sys.modules, word  # not imported to find out
