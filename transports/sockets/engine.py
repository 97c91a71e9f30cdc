"""A small socket engine for the three patterns over stream sockets (TCP or Unix), stdlib only.

This module holds connections, addresses and the listening / dialing endpoint bases; the
pattern endpoints are in :mod:`zoo.transports.sockets.patterns`. Used by the ``tcp`` transport
(frames travel inline) and by ``shm`` (the same connections carry slot indices; frames lie
in shared memory — see :mod:`zoo.transports.shm.transport`).

How it works
------------
- The binding side (puller, reply server, publisher) listens; the other side dials and
  sends a HELLO record first (run id, stream, role, client id, pid, optional token). Start
  order does not matter: a dialer retries (backoff 20..200 ms) within the timeout of the
  call that needs the connection. A broken connection is redialled by the next call.
- Receiving is **thread-free**: ``recv``/``latest`` poll the sockets (epoll) themselves, up
  to their timeout, busy-polling first while recent waits were short
  (:mod:`zoo.transports.sockets.spin`, option ``spin_us``). A listener stops reading a connection while
  :data:`MAX_QUEUED_PER_CONN` of its messages wait to be consumed, so memory stays bounded
  and back-pressure reaches the producer through the kernel's socket buffers.
- Sending writes with non-blocking ``sendmsg`` (contiguous arrays are not copied) while the
  peer keeps reading. ``send`` returns ``False`` when *nothing* of the frame could be written
  before its timeout (back-pressure). Once part of a frame is written, if the peer stops
  reading for :data:`STALL_S` (or the timeout passes) the rest is copied and handed to a
  per-connection writer thread and ``send`` returns ``True``: the frame is committed and
  arrives without further calls. The next ``send`` waits (up to its timeout) for that writer
  to finish. Memory per connection: kernel buffers + one frame.
- ``close()`` is idempotent; it first lets writer threads finish a committed frame for up to
  :data:`LINGER_S`. A call blocked in another thread wakes up (self-pipe) and returns
  ``None``/``False``; calls made after ``close()`` raise :class:`TransportError`.
- Every received FRAME is checked by :func:`zoo.core.arrays.decode`; a malformed one is
  counted in ``rejected``, logged and dropped, and the endpoint keeps serving. A corrupt
  record stream (bad record magic, unknown kind, oversized length) drops only that
  connection (also counted in ``rejected``).
- Before a peer is authenticated a listener reads only its HELLO: at most
  :data:`~zoo.transports.sockets.framing.MAX_HELLO_BYTES`, into a buffer of that size; any
  other first record closes the connection, and the read buffers of a connection
  (:data:`STAGING_BYTES`, large frames) are allocated only once its HELLO is accepted. A
  peer that has not completed its HELLO within ``handshake_timeout_s`` (default
  :data:`DEFAULT_HANDSHAKE_TIMEOUT_S`) is dropped, and a listener holding
  ``max_connections`` connections (default :func:`default_max_connections`), or whose
  process is out of file descriptors (a reserve descriptor is freed to accept and close
  the connection), closes new ones at once.
- Every peer turned away before it is authenticated — a HELLO refused (with a token
  configured, one that lacks it; another run, stream or role), another first record, a
  handshake timeout, the connection cap — is counted in ``refused`` and per reason in
  ``refusals``, and logged with its address, at most one line per reason every
  :data:`REFUSAL_LOG_INTERVAL_S` (:class:`RefusalLog`).

Endpoints are meant for one thread at a time (plus ``close()`` from any thread).
"""
from __future__ import annotations

import collections
import errno
import hmac
import ipaddress
import logging
import math
import os
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from zoo.core.arrays import Layout, WireError, decode
from zoo.core.transport import TransportError
from zoo.transports.sockets.framing import (
    FRAME,
    HELLO,
    KINDS,
    MAX_CONTROL_BYTES,
    MAX_HELLO_BYTES,
    PROTOCOL_VERSION,
    REC,
    REC_MAGIC,
    SLOT,
    json_record,
    parse_json,
    record_header,
    wire_magic_ok,
)
from zoo.transports.sockets.spin import DEFAULT_SPIN_US, AdaptiveSpin

log = logging.getLogger("zoo.transports")

LINGER_S = 1.0
"""Seconds ``close()`` waits for writer threads to finish frames already committed by ``send``."""
STAGING_BYTES = 256 << 10
"""Per-connection read buffer; FRAME records larger than half of it are read into their own buffer."""
READ_CHUNK = 64 << 10
"""Bytes asked of one ``recv`` into the staging buffer."""
MAX_QUEUED_PER_CONN = 4
"""A listener stops reading a connection while this many of its messages wait in ``recv``'s queue."""
HARD_QUEUED_PER_CONN = 64
"""Upper bound when a connection must be read anyway (to find a control record behind data)."""
CONNECT_BACKOFF_S = (0.02, 0.2)
CONTROL_DEFER_S = 0.002
"""Longest a deferred control record waits for a write to ride along with (while polling)."""
STALL_S = 0.02
"""A started frame whose peer reads nothing for this long is handed to the writer thread."""
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
"""Seconds a listener waits for a new connection's HELLO before dropping it (option ``handshake_timeout_s``)."""
DEFAULT_MAX_CONNECTIONS = 1024
"""Connections one listener holds at most, unless the file-descriptor limit asks for fewer
(:func:`default_max_connections`; option ``max_connections``)."""
REFUSAL_LOG_INTERVAL_S = 10.0
"""A listener logs at most one refusal line per reason in this many seconds (:class:`RefusalLog`)."""
_IOV = 512
_SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)
_LISTEN = object()


class ConnClosed(Exception):
    """The peer closed the connection (EOF) or it failed."""


