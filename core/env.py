"""The environment interface Zoo's actors drive, multi-agent first, and the adapters.

Every Zoo environment has a fixed agent order (``spec.agents``) and exchanges arrays with
a leading agent axis ``A = len(spec.agents)``:

- observations: ``dict[str, np.ndarray]``, each of shape ``[A, *space.shape]``: the
  named leaves of :mod:`zoo.core.spaces` (a plain Box observation is the key ``"obs"``;
  Dict / Tuple observations are flattened to any depth; Discrete entries are one-hot).
  Keys starting with ``"zoo:"`` are Zoo's own: ``"zoo:action_mask"`` (bool
  ``[A, num_logits]``, the legal actions) and ``"zoo:global_state"`` (a centralised
  critic's input);
- actions: ``np.ndarray`` of shape ``[A, *action_space.shape]``;
- rewards ``float32 [A]``, ``terminated`` and ``truncated`` ``bool [A]``.

``reset`` and ``step`` may put into ``info``:

- ``"episode"``: ``{"return": float, "length": int}`` when a *whole* episode ends, for
  environments whose training signal differs from the score (Atari: episodic life and
  reward clipping). Without it the actor logs the sum of the rewards it was given.
- ``"active"``: ``bool [A]`` for agents that have not finished (multi-agent).
- ``"stats"``: ``dict[str, float]`` of per-episode statistics to be logged.

The actor owns resets: when every agent is terminated or truncated it calls ``reset``;
no adapter may reset by itself.

**Curriculum stages** (optional, docs/curriculum.md): an env that lists stage names in
``spec.stages`` (stage ``0 .. len(stages) - 1``) has ``set_curriculum_stage(stage: int) ->
None``. The actor calls it only between episodes, right before that env's ``reset()``
(when a run's curriculum moved on, and once before the first reset), so the stage applies
from that reset on and never in the middle of an episode; ``stage`` outside the range
raises ``ValueError``. An env that is never told a stage plays its default (documented by
the env; the test env ``fake-stages``: stage 0).

A :class:`VectorEnv` is the one exception, by contract: ``n`` environments stepped by one
call (ale-py's C++ ``AtariVectorEnv``), so an environment whose episode ends is reset inside
that call and the actor is told so (``info["ended"]``). An env plugin offers one through
its ``vector_factory`` registration (:mod:`zoo.core.hookspecs`); the actor then steps each
ring group with one call instead of one call per env.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from zoo.core.spaces import (
    ACTION_MASK_KEY,
    ENV_MASK_KEY,
    GLOBAL_STATE_KEY,
    OBS_KEY,
    ObsFlattener,
    as_mask,
    check_action_space,
    mask_size,
)
from zoo.core.symmetry import Symmetry

__all__ = ["OBS_KEY", "ACTION_MASK_KEY", "GLOBAL_STATE_KEY", "EnvSpec", "Env", "VectorEnv", "GymnasiumEnv",
           "PettingZooEnv", "close_envs", "CLOSE_BUDGET_S", "SLOW_CLOSE_S", "same_spaces", "describe_difference"]


@dataclass
class EnvSpec:
    """Static facts about an environment that workers and algorithms need.

    ``observation_space`` maps each observation key to a per-agent ``gymnasium.spaces.Box``
    (the leaves of :mod:`zoo.core.spaces`); ``action_space`` is the per-agent action space
    (Discrete, MultiDiscrete, MultiBinary or Box).
    ``frame_skip`` converts env steps to frames (frames = env steps x frame_skip).

    **Agents with different spaces.** ``agent_spaces`` is None when every agent has
    ``observation_space`` and ``action_space``. An env whose agents differ (``mpe2``'s
    ``simple_adversary_v3``: the adversary sees 8 numbers, the good agents 10;
    ``simple_speaker_listener_v4``: action spaces ``Discrete(3)`` and ``Discrete(5)``) gives
    ``agent_spaces = {agent: (observation_space, action_space)}``
    for every agent; ``observation_space``/``action_space`` are then ``agents[0]``'s, and
    :attr:`mixed` is True. Such a spec is only trained through named policies, one per
    set of agents with one space (:meth:`subset` gives the spec a policy's algorithm is
    built from; docs/policies.md). :meth:`space_groups` orders the distinct spaces.

    ``stages``: the names of the env's curriculum stages (empty: it has none); an env with
    stages has ``set_curriculum_stage(stage)`` (module docstring, docs/curriculum.md).

    ``symmetries``: maps of the env onto itself that its plugin declares
    (:class:`zoo.core.symmetry.Symmetry`; connect four's left-right mirror), for algorithms that
    train on the images of their samples too (PPO's ``algo.augment_symmetries``).
    """

    env_id: str
    agents: tuple[str, ...]
    observation_space: dict[str, Any]
    action_space: Any
    frame_skip: int = 1
    reports_episodes: bool = False  # True: info["episode"] marks the only episode ends to log
    resolved: dict[str, Any] = field(default_factory=dict)  # written to the run's config
    agent_spaces: dict[str, tuple[dict[str, Any], Any]] | None = None  # per agent, when they differ
    stages: tuple[str, ...] = ()  # curriculum stage names (0 ..); non-empty: the env has set_curriculum_stage
    symmetries: tuple[Symmetry, ...] = ()  # maps of the env onto itself (zoo.core.symmetry), declared by its plugin

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def mixed(self) -> bool:
        """True when some agents' observation or action spaces differ (see the class docstring)."""
        return len(self.space_groups()) > 1

    def observation_space_of(self, agent: str) -> dict[str, Any]:
        """Agent ``agent``'s observation leaves ``{key: Box}``.

        Raises:
            KeyError: ``agent`` is not one of :attr:`agents`.
        """
        self._check_agent(agent)
        return self.agent_spaces[agent][0] if self.agent_spaces is not None else self.observation_space

    def action_space_of(self, agent: str) -> Any:
        """Agent ``agent``'s action space.

        Raises:
            KeyError: ``agent`` is not one of :attr:`agents`.
        """
        self._check_agent(agent)
        return self.agent_spaces[agent][1] if self.agent_spaces is not None else self.action_space

    def _check_agent(self, agent: str) -> None:
        if agent not in self.agents:
            raise KeyError(f"env {self.env_id!r} has no agent {agent!r} (agents: {', '.join(self.agents)})")

    def space_groups(self) -> list[tuple[str, ...]]:
        """The agents grouped by equal observation and action spaces, each group in
        :attr:`agents` order, groups in the order of their first agent. One group (every
        agent) unless :attr:`mixed`: ``simple_adversary_v3`` gives
        ``[("adversary_0",), ("agent_0", "agent_1")]``."""
        if self.agent_spaces is None:
            return [tuple(self.agents)]
        groups: list[list[str]] = []
        for agent in self.agents:
            for group in groups:
                if same_spaces(self.agent_spaces[group[0]], self.agent_spaces[agent]):
                    group.append(agent)
                    break
            else:
                groups.append([agent])
        return [tuple(g) for g in groups]

    def subset(self, agents: Any) -> EnvSpec:
        """The spec of some of the agents, as one policy sees them: ``agents`` in this spec's
        order, their one shared observation and action space, ``agent_spaces`` None; the
        other fields as here. It is what the algorithm of a policy whose agents these are
        is built from (``build_policy(config, spec.subset(agents))``).

        Raises:
            ValueError: no agent given, an agent this env does not have, or two of them with
                different spaces (naming both and what differs).
        """
        wanted = set(agents)
        unknown = sorted(wanted - set(self.agents))
        if unknown:
            raise ValueError(f"env {self.env_id!r} has no agent(s) {', '.join(map(repr, unknown))} "
                             f"(agents: {', '.join(self.agents)})")
        chosen = tuple(a for a in self.agents if a in wanted)
        if not chosen:
            raise ValueError(f"a subset of env {self.env_id!r}'s agents needs at least one agent")
        first = chosen[0]
        spaces0 = (self.observation_space_of(first), self.action_space_of(first))
        for a in chosen[1:]:
            other = (self.observation_space_of(a), self.action_space_of(a))
            if not same_spaces(spaces0, other):
                raise ValueError(f"agents {first!r} and {a!r} of env {self.env_id!r} have different spaces: "
                                 + describe_difference(first, spaces0, a, other))
        return dataclasses.replace(self, agents=chosen, observation_space=dict(spaces0[0]), action_space=spaces0[1],
                                   agent_spaces=None)


def same_spaces(a: tuple[dict[str, Any], Any], b: tuple[dict[str, Any], Any]) -> bool:
    """Whether two ``(observation leaves, action space)`` pairs are equal (keys, shapes,
    dtypes, bounds; gymnasium's space equality)."""
    return a[0].keys() == b[0].keys() and all(a[0][k] == b[0][k] for k in a[0]) and a[1] == b[1]


def describe_difference(name_a: str, a: tuple[dict[str, Any], Any], name_b: str, b: tuple[dict[str, Any], Any]) -> str:
    """What differs between two agents' ``(observation leaves, action space)`` in words:
    ``"observation 'obs' Box(8,) vs Box(10,)"`` (first difference of each kind)."""
    parts = []
    keys_a, keys_b = list(a[0]), list(b[0])
    if keys_a != keys_b:
        parts.append(f"observation keys {keys_a} ({name_a}) vs {keys_b} ({name_b})")
    else:
        for k in keys_a:
            if a[0][k] != b[0][k]:
                parts.append(f"observation {k!r} {_space_str(a[0][k])} ({name_a}) vs {_space_str(b[0][k])} ({name_b})")
                break
    if a[1] != b[1]:
        parts.append(f"action space {a[1]} ({name_a}) vs {b[1]} ({name_b})")
    return "; ".join(parts) or "their spaces differ"


def _space_str(space: Any) -> str:
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(space).__name__}{tuple(shape)} {np.dtype(dtype).name}"
    return str(space)


class Env(Protocol):
    """What the actor worker drives (see the module docstring for shapes)."""

    spec: EnvSpec

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]: ...

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray,
                                                dict[str, Any]]: ...

    def close(self) -> None: ...

    # Optional, for an env whose spec.stages is not empty (module docstring):
    # def set_curriculum_stage(self, stage: int) -> None: ...


