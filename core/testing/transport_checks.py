"""Conformance checks any transport can run — built-in or third-party.

Usage (a third-party transport registered as ``"mytransport"``)::

    from zoo.core.testing import check_transport
    report = check_transport("mytransport")        # runs every check, raises on the first failure
    print(report)                                  # which checks passed / were skipped and why

or one check at a time (what ``tests/contract/test_transports.py`` does with pytest)::

    from zoo.core.testing.transport_checks import CHECKS, TransportUnderTest
    tut = TransportUnderTest.from_registry("mytransport")
    CHECKS["round_trip"](tut)

What is checked (each function's docstring has the details):

=======================  ========================================================================
check                    contract
=======================  ========================================================================
round_trip               nested arrays of every allowed dtype, a uint8 64x4x84x84 image, 0-d,
                         empty and non-contiguous arrays arrive byte-exact, with ``meta``, over
                         push/pull, request/reply (both ways) and publish/latest
ordering                 3 producer threads x 50 messages to one puller: all 150 arrive, each
                         producer's in its order
replies_out_of_order     3 clients x 2 requests, answered in reverse order: each client gets
                         exactly its own 2 replies
back_pressure            a producer facing a consumer that never reads gets ``False`` from
                         ``send`` within 4096 messages of 64 KiB; the consumer then receives
                         exactly the accepted ones, in order, and sending works again
publish_latest           a subscriber never sees an older version after a newer one, and ends
                         on the newest
close                    ``close()`` twice is fine; calls after it raise ``TransportError``; a
                         receive blocked in another thread returns None promptly
malformed                random bytes, truncated header, huge declared header, forbidden dtype
                         and a wrong version are each rejected (``rejected`` counts them) and the
                         receiver keeps serving; corrupt record streams drop only that peer
                         (needs ``transport.raw_pusher``; skipped otherwise)
clean_shutdown           after closing every endpoint no OS resource but the run directory and
                         the run's lock file (``zoo-<run_id>.lock``) remains; after
                         ``cleanup()`` none (needs ``transport.resources()``)
two_runs                 two runs with the same stream names at once do not see each other's
                         messages nor share any OS resource
peer_death *             a consumer notices a SIGKILLed producer (timeouts, no hang); the server
                         keeps serving the surviving client
sigkill_reclaim *        5 times: a process owning a whole run is SIGKILLed, the next run
                         (``create=True``) reclaims what it left; in the end 0 leftovers
=======================  ========================================================================

``*``: spawns processes (``multiprocessing`` spawn method); skipped for transports whose
``cross_process`` attribute is False (``inline``). Child processes rebuild the transport by
its registry name, so the transport must be registered (entry point) for them too.

Optional transport methods the checks use when present: ``resources() -> list[str]`` (OS
resources of the run that exist now: segments, socket files, the run directory) and
``raw_pusher(stream)`` returning a pusher with ``send_raw(payload: bytes, timeout)`` (send
bytes that did not come from ``encode`` as one message) and optionally
``send_garbage(data: bytes, timeout)`` (write raw bytes on a byte stream). Endpoints may
expose ``rejected`` (malformed messages dropped); when they do, its exact value is checked.

Every check is bounded in messages and time (no check waits more than ~30 s in total) and
asserts exact values only; nothing here measures speed (see ``benchmarks/transport_bench.py``).
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, NoReturn

import numpy as np

from zoo.core.arrays import ALLOWED_DTYPES, encode, flatten
from zoo.core.transport import TransportError


class TransportCheckError(AssertionError):
    """A transport broke the contract; the message says which check and what differed."""


class CheckSkipped(Exception):
    """A check does not apply to this transport (the message says why)."""


def _fail(check: str, message: str) -> NoReturn:
    raise TransportCheckError(f"[{check}] {message}")


# -- the transport under test ----------------------------------------------------------------
@dataclass
class TransportUnderTest:
    """A transport to check: its registry name, its factory and extra factory options.

    ``options`` are keyword arguments passed to every ``factory(run_id, create=..., **options)``
    call, in this process and in spawned children (so they must be picklable).
    """

    name: str
    factory: Callable[..., Any]
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_registry(cls, name: str, registry=None, **options: Any) -> TransportUnderTest:
        """Load ``name`` from ``registry`` (default: the process-wide one)."""
        if registry is None:
            from zoo.core.plugins import get_registry

            registry = get_registry()
        return cls(name, registry.get("transport", name).load(), options)

    def new_run_id(self) -> str:
        """A run id unique on this host: ``chk<pid>-<8 hex>``."""
        return f"chk{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def make(self, run_id: str, create: bool = False):
        return self.factory(run_id, create=create, **self.options)

    @property
    def cross_process(self) -> bool:
        """Whether endpoints in different processes connect (the transport's ``cross_process`` attribute)."""
        flag = getattr(self.factory, "cross_process", None)
        if flag is None:
            probe = self.make(self.new_run_id(), create=True)
            flag = getattr(probe, "cross_process", True)
            probe.cleanup()
        return bool(flag)

    @contextlib.contextmanager
    def run(self, run_id: str | None = None) -> Iterator[Run]:
        """A fresh run (``create=True``); on exit every endpoint is closed and ``cleanup()`` called."""
        run = Run(self, run_id or self.new_run_id())
        try:
            yield run
        finally:
            run.close()


class Run:
    """One run of the transport under test; remembers its endpoints to close them."""

    def __init__(self, tut: TransportUnderTest, run_id: str) -> None:
        self.tut, self.run_id = tut, run_id
        self.transport = tut.make(run_id, create=True)
        self.endpoints: list[Any] = []

    def _keep(self, endpoint):
        self.endpoints.append(endpoint)
        return endpoint

    def peer(self):
        """A second transport object of the same run (what a worker process builds, ``create=False``)."""
        return self.tut.make(self.run_id)

    def puller(self, stream: str):
        return self._keep(self.transport.puller(stream))

    def pusher(self, stream: str):
        return self._keep(self.peer().pusher(stream))

    def reply_server(self, stream: str):
        return self._keep(self.transport.reply_server(stream))

    def request_client(self, stream: str, client_id: int):
        return self._keep(self.peer().request_client(stream, client_id))

    def publisher(self, stream: str):
        return self._keep(self.transport.publisher(stream))

    def subscriber(self, stream: str):
        return self._keep(self.peer().subscriber(stream))

    def close_endpoints(self) -> None:
        for endpoint in reversed(self.endpoints):
            with contextlib.suppress(Exception):
                endpoint.close()
        self.endpoints.clear()

    def close(self) -> None:
        self.close_endpoints()
        self.transport.cleanup()


# -- helpers -----------------------------------------------------------------------------------
def sample_bundle(seed: int = 0) -> dict[str, Any]:
    """Nested arrays covering the wire format: every allowed dtype, a uint8 64x4x84x84 image,
    a 0-d array, an empty array and two non-contiguous views."""
    rng = np.random.default_rng(seed)
    bundle: dict[str, Any] = {
        "obs": {"image": rng.integers(0, 256, (64, 4, 84, 84), dtype=np.uint8),
                "deep": {"vec": rng.standard_normal((3, 5)).astype(np.float32)}},
        "scalar": np.array(-7, np.int64),
        "empty": np.zeros((0, 3), np.float32),
        "strided": np.arange(48, dtype=np.int16).reshape(6, 8)[::2, 1::3],
        "transposed": np.arange(12, dtype=np.float64).reshape(3, 4).T,
        "dtypes": {},
    }
    for dt in sorted(ALLOWED_DTYPES):
        if dt == "bool":
            arr = rng.integers(0, 2, (2, 3)).astype(bool)
        elif dt.startswith("float"):
            arr = rng.standard_normal((2, 3)).astype(dt)
        else:
            info = np.iinfo(dt)
            arr = np.array([[info.min, info.max, 0], [1, 2, 3]], dt)
        bundle["dtypes"][dt] = arr
    return bundle


def assert_same_bundle(check: str, got: dict[str, Any], want: dict[str, Any]) -> None:
    """Same keys in the same nesting, same dtype and shape, same bytes (C order) for every leaf."""
    flat_got, flat_want = dict(flatten(got)), dict(flatten(want))
    if list(flat_got) != list(flat_want):
        _fail(check, f"keys differ: got {list(flat_got)}, sent {list(flat_want)}")
    for key, w in flat_want.items():
        g = flat_got[key]
        if g.dtype != w.dtype or g.shape != w.shape:
            _fail(check, f"{key}: got {g.dtype}{g.shape}, sent {w.dtype}{w.shape}")
        if np.ascontiguousarray(g).tobytes() != np.ascontiguousarray(w).tobytes():
            _fail(check, f"{key}: bytes differ")


def _until(check: str, what: str, fn: Callable[[], Any], timeout: float):
    """Call ``fn()`` (which waits a little itself) until it returns something other than None,
    for at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            _fail(check, f"timed out after {timeout} s waiting for {what}")


def _recv(check: str, endpoint, what: str, timeout: float = 10.0):
    got = endpoint.recv(timeout)
    if got is None:
        _fail(check, f"no {what} within {timeout} s")
    return got


# -- the checks ----------------------------------------------------------------------------------
def check_round_trip(tut: TransportUnderTest) -> None:
    """Byte-exact round trips over all three patterns, three times each (the first message may
    take a different path than later ones, e.g. before a shared-memory ring is known)."""
    name = "round_trip"
    bundle = sample_bundle()
    meta = {"request_id": 3, "name": "x", "nested": {"ok": True, "list": [1, 2.5, None]}}
    with tut.run() as run:
        puller, pusher = run.puller("rt-push"), run.pusher("rt-push")
        for i in range(3):
            if not pusher.send(bundle, {**meta, "i": i}, 10.0):
                _fail(name, f"push {i} not accepted within 10 s by an idle consumer")
            got, got_meta = _recv(name, puller, f"pushed message {i}")
            assert_same_bundle(name, got, bundle)
            if got_meta != {**meta, "i": i}:
                _fail(name, f"push meta {got_meta!r} != {({**meta, 'i': i})!r}")

        server, client = run.reply_server("rt-req"), run.request_client("rt-req", 7)
        for i in range(3):
            if not client.send(bundle, {**meta, "i": i}, 10.0):
                _fail(name, f"request {i} not accepted within 10 s")
            cid, got, got_meta = _recv(name, server, f"request {i}")
            if cid != 7:
                _fail(name, f"request came from client_id {cid!r}, expected 7")
            assert_same_bundle(name, got, bundle)
            if {k: v for k, v in got_meta.items() if k != "client_id"} != {**meta, "i": i}:
                _fail(name, f"request meta {got_meta!r} lost or changed fields of {({**meta, 'i': i})!r}")
            if not server.reply(cid, bundle, {"i": i}, 10.0):
                _fail(name, f"reply {i} not accepted within 10 s")
            got, got_meta = _recv(name, client, f"reply {i}")
            assert_same_bundle(name, got, bundle)
            if got_meta != {"i": i}:
                _fail(name, f"reply meta {got_meta!r} != {{'i': {i}}}")

        pub, sub = run.publisher("rt-pub"), run.subscriber("rt-pub")
        sub.latest(0.05)  # connect
        for i in range(3):
            def publish_and_look(i=i):
                pub.publish(bundle, {"v": i})
                return sub.latest(0.1)
            got, got_meta = _until(name, f"published value {i}", publish_and_look, 10.0)
            assert_same_bundle(name, got, bundle)
            if got_meta != {"v": i}:
                _fail(name, f"published meta {got_meta!r} != {{'v': {i}}}")


def check_ordering(tut: TransportUnderTest, producers: int = 3, per_producer: int = 50) -> None:
    """Many producer threads to one consumer: every message arrives once, each producer's in order."""
    name = "ordering"
    with tut.run() as run:
        puller = run.puller("order")
        pushers = [run.pusher("order") for _ in range(producers)]
        errors: list[str] = []

        def produce(p: int) -> None:
            for s in range(per_producer):
                payload = {"seq": np.array([s], np.int64), "producer": np.full(3, p, np.uint8)}
                if not pushers[p].send(payload, {"producer": p, "seq": s}, 10.0):
                    errors.append(f"producer {p} message {s} not accepted within 10 s")
                    return

        threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(producers)]
        for t in threads:
            t.start()
        got: dict[int, list[int]] = {p: [] for p in range(producers)}
        for _ in range(producers * per_producer):
            msg = puller.recv(10.0)
            if msg is None:
                break
            bundle, meta = msg
            p, s = meta["producer"], meta["seq"]
            if int(bundle["seq"][0]) != s or bundle["producer"].tolist() != [p] * 3:
                _fail(name, f"payload {bundle} does not match meta {meta}")
            got[p].append(s)
        for t in threads:
            t.join(10.0)
        if errors:
            _fail(name, "; ".join(errors))
        extra = puller.recv(0.2)
        if extra is not None:
            _fail(name, f"an extra message arrived: {extra[1]}")
        for p in range(producers):
            if got[p] != list(range(per_producer)):
                _fail(name, f"producer {p}: received sequence {got[p]} != 0..{per_producer - 1}")