class ProtocolError(Exception):
    """The record stream of one connection is corrupt; that connection is dropped."""


def _nbytes(part) -> int:
    return part.nbytes if type(part) is memoryview else len(part)


def _advance(views: list[memoryview], n: int) -> list[memoryview]:
    while n:
        first = views[0]
        if n >= first.nbytes:
            n -= first.nbytes
            views.pop(0)
        else:
            views[0] = first[n:]
            n = 0
    return views


class Conn:
    """One connection: a record parser for reading and a writer with an optional background thread.

    ``max_frame`` bounds FRAME payloads in bytes. Attributes used by endpoints: ``hello``
    (the peer's HELLO dict, listeners only), ``client_id``, ``queued`` (messages of this
    connection waiting to be consumed), ``closed``, ``peer`` (address for logs). ``shm`` state
    (rings, grants) is attached by the shm endpoints as ``conn.shm``.

    ``authenticated=False`` (a listener's new connection): :meth:`read` returns nothing but
    one HELLO of at most :data:`~zoo.transports.sockets.framing.MAX_HELLO_BYTES`, read into a
    buffer of that size; the staging buffer is allocated by :meth:`authenticate`.
    """

    def __init__(self, sock: socket.socket, peer: str, max_frame: int, authenticated: bool = True) -> None:
        sock.setblocking(False)
        self.sock, self.peer, self.max_frame = sock, peer, max_frame
        self.hello: dict[str, Any] | None = None
        self.client_id: int | None = None
        self.closed = False
        self.error: BaseException | None = None
        self.queued = 0
        self.registered = False
        self.shm: Any = None
        self.ctrl: list[bytes] = []  # control records waiting to ride along with the next write
        self.ctrl_since = 0.0
        self._stage: bytearray | None = None
        self._stage_mv: memoryview | None = None
        self._hello_head: bytearray | None = None  # before authentication: the HELLO's header,
        self._hello_body: bytearray | None = None  # then its payload (at most MAX_HELLO_BYTES)
        self._got = 0
        if authenticated:
            self.authenticate()
        else:
            self._hello_head = bytearray(REC.size)
        self._r = self._w = 0
        self._big: np.ndarray | None = None
        self._filled = 0
        self._cond = threading.Condition(threading.Lock())
        self._tail: list[memoryview] = []
        self._next: list[memoryview] | None = None
        self._writer: threading.Thread | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    # -- reading -------------------------------------------------------------------
    def authenticate(self) -> None:
        """Allocate the read buffers: from now on :meth:`read` returns every kind of record."""
        if self._stage is None:
            self._stage = bytearray(STAGING_BYTES)
            self._stage_mv = memoryview(self._stage)  # never resized: records are sliced out of it
            self._hello_head = self._hello_body = None

    @property
    def authenticated(self) -> bool:
        """Whether :meth:`authenticate` was called (dialers' connections are from the start)."""
        return self._stage is not None

    def read(self) -> list[tuple[int, Any]]:
        """Read what the socket holds now (non-blocking) and return the complete records.

        Stops after the first ``recv`` that completes a FRAME or SLOT record, so one call reads
        at most :data:`STAGING_BYTES` or one large frame. Before :meth:`authenticate`, reads
        only the first record, which must be a HELLO of at most
        :data:`~zoo.transports.sockets.framing.MAX_HELLO_BYTES` (:meth:`_read_hello`).

        Raises:
            ConnClosed: EOF or a socket error.
            ProtocolError: bad record magic, unknown kind, oversized length, or a large
                FRAME whose payload does not start with the wire magic; before
                authentication, a first record that is not a HELLO or a HELLO over the bound.
        """
        if self._stage is None:
            return self._read_hello()
        stage_mv = self._stage_mv
        assert stage_mv is not None, "allocated with _stage"
        out: list[tuple[int, Any]] = []
        while True:
            if self._parse(out):
                return out
            try:
                if self._big is not None:
                    asked = self._big.nbytes - self._filled
                    n = self.sock.recv_into(self._big.data[self._filled:])
                else:
                    if self._r and len(self._stage) - self._w < MAX_CONTROL_BYTES + REC.size:
                        avail = self._w - self._r
                        self._stage[:avail] = self._stage[self._r:self._w]
                        self._r, self._w = 0, avail
                    if self._w == len(self._stage):  # cannot happen: every staged record fits in half
                        raise ProtocolError("record parser stalled with a full staging buffer")
                    # At most READ_CHUNK at a time: a large frame's first bytes are copied once
                    # more (staging -> its own buffer), so keep that copy small.
                    asked = min(READ_CHUNK, len(self._stage) - self._w)
                    n = self.sock.recv_into(stage_mv[self._w:self._w + asked])
            except (BlockingIOError, InterruptedError):
                return out
            except OSError as exc:
                raise ConnClosed(str(exc)) from None
            if n == 0:
                if out:
                    return out  # deliver what came before the EOF; the next read reports it
                raise ConnClosed("peer closed the connection")
            if self._big is not None:
                self._filled += n
                if self._filled == self._big.nbytes:
                    out.append((FRAME, self._big))
                    self._big = None
                    return out
            else:
                self._w += n
            if n < asked:  # the socket is drained: spare the recv that would raise BlockingIOError
                self._parse(out)
                return out

    def _read_hello(self) -> list[tuple[int, Any]]:
        """Before authentication: ``[(HELLO, payload)]`` once the first record has arrived, else
        ``[]``; reads no byte past it (what follows waits in the socket for :meth:`read`)."""
        head = self._hello_head
        assert head is not None, "set until authenticate"
        while True:
            body = self._hello_body
            buf = memoryview(head if body is None else body)[self._got:]
            if buf.nbytes:
                try:
                    n = self.sock.recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    return []
                except OSError as exc:
                    raise ConnClosed(str(exc)) from None
                if n == 0:
                    raise ConnClosed("peer closed the connection")
                self._got += n
                if n < buf.nbytes:
                    return []
            if body is not None:
                self._hello_body, self._got = None, 0
                return [(HELLO, bytes(body))]
            magic, kind, length = REC.unpack_from(head)
            if magic != REC_MAGIC:
                raise ProtocolError(f"bad record magic {bytes(magic)!r} (expected {REC_MAGIC!r})")
            if kind != HELLO:
                raise ProtocolError(f"first record is {KINDS.get(kind, f'of unknown kind {kind}')}, expected HELLO")
            if length > MAX_HELLO_BYTES:
                raise ProtocolError(f"HELLO declares {length} bytes, over the limit of {MAX_HELLO_BYTES}")
            self._hello_body, self._got = bytearray(length), 0

    def _parse(self, out: list[tuple[int, Any]]) -> bool:
        """Append the complete records staged so far to ``out``; True if one of them is a FRAME or SLOT."""
        stage, stage_mv, data = self._stage, self._stage_mv, False
        assert stage is not None and stage_mv is not None, "records are parsed after authenticate"
        while self._big is None:
            avail = self._w - self._r
            if avail < REC.size:
                break
            magic, kind, length = REC.unpack_from(stage, self._r)
            if magic != REC_MAGIC:
                raise ProtocolError(f"bad record magic {bytes(magic)!r} (expected {REC_MAGIC!r})")
            if kind not in KINDS:
                raise ProtocolError(f"unknown record kind {kind}")
            limit = self.max_frame if kind == FRAME else MAX_CONTROL_BYTES
            if length > limit:
                raise ProtocolError(f"{KINDS[kind]} record declares {length} bytes, over the limit of {limit}")
            start, body = self._r + REC.size, avail - REC.size
            if body >= length:
                out.append((kind, bytes(stage_mv[start:start + length])))
                self._r = start + length
                data = data or kind == FRAME or kind == SLOT
                continue
            if kind == FRAME and length + REC.size > len(stage) // 2:
                if body < 8:
                    break
                if not wire_magic_ok(memoryview(stage)[start:start + 8]):
                    raise ProtocolError("FRAME payload does not start with the wire-format magic")
                big = np.empty(length, np.uint8)
                big[:body] = np.frombuffer(stage, np.uint8, body, start)
                self._big, self._filled = big, body
                self._r = self._w = 0
            break
        if self._r == self._w:
            self._r = self._w = 0
        return data

    # -- writing -------------------------------------------------------------------
    def _send_nb(self, views: list[memoryview]) -> tuple[list[memoryview], int]:
        """Send without blocking; returns (what is left, bytes sent). Marks the connection broken on error."""
        sent = 0
        while views:
            try:
                n = self.sock.sendmsg(views[:_IOV], (), _SEND_FLAGS)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._broken(exc)
                return [], sent
            sent += n
            views = _advance(views, n)
        return views, sent

    def _broken(self, exc: BaseException) -> None:
        self.closed = True
        self.error = exc

    @property
    def busy(self) -> bool:
        """Whether the writer thread still holds bytes of a committed frame."""
        return bool(self._tail) or self._next is not None

    def write(self, parts: list, deadline: float, abort: Callable[[], bool] = lambda: False) -> bool:
        """Write one record (``parts`` concatenated) before ``deadline`` (``time.monotonic()``).

        Returns False — with nothing of the record written — when the connection is broken or
        the previous record is still being written, or the socket stays full, until the
        deadline or until ``abort()`` is true. Returns True once the record is committed:
        fully written, or started and its (copied) rest handed to the writer thread.
        """
        with self._cond:
            while self.busy and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0 or abort():
                    return False
                self._cond.wait(min(left, 0.05))
            if self.closed:
                return False
            started = False
            if len(parts) <= _IOV:
                # Usually one sendmsg takes the whole record: no views to build or advance.
                try:
                    sent = self.sock.sendmsg(parts, (), _SEND_FLAGS)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError as exc:
                    self._broken(exc)
                    return False
                if sent == sum(map(_nbytes, parts)):
                    return True
                started = sent > 0
                views = _advance([memoryview(p) for p in parts if len(p)], sent)
            else:
                views = [memoryview(p) for p in parts if len(p)]
            progress = time.monotonic()
            while True:
                views, sent = self._send_nb(views)
                now = time.monotonic()
                if sent:
                    started, progress = True, now
                if self.closed:
                    return False
                if not views:
                    return True
                left = deadline - now
                if left <= 0 or abort() or (started and now - progress > STALL_S):
                    if not started:
                        return False
                    self._tail = [memoryview(bytes(v)) for v in views]  # the caller may reuse its arrays
                    self._start_writer()
                    return True
                self._cond.release()
                try:
                    select.select([], [self.sock], [], min(left, STALL_S if started else 0.05))
                except (OSError, ValueError):
                    pass
                finally:
                    self._cond.acquire()

    def offer_latest(self, parts: list) -> None:
        """Publisher path: send ``parts`` (owned, never modified) now if the socket is free,
        otherwise make them the next record the writer thread sends, replacing an older one."""
        with self._cond:
            if self.closed:
                return
            views = [memoryview(p) for p in parts if len(p)]
            if self.busy:
                self._next = views
                return
            left, sent = self._send_nb(views)
            if self.closed or not left:
                return
            if sent:
                self._tail = left
            else:
                self._next = left
            self._start_writer()

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name=f"zoo-writer {self.peer}", daemon=True)
            self._writer.start()
        else:
            self._cond.notify_all()

    def _write_loop(self) -> None:
        with self._cond:
            try:
                while not self.closed:
                    if not self._tail and self._next is not None:
                        self._tail, self._next = self._next, None
                    if not self._tail:
                        break
                    self._tail, _ = self._send_nb(self._tail)
                    if self._tail and not self.closed:
                        self._cond.release()
                        try:
                            select.select([], [self.sock], [], 0.05)
                        except (OSError, ValueError):
                            pass
                        finally:
                            self._cond.acquire()
            finally:
                if self.closed:
                    self._tail, self._next = [], None
                self._writer = None
                self._cond.notify_all()

    def close(self, linger_deadline: float = 0.0) -> None:
        """Close (idempotent), first waiting until ``linger_deadline`` for a committed frame to be written."""
        with self._cond:
            while self.busy and not self.closed and time.monotonic() < linger_deadline:
                self._cond.wait(0.05)
            self.closed = True
            self._cond.notify_all()
            writer = self._writer
        if writer is not None and writer is not threading.current_thread():
            writer.join(1.0)
        try:
            self.sock.close()
        except OSError:
            pass


