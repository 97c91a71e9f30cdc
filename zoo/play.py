"""Play episodes with loaded policies in-process, and record their frames.

Used by ``zoo eval`` through :mod:`zoo.evaluate` (which loads the policies), by the eval manager
(:mod:`zoo.core.workers.evaluator`) and by the benchmarks that score policies. No worker
process, no transport: the policy runs in this process.

**How episodes are played** (:func:`play`). Episode ``k`` (0-based) starts with
``env.reset(seed=seed + k)`` in a fresh env, so the same ``seed`` gives the same starts;
action sampling draws from torch's generator seeded with ``seed``. Each step the policy
acts for the agents that are active (``info["active"]``, all of them by default), as the
actor worker asks the policy worker; recurrent policies (``policy.state_shape``) start
each episode from a zero state. An episode ends when every agent is terminated, truncated
or inactive, exactly as in training, except for envs whose training episodes are shorter
than the scored ones (``spec.reports_episodes``: Atari's episodic life): their episode
ends only with ``info["episode"]``, and the env's own ``reset()`` continues the game in
between (one no-op env step after a lost life), so an Atari episode is the whole game,
all lives, and its return is the raw (unclipped) game score.

**Per-episode results** (one dict each, in episode order): ``episode`` (k), ``seed``,
``return`` and ``length`` — ``info["episode"]``'s when the env reports it (Atari: raw
score, env steps of the whole game), else the sum of the rewards and the env steps; for
several agents ``return`` is the mean over the agents that took part (were active at
some step) of their summed rewards — plus, for several agents, ``agent_returns``
(``{agent: return}``) and, when their names form two or more teams (``hider_0`` ->
``hider``), ``team_returns`` (mean over the team's agents that took part), for a run of
named policies ``policy_returns`` (``{policy: mean over its agents that took part}``), and
the env's ``info["stats"]`` of the last step (hide-and-seek: ``hider_return``, box
statistics...).

**Named policies**: each :class:`Seat`'s network acts for its agents only; an env whose
agents' observation spaces differ is laid out as in training (``PaddedSpaces``), and each
seat reads its space group's keys, renamed back.

**Video frames** (:class:`Recorder`): one frame after each ``reset`` that starts an
episode and one after each env step, so an episode of ``length`` env steps has
``length + 1`` frames and a video of episodes ``E`` has ``sum(length_e + 1)`` frames. For
Atari an env step is ``frame_skip`` emulator frames (the frame shown is the last one,
the real ``210 x 160`` RGB screen) and ``length`` counts the no-op step of each lost
life, so a game has ``1 + length`` frames = ``1 + (emulator frames after the reset's
no-ops) / frame_skip``. Episodes are written whole, in the order they finish (with one
env, episode order); each result holds ``video_frames: [first, end)``.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Seat", "play", "Recorder", "RenderError", "team_of", "summarise"]


def team_of(agent: str) -> str:
    """The team of an agent name: the name without a trailing ``_<number>`` (``hider_1`` -> ``hider``)."""
    return re.sub(r"_?\d+$", "", agent) or agent


@dataclass
class Seat:
    """One named policy playing its agents (a run of named policies, docs/policies.md).

    ``agents``: its env agents' indices in ``spec.agents`` (int64 ``[A_P]``); ``keys``:
    for an env whose agents have different observation spaces (``PaddedSpaces``), the
    padded observation key -> the network's key (``obs@1`` -> ``obs``), else None;
    ``checkpoint``: the file its weights came from; ``counters`` as
    :attr:`zoo.evaluate.Evaluation.counters`; ``swapped``: its weights came from ``--policy``.
    """

    name: str
    algo_name: str
    policy: Any
    agents: np.ndarray
    keys: dict[str, str] | None = None
    checkpoint: Path | None = None
    counters: dict[str, int] = dataclasses.field(default_factory=dict)
    swapped: bool = False


class RenderError(ValueError):
    """The env's renderer failed on the first frame of a video (no picture can be made here)."""


