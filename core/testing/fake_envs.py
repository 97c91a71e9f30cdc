"""Deterministic toy environments for Zoo's tests and for plugin authors.

Every class here implements :class:`zoo.core.env.Env` directly (no Gymnasium adapter) and
is fully deterministic, so tests can assert exact values:

- :class:`CountingEnv`: the observation is the number of steps since the last reset.
- :class:`CrashingEnv`: a :class:`CountingEnv` that raises ``RuntimeError("boom")`` on
  its K-th call of ``step`` (K = ``crash_at``, counted over the env's whole life).
- :class:`SlowEnv`: a :class:`CountingEnv` that sleeps ``step_latency`` seconds per step.
- :class:`StagedCorridorEnv` (``fake-stages``): curriculum stages, stage ``s`` asking for
  ``s + 1`` right actions in a row (docs/curriculum.md).
- :class:`MoverChooserEnv` (``fake-mixed``): two agents whose spaces differ, ``mover`` with
  ``Box(-1, 1, (2,))`` actions and ``chooser`` with ``Discrete(4)`` (docs/policies.md).

``CountingEnv(nan_reward_at=K)`` (``fake-counting`` option ``env.nan_reward_at``) returns a
NaN reward on its K-th call of ``step`` (counted over the env's whole life, from 1; 0:
never), to test how a non-finite reward is reported.

Shapes, with ``A = num_agents``:

- observation ``{"obs": float32 [A, 1]}``, every agent seeing the same step count ``t``
  (``0.0`` after ``reset``, ``1.0`` after the first step...);
- action ``int [A]`` with values in ``{0, 1}`` (``Discrete(2)`` per agent), or with
  ``box_actions=True`` float32 ``[A, 1]`` in ``[-1, 1]`` (``Box(-1, 1, (1,))`` per agent, for
  continuous-action algorithms); the actions are recorded in :attr:`CountingEnv.actions` and
  otherwise ignored;
- reward ``float32 [A]``, ``1.0`` for every agent on every step, so an episode's return
  is ``episode_length``;
- ``terminated`` / ``truncated`` ``bool [A]``: all agents end together at step
  ``episode_length``, by termination (or by truncation when ``truncate=True``).

The fakes police the actor: ``step`` before the first ``reset`` or after the episode
ended raises ``RuntimeError`` (they never reset by themselves), and an action of the
wrong shape or value raises ``ValueError``.

For registration through a plugin, :func:`make_counting`, :func:`make_crashing` and
:func:`make_slow` follow the env factory signature ``factory(arg, config, seed)`` with the
config dataclasses :class:`CountingConfig`, :class:`CrashingConfig` and
:class:`SlowConfig` (see :mod:`zoo.core.testing.plugin`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoo.core.env import OBS_KEY, EnvSpec
from zoo.core.options import bounded


def _require(ok: bool, field_name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{field_name}={value!r} is not allowed: {allowed}")


class CountingEnv:
    """Observation = steps since reset; reward 1.0 per step; ends at ``episode_length``.

    Args:
        episode_length: steps per episode, >= 1.
        num_agents: ``A``, >= 1; agents are named ``agent_0 .. agent_{A-1}``.
        truncate: end episodes with ``truncated`` instead of ``terminated``.
        env_id: the ``spec.env_id``.
        nan_reward_at: the ``step`` call (over the env's life, from 1) whose rewards are NaN; 0: never.
        box_actions: a ``Box(-1, 1, (1,))`` action space instead of ``Discrete(2)``.

    Attributes (for tests):
        t: steps since the last reset.
        total_steps: calls of ``step`` since construction.
        resets: calls of ``reset`` since construction.
        seeds: the ``seed`` argument of every ``reset`` call.
        actions: a copy of every action received, in order.
        closed: whether ``close`` was called.

    Raises:
        ValueError: a bad argument (names the argument, the value and what is allowed).
    """

    def __init__(self, episode_length: int = 10, num_agents: int = 1, truncate: bool = False,
                 env_id: str = "fake-counting", nan_reward_at: int = 0, box_actions: bool = False) -> None:
        from gymnasium import spaces

        _require(isinstance(episode_length, int) and episode_length >= 1, "episode_length", episode_length,
                 "an int >= 1")
        _require(isinstance(nan_reward_at, int) and nan_reward_at >= 0, "nan_reward_at", nan_reward_at,
                 "an int >= 0 (0: never)")
        self.nan_reward_at = nan_reward_at
        _require(isinstance(num_agents, int) and num_agents >= 1, "num_agents", num_agents, "an int >= 1")
        self.episode_length = episode_length
        self.truncate = bool(truncate)
        self.spec = EnvSpec(
            env_id=env_id,
            agents=tuple(f"agent_{i}" for i in range(num_agents)),
            observation_space={OBS_KEY: spaces.Box(0.0, float(episode_length), shape=(1,), dtype=np.float32)},
            action_space=spaces.Box(-1.0, 1.0, (1,), np.float32) if box_actions else spaces.Discrete(2),
        )
        self.box_actions = bool(box_actions)
        self.t = 0
        self.total_steps = 0
        self.resets = 0
        self.seeds: list[int | None] = []
        self.actions: list[np.ndarray] = []
        self.closed = False
        self._running = False

    @property
    def num_agents(self) -> int:
        return self.spec.num_agents

    def _obs(self) -> dict[str, np.ndarray]:
        return {OBS_KEY: np.full((self.num_agents, 1), self.t, dtype=np.float32)}

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode: observation ``{"obs": zeros float32 [A, 1]}``, info ``{}``."""
        self.resets += 1
        self.seeds.append(seed)
        self.t = 0
        self._running = True
        return self._obs(), {}

    def _check_action(self, action: Any) -> None:
        a = np.asarray(action)
        if self.box_actions:
            if a.shape != (self.num_agents, 1) or not np.all(np.abs(a) <= 1):
                raise ValueError(f"{self.spec.env_id}: action must be a float array of shape ({self.num_agents}, 1) "
                                 f"in [-1, 1], got {a.dtype} {a.shape}")
            return
        if a.shape != (self.num_agents,) or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{self.spec.env_id}: action must be an int array of shape ({self.num_agents},), "
                             f"got {a.dtype} {a.shape}")
        if not np.all((a == 0) | (a == 1)):
            raise ValueError(f"{self.spec.env_id}: action values must be 0 or 1, got {a.tolist()}")

    def step(self, action: np.ndarray):
        """One step: ``(obs, reward float32 [A], terminated bool [A], truncated bool [A], info)``.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            ValueError: the action is not an int array of shape ``[A]`` with values 0/1.
        """
        if not self._running:
            raise RuntimeError(f"{self.spec.env_id}: step() called "
                               + ("before reset()" if self.resets == 0 else "after the episode ended")
                               + "; the actor must call reset() (fake envs never reset by themselves)")
        self._check_action(action)
        self.actions.append(np.array(action, copy=True))
        self.total_steps += 1
        self.t += 1
        done = self.t >= self.episode_length
        if done:
            self._running = False
        a = self.num_agents
        reward = np.ones(a, dtype=np.float32)
        if self.total_steps == self.nan_reward_at:
            reward[:] = np.nan
        terminated = np.full(a, done and not self.truncate, dtype=bool)
        truncated = np.full(a, done and self.truncate, dtype=bool)
        return self._obs(), reward, terminated, truncated, {}

    def close(self) -> None:
        self.closed = True


