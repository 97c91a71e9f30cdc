"""The trainer's receive path: samples are pulled and collated while the previous update runs.

A :class:`SampleReceiver` owns the trainer's sample puller (endpoint ``sample-<k>``) and runs
one background thread that pulls sample messages, counts them, drops the ones too stale to
train on, and collates a full batch (``trainer.batch_samples`` agent-slot samples, whole
messages) with :func:`collate` (the trainer passes it). It holds **at most one full batch
ahead**: once a collated batch waits for the trainer, the thread stops pulling, so the sample
stream fills and the actors' pushes block (backpressure through the sample stream: actors
stop stepping instead of producing samples that would be dropped). The trainer takes the
batch with :meth:`SampleReceiver.take`; the thread then pulls the next one while the update
runs, so the trainer never waits on receiving and collating.

Staleness is judged against the policy version the sample will be trained at: the trainer's
version now, plus one while an update is running (the batch being filled is trained right
after it). A sample whose policy lag (that version minus the ``policy_version`` of its oldest
active step) exceeds ``trainer.max_policy_lag`` is dropped and counted (``dropped``).

How deep the pipeline is, in samples (what bounds the policy lag under backpressure): the
batch in training, the batch waiting here, the messages the sample stream's transport holds
for a trainer that does not pull (``shm``: ``max_lent`` per actor, default 2; ``nng``/``tcp``:
what the socket buffers hold), and one finished sample per actor blocked in its push.

Counts (agent-slot samples, env steps, episodes) accumulate in :attr:`share` under the lock
until the trainer takes them with the batch they belong to (:meth:`SampleReceiver.take`): the
run's counters stay in the trainer's thread.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ON_POLICY_MAX_LAG = 8
"""``trainer.max_policy_lag`` of the on-policy presets (PPO, MAPPO). Held back by the sample
stream, the actors make no sample that would wait longer than the pipeline is deep, so the lag
stays within that depth (at most 4 measured with the presets' layouts of 2 actors x 2 ring
groups and 4 messages a batch on ``shm``; docs/flow.md) and nothing is dropped; 8 leaves room
for deeper transports (``nng``/``tcp`` socket buffers hold more small samples). Older samples
are still dropped and counted."""

Ready = tuple  # (batch, samples, origins, share): a collated batch, its samples, their origins, their counts

RECV_S = 0.25
"""Longest one pull waits before the thread looks at its stop flag again (seconds)."""


def fresh_share() -> dict[str, Any]:
    """Counts since the trainer last took them: env steps, finished episodes (with, in
    ``episode_at``, the share's env steps up to and including the message that brought each),
    agent-slot samples dropped as too stale here and dropped at the actors."""
    return {"env_steps": 0, "episodes": [], "episode_at": [], "dropped": 0, "actor_dropped": 0}


def policy_lag(version: int, sample: dict[str, Any]) -> np.ndarray:
    """Policy lag of each active step: ``version - policy_version``, int64 ``[n_active]``.

    ``sample`` holds ``policy_version`` int64 ``[T, B]`` and ``active`` bool ``[T, B]``
    (a sample or a collated batch); inactive steps have no lag.
    """
    return version - sample["policy_version"][sample["active"]]


def too_stale(version: int, sample: dict[str, Any], max_policy_lag: int) -> bool:
    """True when some active step of ``sample`` lags ``version`` by more than ``max_policy_lag``."""
    lag = policy_lag(version, sample)
    return bool(lag.size) and int(lag.max()) > max_policy_lag


def merge_shares(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Counts ``a`` then ``b`` (episodes in that order), as one share; neither is changed."""
    return {"env_steps": a["env_steps"] + b["env_steps"], "episodes": list(a["episodes"]) + list(b["episodes"]),
            "episode_at": list(a["episode_at"]) + [a["env_steps"] + at for at in b["episode_at"]],
            "dropped": a["dropped"] + b["dropped"], "actor_dropped": a["actor_dropped"] + b["actor_dropped"]}


def sample_env_steps(sample: dict[str, Any], agents: int) -> int:
    """Env steps in one sample (or collated batch): ``T x (S / agents)``, where ``S`` is the
    number of agent-slot columns, ``reward`` being ``[T, S]``; multi-agent envs count env
    steps, not agent steps (a 2-env x 3-agent sample of T = 32 holds 64 env steps)."""
    T, S = sample["reward"].shape[:2]
    return int(T) * (int(S) // max(1, int(agents)))


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Join samples ``[T(+1), S_i, ...]`` along the batch axis into one
    :data:`~zoo.core.algorithm.Batch`.

    ``final_obs`` rows are concatenated and ``final_index[:, 1]`` is shifted by the batch
    offset of the sample they came from.
    """
    out: dict[str, Any] = {}
    offsets = np.cumsum([0] + [s["reward"].shape[1] for s in samples[:-1]])
    for key, first in samples[0].items():
        if key == "final_index":
            out[key] = np.concatenate([s[key] + np.array([0, off]) for s, off in zip(samples, offsets, strict=True)])
        elif key == "final_obs":
            out[key] = {k: np.concatenate([s[key][k] for s in samples]) for k in first}
        elif isinstance(first, dict):
            out[key] = {k: np.concatenate([s[key][k] for s in samples], axis=1) for k in first}
        else:
            out[key] = np.concatenate([s[key] for s in samples], axis=1)
    return out


class SampleReceiver:
    """Pull, count, filter and collate samples in a background thread, one batch ahead.

    Args:
        puller: the sample stream's puller endpoint (``recv(timeout) -> (sample, meta) | None``);
            only this object's thread uses it until :meth:`close`.
        batch_samples: agent-slot samples per batch (``trainer.batch_samples``).
        max_policy_lag: samples lagging more than this many versions are dropped.
        agents: the env's agents per env (default ``agents`` of a message's origin).
        collate: joins a list of samples into one batch.
        origin: ``origin(meta, sample) -> Origin`` of a message (where its columns come from).
        on_pull: called with each message's meta after it was counted (the trainer's meter).
        pending: samples received but not trained on (a resumed checkpoint's), with their
            ``origins`` and ``share`` (their counts, not yet in the run's); a full batch of
            them is collated at once.
        version: the trainer's policy version at the start.

    Thread-safety: :meth:`take`, :meth:`snapshot`, :meth:`set_version`
    and :meth:`close` are called from the trainer's thread; everything they share with the
    pulling thread is guarded by one lock.
    """

    def __init__(self, puller: Any, batch_samples: int, max_policy_lag: int, agents: int,
                 collate: Callable[[list[dict[str, Any]]], dict[str, Any]],
                 origin: Callable[[dict[str, Any], dict[str, Any]], tuple],
                 on_pull: Callable[[dict[str, Any]], None] | None = None,
                 pending: list[dict[str, Any]] | None = None, origins: list[tuple] | None = None,
                 share: dict[str, Any] | None = None, version: int = 0) -> None:
        self.puller, self.batch_samples, self.max_policy_lag = puller, int(batch_samples), int(max_policy_lag)
        self.agents, self._collate, self._origin, self._on_pull = agents, collate, origin, on_pull
        self.cond = threading.Condition()
        self.share = merge_shares(fresh_share(), share) if share else fresh_share()
        self.pending: list[dict[str, Any]] = list(pending or [])
        self.origins: list[tuple] = list(origins or [])
        self.slots = sum(int(s["reward"].shape[1]) for s in self.pending)
        self.ready: Ready | None = None
        self.ready_at = 0.0  # time.monotonic() when the batch in `ready` was complete
        self.last_ready_at = 0.0  # the same for the batch `take` handed out last
        self.version, self.updating = int(version), False
        self.error: BaseException | None = None
        self.closed = False
        self._thread: threading.Thread | None = None
        if self.slots >= self.batch_samples:
            self._finish_batch()

    # -- the trainer's side ---------------------------------------------------------------
    def start(self) -> SampleReceiver:
        self._thread = threading.Thread(target=self._loop, name="zoo-sample-receiver", daemon=True)
        self._thread.start()
        return self

    def set_version(self, version: int, updating: bool) -> None:
        """The trainer's policy version now, and whether an update is running (so the batch
        being filled will be trained at ``version + 1``)."""
        with self.cond:
            self.version, self.updating = int(version), bool(updating)

    def take(self, timeout: float, updating: bool = False) -> tuple[Ready | None, dict[str, Any]]:
        """``(ready, share)``: the next full batch ``(batch, samples, origins, share)``, waiting up
        to ``timeout`` seconds, or None when none came; and the counts of the messages received
        up to it (with a batch: its own ``share``, every message up to the one that completed
        it; without: all received so far). Taking a batch lets the thread pull the next one.
        The counts come exactly once, in the order the messages arrived. With a batch,
        :attr:`last_ready_at` is the ``time.monotonic()`` at which it was complete (the thread
        pulled nothing from then until this hand-over).

        ``updating``: the caller trains on the batch it takes (an update follows). It is set in
        the same critical section as the hand-over, so the first sample the thread pulls after
        it is judged at ``version + 1`` (set later, by :meth:`set_version`, a sample pulled in
        between was judged one version too young and a batch could lag ``max_policy_lag + 1``).

        Raises:
            the exception that ended the pulling thread (e.g. a transport error).
        """
        with self.cond:
            if self.ready is None and self.error is None:
                self.cond.wait(timeout)
            if self.error is not None:
                raise self.error
            out, self.ready = self.ready, None
            if out is not None:
                self.last_ready_at = self.ready_at
                self.updating = bool(updating)
                self.cond.notify_all()
                return out, out[3]
            share, self.share = self.share, fresh_share()
            return None, share

    def snapshot(self) -> tuple[list[dict[str, Any]], list[tuple], dict[str, Any]]:
        """What a checkpoint keeps of the receive path: ``(samples, origins, share)``, the samples
        received and not yet trained on (the waiting batch's first) and the counts not yet
        taken (:meth:`take`), so a resumed run counts every message exactly once."""
        with self.cond:
            samples, origins, share = list(self.pending), list(self.origins), self.share
            if self.ready is not None:
                samples, origins = self.ready[1] + samples, self.ready[2] + origins
                share = merge_shares(self.ready[3], share)
            return samples, origins, merge_shares(fresh_share(), share)

    def waiting_slots(self) -> int:
        """Agent-slot samples held (the waiting batch and the one being filled)."""
        with self.cond:
            return self.slots + (sum(int(s["reward"].shape[1]) for s in self.ready[1]) if self.ready else 0)


    def close(self) -> None:
        """Stop the thread (within :data:`RECV_S`) and close the puller. Idempotent."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * RECV_S + 5.0)
        self.puller.close()

    # -- the pulling thread ---------------------------------------------------------------
    def _finish_batch(self) -> None:
        """Collate the pending samples into :attr:`ready` (caller holds no batch ready)."""
        samples, origins, share = self.pending, self.origins, self.share
        self.pending, self.origins, self.slots, self.share = [], [], 0, fresh_share()
        self.ready = (self._collate(samples), samples, origins, share)
        self.ready_at = time.monotonic()

    def _loop(self) -> None:
        try:
            while True:
                with self.cond:
                    while self.ready is not None and not self.closed:
                        self.cond.wait(RECV_S)  # one batch ahead: stop pulling (the actors are held back)
                    if self.closed:
                        return
                msg = self.puller.recv(RECV_S)
                if msg is None:
                    continue
                self._receive(*msg)
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer's thread by take()
            with self.cond:
                self.error = exc
                self.cond.notify_all()

    def _receive(self, sample: dict[str, Any], meta: dict[str, Any]) -> None:
        width = int(sample["reward"].shape[1])
        with self.cond:
            target = self.version + (1 if self.updating else 0)  # the version it will be trained at
            sh = self.share
            sh["env_steps"] += int(meta["env_steps"])
            sh["actor_dropped"] += int(meta.get("dropped_at_actor", 0))
            sh["episodes"] = sh["episodes"] + list(meta["episodes"])
            sh["episode_at"] = sh["episode_at"] + [sh["env_steps"]] * len(meta["episodes"])
            if too_stale(target, sample, self.max_policy_lag):
                sh["dropped"] += width
                full = False
            else:
                self.pending.append(sample)
                self.origins.append(self._origin(meta, sample))
                self.slots += width
                full = self.slots >= self.batch_samples
        if self._on_pull is not None:
            self._on_pull(meta)
        if full:  # collated outside the lock: the trainer may take counts meanwhile
            samples, origins = self.pending, self.origins
            batch = self._collate(samples)
            with self.cond:
                share = self.share
                self.pending, self.origins, self.slots, self.share = [], [], 0, fresh_share()
                self.ready = (batch, samples, origins, share)
                self.ready_at = time.monotonic()
                self.cond.notify_all()


def batch_env_steps(samples: list[dict[str, Any]], origins: list[tuple], agents: int) -> int:
    """Env steps in the samples of one batch: the sum of :func:`sample_env_steps`, each sample with
    the agents per env of its origin (``origins[i][2]``). Samples past the end of ``origins`` are
    not counted (a checkpoint without ``origins`` restores pending samples without them)."""
    return int(sum(sample_env_steps(s, o[2] if len(o) > 2 else agents)
                   for s, o in zip(samples, origins, strict=False)))