class VectorEnv(Protocol):
    """``num_envs`` environments of one kind stepped together by one call (what the actor
    drives when an env plugin registers a ``vector_factory``; see the module docstring).

    Arrays hold one row per agent-slot, ``S = num_envs * A`` rows (``A = spec.num_agents``),
    slot ``s`` = env ``s // A``, agent ``s % A``, as a ring group's stacked arrays:

    - ``reset(seeds)``: ``seeds`` (``num_envs`` ints, from :func:`zoo.core.seeding.env_seeds`)
      start every env's first episode; returns ``(obs, info)`` with ``obs`` a dict of
      ``[S, *space.shape]`` arrays (``spec.observation_space``'s keys and dtypes). Called once.
    - ``step(action)``: ``action`` ``[S, *action_space.shape]``; returns ``(obs, reward
      float32 [S], terminated bool [S], truncated bool [S], info)``. ``info`` may hold

      - ``"ended"``: bool ``[num_envs]``, the envs whose episode ended at this step (all their
        agents terminated or truncated) and which the call has already reset: their ``obs``
        rows are the *next* episode's first observation (no step is spent on the reset);
        absent means none;
      - ``"final_obs"``: when a slot is truncated and not terminated, a dict like ``obs``
        whose rows of those slots hold the ended episode's real last observation (what a
        truncated step bootstraps from);
      - ``"episode"``: ``{"env": int [m], "return": float [m], "length": int [m]}``, whole
        episodes (the game score) that ended at this step, for ``spec.reports_episodes``;
      - ``"active"``: bool ``[S]`` (multi-agent), as for :class:`Env`.
    - ``close()``: release every env (threads included) within :data:`CLOSE_BUDGET_S`.
    """

    spec: EnvSpec
    num_envs: int

    def reset(self, seeds: list[int]) -> tuple[dict[str, np.ndarray], dict[str, Any]]: ...

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray,
                                                dict[str, Any]]: ...

    def close(self) -> None: ...