class CrashingEnv(CountingEnv):
    """A :class:`CountingEnv` whose ``crash_at``-th ``step`` call raises ``RuntimeError(message)``.

    ``crash_at`` counts calls of ``step`` over the env's whole life (across resets), from
    1; ``crash_at=0`` never crashes. Steps before the crash behave like ``CountingEnv``.
    """

    def __init__(self, crash_at: int = 5, message: str = "boom", episode_length: int = 10,
                 num_agents: int = 1, truncate: bool = False, env_id: str = "fake-crashing") -> None:
        _require(isinstance(crash_at, int) and crash_at >= 0, "crash_at", crash_at, "an int >= 0 (0: never)")
        super().__init__(episode_length, num_agents, truncate, env_id)
        self.crash_at = crash_at
        self.message = message

    def step(self, action: np.ndarray):
        """As :meth:`CountingEnv.step`; raises ``RuntimeError(message)`` on call ``crash_at``."""
        if self.crash_at and self.total_steps + 1 == self.crash_at:
            self.total_steps += 1
            raise RuntimeError(self.message)
        return super().step(action)


class SlowEnv(CountingEnv):
    """A :class:`CountingEnv` that sleeps ``step_latency`` s per step and ``reset_latency`` s per reset."""

    def __init__(self, step_latency: float = 0.01, reset_latency: float = 0.0, episode_length: int = 10,
                 num_agents: int = 1, truncate: bool = False, env_id: str = "fake-slow") -> None:
        _require(isinstance(step_latency, (int, float)) and step_latency >= 0, "step_latency", step_latency,
                 "a number of seconds >= 0")
        _require(isinstance(reset_latency, (int, float)) and reset_latency >= 0, "reset_latency",
                 reset_latency, "a number of seconds >= 0")
        super().__init__(episode_length, num_agents, truncate, env_id)
        self.step_latency = float(step_latency)
        self.reset_latency = float(reset_latency)

    def reset(self, seed: int | None = None):
        if self.reset_latency:
            time.sleep(self.reset_latency)
        return super().reset(seed)

    def step(self, action: np.ndarray):
        if self.step_latency:
            time.sleep(self.step_latency)
        return super().step(action)


