"""Worker health and where a run's time goes: the figures behind the live display and
``<run_dir>/live.json``.

Two halves:

- **In each worker**, a :class:`Meter` accumulates seconds per phase (``time_s``) and event
  counts (``counts``) of its loop: a clock read around each blocking call, nothing per
  environment. :meth:`zoo.core.workers.base.WorkerContext.heartbeat` (at most once per
  second) sends the running totals with the worker's pid, host and monotonic clock.
- **In the controller**, one :class:`Health` object gets every control message
  (:meth:`Health.on_control`), each restart (:meth:`Health.record_restart`), each status the
  run shows (:meth:`Health.show`) and a tick per loop (:meth:`Health.tick`). From the
  difference between a worker's heartbeats over the last :data:`WINDOW_S` seconds it derives
  each worker's rates and busy fractions, names the bottleneck (:func:`bottleneck`), and every
  ``log.interval_s`` writes ``live.json`` (format: ``docs/live.md``) and hands the same
  snapshot to the display.

Phases and counts each role reports (cumulative since the worker started):

=========  =========================================  =====================================
role       ``time_s`` (seconds)                       ``counts``
=========  =========================================  =====================================
actor      ``env`` stepping envs, ``inference``        ``env_steps``, ``samples_pushed``,
           sending requests and waiting for replies,  ``requests``; and ``round_trip``
           ``push`` pushing samples to the trainer    (below)
policy     ``busy`` forward passes, replies, loading   ``batches``, ``rows`` (agent-slots
           parameters; ``latency`` per batch, from    answered)
           its first request to its last reply
trainer    ``wait`` waiting for samples                ``samples_pulled`` (sample messages,
                                                      stale ones included), ``updates``
=========  =========================================  =====================================

A fraction is ``delta time_s[phase] / delta clock_s`` between the oldest and the newest
heartbeat of the window (clamped to [0, 1]); a rate is ``delta count / delta clock_s``.

**Inference round trips.** An actor's heartbeats also carry ``round_trip``: how many of its
inference requests were answered within each bucket of :data:`ROUND_TRIP_EDGES_S`, cumulative
(a list of :data:`ROUND_TRIP_BUCKETS` ints). A round trip is the time from the request being
handed to the inference stream (the actor's ``send`` returned; with ``policy.inline`` queued
for the actor's own forward pass) to its reply being taken by the actor loop (``recv``
returned it), ``time.perf_counter`` seconds; a resent request counts from its resending, a
reply to a request no longer waited for is not counted. Bucket 0 holds round trips under
16 µs, bucket ``k`` (1..16) those in ``[16 µs x 2^(k-1), 16 µs x 2^k)``, bucket 17 those of at
least 1.048576 s. The controller sums them over the actors (:meth:`Health.snapshot`:
``totals.round_trip_counts``, replaced processes included) and gives the percentiles of the
window's round trips (:func:`histogram_percentile`).
"""
from __future__ import annotations

import bisect
import collections
import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACTOR_PHASES", "Health", "Meter", "ROUND_TRIP_BUCKETS", "ROUND_TRIP_EDGES_S", "WINDOW_S", "bottleneck",
           "histogram_percentile", "percent", "round_trip_bucket", "write_json_atomic"]

WINDOW_S = 5.0
"""Rates and fractions are measured over the heartbeats of about the last this many seconds."""
TRAINER_BUSY_NOTE = 0.9
"""A trainer busy at least this fraction of the time is mentioned in the bottleneck sentence."""
POLICY_BUSY_BOUND = 0.5
"""Actors waiting for actions while the policy worker is busy less than this: latency-bound."""

