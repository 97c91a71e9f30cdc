"""Actor worker: steps environments, asks the policy worker for actions, pushes samples.

Actor ``i`` asks policy worker ``i mod policy.count`` (endpoint ``inference-<m>``) and
pushes to trainer ``i mod trainer.count`` (endpoint ``sample-<k>``); see :mod:`zoo.core.graph`.
With ``policy.inline`` there is no policy worker: the actor runs the policy itself, one
forward pass over all its envs per step, and pulls parameters between rollouts
(:mod:`zoo.core.workers.inline`); samples, resets and meters are as below, but the ring
overlaps nothing (the pass runs before the groups are stepped).

The actor's ``envs_per_actor`` environments are split into ``ring_size`` groups. Each
group has at most one inference request in flight; while the policy worker computes a
group's actions the actor steps another group, so the CPU does not sit idle (SRL,
section 3.2). One request carries all agent-slots of a group: never one message per
environment.

When the env plugin offers a vector env for the run's config (its ``vector_factory``, e.g.
``--env atari:Pong --set env.backend=vector``), each group is one
:class:`zoo.core.env.VectorEnv` (:class:`VectorEnvGroup`): one ``step`` call steps all the
group's envs, and it resets the envs whose episode ended inside that call, so the samples
are laid out exactly as with per-env resets.

Each group records a time-major sample buffer of ``T = sample_length`` steps for its
``n_envs x A`` agent-slots (layout in :mod:`zoo.core.algorithm`). When ``T`` steps are
done, row ``T`` of the observations receives the bootstrap observation, the sample is
pushed to the trainer, and the next sample starts from that same observation. The actor
owns resets: when all agents of an environment are done it records the real final
observation of truncated agents (``final_obs``), resets the environment and continues.

Actions go to the envs as the policy chose them, except Box actions, which are clipped to
the action space's bounds for the whole group at once (:class:`zoo.core.spaces.ActionClipper`);
the sample keeps the unclipped action, whose log-probability the policy returned.

``on_reset`` is per agent-slot: True from an episode's reset until the agent's first
active step, inclusive. An agent that joins an episode late (PettingZoo agents absent
from ``env.agents`` at first) therefore starts from a fresh recurrent state at its first
step of every episode, in the policy worker and in training alike.

When the algorithm's config has ``norm_reward`` set, each sample also carries
``disc_return`` ``float32 [T, S]``: the running discounted return ``R = gamma R + r`` of
each agent-slot (``gamma``: the algorithm's), reset when the agent's episode ends, from
which the trainer scales rewards (:mod:`zoo.plugins.algorithms.normalization`).

**Curriculum** (docs/curriculum.md): with a ``[curriculum]``, the envs start at the stage the
controller gave this worker (``ctx.curriculum_stage``), every reply carries the run's stage
(``curriculum_stage``, from the trainer through the parameters), and an env whose stage
differs is told the new one right before its next reset (:meth:`EnvGroup.want_stage`), never
in the middle of an episode; its episode rows carry ``curriculum_stage``, the stage they were
played at.

At the end every env's ``close()`` is called within :data:`zoo.core.env.CLOSE_BUDGET_S`;
a slow, failing or unfinished close is reported to the controller as a warning.

Every sample message's meta says where its columns come from: ``actor`` (this actor's
index), ``env_offset`` (the index, within the actor, of the group's first env) and
``agents`` (``A``): column ``s`` is env ``env_offset + s // A``, agent ``s % A``.

**Non-finite values.** After each group step the rewards and the floating-point
observations of the group are checked at once (one float64 sum per array over all its
envs); a NaN or an infinity raises :class:`NonFiniteEnvError` naming the env, this actor's
index, the env's index and the step, which the worker reports to the controller as its
error: the run stops there instead of failing later in the policy worker or trainer.

**Env seeds** (:func:`zoo.core.seeding.env_seeds`): env ``i`` of actor ``a`` is built and
first reset with ``derive_seed(seed, "env", a, i)`` (numpy ``SeedSequence`` over the run
seed, the role, the actor and the env slot: independent across envs, actors and runs);
when the run was resumed (``cfg.resume`` = n >= 1) n joins the key, and when this actor is a
restarted process (``ctx.attempt`` = a >= 1) n and a do, so neither a resumed run's envs nor a
restarted actor's replay the episodes of the run's start or of the crashed attempt. Environment
state itself (positions, the envs' own RNGs) is not checkpointed: a resumed run starts new
episodes.

Its heartbeats carry where its time goes (:class:`zoo.core.health.Meter`): ``env``
(stepping a group), ``inference`` (sending requests, waiting for replies; inline: the
forward passes and loading parameters), ``push``
(pushing a sample, which blocks while the trainer does not take it), measured with one
clock read per phase of a group step, never per environment; and each inference request's
round trip, from the stream taking it to the loop taking its reply, in a histogram
(``round_trip``, :mod:`zoo.core.health`), from the clock reads the phases already make (the
routed actor reads the clock once more per reply its non-blocking sweep takes).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from zoo.core.env import PAD_SEP, close_envs, describe_difference
from zoo.core.graph import Graph, endpoint
from zoo.core.health import Meter
from zoo.core.seeding import env_seeds
from zoo.core.spaces import ActionClipper
from zoo.core.workers.base import WorkerContext, make_env
from zoo.core.workers.policy import PLAYED_VERSION

REQUEST_TIMEOUT_S = 0.2
REQUEST_RETRY_S = 10.0
"""A group whose request has had no reply for this long sends it again under a new id (the
policy worker was restarted and lost it); a late reply to the old id is ignored."""
DROP_WAIT_S = 0.005  # with actors.drop_when_full: how long a sample may wait for the trainer


class SampleBuffer:
    """Preallocated time-major arrays for one group's sample of ``T`` steps and ``S`` agent-slots."""

    def __init__(self, T: int, first_obs: dict[str, np.ndarray], disc_return: bool = False) -> None:
        self.T = T
        S = next(iter(first_obs.values())).shape[0]
        self.obs = {k: np.empty((T + 1, *v.shape), v.dtype) for k, v in first_obs.items()}
        self.reward = np.zeros((T, S), np.float32)
        self.terminated = np.zeros((T, S), bool)
        self.truncated = np.zeros((T, S), bool)
        self.active = np.ones((T, S), bool)
        self.on_reset = np.zeros((T, S), bool)
        self.policy_version = np.zeros((T, S), np.int64)
        self.action: np.ndarray | None = None
        self.extras: dict[str, np.ndarray] = {}
        self.final_obs: list[tuple[int, int, dict[str, np.ndarray]]] = []
        # running discounted return per slot at each step (reward normalisation), or None
        self.disc_return = np.zeros((T, S), np.float32) if disc_return else None
        self.t = 0
        for k, v in first_obs.items():
            self.obs[k][0] = v

    def record_policy(self, reply: dict[str, np.ndarray], version: int, active: np.ndarray,
                      on_reset: np.ndarray) -> np.ndarray:
        """Record the policy's outputs for step ``t``; ``reply`` rows are the active slots only.

        Returns:
            the actions of step ``t`` for every agent-slot, ``[S, ...]`` (zeros for inactive
            slots): what :meth:`EnvGroup.step` takes, since slot ``s`` is env ``s // A``'s agent
            ``s % A`` whichever slots are active.
        """
        t = self.t
        S = active.shape[0]
        if self.action is None:
            self.action = np.zeros((self.T, S, *reply["action"].shape[1:]), reply["action"].dtype)
            self.extras = {k: np.zeros((self.T, S, *v.shape[1:]), v.dtype) for k, v in reply.items() if k != "action"}
        self.action[t] = 0
        self.action[t][active] = reply["action"]
        for k, buf in self.extras.items():
            buf[t] = 0
            buf[t][active] = reply[k]
        self.policy_version[t] = version
        self.active[t] = active
        self.on_reset[t] = on_reset
        return self.action[t]

    def record_part(self, cols: np.ndarray, reply: dict[str, np.ndarray], version: int, active: np.ndarray,
                    on_reset: np.ndarray, outputs: dict[str, np.ndarray], keep: bool = True) -> np.ndarray:
        """Record one named policy's outputs for step ``t`` (routed actor, docs/policies.md):
        ``cols`` int ``[S_P]`` are its agent-slots of the group, ``reply`` rows its active ones
        (``active``/``on_reset`` bool ``[S_P]``, over ``cols``). Its outputs go to its own arrays
        ``outputs`` (``{key: [T, S_P, ...]}``, filled in place, each in the shape and dtype the
        policy gave: agents of different policies may have different action spaces): the
        action always (the env steps with it), the others (log-probabilities, values) only when
        ``keep`` (False for a frozen policy, whose samples are not sent). Call once per policy of
        the group; :class:`ActionAssembler` makes the env's actions from the returned rows.

        Returns:
            the policy's actions of step ``t``, ``[S_P, ...]`` (zeros for inactive slots).
        """
        t = self.t
        for k, v in reply.items():
            if k != "action" and not keep:
                continue
            if k not in outputs:
                outputs[k] = np.zeros((self.T, len(cols), *v.shape[1:]), v.dtype)
            outputs[k][t] = 0
            outputs[k][t][active] = v
        self.policy_version[t][cols] = version
        self.active[t][cols] = active
        self.on_reset[t][cols] = on_reset
        return outputs["action"][t]

    def record_step(self, reward, terminated, truncated, next_obs) -> None:
        t = self.t
        self.reward[t] = reward
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        for k, v in next_obs.items():
            self.obs[k][t + 1] = v
        self.t += 1

    @property
    def full(self) -> bool:
        return self.t == self.T

    def bundle(self) -> dict[str, Any]:
        """The sample's arrays (module docstring); a routed actor's (:meth:`record_part`) has no
        ``action``: each policy's actions are in its own outputs (:func:`split_bundle`)."""
        out = {"obs": self.obs, "reward": self.reward, "terminated": self.terminated,
               "truncated": self.truncated, "active": self.active, "on_reset": self.on_reset,
               "policy_version": self.policy_version, **self.extras}
        if self.action is not None:
            out["action"] = self.action
        if self.disc_return is not None:
            out["disc_return"] = self.disc_return
        if self.final_obs:
            out["final_obs"] = {k: np.stack([f[2][k] for f in self.final_obs]) for k in self.obs}
            out["final_index"] = np.array([[t, s] for t, s, _ in self.final_obs], np.int64)
        else:
            out["final_obs"] = {k: np.empty((0, *v.shape[2:]), v.dtype) for k, v in self.obs.items()}
            out["final_index"] = np.empty((0, 2), np.int64)
        return out