# -- configs and factories for registration through a plugin --------------------------
@dataclass
class CountingConfig:
    """Options of ``fake-counting``: see :class:`CountingEnv`."""

    episode_length: int = field(default=10, metadata=bounded(ge=1))
    num_agents: int = field(default=1, metadata=bounded(ge=1))
    truncate: bool = False
    nan_reward_at: int = field(default=0, metadata=bounded(ge=0, hint="0 = never"))
    box_actions: bool = False


@dataclass
class CrashingConfig:
    """Options of ``fake-crashing`` (and of the test plugin's ``boom``): see :class:`CrashingEnv`."""

    crash_at: int = field(default=5, metadata=bounded(ge=0))
    message: str = "boom"
    episode_length: int = field(default=10, metadata=bounded(ge=1))
    num_agents: int = field(default=1, metadata=bounded(ge=1))
    truncate: bool = False


@dataclass
class SlowConfig:
    """Options of ``fake-slow``: see :class:`SlowEnv`."""

    step_latency: float = field(default=0.01, metadata=bounded(ge=0))
    reset_latency: float = field(default=0.0, metadata=bounded(ge=0))
    episode_length: int = field(default=10, metadata=bounded(ge=1))
    num_agents: int = field(default=1, metadata=bounded(ge=1))
    truncate: bool = False


def _no_arg(name: str, arg: str | None) -> None:
    if arg:
        raise ValueError(f"env {name!r} takes no argument after ':', got {arg!r}; use its options instead")


def make_counting(arg: str | None, config: CountingConfig | None = None, seed: int = 0) -> CountingEnv:
    """Env factory for ``fake-counting``. Raises ValueError for an ``arg`` or a bad option."""
    _no_arg("fake-counting", arg)
    c = config or CountingConfig()
    return CountingEnv(c.episode_length, c.num_agents, c.truncate, nan_reward_at=c.nan_reward_at,
                       box_actions=c.box_actions)


def make_crashing(arg: str | None, config: CrashingConfig | None = None, seed: int = 0,
                  env_id: str = "fake-crashing") -> CrashingEnv:
    """Env factory for ``fake-crashing``. Raises ValueError for an ``arg`` or a bad option."""
    _no_arg(env_id, arg)
    c = config or CrashingConfig()
    return CrashingEnv(c.crash_at, c.message, c.episode_length, c.num_agents, c.truncate, env_id=env_id)


