"""Where a trainer's update points meet its peers': one trainer (:class:`SoloSync`) or
data-parallel trainers (:class:`GroupSync`).

Data-parallel trainers (``trainer.count`` = K > 1; :mod:`zoo.core.distributed`,
``docs/graph.md``): trainer ``k`` is rank ``k`` of one ``torch.distributed`` group and pulls
its own endpoint ``sample-<k>`` (the samples of actors ``i`` with ``i mod K = k``). Each rank
gathers its own batch of ``trainer.batch_samples``; when it is full the ranks meet at a sync
point, exchange their counts (env steps, episodes, dropped samples, policy lags), whether
their batch is finite, and stop flags, and all decide on the same numbers whether the
budget is reached, a stop was asked for, or the update is skipped (a non-finite batch on
any rank); if not, every rank runs the algorithm's ``update`` on its own batch, whose
gradients are combined across ranks before each optimiser step, so all ranks keep
identical weights and one policy version (a non-finite loss or gradient on one rank makes
every rank skip the same update). Rank 0 alone publishes parameters, writes
``metrics.jsonl`` (all ranks' episodes, logged at the sync point that brought them,
stamped with the run's env-step count then) and checkpoints, and reports status and
``done``; with K > 1 the budget is checked at sync points, so a run may pass it by up to
one global batch. While rank 0 waits for its peers (to join the group, or at a sync point)
it republishes its weights every :data:`REPUBLISH_S` seconds (:class:`Republisher`).

One trainer (K = 1) has no peers: the counts it receives are added to the run's at once,
each episode stamped with the env steps up to the sample that brought it, and it checks the
budget and stop requests before it waits for each batch.

Both provide the same steps, which the trainer's loop calls in order:
:meth:`~SoloSync.ended` (before waiting for a batch: does the run end here?),
:meth:`~SoloSync.receiving` (wait for a batch at all?), :meth:`~SoloSync.received` (which
counts to add to the run's now), :meth:`~SoloSync.meet` (the :class:`UpdatePoint` every rank
trains at), :meth:`~SoloSync.end_at` (does the run end at this meeting?) and
:meth:`~SoloSync.stop_in_update` (may a stop request interrupt an update?).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoo.core.workers.receiver import batch_env_steps, fresh_share, merge_shares, policy_lag

REPUBLISH_S = 1.0
"""While data-parallel rank 0 waits for its peers, how often it republishes the current weights."""


class Republisher:
    """Rank 0's parameters, published again while it waits for its peers at a sync point.

    A policy worker that subscribes after the last publish gets nothing until the next one
    (pub/sub keeps no value for late subscribers). With K > 1 trainers, rank 0 may wait at a
    sync point for a peer whose samples come from actors served by exactly that policy worker:
    without a publish while waiting, the run deadlocks (seen: rank 1's policy worker
    ``waiting_for: parameters`` for 15 minutes). :meth:`tick`, the heartbeat of the waits,
    publishes every ``every_s`` seconds once a first publish was made.
    """

    def __init__(self, publish: Callable[[], None] | None, every_s: float) -> None:
        self.publish, self.every_s = publish, every_s
        self.last: float | None = None  # time.monotonic() of the last publish

    def published(self, now: float) -> None:
        self.last = now

    def tick(self, heartbeat: Callable[[], None], now: float | None = None) -> None:
        """``heartbeat()``, then a publish if one is due (rank 0, published before, ``every_s`` passed)."""
        heartbeat()
        now = time.monotonic() if now is None else now
        if self.publish is not None and self.last is not None and now - self.last >= self.every_s:
            self.publish()
            self.last = now


@dataclass
class UpdatePoint:
    """What an update is trained at: the env steps (``used_steps``) and agent-slot samples
    (``used_slots``) of the batch (K > 1: every rank's), its policy lags (mean and max over
    active steps; 0 without any) and where its non-finite values come from (``sources``, the
    :mod:`~zoo.core.workers.guard`'s; ``[]``: finite)."""

    used_steps: int = 0
    used_slots: int = 0
    lag_mean: float = 0.0
    lag_max: float = 0.0
    lag_sum: int = 0
    lag_count: int = 0
    sources: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def local(cls, ready: tuple | None, version: int, agents: int, sources: list[dict[str, Any]]) -> UpdatePoint:
        """This rank's point: ``ready`` is the receiver's ``(batch, samples, origins, share)``
        (None: no batch, a data-parallel rank asked to stop), ``version`` the one it will be
        trained at."""
        batch, used, origins = ready[:3] if ready is not None else (None, [], [])
        lags = policy_lag(version, batch) if batch is not None else np.zeros(0, np.int64)
        return cls(batch_env_steps(used, origins, agents), int(batch["reward"].shape[1]) if batch is not None else 0,
                   float(lags.mean()) if lags.size else 0.0, int(lags.max()) if lags.size else 0,
                   int(lags.sum()), int(lags.size), sources)

    def record(self) -> dict[str, Any]:
        """The fields a rank sends to its peers at a sync point (with its share and stop flag)."""
        return {"lag_sum": self.lag_sum, "lag_count": self.lag_count, "lag_max": int(self.lag_max),
                "bad": self.sources, "used_steps": self.used_steps, "used_slots": self.used_slots}

    @classmethod
    def pool(cls, records: list[dict[str, Any]]) -> UpdatePoint:
        """Every rank's :meth:`record` as one point: sums, the pooled mean lag, the largest lag
        and every rank's non-finite sources in rank order."""
        lag_count = sum(r["lag_count"] for r in records)
        lag_sum = sum(r["lag_sum"] for r in records)
        return cls(sum(r["used_steps"] for r in records), sum(r["used_slots"] for r in records),
                   lag_sum / lag_count if lag_count else 0.0, max(r["lag_max"] for r in records),
                   lag_sum, lag_count, [s for r in records for s in r["bad"]])


@dataclass
class Meeting:
    """The outcome of :meth:`~SoloSync.meet`: the ``point`` every rank trains at, the ``shares``
    (counts, rank order) to add to the run's now, and whether any rank asked to ``stop``."""

    point: UpdatePoint
    shares: list[dict[str, Any]] = field(default_factory=list)
    stop: bool = False


class SoloSync:
    """One trainer: its counts are the run's at once; the run ends before a wait for a batch."""

    data_parallel = False
    info: dict[str, Any] | None = None  # graph.json's "group" entry: none with one trainer

    def join(self, module: Any) -> bool:
        """Nothing to join: True."""
        return True

    def ended(self, stop: bool, budget_reached: bool) -> bool | None:
        """Before waiting for a batch: None to go on, else whether the run finished (the budget
        reached, no stop asked for)."""
        return (not stop) if stop or budget_reached else None

    def receiving(self, stop: bool) -> bool:
        """Whether to wait for a batch now: always."""
        return True

    def received(self, share: dict[str, Any]) -> list[dict[str, Any]]:
        """The counts to add to the run's now: ``share`` itself."""
        return [share]

    def meet(self, point: UpdatePoint, stop: bool) -> Meeting | None:
        """This trainer's own ``point``."""
        return Meeting(point)

    def end_at(self, meeting: Meeting, budget_reached: bool) -> bool | None:
        """The run does not end at an update point (it ends before the next wait): None."""
        return None

    def stop_in_update(self, stop: bool) -> bool:
        """A stop request ends the run in the middle of an update (after the test delay)."""
        return stop

    def close(self, leave: bool = True) -> None:
        pass


class GroupSync:
    """Rank ``rank`` of ``world`` data-parallel trainers (module docstring).

    ``join_group()``: joins the :class:`~zoo.core.distributed.TrainerGroup` (None: stopped
    before every rank arrived); the group's ``sync(record)`` returns every rank's record in
    rank order (None: stopped while waiting), ``broadcast_module``, ``backend``, ``devices``,
    ``gpus`` and ``close``.
    """

    data_parallel = True

    def __init__(self, rank: int, world: int, join_group: Callable[[], Any]) -> None:
        self.rank, self.world, self.join_group = rank, world, join_group
        self.group: Any = None
        self.unshared = fresh_share()  # this rank's counts not yet added to the run's (until the next sync)

    @property
    def info(self) -> dict[str, Any] | None:
        """What the group chose (``backend``, ``devices``, ``gpus``), for graph.json's launcher entry."""
        if self.group is None:
            return None
        return {"backend": self.group.backend, "devices": self.group.devices, "gpus": self.group.gpus}

    def join(self, module: Any) -> bool:
        """Join the group and copy rank 0's weights into ``module`` (identical starting weights on
        every rank); False when stopped before every trainer arrived."""
        self.group = self.join_group()
        if self.group is None:
            return False
        self.group.broadcast_module(module)
        return True

    def ended(self, stop: bool, budget_reached: bool) -> bool | None:
        """The run ends only at sync points: None."""
        return None

    def receiving(self, stop: bool) -> bool:
        """Wait for a batch unless asked to stop: a rank asked to stop goes straight to the next
        sync point to tell its peers."""
        return not stop

    def received(self, share: dict[str, Any]) -> list[dict[str, Any]]:
        """Keep ``share`` for the next sync point: nothing to add now."""
        self.unshared = merge_shares(self.unshared, share)
        return []

    def meet(self, point: UpdatePoint, stop: bool) -> Meeting | None:
        """A sync point: every rank's counts, point and stop flag, exchanged; None when asked to
        stop while waiting for the others (who are being stopped too).

        Raises:
            zoo.core.distributed.PeerLost: a peer died or hung.
        """
        assert self.group is not None, "K > 1: joined before the loop"
        shares = self.group.sync({**self.unshared, **point.record(), "stop": bool(stop)})
        if shares is None:
            return None
        self.unshared = fresh_share()
        return Meeting(UpdatePoint.pool(shares), shares, any(sh["stop"] for sh in shares))

    def end_at(self, meeting: Meeting, budget_reached: bool) -> bool | None:
        """None to go on; else whether the run finished: it ends when any rank asked to stop
        (not finished) or the budget is reached (finished unless a stop was asked for too)."""
        if meeting.stop or budget_reached:
            return budget_reached and not meeting.stop
        return None

    def stop_in_update(self, stop: bool) -> bool:
        """Never: the others are already in this update; the stop is decided at the next sync point."""
        return False

    def close(self, leave: bool = True) -> None:
        """Leave the group; ``leave``: every rank is ending together, so wait (bounded) until
        each has left (:meth:`~zoo.core.distributed.TrainerGroup.close`)."""
        if self.group is not None:
            self.group.close(leave=leave)
