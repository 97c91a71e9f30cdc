"""`zoo train --launcher ray` across a 3-node Ray cluster on loopback (tests/integration/raycluster.py).

One cluster serves the module: 3 Ray nodes, each in its own PID and mount namespace with its
own /tmp and /dev/shm, inside one fresh network namespace. The runs folder is bound into
every node at the same path (the shared folder the launcher asks for: trainer 0 writes the
metrics and checkpoints there). Each run stops by itself (its budget, or a failure within a
bounded wait) and the test checks that nothing of it is left on any node: no Zoo process, no
shared-memory segment, no socket folder, no resolver key. The test that powers a node off
runs last (the cluster has 2 nodes after it).

Skipped, saying why, without root, ``unshare``/``nsenter`` or Ray (``pip install -e ".[ray]"``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.raycluster import RayCluster, processes_in, unavailable_reason
from zoo.core.testing.cli import wait_for

pytestmark = pytest.mark.integration
NODES = 3
# 2 actors (the CartPole preset), 2 policy workers, 2 trainers: 6 workers of 1 CPU each, spread
# over the nodes (Ray's SPREAD strategy), each node offering 4. The failure tests run the preset's
# graph (2 actors, 1 policy worker, 1 trainer), spread the same way.
SPREAD = ("--set", "launcher_options.strategy=SPREAD")
GRAPH = ("--set", "policy.count=2", "--set", "trainer.count=2")
# One update takes 2 trainers x 8 samples x 32 env steps = 512 env steps (the PPO CartPole preset:
# trainer.batch_samples=8, sample_length=32); 2,048 env steps = 4 updates.
BUDGET = 2048
RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no namespaced Ray cluster here: {reason}")
    runs = tmp_path_factory.mktemp("ray-runs")
    c = RayCluster(nodes=NODES, cpus=4, keep={i: [str(runs)] for i in range(NODES)})
    c.start()
    print(f"{NODES}-node Ray cluster up in {c.start_seconds:.1f} s")
    c.runs = runs
    c.node_of = {n["NodeID"][:12]: next(int(k.rsplit("_", 1)[1]) for k in n["Resources"] if k.startswith("zoo_node_"))
                 for n in c.wait_nodes(NODES)}  # Ray node id prefix -> node index
    try:
        yield c
    finally:
        began = time.monotonic()
        left = c.stop(check=False)
        print(f"cluster stopped in {time.monotonic() - began:.1f} s")
        assert left == []  # no process in any of the cluster's namespaces


def train(cluster: RayCluster, name: str, *args: str) -> subprocess.Popen:
    """``zoo train ppo --env CartPole-v1 --launcher ray`` in the head node (the Ray driver)."""
    return cluster.popen(0, [sys.executable, "-m", "zoo", "train", "ppo", "--env", "CartPole-v1", "--name", name,
                             "--launcher", "ray", "--ray-address", cluster.address, "--seed", "1",
                             "--set", f"runs_dir={cluster.runs}", "--set", "log.tensorboard=false", *SPREAD, *args])


def finish(cluster: RayCluster, proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """zoo train's stdout and stderr once it ended; killed, failing the test, after ``timeout`` s."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        cluster.kill_tree(proc)
        _, err = proc.communicate()
        raise AssertionError(f"zoo train did not end within {timeout:g} s:\n{err[-4000:]}") from None


def read_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def zoo_processes(cluster: RayCluster, name: str) -> list[tuple[int, str]]:
    """Processes of run ``name`` on any live node: its workers (``zoo: <role> <index> <name>``) and
    the Ray actors that host them (``ray::WorkerHost``, ``ray::NodeAgent``)."""
    found = []
    for node in cluster.nodes:
        if not node.stopped:
            found += [p for p in cluster.processes(node.index)
                      if (p[1].startswith("zoo: ") and p[1].endswith(f" {name}"))
                      or p[1].startswith(("ray::WorkerHost", "ray::NodeAgent"))]
    return found


