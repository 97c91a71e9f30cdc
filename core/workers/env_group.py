"""An actor's ring groups of environments (:mod:`zoo.core.workers.actor`): :class:`EnvGroup`
steps its ``n`` envs together (actions clipped for the whole group at once, resets of finished
envs, final observations of truncated agents, running episode statistics, the finiteness check
that raises :class:`NonFiniteEnvError`, curriculum stages applied at resets) and records each
step into a :class:`~zoo.core.workers.samples.SampleBuffer`; :class:`VectorEnvGroup` does the
same with one :class:`zoo.core.env.VectorEnv` step per group step. :func:`make_group` builds the
one the env plugin offers; :func:`follow_stage` passes a reply's curriculum stage on.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from zoo.core.spaces import ActionClipper
from zoo.core.workers.base import WorkerContext, make_env
from zoo.core.workers.samples import SampleBuffer


class NonFiniteEnvError(FloatingPointError):
    """An environment returned a NaN or an infinity as a reward or an observation."""


class EnvGroup:
    """``n`` environments stepped together, with their running episode statistics.

    ``actor`` and ``env_offset`` (the actor's index and the index of this group's first env
    within the actor) only label errors (:class:`NonFiniteEnvError`).
    """

    def __init__(self, envs: list, seeds: list[int], actor: int = 0, env_offset: int = 0,
                 return_gamma: float | None = None, stage: int = -1) -> None:
        self.envs = envs  # what the actor closes at the end
        self._setup(envs[0].spec, len(envs), actor, env_offset, return_gamma)
        self.want_stage(stage)
        for i, env in enumerate(envs):
            self._apply_stage(i, env)
        obs, infos = zip(*(env.reset(seed=s) for env, s in zip(envs, seeds, strict=True)), strict=True)
        self.obs = self._stack(obs)
        self.check_finite(None, self.obs)
        self.active = self._active(infos)
        self.on_reset = np.ones(self.active.shape, bool)  # the observation starts an episode

    def _setup(self, spec, n: int, actor: int, env_offset: int, return_gamma: float | None) -> None:
        self.spec, self.n_envs = spec, n
        self.A = spec.num_agents
        self.actor, self.env_offset = actor, env_offset
        self.steps = 0  # group steps so far: each env of the group was stepped this many times
        self.ep_return = np.zeros((n, self.A), np.float64)
        self.ep_length = np.zeros(n, np.int64)
        self.to_env = ActionClipper(spec.action_space)
        # agents with different spaces (PaddedSpaces): actions travel as one array per space group
        self.space_groups = spec.space_groups() if spec.mixed else [tuple(spec.agents)]
        self.group_clippers = [ActionClipper(spec.action_space_of(g[0])) for g in self.space_groups]
        # reward normalisation: R = gamma R + r per agent-slot, reset when the agent's episode ends
        self.return_gamma = return_gamma
        self.disc_ret = np.zeros(n * self.A, np.float64)
        self.teams: dict[str, np.ndarray] = {}  # named policies: P -> its agents' indices (episode rows' <P>_return)
        self.played: dict[str, np.ndarray] = {}  # opponents: P -> each env's version (episode rows' <P>_version)
        # curriculum (docs/curriculum.md): the run's stage, and each env's (-1: never told one)
        self.stage = -1
        self.env_stage = np.full(n, -1, np.int64)

    def want_stage(self, stage: int) -> None:
        """The run's curriculum stage is ``stage`` (-1: no curriculum): each env switches to it at its
        next reset (:meth:`_apply_stage`), never in the middle of an episode."""
        self.stage = int(stage)

    def _apply_stage(self, i: int, env: Any) -> None:
        """Right before env ``i``'s reset: tell it the run's stage if it plays another one."""
        if self.stage >= 0 and self.env_stage[i] != self.stage:
            env.set_curriculum_stage(self.stage)
            self.env_stage[i] = self.stage

    @staticmethod
    def _stack(obs: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        # [n][A, ...] -> [n * A, ...]: agent-slot s = env * A + agent
        return {k: np.concatenate([o[k] for o in obs]) for k in obs[0]}

    def check_finite(self, reward: np.ndarray | None, obs: dict[str, np.ndarray], when: str = "",
                     first_slot: int = 0) -> None:
        """Raise :class:`NonFiniteEnvError` if ``reward`` ``[n * A]`` or a floating-point array of
        ``obs`` (``[n * A, ...]``; rows from agent-slot ``first_slot`` on) holds a NaN or an
        infinity; one float64 sum per array."""
        arrays = [] if reward is None else [("reward", reward)]
        arrays += [(f"observation {k!r}", v) for k, v in obs.items() if v.dtype.kind == "f"]
        for what, arr in arrays:
            if np.isfinite(np.add.reduce(arr, axis=None, dtype=np.float64)):
                continue
            flat = arr.reshape(arr.shape[0], -1)
            bad = np.flatnonzero(~np.isfinite(flat).all(axis=1))
            if bad.size == 0:
                continue
            slot = first_slot + int(bad[0])
            env, agent = slot // self.A, slot % self.A
            row = flat[int(bad[0])]
            value = row[~np.isfinite(row)][0]
            raise NonFiniteEnvError(
                f"env {self.spec.env_id} (actor {self.actor}, env {self.env_offset + env}, agent {agent}) "
                f"returned a non-finite {what} ({value}){when} at its env step {self.steps}"
                + (" (its first reset)" if not self.steps else f" (step {int(self.ep_length[env])} of its episode)"
                   if self.ep_length[env] else " (an episode ended at this step)")
                + (f"; {bad.size} agent-slots of this group are affected" if bad.size > 1 else "")
                + ": the environment must return finite rewards and observations (fix it, or clip or "
                "replace such values in a wrapper)")

    def _active(self, infos) -> np.ndarray:
        return np.concatenate([np.asarray(i.get("active", np.ones(self.A, bool)), bool) for i in infos])

    def step(self, action: np.ndarray | list[np.ndarray], buf: SampleBuffer, episodes: list[dict[str, Any]]) -> None:
        """Step every env with ``action``, ``[n * A, ...]``: one row per agent-slot, inactive ones included.
        Agents with different spaces (:class:`zoo.core.env.PaddedSpaces`): a list of one array per
        space group ``g`` (``spec.space_groups()``), ``[n * A_g, *shape_g]`` in its own dtype, row
        ``e * A_g + j`` env ``e``'s ``j``-th agent of the group (:class:`ActionAssembler`); each env
        is stepped with its ``G`` slices.

        Raises:
            ValueError: ``action`` does not have ``n * A`` rows (e.g. only the active agents' rows), or
                a list of the wrong length or with a group's array of the wrong number of rows.
        """
        A, n = self.A, self.n_envs
        if isinstance(action, list) and len(action) == 1 and len(self.space_groups) == 1:
            action = action[0]  # one space group: the array itself (a routed actor's ActionAssembler)
        if isinstance(action, list):
            return self._step_groups(action, buf, episodes)
        if len(action) != n * A:
            raise ValueError(f"actions for {len(action)} agent-slots; this group has {n} envs x {A} agents = "
                             f"{n * A} (inactive slots included)")
        env_action = self.to_env(action)  # Box: clipped to the bounds, all slots at once
        self._step_envs(lambda i: env_action[i * A:(i + 1) * A], buf, episodes)

    def _step_groups(self, action: list[np.ndarray], buf: SampleBuffer, episodes: list[dict[str, Any]]) -> None:
        n, sizes = self.n_envs, [len(g) for g in self.space_groups]
        if len(action) != len(sizes) or any(len(a) != n * k for a, k in zip(action, sizes, strict=False)):
            raise ValueError(f"actions for space groups of {[len(a) for a in action]} rows; this group has {n} envs "
                             f"and space groups of {sizes} agents, so {[n * k for k in sizes]} rows")
        clipped = [clip(a) for clip, a in zip(self.group_clippers, action, strict=True)]  # each group at once
        if len(clipped) == 1:
            self._step_envs(lambda i: clipped[0][i * sizes[0]:(i + 1) * sizes[0]], buf, episodes)
        else:
            self._step_envs(lambda i: [a[i * k:(i + 1) * k] for a, k in zip(clipped, sizes, strict=True)], buf,
                            episodes)

    def _step_envs(self, env_action: Any, buf: SampleBuffer, episodes: list[dict[str, Any]]) -> None:
        """Step env ``i`` with ``env_action(i)`` for every env, reset the finished ones, record."""
        A, n = self.A, self.n_envs
        rewards = np.zeros(n * A, np.float32)
        terminated = np.zeros(n * A, bool)
        truncated = np.zeros(n * A, bool)
        next_obs, next_infos = [], []
        n_final = len(buf.final_obs)
        # a slot stays "on reset" until it acts: an agent joining late starts from a fresh state
        self.on_reset &= ~self.active
        for i, env in enumerate(self.envs):
            obs, r, term, trunc, info = env.step(env_action(i))
            rewards[i * A:(i + 1) * A] = r
            terminated[i * A:(i + 1) * A] = term
            truncated[i * A:(i + 1) * A] = trunc
            self.ep_return[i] += r
            self.ep_length[i] += 1
            active = np.asarray(info.get("active", np.ones(A, bool)), bool)
            for a in np.flatnonzero(trunc & ~term):  # truncated: keep the real last observation
                buf.final_obs.append((buf.t, i * A + a, {k: v[a].copy() for k, v in obs.items()}))
            if np.all(term | trunc | ~active):
                self.sink(i, episodes).extend(self._episode_stats(i, info))
                self._apply_stage(i, env)
                obs, info = env.reset()
                self.on_reset[i * A:(i + 1) * A] = True
                # a whole episode may also end inside a reset (Atari: the no-op after a lost life)
                if "episode" in info:
                    self.sink(i, episodes).append({"return": float(info["episode"]["return"]),
                                     "length": int(info["episode"]["length"])})
            next_obs.append(obs)
            next_infos.append(info)
        self.obs = self._stack(next_obs)
        self.active = self._active(next_infos)
        self._record(rewards, terminated, truncated, buf, n_final)

    def _record(self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, buf: SampleBuffer,
                n_final: int) -> None:
        """Check and record a group step whose results are in ``self.obs`` / ``self.active``."""
        self.steps += 1
        self.check_finite(rewards, self.obs)
        for _, slot, final in buf.final_obs[n_final:]:  # the real last observations of truncated agents
            self.check_finite(None, {k: v[None] for k, v in final.items()}, " as the last observation of an episode",
                              slot)
        if self.return_gamma is not None:
            self.disc_ret = self.disc_ret * self.return_gamma + rewards
            assert buf.disc_return is not None, "a group with return_gamma records into a buffer with disc_return"
            buf.disc_return[buf.t] = self.disc_ret
            self.disc_ret[terminated | truncated | self.on_reset] = 0.0
        buf.record_step(rewards, terminated, truncated, self.obs)

    def _played(self, env: int) -> dict[str, int]:
        """``{"<P>_version": version}`` for each opponent policy P that acted in env ``env``'s
        episode now ending (docs/history.md); forgets them for the next episode."""
        out = {f"{team}_version": int(v[env]) for team, v in self.played.items() if v[env] >= 0}
        for v in self.played.values():
            v[env] = -1
        return out

    def sink(self, i: int, episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Where env ``i``'s finished episodes go: ``episodes``, or with :attr:`episode_sink` (a
        population's per-env routing) the list it gives for env ``i``."""
        sink = getattr(self, "episode_sink", None)
        return episodes if sink is None else sink(i)

    def _episode_stats(self, i: int, info: dict[str, Any]) -> list[dict[str, Any]]:
        stats: dict[str, Any] = {"return": float(self.ep_return[i].mean()), "length": int(self.ep_length[i])}
        for team, agents in self.teams.items():  # per-policy returns; an env statistic of the same name wins
            stats[f"{team}_return"] = float(self.ep_return[i][agents].mean())
        stats.update(self._played(i))
        if self.env_stage[i] >= 0:  # the curriculum stage this episode was played at
            stats["curriculum_stage"] = int(self.env_stage[i])
        self.ep_return[i] = 0
        self.ep_length[i] = 0
        stats.update({k: float(v) for k, v in info.get("stats", {}).items()})
        if "episode" not in info:
            # An env that reports whole episodes itself (Atari: the raw game score over all
            # lives) ends training episodes without one (a lost life): not logged as an episode.
            return [] if self.spec.reports_episodes else [stats]
        return [{**stats, "return": float(info["episode"]["return"]), "length": int(info["episode"]["length"])}]


class VectorEnvGroup(EnvGroup):
    """A ring group whose ``n`` envs are one :class:`zoo.core.env.VectorEnv`: every group
    step is one ``step`` call for all of them (no per-env Python loop), and the vector env
    resets the envs whose episode ended inside that call (``info["ended"]``)."""

    def __init__(self, venv, seeds: list[int], actor: int = 0, env_offset: int = 0,
                 return_gamma: float | None = None, stage: int = -1) -> None:
        self.venv = venv
        self.envs = [venv]  # what the actor closes at the end
        self._setup(venv.spec, int(venv.num_envs), actor, env_offset, return_gamma)
        if len(seeds) != self.n_envs:
            raise ValueError(f"{len(seeds)} seeds for a vector env of {self.n_envs} envs")
        self.want_stage(stage)
        self._apply_stage(0, venv)
        self.obs, info = venv.reset(list(seeds))
        self.check_finite(None, self.obs)
        self.active = self._vector_active(info)
        self.on_reset = np.ones(self.active.shape, bool)

    def _vector_active(self, info: dict[str, Any]) -> np.ndarray:
        return np.asarray(info.get("active", np.ones(self.n_envs * self.A, bool)), bool)

    def step(self, action: np.ndarray | list[np.ndarray], buf: SampleBuffer, episodes: list[dict[str, Any]]) -> None:
        """Step all ``n`` envs with ``action`` ``[n * A, ...]`` in one call (see :meth:`EnvGroup.step`;
        a list of one array, as a routed actor gives it, is that array)."""
        A, n = self.A, self.n_envs
        if isinstance(action, list):
            if len(action) != 1:
                raise ValueError(f"actions for {len(action)} space groups; a vector env's agents share one space")
            action = action[0]
        if len(action) != n * A:
            raise ValueError(f"actions for {len(action)} agent-slots; this group has {n} envs x {A} agents = "
                             f"{n * A} (inactive slots included)")
        n_final = len(buf.final_obs)
        self.on_reset &= ~self.active
        obs, rewards, terminated, truncated, info = self.venv.step(self.to_env(action))
        rewards = np.asarray(rewards, np.float32)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        self.ep_return += rewards.reshape(n, A)
        self.ep_length += 1
        cut = np.flatnonzero(truncated & ~terminated)  # truncated: keep the real last observation
        if cut.size:
            final = info["final_obs"]
            buf.final_obs.extend((buf.t, int(s), {k: v[s].copy() for k, v in final.items()}) for s in cut)
        if self.stage >= 0 and self.env_stage[0] != self.stage:  # a vector env applies it at each env's next reset
            self._apply_stage(0, self.venv)
        ended = np.flatnonzero(np.asarray(info.get("ended", np.zeros(n, bool)), bool))
        if ended.size:
            self._episodes_ended(ended, info, episodes)
            self.on_reset.reshape(n, A)[ended] = True
        self.obs = obs
        self.active = self._vector_active(info)
        self._record(rewards, terminated, truncated, buf, n_final)

    def _episodes_ended(self, ended: np.ndarray, info: dict[str, Any], episodes: list[dict[str, Any]]) -> None:
        if not self.spec.reports_episodes:
            for e in ended:
                row = {"return": float(self.ep_return[e].mean()), "length": int(self.ep_length[e])}
                row.update({f"{team}_return": float(self.ep_return[e][agents].mean())
                            for team, agents in self.teams.items()})
                row.update(self._played(e))
                self.sink(int(e), episodes).append(row)
        self.ep_return[ended] = 0
        self.ep_length[ended] = 0
        whole = info.get("episode")
        if whole is not None:  # whole episodes (the game score, over all lives) that ended at this step
            episodes.extend({"return": float(r), "length": int(n)}
                            for r, n in zip(whole["return"], whole["length"], strict=True))


def follow_stage(groups: list[EnvGroup], meta: dict[str, Any]) -> None:
    """A reply's ``curriculum_stage`` (docs/curriculum.md), when it differs from the groups': every
    env of this actor switches to it at its next reset."""
    stage = meta.get("curriculum_stage")
    if stage is not None and groups and int(stage) != groups[0].stage:
        for group in groups:
            group.want_stage(int(stage))


def make_group(ctx: WorkerContext, seeds: list[int], env_offset: int, return_gamma: float | None) -> EnvGroup:
    """The ring group of envs ``env_offset ..`` of this actor: one
    :class:`VectorEnvGroup` when the env plugin's ``vector_factory`` gives a vector env for
    this config, else an :class:`EnvGroup` of envs built one by one."""
    from zoo.core.config import resolve_env

    component, arg = resolve_env(ctx.registry, ctx.cfg.env_name)
    vector_factory = component.option("vector_factory")
    venv = vector_factory(arg, ctx.cfg.env, len(seeds)) if vector_factory is not None else None
    if venv is not None:
        return VectorEnvGroup(venv, seeds, ctx.index, env_offset, return_gamma, ctx.curriculum_stage)
    return EnvGroup([make_env(ctx, s) for s in seeds], seeds, ctx.index, env_offset, return_gamma,
                    ctx.curriculum_stage)
