"""Transport per edge: ``auto`` resolves each stream from the placement of its ends (pure
functions, no processes), and the placement with the resolved choices lands in graph.json."""
from __future__ import annotations

import json
import os
import socket
from types import SimpleNamespace

import numpy as np

from zoo.core.config import ExperimentConfig, apply_override
from zoo.core.placement import Place, plan, resolve_streams, stream_hosts, write_placement
from zoo.core.plugins import get_registry
from zoo.transports.auto.transport import auto_transport, choose


def test_auto_is_shm_on_one_host_and_nng_tcp_across_hosts_each_with_its_own_options():
    options = {"slots": 16, "spin_us": 0, "token": "s3cret", "host": "10.0.0.7"}
    assert choose(["node-a"], {}) == ("shm", {})
    assert choose(["node-a", "node-a", "node-a"], options) == ("shm", {"slots": 16, "spin_us": 0})
    assert choose([], options) == ("shm", {"slots": 16, "spin_us": 0})  # nothing placed: one host
    assert choose(["node-a", "node-b"], {}) == ("nng", {"scheme": "tcp", "host": "0.0.0.0"})
    assert choose(["node-b", "node-a", "node-a"], options) == (
        "nng", {"scheme": "tcp", "host": "10.0.0.7", "spin_us": 0, "token": "s3cret"})


def _cfg(actors: int, policies: int = 1, **streams: str) -> ExperimentConfig:
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=10, name="p")
    apply_override(cfg, f"actors.count={actors}")
    apply_override(cfg, f"policy.count={policies}")
    for stream, transport in streams.items():
        apply_override(cfg, f"streams.{stream}.transport={transport}")
    return cfg


def _places(hosts: dict[tuple[str, int], str]) -> list[Place]:
    return [Place(role, index, host) for (role, index), host in hosts.items()]


def test_each_stream_resolves_from_the_hosts_of_its_own_ends():
    # controller, trainer and policy worker on node-a; actors 0-2 on node-a, actor 3 on node-b
    places = _places({("controller", 0): "node-a", ("trainer", 0): "node-a", ("policy", 0): "node-a",
                      ("actor", 0): "node-a", ("actor", 1): "node-a", ("actor", 2): "node-a",
                      ("actor", 3): "node-b"})
    assert stream_hosts(places, "inference") == ["node-a", "node-b"]
    assert stream_hosts(places, "parameter") == ["node-a"]
    streams = resolve_streams(get_registry(), _cfg(4), places)
    assert streams == {
        "inference": ("nng", {"scheme": "tcp", "host": "0.0.0.0"}),  # actor 3 is on another host
        "sample": ("nng", {"scheme": "tcp", "host": "0.0.0.0"}),
        "parameter": ("shm", {}),  # trainer and policy worker share node-a
        "control": ("nng", {"spin_us": 0, "scheme": "tcp", "host": "0.0.0.0"}),
    }


def test_a_forced_transport_stays_and_one_host_gives_shm_everywhere_and_control_over_ipc():
    here = socket.gethostname()
    local = SimpleNamespace(host_of=lambda role, index: here)  # what the local launcher says
    places = plan(local, [("trainer", 0), ("policy", 0), ("actor", 0), ("actor", 1)])
    assert [(p.role, p.index, p.host) for p in places] == [
        ("controller", 0, here), ("trainer", 0, here), ("policy", 0, here), ("actor", 0, here), ("actor", 1, here)]
    streams = resolve_streams(get_registry(), _cfg(2, sample="tcp"), places)
    assert streams == {"inference": ("shm", {}), "sample": ("tcp", {}), "parameter": ("shm", {}),
                       "control": ("nng", {"spin_us": 0})}
    # a forced transport is kept even across hosts
    apart = _places({("controller", 0): "a", ("trainer", 0): "b", ("policy", 0): "a", ("actor", 0): "a"})
    assert resolve_streams(get_registry(), _cfg(1, parameter="shm"), apart)["parameter"] == ("shm", {})


def test_graph_json_holds_every_worker_with_host_and_pid_and_each_stream_resolved(tmp_path):
    cfg = _cfg(3, policies=2)
    apply_override(cfg, "streams.sample.options.token=abc")
    places = _places({("controller", 0): "a", ("trainer", 0): "a", ("policy", 0): "a", ("policy", 1): "b",
                      ("actor", 0): "a", ("actor", 1): "b", ("actor", 2): "a"})
    for pid, place in enumerate(places, start=100):
        place.pid = pid
    streams = resolve_streams(get_registry(), cfg, places)
    path = write_placement(str(tmp_path), cfg, places, streams)
    assert path == os.path.join(tmp_path, "graph.json")
    graph = json.loads(open(path).read())
    assert [(w["role"], w["index"], w["host"], w["pid"]) for w in graph["workers"]] == [
        ("trainer", 0, "a", 101), ("policy", 0, "a", 102), ("policy", 1, "b", 103),
        ("actor", 0, "a", 104), ("actor", 1, "b", 105), ("actor", 2, "a", 106)]
    assert graph["controller"] == {"host": "a", "pid": 100}
    tcp = {"scheme": "tcp", "host": "0.0.0.0"}
    assert graph["streams"] == {
        "inference": {"configured": "auto", "transport": "nng", "options": tcp, "hosts": ["a", "b"]},
        "sample": {"configured": "auto", "transport": "nng", "options": {**tcp, "token": "***"}, "hosts": ["a", "b"]},
        "parameter": {"configured": "auto", "transport": "nng", "options": tcp, "hosts": ["a", "b"]},
        "control": {"configured": "nng", "transport": "nng", "options": {"spin_us": 0, **tcp},
                    "hosts": ["a", "b"]},
    }
    assert graph["counts"] == {"actor": 3, "policy": 2, "trainer": 1}  # the worker graph is still there


def test_auto_across_hosts_really_carries_messages_over_nng_tcp():
    """What a cross-host stream gets, run on loopback (two placeholder hosts, one machine)."""
    from zoo.transports.nng.transport import NngTransport

    run_id = f"auto{os.getpid()}"
    owner = auto_transport(run_id, create=True, hosts=["a", "b"], host="127.0.0.1")
    peer = auto_transport(run_id, hosts=["a", "b"], host="127.0.0.1")
    try:
        assert isinstance(owner, NngTransport) and owner.scheme == "tcp"
        puller, pusher = owner.puller("sample-0"), peer.pusher("sample-0")
        assert owner.resolver.lookup(f"{run_id}/sample-0.nng-tcp", 5.0)["host"] == "127.0.0.1"
        assert pusher.send({"x": np.arange(3)}, {"n": 1}, 5.0)
        bundle, meta = puller.recv(10.0)
        assert meta == {"n": 1} and bundle["x"].tolist() == [0, 1, 2]
        pusher.close()
        puller.close()
    finally:
        owner.cleanup()
    assert owner.resources() == []
