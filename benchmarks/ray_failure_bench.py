"""The ``ray`` launcher at size: start, a killed Ray actor, and stop, timed on the 3-node loopback cluster.

Starts the namespaced Ray cluster of ``tests/integration/raycluster.py`` (root only), runs
``zoo train ppo --env CartPole-v1 --launcher ray`` in its head node with ``--actors`` actor
workers spread over the nodes (``launcher_options.strategy=SPREAD``), and measures, from this
(host) process:

- ``start_to_first_update_s``: from starting ``zoo train`` to the first ``update`` row of its
  ``metrics.jsonl``;
- ``detection_s``: from SIGKILL of one actor worker's Ray actor process (``ray::WorkerHost``,
  the host of ``zoo: actor <k> <name>``; its worker dies with it) to the ``restart`` row the
  controller writes for that worker (``supervision.max_restarts`` allows one);
- ``stop_to_exit_s`` and ``stop_to_last_process_gone_s``: from SIGINT of ``zoo train`` (Ctrl-C)
  to its exit, and to the moment no process of the run (``zoo: ... <name>``, ``ray::WorkerHost``,
  ``ray::NodeAgent``) is left on any node.

One JSON row per run is appended to ``--out``. Usage (root, the repository's environment)::

    python benchmarks/ray_failure_bench.py --actors 32 --label after --out benchmarks/data/ray_failure.jsonl

Every wait is bounded (``--timeout``); the cluster is stopped and checked empty at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.raycluster import RayCluster, _children, processes_in, unavailable_reason  # noqa: E402


def wait_for(what: str, check, timeout: float, every: float = 0.05):
    """Poll ``check()`` until it returns something truthy; its value, or RuntimeError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise RuntimeError(f"{what}: not within {timeout:g} s")


def rows(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--cpus", type=int, default=12, help="CPUs each Ray node offers")
    p.add_argument("--actors", type=int, default=32)
    p.add_argument("--victim", type=int, default=5, help="the actor worker whose Ray actor is killed")
    p.add_argument("--timeout", type=float, default=600.0, help="bound on each wait (s)")
    p.add_argument("--label", default="", help="e.g. before / after, stored in the row")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"ray_failure_bench: {reason}", file=sys.stderr)
        return 2
    runs = Path(tempfile.mkdtemp(prefix="zoo-bench-rayfail-"))
    name = "rayfail"
    row: dict = {"label": args.label, "actors": args.actors, "nodes": args.nodes, "cpus_per_node": args.cpus,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
                 "cores": os.cpu_count()}
    cluster = RayCluster(nodes=args.nodes, cpus=args.cpus, keep={i: [str(runs)] for i in range(args.nodes)})
    cluster.start()
    proc = None
    try:
        cluster.wait_nodes(args.nodes)
        began = time.monotonic()
        proc = cluster.popen(0, [sys.executable, "-m", "zoo", "train", "ppo", "--env", "CartPole-v1", "--name", name,
                                 "--launcher", "ray", "--ray-address", cluster.address, "--steps", "100000000",
                                 "--set", f"runs_dir={runs}", "--set", "log.tensorboard=false",
                                 "--set", f"actors.count={args.actors}", "--set", "launcher_options.strategy=SPREAD",
                                 "--set", "supervision.max_restarts=3"],
                             stdout=open(os.devnull, "w"), stderr=open(runs / "stderr.txt", "w"))
        metrics = runs / name / "metrics.jsonl"
        wait_for("the first update", lambda: proc.poll() is not None or any(
            r["type"] == "update" for r in rows(metrics)), args.timeout)
        if proc.poll() is not None:
            raise RuntimeError(f"zoo train ended: {(runs / 'stderr.txt').read_text()[-3000:]}")
        row["start_to_first_update_s"] = round(time.monotonic() - began, 2)

        title = f"zoo: actor {args.victim} {name}"
        worker = wait_for(title, lambda: [pid for pid, t in processes_in(cluster.namespaces) if t == title], 60)[0]
        host = ppid(worker)
        with open(f"/proc/{host}/cmdline", "rb") as f:
            assert f.read().startswith(b"ray::WorkerHost"), "the worker's parent is not its Ray actor"
        os.kill(host, signal.SIGKILL)
        killed = time.monotonic()
        restart = wait_for("the restart row", lambda: [r for r in rows(metrics) if r["type"] == "restart"
                                                       and r["role"] == "actor" and r["index"] == args.victim],
                           args.timeout)
        row["detection_s"] = round(time.monotonic() - killed, 2)
        row["restart_reason"] = restart[0]["reason"]

        zoo = [c for c in _children(proc.pid)]  # nsenter forks zoo train
        os.kill(zoo[0] if zoo else proc.pid, signal.SIGINT)
        stopped = time.monotonic()
        proc.wait(args.timeout)
        row["stop_to_exit_s"] = round(time.monotonic() - stopped, 2)
        row["exit_code"] = proc.returncode

        def gone() -> bool:
            return not [t for _, t in processes_in(cluster.namespaces)
                        if (t.startswith("zoo: ") and t.endswith(f" {name}")) or t.startswith(("ray::WorkerHost",
                                                                                                 "ray::NodeAgent"))]

        wait_for("the run's last process to go", gone, args.timeout)
        row["stop_to_last_process_gone_s"] = round(time.monotonic() - stopped, 2)
    finally:
        if proc is not None and proc.poll() is None:
            cluster.kill_tree(proc)
        left = cluster.stop(check=False)
        import shutil

        shutil.rmtree(runs, ignore_errors=True)
    row["left_after_cluster_stop"] = len(left)
    print(json.dumps(row))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
