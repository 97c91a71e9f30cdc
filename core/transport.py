"""The transport interface: three patterns that move bundles of arrays.

A transport plugin's factory, ``factory(run_id, base_dir=None, create=False, **options)
-> Transport``, returns an object that creates endpoints for named streams of one run.
``create=True`` is passed once per run, by the process that owns the run (the
controller): it may prepare shared resources (a run directory) and reclaim those of dead
runs. Workers build their own transport objects with ``create=False``. Streams (batching,
versions, routing by id) live in the core on top of these patterns:

- **request/reply** — many :class:`RequestClient`\\ s, one :class:`ReplyServer`; each reply
  reaches the client that asked (by ``client_id``), also when replies are sent out of order.
- **push/pull** — many :class:`Pusher`\\ s, one :class:`Puller`; bounded: a push to a slow
  consumer blocks up to its timeout and then returns ``False`` (back-pressure).
- **publish/latest** — one :class:`Publisher`, many :class:`Subscriber`\\ s; ``latest()``
  returns the newest message not yet seen and never an older one after a newer one.

Every receive takes a timeout in seconds and returns ``None`` when it expires, so that
workers notice stop requests and dead peers; every send takes a timeout and returns
``False`` when the message could not be handed over in time (then nothing of it was sent).
Messages are ``(bundle, meta)`` pairs (see :mod:`zoo.core.arrays`); received arrays may be
views into the transport's buffers, valid for as long as the caller keeps them.

``close()`` is idempotent. A call blocked in another thread returns ``None``/``False``
promptly when its endpoint is closed; calls made after ``close()`` raise
:class:`TransportError`. ``Transport.cleanup()`` removes every OS resource of the run
(files, shared-memory segments) and is idempotent.

Optional, used by :mod:`zoo.core.testing.transport_checks` when present:
``Transport.cross_process`` (False: endpoints connect within one process only),
``Transport.resources()`` (the run's OS resources that exist now),
``Transport.raw_pusher(stream)`` (inject raw bytes), ``endpoint.rejected`` (malformed
messages dropped). See ``docs/transports.md``.
"""
from __future__ import annotations

from typing import Any, Protocol

Message = tuple[dict[str, Any], dict[str, Any]]


class TransportError(RuntimeError):
    """A transport endpoint failed (closed socket, unreachable address...)."""


class RequestClient(Protocol):
    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool: ...
    def recv(self, timeout: float) -> Message | None: ...
    def close(self) -> None: ...


class ReplyServer(Protocol):
    def recv(self, timeout: float) -> tuple[int, dict[str, Any], dict[str, Any]] | None: ...
    def reply(self, client_id: int, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool: ...
    def close(self) -> None: ...


class Pusher(Protocol):
    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool: ...
    def close(self) -> None: ...


class Puller(Protocol):
    def recv(self, timeout: float) -> Message | None: ...
    def close(self) -> None: ...


class Publisher(Protocol):
    def publish(self, bundle: dict[str, Any], meta: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class Subscriber(Protocol):
    def latest(self, timeout: float) -> Message | None: ...
    def close(self) -> None: ...


class Transport(Protocol):
    """Creates the endpoints of one run's streams; addresses are derived from the stream name."""

    name: str

    def reply_server(self, stream: str) -> ReplyServer: ...
    def request_client(self, stream: str, client_id: int) -> RequestClient: ...
    def puller(self, stream: str) -> Puller: ...
    def pusher(self, stream: str) -> Pusher: ...
    def publisher(self, stream: str) -> Publisher: ...
    def subscriber(self, stream: str) -> Subscriber: ...
    def cleanup(self) -> None: ...
