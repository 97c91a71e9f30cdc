"""The nng transport: pynng sockets over ``ipc://`` in a per-run directory, or over ``tcp://``.

Addresses (option ``scheme``): ``ipc`` (default) — Unix sockets ``<run dir>/<stream>.ipc``,
one host. ``tcp`` — every listener binds ``host`` (default ``127.0.0.1``) at a port the OS
picks. Either way the listener publishes its URL or port through the run's resolver
(:mod:`zoo.core.resolver`; keys ``<run_id>/<stream>.ipc`` and ``<run_id>/<stream>.nng-tcp``)
and a dialer dials once the key is there (looking it up until its call's timeout), at
``connect_host`` if set. Across machines the resolver must be shared (e.g. the ``files``
resolver with a shared ``root``).

With a ``token`` (option, or ``ZOO_NNG_TOKEN``) every message carries it in its metadata and
receivers refuse (count in ``refused``, log with the sender's address) messages without it;
``tcp`` on a non-loopback ``host`` without a token logs a warning. Like the ``tcp`` transport's
token it travels in clear: it keeps stray peers out, it is not encryption.

Patterns map onto nng protocols:

- request/reply: clients push requests to the server's Pull0 socket; each client listens on
  its own Pull0 reply socket (``<stream>-c<client_id>-<incarnation>``, ``incarnation`` 12
  random hex digits drawn when the client is made, carried in every request's metadata under
  ``zoo_reply_to`` and taken out on receipt) and the server pushes the reply there, so replies
  are routed by client id and may be sent in any order. The newest client of an id wins: the
  first request of a new incarnation (a restarted actor) makes the server close its socket to
  the old one — dropping the replies still queued for it, which the new client never asked
  for — and dial the new one; requests that arrive later from an older incarnation of that id
  (one that is still alive) are dropped (counted in ``superseded``). A new client with a dead
  client's id therefore listens at an address of its own, whether the dead one's socket is
  closed, not yet seen as closed, or (over ``tcp``) at another port.
- push/pull: Push0 -> Pull0. nng holds a small send buffer; when the consumer stops
  pulling, ``send`` blocks up to its timeout and returns False (back-pressure).
- publish/latest: Pub0 -> Sub0; ``latest`` drains what has arrived and keeps the newest.

Frames use :mod:`zoo.core.arrays`'s wire format, written straight into the nng message on
send and decoded in place on receive (the returned arrays are views into the message, which
lives as long as they do). Malformed frames are counted in ``rejected`` and dropped
(a receive keeps waiting for a good frame until its timeout). Dials are non-blocking (nng
retries in the background), so start order does not matter.

Options (``--set streams.<stream>.options.<name>=value``, see :class:`NngOptions`):
``spin_us``, ``scheme``, ``host``, ``connect_host``, ``token``.

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

import hmac
import logging
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pynng
from pynng import _nng
from pynng.exceptions import check_err

from zoo.core.arrays import WireError, decode, layout
from zoo.core.resolver import run_key
from zoo.core.transport import TransportError
from zoo.transports.sockets.engine import Published, check_resolvable, is_loopback, publish_port, read_port
from zoo.transports.sockets.rundir import (
    UNIX_PATH_LIMIT,
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
from zoo.transports.sockets.spin import DEFAULT_SPIN_US, AdaptiveSpin, spin_budget_us

log = logging.getLogger(__name__)
MAX_FRAME_BYTES = 1 << 30
TOKEN_KEY = "zoo_token"  # meta key of the stream's token (option token); removed on receipt
REPLY_KEY = "zoo_reply_to"  # meta key of a request client's incarnation (where its replies go); removed on receipt
DIAL_POLL_S = 0.01  # how often a dial looks up the listener's address
SEND_BUFFER = 2  # messages queued per pipe before a send blocks


def _ms(timeout: float) -> int:
    return max(0, int(timeout * 1000))


class _Frame(np.ndarray):
    """A received message's body as a uint8 array that keeps the nng message alive: decoded
    arrays are views into it (no copy), and the message is freed with the last of them."""

    msg: pynng.Message


def _frame(msg: pynng.Message) -> _Frame:
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
    scheme: str | None = None
    """``ipc`` (default: Unix sockets, one host) or ``tcp`` (across hosts; ports published in
    the run directory)."""
    host: str | None = None
    """With ``scheme=tcp``: the address listeners bind to (default ``127.0.0.1``)."""
    connect_host: str | None = None
    """With ``scheme=tcp``: the address dialers connect to (default: the published host)."""
    token: str | None = None
    """Shared secret every message carries (``ZOO_NNG_TOKEN``); receivers refuse, count
    (``refused``) and log messages without it. Set in the config, it is also written to the
    run's ``config.json``: prefer the variable for secrets."""

    def __post_init__(self) -> None:
        if self.spin_us is not None:
            spin_budget_us(self.spin_us)
        if self.scheme not in (None, "ipc", "tcp"):
            raise ValueError(f"scheme must be 'ipc' or 'tcp', got {self.scheme!r}")
        for name in ("host", "connect_host", "token"):
            if getattr(self, name) == "":
                raise ValueError(f"{name} must not be empty (leave it unset for the default)")


