"""Every numeric option declares the values that can work (issue 14, item 5).

Over the experiment config, the ``Config`` dataclass of every registered algorithm and
env and the ``workers.<kind>`` options of every worker kind that has them (built-ins,
installed plugins, the example plugin, the testing fakes): each ``int`` or ``float`` option
carries ``metadata=bounded(...)`` (``zoo.core.options``), so a negative count, a zero length
or a non-finite rate is refused before any process starts, and ``zoo train --help`` says
what is allowed. Defaults must lie inside their own bounds.
A new option without a bound fails here, naming it.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from zoo.core.config import ExperimentConfig, algorithm_config_class, env_config_class
from zoo.core.options import BOUNDS, NOT_OPTION, _hints, _numeric_kind, bound_problems
from zoo.core.plugins import PluginHost
from zoo.core.testing import plugin as testing_plugin

ROOT = Path(__file__).resolve().parents[2]


def _classes() -> list:
    host = PluginHost(strict=False)
    if not set(testing_plugin.FAKE_ENVS) & set(host.registry.names("env")):
        host.register_plugin(testing_plugin, "zoo.testing", "zoo-rl", "test", False)
    out = [pytest.param(ExperimentConfig, "", id="experiment")]
    for component in host.registry.all("algorithm"):
        out.append(pytest.param(lambda c=component: algorithm_config_class(c), "algo.", id=f"algo:{component.name}"))
    for component in host.registry.all("env"):
        out.append(pytest.param(lambda c=component: env_config_class(c), "env.", id=f"env:{component.name}"))
    from zoo.core.kinds import kind_from_component

    for component in host.registry.all("worker"):  # workers.<kind>.* options (the built-in kinds have none)
        if component.options.get("count") is not None and component.options.get("options") is None:
            continue
        out.append(pytest.param(lambda c=component: kind_from_component(c).options_class(),
                                f"workers.{component.name}.", id=f"worker:{component.name}"))
    if "corridor" not in host.registry.names("env"):
        def corridor():
            sys.path.insert(0, str(ROOT / "examples" / "zoo-corridor" / "src"))
            from zoo_corridor.env import CorridorConfig

            return CorridorConfig
        out.append(pytest.param(corridor, "env.", id="env:corridor (example)"))
    return out


def _numeric_leaves(cls: type, prefix: str) -> list[tuple[str, dataclasses.Field]]:
    out = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if NOT_OPTION in f.metadata:
            continue
        tp = hints.get(f.name, f.type)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out += _numeric_leaves(tp, f"{prefix}{f.name}.")
        elif _numeric_kind(tp) is not None:
            out.append((prefix + f.name, f))
    return out


@pytest.mark.parametrize(("get_cls", "prefix"), _classes())
def test_every_numeric_option_declares_its_bounds(get_cls, prefix):
    cls = get_cls() if not isinstance(get_cls, type) else get_cls
    if cls is None:
        pytest.skip("no options dataclass")
    missing = [path for path, f in _numeric_leaves(cls, prefix) if BOUNDS not in f.metadata]
    assert missing == [], (f"numeric options without bounds: {missing}; declare what can work with "
                           "field(default=..., metadata=zoo.core.options.bounded(ge=..., ...))")
    try:
        default = cls() if cls is not ExperimentConfig else cls(algo_name="a", env_name="e")
    except TypeError:
        pytest.skip("needs constructor arguments")
    assert bound_problems(default, prefix) == []  # the defaults are allowed values