def check_replies_out_of_order(tut: TransportUnderTest, clients: int = 3, per_client: int = 2) -> None:
    """Requests answered in reverse arrival order still reach the client that asked."""
    name = "replies_out_of_order"
    with tut.run() as run:
        server = run.reply_server("ooo")
        cs = {cid: run.request_client("ooo", cid) for cid in range(10, 10 + clients)}
        for r in range(per_client):
            for cid, c in cs.items():
                if not c.send({"q": np.array([cid, r], np.int32)}, {"request_id": r}, 10.0):
                    _fail(name, f"client {cid} request {r} not accepted within 10 s")
        pending = []
        for _ in range(clients * per_client):
            cid, bundle, meta = _recv(name, server, "a request")
            if bundle["q"].tolist() != [cid, meta["request_id"]]:
                _fail(name, f"request {bundle['q'].tolist()} arrived tagged with client {cid}")
            pending.append((cid, meta["request_id"]))
        if sorted(pending) != sorted((cid, r) for cid in cs for r in range(per_client)):
            _fail(name, f"requests received {sorted(pending)}")
        for cid, r in reversed(pending):
            if not server.reply(cid, {"answer": np.array([cid * 100 + r], np.int64)}, {"request_id": r}, 10.0):
                _fail(name, f"reply to client {cid} request {r} not accepted within 10 s")
        for cid, c in cs.items():
            answers = []
            for _ in range(per_client):
                bundle, meta = _recv(name, c, f"a reply for client {cid}")
                answers.append((meta["request_id"], int(bundle["answer"][0])))
            if sorted(answers) != [(r, cid * 100 + r) for r in range(per_client)]:
                _fail(name, f"client {cid} got replies {sorted(answers)}")
            if c.recv(0.1) is not None:
                _fail(name, f"client {cid} got a reply meant for another client")


