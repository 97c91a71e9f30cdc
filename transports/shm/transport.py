"""The ``shm`` transport: frames in shared-memory slot rings, slot indices on a Unix socket.

One host only. Every stream has a Unix stream socket ``<run dir>/<stream>.shm`` — the
*notification channel* — run by the socket engine shared with the ``tcp`` transport
(:mod:`zoo.transports.sockets.engine`: HELLO, timeouts, back-pressure, close semantics are the
same). What travels on it are small records: which ring to map (RING), which slots a peer may
fill (GRANT), which slot holds a new frame (SLOT), which slots come back (RETURN, RELEASE).
The frames themselves are written once into a pre-allocated slot by the sender
(:meth:`Layout.write_into`, one copy per array, no pickling). The receiver decodes them in
place: the arrays it returns are views into the slot, which goes back to the producers once
the application has dropped them — or, when half of the ring is already held that way, it
copies the frame out and frees the slot at once (:meth:`LendingRing.consume`). Subscribers
always copy (the publisher's slots are shared by all subscribers).

Why a Unix socket for the indices: it is stdlib (no fork, no inherited handles), waits with a
timeout, reports a dead peer at once (EOF), keeps each producer's order, and tells the owner
which peer holds which slot — so slots lent to a SIGKILLed producer come back at once.

Who owns which ring (creates it, lends its slots, unlinks it):

===============  =======================================  ====================================
pattern          ring (segment role)                      slot flow
===============  =======================================  ====================================
push/pull        the puller's ``pull`` ring               puller GRANTs, pusher fills + SLOT
request/reply    the server's ``req`` ring (requests);     owner GRANTs, the other side fills
                 each client's ``c<id>`` ring (replies)
publish/latest   the publisher's ``pub`` ring             publisher fills + SLOT to every
                                                          subscriber, each RELEASEs after copying
===============  =======================================  ====================================

Back-pressure: a producer writes only into a granted slot, and the owner grants a slot again
only after the application consumed the frame in it; with no grant within the timeout
``send`` returns False. Each producer holds at most ``max_lent`` unused grants (default 2:
double buffering); a freed slot goes to the producer with the fewest slots in use. A producer
that stops sending keeps its unused grants, so keep ``slots > max_lent x producers`` (the
request clients' own reply rings lend all their slots to the server, their only peer).

Frames larger than a slot: the frame travels inline on the socket (exactly like ``tcp``,
logged once per endpoint) and the owner grows its ring to slots of 1.25x that size (at least
double, up to ``max_slot_bytes``), so the following frames of that size go through shared
memory again. Beyond ``max_slot_bytes`` frames stay on the inline path. Nothing is refused.

Options (per stream in the experiment config, ``--set streams.<stream>.options.<name>=value``,
or keyword arguments; else environment variables; else defaults — see :class:`ShmOptions`):

================  ==========================  ======  ========================================
option            environment                 default meaning
================  ==========================  ======  ========================================
slots             ``ZOO_SHM_SLOTS``           8 [*]_  slots per ring (the publisher's ring:
                                                      ``max(4, slots // 2)``)
slot_bytes        ``ZOO_SHM_SLOT_BYTES``      1 MiB   initial slot size, rounded to 4 KiB
                                                      (request clients' reply rings: a quarter)
max_slot_bytes    ``ZOO_SHM_MAX_SLOT_BYTES``  256 MiB largest slot a ring grows to
max_lent          ``ZOO_SHM_GRANTS``          2       unused grants one producer may hold
spin_us           ``ZOO_SPIN_US``             100     busy-poll budget of a wait (us) before
                                                      blocking, while recent waits were
                                                      shorter; 0 never spins
                                                      (:mod:`zoo.transports.sockets.spin`)
================  ==========================  ======  ========================================

.. [*] Unset, a request ring (a policy worker's, filled by its actors) gets ``max(8, max_lent x
   producers + 1)`` slots (:func:`default_slots`), where ``producers`` is the graph's number of
   actors of that policy worker (passed by the core to factories that take a ``producers``
   keyword); 32 actors on one policy worker: 65. Pullers keep 8: their frames (samples) are
   large, so set ``slots`` by hand when many actors feed one trainer.

Shared memory used: ``slots x slot_bytes`` per ring (reserved up front), e.g. a puller with
8 slots of 8 MiB holds 64 MiB.

Clean-up: owners unlink their segments on ``close()``; :meth:`ShmTransport.cleanup` unlinks
every segment of the run; ``create=True`` (the controller) first reclaims the segments and run
directories of runs no live process holds (:func:`~zoo.transports.shm.segments.reclaim_stale_segments`:
every process of a run holds its run lock, ``/dev/shm/zoo-<run_id>.lock``, before it creates
a segment). Listeners publish their notification socket's path through the run's resolver
under ``<run_id>/<stream>.shm``.
"""
from __future__ import annotations