class Recorder:
    """Collects each env's frames per episode and writes whole episodes to a video.

    ``renderer(env) -> uint8 [H, W, 3]``; ``writer`` has ``append(frame)`` and ``count``
    (:class:`zoo.video.VideoWriter`). With one env, frames go straight to the writer.
    """

    def __init__(self, renderer: Callable[[Any], np.ndarray], writer, n_envs: int) -> None:
        self.renderer, self.writer = renderer, writer
        self.stream = n_envs == 1
        self.pending: list[list[np.ndarray]] = [[] for _ in range(n_envs)]
        self.first = [0] * n_envs

    def start(self, slot: int) -> None:
        self.pending[slot] = []
        self.first[slot] = self.writer.count

    def capture(self, slot: int, env) -> None:
        """Render ``env`` once. Raises :class:`RenderError` when the first frame fails (e.g. MuJoCo
        without an OpenGL backend); a later failure propagates as it is."""
        if self.writer.count == 0 and not any(self.pending):
            try:
                frame = np.asarray(self.renderer(env))
            except Exception as exc:  # noqa: BLE001 - one line for the user, before any frame exists
                raise RenderError(f"--video: the env's renderer failed on the first frame: {type(exc).__name__}: "
                                  f"{str(exc).strip()}; for a MuJoCo env without a display set MUJOCO_GL=egl (or "
                                  "osmesa)") from exc
        else:
            frame = np.asarray(self.renderer(env))
        if self.stream:
            self.writer.append(frame)
        else:
            self.pending[slot].append(frame)

    def finish(self, slot: int) -> list[int]:
        """Write the slot's episode; ``[first, end)`` frame indices in the video."""
        if self.stream:
            return [self.first[slot], self.writer.count]
        first = self.writer.count
        for frame in self.pending[slot]:
            self.writer.append(frame)
        self.pending[slot] = []
        return [first, self.writer.count]


class _Episode:
    def __init__(self, index: int, seed: int, n_agents: int) -> None:
        self.index, self.seed = index, seed
        self.returns = np.zeros(n_agents, np.float64)
        self.length = 0
        self.seen = np.zeros(n_agents, bool)


def _active(info: dict[str, Any], n_agents: int) -> np.ndarray:
    return np.asarray(info.get("active", np.ones(n_agents, bool)), bool).reshape(n_agents)