def check_back_pressure(tut: TransportUnderTest, message_bytes: int = 64 << 10, max_accepted: int = 4096) -> None:
    """A consumer that does not read makes ``send`` return False within ``max_accepted`` messages;
    afterwards exactly the accepted messages arrive, in order, and sending works again."""
    name = "back_pressure"
    with tut.run() as run:
        puller = run.puller("bp")
        pusher = run.pusher("bp")
        payload = np.zeros(message_bytes, np.uint8)
        accepted = 0
        while accepted < max_accepted:
            payload[:8] = np.frombuffer(struct.pack("<q", accepted), np.uint8)
            if not pusher.send({"x": payload}, {"seq": accepted}, 0.05):
                break
            accepted += 1
        else:
            _fail(name, f"a consumer that never reads accepted {max_accepted} messages of {message_bytes} bytes "
                        "(unbounded buffering)")
        for seq in range(accepted):
            bundle, meta = _recv(name, puller, f"accepted message {seq} of {accepted}")
            if meta["seq"] != seq or struct.unpack("<q", bundle["x"][:8].tobytes())[0] != seq:
                _fail(name, f"message {meta['seq']} arrived where {seq} was expected")
        extra = puller.recv(0.2)
        if extra is not None:
            _fail(name, f"message {extra[1]} arrived although send() returned False for it")
        if not pusher.send({"x": payload}, {"seq": -1}, 10.0):
            _fail(name, "send still fails after the consumer drained the queue")
        _, meta = _recv(name, puller, "the message sent after draining")
        if meta["seq"] != -1:
            _fail(name, f"got {meta} after draining, expected seq -1")


