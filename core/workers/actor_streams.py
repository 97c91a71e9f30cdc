"""An actor's traffic (:mod:`zoo.core.workers.actor`): its inference requests in flight, one per
ring group at most, resent under a new id when unanswered for :data:`REQUEST_RETRY_S`
(:class:`InferenceRequests`; a routed actor's, one set per named policy: :class:`PolicyRequests`),
numbered apart per attempt (:func:`first_request_id`), and its samples on their way to a trainer
with the counts that travel with them (:class:`SampleOutbox`). Each times its waits into the
actor's :class:`zoo.core.health.Meter` (``inference``, ``push``, the round trips).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from zoo.core.health import Meter
from zoo.core.workers.base import WorkerContext
from zoo.core.workers.env_group import EnvGroup

REQUEST_TIMEOUT_S = 0.2
REQUEST_RETRY_S = 10.0
"""A group whose request has had no reply for this long sends it again under a new id (the
policy worker was restarted and lost it); a late reply to the old id is ignored."""
DROP_WAIT_S = 0.005  # with actors.drop_when_full: how long a sample may wait for the trainer


ATTEMPT_REQUEST_IDS = 1 << 32
"""Request ids per attempt: attempt ``a`` numbers its inference requests from ``a * 2**32``."""


def first_request_id(ctx: WorkerContext) -> int:
    """The id of this actor's first inference request: ``ctx.attempt * 2**32``. A restarted
    actor keeps its actor index (its client id), so a reply the policy worker sends late to a
    request of the crashed attempt can reach it; numbered apart, such a reply matches no
    request it waits for and is skipped, instead of being taken as the answer to its own
    request with the same number (which would act with another env's actions)."""
    return int(ctx.attempt) * ATTEMPT_REQUEST_IDS


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