class _IpcAddress:
    """``ipc://<path>``, published as ``{"url"}`` through the resolver."""

    def __init__(self, path: str, published: Published) -> None:
        if len(path.encode()) > UNIX_PATH_LIMIT:  # nng would say only "AddressInvalid"
            raise TransportError(f"socket path {path!r} is longer than the {UNIX_PATH_LIMIT}-byte Unix limit; "
                                 "use a shorter TMPDIR or stream name")
        self.url, self.published = f"ipc://{path}", published

    def listen(self, sock: pynng.Socket) -> None:
        sock.listen(self.url)
        self.published.publish({"url": self.url})

    def dial_url(self) -> str | None:
        found = self.published.get()
        url = found.get("url") if found else None
        return url if isinstance(url, str) else None

    def unpublish(self) -> None:
        self.published.withdraw()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class _TcpAddress:
    """``tcp://host:port`` with a port the OS picks, published through the resolver
    (:func:`~zoo.transports.sockets.engine.publish_port`, as the ``tcp`` transport does)."""

    def __init__(self, published: Published, host: str, connect_host: str | None) -> None:
        self.published, self.host, self.connect_host = published, host, connect_host

    def listen(self, sock: pynng.Socket) -> None:
        listener = sock.listen(f"tcp://{_url_host(self.host)}:0")
        # str() of the bound address: pynng's .port reads it in network byte order
        port = int(str(listener.local_address).rsplit(":", 1)[1])
        publish_port(self.published, self.host, port)

    def dial_url(self) -> str | None:
        found = read_port(self.published, self.connect_host)
        return None if found is None else f"tcp://{_url_host(found[0])}:{found[1]}"

    def unpublish(self) -> None:
        self.published.withdraw()


class _Dial:
    """A socket's dial, made once its address is known: at once for ``ipc``, for ``tcp`` once
    the listener has published its port (polled until the caller's deadline). nng then
    (re)connects in the background, so start order does not matter."""

    def __init__(self, sock: pynng.Socket, address: _IpcAddress | _TcpAddress) -> None:
        self.sock, self.address, self.done, self.closed = sock, address, False, False
        self.ready(0.0)

    def ready(self, deadline: float) -> bool:
        """Dialled (True), or not before ``deadline`` (``time.monotonic()``) or :meth:`close` (False)."""
        while not self.done:
            url = self.address.dial_url()
            if url is not None and not self.closed:
                self.sock.dial(url, block=False)
                self.done = True
            elif self.closed or time.monotonic() >= deadline:
                return False
            else:
                time.sleep(DIAL_POLL_S)
        return True

    def close(self) -> None:
        """Close the socket; a :meth:`ready` waiting in another thread returns False."""
        self.closed = True
        self.sock.close()