def split_bundle(bundle: dict[str, Any], cols: np.ndarray, extras: dict[str, np.ndarray],
                 keys: dict[str, str] | None = None) -> dict[str, Any]:
    """One named policy's sample out of a group's whole sample ``bundle`` (:meth:`SampleBuffer.bundle`):
    columns ``cols`` (int ``[S_P]``) of every ``[T(+1), S, ...]`` array, its truncated agents'
    final observations (``final_index`` column renumbered within ``cols``) and its own outputs
    ``extras`` (``{key: [T, S_P, ...]}``: with :meth:`SampleBuffer.record_part` its ``action``
    too, in its own action space's shape and dtype). ``keys``: agents with different spaces
    (:class:`zoo.core.env.PaddedSpaces`): the observation keys of the policy's space group,
    ``{padded key: its own key}``; the others are left out."""
    out: dict[str, Any] = {}
    for key, value in bundle.items():
        if key in ("final_obs", "final_index"):
            continue
        if key == "obs" and keys is not None:
            out[key] = {own: value[padded][:, cols] for padded, own in keys.items()}
        elif isinstance(value, dict):
            out[key] = {k: v[:, cols] for k, v in value.items()}
        else:
            out[key] = value[:, cols]
    position = np.full(bundle["reward"].shape[1], -1, np.int64)
    position[cols] = np.arange(len(cols))
    index = bundle["final_index"]
    keep = position[index[:, 1]] >= 0 if len(index) else np.zeros(0, bool)
    final = bundle["final_obs"]
    out["final_obs"] = ({own: final[padded][keep] for padded, own in keys.items()} if keys is not None
                        else {k: v[keep] for k, v in final.items()})
    out["final_index"] = np.stack([index[keep, 0], position[index[keep, 1]]], axis=1) if keep.any() else \
        np.empty((0, 2), np.int64)
    out.update(extras)
    return out


