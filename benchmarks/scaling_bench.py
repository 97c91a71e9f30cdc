"""Scaling: env steps/s against the number of actor workers, with 1 and 2 policy workers.

Scaling cannot be shown with CPU-bound envs on a small machine, so the env costs wall time,
not CPU, as a remote simulator would: ``fake-slow`` (``zoo.core.testing``) sleeps
``--step-ms`` per step. Each actor steps one env (ring of 1), so one actor alone makes at
most ``1000 / step-ms`` env steps/s and N actors ideally N times that. The policy is PPO's
tiny MLP (64 hidden units); the trainer counts and discards samples (``trainer.learn=false``).
Streams use the default ``auto`` transport (shm here), with ``4 x actors`` slots on the
inference and sample rings.

For each (policy.count, actors) point the benchmark starts the run, waits until every actor
has sent a heartbeat, lets it warm up, then measures for ``--seconds``:

- env steps/s: from the trainer's status messages (env steps it received);
- per worker role: core-seconds used in the window (``/proc/<pid>/stat`` utime + stime),
  and for the policy workers core-seconds per inference request (one request per actor
  step here: one env per actor) — the cost that caps what one policy worker can serve.

    python benchmarks/scaling_bench.py                      # the sweep of benchmarks/RESULTS.md
    python benchmarks/scaling_bench.py --actors 1 2 4 --policies 1 --seconds 10

With ``--ray ADDRESS`` the workers are Ray actors on the cluster at ``ADDRESS`` (``--launcher
ray``, strategy SPREAD: spread over its nodes; the runs folder ``--runs-dir`` must be one every
node sees), run from the head node. On one machine, the 3-node loopback cluster of the tests
(each node its own PID and mount namespace, /tmp and /dev/shm; root only)::

    PYTHONPATH=$PWD/tests/plugins/zoo-fakes python tests/integration/raycluster.py --nodes 3 --cpus 12 \
        --share /tmp/zoo-bench-runs-rc -- python benchmarks/scaling_bench.py --ray 127.0.0.1:6379 \
        --runs-dir /tmp/zoo-bench-runs-rc --policies 1 --actors 1 2 4 8 16 32 --out benchmarks/data/scaling_ray.jsonl \
        --add benchmarks/data/scaling.jsonl --png benchmarks/scaling_ray.png   # RESULTS.md: "Scaling over Ray nodes"

Ray's workers run on other nodes' PID namespaces there, so per-role core use is not measured
in that mode (``cores_by_role`` is null): env steps/s only. ``PYTHONPATH`` reaches every
node's ``ray start`` and so the workers (they need the ``fake-slow`` env).

Writes one JSON line per point (``--out``) and the plot (``--png``).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
FAKES = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "zoo-fakes"
"""The test-only plugin that registers ``fake-slow`` (and the other fake envs) through an entry
point; put on ``sys.path`` and ``PYTHONPATH`` so this process and the spawned workers see it."""


def use_fake_envs() -> None:
    sys.path.insert(0, str(FAKES))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")]))


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of process ``pid`` in seconds (0 if it is gone)."""
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def measure(actors: int, policies: int, step_ms: float, seconds: float, warmup: float, start_timeout: float,
            ray: str | None = None, runs_dir: str = "/tmp/zoo-bench-runs") -> dict:
    from zoo.core.config import build_config
    from zoo.core.controller import Controller, prepare_run_dir
    from zoo.core.plugins import get_registry

    name = f"bench-scaling-p{policies}-a{actors}-{int(time.time())}"
    on_ray = [f"launcher_options.address={ray}", "launcher_options.strategy=SPREAD",
              f"launcher_options.placement_timeout_s={start_timeout}"] if ray else []
    cfg = build_config(get_registry(), "ppo", "fake-slow", steps=10**9, name=name,
                       launcher="ray" if ray else None, overrides=[*on_ray,
        f"env.step_latency={step_ms / 1000}", "env.episode_length=1000",
        f"actors.count={actors}", "actors.envs_per_actor=1", "actors.ring_size=1",
        f"policy.count={policies}", "policy.threads=1", "trainer.learn=false", "trainer.batch_samples=2",
        "sample_length=16", "log.interval_s=1", "log.tensorboard=false", f"runs_dir={runs_dir}",
        f"supervision.start_timeout_s={start_timeout}",
        # shm rings shared by N producers need > 2 x N slots (docs/transports.md, back-pressure);
        # the default 8 starves 32 actors (measured: 57 env steps/s instead of ~1,200)
        *(f"streams.{s}.options.slots={max(8, 4 * actors)}" for s in ("inference", "sample")),
        "streams.inference.options.slot_bytes=4096", "streams.sample.options.slot_bytes=65536"])
    with contextlib.redirect_stderr(io.StringIO()):
        controller = Controller(cfg, cfg.spec, prepare_run_dir(cfg))
        try:
            controller.start()
            # Ray: a worker's pid is its node's (another PID namespace, another machine): not read here
            pids = {} if ray else {key: getattr(h, "pid", None) for key, h in controller.supervisor.handles.items()}
            seen: set[int] = set()
            points: list[tuple[float, int]] = []
            began = time.monotonic()
            ready = window = None
            cpu0: dict = {}
            while True:
                for meta in controller.poll(0.05):
                    if meta.get("type") == "heartbeat" and meta.get("role") == "actor":
                        seen.add(meta["index"])
                    elif meta.get("type") == "status":
                        points.append((time.monotonic(), meta["env_steps"]))
                if controller.supervise():  # raises WorkerCrashed for a failure beyond restarts
                    raise RuntimeError("a worker was restarted: the point would not be clean")
                now = time.monotonic()
                if ready is None:
                    if len(seen) == actors:
                        ready = now
                    elif now - began > start_timeout:
                        raise RuntimeError(f"only {len(seen)} of {actors} actors started within {start_timeout} s")
                elif window is None and now - ready >= warmup and points:
                    window = (points[-1], now)
                    cpu0 = {key: cpu_seconds(pid) for key, pid in pids.items()}
                    cpu0["controller"] = cpu_seconds(os.getpid())
                elif window is not None and now - window[1] >= seconds and points[-1][0] > window[0][0]:
                    cpu1 = {key: cpu_seconds(pid) for key, pid in pids.items()}
                    cpu1["controller"] = cpu_seconds(os.getpid())
                    break
        finally:
            controller.stop()
    (t0, s0), (t1, s1) = window[0], points[-1]
    rate = (s1 - s0) / (t1 - t0)
    elapsed = time.monotonic() - window[1]
    if ray:
        nodes = {h.host for h in controller.supervisor.handles.values()}
        return {"actors": actors, "policies": policies, "step_ms": step_ms, "env_steps_per_s": rate,
                "window_s": elapsed, "launcher": "ray", "ray_nodes": len(nodes), "cores_by_role": None,
                "policy_worker_cores": None, "policy_core_ms_per_request": None, "actor_core_ms_per_step": None}
    used = {key: cpu1[key] - cpu0[key] for key in cpu1}
    by_role = {role: sum(v for k, v in used.items() if k != "controller" and k[0] == role)
               for role in ("actor", "policy", "trainer")}
    by_role["controller"] = used["controller"]
    policy_each = [used[("policy", m)] / elapsed for m in range(policies)]
    requests = rate * elapsed  # one request per env step (one env per actor)
    return {"actors": actors, "policies": policies, "step_ms": step_ms, "env_steps_per_s": rate,
            "window_s": elapsed, "cores_by_role": {k: v / elapsed for k, v in by_role.items()},
            "policy_worker_cores": policy_each,
            "policy_core_ms_per_request": 1000 * by_role["policy"] / requests if requests else None,
            "actor_core_ms_per_step": 1000 * by_role["actor"] / requests if requests else None}