class _Endpoint:
    def __init__(self, sock: pynng.Socket, spin_us: int = DEFAULT_SPIN_US,
                 listen: _IpcAddress | _TcpAddress | None = None, dial: _Dial | None = None,
                 token: str | None = None) -> None:
        self.sock = sock
        self._listen, self._dial, self._token = listen, dial, token
        if listen is not None:
            listen.listen(sock)
        self._spin = AdaptiveSpin(spin_us)
        self.rejected = 0
        self.refused = 0
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

    def _recv_raw(self, timeout: float) -> _Frame | None:
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
                bundle, meta = decode(raw, MAX_FRAME_BYTES)
            except WireError as exc:
                self.rejected += 1
                log.warning("dropped a malformed frame (%d so far): %s", self.rejected, exc)
            else:
                if self._admit(meta, raw):
                    return bundle, meta
            timeout = deadline - time.monotonic()  # keep serving until the caller's timeout

    def _admit(self, meta: dict[str, Any], raw: _Frame) -> bool:
        """Whether the message carries this endpoint's token (always, without one); the token
        is taken out of ``meta``. A message without it is counted in ``refused`` and logged."""
        got = meta.pop(TOKEN_KEY, None)
        if self._token is None or (isinstance(got, str) and hmac.compare_digest(got, self._token)):
            return True
        self.refused += 1
        if self.refused <= 10 or self.refused % 100 == 0:
            try:
                peer = str(raw.msg.pipe.remote_address)
            except Exception:  # noqa: BLE001 - the address is only for the log line
                peer = "an unknown peer"
            log.warning("%s refused a message from %s without the stream's token (%d so far)",
                        type(self).__name__, peer, self.refused)
        return False

    def _message(self, bundle: dict[str, Any] | None, meta: dict[str, Any]) -> pynng.Message:
        return _message(bundle, meta if self._token is None else {**meta, TOKEN_KEY: self._token})

    def _send(self, sock: pynng.Socket, msg: pynng.Message, timeout: float, dial: _Dial | None = None) -> bool:
        self._check_open()
        if dial is not None and not dial.done and not dial.ready(time.monotonic() + max(0.0, timeout)):
            return False  # the peer has not published its port yet
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
            if self._dial is not None:
                self._dial.close()  # its socket is this endpoint's; a ready() waiting elsewhere returns
            else:
                self.sock.close()
            if self._listen is not None:
                self._listen.unpublish()


class NngPuller(_Endpoint):
    def recv(self, timeout: float):
        return self._recv(timeout)


class NngPusher(_Endpoint):
    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        return self._send(self.sock, self._message(bundle, meta), timeout, self._dial)


class NngSubscriber(_Endpoint):
    def latest(self, timeout: float):
        self._check_open()
        assert self._dial is not None  # a subscriber dials
        if not self._dial.done:
            start = time.monotonic()
            if not self._dial.ready(start + max(0.0, timeout)):
                return None
            timeout = max(0.0, timeout - (time.monotonic() - start))
        newest = self._recv(timeout)
        if newest is None:
            return None
        while (more := self._recv(0)) is not None:
            newest = more
        return newest


class NngPublisher(_Endpoint):
    def publish(self, bundle: dict[str, Any], meta: dict[str, Any]) -> None:
        msg = self._message(bundle, meta)
        self._check_open()
        self.sock.send_msg(msg)  # Pub0 never blocks: slow subscribers drop


class NngRawPusher(NngPusher):
    """Testing aid for the conformance suite: sends bytes that did not come from ``encode``."""

    def send_raw(self, payload: bytes, timeout: float = 1.0) -> bool:
        return self._send(self.sock, pynng.Message(bytes(payload)), timeout, self._dial)


