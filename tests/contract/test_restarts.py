"""Streams survive a restarted worker, over every transport that joins processes.

What the supervisor relies on when it replaces a dead worker (docs/supervision.md):

- a producer SIGKILLed in the middle of its messages leaves only whole messages behind
  (every one received is intact) and a new producer on the same stream is heard;
- a reply server that died and was started again answers the same, surviving client;
- a new request client with the dead one's id gets its replies;
- a new publisher replaces a dead one for the surviving subscriber, although its versions
  start again;
- a new puller gets what the surviving pusher sends.

Every wait is bounded; children are spawned processes, killed at the end if still alive.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

from zoo.core.plugins import get_registry
from zoo.core.testing.transport_checks import TransportUnderTest

BIG = 1 << 20  # 1 MiB frames: a SIGKILL lands in the middle of one more often than not
NAMES = [n for n in get_registry().names("transport")
         if get_registry().get("transport", n).option("cross_process", True) is not False]


def _child(name: str, run_id: str, job: str, tag: int, n: int, received=None) -> None:
    t = TransportUnderTest.from_registry(name).make(run_id)
    if job == "push":  # n messages (0: until killed), each BIG bytes all equal to seq % 251
        p, seq = t.pusher("rs-push"), 0
        while n == 0 or seq < n:
            seq += 1
            while not p.send({"x": np.full(BIG, seq % 251, np.uint8)}, {"seq": seq, "tag": tag}, 1.0):
                pass
        # nng drops what is still queued when a sender closes at once: close once the test has them all
        received.wait(120)
        p.close()
    elif job == "serve":  # answer every request with its own seq, until killed
        s = t.reply_server("rs-req")
        while True:
            r = s.recv(0.2)
            if r is not None:
                s.reply(r[0], {"x": r[1]["x"]}, {"tag": tag, "seq": r[2]["seq"]}, 1.0)
    elif job == "request":  # as client 5: requests until n replies came (0: until killed); exit 0
        c, got, seq = t.request_client("rs-req", 5), 0, 0
        deadline = time.monotonic() + 60
        while (n == 0 or got < n) and time.monotonic() < deadline:
            seq += 1
            if c.send({"x": np.array([seq])}, {"seq": seq, "tag": tag}, 1.0):
                reply = c.recv(2.0)
                got += reply is not None and reply[1]["seq"] == seq
        c.close()
        os._exit(0 if got >= n else 1)
    elif job == "publish":  # versions 1, 2, ... every 50 ms, until killed
        pub, v = t.publisher("rs-pub"), 0
        while True:
            v += 1
            pub.publish({"x": np.array([v])}, {"v": v, "tag": tag})
            time.sleep(0.05)
    elif job == "pull":  # receive n messages of this run (0: until killed); exit 0
        pl, got = t.puller("rs-pull"), 0
        deadline = time.monotonic() + 60
        while (n == 0 or got < n) and time.monotonic() < deadline:
            got += pl.recv(1.0) is not None
        pl.close()
        os._exit(0 if got >= n else 1)


class Children:
    def __init__(self, name: str, run_id: str) -> None:
        self.name, self.run_id, self.procs = name, run_id, []
        self.ctx = mp.get_context("spawn")

    def start(self, job: str, tag: int, n: int = 0, received=None):
        """A child doing ``job``; a pusher of ``n`` messages closes once ``received`` (an Event of
        :attr:`ctx`) is set."""
        proc = self.ctx.Process(target=_child, args=(self.name, self.run_id, job, tag, n, received), daemon=True)
        proc.start()
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5)


@pytest.fixture(params=NAMES)
def env(request):
    tut = TransportUnderTest.from_registry(request.param)
    with tut.run() as run:
        children = Children(request.param, run.run_id)
        try:
            yield run, children
        finally:
            children.close()


def kill(proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(5)


def until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s: {what}"


def test_a_killed_pusher_leaves_only_whole_messages_and_a_new_pusher_is_heard(env):
    run, children = env
    puller = run.puller("rs-push")
    first = children.start("push", tag=1)
    received: list[tuple[int, int]] = []

    def take(timeout: float) -> bool:
        msg = puller.recv(timeout)
        if msg is None:
            return False
        x, meta = msg[0]["x"], msg[1]
        # whole: every byte of the frame is the sender's for that seq
        assert x.shape == (BIG,) and int(x.min()) == int(x.max()) == meta["seq"] % 251, meta
        received.append((meta["tag"], meta["seq"]))
        return True

    until(lambda: take(0.5) and len(received) >= 3, 60, "3 messages of the first pusher")
    kill(first)  # most likely in the middle of a frame
    while take(1.0):  # what was committed before the kill still arrives, whole
        pass
    ones = [seq for tag, seq in received if tag == 1]
    assert ones == list(range(1, len(ones) + 1))  # in order, none lost before the kill, none torn
    got_them = children.ctx.Event()
    children.start("push", tag=2, n=5, received=got_them)
    until(lambda: take(0.5) and sum(tag == 2 for tag, _ in received) == 5, 120, "the new pusher's 5 messages")
    got_them.set()
    assert [seq for tag, seq in received if tag == 2] == [1, 2, 3, 4, 5]


def test_a_restarted_reply_server_answers_the_surviving_client(env):
    run, children = env
    client = run.request_client("rs-req", 7)
    server = children.start("serve", tag=1)
    answers: list[int] = []
    seq = 0

    def ask() -> bool:
        nonlocal seq
        seq += 1
        if client.send({"x": np.array([seq])}, {"seq": seq}, 1.0):
            deadline = time.monotonic() + 2.0
            while (left := deadline - time.monotonic()) > 0:
                reply = client.recv(left)
                if reply is not None and reply[1]["seq"] == seq:  # late replies to older requests are skipped
                    answers.append(reply[1]["tag"])
                    return True
        return False

    until(ask, 60, "the first server's reply")
    kill(server)
    children.start("serve", tag=2)
    until(lambda: ask() and answers[-1] == 2, 60, "a reply of the restarted server")
    assert answers[0] == 1 and answers[-1] == 2


def test_a_new_request_client_with_a_dead_clients_id_gets_its_replies(env):
    run, children = env
    server = run.reply_server("rs-req")
    served: list[tuple[int, int]] = []

    def serve_until(proc=None, count=None, timeout=60.0) -> None:
        deadline = time.monotonic() + timeout
        while (proc is not None and proc.exitcode is None) or (count is not None and len(served) < count):
            assert time.monotonic() < deadline, f"timed out serving (served {served})"
            r = server.recv(0.2)
            if r is not None:
                served.append((r[0], r[2]["tag"]))
                server.reply(r[0], {"x": r[1]["x"]}, {"seq": r[2]["seq"]}, 0.5)

    first = children.start("request", tag=1)
    serve_until(count=3)
    kill(first)
    second = children.start("request", tag=2, n=3)
    serve_until(proc=second)
    assert second.exitcode == 0  # it got its 3 replies
    assert {cid for cid, _ in served} == {5} and [tag for _, tag in served][-3:] == [2, 2, 2]


def test_a_restarted_publisher_replaces_the_dead_one_for_a_subscriber(env):
    run, children = env
    sub = run.subscriber("rs-pub")
    seen: list[tuple[int, int]] = []

    def look() -> bool:
        msg = sub.latest(0.5)
        if msg is not None:
            seen.append((msg[1]["tag"], msg[1]["v"]))
        return msg is not None

    first = children.start("publish", tag=1)
    until(lambda: look() and seen[-1][1] >= 5, 60, "version 5 of the first publisher")
    kill(first)
    children.start("publish", tag=2)  # its versions start again at 1
    until(lambda: look() and seen[-1][0] == 2, 60, "the restarted publisher")
    until(lambda: look() and seen[-1][1] >= 3, 30, "versions 3 and on of the restarted publisher")
    twos = [v for tag, v in seen if tag == 2]
    assert twos == sorted(twos) and seen[-1][0] == 2  # never an older value after a newer one


def test_a_restarted_puller_gets_what_the_surviving_pusher_sends(env):
    run, children = env
    pusher = run.pusher("rs-pull")
    first = children.start("pull", tag=1)
    seq = 0

    def push(proc) -> None:
        nonlocal seq
        seq += 1
        pusher.send({"x": np.array([seq])}, {"seq": seq}, 0.2)

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and seq < 20:
        push(first)
    kill(first)
    second = children.start("pull", tag=2, n=3)
    until(lambda: push(second) or second.exitcode is not None, 60, "the new puller to get 3 messages")
    assert second.exitcode == 0