import collections
import logging
import os
import struct
import time
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from zoo.core.arrays import MAX_FRAME_BYTES, Layout, WireError
from zoo.core.resolver import run_key
from zoo.core.transport import TransportError
from zoo.transports.shm.segments import (
    LendingRing,
    PublishRing,
    Segment,
    hold_run_lock,
    list_segments,
    reclaim_stale_segments,
    run_lock_path,
    run_prefix,
    unlink_run_segments,
)
from zoo.transports.sockets import engine, patterns
from zoo.transports.sockets.engine import Conn, ProtocolError
from zoo.transports.sockets.framing import (
    FRAME,
    GRANT,
    REC,
    REC_MAGIC,
    RELEASE,
    RETURN,
    RING,
    SLOT,
    SLOT_REC,
    json_record,
    pairs_record,
    parse_json,
    parse_pairs,
    record_header,
)
from zoo.transports.sockets.rundir import (
    check_socket_dir,
    create_run_dir,
    default_resolver,
    hold_lock,
    leave_run,
    lock_path,
    reclaim_stale_run_dirs,
    remove_run_dir,
    run_dir,
    safe_name,
)
from zoo.transports.sockets.spin import spin_budget_us

log = logging.getLogger("zoo.transports")
E = TypeVar("E", bound=engine.Endpoint)
CONTROL_WRITE_S = 0.5


_SLOT_RECORD = struct.Struct(REC.format + SLOT_REC.format.lstrip("<"))  # header + payload in one pack


def _slot_record(gen: int, slot: int, nbytes: int, seq: int = 0) -> bytes:
    return _SLOT_RECORD.pack(REC_MAGIC, SLOT, SLOT_REC.size, gen, slot, nbytes, seq)


def _parse_slot(payload: bytes) -> tuple[int, int, int, int]:
    if len(payload) != SLOT_REC.size:
        raise WireError(f"SLOT record of {len(payload)} bytes (expected {SLOT_REC.size})")
    return SLOT_REC.unpack(payload)


class _PeerRing:
    """Sender-side view of a ring the peer owns: the mapped segment and the grants held."""

    def __init__(self) -> None:
        self.seg: Segment | None = None
        self.grants: collections.deque[tuple[int, int]] = collections.deque()

    def close(self) -> None:
        self.grants.clear()
        if self.seg is not None:
            self.seg.close()
            self.seg = None