class NngReplyServer(_Endpoint):
    """Pull0 socket for the requests; one Push0 socket per client id, dialled to the reply socket
    of the newest incarnation of that id that sent a request (module doc).

    Attributes:
        superseded: requests dropped because a newer client of their id had sent one (int).
    """

    def __init__(self, transport: NngTransport, stream: str) -> None:
        super().__init__(pynng.Pull0(recv_max_size=MAX_FRAME_BYTES), transport.spin_us,
                         listen=transport._listen_address(stream), token=transport.token)
        self.transport, self.stream = transport, stream
        self.replies: dict[int, tuple[str, _Dial]] = {}  # client id -> (incarnation, its reply socket)
        self._retired: dict[int, set[str]] = {}  # client id -> incarnations replaced by a newer one
        self.superseded = 0

    def recv(self, timeout: float):
        """``(client_id, bundle, meta)`` of the next request of a current client, or None after
        ``timeout`` s. Requests without an integer ``client_id`` or an incarnation are counted in
        ``rejected``, those of a replaced incarnation in ``superseded``; both are dropped."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            msg = self._recv(max(0.0, deadline - time.monotonic()))
            if msg is None:
                return None
            bundle, meta = msg
            client_id, incarnation = meta.get("client_id"), meta.pop(REPLY_KEY, None)
            if not isinstance(client_id, int) or not isinstance(incarnation, str):
                self.rejected += 1
                log.warning("dropped a request without an integer client_id and its %s", REPLY_KEY)
            elif self._route(client_id, incarnation):
                return client_id, bundle, meta
            if time.monotonic() >= deadline:
                return None

    def _route(self, client_id: int, incarnation: str) -> bool:
        """Make ``incarnation`` the reply route of ``client_id`` if it is new; False if it was replaced."""
        current = self.replies.get(client_id)
        if current is not None and current[0] == incarnation:
            return True
        retired = self._retired.setdefault(client_id, set())
        if incarnation in retired:
            self.superseded += 1
            if self.superseded <= 10 or self.superseded % 100 == 0:
                log.warning("dropped a request of a replaced client %d (%d so far)", client_id, self.superseded)
            return False
        if current is not None:
            log.warning("client %d of stream %s started again; its replies now go to the new one",
                        client_id, self.stream)
            retired.add(current[0])
            current[1].close()  # drops the replies still queued for the old one
        address = self.transport.address(_reply_stream(self.stream, client_id, incarnation))
        self.replies[client_id] = (incarnation, _Dial(pynng.Push0(send_buffer_size=SEND_BUFFER), address))
        return True

    def reply(self, client_id: int, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Queue a reply to the newest client of ``client_id``; False if no client of that id has
        sent a request (to this server) or nng's queue for it stays full for ``timeout`` s."""
        msg = self._message(bundle, meta)
        self._check_open()
        route = self.replies.get(client_id)
        if route is None:
            return False
        return self._send(route[1].sock, msg, timeout, route[1])

    def close(self) -> None:
        if not self._closed:
            for _, dial in self.replies.values():
                dial.close()
            super().close()


def _reply_stream(stream: str, client_id: int, incarnation: str) -> str:
    return f"{stream}-c{client_id}-{incarnation}"


class NngRequestClient(_Endpoint):
    """Pushes requests to the server; listens for its replies at an address of its own
    (``<stream>-c<client_id>-<incarnation>``), so a new client with the id of a dead (or live)
    one never shares its socket."""

    def __init__(self, transport: NngTransport, stream: str, client_id: int) -> None:
        self.incarnation = secrets.token_hex(6)
        super().__init__(pynng.Pull0(recv_max_size=MAX_FRAME_BYTES), transport.spin_us,
                         listen=transport._listen_address(_reply_stream(stream, client_id, self.incarnation)),
                         token=transport.token)
        self.client_id = client_id
        self.requests = pynng.Push0(send_buffer_size=SEND_BUFFER)
        self._requests = _Dial(self.requests, transport.address(stream))

    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        meta = {**meta, "client_id": self.client_id, REPLY_KEY: self.incarnation}
        return self._send(self.requests, self._message(bundle, meta), timeout, self._requests)

    def recv(self, timeout: float):
        return self._recv(timeout)

    def close(self) -> None:
        if not self._closed:
            self._requests.close()
            super().close()


