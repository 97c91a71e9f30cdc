"""The ``tcp`` transport: the three patterns over plain TCP sockets (stdlib only).

Each binding endpoint (puller, reply server, publisher) listens on ``host`` (default
``127.0.0.1``) at a port the OS picks, and publishes it through the run's resolver under
``<run_id>/<stream>.tcp`` (:class:`~zoo.transports.sockets.engine.TcpAddress`,
:mod:`zoo.core.resolver`); dialers look it up there. Frames travel
inline as length-prefixed records (:mod:`zoo.transports.sockets.framing`); see
:mod:`zoo.transports.sockets.engine` for timeouts, back-pressure and close semantics.

Options (per stream in the experiment config, ``--set streams.<stream>.options.<name>=value``,
or keyword arguments; else environment variables; else defaults — see :class:`TcpOptions`):

===================  ===================  ==========================================================
option               environment          meaning
===================  ===================  ==========================================================
host                 ``ZOO_TCP_HOST``     address listeners bind to (default ``127.0.0.1``)
connect_host         ``ZOO_TCP_CONNECT``  address dialers connect to (default: the published host)
token                ``ZOO_TCP_TOKEN``    shared secret every dialer must present in its HELLO; a
                                          peer without it is refused (counted, logged). Strongly
                                          advised when ``host`` is not loopback (a warning says so)
max_frame_bytes      --                   largest frame accepted or sent (default 1 GiB)
spin_us              ``ZOO_SPIN_US``      busy-poll budget of a wait in microseconds before blocking,
                                          while recent waits were shorter (default 100; 0: never
                                          spin) — :mod:`zoo.transports.sockets.spin`
handshake_timeout_s  --                   seconds a listener waits for a new
                                          connection's HELLO before dropping it (default 10)
max_connections      --                   connections one listener holds at most; more are closed at
                                          once and counted in ``refused`` (default 1024, or a quarter
                                          of the file-descriptor limit if lower)
===================  ===================  ==========================================================

Before a peer is authenticated its listener reads nothing but one HELLO of at most 4 KiB
and allocates no read buffer for it (see :mod:`zoo.transports.sockets.engine`).

The token is compared in constant time but travels in clear: it keeps stray peers out, it
is not encryption.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import TypeVar

from zoo.core.arrays import MAX_FRAME_BYTES
from zoo.core.resolver import run_key
from zoo.transports.sockets import engine, patterns
from zoo.transports.sockets.engine import check_resolvable, is_loopback
from zoo.transports.sockets.framing import MAX_HELLO_BYTES
from zoo.transports.sockets.rundir import (
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
MAX_TOKEN_BYTES = 1024
"""Longest token (UTF-8 bytes): the HELLO that carries it must fit in ``MAX_HELLO_BYTES``."""


class TcpRawPusher(patterns.RawPusherMixin, patterns.SocketPusher):
    pass


@dataclass
class TcpOptions:
    """Options of the ``tcp`` transport, set per stream in the experiment config
    (``--set streams.<stream>.options.<name>=value``) or as keyword arguments of
    :class:`TcpTransport`. Unset (None): the environment variable, else the default.
    """

    host: str | None = None
    """Address listeners bind to (``ZOO_TCP_HOST``, default ``127.0.0.1``)."""
    connect_host: str | None = None
    """Address dialers connect to (``ZOO_TCP_CONNECT``, default: the published host)."""
    token: str | None = None
    """Shared secret every dialer presents in its HELLO (``ZOO_TCP_TOKEN``), at most
    :data:`MAX_TOKEN_BYTES` bytes; set in the config, it is also written to the run's
    ``config.json``: prefer the variable for secrets."""
    max_frame_bytes: int | None = None
    """Largest frame, in bytes, sent or accepted (default 1 GiB)."""
    spin_us: int | None = None
    """Busy-poll budget of one wait in microseconds, used while recent waits were shorter
    (``ZOO_SPIN_US``, default 100; 0 never spins)."""
    handshake_timeout_s: float | None = None
    """Seconds a listener waits for a new connection's HELLO before dropping it (default 10)."""
    max_connections: int | None = None
    """Connections one listener holds at most; more are closed at once (default 1024, or a
    quarter of the process's file-descriptor limit if lower, at least 16)."""

    def __post_init__(self) -> None:
        for name in ("host", "connect_host", "token"):
            if getattr(self, name) == "":
                raise ValueError(f"{name} must not be empty (leave it unset for the default)")
        if self.max_frame_bytes is not None and self.max_frame_bytes < 1:
            raise ValueError(f"max_frame_bytes must be >= 1, got {self.max_frame_bytes}")
        if self.spin_us is not None:
            spin_budget_us(self.spin_us)
        if self.token is not None and len(self.token.encode()) > MAX_TOKEN_BYTES:
            raise ValueError(f"token must be at most {MAX_TOKEN_BYTES} bytes (it travels in a HELLO of at most "
                             f"{MAX_HELLO_BYTES}), got {len(self.token.encode())}")
        if self.handshake_timeout_s is not None and not (0 < self.handshake_timeout_s < math.inf):
            raise ValueError(f"handshake_timeout_s must be > 0 and finite (seconds), got {self.handshake_timeout_s}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")