class ActionAssembler:
    """Makes each env step's actions from the named policies that acted (routed actor,
    docs/policies.md): every policy's actions ``[S_P, *its action shape]`` (rows in the order
    of its agent-slots ``[e * A + a for e in range(n) for a in agent_ids[P]]``) go to the rows of
    its agents in its space group's array, so agents of different policies may have action
    spaces of different shapes and dtypes. Vectorised: one fancy-index assignment per policy.

    Args:
        spec: the env's spec (``spec.space_groups()``: one group, every agent, unless mixed).
        agent_ids: per policy, the positions in ``spec.agents`` of its agents (all in one space group).
        n_envs: the ring group's envs.
        envs: per policy, the group's envs (int, ascending) its agents act in (a population's
            per-env routing, docs/pbt.md); None: every env. Its rows are then
            ``[e * A + a for e in envs[P] for a in agent_ids[P]]``.

    Raises:
        ValueError: a policy whose agents are in different space groups (naming two agents).
    """

    def __init__(self, spec: Any, agent_ids: dict[str, np.ndarray], n_envs: int,
                 envs: dict[str, np.ndarray] | None = None) -> None:
        self.groups = spec.space_groups() if spec.mixed else [tuple(spec.agents)]
        self.n_envs = n_envs
        of = {a: (g, j) for g, grp in enumerate(self.groups) for j, a in enumerate(grp)}
        self.where: dict[str, tuple[int, np.ndarray]] = {}
        for name, ids in agent_ids.items():
            agents = [spec.agents[int(a)] for a in ids]
            g = of[agents[0]][0]
            other = next((a for a in agents if of[a][0] != g), None)
            if other is not None:
                pair = [(spec.observation_space_of(a), spec.action_space_of(a)) for a in (agents[0], other)]
                raise ValueError(f"policy {name}: agents {agents[0]!r} and {other!r} have different spaces "
                                 f"({describe_difference(agents[0], pair[0], other, pair[1])}); one policy acts "
                                 "for agents of one space")
            k = len(self.groups[g])
            members = np.array([of[a][1] for a in agents], np.int64)
            rows_of = np.arange(n_envs) if envs is None else np.asarray(envs[name], np.int64)
            self.where[name] = (g, (rows_of[:, None] * k + members[None, :]).reshape(-1))
        # one policy acting for every agent of the only space group, in order (a run of one named
        # policy): its actions are the env's as they are, no array to fill
        self.whole = next(iter(self.where)) if len(self.where) == 1 and len(self.groups) == 1 and np.array_equal(
            next(iter(self.where.values()))[1], np.arange(n_envs * len(self.groups[0]))) else None

    def __call__(self, actions: dict[str, np.ndarray]) -> list[np.ndarray]:
        """``{policy: [S_P, ...]}`` (every policy's) -> one array per space group ``g``,
        ``[n * A_g, ...]`` (row ``e * A_g + j``: env ``e``'s ``j``-th agent of the group), in the
        dtype of the group's first policy: what :meth:`EnvGroup.step` takes. One policy acting for
        every agent in order: its array itself (not a copy)."""
        if self.whole is not None and len(actions) == 1 and self.whole in actions:
            return [actions[self.whole]]
        out: list[np.ndarray | None] = [None] * len(self.groups)
        for name, act in actions.items():
            g, rows = self.where[name]
            arr = out[g]
            if arr is None:
                arr = out[g] = np.zeros((self.n_envs * len(self.groups[g]), *act.shape[1:]), act.dtype)
            arr[rows] = act
        missing = [g for g, a in enumerate(out) if a is None]
        if missing:
            raise ValueError(f"no policy acted for space group(s) {missing} ({', '.join(self.groups[missing[0]])})")
        return out  # type: ignore[return-value]


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