def check_publish_latest(tut: TransportUnderTest, versions: int = 30) -> None:
    """Versions seen by a subscriber only increase, and it ends on the newest."""
    name = "publish_latest"
    with tut.run() as run:
        pub, sub = run.publisher("params"), run.subscriber("params")
        sub.latest(0.05)
        seen: list[int] = []

        def look(timeout: float) -> None:
            msg = sub.latest(timeout)
            if msg is not None:
                if int(msg[0]["w"][0]) != msg[1]["policy_version"]:
                    _fail(name, f"payload {msg[0]['w'][:1]} does not match meta {msg[1]}")
                seen.append(msg[1]["policy_version"])

        for v in range(1, versions + 1):
            pub.publish({"w": np.full(1000, v, np.int64)}, {"policy_version": v})
            if v % 3 == 0:
                look(0.0)
        for _ in range(200):
            if seen and seen[-1] == versions:
                break
            pub.publish({"w": np.full(1000, versions, np.int64)}, {"policy_version": versions})
            look(0.05)
        if not seen or seen[-1] != versions:
            _fail(name, f"the newest version {versions} never arrived (seen {seen})")
        if any(b <= a for a, b in pairwise(seen)):
            _fail(name, f"versions went backwards or repeated: {seen}")


def check_close(tut: TransportUnderTest) -> None:
    """``close()`` is idempotent, later calls raise ``TransportError``, and receives blocked in
    other threads return None promptly when their endpoint is closed."""
    name = "close"
    with tut.run() as run:
        endpoints = {
            "puller": (run.puller("c-push"), lambda e: e.recv(0.0)),
            "pusher": (run.pusher("c-push"), lambda e: e.send({}, {}, 0.0)),
            "reply_server": (run.reply_server("c-req"), lambda e: e.recv(0.0)),
            "request_client": (run.request_client("c-req", 1), lambda e: e.recv(0.0)),
            "publisher": (run.publisher("c-pub"), lambda e: e.publish({}, {})),
            "subscriber": (run.subscriber("c-pub"), lambda e: e.latest(0.0)),
        }
        for kind, (endpoint, call) in endpoints.items():
            endpoint.close()
            try:
                endpoint.close()
            except Exception as exc:  # noqa: BLE001
                _fail(name, f"second close() of the {kind} raised {exc!r}")
            try:
                call(endpoint)
            except TransportError:
                pass
            except Exception as exc:  # noqa: BLE001
                _fail(name, f"using the {kind} after close() raised {exc!r}, expected TransportError")
            else:
                _fail(name, f"using the {kind} after close() did not raise TransportError")

        blocked = {
            "puller": (run.puller("b-push"), lambda e: e.recv(30.0)),
            "reply_server": (run.reply_server("b-req"), lambda e: e.recv(30.0)),
            "request_client": (run.request_client("b-req2", 2), lambda e: e.recv(30.0)),
            "subscriber": (run.subscriber("b-pub"), lambda e: e.latest(30.0)),
        }
        for kind, (endpoint, call) in blocked.items():
            result: list[Any] = []
            started = threading.Event()

            def target(endpoint=endpoint, call=call, result=result, started=started) -> None:
                started.set()
                try:
                    result.append(call(endpoint))
                except Exception as exc:  # noqa: BLE001
                    result.append(exc)

            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            started.wait(30.0)
            if not _blocked_in(thread, call.__code__, 30.0):
                _fail(name, f"a {kind} receive with a 30-s timeout in another thread did not block in it")
            endpoint.close()
            thread.join(5.0)
            if thread.is_alive():
                _fail(name, f"a {kind} receive blocked in another thread did not return within 5 s of close()")
            if result != [None]:
                _fail(name, f"a {kind} receive interrupted by close() returned {result!r}, expected None")


