"""An actor's samples (layout: :mod:`zoo.core.algorithm`; how the actor fills them:
:mod:`zoo.core.workers.actor`): :class:`SampleBuffer`, the preallocated time-major arrays one
ring group records its ``T`` steps into, and, for a routed actor (named policies,
docs/policies.md), the two ways its group's agent-slots are regrouped by policy:
:func:`split_bundle` takes one policy's columns out of the group's whole sample, and
:class:`ActionAssembler` makes each env step's actions from every policy's.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zoo.core.env import describe_difference


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
        """The sample's arrays (:mod:`zoo.core.workers.actor`'s docstring); a routed actor's
        (:meth:`record_part`) has no ``action``: each policy's actions are in its own outputs
        (:func:`split_bundle`)."""
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