def inference_client(ctx: WorkerContext, graph: Graph):
    """Where the actor's requests for actions go: its policy worker's ``inference-<m>`` endpoint
    (a request client of the inference stream), or, with ``policy.inline``, an
    :class:`~zoo.core.workers.inline.InlineClient` running the policy in this process. Both
    have ``send(request, meta, timeout)``, ``recv(timeout)`` and ``close()``."""
    if ctx.cfg.policy.inline:
        from zoo.core.workers.inline import InlineClient

        return InlineClient(ctx)
    policy = graph.policy_of(ctx.index)
    assert policy is not None, "graph.policy_of is None only with policy.inline"
    return ctx.transport("inference").request_client(endpoint("inference", policy), ctx.index)


ATTEMPT_REQUEST_IDS = 1 << 32
"""Request ids per attempt: attempt ``a`` numbers its inference requests from ``a * 2**32``."""


def first_request_id(ctx: WorkerContext) -> int:
    """The id of this actor's first inference request: ``ctx.attempt * 2**32``. A restarted
    actor keeps its actor index (its client id), so a reply the policy worker sends late to a
    request of the crashed attempt can reach it; numbered apart, such a reply matches no
    request it waits for and is skipped, instead of being taken as the answer to its own
    request with the same number (which would act with another env's actions)."""
    return int(ctx.attempt) * ATTEMPT_REQUEST_IDS


def actor_env_seeds(ctx: WorkerContext) -> list[int]:
    """The first-reset seeds of this actor's ``actors.envs_per_actor`` envs, slot 0 first
    (module docstring, "Env seeds"): :func:`env_seeds` of the run seed, the actor's index,
    ``cfg.resume`` and ``ctx.attempt``."""
    cfg = ctx.cfg
    return env_seeds(cfg.seed, ctx.index, cfg.actors.envs_per_actor, int(getattr(cfg, "resume", 0) or 0), ctx.attempt)


