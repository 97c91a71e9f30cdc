"""The nng transport: pynng sockets over ``ipc://`` in a per-run directory.

Patterns map onto nng protocols:

- request/reply: clients push requests to the server's Pull0 socket; each client listens on
  its own Pull0 reply socket (``<stream>-c<client_id>``) and the server pushes the reply
  there, so replies are routed by client id and may be sent in any order.
- push/pull: Push0 -> Pull0. nng holds a small send buffer; when the consumer stops
  pulling, ``send`` blocks up to its timeout and returns False (back-pressure).
- publish/latest: Pub0 -> Sub0; ``latest`` drains what has arrived and keeps the newest.

Frames use :mod:`zoo.core.arrays`; malformed frames are counted in ``rejected`` and dropped.
Dials are non-blocking (nng retries in the background), so start order does not matter.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

import pynng

from zoo.core.arrays import WireError, decode, encode

log = logging.getLogger(__name__)
MAX_FRAME_BYTES = 1 << 30
SEND_BUFFER = 2  # messages queued per pipe before a send blocks


def _buf(frame: bytearray):
    # pynng hands the buffer to nng_send via cffi, which takes a cdata pointer, not a bytearray.
    return pynng.ffi.from_buffer(frame)


def _ms(timeout: float) -> int:
    return max(0, int(timeout * 1000))


class _Endpoint:
    def __init__(self, sock: pynng.Socket) -> None:
        self.sock = sock
        self.rejected = 0
        self._closed = False

    def _recv_raw(self, timeout: float) -> bytes | None:
        try:
            if timeout <= 0:
                return self.sock.recv(block=False)
            self.sock.recv_timeout = _ms(timeout)
            return self.sock.recv()
        except (pynng.Timeout, pynng.TryAgain):
            return None

    def _recv(self, timeout: float):
        while True:
            raw = self._recv_raw(timeout)
            if raw is None:
                return None
            try:
                return decode(raw, MAX_FRAME_BYTES)
            except WireError as exc:
                self.rejected += 1
                log.warning("dropped a malformed frame (%d so far): %s", self.rejected, exc)
                timeout = 0  # keep serving: look for the next frame without blocking again

    def _send(self, sock: pynng.Socket, frame, timeout: float) -> bool:
        try:
            sock.send_timeout = max(1, _ms(timeout))
            sock.send(_buf(frame))
            return True
        except pynng.Timeout:
            return False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sock.close()


class NngPuller(_Endpoint):
    def recv(self, timeout: float):
        return self._recv(timeout)


class NngPusher(_Endpoint):
    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        return self._send(self.sock, encode(bundle, meta), timeout)


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
        self.sock.send(_buf(encode(bundle, meta)))  # Pub0 never blocks: slow subscribers drop


class NngReplyServer(_Endpoint):
    def __init__(self, transport: "NngTransport", stream: str) -> None:
        super().__init__(pynng.Pull0(listen=transport.address(stream), recv_max_size=MAX_FRAME_BYTES))
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
        sock = self.replies.get(client_id)
        if sock is None:
            sock = pynng.Push0(send_buffer_size=SEND_BUFFER)
            sock.dial(self.transport.address(f"{self.stream}-c{client_id}"), block=False)
            self.replies[client_id] = sock
        return self._send(sock, encode(bundle, meta), timeout)

    def close(self) -> None:
        if not self._closed:
            for sock in self.replies.values():
                sock.close()
            super().close()


class NngRequestClient(_Endpoint):
    def __init__(self, transport: "NngTransport", stream: str, client_id: int) -> None:
        super().__init__(pynng.Pull0(listen=transport.address(f"{stream}-c{client_id}"), recv_max_size=MAX_FRAME_BYTES))
        self.client_id = client_id
        self.requests = pynng.Push0(send_buffer_size=SEND_BUFFER)
        self.requests.dial(transport.address(stream), block=False)

    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        return self._send(self.requests, encode(bundle, {**meta, "client_id": self.client_id}), timeout)

    def recv(self, timeout: float):
        return self._recv(timeout)

    def close(self) -> None:
        if not self._closed:
            self.requests.close()
            super().close()


class NngTransport:
    """Endpoints over ``ipc://<base_dir>/zoo-<run_id>/<stream>.ipc``.

    The controller creates the run directory (``create=True``); workers attach to it.
    :meth:`cleanup` removes the directory and its socket files.
    """

    name = "nng"

    def __init__(self, run_id: str, base_dir: str | None = None, create: bool = False) -> None:
        self.dir = os.path.join(base_dir or tempfile.gettempdir(), f"zoo-{run_id}")
        if create:
            os.makedirs(self.dir, exist_ok=True)

    def address(self, stream: str) -> str:
        return f"ipc://{self.dir}/{stream}.ipc"

    def reply_server(self, stream: str) -> NngReplyServer:
        return NngReplyServer(self, stream)

    def request_client(self, stream: str, client_id: int) -> NngRequestClient:
        return NngRequestClient(self, stream, client_id)

    def puller(self, stream: str) -> NngPuller:
        return NngPuller(pynng.Pull0(listen=self.address(stream), recv_max_size=MAX_FRAME_BYTES))

    def pusher(self, stream: str) -> NngPusher:
        sock = pynng.Push0(send_buffer_size=SEND_BUFFER)
        sock.dial(self.address(stream), block=False)
        return NngPusher(sock)

    def publisher(self, stream: str) -> NngPublisher:
        return NngPublisher(pynng.Pub0(listen=self.address(stream)))

    def subscriber(self, stream: str) -> NngSubscriber:
        sock = pynng.Sub0(recv_max_size=MAX_FRAME_BYTES, recv_buffer_size=4)
        sock.subscribe(b"")
        sock.dial(self.address(stream), block=False)
        return NngSubscriber(sock)

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