STATE_KEYS = ("waiting_for", "busy", "busy_s")
"""Heartbeat keys that say what a worker is doing now (``busy``: a long operation such as an
update, ``busy_s`` seconds into it); kept until a heartbeat without them."""
BOOKKEEPING = ("type", "role", "index", "attempt")
"""Control-message keys left out of the status kept for ``live.json``."""
ACTOR_PHASES = ("env", "inference", "push")
ROLE_PHASES = {"actor": ACTOR_PHASES, "policy": ("busy", "latency"), "trainer": ("wait",)}
ROLE_COUNTS = {"actor": ("env_steps", "samples_pushed", "requests"), "policy": ("batches", "rows"),
               "trainer": ("samples_pulled", "updates")}
ROUND_TRIP_EDGES_S = tuple(16e-6 * 2**k for k in range(17))
"""The bucket edges of the actors' inference round-trip histogram, seconds: 16 µs, 32 µs, ...,
1.048576 s (16 µs x 2^k, k = 0..16). :func:`round_trip_bucket` maps a round trip to a bucket."""
ROUND_TRIP_BUCKETS = len(ROUND_TRIP_EDGES_S) + 1
"""18 buckets: under 16 µs, one per pair of consecutive edges, and 1.048576 s or more."""
ROUND_TRIP_PERCENTILES = (50, 90, 99)
"""The percentiles of the round trips the live snapshot and ``zoo bench`` give."""


def round_trip_bucket(seconds: float) -> int:
    """The bucket (0..17) of a round trip of ``seconds``: the number of
    :data:`ROUND_TRIP_EDGES_S` not above it (``bisect_right``: an edge belongs to the bucket it
    starts). Examples: 0 or negative -> 0; 16 µs -> 1; 100 µs -> 3 ([64, 128) µs); 1.048576 s or
    more (inf included) -> 17."""
    return bisect.bisect_right(ROUND_TRIP_EDGES_S, seconds)


def histogram_percentile(counts: list[int] | tuple[int, ...], q: float,
                         edges: tuple[float, ...] = ROUND_TRIP_EDGES_S) -> float | None:
    """The ``q``-th percentile (0 < q <= 100) of the values counted in ``counts``, interpolated
    linearly within the bucket it falls in; None when ``counts`` sums to 0.

    Bucket ``i`` spans ``[edges[i-1], edges[i])`` (bucket 0 starts at 0; ``len(counts) ==
    len(edges) + 1``). The rank is ``r = q / 100 x N`` of the ``N`` values; the percentile lies in
    the first bucket whose cumulative count reaches ``r``, at ``lower + (upper - lower) x (r -
    counted before it) / its count``. In the last (open) bucket, its lower edge: the value is at
    least that. Units are those of ``edges``.

    Example: edges (1, 2, 4), counts [0, 6, 3, 1] (10 values): p50: r = 5 in bucket 1 [1, 2),
    1 + 1 x 5/6 = 1.8333; p90: r = 9 in bucket 2 [2, 4) after 6, 2 + 2 x 3/3 = 4.0; p99: r = 9.9
    in the open bucket -> 4.

    Raises:
        ValueError: ``len(counts) != len(edges) + 1``, or ``q`` outside (0, 100].
    """
    if len(counts) != len(edges) + 1:
        raise ValueError(f"histogram_percentile: {len(counts)} counts for {len(edges)} edges; give len(edges) + 1")
    if not 0 < q <= 100:
        raise ValueError(f"histogram_percentile: q={q!r}; give a percentile in (0, 100]")
    total = sum(counts)
    if total <= 0:
        return None
    rank = q / 100.0 * total
    before = 0
    for i, n in enumerate(counts):
        if n > 0 and before + n >= rank:
            if i == len(edges):
                return float(edges[-1])
            lower = 0.0 if i == 0 else float(edges[i - 1])
            return lower + (float(edges[i]) - lower) * (rank - before) / n
        before += n
    return float(edges[-1])  # not reached: the last nonempty bucket reaches the rank


def round_trip_percentiles_ms(counts: list[int] | tuple[int, ...] | None) -> dict[str, float | None] | None:
    """``{"p50": ms, "p90": ms, "p99": ms}`` of a round-trip histogram's counts
    (:data:`ROUND_TRIP_PERCENTILES`, :func:`histogram_percentile`, milliseconds); None for
    ``counts`` None or all 0."""
    if not counts or sum(counts) <= 0:
        return None
    return {f"p{q}": 1e3 * histogram_percentile(counts, q) for q in ROUND_TRIP_PERCENTILES}  # type: ignore[operator]


