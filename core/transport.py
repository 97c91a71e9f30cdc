"""The transport interface: three patterns that move bundles of arrays.

A transport plugin's factory, ``factory(run_id, base_dir) -> Transport``, returns an
object that creates endpoints for named streams. Streams (batching, versions, routing
by id) live in the core on top of these patterns:

- **request/reply** — many :class:`RequestClient`\\ s, one :class:`ReplyServer`; each reply
  reaches the client that asked (by ``client_id``), also when replies are sent out of order.
- **push/pull** — many :class:`Pusher`\\ s, one :class:`Puller`; bounded: a push to a slow
  consumer blocks up to its timeout and then returns ``False`` (back-pressure).
- **publish/latest** — one :class:`Publisher`, many :class:`Subscriber`\\ s; ``latest()``
  returns the newest message not yet seen and never an older one after a newer one.

Every receive takes a timeout in seconds and returns ``None`` when it expires, so that
workers notice stop requests and dead peers. Messages are ``(bundle, meta)`` pairs
(see :mod:`zoo.core.arrays`). ``close()`` is idempotent.
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