def play(policy, envs: Sequence[Any], episodes: int, seed: int, *, deterministic: bool = False,
         recorder: Recorder | None = None,
         override: Callable[[np.ndarray], None] | None = None) -> list[dict[str, Any]]:
    """Play ``episodes`` episodes with ``policy`` on ``envs`` in lock-step (one batched
    forward pass per step and policy); the per-episode results of the module docstring, in
    episode order.

    ``policy`` is one network acting for every agent, or a list of :class:`Seat` s (a run of
    named policies, :attr:`Evaluation.players`): each seat's network acts for its agents
    only, in declaration order, each step (a seat with no active agent acts on 0 rows), and
    each result also holds ``policy_returns`` (``{policy: mean over its agents that took
    part}``). ``override(actions)``, optional, may change the actions in place before they are
    stepped: ``actions`` is ``[len(envs), A, *action_shape]`` (e.g. random actions for one
    team). ``deterministic`` takes the mode of the action distribution.

    Agents whose action spaces differ (seats of different spaces over
    :class:`zoo.core.env.PaddedSpaces`): each env is stepped with one array per space group, each
    seat's actions in its own shape and dtype, as the actors do; ``override`` is refused then.

    Raises:
        ValueError: ``override`` with agents whose action spaces differ.
    """
    import torch

    torch.manual_seed(seed)
    from zoo.core.spaces import ActionClipper

    spec = envs[0].spec
    to_env = ActionClipper(spec.action_space)  # Box actions: clipped to the bounds, as the actors do
    n, A = len(envs), spec.num_agents
    agents = list(spec.agents)
    named = isinstance(policy, (list, tuple))
    seats: list[Seat] = list(policy) if named else [Seat("", "", policy, np.arange(A, dtype=np.int64))]
    # agents whose action spaces differ: one action array per space group (rows i * A_g + j), per seat its rows
    space_groups = spec.space_groups() if spec.mixed else []
    mixed_actions = len({str(spec.action_space_of(g[0])) for g in space_groups}) > 1
    if mixed_actions and override is not None:
        raise ValueError(f"env {spec.env_id!r}: override takes one action array [envs, A, ...], but its agents' "
                         "action spaces differ")
    group_of = {a: (g, j) for g, grp in enumerate(space_groups) for j, a in enumerate(grp)}
    group_clip = [ActionClipper(spec.action_space_of(g[0])) for g in space_groups]
    teams: dict[str, list[int]] = {}
    for a, name in enumerate(agents):
        teams.setdefault(team_of(name), []).append(a)
    states: list[np.ndarray | None] = []
    for seat in seats:
        state_shape = getattr(seat.policy, "state_shape", None)
        states.append(np.zeros((n * A, *state_shape), np.float32) if state_shape else None)
    current: list[_Episode | None] = [None] * n
    obs: list[dict[str, np.ndarray]] = [{} for _ in range(n)]  # each env's latest observation
    active = [np.ones(A, bool) for _ in range(n)]
    results: list[dict[str, Any]] = []
    next_index = 0

    def start(i: int) -> None:
        nonlocal next_index
        if next_index >= episodes:
            current[i] = None
            return
        k = next_index
        next_index += 1
        obs[i], info = envs[i].reset(seed=seed + k)
        current[i] = ep = _Episode(k, seed + k, A)
        active[i] = _active(info, A)
        ep.seen |= active[i]
        for state in states:
            if state is not None:
                state[i * A:(i + 1) * A] = 0.0
        if recorder is not None:
            recorder.start(i)
            recorder.capture(i, envs[i])

    def finish(i: int, reported: dict[str, Any] | None, info: dict[str, Any]) -> None:
        ep = current[i]
        assert ep is not None, "finish(i) is called for an env in an episode"
        seen = ep.seen if ep.seen.any() else np.ones(A, bool)
        row: dict[str, Any] = {"episode": ep.index, "seed": ep.seed}
        if reported is not None:
            row["return"], row["length"] = float(reported["return"]), int(reported["length"])
        else:
            row["return"], row["length"] = float(ep.returns[seen].mean()), ep.length
        if A > 1:
            row["agent_returns"] = {agents[a]: float(ep.returns[a]) for a in range(A) if seen[a]}
            if len(teams) > 1:
                row["team_returns"] = {t: float(ep.returns[[a for a in idx if seen[a]]].mean())
                                       for t, idx in teams.items() if seen[idx].any()}
        if named:
            row["policy_returns"] = {seat.name: float(ep.returns[seat.agents[seen[seat.agents]]].mean())
                                     for seat in seats if seen[seat.agents].any()}
        for k, v in (info.get("stats") or {}).items():
            if k not in row:
                row[k] = float(v)
        if recorder is not None:
            row["video_frames"] = recorder.finish(i)
        results.append(row)
        start(i)

    for i in range(n):
        start(i)
    per_group: list[Any] = [None] * len(space_groups)
    while any(ep is not None for ep in current):
        live = [i for i in range(n) if current[i] is not None]
        flat: np.ndarray | None = None
        for seat, state in zip(seats, states, strict=True):
            mine = [seat.agents[active[i][seat.agents]] for i in live]  # its active agents in each live env
            slots = np.concatenate([i * A + rows for i, rows in zip(live, mine, strict=True)])
            keys = seat.keys or {k: k for k in obs[live[0]]}
            batch = {net: torch.as_tensor(np.concatenate([obs[i][k][rows] for i, rows in zip(live, mine, strict=True)]))
                     for k, net in keys.items()}
            with torch.no_grad():
                if state is None:
                    out = seat.policy.act(batch, deterministic=deterministic)
                else:
                    out = seat.policy.act(batch, state=torch.as_tensor(state[slots]), deterministic=deterministic)
                    state[slots] = out["state"].float().numpy()
            act = out["action"].numpy()
            if mixed_actions:
                g = group_of[agents[int(seat.agents[0])]][0]
                k = len(space_groups[g])
                rows_g = np.concatenate([i * k + np.array([group_of[agents[int(a)]][1] for a in rows], np.int64)
                                         for i, rows in zip(live, mine, strict=True)])
                if per_group[g] is None:
                    per_group[g] = np.zeros((n * k, *act.shape[1:]), act.dtype)
                per_group[g][rows_g] = act
                continue
            if flat is None:
                flat = np.zeros((n * A, *act.shape[1:]), act.dtype)
            flat[slots] = act
        if mixed_actions:
            sizes = [len(grp) for grp in space_groups]
            step_actions: Any = [[clip(a[i * k:(i + 1) * k]) for clip, a, k in zip(group_clip, per_group, sizes,
                                                                                  strict=True)] for i in range(n)]
            per_group = [None] * len(space_groups)
        else:
            assert flat is not None, "play: at least one policy"
            actions = flat.reshape(n, A, *flat.shape[1:])
            if override is not None:
                override(actions)
            step_actions = [to_env(actions[i]) for i in range(n)]
        for i in live:
            env, ep = envs[i], current[i]
            assert ep is not None, "live: in an episode"
            obs[i], reward, terminated, truncated, info = env.step(step_actions[i])
            ep.returns += reward
            ep.length += 1
            active[i] = _active(info, A)
            ep.seen |= active[i]
            if recorder is not None:
                recorder.capture(i, env)
            if not np.all(terminated | truncated | ~active[i]):
                continue
            if "episode" in info or not spec.reports_episodes:
                finish(i, info.get("episode"), info)
                continue
            # A training episode ended inside a scored one (a lost life): the env's reset continues it.
            obs[i], info = env.reset()
            if "episode" in info:  # the game ended on the reset's own no-op step
                finish(i, info["episode"], info)
                continue
            active[i] = _active(info, A)
            for state in states:
                if state is not None:
                    state[i * A:(i + 1) * A] = 0.0  # as the policy worker does for on_reset slots
            if recorder is not None:
                recorder.capture(i, env)
    results.sort(key=lambda r: r["episode"])
    return results


def summarise(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "std", "min", "max"}`` of ``values`` (numpy; ``std`` with ``ddof=0``)."""
    v = np.asarray(values, np.float64)
    return {"mean": float(np.mean(v)), "std": float(np.std(v)), "min": float(np.min(v)), "max": float(np.max(v))}
