"""``zoo.core.testing``: the fake envs behave exactly as documented, and ``check_env``
catches each kind of contract violation with a clear message."""
from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from zoo.core.env import GymnasiumEnv
from zoo.core.testing import (
    CountingConfig,
    CountingEnv,
    CrashingEnv,
    EnvCheckError,
    EnvCheckReport,
    SlowEnv,
    check_env,
    make_boom,
    make_counting,
    make_crashing,
    make_slow,
)

ZERO = np.zeros(1, dtype=np.int64)


# -- fake envs ------------------------------------------------------------------------------
def test_counting_env_exact_trajectory():
    env = CountingEnv(episode_length=3, num_agents=2)
    obs, info = env.reset(seed=7)
    assert obs["obs"].dtype == np.float32 and obs["obs"].tolist() == [[0.0], [0.0]] and info == {}
    out = [env.step(np.array([0, 1])) for _ in range(3)]
    assert [o[0]["obs"].tolist() for o in out] == [[[1.0], [1.0]], [[2.0], [2.0]], [[3.0], [3.0]]]
    assert [o[1].tolist() for o in out] == [[1.0, 1.0]] * 3
    assert [o[2].tolist() for o in out] == [[False, False], [False, False], [True, True]]
    assert [o[3].tolist() for o in out] == [[False, False]] * 3
    assert (out[0][1].dtype, out[0][2].dtype, out[0][3].dtype) == (np.float32, np.bool_, np.bool_)
    assert [a.tolist() for a in env.actions] == [[0, 1]] * 3
    assert (env.t, env.total_steps, env.resets, env.seeds) == (3, 3, 1, [7])


def test_counting_env_truncates_when_asked():
    env = CountingEnv(episode_length=1, truncate=True)
    env.reset()
    _, _, terminated, truncated, _ = env.step(ZERO)
    assert (terminated.tolist(), truncated.tolist()) == ([False], [True])


def test_counting_env_never_resets_by_itself():
    env = CountingEnv(episode_length=1)
    with pytest.raises(RuntimeError, match=r"step\(\) called before reset\(\)"):
        env.step(ZERO)
    env.reset()
    env.step(ZERO)
    with pytest.raises(RuntimeError, match=r"step\(\) called after the episode ended; the actor must call reset"):
        env.step(ZERO)
    env.reset()
    assert env.step(ZERO)[0]["obs"].tolist() == [[1.0]]


@pytest.mark.parametrize("action", [np.array([2]), np.array([[0]]), np.array([0.0]), np.array([0, 0])])
def test_counting_env_rejects_bad_actions(action):
    env = CountingEnv()
    env.reset()
    with pytest.raises(ValueError, match="fake-counting: action"):
        env.step(action)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"episode_length": 0}, "episode_length=0 is not allowed: an int >= 1"),
    ({"num_agents": 0}, "num_agents=0 is not allowed: an int >= 1"),
])
def test_counting_env_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        CountingEnv(**kwargs)


def test_crashing_env_counts_steps_across_resets():
    env = CrashingEnv(crash_at=5, episode_length=2)
    seen = []
    for _ in range(2):
        env.reset()
        seen += [env.step(ZERO)[0]["obs"].item() for _ in range(2)]
    env.reset()
    with pytest.raises(RuntimeError, match="^boom$"):
        env.step(ZERO)
    assert seen == [1.0, 2.0, 1.0, 2.0] and env.total_steps == 5


def test_crashing_env_custom_message_and_never():
    with pytest.raises(RuntimeError, match="^kaput$"):
        env = CrashingEnv(crash_at=1, message="kaput")
        env.reset()
        env.step(ZERO)
    assert check_env(CrashingEnv(crash_at=0, episode_length=3)) == EnvCheckReport(steps=6, episodes=2)
    with pytest.raises(ValueError, match=r"^crash_at=-1 is not allowed: an int >= 0 \(0: never\)$"):
        CrashingEnv(crash_at=-1)


def test_slow_env_sleeps(monkeypatch):
    slept = []
    monkeypatch.setattr("zoo.core.testing.fake_envs.time.sleep", slept.append)
    env = SlowEnv(step_latency=0.25, reset_latency=0.5, episode_length=2)
    env.reset()
    env.step(ZERO)
    env.step(ZERO)
    assert slept == [0.5, 0.25, 0.25]


