"""``check_env``: validate an environment against :mod:`zoo.core.env`'s contract.

Plugin authors call it from their tests::

    from zoo.core.testing import check_env
    check_env(make(None, MyConfig(), seed=0))

It resets and steps the env with random actions and raises :class:`EnvCheckError` (an
``AssertionError``) naming the env, the call and what was wrong at the first violation.
"""
from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

#: info keys left by auto-reset wrappers (Gymnasium's and vector envs').
AUTORESET_INFO_KEYS = ("final_observation", "final_obs", "final_info", "_final_observation", "_final_info")


class EnvCheckError(AssertionError):
    """An environment breaks Zoo's Env contract; the message says where and how."""


@dataclass
class EnvCheckReport:
    """What :func:`check_env` did: ``steps`` calls of ``step``, ``episodes`` episodes that ended."""

    steps: int
    episodes: int


def _fail(env_id: str, where: str, what: str) -> NoReturn:
    raise EnvCheckError(f"env {env_id!r}: {where}: {what}")


def _check_spec(env: Any) -> tuple[str, int]:
    from gymnasium import spaces

    from zoo.core.env import EnvSpec

    spec = getattr(env, "spec", None)
    if not isinstance(spec, EnvSpec):
        raise EnvCheckError(f"env {type(env).__name__}: .spec must be a zoo.core.env.EnvSpec, "
                            f"got {type(spec).__name__}")
    env_id = spec.env_id
    if not isinstance(env_id, str) or not env_id:
        _fail(str(env_id), "spec.env_id", f"must be a non-empty str, got {env_id!r}")
    agents = spec.agents
    if not isinstance(agents, tuple) or not agents or not all(isinstance(a, str) and a for a in agents):
        _fail(env_id, "spec.agents", f"must be a non-empty tuple of agent names (str), got {agents!r}")
    if len(set(agents)) != len(agents):
        _fail(env_id, "spec.agents", f"agent names must be unique, got {agents!r}")
    if spec.num_agents != len(agents):
        _fail(env_id, "spec.num_agents", f"is {spec.num_agents}, expected len(spec.agents) = {len(agents)}")
    stages = getattr(spec, "stages", ())
    if not isinstance(stages, tuple) or not all(isinstance(n, str) and n for n in stages):
        _fail(env_id, "spec.stages", f"must be a tuple of stage names (str), got {stages!r}")
    if stages and not callable(getattr(env, "set_curriculum_stage", None)):
        _fail(env_id, "spec.stages", f"lists {len(stages)} curriculum stages but the env has no "
              "set_curriculum_stage(stage) method (docs/curriculum.md)")
    if not isinstance(spec.observation_space, dict) or not spec.observation_space:
        _fail(env_id, "spec.observation_space", "must be a non-empty dict of observation key -> Box, "
              f"got {spec.observation_space!r}")
    for key, space in spec.observation_space.items():
        if not isinstance(key, str):
            _fail(env_id, "spec.observation_space", f"keys must be str, got {key!r}")
        if not isinstance(space, spaces.Box):
            _fail(env_id, f"spec.observation_space[{key!r}]", f"must be a gymnasium.spaces.Box, got {space!r}")
    from zoo.core.spaces import UnsupportedSpaceError, check_action_space

    try:
        check_action_space(spec.action_space, "spec.action_space")
    except UnsupportedSpaceError as exc:
        _fail(env_id, "spec.action_space", str(exc))
    if not isinstance(spec.frame_skip, int) or isinstance(spec.frame_skip, bool) or spec.frame_skip < 1:
        _fail(env_id, "spec.frame_skip", f"must be an int >= 1, got {spec.frame_skip!r}")
    if not isinstance(spec.resolved, dict):
        _fail(env_id, "spec.resolved", f"must be a dict, got {type(spec.resolved).__name__}")
    return env_id, len(agents)


def _check_no_autoreset_wrapper(env: Any, env_id: str) -> None:
    seen, obj = set(), env
    for _ in range(64):
        if obj is None or id(obj) in seen:
            return
        seen.add(id(obj))
        name = type(obj).__name__
        if "autoreset" in name.lower():
            _fail(env_id, "wrappers", f"{name} resets the env by itself; the actor owns resets, remove it")
        obj = getattr(obj, "env", None)


