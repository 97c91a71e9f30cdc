"""The ``inline`` transport: endpoints connected through bounded in-process queues.

**One process only.** Endpoints find each other in a registry keyed by ``(run_id, stream)``
that lives in the memory of the current Python process; an endpoint created in another
process (the controller's spawned workers) sees a different registry and never connects.
Use it for code that runs every role in threads of one process — tests, a debugger with
breakpoints — never with ``zoo train``'s multi-process workers.

Messages still go through :func:`zoo.core.arrays.encode` / :func:`~zoo.core.arrays.decode`,
so the receiver gets its own arrays (the sender may reuse its buffers at once), ``meta``
makes the same JSON round trip, and a forbidden dtype fails exactly as on a socket.

Capacities (messages, not bytes): push/pull :data:`PUSH_CAPACITY`, request queue
:data:`REQUEST_CAPACITY`, each client's reply queue :data:`REPLY_CAPACITY`. A ``send`` /
``reply`` facing a full queue waits up to its timeout and returns ``False``. publish/latest
keeps one value: ``latest`` returns it once per new ``publish``.

``close()`` is idempotent; a call blocked in another thread returns ``None``/``False`` at
once; calls after ``close()`` raise :class:`~zoo.core.transport.TransportError`.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any

from zoo.core.arrays import decode, encode
from zoo.core.transport import TransportError

PUSH_CAPACITY = 8
REQUEST_CAPACITY = 64
REPLY_CAPACITY = 64

_REGISTRY: dict[tuple[str, str], _Stream] = {}
_RUNS: set[str] = set()  # runs created (create=True) in this process
_REGISTRY_LOCK = threading.Lock()


class _Stream:
    """The shared state of one stream of one run: queues and the published value."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pulls: collections.deque = collections.deque()
        self.requests: collections.deque = collections.deque()
        self.replies: dict[int, collections.deque] = {}
        self.value: bytearray | None = None
        self.seq = 0


def _stream(run_id: str, stream: str) -> _Stream:
    with _REGISTRY_LOCK:
        return _REGISTRY.setdefault((run_id, stream), _Stream())


class _Endpoint:
    def __init__(self, run_id: str, stream: str) -> None:
        self.run_id, self.name = run_id, stream
        self.stream = _stream(run_id, stream)
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} of run {self.run_id!r}>"

    def _check_open(self) -> None:
        if self._closed:
            raise TransportError(f"{self!r} is closed")

    def _wait(self, timeout: float, ready) -> bool:
        """Wait (holding ``stream.cond``) until ``ready()`` or timeout / close; True if ready."""
        deadline = time.monotonic() + max(0.0, timeout)
        while not ready():
            left = deadline - time.monotonic()
            if self._closed or left <= 0:
                return False
            self.stream.cond.wait(left)
        return not self._closed

    def _put(self, queue: collections.deque, capacity: int, item, timeout: float) -> bool:
        with self.stream.cond:
            self._check_open()
            if not self._wait(timeout, lambda: len(queue) < capacity):
                return False
            queue.append(item)
            self.stream.cond.notify_all()
            return True

    def _get(self, queue: collections.deque, timeout: float):
        with self.stream.cond:
            self._check_open()
            if not self._wait(timeout, lambda: queue):
                return None
            item = queue.popleft()
            self.stream.cond.notify_all()
            return item

    def close(self) -> None:
        """Idempotent; wakes a call of this endpoint blocked in another thread."""
        with self.stream.cond:
            if self._closed:
                return
            self._closed = True
            self._on_close()
            self.stream.cond.notify_all()

    def _on_close(self) -> None:
        pass


class InlinePuller(_Endpoint):
    def recv(self, timeout: float):
        """Next ``(bundle, meta)`` in send order per pusher, or None after ``timeout`` s."""
        frame = self._get(self.stream.pulls, timeout)
        return None if frame is None else decode(frame)