class RequestsInFlight:
    """The inference requests of a ring of env groups that are waiting for their replies: one per
    group at most. Ids are ints counted up from ``first_id`` (:func:`first_request_id`), so a
    crashed attempt's late replies match nothing; ``pending`` maps a request id in flight to its
    group's index, ``request_id[g]`` is group ``g``'s latest id (-1: none sent yet) and
    ``sent_at[g]`` when the stream took it (``time.perf_counter()`` s). A request unanswered for
    :data:`REQUEST_RETRY_S` seconds (its policy worker restarted) is sent again with a new id
    (:meth:`retry_stale`). Subclasses build the request (:meth:`send`) and hand it to :meth:`post`."""

    def __init__(self, ctx: WorkerContext, client: Any, groups: list[EnvGroup], first_id: int, meter: Meter) -> None:
        self.ctx, self.client, self.groups, self.meter = ctx, client, groups, meter
        self.next_id = first_id
        self.pending: dict[int, int] = {}  # request id -> group index
        self.request_id = [-1] * len(groups)  # each group's latest request id
        self.sent_at = [0.0] * len(groups)  # when each group's request in flight was sent (perf_counter s)

    def send(self, g: int) -> None:
        """Ask for the actions of group ``g``'s acting agents (:meth:`post`)."""
        raise NotImplementedError

    def number(self, g: int) -> int:
        """A new request id for group ``g``, now pending (the group's id before it is no longer waited for)."""
        self.request_id[g] = rid = self.next_id
        self.pending[rid] = g
        self.next_id += 1
        return rid

    def post(self, g: int, request: dict[str, Any], meta: dict[str, Any]) -> None:
        """Send group ``g``'s ``request`` with ``meta`` (``request_id`` from :meth:`number`), waiting
        :data:`REQUEST_TIMEOUT_S` at a time, with heartbeats, while the inference stream is full;
        returns early on a stop request (the request then counts as not sent). The wait is metered
        as ``inference`` time; the round trip starts when the stream took the request."""
        t = time.perf_counter()
        while not self.client.send(request, meta, REQUEST_TIMEOUT_S):
            if self.ctx.stop:
                return
            t = self.meter.lap("inference", t)  # counted as it goes: a heartbeat sent now includes it
            self.ctx.heartbeat()  # waiting for a (restarting) policy worker is not hanging
        self.sent_at[g] = self.meter.lap("inference", t)  # the round trip starts as the stream took it
        self.meter.counts["requests"] += 1

    def answered(self, request_id: int, now: float | None = None) -> int | None:
        """The group a reply is for, no longer pending; None for a request this actor no longer
        waits for (resent, or a crashed attempt's). ``now``: ``time.perf_counter()`` when the
        reply was taken; its round trip ``now - sent_at`` is counted in the meter
        (:meth:`~zoo.core.health.Meter.took_reply`; None: not counted)."""
        g = self.pending.pop(request_id, None)
        if g is not None and now is not None:
            self.meter.took_reply(now - self.sent_at[g])
        return g

    def retry_stale(self, now: float | None = None) -> None:
        """Send again every request older than :data:`REQUEST_RETRY_S` (``now``: ``time.perf_counter()`` s)."""
        now = time.perf_counter() if now is None else now
        for g in range(len(self.groups)):
            if self.request_id[g] in self.pending and now - self.sent_at[g] > REQUEST_RETRY_S:
                del self.pending[self.request_id[g]]
                self.send(g)


class InferenceRequests(RequestsInFlight):
    """The ring's inference requests in flight (:class:`RequestsInFlight`), each carrying the
    group's acting agent-slots (``slot``: int64 ``[S]``, indices into the group's ``N*A`` slots)."""

    def send(self, g: int) -> None:
        """Ask for the actions of group ``g``'s acting agents, waiting (with heartbeats) while the
        inference stream is full; returns early on a stop request."""
        group = self.groups[g]
        rid = self.number(g)
        # Only agents that act are sent: finished or not-yet-joined agents get no action.
        slots = np.flatnonzero(group.active)
        request = {"obs": {k: v[slots] for k, v in group.obs.items()}, "slot": slots,
                   "on_reset": group.on_reset[slots]}
        self.post(g, request, {"request_id": rid, "rows": int(slots.size), "group": g})


