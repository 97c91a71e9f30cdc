"""`zoo train --launcher ray` end to end on a one-node Ray cluster on loopback (issue 12).

The cluster (:class:`zoo.core.testing.ray_cluster.LocalRayCluster`, the session fixture
``ray_cluster`` of ``tests/conftest.py``) runs with token authentication set off explicitly.
Each test runs one real ``zoo train`` against it, bounded in time, and checks that nothing
of the run is left: no worker process (found by ``ZOO_RUN_ID=<run id>`` in its environment,
which the launcher's worker hosts set), no shared-memory segment or transport folder, no
key in Ray's key-value store. Skipped when Ray is not installed. Runs across several nodes
are tested on the 3-node loopback cluster (docs/cluster.md).
"""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from zoo.core.testing.cli import CliProcess, rows, start, title, wait_for
from zoo.core.testing.cli import finish as cli_finish
from zoo.core.testing.procs import processes_with_env

pytestmark = pytest.mark.integration
LABEL = re.compile(r"^\d+\.\d+\.\d+\.\d+/[0-9a-f]{12}$")
"""A worker's host: "<node IP>/<first 12 hex digits of its Ray node id>"."""
RUN_S = 240
"""Bound on one zoo train run (start-up of the Ray actors and workers on a loaded 2-core machine)."""


def train(cluster: str, tmp_path: Path, *args: str) -> CliProcess:
    from zoo.core.testing.ray_cluster import ENV

    env = {**os.environ, **ENV}
    env.pop("RAY_ADDRESS", None)  # --ray-address says which cluster
    return start("train", "ppo", "--env", "CartPole-v1", "--name", "r", "--launcher", "ray", "--ray-address", cluster,
                 "--set", f"runs_dir={tmp_path}", *args, env=env)


def run_processes(controller_pid: int) -> list[int]:
    """Live processes whose environment holds ``ZOO_RUN_ID=<controller pid>-...`` (the run's workers)."""
    return processes_with_env("ZOO_RUN_ID", f"{controller_pid}-", prefix=True)

def left_behind(cluster: str, controller_pid: int) -> list[str]:
    """Everything of the run controlled by ``controller_pid`` still there (should be [])."""
    from ray._raylet import GcsClient

    keys = GcsClient(address=cluster).internal_kv_keys(f"{controller_pid}-".encode(), b"zoo", timeout=10)
    return ([f"pid {p}" for p in run_processes(controller_pid)] + glob.glob(f"/dev/shm/*zoo-{controller_pid}-*")
            + glob.glob(f"/tmp/zoo-{controller_pid}-*") + [f"key {k.decode()}" for k in keys])


def finish(proc: CliProcess, timeout: float = RUN_S) -> tuple[int, str, str]:
    out, err = cli_finish(proc, timeout)
    return proc.returncode, out, err