def test_factories_use_their_configs():
    env = make_counting(None, CountingConfig(episode_length=4, num_agents=3, truncate=True), 0)
    assert (env.episode_length, env.num_agents, env.truncate, env.spec.env_id) == (4, 3, True, "fake-counting")
    assert make_crashing(None, None, 0).crash_at == 5
    boom = make_boom(None, None, 0)
    assert (boom.spec.env_id, boom.crash_at, boom.message) == ("boom", 5, "boom")
    assert make_slow(None, None, 0).step_latency == 0.01
    with pytest.raises(ValueError, match="env 'fake-counting' takes no argument after ':', got 'x'"):
        make_counting("x", None, 0)


@pytest.mark.parametrize(("env", "expected"), [
    (CountingEnv(episode_length=3), EnvCheckReport(steps=6, episodes=2)),
    (CountingEnv(episode_length=4, num_agents=3, truncate=True), EnvCheckReport(steps=8, episodes=2)),
    (SlowEnv(step_latency=0.0, episode_length=2), EnvCheckReport(steps=4, episodes=2)),
    (CountingEnv(episode_length=50), EnvCheckReport(steps=30, episodes=0)),
])
def test_fakes_pass_check_env_with_exact_counts(env, expected):
    assert check_env(env, max_steps=30) == expected
    assert env.closed


# -- check_env catches violations -------------------------------------------------------------
class _Broken(CountingEnv):
    """A CountingEnv whose step/reset outputs can be corrupted by tests."""

    def __init__(self, corrupt_step=None, corrupt_reset=None, **kwargs):
        super().__init__(**kwargs)
        self.corrupt_step, self.corrupt_reset = corrupt_step, corrupt_reset

    def reset(self, seed=None):
        out = super().reset(seed)
        return self.corrupt_reset(out) if self.corrupt_reset else out

    def step(self, action):
        out = super().step(action)
        return self.corrupt_step(out) if self.corrupt_step else out


def _with(out, i, value):
    out = list(out)
    out[i] = value
    return tuple(out)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(corrupt_reset=lambda o: o[0]),
     "env 'fake-counting': reset(seed=0): must return a tuple (obs, info), got dict"),
    (dict(corrupt_reset=lambda o: ({"obs": o[0]["obs"][0]}, {})),
     "env 'fake-counting': reset(seed=0): observation 'obs' has shape (1,), expected (1, 1) = "
     "[A=1, *space.shape=(1,)] (the leading axis is the agent axis)"),
    (dict(corrupt_reset=lambda o: ({"obs": o[0]["obs"].astype(np.float64)}, {})),
     "env 'fake-counting': reset(seed=0): observation 'obs' has dtype float64, expected the space's float32"),
    (dict(corrupt_reset=lambda o: ({"pixels": o[0]["obs"]}, {})),
     "env 'fake-counting': reset(seed=0): observation keys ['pixels'] differ from spec.observation_space keys "
     "['obs']"),
    (dict(corrupt_step=lambda o: o[:4]),
     "env 'fake-counting': step #1: must return a tuple (obs, reward, terminated, truncated, info), "
     "got tuple of length 4"),
    (dict(corrupt_step=lambda o: _with(o, 1, o[1].astype(np.float64))),
     "env 'fake-counting': step #1: reward has dtype float64, expected float32"),
    (dict(corrupt_step=lambda o: _with(o, 1, 1.0)),
     "env 'fake-counting': step #1: reward must be an np.ndarray, got float"),
    (dict(corrupt_step=lambda o: _with(o, 2, o[2].astype(np.int8))),
     "env 'fake-counting': step #1: terminated has dtype int8, expected bool"),
    (dict(corrupt_step=lambda o: _with(o, 3, np.zeros(2, dtype=bool))),
     "env 'fake-counting': step #1: truncated has shape (2,), expected (1,) = [A]"),
    (dict(corrupt_step=lambda o: _with(o, 1, np.array([np.nan], dtype=np.float32))),
     "env 'fake-counting': step #1: reward is not finite: array([nan], dtype=float32)"),
    (dict(corrupt_step=lambda o: _with(o, 4, {"final_observation": o[0]})),
     "env 'fake-counting': step #1: info has 'final_observation': the env auto-resets; the actor owns resets, "
     "remove the wrapper"),
    (dict(corrupt_step=lambda o: _with(o, 4, {"episode": {"return": 1.0}})),
     "env 'fake-counting': step #1: info['episode'] must be {'return': float, 'length': int}, "
     "got {'return': 1.0}"),
    (dict(corrupt_step=lambda o: _with(o, 4, {"active": [True]})),
     "env 'fake-counting': step #1: info['active'] must be a bool np.ndarray of shape (1,), got [True]"),
    (dict(corrupt_step=lambda o: _with(o, 4, None)),
     "env 'fake-counting': step #1: info must be a dict, got NoneType"),
    (dict(corrupt_step=lambda o: _with(o, 0, {"obs": o[0]["obs"] + 100})),
     "env 'fake-counting': step #1: observation 'obs'[0, 0] = np.float32(101.0) is outside the space "
     "[np.float32(0.0), np.float32(10.0)] (or not finite)"),
])
def test_check_env_reports_violations(kwargs, message):
    with pytest.raises(EnvCheckError) as err:
        check_env(_Broken(**kwargs))
    assert str(err.value) == message
    assert isinstance(err.value, AssertionError)