class SampleOutbox:
    """An actor's samples on their way to its trainer, and the counts that travel with them:
    env steps and finished episodes since the last sample sent, and agent-slot samples dropped
    because the trainer was behind (``dropped_at_actor``). With ``drop_when_full``
    (``actors.drop_when_full``) a sample waits at most :data:`DROP_WAIT_S` for room and is
    dropped otherwise (its counts go with the next one that gets through); else the actor
    waits, with heartbeats, until the trainer takes it."""

    def __init__(self, ctx: WorkerContext, pusher: Any, drop_when_full: bool, meter: Meter,
                 counts_steps: bool = True) -> None:
        self.ctx, self.pusher, self.drop_when_full, self.meter = ctx, pusher, drop_when_full, meter
        self.counts_steps = counts_steps  # routed actor: one outbox per policy, the first one meters the steps
        self.episodes: list[dict[str, Any]] = []  # finished since the last sample sent (EnvGroup.step appends)
        self.env_steps = 0
        self.dropped = 0

    def stepped(self, n_envs: int) -> None:
        """Count one step of ``n_envs`` envs."""
        self.env_steps += n_envs
        if self.counts_steps:
            self.meter.counts["env_steps"] += n_envs

    def push(self, bundle: dict[str, Any], env_offset: int, agents: int, t: float,
             more: dict[str, Any] | None = None) -> bool:
        """Send the sample ``bundle`` of the group at ``env_offset`` (``agents`` per env) with the
        counts not yet sent; ``t``: ``time.perf_counter()`` the push time is counted from;
        ``more``: meta added (a named policy's ``policy`` and ``agent_ids``).
        Returns False when a stop request came while waiting for the trainer."""
        meta = {"actor": self.ctx.index, "env_offset": env_offset, "agents": agents,
                "env_steps": self.env_steps, "episodes": self.episodes, "dropped_at_actor": self.dropped,
                **(more or {})}
        if self.drop_when_full:  # never wait for the trainer
            sent = self.pusher.send(bundle, meta, DROP_WAIT_S)
        else:
            while not (sent := self.pusher.send(bundle, meta, REQUEST_TIMEOUT_S)):
                if self.ctx.stop:
                    return False
                t = self.meter.lap("push", t)  # counted as it goes: a heartbeat sent now includes it
                self.ctx.heartbeat()
        self.meter.lap("push", t)
        if sent:
            self.meter.counts["samples_pushed"] += 1
            self.episodes, self.env_steps, self.dropped = [], 0, 0
        else:  # its env steps and episodes travel with the next sample that gets through
            self.dropped += bundle["reward"].shape[1]
        return True


class PolicyRequests(RequestsInFlight):
    """A routed actor's inference requests to one named policy (docs/policies.md): per ring
    group one request at most, carrying the group's active agent-slots among ``slots[g]`` (int
    ``[S_P]``, the policy's columns), numbered ``0..S_P-1`` within them (``slot``), so its
    policy worker keys recurrent states by its own columns. Ids, replies and retries as
    :class:`RequestsInFlight`."""

    def __init__(self, ctx: WorkerContext, client: Any, groups: list[EnvGroup], slots: list[np.ndarray],
                 first_id: int, meter: Meter, keys: dict[str, str] | None = None) -> None:
        super().__init__(ctx, client, groups, first_id, meter)
        self.slots = slots
        self.keys = keys  # agents with different spaces: {padded key: the policy's own key} (split_bundle)
        self.whole = [np.array_equal(c, np.arange(g.n_envs * g.A)) for c, g in zip(slots, groups, strict=True)]

    def send(self, g: int) -> None:
        """Ask for the actions of the policy's acting agents of group ``g`` (waiting, with
        heartbeats, while the stream is full; returns early on a stop request)."""
        group, cols = self.groups[g], self.slots[g]
        rid = self.number(g)
        if self.whole[g]:  # the policy acts for every agent-slot of the group, in order
            local = rows = np.flatnonzero(group.active)
        else:
            local = np.flatnonzero(group.active[cols])
            rows = cols[local]
        obs = ({own: group.obs[padded][rows] for padded, own in self.keys.items()} if self.keys is not None
               else {k: v[rows] for k, v in group.obs.items()})
        request = {"obs": obs, "slot": local,
                   "on_reset": group.on_reset[rows]}
        self.post(g, request, {"request_id": rid, "rows": int(local.size), "group": g})


ROUTED_WAIT_S = 0.002
"""A routed actor with nothing received from any policy waits this long on each client in turn."""