class Meter:
    """Cumulative seconds per phase and event counts of one worker's loop.

    Usage in a hot loop (one clock read per phase boundary)::

        t = time.perf_counter()
        msg = client.recv(timeout)
        t = meter.lap("inference", t)     # adds the seconds since t, returns the new time
        meter.took_reply(t - sent_at)     # an actor: the request's round trip, in its histogram
        group.step(...)
        meter.lap("env", t)
        meter.counts["env_steps"] += n

    Args:
        role: the worker's role; its phases and counts (table in the module doc) start at 0.
    """

    def __init__(self, role: str) -> None:
        self.time_s: dict[str, float] = dict.fromkeys(ROLE_PHASES.get(role, ()), 0.0)
        self.counts: dict[str, int] = dict.fromkeys(ROLE_COUNTS.get(role, ()), 0)
        # an actor's inference round trips per bucket of ROUND_TRIP_EDGES_S (module docstring)
        self.round_trip: list[int] | None = [0] * ROUND_TRIP_BUCKETS if role == "actor" else None

    def took_reply(self, seconds: float) -> None:
        """Count one inference round trip of ``seconds`` (an actor's meter; module docstring) in
        its bucket (:func:`round_trip_bucket`): one ``bisect`` on 17 edges and one increment."""
        self.round_trip[round_trip_bucket(seconds)] += 1  # type: ignore[index]

    def lap(self, phase: str, since: float) -> float:
        """Add ``perf_counter() - since`` seconds to ``phase``; returns that ``perf_counter()``."""
        now = time.perf_counter()
        self.time_s[phase] = self.time_s.get(phase, 0.0) + (now - since)
        return now

    def report(self) -> dict[str, Any]:
        """``{"time_s": {...}, "counts": {...}}`` (and an actor's ``"round_trip": [18 ints]``):
        copies of the running totals, for a heartbeat."""
        out: dict[str, Any] = {"time_s": dict(self.time_s), "counts": dict(self.counts)}
        if self.round_trip is not None:
            out["round_trip"] = list(self.round_trip)
        return out


def percent(fraction: float) -> str:
    """``0.634`` -> ``"63%"`` (rounded half up to a whole percent)."""
    return f"{int(fraction * 100 + 0.5)}%"