def leftovers(cluster: RayCluster, name: str, wait: float = 15.0) -> dict[str, list]:
    """What run ``name`` left on the live nodes after ``zoo train`` exited (empty lists: nothing);
    processes get ``wait`` seconds to be reaped by Ray. Files and keys are matched by the run's
    own id (``graph.json``'s ``run_id``), never by a prefix another run or folder could share."""
    run_id = json.loads((cluster.runs / name / "graph.json").read_text())["run_id"]
    deadline = time.monotonic() + wait
    while zoo_processes(cluster, name) and time.monotonic() < deadline:
        time.sleep(0.5)
    left: dict[str, list] = {"processes": zoo_processes(cluster, name)}
    for node in cluster.nodes:
        if not node.stopped:
            # a run's shm segments and lock files are /dev/shm/zoo-<run id>.*; its socket folder /tmp/zoo-<run id>
            left[f"node {node.index} files"] = cluster.files(node.index, f"/dev/shm/*zoo-{run_id}.*") + cluster.files(
                node.index, f"/tmp/zoo-{run_id}")
    code = ("import json, sys; from ray._raylet import GcsClient; print(json.dumps([k.decode() for k in "
            "GcsClient(address=sys.argv[1]).internal_kv_keys(sys.argv[2].encode(), b'zoo')]))")
    out = cluster.run(0, [sys.executable, "-c", code, cluster.address, f"{run_id}/"], timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    left["resolver keys"] = json.loads(out.stdout.strip().splitlines()[-1])
    return left


NOTHING = {"processes": [], **{f"node {i} files": [] for i in range(NODES)}, "resolver keys": []}


def node_index(cluster: RayCluster, host: str) -> int:
    """The cluster node of a placement label ``<ip>/<12 hex digits of the Ray node id>``."""
    return cluster.node_of[host.split("/", 1)[1]]


def test_ppo_with_2_policy_workers_and_2_trainers_across_nodes(cluster):
    proc = train(cluster, "spread", "--steps", str(BUDGET), *GRAPH)
    out, err = finish(cluster, proc, RUN_TIMEOUT_S)
    assert proc.returncode == 0, err[-4000:]
    run = cluster.runs / "spread"
    rows = read_rows(run)
    updates = [r for r in rows if r["type"] == "update"]
    # The budget is reached: the run ends at the first update past 2,048 env steps. env_steps counts
    # the samples both trainers received, 32 env steps each (the preset's sample_length=32, one env
    # per sample), so it moves in steps of 32; the first update needs 2 trainers x 8 samples x 32 = 512.
    assert rows[-1]["type"] == "end" and rows[-1]["env_steps"] >= BUDGET
    assert updates[0]["env_steps"] >= 512
    assert all(r["env_steps"] % 32 == 0 for r in updates + rows[-1:])
    assert [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))
    status = json.loads((run / "status.json").read_text())
    assert (status["status"], status["exit_code"]) == ("finished", 0)

    graph = json.loads((run / "graph.json").read_text())
    assert graph["counts"] == {"actor": 2, "policy": 2, "trainer": 2, "eval": 0, "pbt": 0}
    host = {(w["role"], w["index"]): w["host"] for w in graph["workers"]}
    nodes = {key: node_index(cluster, h) for key, h in host.items()}
    print("placement:", {f"{r} {i}": n for (r, i), n in sorted(nodes.items())})
    assert len(set(nodes.values())) >= 2  # SPREAD: 6 workers over 3 nodes of 4 CPUs
    assert node_index(cluster, graph["controller"]["host"]) == 0  # the driver runs on the head
    assert [w["role"] for w in graph["workers"] if not isinstance(w["pid"], int)] == []  # every pid known
    assert graph["launcher"]["trainers"]["backend"] == "gloo"  # on the CPU; rank 0 said so
    # Each stream's ends, from the workers' entries (docs/graph.md): inference joins actors and
    # policy workers, sample actors and trainers, parameter trainer 0 and the policy workers.
    ends = {"inference": [k for k in host if k[0] in ("actor", "policy")],
            "sample": [k for k in host if k[0] in ("actor", "trainer")],
            "parameter": [("trainer", 0)] + [k for k in host if k[0] == "policy"]}
    for stream, keys in ends.items():
        s = graph["streams"][stream]
        spans = len({host[k] for k in keys}) > 1
        assert set(s["hosts"]) >= {host[k] for k in keys}, stream
        # auto: shm within one node, nng over tcp between nodes (shm cannot cross: each node has its own /dev/shm)
        assert (s["transport"], s["options"].get("scheme")) == (("nng", "tcp") if spans else ("shm", None)), (stream, s)
    assert leftovers(cluster, "spread") == NOTHING


