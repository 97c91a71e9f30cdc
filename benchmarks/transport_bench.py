"""Transport benchmark: push/pull throughput and request/reply latency, next to memcpy.

For every transport (default: all registered) and message size (default 1 KiB, 64 KiB,
1 MiB, 8 MiB; a message is one ``uint8`` array of that many bytes plus the wire header):

- **push/pull**: a producer process (a thread for ``inline``) sends as fast as it can; the
  consumer (this process) counts what it receives during ``--seconds`` after a warm-up:
  messages/s and GB/s of payload (1 GB = 1e9 bytes).
- **request/reply**: an echo server process answers each request with the same bundle; this
  process measures ``--rtts`` round trips (at most ``--seconds``): median and p99, in
  microseconds.
- **memcpy**, measured in this process right before each transport's push/pull run, two ways:

  - *hot*: ``np.copyto`` between the same two buffers every time; for 1 MiB both stay in
    the CPU caches.
  - *ring*: ``np.copyto`` from one source into ``--ring-slots`` destination buffers in turn
    (default 8, the ``shm`` transport's default number of slots), so the destinations
    cover as much memory as a ring of slots does. This is the physical floor of a
    transport that writes each message once into a ring of slots (``shm``); the ``ratio``
    column is push/pull GB/s divided by it, ``vs hot`` divides by the hot copy instead.

With ``--repeat N`` every figure is measured N times, interleaved, and the best is kept
(highest throughput, lowest median latency with its p99): on a shared machine interference
only ever makes a figure worse.

Usage::

    python benchmarks/transport_bench.py                       # everything, ~2-3 minutes
    python benchmarks/transport_bench.py --transports shm tcp --sizes 1M 8M --seconds 2
    python benchmarks/transport_bench.py --json results.json   # also write the rows as JSON
    python benchmarks/transport_bench.py --repeat 3            # best of 3 (noisy machines)

Transport options can be set through their environment variables (``ZOO_SHM_SLOTS``,
``ZOO_SHM_GRANTS``, ``ZOO_TCP_HOST``, ...). Figures depend on the machine and its load:
record them with the machine, date and command (``benchmarks/RESULTS.md``).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import threading
import time
import uuid

import numpy as np

SIZES = {"1K": 1 << 10, "64K": 1 << 16, "1M": 1 << 20, "8M": 8 << 20}


def _transport(name: str, run_id: str, create: bool = False):
    from zoo.core.plugins import get_registry

    return get_registry().get("transport", name).load()(run_id, create=create)


def _producer(name: str, run_id: str, size: int, stop, transport=None) -> None:
    pusher = (transport or _transport(name, run_id)).pusher("bench-push")
    payload = {"x": np.ones(size, np.uint8)}
    seq = 0
    while not stop.is_set():  # checked once per 32 sends: the Event's lock costs as much as a small send
        for _ in range(32):
            if not pusher.send(payload, {"seq": seq}, 0.2):
                break  # the consumer has stopped: look at the Event again
            seq += 1
    pusher.close()


def _echo_server(name: str, run_id: str, stop, ready, transport=None) -> None:
    server = (transport or _transport(name, run_id)).reply_server("bench-req")
    ready.set()
    while not stop.is_set():
        req = server.recv(0.1)
        if req is not None:
            cid, bundle, meta = req
            server.reply(cid, bundle, meta, 1.0)
    server.close()


def memcpy_gbps(size: int, seconds: float, buffers: int = 1) -> float:
    """GB/s of ``np.copyto`` of ``size`` bytes from one array into ``buffers`` preallocated
    arrays in turn, over ``seconds`` (``buffers=1``: the same two arrays every time)."""
    src = np.ones(size, np.uint8)
    dsts = [np.zeros(size, np.uint8) for _ in range(buffers)]
    for dst in dsts:  # touch every page first: no page faults while measuring
        np.copyto(dst, src)
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        np.copyto(dsts[n % buffers], src)
        n += 1
    return n * size / elapsed / 1e9


def _start(cross: bool, target, args):
    if cross:
        proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
        proc.start()
        return proc
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def bench_push(name: str, size: int, seconds: float, warmup: float) -> dict:
    run_id = f"bench{os.getpid()}-{uuid.uuid4().hex[:6]}"
    transport = _transport(name, run_id, create=True)
    cross = getattr(transport, "cross_process", True)
    ctx = mp.get_context("spawn") if cross else None
    stop = ctx.Event() if cross else threading.Event()
    puller = transport.puller("bench-push")
    worker = _start(cross, _producer, (name, run_id, size, stop) + (() if cross else (transport,)))
    try:
        deadline = time.monotonic() + 60.0
        while puller.recv(1.0) is None:  # the producer is up (spawning takes a moment)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no message from the producer within 60 s")
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            puller.recv(1.0)
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            if puller.recv(1.0) is not None:
                n += 1
        return {"push_msgs_per_s": n / elapsed, "push_gbps": n * size / elapsed / 1e9, "push_messages": n}
    finally:
        stop.set()
        while puller.recv(0.05) is not None:  # unblock the producer
            pass
        worker.join(10.0)
        puller.close()
        transport.cleanup()


def bench_rtt(name: str, size: int, seconds: float, rtts: int) -> dict:
    run_id = f"bench{os.getpid()}-{uuid.uuid4().hex[:6]}"
    transport = _transport(name, run_id, create=True)
    cross = getattr(transport, "cross_process", True)
    ctx = mp.get_context("spawn") if cross else None
    stop, ready = (ctx.Event(), ctx.Event()) if cross else (threading.Event(), threading.Event())
    worker = _start(cross, _echo_server, (name, run_id, stop, ready) + (() if cross else (transport,)))
    client = _transport(name, run_id).request_client("bench-req", 1)
    payload = {"x": np.ones(size, np.uint8)}
    try:
        if not ready.wait(60.0):
            raise RuntimeError(f"{name}: the echo server did not start within 60 s")

        def once() -> float:
            t0 = time.perf_counter()
            if not client.send(payload, {}, 10.0) or client.recv(10.0) is None:
                raise RuntimeError(f"{name}: a round trip of {size} bytes failed")
            return time.perf_counter() - t0

        for _ in range(20):
            once()
        lat, end = [], time.perf_counter() + seconds
        while len(lat) < rtts and time.perf_counter() < end:
            lat.append(once())
        us = np.array(lat) * 1e6
        return {"rtt_median_us": float(np.median(us)), "rtt_p99_us": float(np.percentile(us, 99)), "rtts": len(us)}
    finally:
        stop.set()
        worker.join(10.0)
        client.close()
        transport.cleanup()


def main(argv: list[str] | None = None) -> int:
    from zoo.core.plugins import get_registry

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transports", nargs="*", default=None, help="default: every registered transport")
    parser.add_argument("--sizes", nargs="*", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--seconds", type=float, default=1.0, help="measuring time per figure")
    parser.add_argument("--warmup", type=float, default=0.3, help="push/pull warm-up seconds")
    parser.add_argument("--rtts", type=int, default=2000, help="round trips per size (at most --seconds)")
    parser.add_argument("--repeat", type=int, default=1, help="measure each figure N times, keep the best")
    parser.add_argument("--ring-slots", type=int, default=8,
                        help="destination buffers of the ring memcpy reference (the shm default: 8 slots)")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    names = args.transports or get_registry().names("transport")
    rows = []
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# command: {' '.join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:]))}")
    header = (f"{'transport':<9} {'size':>5} {'push msg/s':>11} {'push GB/s':>9} {'memcpy GB/s':>11} "
              f"{'ring memcpy':>11} {'ratio':>6} {'vs hot':>6} {'rtt med us':>10} {'rtt p99 us':>10}")
    print(header)
    print("-" * len(header))
    for size_name in args.sizes:
        size = SIZES[size_name]
        for name in names:
            row = {"transport": name, "size": size_name, "bytes": size, "memcpy_gbps": 0.0,
                   "ring_memcpy_gbps": 0.0, "ring_slots": args.ring_slots, "push_gbps": -1.0,
                   "rtt_median_us": float("inf")}
            for _ in range(max(1, args.repeat)):
                row["memcpy_gbps"] = max(row["memcpy_gbps"], memcpy_gbps(size, args.seconds / 4))
                row["ring_memcpy_gbps"] = max(row["ring_memcpy_gbps"],
                                              memcpy_gbps(size, args.seconds / 4, args.ring_slots))
                push = bench_push(name, size, args.seconds, args.warmup)
                if push["push_gbps"] > row["push_gbps"]:
                    row.update(push)
                rtt = bench_rtt(name, size, args.seconds, args.rtts)
                if rtt["rtt_median_us"] < row["rtt_median_us"]:
                    row.update(rtt)
            row["ratio_to_ring_memcpy"] = row["push_gbps"] / row["ring_memcpy_gbps"]
            row["ratio_to_memcpy"] = row["push_gbps"] / row["memcpy_gbps"]
            rows.append(row)
            print(f"{name:<9} {size_name:>5} {row['push_msgs_per_s']:>11,.0f} {row['push_gbps']:>9.3f} "
                  f"{row['memcpy_gbps']:>11.2f} {row['ring_memcpy_gbps']:>11.2f} "
                  f"{row['ratio_to_ring_memcpy']:>6.2f} {row['ratio_to_memcpy']:>6.2f} "
                  f"{row['rtt_median_us']:>10.1f} {row['rtt_p99_us']:>10.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