def _episode_info(info: dict[str, Any]) -> dict[str, Any]:
    """Gymnasium's ``RecordEpisodeStatistics`` puts ``info["episode"] = {"r", "l", "t"}``;
    Zoo's actor reads ``{"return", "length"}``: translate (other infos pass unchanged)."""
    ep = info.get("episode")
    if isinstance(ep, dict) and "r" in ep and "return" not in ep:
        info = dict(info)
        info["episode"] = {"return": float(np.asarray(ep["r"]).reshape(-1)[0]),
                           "length": int(np.asarray(ep["l"]).reshape(-1)[0])}
    return info


def _stack_rows(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


class GymnasiumEnv:
    """Adapts one single-agent ``gymnasium.Env`` to Zoo's interface (``A = 1``).

    The wrapped environment must not auto-reset. Observations are flattened to named leaves
    (:class:`zoo.core.spaces.ObsFlattener`: Dict / Tuple to any depth, Discrete one-hot,
    channels-last images transposed, uint8 kept). An action mask in ``info["action_mask"]``
    (Gymnasium's convention) becomes the observation key ``"zoo:action_mask"``; whether the
    env gives one is found by one ``reset()`` at construction when ``action_mask`` is None
    and the action space is discrete (a step without a mask then allows every action).
    ``info["episode"]`` of Gymnasium's ``RecordEpisodeStatistics`` (``r``, ``l``) is
    translated to Zoo's ``{"return", "length"}``.

    Args:
        env: the ``gymnasium.Env`` (one env, no auto-reset wrapper).
        env_id: the name runs and logs show (``spec.env_id``), e.g. ``"corridor:20"``.
        frame_skip: frames per env step (frames = env steps x frame_skip; 1 unless the env
            repeats actions itself, as Atari's does with 4).
        resolved: what the plugin decided from ``--env NAME:ARG`` and its config, as plain
            JSON values (e.g. ``{"length": 20, "max_steps": 100}``): written to the run's
            ``config.json`` under ``env_spec.resolved`` so a run says which env it trained
            on; Zoo never reads it back (``spec.resolved``, default ``{}``).
        reports_episodes: True when the env reports whole episodes itself in
            ``info["episode"]`` (e.g. Atari's game over across lives): only those ends are
            logged as episodes.
        action_mask: whether ``info["action_mask"]`` carries a mask; None finds out with one
            ``reset()`` (discrete action spaces only), False ignores it.

    Raises:
        zoo.core.spaces.UnsupportedSpaceError: an observation or action space Zoo cannot
            train on, naming the path of the offending sub-space.
    """

    def __init__(self, env: Any, env_id: str, frame_skip: int = 1, resolved: dict | None = None,
                 reports_episodes: bool = False, action_mask: bool | None = None) -> None:
        from gymnasium import spaces

        self.env = env
        check_action_space(env.action_space)
        self.flat = ObsFlattener(env.observation_space)
        obs_space = dict(self.flat.spaces)
        self.mask_n = mask_size(env.action_space)
        if ACTION_MASK_KEY in obs_space and obs_space[ACTION_MASK_KEY].shape != (self.mask_n,):
            raise ValueError(f"env {env_id!r}: observation entry 'action_mask' has "
                             f"{obs_space[ACTION_MASK_KEY].shape[0]} entries; the action space {env.action_space} "
                             f"needs {self.mask_n}")
        self.info_mask = False
        if self.mask_n and ACTION_MASK_KEY not in obs_space and action_mask is not False:
            if action_mask is None:
                _, info = env.reset()
                action_mask = ENV_MASK_KEY in info
            self.info_mask = bool(action_mask)
            if self.info_mask:
                obs_space[ACTION_MASK_KEY] = spaces.Box(0, 1, (self.mask_n,), np.bool_)
        self.spec = EnvSpec(env_id, ("agent_0",), obs_space, env.action_space, frame_skip,
                            reports_episodes, resolved or {})

    def _obs(self, obs: Any, info: dict[str, Any]) -> dict[str, np.ndarray]:
        out = self.flat(obs)
        if self.info_mask:
            m = info.get(ENV_MASK_KEY)
            out[ACTION_MASK_KEY] = (np.ones(self.mask_n, bool) if m is None
                                    else as_mask(m, self.mask_n, f"env {self.spec.env_id!r} info['action_mask']"))
        return {k: v[None] for k, v in out.items()}

    def reset(self, seed: int | None = None):
        obs, info = self.env.reset(seed=seed)
        return self._obs(obs, info), _episode_info(info)

    def step(self, action: np.ndarray):
        a = action[0]
        if a.ndim == 0:
            a = a.item()
        obs, reward, terminated, truncated, info = self.env.step(a)
        return (
            self._obs(obs, info),
            np.array([reward], dtype=np.float32),
            np.array([terminated], dtype=bool),
            np.array([truncated], dtype=bool),
            _episode_info(info),
        )

    def close(self) -> None:
        self.env.close()


class _AgentLayout:
    """How one space group's agents' observations are flattened (a :class:`PettingZooEnv` part)."""

    def __init__(self, env: Any, agents: tuple[str, ...], reset_infos: Callable[[], dict[str, Any]]) -> None:
        from gymnasium import spaces

        first = agents[0]
        self.agents = agents
        self.action_space = env.action_space(first)
        check_action_space(self.action_space, f"action space of agent {first!r}")
        self.flat = ObsFlattener(env.observation_space(first), root=f"observation space of agent {first!r}")
        self.obs_space = dict(self.flat.spaces)
        self.mask_n = mask_size(self.action_space)
        self.info_mask = False
        if self.mask_n and ACTION_MASK_KEY not in self.obs_space:
            infos = reset_infos()
            self.info_mask = any(isinstance(infos.get(a), dict) and ENV_MASK_KEY in infos[a] for a in agents)
            if self.info_mask:
                self.obs_space[ACTION_MASK_KEY] = spaces.Box(0, 1, (self.mask_n,), np.bool_)
        self.zero = self.flat.zeros()
        if self.info_mask:
            self.zero[ACTION_MASK_KEY] = np.ones(self.mask_n, bool)

    def rows(self, per_agent: dict[str, Any], infos: dict[str, Any]) -> list[dict[str, np.ndarray]]:
        rows = []
        for a in self.agents:
            o = per_agent.get(a)
            if o is None:
                rows.append(self.zero)
                continue
            row = self.flat(o)
            if self.info_mask:
                m = (infos.get(a) or {}).get(ENV_MASK_KEY)
                row[ACTION_MASK_KEY] = (np.ones(self.mask_n, bool) if m is None
                                        else as_mask(m, self.mask_n, f"infos[{a!r}]['action_mask']"))
            rows.append(row)
        return rows


class PettingZooEnv:
    """Adapts a PettingZoo ``ParallelEnv`` to Zoo's interface (``A = len(possible_agents)``).

    Agents are laid out in ``possible_agents`` order. An agent that is not in ``env.agents``
    (finished early or not yet joined) gets a zero observation (a mask allowing every
    action), reward 0, both flags False and ``info["active"][a] = False``; it is sent no
    action. The step on which an agent finishes keeps its own reward and flag. Per-episode
    statistics that the env puts in any agent's info under ``"stats"`` are passed on.

    Observations are flattened as :class:`GymnasiumEnv`'s. Action masks: a Dict
    observation's ``"action_mask"`` entry or ``infos[agent]["action_mask"]`` (looked for by
    one ``reset()`` at construction) become ``"zoo:action_mask"``. When the env has a global
    ``state()`` and ``state_space`` (a centralised critic's input), every agent's
    observation also holds it, flattened, under ``"zoo:global_state"`` (never ``"state"``:
    that name belongs to the env's own observation entries).

    **Agents with different spaces** (``mixed_spaces=True``; ``mpe2``'s
    ``simple_adversary_v3``): the spec lists every agent's spaces (``spec.agent_spaces``,
    ``spec.mixed``) and the agents fall into ``G = len(spec.space_groups())`` groups of
    equal spaces. Rewards, flags and ``info["active"]`` keep their ``[A]`` layout; the
    observations become a list of ``G`` dicts, group ``g``'s arrays ``[A_g, ...]`` (its
    agents in ``spec.agents`` order), and ``step`` takes a list of ``G`` action arrays
    ``[A_g, ...]``. With one group (every env whose agents share their spaces) the layout
    is exactly the ``mixed_spaces=False`` one: a dict of ``[A, ...]`` arrays and one action
    array. Zoo's actor drives the mixed layout through :class:`PaddedSpaces` (padded
    observations, one action array per space group), routing by named policy (docs/policies.md).

    Raises:
        TypeError: agents have observation or action spaces of different structure and
            ``mixed_spaces`` is False (one shared policy needs one layout; pad them in the
            env, or give them policies of their own: docs/policies.md).
        zoo.core.spaces.UnsupportedSpaceError: a space Zoo cannot train on, naming its path.
    """

    def __init__(self, env: Any, env_id: str, frame_skip: int = 1, resolved: dict | None = None,
                 mixed_spaces: bool = False) -> None:
        self.env = env
        self.agents = tuple(env.possible_agents)
        first = self.agents[0]
        groups: list[list[str]] = []
        for a in self.agents:
            for g in groups:
                if env.observation_space(a) == env.observation_space(g[0]) and env.action_space(a) == env.action_space(
                        g[0]):
                    g.append(a)
                    break
            else:
                if groups and not mixed_spaces:
                    raise TypeError(f"env {env_id!r}: agents {first!r} and {a!r} have different spaces; "
                                    "Zoo's shared-policy layout needs one per-agent observation and action space: "
                                    "name a policy for each group of agents with one space ([policies.NAME] "
                                    "tables and [[agents]] entries: docs/policies.md)")
                groups.append([a])
        reset: list[dict[str, Any]] = []

        def reset_infos() -> dict[str, Any]:  # one reset() at most, only when a layout looks for a mask in infos
            if not reset:
                reset.append(env.reset()[1] or {})
            return reset[0]

        self.layouts = [_AgentLayout(env, tuple(g), reset_infos) for g in groups]
        self.state_flat = None
        try:
            state_space = getattr(env, "state_space", None)
        except Exception:  # noqa: BLE001 - an env without a global state
            state_space = None
        state_spaces: dict[str, Any] = {}
        if state_space is not None and callable(getattr(env, "state", None)):
            self.state_flat = ObsFlattener(state_space, root="state space", name_prefix=GLOBAL_STATE_KEY,
                                           extract_mask=False)
            state_spaces = dict(self.state_flat.spaces)
        for layout in self.layouts:
            layout.obs_space.update(state_spaces)
        lead = self.layouts[0]
        # kept for code that reads them (one layout: the only one)
        self.flat, self.mask_n, self.info_mask, self._zero = lead.flat, lead.mask_n, lead.info_mask, lead.zero
        agent_spaces = None
        if len(self.layouts) > 1:
            agent_spaces = {a: (layout.obs_space, layout.action_space) for layout in self.layouts
                            for a in layout.agents}
        self.spec = EnvSpec(env_id, self.agents, lead.obs_space, lead.action_space, frame_skip, False,
                            resolved or {}, agent_spaces)
        # the group of each agent and its row in it (the order of spec.space_groups())
        self._where = {a: (g, i) for g, layout in enumerate(self.layouts) for i, a in enumerate(layout.agents)}

    def _stack(self, per_agent: dict[str, Any], infos: dict[str, Any]) -> Any:
        state = None if self.state_flat is None else self.state_flat(self.env.state())
        out = []
        for layout in self.layouts:
            stacked = _stack_rows(layout.rows(per_agent, infos))
            if state is not None:
                n = len(layout.agents)
                for k, v in state.items():
                    stacked[k] = np.broadcast_to(v, (n, *v.shape)).copy()
            out.append(stacked)
        return out[0] if len(out) == 1 else out

    def _info(self, infos: dict[str, Any]) -> dict[str, Any]:
        live = set(self.env.agents)
        out: dict[str, Any] = {"active": np.array([a in live for a in self.agents])}
        for a in self.agents:
            if isinstance(infos.get(a), dict) and "stats" in infos[a]:
                out["stats"] = infos[a]["stats"]
        return out

    def reset(self, seed: int | None = None):
        obs, infos = self.env.reset(seed=seed)
        infos = infos or {}
        return self._stack(obs, infos), self._info(infos)

    def step(self, action: Any):
        """Step with ``action``: ``[A, ...]``, or with mixed spaces a list of one ``[A_g, ...]``
        array per space group (class docstring).

        Raises:
            ValueError: with mixed spaces, not one action array per space group.
        """
        per_group = [action] if len(self.layouts) == 1 else list(action)
        if len(per_group) != len(self.layouts):
            raise ValueError(f"env {self.spec.env_id!r}: actions for {len(per_group)} space group(s); its agents "
                             f"fall into {len(self.layouts)} (spec.space_groups())")
        live = list(self.env.agents)
        acts = {}
        for a in self.agents:
            if a in live:
                g, i = self._where[a]
                act = np.asarray(per_group[g])[i]
                acts[a] = act.item() if act.ndim == 0 else act
        obs, rew, term, trunc, infos = self.env.step(acts)
        infos = infos or {}
        rewards = np.array([rew.get(a, 0.0) for a in self.agents], np.float32)
        terminated = np.array([bool(term.get(a, False)) for a in self.agents])
        truncated = np.array([bool(trunc.get(a, False)) for a in self.agents])
        # env.agents no longer lists agents that just finished: inactive from the next step on.
        return self._stack(obs, infos), rewards, terminated, truncated, self._info(infos)

    def close(self) -> None:
        self.env.close()


CLOSE_BUDGET_S = 10.0
"""Seconds all of a worker's ``env.close()`` calls may take together at the end of a run."""
SLOW_CLOSE_S = 2.0
"""A single ``close()`` longer than this is reported as slow."""


PAD_SEP = "@"
"""``<key>@<g>``: observation key ``key`` of space group ``g`` in :class:`PaddedSpaces`' layout."""


class PaddedSpaces:
    """An env whose agents have different spaces (a ``mixed_spaces=True``
    :class:`PettingZooEnv`) in the one observation layout the actor drives: every space group
    ``g``'s observation key ``k`` becomes key ``k@g`` with an ``[A, ...]`` array, zero in the
    rows of the agents of other groups. Named policies route each policy's agents' rows of its
    group's keys, renamed back to ``k`` (docs/policies.md), so no network ever sees the padding.

    Actions are not padded: ``step`` takes one array per space group (a list of ``G`` arrays,
    group ``g``'s ``[A_g, *action_space_g.shape]`` in its own dtype, its agents in
    ``spec.agents`` order), as the routed actor assembles them from the policies that acted
    (:class:`zoo.core.workers.actor.ActionAssembler`). When every agent has the same action
    space it also takes one array ``[A, ...]``, split by rows.

    ``spec``: the env's spec with the padded observation space (``agent_spaces`` kept, so
    :meth:`EnvSpec.subset` still gives each policy its agents' own spaces; ``action_space``
    is ``agents[0]``'s).
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        spec = env.spec
        self.groups = spec.space_groups()
        self.rows = [np.array([spec.agents.index(a) for a in g], np.int64) for g in self.groups]
        action = spec.action_space_of(spec.agents[0])
        # the first agent whose action space differs from agents[0]'s, or None (one array [A, ...] is then taken)
        self.other_action = next((a for a in spec.agents[1:] if spec.action_space_of(a) != action), None)
        obs = {f"{k}{PAD_SEP}{g}": space for g, grp in enumerate(self.groups)
               for k, space in spec.observation_space_of(grp[0]).items()}
        self.spec = dataclasses.replace(spec, observation_space=obs)

    def _pad(self, per_group: Any) -> dict[str, np.ndarray]:
        if isinstance(per_group, dict):  # one group: the env's layout is already the plain one
            per_group = [per_group]
        A = len(self.spec.agents)
        out: dict[str, np.ndarray] = {}
        for g, arrays in enumerate(per_group):
            for k, v in arrays.items():
                full = np.zeros((A, *v.shape[1:]), v.dtype)
                full[self.rows[g]] = v
                out[f"{k}{PAD_SEP}{g}"] = full
        return out

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed)
        return self._pad(obs), info

    def step(self, action: Any):
        """Step with a list of one action array per space group (``[A_g, ...]``), or, when every
        agent has one action space, with one array ``[A, ...]`` (class docstring).

        Raises:
            ValueError: a list of the wrong length, or one array while the agents' action spaces
                differ (naming two agents and their spaces).
        """
        if isinstance(action, (list, tuple)):
            if len(action) != len(self.rows):
                raise ValueError(f"env {self.spec.env_id!r}: actions for {len(action)} space group(s); its agents "
                                 f"fall into {len(self.rows)} (spec.space_groups())")
            actions: Any = list(action) if len(self.rows) > 1 else action[0]
        elif self.other_action is not None:
            first = self.spec.agents[0]
            raise ValueError(f"env {self.spec.env_id!r}: one action array for agents whose action spaces differ "
                             f"({first!r}: {self.spec.action_space_of(first)}, {self.other_action!r}: "
                             f"{self.spec.action_space_of(self.other_action)}); pass one array per space group")
        else:
            actions = [action[rows] for rows in self.rows] if len(self.rows) > 1 else action
        obs, reward, terminated, truncated, info = self.env.step(actions)
        return self._pad(obs), reward, terminated, truncated, info

    def close(self) -> None:
        self.env.close()


def close_envs(envs: list, budget_s: float = CLOSE_BUDGET_S, slow_s: float = SLOW_CLOSE_S,
               report: Callable[[str], object] | None = None) -> list[str]:
    """Call every env's ``close()`` (in order, in one daemon thread) within ``budget_s`` seconds.

    Returns (and passes each to ``report``) one line per problem: a ``close()`` that took
    longer than ``slow_s``, raised, or had not returned when the budget ran out (then the
    remaining envs are not closed; the process exiting releases them). Never raises.
    """
    problems: list[str] = []
    done = threading.Event()
    current: list[Any] = [None, 0.0]  # (index, start time) of the close in progress

    def closer() -> None:
        for i, env in enumerate(envs):
            current[0], current[1] = i, time.monotonic()
            try:
                env.close()
            except Exception as exc:  # noqa: BLE001 - reported, the others still close
                problems.append(f"env {i} ({_env_name(env)}): close() raised {type(exc).__name__}: {exc}")
            took = time.monotonic() - current[1]
            if took > slow_s:
                problems.append(f"env {i} ({_env_name(env)}): close() took {took:.1f} s (slow: over {slow_s:g} s)")
        current[0] = None
        done.set()

    threading.Thread(target=closer, name="zoo-env-close", daemon=True).start()
    if not done.wait(budget_s) and current[0] is not None:
        i = current[0]
        problems.append(f"env {i} ({_env_name(envs[i])}): close() still running after the close budget of "
                        f"{budget_s:g} s; {len(envs) - i - 1} more env(s) left unclosed")
    for line in list(problems):
        if report is not None:
            report(line)
    return list(problems)


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    return str(getattr(spec, "env_id", type(env).__name__))
