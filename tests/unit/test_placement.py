"""Transport per edge: ``auto`` resolves each stream from the placement of its ends (pure
functions, no processes), and the placement with the resolved choices lands in graph.json."""
from __future__ import annotations

import json
import os
import socket
from types import SimpleNamespace

import numpy as np

from zoo.core.config import ExperimentConfig, apply_override
from zoo.core.placement import GraphFile, Place, plan, resolve_streams, stream_hosts, write_placement
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
    # the worker graph is still there
    assert graph["counts"] == {"actor": 3, "policy": 2, "trainer": 1, "eval": 0, "pbt": 0}


class Launcher:
    def describe(self):
        return {"strategy": "PACK", "gpu_shares": {"trainer": 0.6, "policy": 0.4}}


def _graph_file(tmp_path, pids: list[int | None]) -> GraphFile:
    """The graph.json of a one-trainer, one-actor run on the ray launcher, with these pids
    (controller, trainer, policy, actor)."""
    cfg = _cfg(1)
    cfg.launcher = "ray"
    places = [Place(role, index, "h", pid) for (role, index), pid in
              zip([("controller", 0), ("trainer", 0), ("policy", 0), ("actor", 0)], pids, strict=True)]
    streams = {s: ("shm", {}) for s in ("inference", "sample", "parameter")} | {"control": ("nng", {})}
    return GraphFile(str(tmp_path), cfg, places, streams, Launcher(), "77-0123abcd")


def test_graph_json_gets_a_pid_the_launcher_did_not_know_and_the_trainers_backend(tmp_path):
    graph_file = _graph_file(tmp_path, [10, None, 12, 13])
    graph_file.write()
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert graph["workers"][0]["pid"] is None  # Ray's actor had not answered at start
    for meta in [{"type": "heartbeat", "role": "trainer", "index": 0, "pid": 4242},
                 {"type": "group", "role": "trainer", "index": 0, "backend": "nccl", "devices": ["cuda:0", "cuda:0"],
                  "gpus": ["n1/3", "n1/1"]}]:
        graph_file.on_message(meta)
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert (graph["workers"][0]["role"], graph["workers"][0]["pid"]) == ("trainer", 4242)
    assert graph["launcher"] == {"name": "ray", "strategy": "PACK", "gpu_shares": {"trainer": 0.6, "policy": 0.4},
                                 "trainers": {"backend": "nccl", "devices": ["cuda:0", "cuda:0"],
                                              "gpus": ["n1/3", "n1/1"]}}
    assert graph["run_id"] == "77-0123abcd"  # what the run's leftovers are named by


def test_graph_json_takes_the_pids_from_the_handles_at_start_and_later_those_they_learn(tmp_path):
    graph_file = _graph_file(tmp_path, [None, None, None, None])
    handles = {("trainer", 0): SimpleNamespace(pid=21), ("policy", 0): SimpleNamespace(pid=None),
               ("actor", 0): SimpleNamespace()}
    graph_file.started(handles)
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert graph["controller"]["pid"] == os.getpid()
    assert [(w["role"], w["pid"]) for w in graph["workers"]] == [("trainer", 21), ("policy", None), ("actor", None)]
    handles[("policy", 0)].pid = 22  # the launcher learnt it (e.g. a Ray actor slow to start)
    graph_file.complete(handles, every_s=0.0)
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert [(w["role"], w["pid"]) for w in graph["workers"]] == [("trainer", 21), ("policy", 22), ("actor", None)]


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


def test_graph_json_completes_pids_without_waiting_on_a_handle_that_could_wait(tmp_path):
    # A Ray handle's pid may wait up to 30 s for its actor; complete() runs in the controller's
    # loop and reads known_pid, which never waits, where a handle has one.
    class SlowHandle:
        known = None

        @property
        def pid(self):
            raise AssertionError("complete() read the waiting pid")

        @property
        def known_pid(self):
            return self.known

    graph_file = _graph_file(tmp_path, [10, 11, None, 13])
    slow = SlowHandle()
    graph_file.complete({("policy", 0): slow}, every_s=0.0)
    assert [p.pid for p in graph_file.places] == [10, 11, None, 13]
    slow.known = 31
    graph_file.complete({("policy", 0): slow}, every_s=0.0)
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert [(w["role"], w["pid"]) for w in graph["workers"]] == [("trainer", 11), ("policy", 31), ("actor", 13)]