def make_boom(arg: str | None, config: CrashingConfig | None = None, seed: int = 0) -> CrashingEnv:
    """Env factory for the test plugin's ``boom``: ``RuntimeError("boom")`` at step 5 by default."""
    return make_crashing(arg, config, seed, env_id="boom")


def make_slow(arg: str | None, config: SlowConfig | None = None, seed: int = 0) -> SlowEnv:
    """Env factory for ``fake-slow``. Raises ValueError for an ``arg`` or a bad option."""
    _no_arg("fake-slow", arg)
    c = config or SlowConfig()
    return SlowEnv(c.step_latency, c.reset_latency, c.episode_length, c.num_agents, c.truncate)


class StagedCorridorEnv:
    """A corridor with curriculum stages (docs/curriculum.md): stage ``s`` asks for ``s + 1``
    right actions in a row. The right action at step ``t`` of an episode is ``t % 2`` (0, 1,
    0, ...); a wrong one ends the episode (terminated, reward 0), the last right one ends it
    with reward 1. An episode's return is 1 (cleared) or 0; a uniformly random policy clears
    stage ``s`` with probability ``2 ** -(s + 1)``.

    Shapes (one agent): observation ``{"obs": float32 [1, stages]}``, the one-hot step ``t``;
    action ``int [1]`` in ``{0, 1}`` (``Discrete(2)``); reward ``float32 [1]``; flags ``bool [1]``.

    ``spec.stages`` is ``("length-1", ..., "length-N")``; :meth:`set_curriculum_stage` takes
    effect at the next :meth:`reset` and, policing the actor, raises ``RuntimeError`` when
    called in the middle of an episode (``ValueError`` for a stage out of range). Before any
    call the env plays stage 0. :attr:`stages_played` lists the stage of every reset.
    """

    def __init__(self, stages: int = 3) -> None:
        from gymnasium import spaces

        _require(stages >= 1, "stages", stages, "must be >= 1")
        self.n_stages = stages
        self.spec = EnvSpec("fake-stages", ("agent_0",), {OBS_KEY: spaces.Box(0.0, 1.0, (stages,), np.float32)},
                            spaces.Discrete(2), stages=tuple(f"length-{i + 1}" for i in range(stages)))
        self.stage = 0  # the stage of the episode under way (or of the next one before the first reset)
        self.next_stage = 0
        self.t = 0
        self.running = False
        self.stages_played: list[int] = []

    def set_curriculum_stage(self, stage: int) -> None:
        """Play ``stage`` from the next reset on.

        Raises:
            ValueError: ``stage`` is not one of ``0 .. stages - 1``.
            RuntimeError: an episode is under way (the actor must switch stages only between episodes).
        """
        if not 0 <= int(stage) < self.n_stages:
            raise ValueError(f"fake-stages: stage {stage} is not one of 0..{self.n_stages - 1}")
        if self.running:
            raise RuntimeError(f"fake-stages: set_curriculum_stage({stage}) in the middle of an episode (step "
                               f"{self.t}); the actor switches stages only between episodes")
        self.next_stage = int(stage)

    def _obs(self) -> dict[str, np.ndarray]:
        obs = np.zeros((1, self.n_stages), np.float32)
        obs[0, min(self.t, self.n_stages - 1)] = 1.0
        return {OBS_KEY: obs}

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        self.stage, self.t, self.running = self.next_stage, 0, True
        self.stages_played.append(self.stage)
        return self._obs(), {}

    def step(self, action: np.ndarray):
        if not self.running:
            raise RuntimeError("fake-stages: step() before reset() or after the episode ended; the actor resets")
        a = np.asarray(action).reshape(-1)
        _require(a.shape == (1,) and int(a[0]) in (0, 1), "fake-stages: action", action, "one int in {0, 1}")
        right = int(a[0]) == self.t % 2
        self.t += 1
        done = not right or self.t == self.stage + 1
        reward = np.array([1.0 if right and done else 0.0], np.float32)
        self.running = not done
        return self._obs(), reward, np.array([done]), np.array([False]), {}

    def close(self) -> None:
        pass


