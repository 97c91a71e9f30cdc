"""The worker graph: counts, the actor -> policy worker / trainer assignment, graph.json,
and M = 2 policy workers serving their own actors only."""
from __future__ import annotations

import json
import threading
import uuid

import numpy as np
import pytest

from zoo.core.config import ConfigError, ExperimentConfig, build_config, validate
from zoo.core.graph import Graph, endpoint, write_graph


def test_assignment_is_round_robin_and_every_worker_is_listed():
    g = Graph(actors=5, policies=2, trainers=2)
    # actor i -> policy i mod 2, trainer i mod 2: 0 1 0 1 0
    assert [g.policy_of(i) for i in range(5)] == [0, 1, 0, 1, 0]
    assert g.actors_of_policy(0) == [0, 2, 4] and g.actors_of_policy(1) == [1, 3]
    assert g.actors_of_trainer(1) == [1, 3]
    assert g.workers() == [("trainer", 0), ("trainer", 1), ("policy", 0), ("policy", 1),
                           ("actor", 0), ("actor", 1), ("actor", 2), ("actor", 3), ("actor", 4)]
    # 7 actors over 3 policy workers: 3, 2, 2 (the first 7 mod 3 = 1 worker holds one more)
    assert [len(Graph(7, 3, 1).actors_of_policy(m)) for m in range(3)] == [3, 2, 2]
    assert endpoint("inference", 1) == "inference-1"


def test_graph_json_records_every_worker_with_its_endpoints(tmp_path):
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    cfg.actors.count, cfg.policy.count = 3, 2
    data = json.loads(open(write_graph(cfg, str(tmp_path))).read())
    # the eval manager, the PBT manager: none asked for
    assert data["counts"] == {"actor": 3, "policy": 2, "trainer": 1, "eval": 0, "pbt": 0}
    by = {(w["role"], w["index"]): w for w in data["workers"]}
    assert len(by) == 1 + 2 + 3
    assert by[("policy", 0)] == {"role": "policy", "index": 0, "serves": "inference-0", "subscribes": "parameter",
                                 "actors": [0, 2]}
    assert by[("actor", 1)] == {"role": "actor", "index": 1, "policy": 1, "trainer": 0,
                                "requests": "inference-1", "pushes": "sample-0"}
    assert by[("trainer", 0)]["publishes"] == "parameter" and by[("trainer", 0)]["actors"] == [0, 1, 2]


@pytest.mark.parametrize("field, value, problem", [
    ("policy.count", 0, "policy.count must be >= 1, got 0"),
    ("policy.count", 3, "policy.count=3 is more than actors.count=2: actor i goes to policy worker i mod "
                        "policy.count, so 1 policy worker(s) would get no actor and wait forever; "
                        "set --set policy.count=2 or --set actors.count=3"),
    ("trainer.count", 0, "trainer.count must be >= 1, got 0"),
    ("trainer.count", 4, "trainer.count=4 is more than actors.count=2: actor i goes to trainer i mod "
                         "trainer.count, so 2 trainer(s) would get no actor and wait forever; "
                         "set --set trainer.count=2 or --set actors.count=4"),
    ("trainer.collective_timeout_s", 0.0, "trainer.collective_timeout_s must be finite and > 0, got 0.0"),
])
def test_bad_counts_are_refused_naming_the_field(field, value, problem):
    from zoo.core.config import apply_override

    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=10, name="r")
    apply_override(cfg, f"{field}={value}")
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.field == field
    assert str(err.value) == problem


class FakeControl:
    def send(self, bundle, meta, timeout):
        return True

    def close(self):
        pass


