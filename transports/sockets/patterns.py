"""The three patterns over the socket engine (:mod:`zoo.transports.sockets.engine`), frames inline.

These classes are the ``tcp`` transport's endpoints; the ``shm`` transport subclasses them
and overrides ``_send_layout`` / ``_frame_of`` / ``_on_control`` to move frames through
shared-memory slots instead. :class:`RawPusherMixin` turns either transport's pusher into the
conformance suite's ``raw_pusher`` (bytes that did not come from ``encode``).
"""
from __future__ import annotations

import time
from typing import Any

from zoo.core.arrays import Layout, layout
from zoo.transports.sockets.engine import Client, Conn, ProtocolError, Server, log
from zoo.transports.sockets.framing import FRAME, record_header


class SocketPuller(Server):
    """Pull side of push/pull: ``recv(timeout) -> (bundle, meta) | None``."""

    role, peer_role = "puller", "pusher"

    def recv(self, timeout: float):
        """The next message from any producer (per-producer order kept), or None after ``timeout`` s.

        Raises:
            TransportError: called after ``close()``.
        """
        return self._recv_message(timeout)


class SocketPusher(Client):
    """Push side: ``send`` blocks up to ``timeout`` s while the consumer applies back-pressure."""

    role = "pusher"

    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Send one message; False (nothing sent) if not connected / no room within ``timeout`` s.

        Raises:
            WireError: a forbidden dtype, or the frame exceeds ``max_frame_bytes``.
            TransportError: called after ``close()``.
        """
        return self._send_frame(layout(bundle, meta), timeout)


class RawPusherMixin(Client):
    """Testing aid for the conformance suite: send bytes that did not come from ``encode``."""

    def send_raw(self, payload: bytes, timeout: float = 1.0) -> bool:
        """Send ``payload`` as the body of one FRAME record (a correct record, any content)."""
        with self._lock:
            self._check_open()
            deadline = time.monotonic() + timeout
            conn = self._connect(deadline)
            return conn is not None and self._write(conn, [record_header(FRAME, len(payload)), payload], deadline)

    def send_garbage(self, data: bytes, timeout: float = 1.0) -> bool:
        """Write ``data`` on the connection as is, corrupting its record stream."""
        with self._lock:
            self._check_open()
            deadline = time.monotonic() + timeout
            conn = self._connect(deadline)
            return conn is not None and self._write(conn, [data], deadline)


class SocketReplyServer(Server):
    """Server side of request/reply: replies are routed to the connection of ``client_id``."""

    role, peer_role = "reply server", "request client"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.by_client: dict[int, Conn] = {}

    def _on_hello(self, conn: Conn) -> None:
        assert conn.hello is not None  # _on_hello runs once the HELLO is read
        cid = conn.hello.get("client_id")
        if not isinstance(cid, int) or isinstance(cid, bool):
            self._refuse(conn.peer, "hello", "HELLO without an integer client_id")
            self._drop(conn)
            return
        conn.client_id = cid
        old = self.by_client.get(cid)
        if old is not None and old is not conn:
            log.warning("%r: client %d connected again from %s; replies now go there", self, cid, conn.peer)
        self.by_client[cid] = conn

    def _on_disconnect(self, conn: Conn) -> None:
        if conn.client_id is not None and self.by_client.get(conn.client_id) is conn:
            del self.by_client[conn.client_id]

    def recv(self, timeout: float):
        """``(client_id, bundle, meta)`` of the next request, or None after ``timeout`` s.

        ``client_id`` is the one the client announced when it connected.

        Raises:
            TransportError: called after ``close()``.
        """
        with self._lock:
            self._check_open()
            got = self._decode_next(time.monotonic() + max(0.0, timeout))
            if got is None:
                return None
            conn, (bundle, meta) = got
            return conn.client_id, bundle, meta

    def reply(self, client_id: int, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Send a reply to ``client_id``; False if that client is not connected or has no room
        within ``timeout`` s (a client that died is waited for until the timeout).

        Raises:
            WireError: a forbidden dtype, or the frame exceeds ``max_frame_bytes``.
            TransportError: called after ``close()``.
        """
        lay = layout(bundle, meta)
        self._check_size(lay)
        with self._lock:
            self._check_open()
            deadline = time.monotonic() + max(0.0, timeout)
            if not self._wait(deadline, lambda: client_id in self.by_client):
                return False
            return self._send_layout(self.by_client[client_id], lay, deadline)


