"""The nng transport: pynng sockets over ``ipc://`` in a per-run directory.

Patterns map onto nng protocols:

- request/reply: clients push requests to the server's Pull0 socket; each client listens on
  its own Pull0 reply socket (``<stream>-c<client_id>``) and the server pushes the reply
  there, so replies are routed by client id and may be sent in any order.
- push/pull: Push0 -> Pull0. nng holds a small send buffer; when the consumer stops
  pulling, ``send`` blocks up to its timeout and returns False (back-pressure).
- publish/latest: Pub0 -> Sub0; ``latest`` drains what has arrived and keeps the newest.

Frames use :mod:`zoo.core.arrays`'s wire format, written straight into the nng message on
send and decoded in place on receive (the returned arrays are views into the message, which
lives as long as they do). Malformed frames are counted in ``rejected`` and dropped
(a receive keeps waiting for a good frame until its timeout). Dials are non-blocking (nng
retries in the background), so start order does not matter.

A receive first busy-polls (non-blocking ``recv``, yielding the core between tries) for up to
``spin_us`` microseconds while this endpoint's recent waits were shorter than that
(:mod:`zoo.transports.sockets.spin`): a blocked receiver is woken through nng's own threads,
and on a small machine each of those wake-ups costs more than the message itself. Option
``spin_us`` (``--set streams.<stream>.options.spin_us=N``, else ``ZOO_SPIN_US``, default 100;
0 never spins).

``close()`` is idempotent; a receive blocked in another thread returns None at once; calls
made after ``close()`` raise :class:`~zoo.core.transport.TransportError`. Closing a sending
socket drops the messages nng still queues for it (up to :data:`SEND_BUFFER` per pipe):
``send`` returning True means *queued*, not delivered.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pynng
from pynng import _nng
from pynng.exceptions import check_err

from zoo.core.arrays import WireError, decode, layout
from zoo.core.transport import TransportError
from zoo.transports.sockets.rundir import create_run_dir, reclaim_stale_run_dirs, run_dir
from zoo.transports.sockets.spin import DEFAULT_SPIN_US, AdaptiveSpin, spin_budget_us

log = logging.getLogger(__name__)
MAX_FRAME_BYTES = 1 << 30
SEND_BUFFER = 2  # messages queued per pipe before a send blocks


def _ms(timeout: float) -> int:
    return max(0, int(timeout * 1000))


class _Frame(np.ndarray):
    """A received message's body as a uint8 array that keeps the nng message alive: decoded
    arrays are views into it (no copy), and the message is freed with the last of them."""


def _frame(msg: pynng.Message) -> np.ndarray:
    frame = np.frombuffer(msg._buffer, np.uint8).view(_Frame)  # noqa: SLF001 - see _Frame
    frame.msg = msg
    return frame


def _message(bundle: dict[str, Any] | None, meta: dict[str, Any] | None) -> pynng.Message:
    """An nng message whose body is the wire frame, written in place (one copy per array).

    Raises:
        WireError: a forbidden dtype. TypeError: ``meta`` is not JSON-serialisable.
    """
    lay = layout(bundle, meta)
    msg_p = pynng.ffi.new("nng_msg **")
    check_err(_nng.lib.nng_msg_alloc(msg_p, lay.size))
    msg = pynng.Message(msg_p[0])  # frees the nng_msg when garbage unless it was sent
    lay.write_into(np.frombuffer(msg._buffer, np.uint8))  # noqa: SLF001
    return msg


@dataclass
class NngOptions:
    """Options of the ``nng`` transport, set per stream in the experiment config
    (``--set streams.<stream>.options.<name>=value``) or as keyword arguments of
    :class:`NngTransport`. Unset (None): the environment variable, else the default.
    """

    spin_us: int | None = None
    """Busy-poll budget of one receive in microseconds, used while recent waits were shorter
    (``ZOO_SPIN_US``, default 100; 0 never spins)."""

    def __post_init__(self) -> None:
        if self.spin_us is not None:
            spin_budget_us(self.spin_us)


class _Endpoint:
    def __init__(self, sock: pynng.Socket, spin_us: int = DEFAULT_SPIN_US) -> None:
        self.sock = sock
        self._spin = AdaptiveSpin(spin_us)
        self.rejected = 0
        self._closed = False
        self._timeouts: dict[tuple[int, str], int] = {}  # (id(socket), option) -> ms last set

    def _set_timeout(self, sock: pynng.Socket, option: str, ms: int) -> None:
        """Set ``recv_timeout`` / ``send_timeout`` only when it changes: each set is a call into
        nng (a few microseconds), and a loop usually passes the same timeout every time."""
        key = (id(sock), option)
        if self._timeouts.get(key) != ms:
            setattr(sock, option, ms)
            self._timeouts[key] = ms

    def _check_open(self) -> None:
        if self._closed:
            raise TransportError(f"{type(self).__name__} is closed")

    def _poll(self) -> pynng.Message | None:
        try:
            return self.sock.recv_msg(block=False)
        except pynng.TryAgain:
            return None

    def _block(self, timeout: float) -> pynng.Message | None:
        try:
            self._set_timeout(self.sock, "recv_timeout", max(1, _ms(timeout)))
            return self.sock.recv_msg()
        except pynng.Timeout:
            return None

    def _recv_raw(self, timeout: float) -> np.ndarray | None:
        try:
            msg = self._poll()
            if msg is None and timeout > 0:
                msg = self._spin.wait(self._poll, self._block, timeout)
        except pynng.Closed:
            return None  # closed from another thread while waiting
        return None if msg is None else _frame(msg)

    def _recv(self, timeout: float):
        self._check_open()
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            raw = self._recv_raw(timeout)
            if raw is None:
                return None
            try:
                return decode(raw, MAX_FRAME_BYTES)
            except WireError as exc:
                self.rejected += 1
                log.warning("dropped a malformed frame (%d so far): %s", self.rejected, exc)
                timeout = deadline - time.monotonic()  # keep serving until the caller's timeout

    def _send(self, sock: pynng.Socket, msg: pynng.Message, timeout: float) -> bool:
        self._check_open()
        try:
            self._set_timeout(sock, "send_timeout", max(1, _ms(timeout)))
            sock.send_msg(msg)  # on failure the message stays ours and is freed with it
            return True
        except pynng.Timeout:
            return False
        except pynng.Closed:
            return False  # closed from another thread while waiting

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sock.close()


class NngPuller(_Endpoint):
    def recv(self, timeout: float):
        return self._recv(timeout)


class NngPusher(_Endpoint):
    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        return self._send(self.sock, _message(bundle, meta), timeout)


class NngSubscriber(_Endpoint):
    def latest(self, timeout: float):
        newest = self._recv(timeout)
        if newest is None:
            return None
        while (more := self._recv(0)) is not None:
            newest = more
        return newest


class NngPublisher(_Endpoint):
    def publish(self, bundle: dict[str, Any], meta: dict[str, Any]) -> None:
        msg = _message(bundle, meta)
        self._check_open()
        self.sock.send_msg(msg)  # Pub0 never blocks: slow subscribers drop


class NngRawPusher(NngPusher):
    """Testing aid for the conformance suite: sends bytes that did not come from ``encode``."""

    def send_raw(self, payload: bytes, timeout: float = 1.0) -> bool:
        return self._send(self.sock, pynng.Message(bytes(payload)), timeout)


class NngReplyServer(_Endpoint):
    def __init__(self, transport: "NngTransport", stream: str) -> None:
        super().__init__(pynng.Pull0(listen=transport.address(stream), recv_max_size=MAX_FRAME_BYTES),
                         transport.spin_us)
        self.transport, self.stream = transport, stream
        self.replies: dict[int, pynng.Socket] = {}

    def recv(self, timeout: float):
        msg = self._recv(timeout)
        if msg is None:
            return None
        bundle, meta = msg
        client_id = meta.get("client_id")
        if not isinstance(client_id, int):
            self.rejected += 1
            log.warning("dropped a request without an integer client_id")
            return None
        return client_id, bundle, meta

    def reply(self, client_id: int, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        msg = _message(bundle, meta)
        self._check_open()
        sock = self.replies.get(client_id)
        if sock is None:
            sock = pynng.Push0(send_buffer_size=SEND_BUFFER)
            sock.dial(self.transport.address(f"{self.stream}-c{client_id}"), block=False)
            self.replies[client_id] = sock
        return self._send(sock, msg, timeout)

    def close(self) -> None:
        if not self._closed:
            for sock in self.replies.values():
                sock.close()
            super().close()


class NngRequestClient(_Endpoint):
    def __init__(self, transport: "NngTransport", stream: str, client_id: int) -> None:
        super().__init__(pynng.Pull0(listen=transport.address(f"{stream}-c{client_id}"), recv_max_size=MAX_FRAME_BYTES),
                         transport.spin_us)
        self.client_id = client_id
        self.requests = pynng.Push0(send_buffer_size=SEND_BUFFER)
        self.requests.dial(transport.address(stream), block=False)

    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        return self._send(self.requests, _message(bundle, {**meta, "client_id": self.client_id}), timeout)

    def recv(self, timeout: float):
        return self._recv(timeout)

    def close(self) -> None:
        if not self._closed:
            self.requests.close()
            super().close()


class NngTransport:
    """Endpoints over ``ipc://<base_dir>/zoo-<run_id>/<stream>.ipc``.

    The controller creates the run directory (``create=True``), after removing the run
    directories of dead processes (:func:`~zoo.transports.sockets.rundir.reclaim_stale_run_dirs`);
    workers attach to it. :meth:`cleanup` removes the directory and its socket files.
    """

    name = "nng"
    cross_process = True
    Options = NngOptions

    def __init__(self, run_id: str, base_dir: str | None = None, create: bool = False, *,
                 spin_us: int | None = None) -> None:
        self.run_id = run_id
        self.spin_us = spin_budget_us(spin_us)
        self.dir = run_dir(run_id, base_dir)
        if create:
            reclaim_stale_run_dirs(base_dir)
            create_run_dir(run_id, base_dir)

    def address(self, stream: str) -> str:
        return f"ipc://{self.dir}/{stream}.ipc"

    def reply_server(self, stream: str) -> NngReplyServer:
        return NngReplyServer(self, stream)

    def request_client(self, stream: str, client_id: int) -> NngRequestClient:
        return NngRequestClient(self, stream, client_id)

    def puller(self, stream: str) -> NngPuller:
        return NngPuller(pynng.Pull0(listen=self.address(stream), recv_max_size=MAX_FRAME_BYTES), self.spin_us)

    def pusher(self, stream: str) -> NngPusher:
        sock = pynng.Push0(send_buffer_size=SEND_BUFFER)
        sock.dial(self.address(stream), block=False)
        return NngPusher(sock, self.spin_us)

    def publisher(self, stream: str) -> NngPublisher:
        return NngPublisher(pynng.Pub0(listen=self.address(stream)), self.spin_us)

    def subscriber(self, stream: str) -> NngSubscriber:
        sock = pynng.Sub0(recv_max_size=MAX_FRAME_BYTES, recv_buffer_size=4)
        sock.subscribe(b"")
        sock.dial(self.address(stream), block=False)
        return NngSubscriber(sock, self.spin_us)

    def raw_pusher(self, stream: str) -> NngRawPusher:
        """Testing aid: a pusher that can send arbitrary bytes as one nng message."""
        sock = pynng.Push0(send_buffer_size=SEND_BUFFER)
        sock.dial(self.address(stream), block=False)
        return NngRawPusher(sock, self.spin_us)

    def resources(self) -> list[str]:
        """OS resources of this run that exist now: the run directory (with its ipc socket files)."""
        return [self.dir] if os.path.exists(self.dir) else []

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