@pytest.mark.parametrize("device", [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                                                  reason="torch sees no GPU")),
])
def test_two_policy_workers_answer_only_their_own_actors_and_versions_never_go_back(device):
    """4 actors, 2 policy workers (threads, inline transport): actor i is answered by worker
    i mod 2 only; new versions are published while they ask, and each actor's sequence of
    versions is non-decreasing and reaches the last one (0, 1, 2, 3, 4)."""
    from zoo.core.plugins import get_registry
    from zoo.core.streams import STREAMS, transport_for
    from zoo.core.workers import policy as policy_worker
    from zoo.core.workers.base import WorkerContext

    reg = get_registry()
    cfg = build_config(reg, "ppo", "CartPole-v1", overrides=["actors.count=4", "policy.count=2",
                                                              "policy.max_wait_ms=0", f"policy.device={device}"],
                       steps=1000)
    for s in STREAMS:
        getattr(cfg.streams, s).transport = "inline"
    run_id = f"graph-{uuid.uuid4().hex[:8]}"
    transports = [transport_for(reg, cfg, s, run_id, create=True) for s in STREAMS]
    algo_cls = reg.get("algorithm", "ppo").load()
    net = algo_cls.build_policy(cfg.algo, cfg.spec)
    weights = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    publisher = transports[2].publisher("parameter")
    publisher.publish(weights, {"policy_version": 0})
    graph = Graph.from_config(cfg)
    contexts, threads = [], []
    for m in range(2):
        ctx = WorkerContext("policy", m, cfg, cfg.spec, run_id, "unused")
        ctx.registry, ctx.control = reg, FakeControl()
        contexts.append(ctx)
        threads.append(threading.Thread(target=policy_worker.run, args=(ctx,), daemon=True))
    for t in threads:
        t.start()
    clients = [transports[0].request_client(endpoint("inference", graph.policy_of(i)), i) for i in range(4)]
    seen = {i: [] for i in range(4)}
    obs = {"obs": {"obs": np.zeros((2, 4), np.float32)}, "slot": np.arange(2), "on_reset": np.zeros(2, bool)}
    try:
        request_id = 0
        for version in range(5):
            if version:
                publisher.publish(weights, {"policy_version": version})
            for i, client in enumerate(clients):  # ask until this actor sees the new version (bounded)
                for _ in range(200):
                    request_id += 1
                    assert client.send(obs, {"request_id": request_id, "rows": 2, "group": 0}, 5.0)
                    reply = client.recv(5.0)
                    assert reply is not None, f"actor {i} got no reply"
                    assert reply[1]["request_id"] == request_id and reply[0]["action"].shape == (2,)
                    seen[i].append((reply[1]["policy"], reply[1]["policy_version"]))
                    if reply[1]["policy_version"] == version:
                        break
    finally:
        for ctx in contexts:
            ctx.stop = True
        for t in threads:
            t.join(10)
        for c in clients:
            c.close()
        publisher.close()
        for tr in transports:
            tr.cleanup()
    assert not any(t.is_alive() for t in threads)
    for i in range(4):
        workers = {w for w, _ in seen[i]}
        versions = [v for _, v in seen[i]]
        assert workers == {i % 2}, f"actor {i} answered by {workers}"
        assert versions == sorted(versions), f"actor {i} saw versions go back: {versions}"
        assert versions[0] == 0 and versions[-1] == 4


def test_shm_rings_many_actors_fill_default_to_their_number():
    # 32 actors on one policy worker, 2 trainers: before, every ring had the default 8 slots,
    # and with each actor holding up to 2 unused grants a few actors starved the rest (57 env
    # steps/s). Now a request ring gets max(8, 2 x producers + 1); sample rings keep 8.
    from zoo.core.plugins import get_registry
    from zoo.core.streams import transport_for
    from zoo.transports.shm.transport import default_slots

    assert [default_slots(n) for n in (1, 3, 4, 16, 32)] == [8, 8, 9, 33, 65]
    assert default_slots(32, max_lent=3) == 97
    cfg = ExperimentConfig(algo_name="ppo", env_name="x")
    cfg.actors.count, cfg.policy.count, cfg.trainer.count = 32, 1, 2
    graph = Graph.from_config(cfg)
    assert [graph.producers(s) for s in ("inference", "sample", "parameter", "control")] == [32, 16, 1, 35]
    cfg.policy.count = 3  # 32 actors over 3 policy workers: 11, 11, 10
    assert Graph.from_config(cfg).producers("inference") == 11
    cfg.policy.count = 1
    reg = get_registry()
    for stream in ("inference", "sample", "parameter"):
        getattr(cfg.streams, stream).transport = "shm"
    inference, sample, parameter = (transport_for(reg, cfg, s, "check") for s in ("inference", "sample", "parameter"))
    assert inference.request_slots == 65
    assert inference.slots == sample.slots == 8  # reply rings and sample rings keep the default
    getattr(cfg.streams, "inference").options = {"slots": 12}  # set: used as given
    assert transport_for(reg, cfg, "inference", "check").request_slots == 12