class SocketRequestClient(Client):
    """Client side of request/reply; its HELLO carries ``client_id``."""

    role = "request client"

    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Send a request (``meta`` gains ``client_id``); False if not sent within ``timeout`` s.

        Raises:
            WireError: a forbidden dtype, or the frame exceeds ``max_frame_bytes``.
            TransportError: called after ``close()``.
        """
        return self._send_frame(layout(bundle, {**meta, "client_id": self.client_id}), timeout)

    def recv(self, timeout: float):
        """The next reply ``(bundle, meta)`` for this client, or None after ``timeout`` s.

        Raises:
            TransportError: called after ``close()``.
        """
        return self._recv_message(timeout)


class SocketPublisher(Server):
    """Publish side: ``publish`` never blocks; a slow subscriber gets the newest value (older ones are skipped).

    Values are sent to subscribers during ``publish`` calls and by per-connection writer
    threads; a subscriber that connects between two calls gets the current value at the next
    ``publish`` (the trainer republishes periodically).
    """

    role, peer_role = "publisher", "subscriber"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last: list | None = None

    def _on_hello(self, conn: Conn) -> None:
        if self._last is not None:
            conn.offer_latest(self._last)

    def publish(self, bundle: dict[str, Any], meta: dict[str, Any]) -> None:
        """Make ``(bundle, meta)`` the newest value.

        Raises:
            WireError: a forbidden dtype, or the frame exceeds ``max_frame_bytes``.
            TransportError: called after ``close()``.
        """
        lay = layout(bundle, meta)
        self._check_size(lay)
        with self._lock:
            self._check_open()
            self._poll(0)
            self._publish_layout(lay)

    def _publish_layout(self, lay: Layout) -> None:
        self._last = [record_header(FRAME, lay.size), lay.to_bytes()]
        for conn in list(self.conns):
            if conn.hello is not None:
                conn.offer_latest(self._last)

    def _dispatch(self, conn: Conn, kind: int, payload: Any) -> None:
        if conn.hello is not None and kind == FRAME:
            raise ProtocolError("a subscriber sent a FRAME")
        super()._dispatch(conn, kind, payload)


class SocketSubscriber(Client):
    """Subscribe side: ``latest`` returns the newest value not seen yet."""

    role = "subscriber"

    def _queue(self, conn: Conn, kind: int, payload: Any) -> None:
        # Only the newest value matters: an older queued one is dropped (shm releases its slot).
        while self._ready:
            self._discard(*self._pop())
        super()._queue(conn, kind, payload)

    def _discard(self, conn: Conn, kind: int, payload: Any) -> None:
        pass

    def latest(self, timeout: float):
        """The newest ``(bundle, meta)`` published since the last call, or None if nothing new
        arrived within ``timeout`` s. Never returns an older value after a newer one.

        Raises:
            TransportError: called after ``close()``.
        """
        with self._lock:
            self._check_open()
            deadline = time.monotonic() + max(0.0, timeout)
            if self._connect(deadline) is None:
                return None
            if not self._wait(deadline, lambda: self._ready):
                return None
            for _ in range(64):  # drain what else has arrived, keeping the newest
                before = self._ready[-1] if self._ready else None
                self._poll(0)
                if not self._ready or self._ready[-1] is before:
                    break
            got = self._decode_next(time.monotonic())
            return None if got is None else got[1]