def eventually_empty(cluster: str, pid: int, within: float = 15.0) -> list[str]:
    """What is left of the run once clean-up had ``within`` seconds (Ray ends actor processes asynchronously)."""
    deadline = time.monotonic() + within
    while (left := left_behind(cluster, pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_cartpole_on_ray_reaches_its_budget_and_leaves_nothing(ray_cluster, tmp_path):
    proc = train(ray_cluster, tmp_path, "--steps", "512", "--set", "actors.count=2")
    code, out, err = finish(proc)
    assert code == 0, err[-3000:]
    assert "done: " in out
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if r["type"] == "update"]
    # PPO's CartPole presets: 2 actors x 4 envs x 32 steps = 256 env steps per update; 512 -> 2 updates
    assert [u["env_steps"] >= 256 * (i + 1) for i, u in enumerate(updates)] == [True, True]
    graph = json.loads((tmp_path / "r" / "graph.json").read_text())
    hosts = {(w["role"], w["index"]): w["host"] for w in graph["workers"]}
    assert sorted(hosts) == [("actor", 0), ("actor", 1), ("policy", 0), ("trainer", 0)]
    assert len(set(hosts.values())) == 1 and LABEL.match(next(iter(hosts.values())))  # one Ray node
    assert graph["controller"]["host"] == next(iter(hosts.values()))  # the driver runs on it too
    # every worker's pid is known (issue 20 item 13: trainer 0's was null), and the launcher says what it chose
    assert [(w["role"], w["index"], type(w["pid"])) for w in graph["workers"]] == [
        ("trainer", 0, int), ("policy", 0, int), ("actor", 0, int), ("actor", 1, int)]
    launcher = graph["launcher"]
    assert (launcher["name"], launcher["address"], launcher["gpu_shares"]) == ("ray", ray_cluster, {})
    assert [(w["role"], w["index"], w["resources"], w["gpu_ids"]) for w in launcher["workers"]] == [
        ("trainer", 0, {"CPU": 1.0}, []), ("policy", 0, {"CPU": 1.0}, []), ("actor", 0, {"CPU": 1.0}, []),
        ("actor", 1, {"CPU": 1.0}, [])]
    streams = {s: (v["transport"], v["options"].get("scheme")) for s, v in graph["streams"].items()}
    assert streams == {"inference": ("shm", None), "sample": ("shm", None), "parameter": ("shm", None),
                       "control": ("nng", None)}  # nng over ipc (its default scheme): one node
    assert eventually_empty(ray_cluster, graph["controller"]["pid"]) == []


def test_named_policies_on_ray_train_each_policy_and_leave_nothing(ray_cluster, tmp_path):
    """Issue 22 item 4: two named policies (examples/policies/spread-two-policies.toml) under the
    Ray launcher: each policy's policy worker and trainer is a Ray actor of its own, both train
    and checkpoint under checkpoints/<policy>/, and nothing of the run is left."""
    from zoo.core.testing.ray_cluster import ENV

    env = {**os.environ, **ENV}
    env.pop("RAY_ADDRESS", None)
    example = Path(__file__).resolve().parents[2] / "examples" / "policies" / "spread-two-policies.toml"
    proc = start("train", "mappo", "--env", "pettingzoo:mpe2.simple_spread_v3", "--config", str(example),
                 "--name", "r", "--launcher", "ray", "--ray-address", ray_cluster, "--steps", "1200",
                 "--set", f"runs_dir={tmp_path}", "--set", "actors.envs_per_actor=4",
                 "--set", "trainer.batch_samples=16", env=env)
    code, out, err = finish(proc)
    assert code == 0, err[-3000:]
    run = tmp_path / "r"
    graph = json.loads((run / "graph.json").read_text())
    assert [(w["role"], w["index"], w.get("policy")) for w in graph["workers"]] == [
        ("trainer", 0, "lead"), ("trainer", 1, "rest"), ("policy", 0, "lead"), ("policy", 1, "rest"),
        ("actor", 0, None), ("actor", 1, None)]
    assert [(w["role"], w["index"]) for w in graph["launcher"]["workers"]] == [
        ("trainer", 0), ("trainer", 1), ("policy", 0), ("policy", 1), ("actor", 0), ("actor", 1)]
    updates = rows(run, "update")
    # 2 actors x 4 envs, 25 steps a sample: lead (1 agent an env) has its 16 samples every 400 env
    # steps, rest (2 agents) every 200: by 1,200 env steps both updated (with mappo's preset of 48
    # samples lead's first batch came at 1,200 env steps exactly, and a CI run ended before it)
    assert {u["policy"] for u in updates} == {"lead", "rest"}
    assert sorted(str(p.relative_to(run)) for p in run.glob("checkpoints/*/latest.pt")) == [
        "checkpoints/lead/latest.pt", "checkpoints/rest/latest.pt"]
    assert eventually_empty(ray_cluster, graph["controller"]["pid"]) == []


def test_a_run_ray_cannot_place_is_refused_naming_what_is_missing(ray_cluster, tmp_path):
    proc = train(ray_cluster, tmp_path, "--steps", "512", "--set", "launcher_options.placement_timeout_s=2",
                 "--set", "launcher_options.policy_resources={'CPU': 1, 'GPU': 1}")
    code, out, err = finish(proc, 120)
    assert code == 1, err[-3000:]
    text = " ".join(err.split())
    assert "Ray could not place the run's 4 workers within launcher_options.placement_timeout_s=2 s" in text
    assert "policy worker 0 asks for CPU=1, GPU=1, and no node has GPU=1" in text
    assert "the run asks for GPU=1 in all, the cluster has GPU=0" in text
    assert not (tmp_path / "r" / "status.json").exists()  # no worker was started


def test_a_killed_actor_ends_the_run_naming_it_and_its_node(ray_cluster, tmp_path):
    proc = train(ray_cluster, tmp_path, "--steps", "1000000", "--set", "actors.count=2",
                 "--set", "supervision.max_restarts=0")
    wait_for(lambda: rows(tmp_path / "r", "update"), RUN_S, "the first update row (every worker past its start-up)",
             proc)
    # the first update may hold actor 0's samples alone: on a loaded machine Ray can start actor 1's
    # worker process long after it (a Ray worker, then the worker's own interpreter), so wait as long
    # as a run's start-up may take, not a minute
    actor = wait_for(lambda: next((p for p in run_processes(proc.pid) if title(p).startswith("zoo: actor 1 ")), None),
                     RUN_S, "actor 1", proc)
    os.kill(actor, signal.SIGKILL)
    code, out, err = finish(proc, 120)
    assert code == 1, err[-3000:]
    text = " ".join(err.split())
    assert re.search(r"actor worker 1 failed \(killed by SIGKILL \(on Ray node [\d.]+/[0-9a-f]{12}\)\); "
                     r"stopping the run", text), text[-2000:]
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert (status["status"], status["failed_worker"]["role"], status["failed_worker"]["index"]) == ("crashed", "actor", 1)
    assert eventually_empty(ray_cluster, proc.pid) == []


def local_train(tmp_path: Path, *args: str, new_session: bool = False) -> CliProcess:
    """``zoo train --ray-address local`` with a home folder of its own (``tmp_path/home``), no
    Ray cluster in its environment: it starts one for itself."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "ZOO_RAY_"))}
    env["HOME"] = str(home)
    return start("train", "ppo", "--env", "CartPole-v1", "--name", "r", "--ray-address", "local",
                 "--set", f"runs_dir={tmp_path / 'runs'}", *args, env=env, new_session=new_session)


def ray_temp_dirs(controller_pid: int) -> list[str]:
    """The per-run temporary folders of the local cluster started by ``controller_pid``."""
    return glob.glob(f"/tmp/zoo-ray-{controller_pid}-*")


def test_ray_address_local_refuses_a_layout_its_node_cannot_hold_without_waiting(tmp_path):
    # 2 actors x 4096 CPUs + 1 policy worker + 1 trainer = 8194 CPUs: more than any machine has
    proc = local_train(tmp_path, "--steps", "512", "--set", "launcher_options.actor_resources={'CPU': 4096}")
    code, out, err = finish(proc, 180)
    assert code == 1, err[-3000:]
    text = " ".join(err.split())
    assert ("the one-node Ray cluster started for this run (--ray-address local) cannot hold the run's 4 workers "
            "(strategy PACK): - actor worker 0 asks for CPU=4096, and no node has CPU=4096") in text, text[-2000:]
    assert f"the run asks for CPU=8194 in all, the cluster has CPU={os.cpu_count()}" in text
    assert re.search(r"nodes: 127\.0\.0\.1/[0-9a-f]{12}: CPU=", text)  # the node is on loopback
    assert "placement_timeout_s" not in text  # refused at once, not after the placement wait
    assert list((tmp_path / "home").iterdir()) == []  # no ~/.ray/auth_token
    assert ray_temp_dirs(proc.pid) == []  # Ray's session files went with the run's temporary folder
    assert not (tmp_path / "runs" / "r").exists()  # a refused run leaves nothing


def test_ctrl_c_while_ray_starts_exits_130_and_leaves_nothing(tmp_path):
    proc = local_train(tmp_path, "--steps", "512", new_session=True)  # a terminal's process group of its own
    # the temporary folder appears just before ray.init
    wait_for(lambda: ray_temp_dirs(proc.pid), RUN_S, "the local cluster's temporary folder", proc, poll_s=0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    code, out, err = finish(proc, 180)
    assert code == 130, err[-3000:]  # not 139 (a segmentation fault in Ray's start-up)
    assert "error: interrupted (Ctrl-C)" in err
    assert list((tmp_path / "home").iterdir()) == []
    assert eventually_empty_local(proc.pid) == []
    assert not (tmp_path / "runs" / "r").exists()


def eventually_empty_local(controller_pid: int, within: float = 30.0) -> list[str]:
    """The run's workers and the local cluster's folder still there once ``within`` s passed."""
    deadline = time.monotonic() + within
    while (left := run_processes(controller_pid) + ray_temp_dirs(controller_pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_workers_on_the_test_cluster_run_at_the_normal_priority(ray_cluster):
    # Ray starts its workers at niceness 15 and a worker host's child inherits it: beside the busy
    # loops of a loaded CI run such a worker, asked to stop, took 38 s to end (the launcher
    # contract allows 30). The test clusters set RAY_worker_niceness=0 (ray_cluster.ENV).
    from zoo.core.testing.launcher_checks import LauncherUnderTest, beat_worker

    with LauncherUnderTest("ray") as lut:
        handle = lut.start(beat_worker, "check", 0)
        lut.wait_message("heartbeat", "check", 0)
        niceness = os.getpriority(os.PRIO_PROCESS, handle.pid)  # the node is this machine
        handle.stop()
        lut.ends_with(handle, 0, "the worker asked to stop")
    assert niceness == 0