def test_a_killed_actor_worker_ends_the_run_naming_it(cluster):
    # no restarts: the first failure ends the run (with restarts, the actor would be started again)
    proc = train(cluster, "killed", "--steps", "10000000", "--set", "supervision.max_restarts=0")
    try:
        metrics = cluster.runs / "killed" / "metrics.jsonl"
        began = time.monotonic()  # one update in: every worker runs (start-up on a loaded machine is slow)
        while time.monotonic() - began < RUN_TIMEOUT_S and proc.poll() is None and not (
                metrics.exists() and '"update"' in metrics.read_text()):
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        # the first update may hold actor 0's samples alone while Ray still starts actor 1's process (a
        # Ray worker, then the worker's own interpreter): wait for it as long as a run's start-up may take
        actor = wait_for(lambda: [pid for pid, title in processes_in(cluster.namespaces)
                                  if title == "zoo: actor 1 killed"], RUN_TIMEOUT_S, "actor 1's process", proc)
        assert len(actor) == 1, actor
        host = {(w["role"], w["index"]): w["host"]
                for w in json.loads((cluster.runs / "killed" / "graph.json").read_text())["workers"]}
        os.kill(actor[0], signal.SIGKILL)
        killed = time.monotonic()
        _, err = finish(cluster, proc, 120)
        ended = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            cluster.kill_tree(proc)
    print(f"the run ended {ended:.1f} s after the kill")
    assert proc.returncode == 1, err[-4000:]
    assert f"zoo: actor worker 1 failed (killed by SIGKILL (on Ray node {host[('actor', 1)]}))" in err, err[-4000:]
    assert leftovers(cluster, "killed") == NOTHING


def test_a_node_powered_off_ends_the_run_naming_it(cluster):
    # default supervision (restarts allowed): a worker whose node died is not restarted (its bundle and
    # the transports chosen for its node are gone), so the run ends (docs/cluster.md, Failures)
    proc = train(cluster, "nodeloss", "--steps", "10000000")
    try:
        run = cluster.runs / "nodeloss"
        began = time.monotonic()
        while time.monotonic() - began < RUN_TIMEOUT_S and proc.poll() is None and not (
                (run / "metrics.jsonl").exists() and '"update"' in (run / "metrics.jsonl").read_text()):
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        workers = json.loads((run / "graph.json").read_text())["workers"]
        away = sorted({w["host"] for w in workers if node_index(cluster, w["host"]) != 0})
        assert away  # SPREAD put workers on a node other than the head
        victim = away[0]
        cluster.kill_node(node_index(cluster, victim))  # every process of that node dies at once
        killed = time.monotonic()
        _, err = finish(cluster, proc, 120)
        ended = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            cluster.kill_tree(proc)
    print(f"the run ended {ended:.1f} s after node {victim} went down")
    assert proc.returncode == 1, err[-4000:]
    # The failure names the node: "(Ray node <label> died)" once Ray has marked the node dead, or, when
    # the launcher gave up waiting for that word (NODE_DEATH_S, 30 s; longer on a loaded machine), "(its Ray actor
    # on node <label> died: ...)".
    stopping = [line for line in err.splitlines() if line.startswith("zoo: ") and "stopping the run" in line]
    assert len(stopping) == 1 and (f"(Ray node {victim} died)" in stopping[0]
                                   or f"(its Ray actor on node {victim} died: " in stopping[0]), err[-4000:]
    print(stopping[0])
    left = leftovers(cluster, "nodeloss")
    assert left == {k: v for k, v in NOTHING.items() if k != f"node {node_index(cluster, victim)} files"}