def test_check_env_bounds_can_be_disabled():
    env = _Broken(corrupt_step=lambda o: _with(o, 0, {"obs": o[0]["obs"] + 100}), episode_length=2)
    assert check_env(env, check_bounds=False) == EnvCheckReport(steps=4, episodes=2)


def test_check_env_spec_errors():
    env = CountingEnv()
    env.spec = dataclasses.replace(env.spec, agents=("a", "a"))
    with pytest.raises(EnvCheckError, match=r"^env 'fake-counting': spec.agents: agent names must be unique"):
        check_env(env)
    env.spec = dataclasses.replace(env.spec, agents=("a",), action_space=spaces.Text(3))
    with pytest.raises(EnvCheckError, match=r"spec.action_space: spec.action_space is Text\(.*Discrete, MultiDiscrete, "
                       r"MultiBinary and Box"):
        check_env(env)
    env.spec = dataclasses.replace(env.spec, action_space=spaces.Discrete(2), frame_skip=0)
    with pytest.raises(EnvCheckError, match=r"spec.frame_skip: must be an int >= 1, got 0"):
        check_env(env)
    env.spec = dataclasses.replace(env.spec, frame_skip=1, observation_space={"obs": spaces.Discrete(3)})
    with pytest.raises(EnvCheckError, match=r"spec.observation_space\['obs'\]: must be a gymnasium.spaces.Box"):
        check_env(env)
    with pytest.raises(EnvCheckError, match=r"^env object: .spec must be a zoo.core.env.EnvSpec, got NoneType$"):
        check_env(object())


def test_check_env_catches_nondeterminism():
    class Drifting(CountingEnv):
        def reset(self, seed=None):
            obs, info = super().reset(seed)
            return {"obs": obs["obs"] + np.float32(self.resets)}, info

    with pytest.raises(EnvCheckError) as err:
        check_env(Drifting())
    assert str(err.value) == ("env 'fake-counting': determinism: a second reset(seed=0) gave a different "
                              "observation (pass check_determinism=False if that is intended)")
    assert check_env(Drifting(), check_determinism=False).episodes == 2


def test_check_env_catches_nondeterministic_steps():
    class Noisy(CountingEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward + np.float32(self.total_steps), terminated, truncated, info

    with pytest.raises(EnvCheckError) as err:
        check_env(Noisy(episode_length=2))
    assert str(err.value) == ("env 'fake-counting': determinism, step #1 after reset(seed=0): reward was "
                              "array([2.], dtype=float32) the first time and array([6.], dtype=float32) on replay "
                              "with the same actions")


def test_check_env_catches_an_autoreset_wrapper():
    env = GymnasiumEnv(gymnasium.wrappers.Autoreset(gymnasium.make("CartPole-v1")), "CartPole-v1")
    with pytest.raises(EnvCheckError, match=r"^env 'CartPole-v1': wrappers: Autoreset resets the env by itself"):
        check_env(env)


def test_check_env_lets_env_exceptions_through():
    with pytest.raises(RuntimeError, match="^boom$"):
        check_env(CrashingEnv(crash_at=3))