def _blocked_in(thread: threading.Thread, code: Any, timeout: float) -> bool:
    """Wait up to ``timeout`` s until ``thread`` is blocked inside a call of ``code``: a frame of
    ``code`` is on its stack with a frame above it (inside the call), and the thread sleeps in the
    kernel (``/proc``: state ``S``) at 5 looks in a row, 10 ms apart, at the same instruction. Each
    pause between looks releases the GIL, so a thread only waiting for the GIL does not pass as
    blocked. Without ``/proc`` (not Linux) the kernel state is not looked at."""
    import sys

    deadline = time.monotonic() + timeout
    last, same = None, 0
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        inside, f = False, frame
        while f is not None and not inside:
            inside = f.f_code is code and f is not frame
            f = f.f_back
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
                sleeping = stat.read().rsplit(")", 1)[1].split()[0] == "S"
        except (OSError, IndexError):
            sleeping = True
        here = (id(frame), frame.f_lasti) if frame is not None and inside and sleeping else None
        same = same + 1 if here is not None and here == last else 0
        if same >= 4:
            return True
        last = here
        time.sleep(0.01)
    return False


def _bad_frames() -> list[tuple[str, bytes]]:
    good = bytes(encode({"x": np.zeros(2, np.int32)}, {"k": 1}))
    header_len = struct.unpack_from("<I", good, 4)[0]
    header = json.loads(good[8:8 + header_len])
    header["arrays"][0][1] = "complex128"
    forged = json.dumps(header).encode()
    versioned = json.dumps({**header, "version": 99}).encode()
    rng = np.random.default_rng(1)
    return [
        ("random bytes", rng.integers(0, 256, 256, dtype=np.uint8).tobytes()),
        ("truncated header", good[:10]),
        ("huge declared header", b"ZOO\x01" + struct.pack("<I", 2**31) + b"{}"),
        ("forbidden dtype", b"ZOO\x01" + struct.pack("<I", len(forged)) + forged + bytes(64)),
        ("wrong version", b"ZOO\x01" + struct.pack("<I", len(versioned)) + versioned + bytes(64)),
    ]