class _ShmMixin(engine.Endpoint):
    """Shared by all shm endpoints; comes before a socket pattern in their bases."""

    ring: LendingRing | None = None
    _inline_logged = False

    # -- attaching to the peer's rings (sender side, and subscribers) --------------------
    def _attach(self, info_payload: bytes) -> Segment:
        info = parse_json(info_payload)
        try:
            name, gen = str(info["name"]), int(info["gen"])
            slot_bytes, slots = int(info["slot_bytes"]), int(info["slots"])
        except (KeyError, TypeError, ValueError):
            raise WireError(f"malformed RING record {info!r}") from None
        prefix = f"{run_prefix(self.run_id)}{safe_name(self.stream)}."
        if not name.startswith(prefix) or "/" in name:
            raise WireError(f"RING names segment {name!r}, which is not one of stream {self.stream!r} of this run")
        try:
            return Segment.attach(name, slot_bytes, slots, gen)
        except TransportError as exc:
            raise ProtocolError(str(exc)) from None

    def _peer_ring(self, conn: Conn) -> _PeerRing:
        if not isinstance(getattr(conn.shm, "peer", None), _PeerRing):
            conn.shm = conn.shm or _ConnState()
            conn.shm.peer = _PeerRing()
        return conn.shm.peer

    def _on_peer_ring(self, conn: Conn, payload: bytes) -> None:
        peer = self._peer_ring(conn)
        seg = self._attach(payload)
        stale = list(peer.grants)
        peer.grants.clear()
        if peer.seg is not None:
            peer.seg.close()
        peer.seg = seg
        if stale:
            self._send_control(conn, pairs_record(RETURN, stale))

    def _on_grant(self, conn: Conn, payload: bytes) -> None:
        peer = self._peer_ring(conn)
        stale = []
        for gen, slot in parse_pairs(payload):
            if peer.seg is not None and gen == peer.seg.gen and slot < peer.seg.slots:
                peer.grants.append((gen, slot))
            else:
                stale.append((gen, slot))
        if stale:
            self._send_control(conn, pairs_record(RETURN, stale))

    def _wait_conn(self, conn: Conn, deadline: float, cond) -> bool:
        """Like ``_wait``, but also reads ``conn`` when it is throttled (its control records
        may be queued behind data)."""
        while not cond():
            if self._closed or conn.closed:
                return False
            left = deadline - time.monotonic()
            if not conn.registered:
                self._force_read(conn)
                if cond():
                    break
                self._poll(min(max(left, 0.0), 0.005))
            else:
                self._poll(left)
            if left <= 0:
                return bool(cond()) and not self._closed
        return True

    def _send_layout(self, conn: Conn, lay: Layout, deadline: float) -> bool:
        """Write the frame into a granted slot of the peer's ring and announce it (or send it inline)."""
        peer = self._peer_ring(conn)
        if peer.seg is None or lay.size > peer.seg.slot_bytes:
            # Before the owner has announced its ring (it does so when it next polls), and for
            # frames larger than its slots, the frame goes inline: bounded by the socket buffers.
            if peer.seg is not None and not self._inline_logged:
                self._inline_logged = True
                log.info("%r: a %d-byte frame exceeds the %d-byte slots; it goes inline on the socket and the "
                         "owner grows its ring (ZOO_SHM_MAX_SLOT_BYTES caps the growth)", self, lay.size,
                         peer.seg.slot_bytes)
            return self._write(conn, [record_header(FRAME, lay.size), *lay.parts()], deadline)
        if not self._wait_conn(conn, deadline, lambda: peer.grants or peer.seg is None):
            return False
        if peer.seg is None or not peer.grants:
            return False
        gen, slot = peer.grants.popleft()
        lay.write_into(peer.seg.view(slot, lay.size))
        if self._write(conn, [_slot_record(gen, slot, lay.size)], deadline):
            return True
        if not conn.closed:
            peer.grants.appendleft((gen, slot))
        return False

    # -- owning a lending ring (receiver side) -------------------------------------------
    def _owner_conns(self) -> list[Conn]:
        raise NotImplementedError

    def _own_ring(self) -> LendingRing:
        """The ring this endpoint owns (receiver side: set before the endpoint starts)."""
        assert self.ring is not None, f"{self!r} owns no ring"
        return self.ring

    def _announce_ring(self, conns: list[Conn]) -> None:
        record = json_record(RING, self._own_ring().ring_info())
        for conn in conns:
            self._send_control(conn, record)

    def _regrant(self) -> None:
        """Lend free slots. A peer left with fewer than half its grants gets them at once; for
        the others the GRANT rides along with the next record this endpoint sends them (a
        reply, say), saving a wake-up of the peer per message."""
        ring = self.ring
        if self._closed or ring is None or not ring.free:
            return
        conns = self._owner_conns()
        granted = ring.grant(conns)
        if granted:
            low = max(1, ring.cap(len(conns)) // 2)
            for conn, pairs in granted.items():
                urgent = ring.lent_count(conn) - len(pairs) < low
                self._send_control(conn, pairs_record(GRANT, pairs), urgent)

    def _on_slot(self, conn: Conn, payload: bytes) -> None:
        gen, slot, nbytes, _ = _parse_slot(payload)
        try:
            self._own_ring().announced(conn, gen, slot, nbytes)
        except ValueError as exc:
            raise WireError(str(exc)) from None
        self._queue(conn, SLOT, (gen, slot, nbytes))

    def _on_return(self, conn: Conn, payload: bytes) -> None:
        self._own_ring().returned(conn, parse_pairs(payload))
        self._regrant()

    def _maybe_grow(self, nbytes: int) -> None:
        ring = self._own_ring()
        if nbytes > ring.slot_bytes and ring.grow(nbytes):
            log.info("%r: ring grown to %d-byte slots (generation %d)", self, ring.slot_bytes, ring.gen)
            self._announce_ring(self._owner_conns())
            self._regrant()

    def _frame_of(self, conn: Conn, kind: int, payload: Any):
        if kind != SLOT:
            return payload
        gen, slot, nbytes = payload
        ring = self._own_ring()
        ring.reap()
        try:
            return ring.consume(gen, slot, nbytes)
        finally:
            self._regrant()

    def _poll(self, timeout: float) -> None:
        if self.ring is not None and self.ring.reap():
            self._regrant()
        super()._poll(timeout)

    def _owner_gone(self, conn: Conn) -> None:
        if self.ring is not None:
            self.ring.conn_gone(conn)
            self._regrant()

    def _close_peer(self, conn: Conn) -> None:
        peer = getattr(conn.shm, "peer", None)
        if peer is not None:
            peer.close()


class _ConnState:
    def __init__(self) -> None:
        self.peer: _PeerRing | None = None


class ShmPuller(_ShmMixin, patterns.SocketPuller):
    def __init__(self, address, run_id, stream, max_frame_bytes, token, *, ring: LendingRing) -> None:
        self.ring = ring
        try:
            super().__init__(address, run_id, stream, max_frame_bytes, token)
        except Exception:
            ring.close()
            raise

    def _owner_conns(self) -> list[Conn]:
        return [c for c in self.conns if c.hello is not None and not c.closed]

    def _on_hello(self, conn: Conn) -> None:
        conn.shm = _ConnState()
        self._announce_ring([conn])
        self._regrant()

    def _dispatch(self, conn: Conn, kind: int, payload: Any) -> None:
        if kind == FRAME and conn.hello is not None:
            self._maybe_grow(len(payload))
        super()._dispatch(conn, kind, payload)

    def _on_control(self, conn: Conn, kind: int, payload: bytes) -> None:
        if kind == SLOT:
            self._on_slot(conn, payload)
        elif kind == RETURN:
            self._on_return(conn, payload)
        else:
            super()._on_control(conn, kind, payload)

    def _on_disconnect(self, conn: Conn) -> None:
        self._owner_gone(conn)

    def _shutdown(self) -> None:
        super()._shutdown()
        self._own_ring().close()


class ShmPusher(_ShmMixin, patterns.SocketPusher):
    def _on_connect(self, conn: Conn) -> None:
        conn.shm = _ConnState()

    def _on_control(self, conn: Conn, kind: int, payload: bytes) -> None:
        if kind == RING:
            self._on_peer_ring(conn, payload)
        elif kind == GRANT:
            self._on_grant(conn, payload)
        else:
            super()._on_control(conn, kind, payload)

    def _on_disconnect(self, conn: Conn) -> None:
        self._close_peer(conn)


class ShmRawPusher(patterns.RawPusherMixin, ShmPusher):
    """Testing aid: sends arbitrary FRAME payloads (the inline path) or raw bytes."""


class ShmReplyServer(_ShmMixin, patterns.SocketReplyServer):
    """Owns the request ring; writes replies into each client's reply ring."""

    def __init__(self, address, run_id, stream, max_frame_bytes, token, *, ring: LendingRing) -> None:
        self.ring = ring
        try:
            super().__init__(address, run_id, stream, max_frame_bytes, token)
        except Exception:
            ring.close()
            raise

    def _owner_conns(self) -> list[Conn]:
        return [c for c in self.conns if c.hello is not None and not c.closed]

    def _on_hello(self, conn: Conn) -> None:
        super()._on_hello(conn)
        if conn.closed:
            return
        conn.shm = _ConnState()
        self._announce_ring([conn])
        self._regrant()

    def _dispatch(self, conn: Conn, kind: int, payload: Any) -> None:
        if kind == FRAME and conn.hello is not None:
            self._maybe_grow(len(payload))
        super()._dispatch(conn, kind, payload)

    def _on_control(self, conn: Conn, kind: int, payload: bytes) -> None:
        if kind == SLOT:
            self._on_slot(conn, payload)
        elif kind == RETURN:
            self._on_return(conn, payload)
        elif kind == RING:
            self._on_peer_ring(conn, payload)
        elif kind == GRANT:
            self._on_grant(conn, payload)
        else:
            super()._on_control(conn, kind, payload)

    def _on_disconnect(self, conn: Conn) -> None:
        super()._on_disconnect(conn)
        self._close_peer(conn)
        self._owner_gone(conn)

    def _shutdown(self) -> None:
        super()._shutdown()
        self._own_ring().close()


class ShmRequestClient(_ShmMixin, patterns.SocketRequestClient):
    """Owns its reply ring; writes requests into the server's request ring."""

    def __init__(self, address, run_id, stream, max_frame_bytes, token, client_id, *, ring: LendingRing) -> None:
        self.ring = ring
        try:
            super().__init__(address, run_id, stream, max_frame_bytes, token, client_id=client_id)
        except Exception:
            ring.close()
            raise

    def _owner_conns(self) -> list[Conn]:
        return [self.conn] if self.conn is not None and not self.conn.closed else []

    def _on_connect(self, conn: Conn) -> None:
        conn.shm = _ConnState()
        self._announce_ring([conn])
        self._regrant()

    def _dispatch(self, conn: Conn, kind: int, payload: Any) -> None:
        if kind == FRAME:
            self._maybe_grow(len(payload))
        super()._dispatch(conn, kind, payload)

    def _on_control(self, conn: Conn, kind: int, payload: bytes) -> None:
        if kind == SLOT:
            self._on_slot(conn, payload)
        elif kind == RETURN:
            self._on_return(conn, payload)
        elif kind == RING:
            self._on_peer_ring(conn, payload)
        elif kind == GRANT:
            self._on_grant(conn, payload)
        else:
            super()._on_control(conn, kind, payload)

    def _on_disconnect(self, conn: Conn) -> None:
        self._close_peer(conn)
        self._owner_gone(conn)

    def _shutdown(self) -> None:
        super()._shutdown()
        self._own_ring().close()


class _SubState:
    def __init__(self) -> None:
        self.announced: list[tuple[int, int]] = []
        self.deferred = False
        self.gen_sent = -1


class ShmPublisher(_ShmMixin, patterns.SocketPublisher):
    """Writes each value once into a free slot of its ring and announces it to every subscriber.

    A subscriber holds at most 2 unreleased announcements; one that lags more gets the newest
    value when it releases one and the publisher next runs (``publish``). When no slot is free
    (more lagging subscribers than slots) or a value exceeds ``max_slot_bytes``, the value is
    sent inline on the sockets instead.
    """

    def __init__(self, address, run_id, stream, max_frame_bytes, token, *, ring: PublishRing) -> None:
        self.pring = ring
        self._cur: tuple[tuple[int, int], int, int] | None = None
        self._seq = 0
        try:
            super().__init__(address, run_id, stream, max_frame_bytes, token)
        except Exception:
            ring.close()
            raise

    def _on_hello(self, conn: Conn) -> None:
        conn.shm = _SubState()
        self._announce(conn)

    def _announce(self, conn: Conn) -> None:
        st: _SubState = conn.shm
        if self._cur is None:
            if self._last is not None:
                conn.offer_latest(self._last)
            return
        key, nbytes, seq = self._cur
        if key in st.announced:
            st.deferred = False
            return
        if len(st.announced) >= 2:
            st.deferred = True
            return
        parts = []
        if st.gen_sent != key[0]:
            parts.append(json_record(RING, self.pring.ring_info(key[0])))
        parts.append(_slot_record(key[0], key[1], nbytes, seq))
        if self._write(conn, [b"".join(parts)], time.monotonic() + CONTROL_WRITE_S):
            st.gen_sent = key[0]
            self.pring.ref(key)
            st.announced.append(key)
            st.deferred = False
        else:
            st.deferred = not conn.closed

    def _publish_layout(self, lay: Layout) -> None:
        key = self.pring.acquire(lay.size)
        if key is None:
            if self._cur is not None:
                self.pring.unref(self._cur[0])
                self._cur = None
            super()._publish_layout(lay)
            return
        lay.write_into(self.pring.gens[key[0]].view(key[1], lay.size))
        self._seq += 1
        self.pring.ref(key)
        if self._cur is not None:
            self.pring.unref(self._cur[0])
        self._cur, self._last = (key, lay.size, self._seq), None
        for conn in list(self.conns):
            if conn.hello is not None and not conn.closed:
                self._announce(conn)

    def _on_control(self, conn: Conn, kind: int, payload: bytes) -> None:
        if kind != RELEASE:
            super()._on_control(conn, kind, payload)
            return
        st: _SubState = conn.shm
        for key in parse_pairs(payload):
            if key in st.announced:
                st.announced.remove(key)
                self.pring.unref(key)
        if st.deferred:
            self._announce(conn)

    def _on_disconnect(self, conn: Conn) -> None:
        st = conn.shm
        if isinstance(st, _SubState):
            for key in st.announced:
                self.pring.unref(key)
            st.announced.clear()

    def _shutdown(self) -> None:
        super()._shutdown()
        self.pring.close()


class _SubConnState:
    def __init__(self) -> None:
        self.segs: dict[int, Segment] = {}


class ShmSubscriber(_ShmMixin, patterns.SocketSubscriber):
    def _on_connect(self, conn: Conn) -> None:
        conn.shm = _SubConnState()

    def _on_control(self, conn: Conn, kind: int, payload: bytes) -> None:
        st: _SubConnState = conn.shm
        if kind == RING:
            seg = self._attach(payload)
            old = st.segs.pop(seg.gen, None)
            if old is not None:
                old.close()
            st.segs[seg.gen] = seg
            busy = {p[0] for c, k, p in self._ready if k == SLOT}
            for gen in [g for g in st.segs if g < seg.gen - 1 and g not in busy]:
                st.segs.pop(gen).close()
        elif kind == SLOT:
            gen, slot, nbytes, seq = _parse_slot(payload)
            known = st.segs.get(gen)
            if known is None or slot >= known.slots or nbytes > known.slot_bytes:
                raise WireError(f"SLOT ({gen}, {slot}, {nbytes} bytes) does not fit any announced ring")
            self._queue(conn, SLOT, (gen, slot, nbytes))
        else:
            super()._on_control(conn, kind, payload)

    def _release(self, conn: Conn, payload) -> None:
        if not conn.closed:
            self._send_control(conn, pairs_record(RELEASE, [payload[:2]]))

    def _discard(self, conn: Conn, kind: int, payload: Any) -> None:
        if kind == SLOT:
            self._release(conn, payload)

    def _frame_of(self, conn: Conn, kind: int, payload: Any):
        if kind != SLOT:
            return payload
        gen, slot, nbytes = payload
        seg = conn.shm.segs.get(gen) if isinstance(conn.shm, _SubConnState) else None
        if seg is None:
            return None
        try:
            return seg.copy_out(slot, nbytes)
        finally:
            self._release(conn, payload)

    def _on_disconnect(self, conn: Conn) -> None:
        if isinstance(conn.shm, _SubConnState):
            for seg in conn.shm.segs.values():
                seg.close()
            conn.shm.segs.clear()


DEFAULT_SLOTS = 8
DEFAULT_SLOT_BYTES = 1 << 20
DEFAULT_MAX_SLOT_BYTES = 256 << 20


@dataclass
class ShmOptions:
    """Options of the ``shm`` transport, set per stream in the experiment config
    (``--set streams.<stream>.options.<name>=value``) or as keyword arguments of
    :class:`ShmTransport`. Unset (None): the environment variable, else the default.
    """

    slots: int | None = None
    """Slots per ring (``ZOO_SHM_SLOTS``); default 8, except a request ring (a policy worker's,
    filled by its actors): :func:`default_slots`, ``max(8, max_lent x producers + 1)``; a
    publisher's ring has ``max(4, slots // 2)``."""
    slot_bytes: int | None = None
    """Initial slot size in bytes, rounded up to 4 KiB (``ZOO_SHM_SLOT_BYTES``, default 1 MiB);
    request clients' reply rings start at a quarter of it."""
    max_slot_bytes: int | None = None
    """Largest slot, in bytes, a ring grows to for larger frames (``ZOO_SHM_MAX_SLOT_BYTES``, default 256 MiB)."""
    max_lent: int | None = None
    """Unused slot grants one producer may hold (``ZOO_SHM_GRANTS``, default 2)."""
    max_frame_bytes: int | None = None
    """Largest frame, in bytes, sent or accepted (default 1 GiB)."""
    spin_us: int | None = None
    """Busy-poll budget of one wait in microseconds, used while recent waits were shorter
    (``ZOO_SPIN_US``, default 100; 0 never spins)."""

    def __post_init__(self) -> None:
        if self.spin_us is not None:
            spin_budget_us(self.spin_us)
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and f.name != "spin_us" and value < 1:
                raise ValueError(f"{f.name} must be >= 1, got {value}")
        if self.slot_bytes or self.max_slot_bytes:  # compare what the ring will use, defaults included
            try:
                slot = self.slot_bytes or _env_int("ZOO_SHM_SLOT_BYTES", DEFAULT_SLOT_BYTES)
                most = self.max_slot_bytes or _env_int("ZOO_SHM_MAX_SLOT_BYTES", DEFAULT_MAX_SLOT_BYTES)
            except TransportError:
                return  # a bad environment variable is reported when the transport is built
            if slot > most:
                raise ValueError(f"slot_bytes={slot} exceeds max_slot_bytes={most}; "
                                 "raise max_slot_bytes or lower slot_bytes")


def default_slots(producers: int, max_lent: int = 2) -> int:
    """Slots of a ring that ``producers`` fill when ``slots`` is not set: ``max(8, max_lent x
    producers + 1)``, so every producer can hold its ``max_lent`` unused grants with one slot to
    spare (1 producer: 8; 32 actors on one policy worker: 65, where 8 let a few actors hold every
    grant and inference throughput collapsed to 57 env steps/s)."""
    return max(DEFAULT_SLOTS, int(max_lent) * int(producers) + 1)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise TransportError(f"{name}={raw!r} is not an integer") from None
    if value <= 0:
        raise TransportError(f"{name}={raw!r} must be positive")
    return value


class ShmTransport:
    """Endpoints over shared-memory rings, notified through Unix sockets in ``<base_dir or tempdir>/zoo-<run_id>/``.

    Only for processes of one host. See the module docstring for options and ownership.
    """

    name = "shm"
    cross_process = True
    Options = ShmOptions

    def __init__(self, run_id: str, base_dir: str | None = None, create: bool = False, *,
                 slots: int | None = None, slot_bytes: int | None = None, max_slot_bytes: int | None = None,
                 max_lent: int | None = None, max_frame_bytes: int | None = None, spin_us: int | None = None,
                 resolver=None, producers: int | None = None) -> None:
        self.run_id = run_id
        self.resolver = resolver if resolver is not None else default_resolver(base_dir)
        self.spin_us = spin_budget_us(spin_us)
        self.base_dir = base_dir
        self.dir = run_dir(run_id, base_dir)
        self.slots = int(slots or _env_int("ZOO_SHM_SLOTS", DEFAULT_SLOTS))  # reply and publisher rings
        self.producers = int(producers or 1)
        self.slot_bytes = int(slot_bytes or _env_int("ZOO_SHM_SLOT_BYTES", DEFAULT_SLOT_BYTES))
        self.max_slot_bytes = int(max_slot_bytes or _env_int("ZOO_SHM_MAX_SLOT_BYTES", DEFAULT_MAX_SLOT_BYTES))
        self.max_lent = int(max_lent or _env_int("ZOO_SHM_GRANTS", 2))
        # A request ring (a policy worker's, filled by its actors) follows their number unless slots
        # were given: each producer may hold max_lent unused grants. Pullers keep slots: their
        # frames (samples) are large and their /dev/shm use grows with the slot count.
        self.request_slots = self.slots if (slots or os.environ.get("ZOO_SHM_SLOTS")) else \
            default_slots(self.producers, self.max_lent)
        self.max_frame_bytes = int(max_frame_bytes or MAX_FRAME_BYTES)
        if create:
            check_socket_dir(run_id, base_dir)  # its notification sockets live there
            reclaim_stale_segments()
            reclaim_stale_run_dirs(base_dir)
            create_run_dir(run_id, base_dir)
            hold_run_lock(run_id)

    def _address(self, stream: str) -> engine.UnixAddress:
        hold_lock(lock_path(self.run_id, self.base_dir))  # this process now belongs to the live run
        published = engine.Published(self.resolver, run_key(self.run_id, f"{safe_name(stream)}.shm"))
        return engine.UnixAddress(os.path.join(self.dir, f"{safe_name(stream)}.shm"), published)

    def _args(self, stream: str) -> tuple[str, str, int, None]:
        return (self.run_id, stream, self.max_frame_bytes, None)

    def _ring(self, stream: str, role: str, slots: int) -> LendingRing:
        return LendingRing(self.run_id, stream, role, self.slot_bytes, slots, self.max_slot_bytes, self.max_lent)

    def _tuned(self, endpoint: E) -> E:
        endpoint.set_spin_us(self.spin_us)
        return endpoint

    def reply_server(self, stream: str) -> ShmReplyServer:
        ring = self._ring(stream, "req", self.request_slots)
        return self._tuned(ShmReplyServer(self._address(stream), *self._args(stream), ring=ring))

    def request_client(self, stream: str, client_id: int) -> ShmRequestClient:
        # The server is this ring's only peer: it may hold every slot.
        ring = LendingRing(self.run_id, stream, f"c{int(client_id)}", max(4096, self.slot_bytes // 4), self.slots,
                           self.max_slot_bytes, max_lent=self.slots)
        return self._tuned(ShmRequestClient(self._address(stream), *self._args(stream), client_id, ring=ring))

    def puller(self, stream: str) -> ShmPuller:
        ring = self._ring(stream, "pull", self.slots)  # large frames (samples): memory grows with slots
        return self._tuned(ShmPuller(self._address(stream), *self._args(stream), ring=ring))

    def pusher(self, stream: str) -> ShmPusher:
        return self._tuned(ShmPusher(self._address(stream), *self._args(stream)))

    def publisher(self, stream: str) -> ShmPublisher:
        ring = PublishRing(self.run_id, stream, self.slot_bytes, max(4, self.slots // 2), self.max_slot_bytes)
        return self._tuned(ShmPublisher(self._address(stream), *self._args(stream), ring=ring))

    def subscriber(self, stream: str) -> ShmSubscriber:
        return self._tuned(ShmSubscriber(self._address(stream), *self._args(stream)))

    def raw_pusher(self, stream: str) -> ShmRawPusher:
        """Testing aid: a pusher that can send arbitrary bytes (inline FRAME records)."""
        return self._tuned(ShmRawPusher(self._address(stream), *self._args(stream)))

    def resources(self) -> list[str]:
        """OS resources of this run that exist now: ``/dev/shm`` segments and the run directory."""
        out = [f"/dev/shm/{n}" for n in list_segments(run_prefix(self.run_id))]
        return out + ([self.dir] if os.path.exists(self.dir) else [])

    def cleanup(self) -> None:
        """Unlink every segment of the run (whoever owns it) and remove the run directory (idempotent)."""
        unlink_run_segments(self.run_id)
        remove_run_dir(self.run_id, self.base_dir)

    def leave(self) -> bool:
        """This process leaves a run whose controller is gone; the last one to leave runs
        :meth:`cleanup` (:func:`~zoo.transports.sockets.rundir.leave_run`). True if it did."""
        return leave_run([run_lock_path(self.run_id), lock_path(self.run_id, self.base_dir)], self.cleanup)