def bottleneck(actors: dict[str, float] | None, policy_busy: float | None,
               trainer_busy: float | None, inline: bool = False) -> tuple[str | None, str]:
    """Name what limits the run, from measured fractions of time.

    Args:
        actors: the actors' mean fractions of time ``{"env", "inference", "push"}`` (stepping
            envs; sending requests and waiting for actions, or with ``inline`` running the
            policy; pushing samples, which blocks while the trainer does not take them), or
            None before any was measured.
        policy_busy: the policy workers' mean busy fraction, or None.
        trainer_busy: the trainers' mean busy fraction, or None.
        inline: the actors run the policy themselves (``policy.inline``: no policy worker).

    Returns:
        ``(kind, sentence)``. ``kind`` is where the actors spend most of their time (ties in
        this order): ``"trainer"`` (push), ``"inference"`` (waiting for actions while the policy
        worker is busy at least :data:`POLICY_BUSY_BOUND`, or unmeasured),
        ``"inference-latency"`` (waiting for actions while the policy worker is mostly idle:
        batching delay, transport, too few env groups), ``"env"`` (stepping envs); with
        ``inline``, ``"inference"`` means the actors' own forward passes; None with
        ``"measuring..."`` until the actors reported twice. Unless the kind is ``"trainer"``, a
        trainer busy at least :data:`TRAINER_BUSY_NOTE` is added: updates then fall behind
        sampling (the policy lag grows, stale samples are dropped).
    """
    if not actors:
        return None, "measuring..."
    push, inference, env = (actors.get(k, 0.0) for k in ("push", "inference", "env"))
    top = max(push, inference, env)
    if push == top:
        kind = "trainer"
        text = f"trainer-bound: actors wait {percent(push)} of the time for the trainer to take their samples"
        if trainer_busy is not None:
            text += f" (trainer busy {percent(trainer_busy)})"
        return kind, text
    if inference == top and inline:
        kind = "inference"
        text = (f"inference-bound: actors run the policy {percent(inference)} of the time (policy.inline; try a "
                "larger actors.envs_per_actor for larger forward passes, or policy.inline=false for a policy "
                "worker that batches every actor's envs)")
    elif inference == top:
        if policy_busy is not None and policy_busy < POLICY_BUSY_BOUND:
            kind = "inference-latency"
            text = (f"inference-latency-bound: actors wait {percent(inference)} of the time for actions but the "
                    f"policy worker is busy only {percent(policy_busy)} (try a larger actors.ring_size or a "
                    "smaller policy.max_wait_ms)")
        else:
            kind = "inference"
            text = f"inference-bound: actors wait {percent(inference)} of the time for actions"
            if policy_busy is not None:
                text += f" (policy worker busy {percent(policy_busy)})"
    else:
        kind = "env"
        text = f"env-bound: actors step envs {percent(env)} of the time"
    if trainer_busy is not None and trainer_busy >= TRAINER_BUSY_NOTE:
        text += f"; the trainer is busy {percent(trainer_busy)}: updates fall behind sampling"
    return kind, text


