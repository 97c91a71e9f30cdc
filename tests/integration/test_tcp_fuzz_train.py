"""A CartPole run over tcp keeps training while its listeners are fuzzed on loopback (issue 20, item 12).

Bounded: a fixed number of hostile connections per listener (random bytes, huge declared
lengths, truncated records, wrong and missing tokens, FRAMEs before a HELLO) and 200
connect/close cycles, each sent at once and closed; the run must reach its budget with
consecutive policy versions, and its logs must hold a bounded number of refusal lines.
"""
from __future__ import annotations

import json
import math
import os
import random
import socket
import struct
import time

import pytest

from zoo.core.testing.cli import finish, start, wait_for

pytestmark = pytest.mark.integration

REC = struct.Struct("<4sB3xQ")  # the record header (transports/sockets/framing.py)
HELLO, FRAME = 1, 2
LISTENERS = ("inference-0.tcp", "sample-0.tcp", "parameter.tcp")


def _hostile(rng: random.Random, run_id: str, stream: str) -> list[bytes]:
    """What the fuzzer sends a listener, one connection each."""
    def hello(token):
        body = json.dumps({"v": 1, "run": run_id, "stream": stream, "role": "pusher", "client_id": 0, "pid": 1,
                           "token": token}).encode()
        return REC.pack(b"ZOS1", HELLO, len(body)) + body

    out = [rng.randbytes(rng.randint(1, 4096)) for _ in range(10)]  # random bytes
    out += [REC.pack(b"ZOS1", FRAME, rng.randint(1 << 20, 1 << 30)) + b"ZOO" + rng.randbytes(60_000)
            for _ in range(6)]  # FRAME before HELLO, huge declared length
    out += [REC.pack(b"ZOS1", HELLO, 1 << 16) + rng.randbytes(100) for _ in range(4)]  # HELLO over the bound
    out += [hello("wrong") for _ in range(5)] + [hello(None) for _ in range(5)]
    out += [hello("wrong")[:rng.randint(1, 40)] for _ in range(5)]  # truncated HELLOs
    return out


def _send(port: int, data: bytes) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
            sock.sendall(data)
    except OSError:
        pass  # the listener may close first: that is the point


def test_a_cartpole_run_over_tcp_trains_while_its_listeners_are_fuzzed(tmp_path):
    keys_root = tmp_path / "keys"
    sets = [a for s in ("inference", "sample", "parameter") for a in ("--set", f"streams.{s}.transport=tcp")]
    env = {**os.environ, "ZOO_TCP_TOKEN": "s3cret-fuzz"}
    proc = start("train", "ppo", "--env", "CartPole-v1", "--steps", "3000", "--name", "fuzz",
                 "--set", f"runs_dir={tmp_path}", "--set", f"resolver.options.root={keys_root}", *sets, env=env)
    ports: dict[str, int] = {}
    run_id = ""

    def every_listener() -> bool:
        nonlocal run_id
        for path in keys_root.glob("zoo-*/keys/*.tcp.json"):
            try:
                ports.setdefault(path.name[:-len(".json")], json.loads(path.read_text())["port"])
                run_id = path.parent.parent.name[len("zoo-"):]
            except (OSError, ValueError, KeyError):
                pass  # being written
        return len(ports) >= len(LISTENERS)

    wait_for(every_listener, 300, "every tcp listener's key file", proc, poll_s=0.05)
    assert sorted(ports) == sorted(LISTENERS), f"listeners seen: {sorted(ports)}"
    rng = random.Random(20)
    started = time.monotonic()
    sent = 0
    for key, port in ports.items():
        for data in _hostile(rng, run_id, key[:-len(".tcp")]):
            _send(port, data)
            sent += 1
    for i in range(200):  # connect/close cycles
        _send(list(ports.values())[i % len(ports)], b"")
    fuzz_s = time.monotonic() - started
    _, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert sent == 3 * 35
    rows = [json.loads(line) for line in (tmp_path / "fuzz" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if r["type"] == "update"]
    assert len(updates) >= 8 and [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))
    assert rows[-1]["type"] == "end" and rows[-1]["env_steps"] >= 3000
    # Refusal lines, wherever the workers' logs go: per listener and reason (here "protocol"
    # and "token") one, then at most one per 10 s of fuzzing, plus one at close.
    logs = err + "".join(p.read_text(errors="replace") for p in (tmp_path / "fuzz").rglob("*.log"))
    lines = [line for line in logs.splitlines() if " refused peer " in line or " more peers (" in line]
    bound = len(LISTENERS) * 2 * (1 + math.ceil(fuzz_s / 10) + 1)
    assert 0 < len(lines) <= bound, f"{len(lines)} refusal lines > {bound}"