def check_malformed(tut: TransportUnderTest) -> None:
    """Malformed frames are rejected and counted; the receiver keeps serving everyone."""
    name = "malformed"
    with tut.run() as run:
        if not hasattr(run.transport, "raw_pusher"):
            raise CheckSkipped(f"transport {tut.name!r} has no raw_pusher() to inject bytes (not a byte transport?)")
        puller = run.puller("bad")
        raw = run._keep(run.peer().raw_pusher("bad"))
        bad = _bad_frames()
        for what, payload in bad:
            if not raw.send_raw(payload, 10.0):
                _fail(name, f"could not send the {what} frame")
        good = {"x": np.arange(5, dtype=np.float32)}
        if not raw.send_raw(bytes(encode(good, {"ok": 1})), 10.0):
            _fail(name, "could not send the good frame after the bad ones")
        got, meta = _recv(name, puller, "the good frame sent after 5 malformed ones")
        assert_same_bundle(name, got, good)
        if meta != {"ok": 1}:
            _fail(name, f"good frame meta {meta!r}")
        counted = getattr(puller, "rejected", None)
        if counted is not None and counted != len(bad):
            _fail(name, f"rejected == {counted}, expected {len(bad)} ({', '.join(w for w, _ in bad)})")
        if hasattr(raw, "send_garbage"):
            # A corrupt record stream: only that connection is dropped.
            garbage = [b"\x00not a record at all, not even close" * 4,
                       b"ZOS1" + bytes([2, 0, 0, 0]) + struct.pack("<Q", 2**62)]
            for data in garbage:
                g = run._keep(run.peer().raw_pusher("bad"))
                if not g.send_garbage(data, 10.0):
                    _fail(name, "could not send garbage bytes")
            other = run.pusher("bad")
            if not other.send(good, {"ok": 2}, 10.0):
                _fail(name, "a well-behaved producer could not send after others sent garbage")
            got, meta = _recv(name, puller, "a message from a well-behaved producer after garbage from others")
            if meta != {"ok": 2}:
                _fail(name, f"got {meta} from the well-behaved producer")
            while puller.recv(0.2) is not None:
                pass
            if counted is not None and puller.rejected != len(bad) + len(garbage):
                _fail(name, f"rejected == {puller.rejected} after {len(garbage)} corrupt streams, "
                            f"expected {len(bad) + len(garbage)}")


def _exchange_everything(transport, peer, stream_prefix: str = "") -> list[Any]:
    """Open all six endpoint kinds and pass one message through each pattern; returns the endpoints."""
    payload = {"img": np.ones((64, 4, 84, 84), np.uint8), "small": np.arange(10)}
    puller, pusher = transport.puller(f"{stream_prefix}p"), peer.pusher(f"{stream_prefix}p")
    server, client = transport.reply_server(f"{stream_prefix}r"), peer.request_client(f"{stream_prefix}r", 3)
    pub, sub = transport.publisher(f"{stream_prefix}b"), peer.subscriber(f"{stream_prefix}b")
    endpoints = [puller, pusher, server, client, pub, sub]
    name = "exchange"
    for i in range(2):
        if not pusher.send(payload, {}, 10.0):
            _fail(name, f"push {i} not accepted")
        _recv(name, puller, f"push {i}")
        if not client.send(payload, {}, 10.0):
            _fail(name, f"request {i} not accepted")
        cid, _, _ = _recv(name, server, f"request {i}")
        if not server.reply(cid, payload, {}, 10.0):
            _fail(name, f"reply {i} not accepted")
        _recv(name, client, f"reply {i}")
    sub.latest(0.05)

    def publish_and_look():
        pub.publish(payload, {})
        return sub.latest(0.05)
    _until(name, "a published value", publish_and_look, 10.0)
    return endpoints


def check_clean_shutdown(tut: TransportUnderTest) -> None:
    """Closing every endpoint leaves at most the run directory and the run's lock file
    (``zoo-<run_id>`` and ``zoo-<run_id>.lock``: they live as long as the run);
    ``cleanup()`` removes everything."""
    name = "clean_shutdown"
    run_id = tut.new_run_id()
    transport = tut.make(run_id, create=True)
    if not hasattr(transport, "resources"):
        transport.cleanup()
        raise CheckSkipped(f"transport {tut.name!r} has no resources() to list what a run holds")
    try:
        endpoints = _exchange_everything(transport, tut.make(run_id))
        for e in endpoints:
            e.close()
        left = [r for r in transport.resources() if os.path.basename(r) not in (f"zoo-{run_id}", f"zoo-{run_id}.lock")]
        if left:
            _fail(name, f"after closing every endpoint these remain: {left}")
    finally:
        transport.cleanup()
    left = transport.resources()
    if left:
        _fail(name, f"after cleanup() these remain: {left}")