# -- addresses -------------------------------------------------------------------------
TCP_BUFFER_BYTES = 4 << 20
"""Socket send/receive buffer asked for on TCP connections (the kernel caps it at
``net.core.wmem_max`` / ``rmem_max``); large frames then need fewer wake-ups."""


def tune_tcp(sock: socket.socket) -> None:
    """No Nagle delay (requests are latency-bound) and large socket buffers."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, TCP_BUFFER_BYTES)
        except OSError:
            pass

class Published:
    """Where a listener's address goes: ``resolver`` (:mod:`zoo.core.resolver`) under ``key``.

    :meth:`publish` stores the address with an ``owner`` token unique to this object;
    :meth:`withdraw` removes the key only while it still holds that token (a listener that
    took over the key meanwhile keeps it).
    """

    def __init__(self, resolver, key: str) -> None:
        self.resolver, self.key = resolver, key
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}:{time.monotonic_ns()}"

    def publish(self, address: dict[str, Any]) -> None:
        self.resolver.publish(self.key, {**address, "pid": os.getpid(), "owner": self.owner})

    def get(self) -> dict[str, Any] | None:
        return self.resolver.get(self.key)

    def withdraw(self) -> None:
        try:
            found = self.resolver.get(self.key)
            if found is not None and found.get("owner") == self.owner:
                self.resolver.remove(self.key)
        except Exception:  # noqa: BLE001 - closing must not fail because the resolver is gone
            log.debug("could not withdraw %s", self.key, exc_info=True)


class UnixAddress:
    """A Unix stream socket at ``path`` (at most 107 bytes, the kernel's limit), published as
    ``{"path"}`` under ``published.key``; dialers connect to the published path."""

    def __init__(self, path: str, published: Published) -> None:
        if len(path.encode()) > 107:
            raise TransportError(f"socket path {path!r} is longer than the 107-byte Unix limit; "
                                 "use a shorter run id, stream name or base_dir")
        self.path, self.published = path, published

    def __str__(self) -> str:
        return f"unix:{self.path}"

    def listen(self) -> socket.socket:
        """Bind, listen and publish; a stale socket file is replaced, a live listener is an error.

        Raises:
            TransportError: another endpoint is listening on this path.
        """
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if os.path.exists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(self.path)
                raise TransportError(f"{self}: another endpoint already listens here")
            except OSError:
                os.unlink(self.path)
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        sock.listen(128)
        self.published.publish({"path": self.path})
        return sock

    def connect(self, timeout: float) -> socket.socket | None:
        found = self.published.get()
        path = found.get("path") if found else None
        if not isinstance(path, str):
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(timeout, 0.001))
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            return None

    def unpublish(self) -> None:
        self.published.withdraw()
        try:
            os.unlink(self.path)
        except OSError:
            pass


class TcpAddress:
    """A TCP listener on ``host`` and an OS-chosen port, published as ``{"host", "port", ...}``
    (:func:`publish_port`) under ``published.key``.

    ``connect_host`` overrides where dialers connect (default: the published address, see
    :func:`dial_host`).
    """

    def __init__(self, published: Published, host: str = "127.0.0.1", connect_host: str | None = None) -> None:
        self.published, self.host, self.connect_host = published, host, connect_host

    def __str__(self) -> str:
        return f"tcp:{self.published.key}"

    def listen(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        sock.listen(128)
        publish_port(self.published, self.host, sock.getsockname()[1])
        return sock

    def connect(self, timeout: float) -> socket.socket | None:
        found = read_port(self.published, self.connect_host)
        if found is None:
            return None
        host, port = found
        try:
            sock = socket.create_connection((host, port), timeout=max(timeout, 0.001))
        except OSError:
            return None
        tune_tcp(sock)
        return sock

    def unpublish(self) -> None:
        self.published.withdraw()


def is_loopback(host: str) -> bool:
    """Whether ``host`` names the loopback interface (``localhost``, ``127.x.y.z``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_resolvable(host: str | None, option: str) -> None:
    """Raise :class:`TransportError` naming ``option`` if ``host`` does not resolve (else a
    listener would fail in its worker, and a dialer retry until the run is stopped).

    Raises:
        TransportError: ``getaddrinfo`` failed for ``host``.
    """
    if not host:
        return
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as exc:
        raise TransportError(f"{option}={host!r} does not resolve to an address ({exc}); give an IP "
                             "address or a host name this machine can resolve") from None


WILDCARDS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}


def publish_port(published: Published, host: str, port: int) -> None:
    """Publish ``{"host", "port", "hostname"}`` of a listener bound to ``host``:``port``.

    ``hostname`` (:func:`advertised_host`) lets a dialer on another machine reach a
    listener bound to a wildcard address (see :func:`dial_host`).
    """
    published.publish({"host": host, "port": int(port), "hostname": advertised_host()})


def advertised_host() -> str:
    """The name other machines reach this one by: ``ZOO_ADVERTISE_HOST`` when set (the ``ray``
    launcher sets it to the Ray node's IP address), else :func:`socket.gethostname`."""
    return os.environ.get("ZOO_ADVERTISE_HOST") or socket.gethostname()


def dial_host(info: dict[str, Any], connect_host: str | None = None) -> str:
    """Where to dial a published listener: ``connect_host`` if given; else its bound host,
    where a wildcard bind (``0.0.0.0``, ``::``) is loopback on the listener's own machine
    and its ``hostname`` from any other."""
    if connect_host:
        return connect_host
    host = info["host"]
    if host in WILDCARDS:
        other = info.get("hostname")
        return other if other and other != advertised_host() else WILDCARDS[host]
    return host


def read_port(published: Published, connect_host: str | None = None) -> tuple[str, int] | None:
    """``(host, port)`` to dial, or None while nothing valid is published (:func:`dial_host`)."""
    info = published.get()
    if info is None:
        return None
    try:
        return dial_host(info, connect_host), int(info["port"])
    except (KeyError, TypeError, ValueError):
        return None


# -- endpoints -------------------------------------------------------------------------
def _reserve_fd() -> int | None:
    """A spare descriptor (``/dev/null``) a listener frees when ``accept`` fails for want of
    descriptors; None if none is left."""
    try:
        return os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def default_max_connections(nofile: int | None = None) -> int:
    """The default cap of one listener: :data:`DEFAULT_MAX_CONNECTIONS`, or a quarter of the
    process's soft file-descriptor limit ``nofile`` (default: ``RLIMIT_NOFILE``) if that is
    lower, at least 16 — a process holds several listeners, and a listener whose ``accept``
    fails for want of descriptors cannot even refuse."""
    if nofile is None:
        try:
            import resource

            nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if nofile == resource.RLIM_INFINITY:
                return DEFAULT_MAX_CONNECTIONS
        except (ImportError, OSError, ValueError):
            return DEFAULT_MAX_CONNECTIONS
    return max(16, min(DEFAULT_MAX_CONNECTIONS, nofile // 4))


class RefusalLog:
    """Warnings about refused peers, at most one line per reason every ``interval_s`` seconds.

    A line logged after others were held back says how many; :meth:`flush` (at close) logs
    one line per reason that still holds some back. A fuzzer or a port scanner thus costs a
    bounded number of lines: per reason, ``1 + elapsed / interval_s``, plus one at close.
    """

    def __init__(self, owner: str, interval_s: float = REFUSAL_LOG_INTERVAL_S) -> None:
        self.owner, self.interval_s = owner, interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, reason: str, peer: str, why: str) -> None:
        """Log ``<owner> refused peer <peer>: <why>`` unless a line for ``reason`` was logged
        less than ``interval_s`` ago (then only count it)."""
        now = time.monotonic()
        last = self._last.get(reason)
        if last is not None and now - last < self.interval_s:
            self._held[reason] = self._held.get(reason, 0) + 1
            return
        self._last[reason] = now
        held = self._held.pop(reason, 0)
        more = f" ({held} more refused for this reason since the last such line)" if held else ""
        log.warning("%s refused peer %s: %s%s", self.owner, peer, why, more)

    def flush(self) -> None:
        """One line per reason whose refusals were held back since its last line."""
        for reason, held in self._held.items():
            log.warning("%s refused %d more peers (%s) since the last such line", self.owner, held, reason)
        self._held.clear()


class Endpoint:
    """What every endpoint shares: the selector, the self-pipe, the queue of received messages.

    Attributes:
        rejected: malformed frames and corrupt connections dropped so far.
        refused: listeners: peers turned away before authentication (see :attr:`Server.refusals`).
    """

    role = "endpoint"

    def __init__(self, run_id: str, stream: str, max_frame_bytes: int, token: str | None) -> None:
        self.run_id, self.stream = run_id, stream
        self.max_frame_bytes = max_frame_bytes
        self.token = token
        self.rejected = 0
        self.refused = 0
        self._lock = threading.RLock()
        self._closed = False
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._ready: collections.deque[tuple[Conn, int, Any]] = collections.deque()
        self._deferred: set[Conn] = set()  # connections that may hold deferred control records
        self._pending: dict[Conn, float] = {}  # listeners: connections without a HELLO yet -> deadline
        self._spin = AdaptiveSpin(DEFAULT_SPIN_US)

    def set_spin_us(self, spin_us: int) -> None:
        """Busy-poll budget of each wait, in microseconds (0: block at once); see
        :mod:`zoo.transports.sockets.spin`."""
        self._spin = AdaptiveSpin(spin_us)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.stream!r} of run {self.run_id!r}>"

    # -- helpers for subclasses -----------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise TransportError(f"{self!r} is closed")

    def _is_closed(self) -> bool:
        return self._closed

    def _reject(self, conn: Conn | None, why: BaseException | str) -> None:
        self.rejected += 1
        if self.rejected <= 10 or self.rejected % 100 == 0:
            peer = f" from {conn.peer}" if conn is not None else ""
            log.warning("%r dropped a malformed message%s (%d so far): %s", self, peer, self.rejected, why)

    def _register(self, conn: Conn) -> None:
        if not conn.registered and not conn.closed:
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            conn.registered = True

    def _unregister(self, conn: Conn) -> None:
        if conn.registered:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.registered = False

    def _poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for socket events and handle all of them.

        Deferred control records are flushed before blocking (and once older than
        :data:`CONTROL_DEFER_S`), so a peer waiting for them (e.g. for a slot grant) is never
        stuck behind this endpoint's wait.
        """
        if self._deferred:
            stale = time.monotonic() - CONTROL_DEFER_S
            for conn in list(self._deferred):
                if conn.ctrl and (timeout > 0 or conn.ctrl_since < stale):
                    self._flush_control(conn)
                if not conn.ctrl or conn.closed:
                    self._deferred.discard(conn)
        if self._pending:
            timeout = self._expire_handshakes(timeout)
        try:
            events = self._select(timeout)
        except (OSError, ValueError):
            if self._closed:
                return
            raise
        for key, _ in events:
            obj = key.data
            if obj is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except OSError:
                    pass
            elif obj is _LISTEN:
                self._accept()
            elif obj.registered:
                self._read(obj)

    def _select(self, timeout: float) -> list:
        """The selector's events within ``timeout`` s, spinning first while waits are short
        (:class:`~zoo.transports.sockets.spin.AdaptiveSpin`)."""
        events = self._sel.select(0)
        if events or timeout <= 0:
            return events
        return self._spin.wait(self._poll_now, self._sel.select, timeout)

    def _poll_now(self) -> list:
        return self._sel.select(0)

    def _expire_handshakes(self, timeout: float) -> float:
        """Listeners: drop the connections whose HELLO is overdue; ``timeout`` shortened to the next deadline."""
        return timeout

    def _read(self, conn: Conn) -> None:
        try:
            records = conn.read()
        except ConnClosed:
            self._drop(conn)
            return
        except ProtocolError as exc:
            self._reject(conn, exc)
            self._drop(conn)
            return
        for kind, payload in records:
            if conn.closed:
                break
            try:
                self._dispatch(conn, kind, payload)
            except (WireError, ProtocolError) as exc:
                self._reject(conn, exc)
                self._drop(conn)
                return
        if conn.queued >= MAX_QUEUED_PER_CONN:
            self._unregister(conn)

    def _force_read(self, conn: Conn) -> None:
        """Read a throttled connection once (to reach a control record queued behind data)."""
        if not conn.closed and conn.queued < HARD_QUEUED_PER_CONN:
            try:
                readable = select.select([conn.sock], [], [], 0)[0]
            except (OSError, ValueError):
                readable = []
            if readable:
                self._read(conn)

    def _dispatch(self, conn: Conn, kind: int, payload: Any) -> None:
        if kind == FRAME:
            self._queue(conn, kind, payload)
        else:
            self._on_control(conn, kind, payload)

    def _on_control(self, conn: Conn, kind: int, payload: bytes) -> None:
        raise ProtocolError(f"unexpected {KINDS[kind]} record on {self.role} {self.stream!r}")

    def _queue(self, conn: Conn, kind: int, payload: Any) -> None:
        self._ready.append((conn, kind, payload))
        conn.queued += 1

    def _pop(self) -> tuple[Conn, int, Any]:
        conn, kind, payload = self._ready.popleft()
        conn.queued -= 1
        if conn.queued < MAX_QUEUED_PER_CONN and not conn.closed and self._accepts_reads(conn):
            self._register(conn)
        return conn, kind, payload

    def _accepts_reads(self, conn: Conn) -> bool:
        return True

    def _accept(self) -> None:
        """Accept the connections waiting on the listening socket (only a :class:`Server` listens)."""
        raise NotImplementedError(f"{type(self).__name__} does not listen")

    def _wait(self, deadline: float, cond: Callable[[], Any]) -> bool:
        """Handle socket events until ``cond()`` holds (True) or ``deadline`` passes / close (False)."""
        while not cond():
            if self._closed:
                return False
            left = deadline - time.monotonic()
            self._poll(left)
            if left <= 0:
                return bool(cond()) and not self._closed
        return True

    def _drop(self, conn: Conn) -> None:
        self._unregister(conn)
        conn.close()
        self._on_disconnect(conn)

    def _on_disconnect(self, conn: Conn) -> None:
        pass

    def _write(self, conn: Conn, parts: list, deadline: float) -> bool:
        """Write one record (plus any deferred control records) on ``conn``; see :meth:`Conn.write`."""
        ctrl = conn.ctrl
        if ctrl:
            conn.ctrl = []
            parts = [*ctrl, *parts]
        ok = conn.write(parts, deadline, self._is_closed)
        if conn.closed:
            self._drop(conn)
            return False
        if not ok and ctrl:
            conn.ctrl = ctrl + conn.ctrl
        return ok

    def _send_control(self, conn: Conn, record: bytes, urgent: bool = True) -> None:
        """Send a control record now (``urgent``) or let it ride along with the next write on
        ``conn`` — at the latest before this endpoint blocks waiting (:meth:`_poll`)."""
        if not conn.ctrl:
            conn.ctrl_since = time.monotonic()
        conn.ctrl.append(record)
        self._deferred.add(conn)
        if urgent:
            self._flush_control(conn)

    def _flush_control(self, conn: Conn) -> None:
        if conn.ctrl and not conn.closed:
            self._write(conn, [], time.monotonic() + 0.5)

    def _frame_of(self, conn: Conn, kind: int, payload: Any):
        """The wire frame of a queued message (shm copies it out of its slot); None to skip it."""
        return payload

    def _recv_message(self, timeout: float):
        """``(bundle, meta)`` of the next message, or None after ``timeout`` s.

        Raises:
            TransportError: called after ``close()``.
        """
        with self._lock:
            self._check_open()
            got = self._decode_next(time.monotonic() + max(0.0, timeout))
            return None if got is None else got[1]

    def _send_layout(self, conn: Conn, lay: Layout, deadline: float) -> bool:
        """Write one laid-out frame as a FRAME record (shm overrides this to send a slot index)."""
        return self._write(conn, [record_header(FRAME, lay.size), *lay.parts()], deadline)

    def _decode_next(self, deadline: float):
        """Pop queued messages until one decodes, waiting until ``deadline``; None on timeout/close."""
        while self._wait(deadline, lambda: self._ready):
            conn, kind, payload = self._pop()
            frame = self._frame_of(conn, kind, payload)
            if frame is None:
                continue
            try:
                return conn, decode(frame, self.max_frame_bytes)
            except WireError as exc:
                self._reject(conn, exc)
        return None

    def _check_size(self, lay: Layout) -> None:
        if lay.size > self.max_frame_bytes:
            raise WireError(f"frame of {lay.size} bytes exceeds this transport's max_frame_bytes="
                            f"{self.max_frame_bytes}; raise it (transport option max_frame_bytes)")

    def _conns(self) -> list[Conn]:
        return []

    def close(self) -> None:
        """Close every socket (idempotent); a call blocked in another thread returns None/False."""
        if self._closed:
            return
        self._closed = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        with self._lock:
            linger = time.monotonic() + LINGER_S
            for conn in self._conns():
                self._unregister(conn)
                conn.close(linger)
                self._on_disconnect(conn)
            self._shutdown()
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _shutdown(self) -> None:
        pass


class Server(Endpoint):
    """The listening side: accepts dialers, checks their HELLO, reads all of them.

    Before its HELLO is accepted a connection costs about 2 KiB (no read buffer) and
    may send nothing but that HELLO (see the module's docstring): it is dropped if the HELLO
    has not arrived ``handshake_timeout_s`` after the connection was accepted, and a
    connection accepted while ``max_connections`` are held, or when the process is out of
    file descriptors, is closed at once.

    Attributes:
        refusals: peers turned away before authentication, per reason: ``"token"`` (missing
            or wrong), ``"hello"`` (another protocol version, run, stream or role), ``"protocol"``
            (a first record other than a HELLO of at most
            :data:`~zoo.transports.sockets.framing.MAX_HELLO_BYTES`, or not JSON),
            ``"timeout"`` (no HELLO within ``handshake_timeout_s``), ``"capacity"``
            (``max_connections`` reached, or no file descriptor left). ``refused`` is their
            sum. A peer that closes before its HELLO is complete is dropped uncounted.
    """

    def __init__(self, address, run_id: str, stream: str, max_frame_bytes: int, token: str | None, *,
                 handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S,
                 max_connections: int | None = None) -> None:
        if max_connections is None:
            max_connections = default_max_connections()
        if not handshake_timeout_s > 0 or not math.isfinite(handshake_timeout_s):
            raise ValueError(f"handshake_timeout_s must be > 0 and finite, got {handshake_timeout_s}")
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        super().__init__(run_id, stream, max_frame_bytes, token)
        self.handshake_timeout_s = float(handshake_timeout_s)
        self.max_connections = int(max_connections)
        self.refusals: collections.Counter[str] = collections.Counter()
        self._refusal_log = RefusalLog(repr(self))
        self.address = address
        self._lsock = address.listen()
        self._lsock.setblocking(False)
        self._sel.register(self._lsock, selectors.EVENT_READ, _LISTEN)
        self.conns: set[Conn] = set()
        self._reserve = _reserve_fd()  # freed to refuse a connection when accept runs out of descriptors

    def _conns(self) -> list[Conn]:
        return list(self.conns)

    def _accept(self) -> None:
        while True:
            try:
                sock, addr = self._lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._refuse_without_descriptors():
                    continue
                return
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                peer = f"{addr[0]}:{addr[1]}"
            else:
                peer = f"{self.address}#{sock.fileno()}"
            if len(self.conns) >= self.max_connections:
                sock.close()
                self._refuse(peer, "capacity", f"it holds max_connections={self.max_connections} connections")
                continue
            conn = Conn(sock, peer, self.max_frame_bytes, authenticated=False)
            self.conns.add(conn)
            self._pending[conn] = time.monotonic() + self.handshake_timeout_s
            self._register(conn)
            self._read(conn)  # the HELLO is usually there already

    def _refuse_without_descriptors(self) -> bool:
        """Out of file descriptors: accept one waiting connection with the reserve descriptor
        and close it (else it would wait in the backlog, and the listening socket, readable,
        would wake every poll at once). False if there is no reserve or nothing to accept."""
        if self._reserve is None:
            self._reserve = _reserve_fd()  # a descriptor may have been freed since
            return False
        os.close(self._reserve)
        try:
            sock, addr = self._lsock.accept()
        except OSError:
            return False
        else:
            peer = f"{addr[0]}:{addr[1]}" if sock.family in (socket.AF_INET, socket.AF_INET6) else str(self.address)
            sock.close()
            self._refuse(peer, "capacity", "this process is out of file descriptors")
            return True
        finally:
            self._reserve = _reserve_fd()

    def _expire_handshakes(self, timeout: float) -> float:
        now = time.monotonic()
        while self._pending:
            conn, deadline = next(iter(self._pending.items()))  # in accept order: the oldest first
            if deadline > now:
                return min(timeout, deadline - now)
            self._refuse(conn.peer, "timeout", f"no HELLO within handshake_timeout_s={self.handshake_timeout_s:g}")
            self._drop(conn)  # also takes it out of _pending
        return timeout

    def _refuse(self, peer: str, reason: str, why: str) -> None:
        """Count a peer turned away before authentication under ``reason`` and log it (rate-limited)."""
        self.refused += 1
        self.refusals[reason] += 1
        self._refusal_log.warn(reason, peer, why)

    def _reject(self, conn: Conn | None, why: BaseException | str) -> None:
        if conn is not None and conn.hello is None:  # before authentication: a refusal, not a bad message
            self._refuse(conn.peer, "protocol", str(why))
            return
        super()._reject(conn, why)

    def _dispatch(self, conn: Conn, kind: int, payload: Any) -> None:
        if conn.hello is None:
            if kind != HELLO:
                raise ProtocolError(f"first record is {KINDS[kind]}, expected HELLO")
            self._handshake(conn, parse_json(payload))
            return
        super()._dispatch(conn, kind, payload)

    def _handshake(self, conn: Conn, hello: dict[str, Any]) -> None:
        key, reason = "hello", None
        if hello.get("v") != PROTOCOL_VERSION:
            reason = f"protocol version {hello.get('v')!r} (this side speaks {PROTOCOL_VERSION})"
        elif self.token is not None and not hmac.compare_digest(
                str(hello.get("token") or "").encode(), self.token.encode()):
            key, reason = "token", "missing or wrong token"
        elif hello.get("run") != self.run_id or hello.get("stream") != self.stream:
            reason = f"it belongs to run {hello.get('run')!r} stream {hello.get('stream')!r}"
        elif hello.get("role") != self.peer_role:
            reason = f"role {hello.get('role')!r} cannot talk to a {self.role}"
        if reason is not None:
            self._refuse(conn.peer, key, reason)
            self._drop(conn)
            return
        self._pending.pop(conn, None)
        conn.authenticate()
        if conn.sock.family in (socket.AF_INET, socket.AF_INET6):
            tune_tcp(conn.sock)  # large kernel buffers only for authenticated peers
        conn.hello = hello
        self._on_hello(conn)

    peer_role = ""

    def _on_hello(self, conn: Conn) -> None:
        pass

    def _drop(self, conn: Conn) -> None:
        self.conns.discard(conn)
        self._pending.pop(conn, None)
        super()._drop(conn)

    def _shutdown(self) -> None:
        self.conns.clear()
        self._pending.clear()
        self._refusal_log.flush()
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
        try:
            self._sel.unregister(self._lsock)
        except (KeyError, ValueError):
            pass
        self._lsock.close()
        self.address.unpublish()


class Client(Endpoint):
    """The dialing side: one connection, (re)established on demand within a call's timeout."""

    def __init__(self, address, run_id: str, stream: str, max_frame_bytes: int, token: str | None,
                 client_id: int | None = None) -> None:
        super().__init__(run_id, stream, max_frame_bytes, token)
        self.address = address
        self.client_id = client_id
        self.conn: Conn | None = None
        self._next_try = 0.0
        self._backoff = CONNECT_BACKOFF_S[0]

    def _conns(self) -> list[Conn]:
        return [self.conn] if self.conn is not None else []

    def _hello(self) -> dict[str, Any]:
        return {"v": PROTOCOL_VERSION, "run": self.run_id, "stream": self.stream, "role": self.role,
                "client_id": self.client_id, "pid": os.getpid(), "token": self.token}

    def _hello_record(self) -> bytes:
        """The HELLO record this dialer sends first.

        Raises:
            TransportError: its payload exceeds :data:`~zoo.transports.sockets.framing.MAX_HELLO_BYTES`
                (listeners would close the connection): a token, run id or stream name too long.
        """
        record = json_record(HELLO, self._hello())
        if len(record) - REC.size > MAX_HELLO_BYTES:
            raise TransportError(f"{self!r}: its HELLO of {len(record) - REC.size} bytes exceeds the "
                                 f"{MAX_HELLO_BYTES} a listener accepts; shorten the token, run id or stream name")
        return record

    def _send_frame(self, lay: Layout, timeout: float) -> bool:
        """Send one laid-out frame to the server; False (nothing sent) if there is no connection
        or no room within ``timeout`` s. Subclasses choose how the frame travels (``_send_layout``).

        Raises:
            WireError: the frame exceeds ``max_frame_bytes``.
            TransportError: called after ``close()``.
        """
        self._check_size(lay)
        with self._lock:
            self._check_open()
            deadline = time.monotonic() + max(0.0, timeout)
            conn = self._connect(deadline)
            if conn is None:
                return False
            # Read what the server sent (grants, an EOF) before writing; a plain read of the one
            # connection costs less than a poll through the selector, which is needed only to
            # flush deferred control records or to reach a throttled connection.
            if self._deferred or not conn.registered:
                self._poll(0)
            else:
                self._read(conn)
            if conn.closed:  # the connection turned out dead: dial again within the deadline
                conn = self._connect(deadline)
                if conn is None:
                    return False
            return self._send_layout(conn, lay, deadline)

    def _connect(self, deadline: float) -> Conn | None:
        """The live connection, dialling (with backoff) until ``deadline``; None if none by then."""
        while True:
            if self.conn is not None and not self.conn.closed:
                return self.conn
            if self.conn is not None:
                self._drop(self.conn)
            if self._closed:
                return None
            now = time.monotonic()
            if now >= self._next_try:
                sock = self.address.connect(max(0.05, deadline - now))
                if sock is not None:
                    conn = Conn(sock, str(self.address), self.max_frame_bytes)
                    self.conn = conn
                    self._register(conn)
                    self._backoff = CONNECT_BACKOFF_S[0]
                    if conn.write([self._hello_record()], time.monotonic() + 1.0):
                        self._on_connect(conn)
                    continue
                self._next_try = now + self._backoff
                self._backoff = min(2 * self._backoff, CONNECT_BACKOFF_S[1])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._poll(min(left, max(0.0, self._next_try - time.monotonic())))

    def _on_connect(self, conn: Conn) -> None:
        pass

    def _drop(self, conn: Conn) -> None:
        if self.conn is conn:
            self.conn = None
        super()._drop(conn)