@dataclass
class StagesConfig:
    """Options of ``fake-stages``."""

    stages: int = field(default=3, metadata=bounded(ge=1, le=16))
    """Curriculum stages: stage s asks for s + 1 right actions in a row."""


def make_stages(arg: str | None, config: StagesConfig | None = None, seed: int = 0) -> StagedCorridorEnv:
    """Env factory for ``fake-stages``. Raises ValueError for an ``arg`` or a bad option."""
    _no_arg("fake-stages", arg)
    return StagedCorridorEnv((config or StagesConfig()).stages)


class MoverChooserEnv:
    """Two agents whose spaces differ (docs/policies.md, "Agents with different spaces"):
    ``mover`` acts with ``Box(-1, 1, (2,))`` float32 vectors, ``chooser`` with ``Discrete(4)``.

    Step ``t`` of an episode (0 at the first step after ``reset``), with ``f = t / episode_length``:

    - ``mover`` sees ``float32 [3]`` = ``(x, -x, f)`` with ``x = 0.5`` for even ``t``, ``-0.5``
      for odd: its target is ``(x, -x)`` and its reward ``1 - 0.5 * (|a_0 - x| + |a_1 + x|)``
      (``1.0`` on target; with ``a`` in ``[-1, 1]`` never below ``-0.5``);
    - ``chooser`` sees ``float32 [5]``, the one-hot of ``c = t % 4`` then ``f``: its reward is
      ``1.0`` for the action ``c``, ``0.0`` for any other.

    A uniformly random policy earns ``0.25`` per step as chooser and ``0.5`` on average as
    mover (``E|U - x| = 0.625`` for ``U`` uniform on ``[-1, 1]``); a perfect one ``1.0`` each.
    Episodes last ``episode_length`` steps and end by truncation (``terminated`` stays False).

    Layout: the one of ``PettingZooEnv(..., mixed_spaces=True)`` (:class:`zoo.core.env.PettingZooEnv`):
    the agents fall into two space groups, ``[("mover",), ("chooser",)]``; observations are a list
    of two dicts ``[{"obs": float32 [1, 3]}, {"obs": float32 [1, 5]}]``; ``step`` takes a list of
    two arrays, ``mover``'s float32 ``[1, 2]`` and ``chooser``'s int64 ``[1]``; rewards
    ``float32 [2]`` and flags ``bool [2]`` in ``("mover", "chooser")`` order.
    :func:`make_mover_chooser` wraps it in :class:`zoo.core.env.PaddedSpaces`, the layout the
    actor drives.

    It polices the actor: ``step`` before ``reset`` or after the episode ended raises
    ``RuntimeError``; an action of the wrong shape, dtype (float32 for ``mover``, int64 for
    ``chooser``: each agent's own) or value raises ``ValueError``. :attr:`actions` keeps a copy
    of every step's ``(mover action, chooser action)``.
    """

    AGENTS = ("mover", "chooser")

    def __init__(self, episode_length: int = 8) -> None:
        from gymnasium import spaces

        _require(isinstance(episode_length, int) and episode_length >= 1, "episode_length", episode_length,
                 "an int >= 1")
        self.episode_length = episode_length
        mover = ({OBS_KEY: spaces.Box(-1.0, 1.0, (3,), np.float32)}, spaces.Box(-1.0, 1.0, (2,), np.float32))
        chooser = ({OBS_KEY: spaces.Box(0.0, 1.0, (5,), np.float32)}, spaces.Discrete(4))
        self.spec = EnvSpec("fake-mixed", self.AGENTS, dict(mover[0]), mover[1],
                            agent_spaces={"mover": mover, "chooser": chooser})
        self.t = 0
        self.running = False
        self.actions: list[tuple[np.ndarray, np.ndarray]] = []
        self.closed = False

    @staticmethod
    def target(t: int) -> float:
        """``mover``'s ``x`` at step ``t``: its target is ``(x, -x)``."""
        return 0.5 if t % 2 == 0 else -0.5

    def _obs(self) -> list[dict[str, np.ndarray]]:
        f = self.t / self.episode_length
        x = self.target(self.t)
        choice = np.zeros((1, 5), np.float32)
        choice[0, self.t % 4] = 1.0
        choice[0, 4] = f
        return [{OBS_KEY: np.array([[x, -x, f]], np.float32)}, {OBS_KEY: choice}]

    def reset(self, seed: int | None = None) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
        self.t, self.running = 0, True
        return self._obs(), {}

    def step(self, action: Any):
        """One step with ``[mover float32 [1, 2], chooser int64 [1]]`` (class docstring):
        ``(obs, reward float32 [2], terminated bool [2], truncated bool [2], info)``.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            ValueError: not two arrays, or one of the wrong shape, dtype or value.
        """
        if not self.running:
            raise RuntimeError("fake-mixed: step() before reset() or after the episode ended; the actor resets")
        if not isinstance(action, (list, tuple)) or len(action) != 2:
            raise ValueError(f"fake-mixed: action must be a list of 2 arrays (mover, chooser), got {type(action)}")
        move, choose = np.asarray(action[0]), np.asarray(action[1])
        if move.shape != (1, 2) or move.dtype != np.float32 or not np.all(np.abs(move) <= 1):
            raise ValueError(f"fake-mixed: mover's action must be float32 [1, 2] in [-1, 1], got {move.dtype} "
                             f"{move.shape} {move.tolist()}")
        if choose.shape != (1,) or choose.dtype != np.int64 or not 0 <= int(choose[0]) < 4:
            raise ValueError(f"fake-mixed: chooser's action must be int64 [1] in 0..3, got {choose.dtype} "
                             f"{choose.shape} {choose.tolist()}")
        self.actions.append((move.copy(), choose.copy()))
        x = self.target(self.t)
        reward = np.array([1.0 - 0.5 * (abs(float(move[0, 0]) - x) + abs(float(move[0, 1]) + x)),
                           1.0 if int(choose[0]) == self.t % 4 else 0.0], np.float32)
        self.t += 1
        done = self.t >= self.episode_length
        self.running = not done
        return self._obs(), reward, np.zeros(2, bool), np.full(2, done), {}

    def close(self) -> None:
        self.closed = True


