"""Every environment the registry can build without extra downloads passes ``check_env``.

The cases come from the plugin host (built-ins, installed third-party plugins such as
``zoo-corridor``) plus ``zoo.core.testing``'s fakes, registered through their test
plugin. Names we expect but which are not registered in this checkout, or whose modules
fail to import (a missing optional dependency), are skipped with the reason.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from zoo.core.plugins import PluginHost
from zoo.core.registry import UnknownComponentError
from zoo.core.testing import CrashingConfig, check_env, check_vector_env
from zoo.core.testing import plugin as testing_plugin

# name -> the args to build it with (the part after the colon of --env NAME:ARG).
ARGS = {
    "gym": ["CartPole-v1", "Acrobot-v1", "Pendulum-v1"],
    "atari": ["Pong", "Breakout"],
    "pettingzoo": ["mpe2.simple_spread_v3"],
    "hide-and-seek": ["quadrant", "full"],
}
# name -> config overrides that make the check quick (and the crashing fake not crash).
OVERRIDES = {
    "fake-crashing": {"crash_at": 0},
    "boom": {"crash_at": 0},  # tests/plugins/zoo-boom, when on the path
    "fake-slow": {"step_latency": 0.0005},
    "fake-mixed": {"mixed_spaces": True},  # its agents' spaces differ: only with named policies
    "pettingzoo": {"kwargs": "N=3,max_cycles=25"},
}
# name -> config overrides under which its vector_factory gives a vector env (not None).
VECTOR_OVERRIDES = {"atari": {"backend": "vector"}}
# Expected in a complete checkout; skipped with a reason when not registered.
EXPECTED = ("gym", "atari", "hide-and-seek", "corridor", "fake-counting", "fake-crashing", "fake-slow")
MAX_STEPS = 300


def _host() -> PluginHost:
    host = PluginHost(strict=False)
    if not set(testing_plugin.FAKE_ENVS) & set(host.registry.names("env")):  # zoo-fakes not on the path
        host.register_plugin(testing_plugin, "zoo.testing", "zoo-rl", "test", False)
    return host


HOST = _host()


def _cases() -> list:
    names = sorted(set(EXPECTED) | set(HOST.registry.names("env")))
    return [pytest.param(name, arg, id=f"{name}:{arg}" if arg else name)
            for name in names for arg in ARGS.get(name, [None])]


def build(name: str, arg: str | None, seed: int = 0, **overrides):
    """Build env ``name`` from the registry, skipping when it is absent or cannot be imported."""
    try:
        component = HOST.registry.get("env", name)
    except UnknownComponentError:
        failed = [f"{p.name}: {p.error}" for p in HOST.failures]
        pytest.skip(f"env {name!r} is not registered (its plugin is not installed or not in this checkout)"
                    + (f" (failed plugins: {'; '.join(failed)})" if failed else ""))
    try:
        factory = component.load()
        config_cls = component.option("config")
    except ImportError as exc:
        pytest.skip(f"env {name!r} cannot be imported: {type(exc).__name__}: {exc}")
    config = config_cls() if config_cls is not None else None
    overrides = {**OVERRIDES.get(name, {}), **overrides}
    if overrides:
        config = dataclasses.replace(config, **overrides)
    try:
        return factory(arg, config, seed)
    except ImportError as exc:
        pytest.skip(f"env {name!r} needs a missing dependency: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize(("name", "arg"), _cases())
def test_env_passes_the_contract(name, arg):
    env = build(name, arg)
    report = check_env(env, seed=0, episodes=2, max_steps=MAX_STEPS)
    assert report.steps > 0


@pytest.mark.parametrize(("name", "arg"), _cases())
def test_env_spec_is_consistent_with_its_registration(name, arg):
    env = build(name, arg, seed=1)
    try:
        assert env.spec.env_id, "spec.env_id is empty"
        assert env.spec.num_agents == len(env.spec.agents) >= 1
        budget = HOST.registry.get("env", name).option("default_budget")
        if callable(budget):
            budget = budget(arg)
        if budget is not None:
            unit, n = budget
            assert unit in ("env_steps", "frames") and isinstance(n, int) and n > 0, budget
    finally:
        env.close()


@pytest.mark.parametrize(("name", "arg"), _cases())
def test_a_registered_vector_factory_gives_a_vector_env_matching_the_single_env(name, arg):
    """``vector_factory(arg, config, 3)``: None or a VectorEnv passing ``check_vector_env``
    against the single env's spec, for the default config and for ``VECTOR_OVERRIDES``."""
    registered = name in HOST.registry.names("env")
    vector_factory = HOST.registry.get("env", name).option("vector_factory") if registered else None
    if vector_factory is None:
        pytest.skip(f"env {name!r} registers no vector_factory")
    for overrides in ({}, VECTOR_OVERRIDES.get(name, {})):
        env = build(name, arg, **overrides)
        config = HOST.registry.get("env", name).option("config")
        config = dataclasses.replace(config(), **{**OVERRIDES.get(name, {}), **overrides}) if config else None
        venv = vector_factory(arg, config, 3)
        try:
            if venv is not None:
                check_vector_env(venv, env.spec, seed=0, steps=5)
        finally:
            env.close()
    assert name not in VECTOR_OVERRIDES or venv is not None


def test_fake_crashing_env_from_the_registry_raises_boom_at_step_5():
    env = build("fake-crashing", None, crash_at=5)
    assert isinstance(HOST.registry.get("env", "fake-crashing").option("config")(), CrashingConfig)
    env.reset(seed=0)
    for t in range(1, 5):
        obs = env.step(np.zeros(1, dtype=np.int64))[0]
        assert obs["obs"].tolist() == [[float(t)]]
    with pytest.raises(RuntimeError, match="^boom$"):
        env.step(np.zeros(1, dtype=np.int64))


@pytest.mark.parametrize(("name", "arg"), _cases())
def test_a_registered_renderer_draws_rgb_frames_of_one_size(name, arg):
    """``renderer(env)`` (zoo eval --video) after a reset and after a step: ``uint8 [H, W, 3]``, one size."""
    renderer = HOST.registry.get("env", name).option("renderer") if name in HOST.registry.names("env") else None
    if renderer is None:
        pytest.skip(f"env {name!r} registers no renderer")
    env = build(name, arg)
    try:
        env.reset(seed=0)
        first = renderer(env)
        space = env.spec.action_space
        space.seed(0)
        env.step(np.stack([np.asarray(space.sample()) for _ in range(env.spec.num_agents)]))
        second = renderer(env)
    finally:
        env.close()
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3, (first.dtype, first.shape)
    assert second.shape == first.shape and first.shape[0] > 1 and first.shape[1] > 1
    if name == "atari":
        assert first.shape == (210, 160, 3)  # the real screen, whatever the observation size
