"""The plugin author's own tests: run with `pytest` after `pip install -e .[test]`."""
import numpy as np
import pytest

try:  # a plugin's tests check the installed package: without it they fail, never skip
    import zoo_corridor  # noqa: F401
except ImportError as exc:
    raise ImportError('zoo_corridor is not installed: run pip install -e ".[test]" in the package\'s folder '
                      "(examples/zoo-corridor, or your copy of it), then pytest") from exc

from zoo.core.testing import check_env  # noqa: E402
from zoo_corridor.env import CorridorConfig, make, optimal_return  # noqa: E402


def test_passes_zoo_env_contract():
    check_env(make(None, CorridorConfig(length=5, max_steps=20), seed=0))


def test_always_right_gets_the_optimal_return():
    env = make(None, CorridorConfig(length=10), seed=0)
    obs, _ = env.reset(seed=0)
    assert obs["obs"].shape == (1, 10) and obs["obs"][0, 0] == 1.0
    rewards = []
    while True:
        obs, reward, terminated, truncated, _ = env.step(np.array([1]))
        rewards.append(float(reward[0]))
        if terminated[0] or truncated[0]:
            break
    assert len(rewards) == 9 and terminated[0] and not truncated[0]
    assert sum(rewards) == pytest.approx(optimal_return(10)) == pytest.approx(0.91)


def test_truncated_at_the_time_limit():
    env = make("4", CorridorConfig(max_steps=3), seed=0)
    env.reset(seed=0)
    flags = [env.step(np.array([0]))[2:4] for _ in range(3)]
    assert [(bool(t[0]), bool(u[0])) for t, u in flags] == [(False, False), (False, False), (False, True)]