class InlinePusher(_Endpoint):
    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Queue a message; False if the queue stays full for ``timeout`` s.

        Raises:
            WireError: forbidden dtype. TypeError: ``meta`` not JSON-serialisable.
        """
        return self._put(self.stream.pulls, PUSH_CAPACITY, encode(bundle, meta), timeout)


class InlineReplyServer(_Endpoint):
    def recv(self, timeout: float):
        """``(client_id, bundle, meta)`` of the next request, or None after ``timeout`` s."""
        item = self._get(self.stream.requests, timeout)
        if item is None:
            return None
        client_id, frame = item
        bundle, meta = decode(frame)
        return client_id, bundle, meta

    def reply(self, client_id: int, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Queue a reply for ``client_id``; False if that client does not exist or its queue
        stays full for ``timeout`` s."""
        frame = encode(bundle, meta)
        with self.stream.cond:
            self._check_open()
            replies = self.stream.replies
            if not self._wait(timeout, lambda: len(replies.get(client_id, ())) < REPLY_CAPACITY
                              and client_id in replies):
                return False
            replies[client_id].append(frame)
            self.stream.cond.notify_all()
            return True


class InlineRequestClient(_Endpoint):
    def __init__(self, run_id: str, stream: str, client_id: int) -> None:
        super().__init__(run_id, stream)
        self.client_id = client_id
        self._replies: collections.deque = collections.deque()
        with self.stream.cond:
            self.stream.replies[client_id] = self._replies

    def send(self, bundle: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Queue a request (``meta`` gains ``client_id``); False if the server's queue stays full."""
        frame = encode(bundle, {**meta, "client_id": self.client_id})
        return self._put(self.stream.requests, REQUEST_CAPACITY, (self.client_id, frame), timeout)

    def recv(self, timeout: float):
        """The next reply for this client, or None after ``timeout`` s."""
        frame = self._get(self._replies, timeout)
        return None if frame is None else decode(frame)

    def _on_close(self) -> None:
        if self.stream.replies.get(self.client_id) is self._replies:
            del self.stream.replies[self.client_id]


class InlinePublisher(_Endpoint):
    def publish(self, bundle: dict[str, Any], meta: dict[str, Any]) -> None:
        """Replace the value (never blocks)."""
        frame = encode(bundle, meta)
        with self.stream.cond:
            self._check_open()
            self.stream.value = frame
            self.stream.seq += 1
            self.stream.cond.notify_all()


class InlineSubscriber(_Endpoint):
    def __init__(self, run_id: str, stream: str) -> None:
        super().__init__(run_id, stream)
        self._seen = 0

    def latest(self, timeout: float):
        """The newest value published since the last call, or None after ``timeout`` s."""
        with self.stream.cond:
            self._check_open()
            if not self._wait(timeout, lambda: self.stream.seq > self._seen):
                return None
            self._seen = self.stream.seq
            frame = self.stream.value
        assert frame is not None  # set with every seq increment
        return decode(frame)


class InlineTransport:
    """In-process endpoints of run ``run_id`` (``base_dir`` and ``create`` are accepted and unused)."""

    name = "inline"
    cross_process = False

    def __init__(self, run_id: str, base_dir: str | None = None, create: bool = False) -> None:
        """Raises:
            TransportError: ``create=False`` for a run that was not created in this process —
                i.e. a worker process of ``zoo train``, which ``inline`` cannot connect.
        """
        self.run_id = run_id
        with _REGISTRY_LOCK:
            if create:
                _RUNS.add(run_id)
            elif run_id not in _RUNS:
                raise TransportError(
                    f"the inline transport connects endpoints within one process only, and run {run_id!r} was "
                    f"not created in this process (pid {os.getpid()}); for multi-process runs set "
                    "streams.<name>.transport to shm, nng or tcp")

    def reply_server(self, stream: str) -> InlineReplyServer:
        return InlineReplyServer(self.run_id, stream)

    def request_client(self, stream: str, client_id: int) -> InlineRequestClient:
        return InlineRequestClient(self.run_id, stream, client_id)

    def puller(self, stream: str) -> InlinePuller:
        return InlinePuller(self.run_id, stream)

    def pusher(self, stream: str) -> InlinePusher:
        return InlinePusher(self.run_id, stream)

    def publisher(self, stream: str) -> InlinePublisher:
        return InlinePublisher(self.run_id, stream)

    def subscriber(self, stream: str) -> InlineSubscriber:
        return InlineSubscriber(self.run_id, stream)

    def resources(self) -> list[str]:
        """Nothing outside this process's memory."""
        return []

    def cleanup(self) -> None:
        """Forget every stream of the run (queued messages are dropped)."""
        with _REGISTRY_LOCK:
            _RUNS.discard(self.run_id)
            for key in [k for k in _REGISTRY if k[0] == self.run_id]:
                del _REGISTRY[key]