def check_two_runs(tut: TransportUnderTest) -> None:
    """Two runs with the same stream names at once: no crossed messages, no shared resources."""
    name = "two_runs"
    with tut.run() as a, tut.run() as b:
        pa, pb = a.puller("s"), b.puller("s")
        sa, sb = a.pusher("s"), b.pusher("s")
        ra, rb = a.reply_server("q"), b.reply_server("q")
        ca, cb = a.request_client("q", 1), b.request_client("q", 1)
        for run_tag, pusher, client in (("a", sa, ca), ("b", sb, cb)):
            if not pusher.send({"x": np.array([ord(run_tag)])}, {"run": run_tag}, 10.0):
                _fail(name, f"run {run_tag}: push not accepted")
            if not client.send({}, {"run": run_tag}, 10.0):
                _fail(name, f"run {run_tag}: request not accepted")
        for run_tag, puller, server in (("a", pa, ra), ("b", pb, rb)):
            _, meta = _recv(name, puller, f"run {run_tag}'s push")
            if meta["run"] != run_tag:
                _fail(name, f"run {run_tag}'s puller received run {meta['run']}'s message")
            cid, _, meta = _recv(name, server, f"run {run_tag}'s request")
            if meta["run"] != run_tag:
                _fail(name, f"run {run_tag}'s server received run {meta['run']}'s request")
            server.reply(cid, {}, {"run": run_tag}, 10.0)
        for run_tag, client in (("a", ca), ("b", cb)):
            _, meta = _recv(name, client, f"run {run_tag}'s reply")
            if meta["run"] != run_tag:
                _fail(name, f"run {run_tag}'s client received run {meta['run']}'s reply")
        if pa.recv(0.1) is not None or pb.recv(0.1) is not None:
            _fail(name, "a puller received a second message")
        if hasattr(a.transport, "resources"):
            shared = set(a.transport.resources()) & set(b.transport.resources())
            if shared:
                _fail(name, f"two runs share OS resources: {sorted(shared)}")


# -- cross-process checks -------------------------------------------------------------------------
def _child_transport(name: str, options: dict[str, Any], run_id: str, create: bool = False):
    from zoo.core.plugins import get_registry

    return get_registry().get("transport", name).load()(run_id, create=create, **options)


def _peer_main(name: str, options: dict[str, Any], run_id: str, peer: int, max_s: float) -> None:
    """Child process: push numbered messages and make numbered requests until killed (or ``max_s``)."""
    transport = _child_transport(name, options, run_id)
    pusher = transport.pusher("death-push")
    client = transport.request_client("death-req", peer)
    end = time.monotonic() + max_s
    seq = 0
    while time.monotonic() < end:
        pusher.send({"x": np.array([seq], np.int64)}, {"peer": peer, "seq": seq}, 0.5)
        if client.send({"x": np.array([seq], np.int64)}, {"peer": peer, "seq": seq}, 0.5):
            client.recv(0.5)
        seq += 1
        time.sleep(0.002)