@dataclass
class MixedConfig:
    """Options of ``fake-mixed``: see :class:`MoverChooserEnv`."""

    episode_length: int = field(default=8, metadata=bounded(ge=1))
    """Steps per episode; it ends by truncation."""
    mixed_spaces: bool = False
    """Its agents' spaces differ: ``zoo train`` sets this when the run names policies
    (docs/policies.md); left False the env is refused, as a PettingZoo env with different spaces is."""


def make_mover_chooser(arg: str | None, config: MixedConfig | None = None, seed: int = 0) -> Any:
    """Env factory for ``fake-mixed``: a :class:`MoverChooserEnv` in :class:`zoo.core.env.PaddedSpaces`.

    Raises:
        ValueError: an ``arg`` or a bad option.
        TypeError: ``mixed_spaces`` is False (no named policies: one network cannot act for both agents).
    """
    from zoo.core.env import PaddedSpaces

    _no_arg("fake-mixed", arg)
    c = config or MixedConfig()
    if not c.mixed_spaces:
        raise TypeError("env 'fake-mixed': agents 'mover' and 'chooser' have different spaces; name a policy "
                        "for each ([policies.NAME] tables and [[agents]] entries: docs/policies.md)")
    return PaddedSpaces(MoverChooserEnv(c.episode_length))