def linear_base(rows: list[dict]) -> float:
    """The 1-actor rate with 1 policy worker: the slope of the ideal linear line (of the
    ``local`` launcher's rows when there are any)."""
    ones = [r for r in rows if r["actors"] == 1 and r["policies"] == 1]
    return next((r for r in ones if r.get("launcher", "local") == "local"), ones[0])["env_steps_per_s"]


def load_rows(paths: list[str]) -> list[dict]:
    """Rows of earlier runs (``--add``), to plot and compare against."""
    return [json.loads(line) for p in paths for line in open(p) if line.strip()]


def plot(rows: list[dict], step_ms: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    actors = sorted({r["actors"] for r in rows})
    per_actor = linear_base(rows)
    ax.plot(actors, [a * per_actor for a in actors], "k--",
            label=f"ideal linear (N x the 1-actor rate, {per_actor:.1f} env steps/s)")
    ax.plot(actors, [a * 1000 / step_ms for a in actors], ":", color="grey",
            label=f"env ceiling (N x 1000 / {step_ms:g} ms)")
    for launcher in sorted({r.get("launcher", "local") for r in rows}, key=lambda x: x != "local"):
        for m in sorted({r["policies"] for r in rows if r.get("launcher", "local") == launcher}):
            pts = sorted((r["actors"], r["env_steps_per_s"]) for r in rows
                         if r["policies"] == m and r.get("launcher", "local") == launcher)
            where = ", local launcher (shm)" if launcher == "local" else (
                f", --launcher ray over {max(r.get('ray_nodes', 1) for r in rows if r.get('launcher') == launcher)} "
                "loopback nodes (nng/tcp)")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if launcher == "local" else "s--",
                    label=f"policy.count={m}{where}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(actors, [str(a) for a in actors])
    ax.set_xlabel("actor workers (1 env each)")
    ax.set_ylabel("env steps/s")
    ax.set_title(f"Scaling with a {step_ms:g} ms sleeping env, 2-core VM")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--policies", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--start-timeout", type=float, default=600.0)
    parser.add_argument("--out", default="benchmarks/data/scaling.jsonl")
    parser.add_argument("--png", default="benchmarks/scaling.png")
    parser.add_argument("--add", nargs="*", default=[], help="JSON lines of earlier points to plot with these")
    parser.add_argument("--ray", metavar="ADDRESS", help="run the workers on the Ray cluster at ADDRESS (--launcher ray)")
    parser.add_argument("--runs-dir", default="/tmp/zoo-bench-runs",
                        help="where the runs go (with --ray: a folder every node sees)")
    args = parser.parse_args()
    use_fake_envs()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    rows = load_rows(args.add)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as out:
        for m in args.policies:
            for n in args.actors:
                if m > n:
                    continue
                row = measure(n, m, args.step_ms, args.seconds, args.warmup, args.start_timeout, args.ray,
                              args.runs_dir)
                row["load_average"] = os.getloadavg()[0]
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
                ideal = n * linear_base(rows)
                line = (f"policy.count={m} actors={n:3d}: {row['env_steps_per_s']:8.0f} env steps/s "
                        f"({row['env_steps_per_s'] / ideal:5.1%} of linear)")
                if row["cores_by_role"] is None:
                    line += f" on {row['ray_nodes']} Ray nodes"
                else:
                    line += (" cores: " + " ".join(f"{k}={v:.2f}" for k, v in row["cores_by_role"].items())
                             + f" policy ms/request={row['policy_core_ms_per_request']:.3f}"
                             f" actor ms/step={row['actor_core_ms_per_step']:.3f}")
                print(line, flush=True)
    plot(rows, args.step_ms, args.png)


if __name__ == "__main__":
    main()