def check_peer_death(tut: TransportUnderTest, max_s: float = 30.0) -> None:
    """Two producer/client processes; one is SIGKILLed: the consumer and the server keep serving
    the survivor; once both are dead, receives time out instead of hanging."""
    name = "peer_death"
    if not tut.cross_process:
        raise CheckSkipped(f"transport {tut.name!r} connects endpoints of one process only")
    ctx = mp.get_context("spawn")
    with tut.run() as run:
        puller = run.puller("death-push")
        server = run.reply_server("death-req")
        procs = {p: ctx.Process(target=_peer_main, args=(tut.name, tut.options, run.run_id, p, max_s), daemon=True)
                 for p in (1, 2)}
        for proc in procs.values():
            proc.start()
        try:
            pushes = {1: 0, 2: 0}
            requests = {1: 0, 2: 0}
            dead_replies: list[bool] = []

            def serve(until: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
                deadline = time.monotonic() + timeout
                while not until():
                    if time.monotonic() > deadline:
                        _fail(name, f"timed out after {timeout} s waiting for {what} "
                                    f"(pushes {pushes}, requests {requests})")
                    msg = puller.recv(0.02)
                    if msg is not None:
                        pushes[msg[1]["peer"]] += 1
                    req = server.recv(0.02)
                    if req is not None:
                        cid, _, meta = req
                        if cid != meta["peer"]:
                            _fail(name, f"request of peer {meta['peer']} arrived as client {cid}")
                        requests[cid] += 1
                        ok = server.reply(cid, {"x": np.array([meta["seq"]])}, {"seq": meta["seq"]}, 0.2)
                        if not procs[cid].is_alive():
                            dead_replies.append(ok)

            serve(lambda: min(pushes.values()) >= 3 and min(requests.values()) >= 3, "both peers to start")
            procs[1].kill()  # SIGKILL
            procs[1].join(5.0)
            base_push, base_req = pushes[2], requests[2]
            serve(lambda: pushes[2] >= base_push + 10 and requests[2] >= base_req + 10,
                  "the surviving peer to be served after the other was killed")
            procs[2].kill()  # SIGKILL
            procs[2].join(5.0)
            drained = 0
            while puller.recv(0.3) is not None:
                drained += 1
                if drained > 10_000:
                    _fail(name, "messages keep arriving after every producer was killed")
            if server.recv(0.3) is not None and server.recv(0.3) is not None:
                _fail(name, "requests keep arriving after every client was killed")
            ok = server.reply(1, {"x": np.array([0])}, {}, 0.2)
            if not isinstance(ok, bool):
                _fail(name, f"reply() to a dead client returned {ok!r}, expected a bool")
        finally:
            for proc in procs.values():
                if proc.is_alive():
                    proc.kill()
                proc.join(5.0)


def _owner_main(name: str, options: dict[str, Any], run_id: str, ready, max_s: float) -> None:
    """Child process: create a run, open every endpoint kind, move messages, then wait to be killed."""
    transport = _child_transport(name, options, run_id, create=True)
    endpoints = _exchange_everything(transport, _child_transport(name, options, run_id))
    ready.set()
    time.sleep(max_s)
    for e in endpoints:
        e.close()
    transport.cleanup()


def check_sigkill_reclaim(tut: TransportUnderTest, rounds: int = 5, max_s: float = 30.0) -> None:
    """``rounds`` times: a process owning a whole run is SIGKILLed; the next run reclaims its
    leftovers. At the end no resource of any killed run remains."""
    name = "sigkill_reclaim"
    if not tut.cross_process:
        raise CheckSkipped(f"transport {tut.name!r} connects endpoints of one process only")
    probe = tut.make(tut.new_run_id(), create=True)
    probe.cleanup()
    if not hasattr(probe, "resources"):
        raise CheckSkipped(f"transport {tut.name!r} has no resources() to list what a run holds")
    ctx = mp.get_context("spawn")
    killed: list[str] = []
    try:
        for i in range(rounds):
            run_id = tut.new_run_id()
            ready = ctx.Event()
            proc = ctx.Process(target=_owner_main, args=(tut.name, tut.options, run_id, ready, max_s), daemon=True)
            proc.start()
            try:
                if not ready.wait(max_s):
                    _fail(name, f"round {i}: the owner process did not get its run going within {max_s} s "
                                f"(exit code {proc.exitcode})")
                proc.kill()  # SIGKILL
            finally:
                if proc.is_alive():
                    proc.kill()
                proc.join(5.0)
            killed.append(run_id)
            if not tut.make(run_id).resources():
                _fail(name, f"round {i}: the killed run left nothing behind, so reclaiming is not tested "
                            "(resources() must list the run's segments / files)")
            for earlier in killed[:-1]:
                left = tut.make(earlier).resources()
                if left:
                    _fail(name, f"round {i}: the new run did not reclaim {left} of killed run {earlier}")
        final = tut.make(tut.new_run_id(), create=True)
        final.cleanup()
        left = {run_id: tut.make(run_id).resources() for run_id in killed}
        left = {k: v for k, v in left.items() if v}
        if left:
            _fail(name, f"leftovers of killed runs after a new run started: {left}")
    finally:
        for run_id in killed:
            with contextlib.suppress(Exception):
                tut.make(run_id).cleanup()


CHECKS: dict[str, Callable[[TransportUnderTest], None]] = {
    "round_trip": check_round_trip,
    "ordering": check_ordering,
    "replies_out_of_order": check_replies_out_of_order,
    "back_pressure": check_back_pressure,
    "publish_latest": check_publish_latest,
    "close": check_close,
    "malformed": check_malformed,
    "clean_shutdown": check_clean_shutdown,
    "two_runs": check_two_runs,
    "peer_death": check_peer_death,
    "sigkill_reclaim": check_sigkill_reclaim,
}
"""Every check by name, in the order :func:`check_transport` runs them."""
CROSS_PROCESS_CHECKS = ("peer_death", "sigkill_reclaim")


@dataclass
class TransportReport:
    """What :func:`check_transport` found: ``passed`` and ``skipped`` (name -> reason) checks."""

    name: str
    passed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"transport {self.name!r}: {len(self.passed)} checks passed, {len(self.skipped)} skipped"]
        lines += [f"  skipped {k}: {v}" for k, v in self.skipped.items()]
        return "\n".join(lines)


def check_transport(name: str, registry=None, checks: list[str] | None = None, **options: Any) -> TransportReport:
    """Run the conformance checks on the registered transport ``name``.

    ``checks``: names from :data:`CHECKS` (default: all); ``options``: extra factory keyword
    arguments. Raises :class:`TransportCheckError` at the first broken contract.
    """
    tut = TransportUnderTest.from_registry(name, registry, **options)
    report = TransportReport(name)
    for check in checks or list(CHECKS):
        try:
            CHECKS[check](tut)
        except CheckSkipped as exc:
            report.skipped[check] = str(exc)
        else:
            report.passed.append(check)
    return report