def _check_obs(env: Any, env_id: str, where: str, obs: Any, a: int, check_bounds: bool) -> None:
    spaces = env.spec.observation_space
    if not isinstance(obs, dict):
        _fail(env_id, where, f"observation must be a dict of key -> np.ndarray, got {type(obs).__name__}")
    if set(obs) != set(spaces):
        _fail(env_id, where, f"observation keys {sorted(obs)} differ from spec.observation_space keys {sorted(spaces)}")
    for key, space in spaces.items():
        value = obs[key]
        if not isinstance(value, np.ndarray):
            _fail(env_id, where, f"observation {key!r} must be an np.ndarray, got {type(value).__name__}")
        expected = (a, *space.shape)
        if value.shape != expected:
            _fail(env_id, where, f"observation {key!r} has shape {value.shape}, expected {expected} "
                  f"= [A={a}, *space.shape={space.shape}] (the leading axis is the agent axis)")
        if value.dtype != space.dtype:
            _fail(env_id, where, f"observation {key!r} has dtype {value.dtype}, expected the space's {space.dtype}")
        if check_bounds:
            inside = (value >= space.low) & (value <= space.high)
            if not np.all(inside):
                bad = tuple(int(i) for i in np.argwhere(~inside)[0])
                _fail(env_id, where, f"observation {key!r}{list(bad)} = {value[bad]!r} is outside the space "
                      f"[{np.broadcast_to(space.low, space.shape)[bad[1:]]!r}, "
                      f"{np.broadcast_to(space.high, space.shape)[bad[1:]]!r}] (or not finite)")


def _check_info(env_id: str, where: str, info: Any, a: int) -> None:
    if not isinstance(info, dict):
        _fail(env_id, where, f"info must be a dict, got {type(info).__name__}")
    for key in AUTORESET_INFO_KEYS:
        if key in info:
            _fail(env_id, where, f"info has {key!r}: the env auto-resets; the actor owns resets, remove the wrapper")
    if "episode" in info:
        ep = info["episode"]
        if (not isinstance(ep, dict) or not isinstance(ep.get("return"), numbers.Real)
                or not isinstance(ep.get("length"), numbers.Integral)):
            _fail(env_id, where, f"info['episode'] must be {{'return': float, 'length': int}}, got {ep!r}")
    if "active" in info:
        active = info["active"]
        if not isinstance(active, np.ndarray) or active.dtype != bool or active.shape != (a,):
            _fail(env_id, where, f"info['active'] must be a bool np.ndarray of shape ({a},), got {active!r}")
    if "stats" in info:
        stats = info["stats"]
        if not isinstance(stats, dict) or not all(isinstance(k, str) and isinstance(v, numbers.Real)
                                                   for k, v in stats.items()):
            _fail(env_id, where, f"info['stats'] must be a dict of str -> float, got {stats!r}")


def _check_reset(env: Any, env_id: str, seed: int | None, a: int, check_bounds: bool) -> dict[str, np.ndarray]:
    where = f"reset(seed={seed})"
    out = env.reset(seed=seed)
    if not isinstance(out, tuple) or len(out) != 2:
        _fail(env_id, where, f"must return a tuple (obs, info), got {type(out).__name__}")
    obs, info = out
    _check_obs(env, env_id, where, obs, a, check_bounds)
    _check_info(env_id, where, info, a)
    return obs


def _check_step(env: Any, env_id: str, t: int, action: np.ndarray, a: int, check_bounds: bool):
    where = f"step #{t}"
    out = env.step(action)
    if not isinstance(out, tuple) or len(out) != 5:
        _fail(env_id, where, "must return a tuple (obs, reward, terminated, truncated, info), "
              f"got {type(out).__name__}" + (f" of length {len(out)}" if isinstance(out, tuple) else ""))
    obs, reward, terminated, truncated, info = out
    _check_obs(env, env_id, where, obs, a, check_bounds)
    for name, value, dtype in (("reward", reward, np.float32), ("terminated", terminated, np.bool_),
                               ("truncated", truncated, np.bool_)):
        if not isinstance(value, np.ndarray):
            _fail(env_id, where, f"{name} must be an np.ndarray, got {type(value).__name__}")
        if value.shape != (a,):
            _fail(env_id, where, f"{name} has shape {value.shape}, expected ({a},) = [A]")
        if value.dtype != dtype:
            _fail(env_id, where, f"{name} has dtype {value.dtype}, expected {np.dtype(dtype)}")
    if not np.all(np.isfinite(reward)):
        _fail(env_id, where, f"reward is not finite: {reward!r}")
    _check_info(env_id, where, info, a)
    return obs, reward, terminated, truncated, info


