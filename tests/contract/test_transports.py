"""Every registered transport passes the conformance suite (:mod:`zoo.core.testing.transport_checks`),
plus the transport-specific contracts: tcp's token, shm's ownership and reclaiming, the
socket engine's frame layout.

Cross-process checks (spawned processes) are skipped for transports that connect endpoints
of one process only (``inline``).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from zoo.core.arrays import encode, layout
from zoo.core.plugins import get_registry
from zoo.core.testing.transport_checks import (
    CHECKS,
    CROSS_PROCESS_CHECKS,
    CheckSkipped,
    TransportUnderTest,
    sample_bundle,
)

EXPECTED = ("inline", "nng", "shm", "tcp")
REGISTERED = get_registry().names("transport")
NAMES = sorted(set(REGISTERED) | set(EXPECTED))


# Every registered transport with its defaults, plus option variants that change the wire.
VARIANTS = [(name, {}) for name in NAMES] + [("nng", {"scheme": "tcp"})]


@pytest.fixture(scope="module", params=VARIANTS,
                ids=[name + "".join(f"[{k}={v}]" for k, v in opts.items()) for name, opts in VARIANTS])
def tut(request) -> TransportUnderTest:
    name, options = request.param
    if name not in REGISTERED:
        pytest.skip(f"transport {name!r} is not registered in this checkout")
    return TransportUnderTest.from_registry(name, **options)


@pytest.mark.parametrize("check", list(CHECKS))
def test_conformance(tut: TransportUnderTest, check: str) -> None:
    if check in CROSS_PROCESS_CHECKS and not tut.cross_process:
        pytest.skip(f"{tut.name} connects endpoints within one process only")
    try:
        CHECKS[check](tut)
    except CheckSkipped as exc:
        pytest.skip(str(exc))


def test_every_builtin_transport_is_registered() -> None:
    assert [n for n in EXPECTED if n in REGISTERED] == list(EXPECTED)


# -- socket engine framing ------------------------------------------------------------------------
def test_layout_parts_equal_encode_byte_for_byte() -> None:
    bundle = sample_bundle(3)
    meta = {"a": [1, 2], "b": "x"}
    lay = layout(bundle, meta)
    want = bytes(encode(bundle, meta))
    assert b"".join(bytes(p) for p in lay.parts()) == want
    assert bytes(lay.to_bytes()) == want
    assert lay.size == len(want)
    assert bytes(layout({}, None).to_bytes()) == bytes(encode({}, None))


# -- tcp ------------------------------------------------------------------------------------------
def test_tcp_binds_loopback_and_publishes_its_port() -> None:
    tut = TransportUnderTest.from_registry("tcp")
    with tut.run() as run:
        puller = run.puller("addr")
        info = run.transport.resolver.lookup(f"{run.run_id}/addr.tcp", 5.0)
        assert info["host"] == "127.0.0.1"
        assert info["pid"] == os.getpid()
        assert puller._lsock.getsockname() == ("127.0.0.1", info["port"])
        # the files resolver keeps it in the run directory: <tmp>/zoo-<run_id>/keys/addr.tcp.json
        assert os.path.exists(os.path.join(run.transport.dir, "keys", "addr.tcp.json"))
        puller.close()
        assert run.transport.resolver.get(f"{run.run_id}/addr.tcp") is None  # a closed listener withdraws


def test_tcp_token_refuses_peers_without_it() -> None:
    tut = TransportUnderTest.from_registry("tcp", token="s3cret")
    with tut.run() as run:
        puller = run.puller("tok")
        wrong = TransportUnderTest.from_registry("tcp", token="wrong").make(run.run_id).pusher("tok")
        none = TransportUnderTest.from_registry("tcp", token="").make(run.run_id).pusher("tok")
        right = run.pusher("tok")
        try:
            wrong.send({}, {"who": "wrong"}, 2.0)
            none.send({}, {"who": "none"}, 2.0)
            assert right.send({}, {"who": "right"}, 2.0)
            assert puller.recv(5.0) == ({}, {"who": "right"})
            assert puller.recv(0.2) is None
            assert puller.refused == 2
        finally:
            wrong.close()
            none.close()


def test_nng_token_refuses_messages_without_it_and_is_not_seen_by_the_receiver() -> None:
    tut = TransportUnderTest.from_registry("nng", scheme="tcp", token="s3cret")
    with tut.run() as run:
        puller = run.puller("tok")
        server = run.reply_server("req")
        wrong = TransportUnderTest.from_registry("nng", scheme="tcp", token="wrong").make(run.run_id)
        none = TransportUnderTest.from_registry("nng", scheme="tcp", token="").make(run.run_id)
        senders = [wrong.pusher("tok"), none.pusher("tok"), none.request_client("req", 7)]
        right, client = run.pusher("tok"), run.request_client("req", 3)
        try:
            assert senders[0].send({}, {"who": "wrong"}, 2.0) and senders[1].send({}, {"who": "none"}, 2.0)
            assert senders[2].send({}, {"who": "none"}, 2.0)
            assert right.send({}, {"who": "right"}, 2.0)
            assert puller.recv(5.0) == ({}, {"who": "right"})  # the token is taken out of meta
            assert puller.recv(0.3) is None
            assert puller.refused == 2
            assert client.send({}, {"who": "right"}, 2.0)
            assert server.recv(5.0) == (3, {}, {"who": "right", "client_id": 3})
            assert server.recv(0.3) is None and server.refused == 1
            assert server.reply(3, {}, {"ok": 1}, 2.0) and client.recv(5.0) == ({}, {"ok": 1})
        finally:
            for endpoint in senders:
                endpoint.close()


# -- shm ------------------------------------------------------------------------------------------
def test_shm_segment_names_carry_run_stream_role_and_owner_pid() -> None:
    tut = TransportUnderTest.from_registry("shm")
    with tut.run() as run:
        run.puller("samples")
        run.reply_server("infer")
        run.request_client("infer", 5)
        run.publisher("params")
        segs = sorted(os.path.basename(r) for r in run.transport.resources() if r.startswith("/dev/shm/"))
        pid = os.getpid()
        assert segs == sorted([f"zoo-{run.run_id}.{s}.p{pid}.g0"
                               for s in ("samples.pull", "infer.req", "infer.c5", "params.pub")]
                              + [f"zoo-{run.run_id}.lock"])  # the run lock every process of the run holds


def test_shm_frames_bigger_than_a_slot_go_inline_then_the_ring_grows() -> None:
    tut = TransportUnderTest.from_registry("shm", slot_bytes=64 << 10, slots=2)
    with tut.run() as run:
        puller, pusher = run.puller("grow"), run.pusher("grow")
        big = {"x": np.arange(100_000, dtype=np.int64)}  # 800 000 bytes > 64 KiB slots
        for i in range(3):
            assert pusher.send(big, {"i": i}, 5.0)
            got, meta = puller.recv(5.0)
            assert meta == {"i": i} and np.array_equal(got["x"], big["x"])
        ring = puller.ring
        assert ring.gen == 1
        assert ring.slot_bytes == 1_003_520  # 1.25 x 800 128-byte frame, rounded up to 4 KiB pages
        segs = sorted(os.path.basename(r) for r in run.transport.resources() if r.startswith("/dev/shm/"))
        # generation 0 was unlinked; the run's lock file stays
        assert segs == [f"zoo-{run.run_id}.grow.pull.p{os.getpid()}.g1", f"zoo-{run.run_id}.lock"]


def test_shm_reclaims_lockless_segments_only_of_dead_owner_pids(tmp_path) -> None:
    """Segments without a run lock file (made by Zoo versions before run locks) fall back to the
    owner-pid rule."""
    import multiprocessing as mp

    from zoo.transports.shm.segments import Segment, list_segments, reclaim_stale_segments

    proc = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join()
    dead_pid = proc.pid
    alive = Segment.create(f"zoo-reclaimtest{os.getpid()}.s.pull.p{os.getpid()}.g0", 4096, 1, 0)
    dead = f"zoo-reclaimtest{os.getpid()}.s.pull.p{dead_pid}.g0"
    with open(f"/dev/shm/{dead}", "wb") as f:
        f.write(b"\0" * 4096)
    try:
        assert dead in reclaim_stale_segments()
        assert list_segments(f"zoo-reclaimtest{os.getpid()}.") == [alive.name]
    finally:
        alive.close()
    assert list_segments(f"zoo-reclaimtest{os.getpid()}.") == []


def test_shm_attaching_process_does_not_let_resource_tracker_unlink() -> None:
    # A spawned child attaches to a ring and exits; the segment must survive it.
    import multiprocessing as mp

    tut = TransportUnderTest.from_registry("shm")
    with tut.run() as run:
        puller = run.puller("att")
        proc = mp.get_context("spawn").Process(target=_push_once, args=(run.run_id,))
        proc.start()
        for i in range(2):
            got = puller.recv(20.0)
            assert got is not None and got[1] == {"i": i}
        proc.join(60.0)
        # exit code 0: the child never registered a segment with a resource tracker (which would
        # unlink it when the tracker ends: the child's exit, or the test run's, as the tracker is shared)
        assert proc.exitcode == 0
        assert os.path.exists(f"/dev/shm/{puller.ring.gens[0].name}")


def _push_once(run_id: str) -> None:
    from multiprocessing import resource_tracker

    from zoo.transports.shm.transport import ShmTransport

    registered: list[tuple[str, str]] = []
    resource_tracker.register = lambda name, rtype: registered.append((name, rtype))  # type: ignore[assignment]
    pusher = ShmTransport(run_id).pusher("att")
    assert pusher.send({"x": np.ones(3)}, {"i": 0}, 10.0)  # inline: the ring is not known yet
    end = time.monotonic() + 10.0
    while not pusher.conn.shm.peer.grants and time.monotonic() < end:
        pusher._poll(0.05)
    assert pusher.send({"x": np.ones(3)}, {"i": 1}, 10.0)  # through a slot: the child attached
    pusher.close()
    assert [r for r in registered if r[1] == "shared_memory"] == [], registered


def test_layout_matches_encode_for_random_bundles() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    from zoo.core.arrays import ALLOWED_DTYPES

    arrays = st.sampled_from(sorted(ALLOWED_DTYPES)).flatmap(
        lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)))
    bundles = st.dictionaries(st.text("abc", min_size=1, max_size=3), arrays, max_size=4)

    @settings(max_examples=60, deadline=None)
    @given(bundle=bundles, meta=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
    def prop(bundle, meta):
        lay = layout(bundle, meta)
        want = bytes(encode(bundle, meta))
        assert b"".join(bytes(p) for p in lay.parts()) == want
        slot = np.full(lay.size + 7, 0xAB, np.uint8)  # padding bytes are not touched: compare data only
        lay.write_into(slot)
        from zoo.core.arrays import decode, flatten

        got, got_meta = decode(slot[:lay.size])
        assert got_meta == meta
        for (k1, a), (k2, b) in zip(flatten(got), flatten(bundle), strict=True):
            assert k1 == k2 and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    prop()


def test_inline_refuses_a_run_created_in_another_process() -> None:
    from zoo.core.transport import TransportError
    from zoo.transports.inline.transport import InlineTransport

    with pytest.raises(TransportError, match="within one process only"):
        InlineTransport("never-created-here")
    run = InlineTransport("created-here", create=True)
    InlineTransport("created-here").pusher("s").close()  # a peer in the same process is fine
    run.cleanup()
    with pytest.raises(TransportError, match="within one process only"):
        InlineTransport("created-here")


def test_nng_warns_about_a_tokenless_non_loopback_listener_once_and_only_where_it_listens(caplog, tmp_path) -> None:
    from zoo.transports.nng.transport import NngTransport

    transport = NngTransport("warn-check", base_dir=str(tmp_path), create=True, scheme="tcp", host="0.0.0.0")
    try:
        with caplog.at_level("WARNING", logger="zoo.transports.nng.transport"):
            pusher = transport.pusher("s")  # dials only (no port file yet: nothing bound)
            pusher.close()
            assert caplog.records == []
            transport._listen_address("s")  # what a puller, server or publisher binds with
            transport._listen_address("t")
        assert [r.getMessage().split(" over ")[0] for r in caplog.records] == [
            "nng transport of run warn-check listens on non-loopback 0.0.0.0"]
    finally:
        transport.cleanup()


def _until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s: {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("scheme", ["ipc", "tcp"])
def test_nng_the_newest_request_client_of_an_id_gets_the_replies_while_the_old_one_lives(scheme: str) -> None:
    # Before: over ipc the new client could not listen (AddressInUse: the live one held
    # <stream>-c5.ipc); over tcp the server kept dialling the old client's port, so the new
    # client's reply went to the old one.
    with TransportUnderTest.from_registry("nng", scheme=scheme).run() as run:
        server, old = run.reply_server("q"), run.request_client("q", 5)
        assert old.send({}, {"seq": 1}, 5.0)
        assert server.recv(10.0) == (5, {}, {"seq": 1, "client_id": 5})
        assert server.reply(5, {}, {"seq": 1}, 5.0) and old.recv(10.0) == ({}, {"seq": 1})
        assert old.send({}, {"seq": 2}, 5.0)
        assert server.recv(10.0) == (5, {}, {"seq": 2, "client_id": 5})
        new = run.request_client("q", 5)  # a restarted actor, before the old one is gone
        assert new.send({}, {"seq": 1, "new": True}, 5.0)
        # old's request came first: its reply still goes to old
        assert server.reply(5, {}, {"seq": 2}, 5.0) and old.recv(10.0) == ({}, {"seq": 2})
        assert server.recv(10.0) == (5, {}, {"seq": 1, "new": True, "client_id": 5})
        assert server.reply(5, {"x": np.array([7])}, {"seq": 1}, 5.0)
        got = new.recv(10.0)
        assert got is not None and got[1] == {"seq": 1} and got[0]["x"].tolist() == [7]
        assert old.send({}, {"seq": 3}, 5.0)  # the replaced client's requests are dropped
        dropped = []
        _until(lambda: dropped.append(server.recv(0.1)) or server.superseded == 1, 30,
               "the old client's request to be dropped")
        assert dropped == [None] * len(dropped)  # never returned by recv
        assert server.recv(0.2) is None and new.recv(0.2) is None and old.recv(0.2) is None


def test_nng_a_new_request_client_never_gets_a_reply_queued_for_the_dead_one() -> None:
    # Before: the server's Push0 socket to <stream>-c5.ipc, once it saw the dead client's pipe
    # closed, queued the reply to the dead client's request and handed it to the new client at
    # its address: the new client's first reply was the dead one's (seq 4, not 1), and a
    # client that pairs each request with the next reply was one behind for good.
    with TransportUnderTest.from_registry("nng").run() as run:
        server, dead = run.reply_server("q"), run.request_client("q", 5)
        assert dead.send({}, {"seq": 3}, 5.0)
        assert server.recv(10.0) == (5, {}, {"seq": 3, "client_id": 5})
        assert server.reply(5, {}, {"seq": 3}, 5.0) and dead.recv(10.0) == ({}, {"seq": 3})
        assert dead.send({}, {"seq": 4}, 5.0)
        assert server.recv(10.0) == (5, {}, {"seq": 4, "client_id": 5})
        dead.close()
        sock = server.replies[5][1].sock
        _until(lambda: not sock.pipes, 30, "the server to see the dead client's pipe closed")
        assert server.reply(5, {}, {"seq": 4}, 5.0)  # queued: nng has no pipe for it
        new = run.request_client("q", 5)
        assert new.send({}, {"seq": 1}, 5.0)
        assert server.recv(10.0) == (5, {}, {"seq": 1, "client_id": 5})
        assert server.reply(5, {}, {"seq": 1}, 5.0)
        assert new.recv(10.0) == ({}, {"seq": 1})
        assert new.recv(0.3) is None