class TcpTransport:
    """Endpoints over TCP; listeners publish their ports through ``resolver`` (default: the
    ``files`` resolver in ``<base_dir or tempdir>``).

    ``create=True`` (the controller) first removes run directories no live process holds,
    then creates this run's directory and holds its lock. :meth:`cleanup` removes it.
    """

    name = "tcp"
    cross_process = True
    Options = TcpOptions

    def __init__(self, run_id: str, base_dir: str | None = None, create: bool = False, *,
                 host: str | None = None, connect_host: str | None = None, token: str | None = None,
                 max_frame_bytes: int | None = None, spin_us: int | None = None,
                 handshake_timeout_s: float | None = None, max_connections: int | None = None,
                 resolver=None) -> None:
        self.run_id = run_id
        self.resolver = resolver if resolver is not None else default_resolver(base_dir)
        self.spin_us = spin_budget_us(spin_us)
        self.base_dir = base_dir
        self.dir = run_dir(run_id, base_dir)
        self.host = host or os.environ.get("ZOO_TCP_HOST") or "127.0.0.1"
        self.connect_host = connect_host or os.environ.get("ZOO_TCP_CONNECT") or None
        self.token = token if token is not None else (os.environ.get("ZOO_TCP_TOKEN") or None)
        self.max_frame_bytes = int(max_frame_bytes or MAX_FRAME_BYTES)
        # The checks of the config (environment token included), for keyword arguments too.
        TcpOptions(token=self.token or None, handshake_timeout_s=handshake_timeout_s, max_connections=max_connections)
        self.handshake_timeout_s = float(handshake_timeout_s or engine.DEFAULT_HANDSHAKE_TIMEOUT_S)
        self.max_connections = int(max_connections or engine.default_max_connections())
        check_resolvable(self.host, "host")
        check_resolvable(self.connect_host, "connect_host")
        if create:
            reclaim_stale_run_dirs(base_dir)
            create_run_dir(run_id, base_dir)
        self._warned = False

    def _address(self, stream: str) -> engine.TcpAddress:
        hold_lock(lock_path(self.run_id, self.base_dir))  # this process now belongs to the live run
        published = engine.Published(self.resolver, run_key(self.run_id, f"{safe_name(stream)}.tcp"))
        return engine.TcpAddress(published, self.host, self.connect_host)

    def _listen_address(self, stream: str) -> engine.TcpAddress:
        if not is_loopback(self.host) and self.token is None and not self._warned:
            self._warned = True
            log.warning("tcp transport of run %s binds to non-loopback %s without a token: any host that can "
                        "reach it may connect; set ZOO_TCP_TOKEN (or token=...) on every process",
                        self.run_id, self.host)
        return self._address(stream)

    def _args(self, stream: str) -> tuple[str, str, int, str | None]:
        return (self.run_id, stream, self.max_frame_bytes, self.token)

    def _limits(self) -> dict:
        """Keyword arguments of every listener: its handshake timeout and connection cap."""
        return {"handshake_timeout_s": self.handshake_timeout_s, "max_connections": self.max_connections}

    def _tuned(self, endpoint: E) -> E:
        endpoint.set_spin_us(self.spin_us)
        return endpoint

    def reply_server(self, stream: str) -> patterns.SocketReplyServer:
        return self._tuned(patterns.SocketReplyServer(self._listen_address(stream), *self._args(stream),
                                                             **self._limits()))

    def request_client(self, stream: str, client_id: int) -> patterns.SocketRequestClient:
        client = patterns.SocketRequestClient(self._address(stream), *self._args(stream), client_id=client_id)
        return self._tuned(client)

    def puller(self, stream: str) -> patterns.SocketPuller:
        return self._tuned(patterns.SocketPuller(self._listen_address(stream), *self._args(stream), **self._limits()))

    def pusher(self, stream: str) -> patterns.SocketPusher:
        return self._tuned(patterns.SocketPusher(self._address(stream), *self._args(stream)))

    def publisher(self, stream: str) -> patterns.SocketPublisher:
        return self._tuned(patterns.SocketPublisher(self._listen_address(stream), *self._args(stream),
                                                    **self._limits()))

    def subscriber(self, stream: str) -> patterns.SocketSubscriber:
        return self._tuned(patterns.SocketSubscriber(self._address(stream), *self._args(stream)))

    def raw_pusher(self, stream: str) -> TcpRawPusher:
        """Testing aid: a pusher that can send arbitrary bytes
        (see :class:`~zoo.transports.sockets.patterns.RawPusherMixin`)."""
        return self._tuned(TcpRawPusher(self._address(stream), *self._args(stream)))

    def resources(self) -> list[str]:
        """OS resources this run holds now: its run directory, if it exists."""
        return [self.dir] if os.path.exists(self.dir) else []

    def cleanup(self) -> None:
        """Remove the run directory (with the ``files`` resolver's keys) and drop this process's
        run lock (idempotent)."""
        remove_run_dir(self.run_id, self.base_dir)

    def leave(self) -> bool:
        """This process leaves a run whose controller is gone; the last one to leave runs
        :meth:`cleanup` (:func:`~zoo.transports.sockets.rundir.leave_run`). True if it did."""
        return leave_run([lock_path(self.run_id, self.base_dir)], self.cleanup)
