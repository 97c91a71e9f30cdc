"""Naming Gymnasium envs the ecosystem's way; env.kwargs and env.wrappers (issue 15)."""
import numpy as np
import pytest

from zoo.core.plugins import PluginHost
from zoo.core.resolve import resolve_env
from zoo.core.testing import check_env
from zoo.plugins.envs.gym.env import GymConfig, default_budget, make, resolves, split_module_id
from zoo.plugins.envs.kwargs import parse_kwargs


def test_module_colon_ids_resolve_to_the_gym_plugin():
    assert split_module_id("my_pkg.envs:Corridor-v0") == ("my_pkg.envs", "Corridor-v0")
    assert split_module_id("CartPole-v1") is None
    assert resolves("zoo.core.testing.masked_envs:MaskedTarget-v0")
    assert not resolves("no_such_module_zoo:Thing-v0")
    registry = PluginHost().registry
    component, arg = resolve_env(registry, "zoo.core.testing.masked_envs:MaskedTarget-v0")
    assert component.name == "gym" and arg == "zoo.core.testing.masked_envs:MaskedTarget-v0"
    component, arg = resolve_env(registry, "pettingzoo:zoo.core.testing.masked_envs")  # registered prefix first
    assert component.name == "pettingzoo" and arg == "zoo.core.testing.masked_envs"
    assert default_budget("my_pkg.envs:CartPole-v1") == ("env_steps", 200_000)


def test_make_by_module_id_and_its_errors():
    env = make("zoo.core.testing.masked_envs:MaskedTarget-v0", GymConfig(), 0)
    assert env.spec.env_id == "zoo.core.testing.masked_envs:MaskedTarget-v0"
    assert sorted(env.spec.observation_space) == ["obs", "zoo:action_mask"]
    check_env(env)
    with pytest.raises(ValueError, match=r"cannot import module 'no_such_module_zoo'"):
        make("no_such_module_zoo:Thing-v0", GymConfig(), 0)
    with pytest.raises(ValueError, match=r"unknown Gymnasium id 'Nope-v0' after importing 'zoo.core.testing.masked_envs'"):
        make("zoo.core.testing.masked_envs:Nope-v0", GymConfig(), 0)


def test_kwargs_reach_gymnasium_make_and_wrappers_apply_in_order():
    env = make("Pendulum-v1", GymConfig(kwargs="g=3.5", wrappers="RecordEpisodeStatistics,NormalizeObservation"), 0)
    assert env.env.unwrapped.g == 3.5
    assert type(env.env).__name__ == "NormalizeObservation"
    obs, _ = env.reset(seed=0)
    assert obs["obs"].dtype == np.float32  # NormalizeObservation's float64 cast back to the space's float32
    check_env(env, check_bounds=False, check_determinism=False)
    with pytest.raises(ValueError, match=r"env.wrappers: 'NoSuchWrapper' is not a gymnasium.wrappers class"):
        make("Pendulum-v1", GymConfig(wrappers="NoSuchWrapper"), 0)
    with pytest.raises(ValueError, match=r"gymnasium.make rejected env.kwargs='nonsense=1'"):
        make("Pendulum-v1", GymConfig(kwargs="nonsense=1"), 0)


def test_kwargs_parsing_keeps_brackets_and_quotes_together():
    assert parse_kwargs("N=3,max_cycles=25") == {"N": 3, "max_cycles": 25}
    assert parse_kwargs("size=(4, 4),name='a,b',mode=rgb_array") == {"size": (4, 4), "name": "a,b", "mode": "rgb_array"}
    with pytest.raises(ValueError, match="is not key=value"):
        parse_kwargs("oops")
