"""engine.params: a config section declared once, as a dataclass beside its reader (issue 30, part 5)."""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import List, Optional

import pytest

from engine.config import ConfigError, base_config, compile_config, config_sections
from engine.params import Params, param, section
from engine.registry import CONFIG_SECTIONS


@dataclass
class Inner(Params):
    """A nested section."""

    width: int = param(64, rule="at_least_one")
    """How wide."""
    kind: str = param("mlp", choices=("mlp", "cnn"))
    """What kind."""


@dataclass
class Outer(Params):
    """A section with a nested one."""

    rate: float = param(1e-3, rule="positive")
    """The rate."""
    sizes: List[int] = param([64, 64])
    """Widths."""
    device: Optional[str] = param(None)
    """A device's name, or None."""
    inner: Inner = section(Inner, width=32)
    """The nested section, narrower here."""


@dataclass
class Derived(Outer):
    rate: float = param(3e-4, rule="positive")


def test_defaults_are_the_plain_nested_dict_a_config_file_holds():
    assert Outer.defaults() == {"rate": 1e-3, "sizes": [64, 64], "device": None, "inner": {"width": 32, "kind": "mlp"}}
    assert Derived.defaults()["rate"] == 3e-4


def test_of_fills_absent_keys_and_gives_typed_nested_sections():
    outer = Outer.of({"inner": {"kind": "cnn"}, "sizes": [8]})
    assert isinstance(outer.inner, Inner) and outer.inner.kind == "cnn" and outer.inner.width == 32
    assert outer.sizes == [8] and Outer().sizes is not Outer().sizes  # list defaults are not shared


def test_of_refuses_an_unknown_key_a_wrong_type_and_a_broken_rule_naming_the_path():
    with pytest.raises(ConfigError, match=r"unknown config key 'learn.inner.widht'; did you mean 'learn.inner.width'"):
        Outer.of({"inner": {"widht": 3}}, "learn")
    with pytest.raises(ConfigError, match=r"'learn.rate' expects float .* got str"):
        Outer.of({"rate": "fast"}, "learn")
    with pytest.raises(ConfigError, match=r"config key 'policy.learn.inner.width' is 0: it must be at least 1"):
        Outer.of({"inner": {"width": 0}}, "policy.learn")
    with pytest.raises(ConfigError, match=r"learn.inner.kind='rnn' is not one of 'mlp', 'cnn'"):
        Outer.of({"inner": {"kind": "rnn"}}, "learn")


def test_a_key_whose_default_is_none_takes_none_or_its_declared_type():
    assert Outer.of({"device": "cuda:1"}).device == "cuda:1" and Outer.of({"device": None}).device is None
    assert Derived.rules("policy").types == {"policy.device": Optional[str]}
    with pytest.raises(ConfigError, match=r"'learn.device' expects Optional\[str\] \(default None\), got int: 1"):
        Outer.of({"device": 1}, "learn")


def test_a_whole_config_checks_the_declared_type_of_a_none_default(tmp_path):
    """Through compile_config: values that used to pass the merge and fail deep in a run (``target_entropy='auto'``
    reached the temperature's loss as a string)."""
    from dizoo.classic_control.pendulum.config.pendulum_sac_config import create_config, main_config

    for value in ("auto", True, [1.0]):
        user = copy.deepcopy(main_config)
        user.policy.learn.target_entropy = value
        with pytest.raises(ConfigError, match=rf"'policy.learn.target_entropy' expects Optional\[float\] \(default "
                                              rf"None\), got {type(value).__name__}: {re.escape(repr(value))}"):
            compile_config(user, create_config, save=False)
    user = copy.deepcopy(main_config)
    user.policy.learn.target_entropy = -1  # an int where a float is declared: a number is a number
    assert compile_config(user, create_config, save=False).policy.learn.target_entropy == -1


def test_rules_and_docs_come_from_the_fields_inherited_ones_included():
    rules = Derived.rules("policy")
    assert rules.positive == ("policy.rate",) and rules.at_least_one == ("policy.inner.width",)
    assert rules.choices == {"policy.inner.kind": ("mlp", "cnn")}
    docs = Derived.field_docs("x")
    assert docs["x.rate"] == "The rate." and docs["x.inner"] == "The nested section, narrower here."
    assert docs["x.inner.kind"] == "What kind."
    (rate,) = [info for info in Derived.fields_info() if info.path == "rate"]
    assert (rate.type, rate.default, rate.rule) == ("float", 3e-4, "> 0")


def test_pick_reads_the_run_keys_beside_the_sections():
    @dataclass
    class Top(Params):
        seed: int = param(0)
        """A seed."""

    assert Top.pick({"seed": 3, "policy": {"anything": 1}}).seed == 3


def test_every_registered_section_documents_each_key():
    for name, params_cls in config_sections().items():
        undocumented = [path for path, doc in params_cls.field_docs(name).items() if not doc]
        assert not undocumented, f"{params_cls.__name__}: {undocumented}"


def test_a_package_declares_a_section_of_its_own_and_the_config_checks_it(monkeypatch, tmp_path):
    """What a user's own middleware does: declare its keys beside it, register the section."""

    @dataclass
    class MyParams(Params):
        every: int = param(10, rule="at_least_one")
        """Iterations between my middleware's actions."""

    CONFIG_SECTIONS.names()  # the entry points loaded first: the test adds to the whole registry
    monkeypatch.setitem(CONFIG_SECTIONS._items, "mine", MyParams)
    assert base_config()["mine"] == {"every": 10}
    create = dict(env=dict(type="cartpole"), policy=dict(type="dqn"))
    cfg = compile_config(dict(exp_name=str(tmp_path / "r"), mine=dict(every=3)), create, save=False)
    assert MyParams.of(cfg.mine, "mine").every == 3
    with pytest.raises(ConfigError, match=r"'mine.every' is 0: it must be at least 1"):
        compile_config(dict(exp_name=str(tmp_path / "r"), mine=dict(every=0)), create, save=False)
    with pytest.raises(ConfigError, match=r"unknown config key 'mine.evry'; did you mean 'mine.every'"):
        compile_config(dict(exp_name=str(tmp_path / "r"), mine=dict(evry=1)), create, save=False)