def _sampler(env: Any, seed: int):
    """Random actions ``[A, ...]``; for agents with different spaces (``spec.mixed``) a list of
    one array ``[A_g, ...]`` per space group, as :class:`zoo.core.env.PaddedSpaces` takes them."""
    spec = env.spec
    if getattr(spec, "mixed", False):
        groups = spec.space_groups()
        group_spaces = [copy.deepcopy(spec.action_space_of(g[0])) for g in groups]
        for i, space in enumerate(group_spaces):
            space.seed(seed + i)
        return lambda: [np.stack([np.asarray(space.sample()) for _ in g]) for space, g in
                        zip(group_spaces, groups, strict=True)]
    space = copy.deepcopy(spec.action_space)
    space.seed(seed)
    a = spec.num_agents
    return lambda: np.stack([np.asarray(space.sample()) for _ in range(a)])


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, dict):
        return isinstance(y, dict) and set(x) == set(y) and all(_same(x[k], y[k]) for k in x)
    return np.array_equal(np.asarray(x), np.asarray(y), equal_nan=np.asarray(x).dtype.kind == "f")


def check_env(env: Any, *, seed: int = 0, episodes: int = 2, max_steps: int = 1_000,
              check_determinism: bool = True, determinism_steps: int = 20,
              check_bounds: bool = True, close: bool = True) -> EnvCheckReport:
    """Validate ``env`` against :class:`zoo.core.env.Env`'s contract.

    Checks the spec (agents, a Box per observation key, a Discrete/MultiDiscrete/
    MultiBinary/Box action space, frame_skip >= 1, stage names with a ``set_curriculum_stage``
    method when the env lists curriculum stages); that ``reset(seed=)`` returns ``(obs, info)`` and
    ``step(action)`` returns ``(obs, reward, terminated, truncated, info)`` with
    observations ``dict[key] -> [A, *space.shape]`` of the space's dtype (inside its
    bounds when ``check_bounds``), rewards ``float32 [A]`` (finite), flags ``bool [A]``,
    and well-formed ``info["episode"|"active"|"stats"]``; that nothing auto-resets (no
    ``final_observation``-style info keys, no Autoreset wrapper in the ``.env`` chain);
    and, when ``check_determinism``, that ``reset(seed)`` twice and the same first
    ``determinism_steps`` actions give identical outputs.

    Random actions (``A`` samples of ``spec.action_space``, seeded by ``seed``) are
    played for ``episodes`` episodes, ending an episode when every agent is terminated or
    truncated and calling ``reset`` as the actor would, at most ``max_steps`` steps in all.

    Returns:
        :class:`EnvCheckReport` with the number of steps taken and episodes ended.

    Raises:
        EnvCheckError: the first contract violation, naming the env, call and problem.
        Any exception the env itself raises propagates unchanged.
    """
    env_id, a = _check_spec(env)
    _check_no_autoreset_wrapper(env, env_id)
    sample = _sampler(env, seed)
    first_obs = _check_reset(env, env_id, seed, a, check_bounds)
    trace: list[tuple] = []  # (action, step outputs) of the first steps, for the determinism replay
    steps = done_episodes = 0
    while done_episodes < episodes and steps < max_steps:
        action = sample()
        obs, reward, terminated, truncated, info = _check_step(env, env_id, steps + 1, action, a, check_bounds)
        steps += 1
        if done_episodes == 0 and len(trace) < determinism_steps:
            trace.append((action, (obs, reward, terminated, truncated)))
        if np.all(terminated | truncated):
            done_episodes += 1
            if done_episodes < episodes and steps < max_steps:
                _check_reset(env, env_id, None, a, check_bounds)
    if check_determinism:
        again = _check_reset(env, env_id, seed, a, check_bounds)
        if not _same(first_obs, again):
            _fail(env_id, "determinism", f"a second reset(seed={seed}) gave a different observation "
                  "(pass check_determinism=False if that is intended)")
        for t, (action, expected) in enumerate(trace, start=1):
            got = _check_step(env, env_id, t, action, a, check_bounds)[:4]
            for name, x, y in zip(("obs", "reward", "terminated", "truncated"), expected, got, strict=True):
                if not _same(x, y):
                    _fail(env_id, f"determinism, step #{t} after reset(seed={seed})",
                          f"{name} was {x!r} the first time and {y!r} on replay with the same actions")
    if close:
        env.close()
    return EnvCheckReport(steps, done_episodes)