class NngTransport:
    """Endpoints over ``ipc://<base_dir>/zoo-<run_id>/<stream>.ipc`` (``scheme="ipc"``, the
    default) or ``tcp://host:port`` (``scheme="tcp"``); listeners publish their addresses
    through ``resolver`` (default: the ``files`` resolver in ``<base_dir or tempdir>``).

    The controller creates the run directory and holds its lock (``create=True``), after
    removing the run directories no live process holds
    (:func:`~zoo.transports.sockets.rundir.reclaim_stale_run_dirs`); workers attach to it.
    :meth:`cleanup` removes the directory and its socket files.
    """

    name = "nng"
    cross_process = True
    Options = NngOptions

    def __init__(self, run_id: str, base_dir: str | None = None, create: bool = False, *,
                 spin_us: int | None = None, scheme: str | None = None, host: str | None = None,
                 connect_host: str | None = None, token: str | None = None, resolver=None) -> None:
        NngOptions(spin_us=spin_us, scheme=scheme, host=host, connect_host=connect_host)  # checks the values
        self.run_id, self.base_dir = run_id, base_dir
        self.resolver = resolver if resolver is not None else default_resolver(base_dir)
        self.token = (token if token is not None else os.environ.get("ZOO_NNG_TOKEN")) or None
        self.spin_us = spin_budget_us(spin_us)
        self.scheme = scheme or "ipc"
        self.host, self.connect_host = host or "127.0.0.1", connect_host
        self.dir = run_dir(run_id, base_dir)
        if create:
            if self.scheme == "ipc":
                check_socket_dir(run_id, base_dir)  # before any worker starts: one line, not AddressInvalid
            reclaim_stale_run_dirs(base_dir)
            create_run_dir(run_id, base_dir)
        if self.scheme == "tcp":
            check_resolvable(self.host, "host")
            check_resolvable(self.connect_host, "connect_host")
        self._warned = False

    def _listen_address(self, stream: str) -> _IpcAddress | _TcpAddress:
        if self.scheme == "tcp" and not is_loopback(self.host) and self.token is None and not self._warned:
            self._warned = True
            log.warning("nng transport of run %s listens on non-loopback %s over tcp:// without a token: any "
                        "host that can reach it may send; set ZOO_NNG_TOKEN (or token=...) on every process",
                        self.run_id, self.host)
        return self.address(stream)

    def address(self, stream: str) -> _IpcAddress | _TcpAddress:
        """Where ``stream``'s listener is: an ipc path or a tcp port, published under
        ``<run_id>/<stream>.ipc`` or ``<run_id>/<stream>.nng-tcp``."""
        hold_lock(lock_path(self.run_id, self.base_dir))  # this process now belongs to the live run
        if self.scheme == "tcp":
            published = Published(self.resolver, run_key(self.run_id, f"{safe_name(stream)}.nng-tcp"))
            return _TcpAddress(published, self.host, self.connect_host)
        published = Published(self.resolver, run_key(self.run_id, f"{safe_name(stream)}.ipc"))
        return _IpcAddress(os.path.join(self.dir, f"{stream}.ipc"), published)

    def reply_server(self, stream: str) -> NngReplyServer:
        return NngReplyServer(self, stream)

    def request_client(self, stream: str, client_id: int) -> NngRequestClient:
        return NngRequestClient(self, stream, client_id)

    def puller(self, stream: str) -> NngPuller:
        return NngPuller(pynng.Pull0(recv_max_size=MAX_FRAME_BYTES), self.spin_us, listen=self._listen_address(stream),
                         token=self.token)

    def pusher(self, stream: str) -> NngPusher:
        sock = pynng.Push0(send_buffer_size=SEND_BUFFER)
        return NngPusher(sock, self.spin_us, dial=_Dial(sock, self.address(stream)), token=self.token)

    def publisher(self, stream: str) -> NngPublisher:
        return NngPublisher(pynng.Pub0(), self.spin_us, listen=self._listen_address(stream), token=self.token)

    def subscriber(self, stream: str) -> NngSubscriber:
        sock = pynng.Sub0(recv_max_size=MAX_FRAME_BYTES, recv_buffer_size=4)
        sock.subscribe(b"")
        return NngSubscriber(sock, self.spin_us, dial=_Dial(sock, self.address(stream)), token=self.token)

    def raw_pusher(self, stream: str) -> NngRawPusher:
        """Testing aid: a pusher that can send arbitrary bytes as one nng message."""
        sock = pynng.Push0(send_buffer_size=SEND_BUFFER)
        return NngRawPusher(sock, self.spin_us, dial=_Dial(sock, self.address(stream)), token=self.token)

    def resources(self) -> list[str]:
        """OS resources of this run that exist now: the run directory (with its ipc socket files)."""
        return [self.dir] if os.path.exists(self.dir) else []

    def cleanup(self) -> None:
        """Remove the run directory (socket files, the ``files`` resolver's keys) and drop this
        process's run lock (idempotent)."""
        remove_run_dir(self.run_id, self.base_dir)

    def leave(self) -> bool:
        """This process leaves a run whose controller is gone; the last one to leave runs
        :meth:`cleanup` (:func:`~zoo.transports.sockets.rundir.leave_run`). True if it did."""
        return leave_run([lock_path(self.run_id, self.base_dir)], self.cleanup)