def write_json_atomic(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically: a temporary file in the same folder,
    flushed and fsync'ed, then ``os.replace`` (a reader sees the old or the new file, whole)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, separators=(",", ":"), default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class _Beat:
    clock_s: float
    time_s: dict[str, float]
    counts: dict[str, int]
    round_trip: list[int] | None = None  # an actor's cumulative round-trip histogram (module docstring)


@dataclass
class _Worker:
    role: str
    index: int
    pid: int | None = None
    host: str | None = None
    heard: float | None = None  # controller monotonic seconds of the last control message
    restarts: int = 0
    last_restart: str | None = None
    beats: collections.deque = field(default_factory=collections.deque)
    extra: dict[str, Any] = field(default_factory=dict)

    def window(self) -> tuple[_Beat, _Beat, float] | None:
        if len(self.beats) < 2:
            return None
        first, last = self.beats[0], self.beats[-1]
        dt = last.clock_s - first.clock_s
        return (first, last, dt) if dt > 0 else None


def busy_with_operation(busy_frac: float, dt: float, busy_s: Any) -> float:
    """A busy fraction measured over a window of ``dt`` seconds of timed heartbeats, with a long
    operation in progress since then counted as busy: ``(busy_frac x dt + busy_s) / (dt +
    busy_s)``. During a long update the trainer's only heartbeats are its background ones
    (``busy="update"``, ``busy_s`` seconds into it) and carry no totals, so the window ends
    where the update began: without this a trainer 30 s into an update after a 10 s window
    busy 1% of it shows "busy 1%" instead of (0.1 + 30) / 40 = 75%."""
    if not isinstance(busy_s, (int, float)) or busy_s <= 0:
        return busy_frac
    return (busy_frac * dt + float(busy_s)) / (dt + float(busy_s))


def _frac(first: _Beat, last: _Beat, phase: str, dt: float) -> float:
    return min(1.0, max(0.0, (last.time_s.get(phase, 0.0) - first.time_s.get(phase, 0.0)) / dt))


def _delta(first: _Beat, last: _Beat, name: str) -> int:
    return last.counts.get(name, 0) - first.counts.get(name, 0)


def _round_trip(value: Any) -> list[int] | None:
    """A heartbeat's ``round_trip``: a list of :data:`ROUND_TRIP_BUCKETS` ints, else None."""
    if isinstance(value, (list, tuple)) and len(value) == ROUND_TRIP_BUCKETS and all(
            isinstance(n, int) for n in value):
        return list(value)
    return None


def _add(total: list[int] | None, more: Iterable[int]) -> list[int]:
    return [a + b for a, b in zip(total or [0] * ROUND_TRIP_BUCKETS, more, strict=True)]


def _mean(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


class Health:
    """What the controller knows about its workers' health and load; writes ``live.json``.

    Args:
        workers: the run's ``(role, index)`` pairs, in display order (workers not heard from
            yet show as starting).
        run_dir: where ``live.json`` goes (None: nothing is written).
        interval_s: seconds between ``live.json`` writes and display snapshots (``log.interval_s``).
        listener: the run's ``on_status`` callable: :meth:`show` forwards each status to it, and
            each snapshot goes to its ``show_live(snapshot)`` method if it has one
            (:class:`zoo.display.Display` has).
        window_s: heartbeats older than this before a worker's newest one are dropped (the
            oldest two are always kept), seconds.
        clock: monotonic seconds (heartbeat ages, write pacing); wall: unix seconds (``time``).
    """

    def __init__(self, workers: Iterable[tuple[str, int]], run_dir: str | None = None, interval_s: float = 5.0,
                 listener: Callable[[dict[str, Any]], None] | None = None, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.workers: dict[tuple[str, int], _Worker] = {(r, i): _Worker(r, i) for r, i in workers}
        # the graph has actors but no policy worker: they run the policy inline (policy.inline)
        self.inline = any(r == "actor" for r, _ in self.workers) and not any(r == "policy" for r, _ in self.workers)
        self.path = os.path.join(run_dir, "live.json") if run_dir else None
        self.interval_s, self.listener, self.window_s = interval_s, listener, window_s
        self.clock, self.wall = clock, wall
        self.started_wall = wall()
        self.latest_status: dict[str, Any] | None = None
        self.shown_status: dict[str, Any] | None = None
        self.last_write = float("-inf")
        self.retired: dict[str, int] = {}  # sample counts of processes that were replaced
        self.retired_round_trip: list[int] | None = None  # and their round-trip histograms, summed
        self.ended = False

    # -- inputs ------------------------------------------------------------------------------
    def _worker(self, role: str, index: int) -> _Worker:
        key = (role, int(index))
        if key not in self.workers:
            self.workers[key] = _Worker(role, int(index))
        return self.workers[key]

    def on_control(self, meta: dict[str, Any], now: float | None = None) -> None:
        """Take one control message (any type) from a worker; ``now``: monotonic receive time."""
        role, index = meta.get("role"), meta.get("index")
        if not isinstance(role, str) or not isinstance(index, int):
            return
        w = self._worker(role, index)
        w.heard = self.clock() if now is None else now
        kind = meta.get("type")
        if kind == "status":
            self.latest_status = {k: v for k, v in meta.items() if k not in BOOKKEEPING}
        if kind != "heartbeat":
            return
        pid, clock_s = meta.get("pid"), meta.get("clock_s")
        if pid is not None and pid != w.pid:
            self._retire(w)  # a new process: its totals start again from 0
        w.pid = pid if pid is not None else w.pid
        w.host = meta.get("host", w.host)
        if "policy_version" in meta:
            w.extra["policy_version"] = meta["policy_version"]
        for key in STATE_KEYS:  # what the worker is doing now: gone when a heartbeat no longer says it
            if key in meta:
                w.extra[key] = meta[key]
            else:
                w.extra.pop(key, None)
        if not isinstance(clock_s, (int, float)) or "time_s" not in meta:
            return
        if w.beats and clock_s <= w.beats[-1].clock_s:
            self._retire(w)  # the clock went back: not the same process's series
        w.beats.append(_Beat(float(clock_s), dict(meta["time_s"]), dict(meta.get("counts", {})),
                             _round_trip(meta.get("round_trip"))))
        while len(w.beats) > 2 and clock_s - w.beats[0].clock_s > self.window_s:
            w.beats.popleft()

    def record_restart(self, role: str, index: int, reason: str) -> None:
        """A worker was restarted (by the controller's supervision) because of ``reason``; it
        shows as starting (no pid, no heartbeat) until its new process reports."""
        w = self._worker(role, index)
        w.restarts += 1
        w.last_restart = reason
        w.pid = w.heard = None
        self._retire(w)

    def _retire(self, w: _Worker) -> None:
        """Forget a process's heartbeats, keeping the samples it pushed or pulled for the queue."""
        if w.beats:
            for name in ("samples_pushed", "samples_pulled"):
                self.retired[name] = self.retired.get(name, 0) + w.beats[-1].counts.get(name, 0)
            if w.beats[-1].round_trip is not None:
                self.retired_round_trip = _add(self.retired_round_trip, w.beats[-1].round_trip)
        w.beats.clear()

    def served_version(self, index: int) -> int | None:
        """The ``policy_version`` policy worker ``index`` said it serves in its last heartbeat
        that carried one (None before)."""
        w = self.workers.get(("policy", index))
        version = w.extra.get("policy_version") if w is not None else None
        return int(version) if isinstance(version, (int, float)) else None

    def show(self, status: dict[str, Any]) -> None:
        """The controller shows ``status`` (the trainer's, with rates added): kept for
        ``live.json`` and forwarded to the listener."""
        self.shown_status = {k: v for k, v in status.items() if k not in BOOKKEEPING}
        if self.listener is not None:
            self.listener(status)

    # -- outputs -----------------------------------------------------------------------------
    def tick(self, now: float | None = None) -> dict[str, Any] | None:
        """Every ``interval_s`` (monotonic ``now``): build a snapshot, write ``live.json``, pass it
        to the listener's ``show_live``; returns it (None when not due)."""
        now = self.clock() if now is None else now
        if now - self.last_write < self.interval_s:
            return None
        self.last_write = now
        return self._publish(now)

    def close(self, now: float | None = None) -> dict[str, Any]:
        """The run is over: a last snapshot with ``"ended": true`` (written and shown)."""
        self.ended = True
        return self._publish(self.clock() if now is None else now)

    def _publish(self, now: float) -> dict[str, Any]:
        snap = self.snapshot(now)
        if self.path is not None:
            try:
                write_json_atomic(self.path, snap)
            except OSError:
                pass  # the run goes on without live.json (e.g. the run folder was removed)
        show_live = getattr(self.listener, "show_live", None)
        if show_live is not None:
            show_live(snap)
        return snap

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """Everything the live display shows, as plain JSON data (format: ``docs/live.md``)."""
        now = self.clock() if now is None else now
        rows = [self._row(w, now) for w in self.workers.values()]
        actors = [r for r in rows if r["role"] == "actor" and r.get("env_frac") is not None]
        fractions = ({k: sum(r[f"{k}_frac"] for r in actors) / len(actors) for k in ACTOR_PHASES}
                     if actors else None)
        policy_busy = _mean(r.get("busy_frac") for r in rows if r["role"] == "policy")
        trainer_busy = _mean(r.get("busy_frac") for r in rows if r["role"] == "trainer")
        kind, text = bottleneck(fractions, policy_busy, trainer_busy, self.inline)
        queue = self._queue()
        for r in rows:
            if r["role"] == "trainer":
                r["samples_waiting"] = queue
        rates = [r.get("env_steps_per_s") for r in rows if r["role"] == "actor"]
        return {
            "format": 1,
            "time": self.wall(),
            "started": self.started_wall,
            "ended": self.ended,
            "controller": {"pid": os.getpid(), "host": socket.gethostname()},
            "interval_s": self.interval_s,
            "status": self.shown_status if self.shown_status is not None else self.latest_status,
            "workers": rows,
            "totals": {"actor_env_steps_per_s": (sum(r for r in rates if r is not None)
                                                 if any(r is not None for r in rates) else None),
                       "samples_waiting": queue, **self._round_trips()},
            "bottleneck": {"kind": kind, "text": text, "actors": fractions,
                           "policy_busy": policy_busy, "trainer_busy": trainer_busy, "inline": self.inline},
        }

    def _round_trips(self) -> dict[str, Any]:
        """``round_trip_counts``: the actors' round-trip histograms at their latest heartbeats
        summed, replaced processes included (cumulative; None until an actor reported one);
        ``round_trip_ms``: p50, p90 and p99 in milliseconds of the round trips in the actors'
        windows (the growth of each actor's histogram from its oldest to its newest heartbeat
        of the window, summed; :func:`round_trip_percentiles_ms`), None without any."""
        total, window = self.retired_round_trip, None
        for w in self.workers.values():
            if w.role != "actor" or not w.beats or w.beats[-1].round_trip is None:
                continue
            last = w.beats[-1].round_trip
            total = _add(total, last)
            first = w.beats[0].round_trip
            if len(w.beats) >= 2 and first is not None:
                window = _add(window, (b - a for a, b in zip(first, last, strict=True)))
        return {"round_trip_counts": total, "round_trip_ms": round_trip_percentiles_ms(window)}

    def _queue(self) -> int | None:
        """Sample messages pushed by the actors minus those pulled by the trainers, at their
        latest heartbeats, replaced processes included (clamped at 0; heartbeats up to a second
        apart skew it by up to a second of sampling); None until every actor and trainer has
        reported."""
        pushed, pulled = self.retired.get("samples_pushed", 0), self.retired.get("samples_pulled", 0)
        for w in self.workers.values():
            if w.role not in ("actor", "trainer"):
                continue
            if not w.beats:
                return None
            counts = w.beats[-1].counts
            if w.role == "actor":
                pushed += counts.get("samples_pushed", 0)
            else:
                pulled += counts.get("samples_pulled", 0)
        return max(0, pushed - pulled)

    def _row(self, w: _Worker, now: float) -> dict[str, Any]:
        row: dict[str, Any] = {"role": w.role, "index": w.index, "pid": w.pid, "host": w.host,
                               "heartbeat_age_s": None if w.heard is None else max(0.0, now - w.heard),
                               "restarts": w.restarts, "last_restart": w.last_restart, **w.extra}
        win = w.window()
        if w.role == "actor":
            row.update(env_steps=w.beats[-1].counts.get("env_steps", 0) if w.beats else None,
                       env_steps_per_s=None, env_frac=None, inference_frac=None, push_frac=None)
            if self.inline:
                row["inference"] = "inline"
            if win:
                first, last, dt = win
                row["env_steps_per_s"] = _delta(first, last, "env_steps") / dt
                for phase in ACTOR_PHASES:
                    row[f"{phase}_frac"] = _frac(first, last, phase, dt)
        elif w.role == "policy":
            row.update(busy_frac=None, batch_rows=None, latency_ms=None, batches_per_s=None)
            if win:
                first, last, dt = win
                batches = _delta(first, last, "batches")
                row["busy_frac"] = _frac(first, last, "busy", dt)
                row["batches_per_s"] = batches / dt
                if batches > 0:
                    row["batch_rows"] = _delta(first, last, "rows") / batches
                    row["latency_ms"] = 1000.0 * (last.time_s.get("latency", 0.0)
                                                  - first.time_s.get("latency", 0.0)) / batches
        elif w.role == "trainer":
            row.update(busy_frac=None, updates_per_s=None, samples_per_update=None)
            if win:
                first, last, dt = win
                updates = _delta(first, last, "updates")
                row["busy_frac"] = busy_with_operation(1.0 - _frac(first, last, "wait", dt), dt, w.extra.get("busy_s"))
                row["updates_per_s"] = updates / dt
                if updates > 0:
                    row["samples_per_update"] = _delta(first, last, "samples_pulled") / updates
        return row