def check_vector_env(venv: Any, spec: Any, *, seed: int = 0, steps: int = 3, close: bool = True) -> None:
    """Validate a :class:`zoo.core.env.VectorEnv` against its contract and against ``spec``,
    the spec of the same env built alone (the actor's policy is built for that one).

    Checks that ``venv.spec`` has ``spec``'s agents, observation space, action space and
    frame skip; that ``reset(seeds)`` (``num_envs`` seeds from ``seed``) and ``steps`` calls of
    ``step`` with random actions return ``S = num_envs x A`` rows of the spec's keys, shapes
    and dtypes (observations inside their bounds), rewards ``float32 [S]`` (finite), flags
    ``bool [S]``, and, when present, ``info["ended"]`` bool ``[num_envs]`` and
    ``info["final_obs"]`` with the observation's keys and shapes.

    Raises:
        EnvCheckError: the first violation, naming the env, the call and the problem.
        Any exception the vector env itself raises propagates unchanged.
    """
    env_id, a = _check_spec(venv)
    for name in ("agents", "observation_space", "action_space", "frame_skip"):
        mine, single = getattr(venv.spec, name), getattr(spec, name)
        if mine != single:
            _fail(env_id, f"vector env spec.{name}", f"is {mine!r}; the env built alone has {single!r}: "
                  "the actors' vector envs must match the env the policy is built for")
    n = getattr(venv, "num_envs", None)
    if not isinstance(n, numbers.Integral) or n < 1:
        _fail(env_id, "vector env num_envs", f"must be an int >= 1, got {n!r}")
    rows = int(n) * a
    out = venv.reset([seed + i for i in range(int(n))])
    if not isinstance(out, tuple) or len(out) != 2 or not isinstance(out[1], dict):
        _fail(env_id, "vector env reset(seeds)", f"must return a tuple (obs, info dict), got {out!r:.200}")
    _check_obs(venv, env_id, "vector env reset(seeds)", out[0], rows, True)
    sample = _sampler(venv, seed)
    for t in range(1, steps + 1):
        where = f"vector env step #{t}"
        action = np.concatenate([sample() for _ in range(int(n))])
        out = venv.step(action)
        if not isinstance(out, tuple) or len(out) != 5:
            _fail(env_id, where, "must return a tuple (obs, reward, terminated, truncated, info)")
        obs, reward, terminated, truncated, info = out
        _check_obs(venv, env_id, where, obs, rows, True)
        for name, value, dtype in (("reward", reward, np.float32), ("terminated", terminated, np.bool_),
                                   ("truncated", truncated, np.bool_)):
            if not isinstance(value, np.ndarray) or value.shape != (rows,) or value.dtype != dtype:
                _fail(env_id, where, f"{name} must be an np.ndarray of {np.dtype(dtype)} [{rows}] = [num_envs x A], "
                      f"got {value!r:.200}")
        if not np.all(np.isfinite(reward)):
            _fail(env_id, where, f"reward is not finite: {reward!r}")
        if not isinstance(info, dict):
            _fail(env_id, where, f"info must be a dict, got {type(info).__name__}")
        ended = info.get("ended")
        if ended is not None and (not isinstance(ended, np.ndarray) or ended.dtype != bool or ended.shape != (n,)):
            _fail(env_id, where, f"info['ended'] must be a bool np.ndarray of shape ({n},), got {ended!r:.200}")
        if "final_obs" in info:
            _check_obs(venv, env_id, where + " info['final_obs']", info["final_obs"], rows, False)
    if close:
        venv.close()