def run_routed(ctx: WorkerContext, graph: Graph) -> None:
    """The actor's loop with named policies (docs/policies.md, "The actor"): each ring group's
    agent-slots are split by policy; one request per policy per group (to its worker ``i mod
    M_P``, or inline); the group steps once every policy answered; its sample is split by
    policy and each trainable policy's part pushed to its trainer ``i mod K_P`` (a frozen
    policy's part is not sent). Every trainable policy's samples carry the env steps; episodes
    (with ``<P>_return`` per policy) ride on the first trainable policy's."""
    from zoo.core.policies import policy_view

    cfg, spec = ctx.cfg, ctx.spec
    n_groups = cfg.actors.ring_size
    per_group = cfg.actors.envs_per_actor // n_groups
    A = spec.num_agents
    policies = cfg.policies
    names = [p.name for p in graph.layout]
    pbt = getattr(cfg, "pbt", None)
    P = int(pbt.members) if pbt is not None else 0  # a population: every agent of env e acts with member e % P
    agent_ids = {n: np.array([spec.agents.index(a) for a in policies.named[n].agents], np.int64) for n in names}
    trainable = [n for n in names if graph.policy(n).trainers]
    views = {n: policy_view(cfg, policies, n) for n in names}
    gammas = [float(views[n].algo.gamma) for n in trainable if getattr(views[n].algo, "norm_reward", False)]
    return_gamma = gammas[0] if gammas else None  # the group's running return: the first such policy's gamma
    all_seeds = actor_env_seeds(ctx)
    groups: list[EnvGroup] = []
    for i in range(n_groups):
        group = make_group(ctx, all_seeds[i * per_group:(i + 1) * per_group], i * per_group, return_gamma)
        group.teams = {} if P else dict(agent_ids)  # a member's return is its episodes' own return
        groups.append(group)
    # per policy and group, the envs its agents act in (a population: a member's, docs/pbt.md)
    env_ids = {n: [np.arange(g.n_envs) if not P else np.arange(j, g.n_envs, P) for g in groups]
               for j, n in enumerate(names)}
    slots = {n: [np.array([e * A + a for e in env_ids[n][g] for a in agent_ids[n]], np.int64)
                 for g in range(n_groups)] for n in names}
    keys: dict[str, dict[str, str] | None] = {n: None for n in names}
    if spec.mixed:  # PaddedSpaces: each policy reads its space group's keys (docs/policies.md)
        space_groups = spec.space_groups()
        for n in names:
            first = policies.named[n].agents[0]
            g = next(i for i, grp in enumerate(space_groups) if first in grp)
            keys[n] = {f"{k}{PAD_SEP}{g}": k for k in spec.observation_space_of(first)}
    if ctx.meter is None:
        ctx.meter = Meter("actor")
    meter = ctx.meter
    clients: dict[str, Any] = {}
    pushers: dict[str, Any] = {}
    try:
        for n in names:
            p = graph.policy(n)
            m = graph.policy_worker_for(ctx.index, n)
            if m is None:
                from zoo.core.workers.inline import InlineClient

                clients[n] = InlineClient(ctx, policy=n)
            else:
                clients[n] = ctx.transport("inference").request_client(endpoint("inference", m, p.tag), ctx.index)
            k = graph.trainer_for(ctx.index, n)
            if k is not None:
                pushers[n] = ctx.transport("sample").pusher(endpoint("sample", k, p.tag))
        requests = {n: PolicyRequests(ctx, clients[n], groups, slots[n], first_request_id(ctx), meter, keys[n])
                    for n in names}
        outboxes = {n: SampleOutbox(ctx, pushers[n], cfg.actors.drop_when_full, meter, counts_steps=j == 0)
                    for j, n in enumerate(trainable)}
        writer = outboxes[trainable[0]]  # the episode writer: episodes ride on its samples only
        if P:  # a population: each env's episodes ride on its member's samples
            for group in groups:
                group.episode_sink = lambda i: outboxes[names[i % P]].episodes  # type: ignore[attr-defined]
        buffers = [SampleBuffer(cfg.sample_length, g.obs, return_gamma is not None) for g in groups]
        # each policy's outputs per group, its actions in its own space's shape and dtype (record_part)
        extras: list[dict[str, dict[str, np.ndarray]]] = [{n: {} for n in names} for _ in groups]
        assemble = [ActionAssembler(spec, agent_ids, g.n_envs, {n: env_ids[n][i] for n in names} if P else None)
                    for i, g in enumerate(groups)]
        replies: list[dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]]] = [{} for _ in groups]
        for g in range(n_groups):
            for n in names:
                requests[n].send(g)
        turn = 0
        while not ctx.stop:
            ctx.heartbeat()
            t = time.perf_counter()
            got = False
            for n in names:
                msg = clients[n].recv(0)
                while msg is not None:
                    got = True
                    answered = requests[n].answered(msg[1]["request_id"], time.perf_counter())
                    if answered is not None:
                        replies[answered][n] = msg
                    msg = clients[n].recv(0)
            if not got:  # no select across transports: wait a little on each client in turn
                n = names[turn % len(names)]
                turn += 1
                msg = clients[n].recv(ROUTED_WAIT_S)
                answered = (requests[n].answered(msg[1]["request_id"], time.perf_counter()) if msg is not None
                            else None)
                if answered is not None and msg is not None:
                    replies[answered][n] = msg
            t = meter.lap("inference", t)
            for n in names:
                requests[n].retry_stale()
            for g in range(n_groups):
                if len(replies[g]) < len(names):
                    continue
                group, buf = groups[g], buffers[g]
                acted = {}
                for n in names:
                    reply, meta = replies[g][n]
                    follow_stage(groups, meta)
                    cols = slots[n][g]
                    acted[n] = buf.record_part(cols, reply, int(meta["policy_version"]), group.active[cols],
                                               group.on_reset[cols], extras[g][n], keep=n in outboxes)
                    if PLAYED_VERSION in reply:  # an opponent: which version acted in each env
                        played = group.played.setdefault(n, np.full(group.n_envs, -1, np.int64))
                        played[cols[group.active[cols]] // A] = reply[PLAYED_VERSION]
                replies[g] = {}
                group.step(assemble[g](acted), buf, writer.episodes)
                t = meter.lap("env", t)
                for outbox in outboxes.values():
                    outbox.stepped(group.n_envs)
                if buf.full:
                    whole = buf.bundle()
                    for n in trainable:
                        part = split_bundle(whole, slots[n][g], extras[g][n], keys[n])
                        more = {"policy": n, "agent_ids": agent_ids[n].tolist()}
                        if P:  # a member's columns: envs env_offset + envs[s // agents]
                            more["envs"] = env_ids[n][g].tolist()
                        if not outboxes[n].push(part, g * per_group, len(agent_ids[n]), t, more):
                            return
                    buffers[g] = SampleBuffer(cfg.sample_length, group.obs, return_gamma is not None)
                    extras[g] = {n: {} for n in names}
                for n in names:
                    requests[n].send(g)
    finally:
        for c in clients.values():
            c.close()
        for pusher in pushers.values():
            pusher.close()
        close_envs([env for group in groups for env in group.envs],
                   report=lambda line: ctx.send_control("warning", timeout=0.5, key="env-close", message=line))


def run(ctx: WorkerContext) -> None:
    """The actor's loop (module docstring): send each env group's inference request; on each
    reply, step that group's envs with the actions, push the sample when it is full, request
    again. With named policies: :func:`run_routed`."""
    cfg = ctx.cfg
    if getattr(cfg, "policies", None) is not None and not cfg.policies.implicit:
        return run_routed(ctx, Graph.from_config(cfg))
    n_groups = cfg.actors.ring_size
    per_group = cfg.actors.envs_per_actor // n_groups
    # reward normalisation (an algorithm option norm_reward with its gamma): samples carry disc_return
    return_gamma = float(cfg.algo.gamma) if getattr(cfg.algo, "norm_reward", False) else None
    all_seeds = actor_env_seeds(ctx)
    groups: list[EnvGroup] = []
    for i in range(n_groups):
        seeds = all_seeds[i * per_group:(i + 1) * per_group]
        groups.append(make_group(ctx, seeds, i * per_group, return_gamma))
    graph = Graph.from_config(cfg)
    client = inference_client(ctx, graph)
    samples = ctx.transport("sample").pusher(endpoint("sample", graph.trainer_of(ctx.index)))
    buffers = [SampleBuffer(cfg.sample_length, g.obs, return_gamma is not None) for g in groups]
    if ctx.meter is None:
        ctx.meter = Meter("actor")
    meter = ctx.meter  # where the time goes: sent with the heartbeats
    requests = InferenceRequests(ctx, client, groups, first_request_id(ctx), meter)
    outbox = SampleOutbox(ctx, samples, cfg.actors.drop_when_full, meter)
    try:
        for i in range(n_groups):
            requests.send(i)
        while not ctx.stop:
            ctx.heartbeat()
            t = time.perf_counter()
            msg = client.recv(REQUEST_TIMEOUT_S)
            t = meter.lap("inference", t)
            requests.retry_stale()
            if msg is None:
                continue
            reply, meta = msg
            g = requests.answered(meta["request_id"], t)  # t: the reply taken, its round trip counted
            if g is None:
                continue  # a reply to a request this actor no longer waits for
            group, buf = groups[g], buffers[g]
            follow_stage(groups, meta)
            action = buf.record_policy(reply, meta["policy_version"], group.active, group.on_reset)
            group.step(action, buf, outbox.episodes)
            t = meter.lap("env", t)
            outbox.stepped(group.n_envs)
            if buf.full:
                if not outbox.push(buf.bundle(), g * per_group, group.A, t):
                    return
                buffers[g] = SampleBuffer(cfg.sample_length, group.obs, return_gamma is not None)
            requests.send(g)
    finally:
        client.close()
        samples.close()
        close_envs([env for group in groups for env in group.envs],
                   report=lambda line: ctx.send_control("warning", timeout=0.5, key="env-close", message=line))

