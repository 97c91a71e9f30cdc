"""The tcp listener before a peer authenticates (issue 20, item 12).

A peer that has not sent an accepted HELLO may send only a HELLO of at most
``MAX_HELLO_BYTES``; it is dropped if it has not done so within ``handshake_timeout_s``;
no read buffer is allocated for it before; a listener holds at most ``max_connections``
connections; refusals are counted per reason and their log lines rate-limited.

Every test talks to a real listener over loopback with raw sockets and waits for what it can
observe (the peer's socket closed, a counter) while pumping the listener's ``recv``.
"""
from __future__ import annotations

import json
import logging
import math
import re
import socket
import threading
import time
import tracemalloc
import uuid

import pytest

from zoo.core.arrays import MAGIC
from zoo.core.testing.transport_checks import TransportUnderTest
from zoo.transports.sockets.framing import FRAME, HELLO, MAX_HELLO_BYTES, PROTOCOL_VERSION, REC, REC_MAGIC

DEADLINE_S = 30.0  # generous: a loaded 2-core machine


def _port(run, stream: str) -> int:
    return run.transport.resolver.lookup(f"{run.run_id}/{stream}.tcp", 5.0)["port"]


def _dial(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
    sock.settimeout(None)  # blocking: MSG_DONTWAIT then answers at once (a timeout would wait for data)
    return sock


def _closed(sock: socket.socket) -> bool:
    """Whether the listener has closed ``sock`` (EOF or reset seen, without consuming data)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def _pump(endpoint, cond, deadline_s: float = DEADLINE_S) -> bool:
    """Let ``endpoint`` (a puller) handle its sockets until ``cond()`` holds or the deadline passes."""
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            return False
        endpoint.recv(0.02)
    return True


def _hello(run_id: str, stream: str, token: str | None = None, role: str = "pusher") -> bytes:
    payload = json.dumps({"v": PROTOCOL_VERSION, "run": run_id, "stream": stream, "role": role,
                          "client_id": None, "pid": 1, "token": token}).encode()
    return REC.pack(REC_MAGIC, HELLO, len(payload)) + payload


def _send_all_until_closed(sock: socket.socket, data: bytes, chunk: int = 64 << 10) -> threading.Thread:
    """Send ``data`` from a thread, stopping at the first error (the listener closed on us)."""
    def run() -> None:
        try:
            for i in range(0, len(data), chunk):
                sock.sendall(data[i:i + chunk])
        except OSError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("first", ["frame-512MiB", "hello-over-the-bound"])
def test_a_first_record_other_than_a_bounded_hello_is_refused_before_any_buffer_is_allocated(first):
    tut = TransportUnderTest.from_registry("tcp", token="s3cret")
    with tut.run() as run:
        puller = run.puller("s")
        port = _port(run, "s")
        if first == "frame-512MiB":  # the frame's payload starts with the wire magic, as a real one does
            data = REC.pack(REC_MAGIC, FRAME, 512 << 20) + MAGIC + bytes((2 << 20) - len(MAGIC))
        else:
            data = REC.pack(REC_MAGIC, HELLO, MAX_HELLO_BYTES + 1) + b"{" * 1000
        tracemalloc.start()
        try:
            sock = _dial(port)
            sender = _send_all_until_closed(sock, data)
            assert _pump(puller, lambda: _closed(sock)), "the listener kept the connection open"
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sender.join(DEADLINE_S)
        sock.close()
        assert peak < 1 << 20, f"the listener allocated {peak} bytes for a peer that never authenticated"
        assert (puller.refused, dict(puller.refusals), puller.rejected) == (1, {"protocol": 1}, 0)
        assert puller.conns == set()


def test_idle_unauthenticated_connections_hold_no_read_buffer():
    tut = TransportUnderTest.from_registry("tcp")
    with tut.run() as run:
        puller = run.puller("s")
        port = _port(run, "s")
        puller.recv(0.01)
        tracemalloc.start()
        socks = []
        try:
            before, _ = tracemalloc.get_traced_memory()
            socks = [_dial(port) for _ in range(100)]
            assert _pump(puller, lambda: len(puller.conns) == 100)
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            for sock in socks:
                sock.close()
        # Before: a 256 KiB staging buffer each (+25 MiB for 100). Now: the connection objects only.
        assert after - before < 100 * (8 << 10), f"{after - before} bytes for 100 idle connections"


@pytest.mark.parametrize("pace", ["silent", "one-byte-at-a-time"])
def test_a_peer_that_does_not_complete_its_hello_in_time_is_dropped(pace):
    tut = TransportUnderTest.from_registry("tcp", handshake_timeout_s=0.5)
    with tut.run() as run:
        puller = run.puller("s")
        port = _port(run, "s")
        hello = _hello(run.run_id, "s")
        sock = _dial(port)
        sent = [0]
        stop = threading.Event()

        def loris() -> None:  # a valid HELLO, one byte every 0.05 s: ~10 s for the whole of it
            try:
                for i in range(len(hello)):
                    if stop.wait(0.05):
                        return
                    sock.send(hello[i:i + 1])
                    sent[0] += 1
            except OSError:
                pass

        thread = threading.Thread(target=loris, daemon=True)
        if pace == "one-byte-at-a-time":
            thread.start()
        try:
            assert _pump(puller, lambda: _closed(sock)), "the listener kept a peer without a HELLO"
        finally:
            stop.set()
        if pace == "one-byte-at-a-time":
            thread.join(DEADLINE_S)
            assert 0 < sent[0] < len(hello)  # closed while its HELLO was still incomplete
        sock.close()
        assert (puller.refused, dict(puller.refusals)) == (1, {"timeout": 1})
        # A peer that says HELLO at once is served as before.
        pusher = run.pusher("s")
        assert pusher.send({}, {"n": 1}, 5.0)
        assert puller.recv(DEADLINE_S) == ({}, {"n": 1})


def test_connections_over_the_cap_are_refused_and_counted():
    tut = TransportUnderTest.from_registry("tcp", max_connections=3)
    with tut.run() as run:
        puller = run.puller("s")
        port = _port(run, "s")
        held = [_dial(port) for _ in range(3)]
        assert _pump(puller, lambda: len(puller.conns) == 3)
        extra = [_dial(port) for _ in range(2)]
        assert _pump(puller, lambda: all(_closed(s) for s in extra)), "connections over the cap were kept"
        assert not any(_closed(s) for s in held)
        assert (puller.refused, dict(puller.refusals), len(puller.conns)) == (2, {"capacity": 2}, 3)
        held.pop().close()  # room again: a real pusher gets in
        pusher = run.pusher("s")
        assert pusher.send({}, {"n": 1}, DEADLINE_S)
        assert puller.recv(DEADLINE_S) == ({}, {"n": 1})
        for sock in held + extra:
            sock.close()


@pytest.mark.parametrize("token", ["wrong", None])
def test_a_wrong_or_missing_token_is_closed(token):
    tut = TransportUnderTest.from_registry("tcp", token="s3cret")
    with tut.run() as run:
        puller = run.puller("s")
        sock = _dial(_port(run, "s"))
        sock.sendall(_hello(run.run_id, "s", token=token) + REC.pack(REC_MAGIC, FRAME, 100) + bytes(100))
        assert _pump(puller, lambda: _closed(sock))
        sock.close()
        assert (puller.refused, dict(puller.refusals), puller.rejected) == (1, {"token": 1}, 0)


def test_refusal_log_lines_are_rate_limited(caplog):
    tut = TransportUnderTest.from_registry("tcp", token="s3cret")
    with tut.run() as run:
        puller = run.puller("s")
        port = _port(run, "s")
        caplog.set_level(logging.WARNING, logger="zoo.transports")
        start = time.monotonic()
        for _ in range(50):
            sock = _dial(port)
            sock.sendall(_hello(run.run_id, "s", token="wrong"))
            assert _pump(puller, lambda: _closed(sock))
            sock.close()
        elapsed = time.monotonic() - start
        assert puller.refusals == {"token": 50}
        puller.close()  # says how many refusals its last line left out
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    from zoo.transports.sockets.engine import REFUSAL_LOG_INTERVAL_S

    # One line per interval for the one reason, plus the summary at close.
    bound = 1 + math.ceil(elapsed / REFUSAL_LOG_INTERVAL_S) + 1
    assert 2 <= len(lines) <= bound, lines
    assert "refused peer 127.0.0.1:" in lines[0] and lines[0].endswith(": missing or wrong token")
    assert lines[-1].endswith(" more peers (token) since the last such line")
    # Nothing is lost: the lines account for all 50 (one each, plus the counts they carry).
    held = [int(m) for line in lines for m in re.findall(r"(\d+) more", line)]
    assert sum(1 for line in lines if "refused peer" in line) + sum(held) == 50


_LOW_FD_LISTENER = r"""
import json, os, resource, sys, time
from zoo.transports.tcp.transport import TcpTransport
tr = TcpTransport(sys.argv[1], create=True, handshake_timeout_s=600, max_connections=1000)
puller = tr.puller("s")
print(tr.resolver.lookup(f"{sys.argv[1]}/s.tcp", 5.0)["port"], flush=True)
open_fds = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds + 6, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
end = time.monotonic() + 120
while time.monotonic() < end and not os.path.exists(sys.argv[2]):
    puller.recv(0.02)
print(json.dumps({"refusals": puller.refusals, "conns": len(puller.conns)}), flush=True)
sys.stdin.readline()  # the test counts the connections closed so far first
puller.close()
tr.cleanup()
"""


def test_a_listener_out_of_file_descriptors_refuses_new_connections_instead_of_leaving_them_waiting(tmp_path):
    # The cap (1000) is above what the process may open: accept fails with EMFILE. The
    # listener must still close the connections it cannot hold (else they wait in the kernel's
    # backlog forever, and the listener's socket stays readable: every poll returns at once).
    import subprocess
    import sys

    run_id = f"fd{uuid.uuid4().hex[:8]}"
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", _LOW_FD_LISTENER, run_id, str(stop)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    socks = []
    try:
        port = int(proc.stdout.readline())
        socks = [_dial(port) for _ in range(20)]
        end = time.monotonic() + DEADLINE_S
        while sum(map(_closed, socks)) < 10 and time.monotonic() < end:
            time.sleep(0.05)  # the listener is another process: nothing here to pump
        stop.touch()
        report = json.loads(proc.stdout.readline())  # the listener has stopped accepting
        closed = sum(map(_closed, socks))
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        for sock in socks:
            sock.close()
    # Room for a few of them (about 6 descriptors were left); every other one was closed.
    assert report["conns"] + closed == 20 and closed >= 10, (report, closed)
    assert report["refusals"] == {"capacity": closed}
