"""Zoo next to CleanRL, Sample Factory and RLlib at the same workloads, on this machine, in one sitting.

    python benchmarks/peers/side_by_side.py --setup          # set up missing peers, then 3 interleaved rounds
    python benchmarks/peers/side_by_side.py --workloads cartpole --systems zoo,cleanrl --repeats 1 --seconds 20
    python benchmarks/peers/side_by_side.py --table runs.jsonl   # the table of earlier runs, nothing run

Each round runs every system at every workload once (round-robin, so load changes hit all
systems alike), ``--repeats`` rounds. A run: the system at the workload
(:data:`zoo.bench.workloads.WORKLOADS`; peers in their own virtual environments, made by
``setup.sh``), measured over ``--seconds`` after ``--warmup`` seconds past its first progress
report (``peers.py``), then stopped. Every result is appended to ``--out`` (JSON lines) as it
comes. The table gives, per workload and system, the median and all values of env steps/s and
trained env steps/s (env steps whose samples an update used), and the ratio of Zoo's trained
median to each system's. A peer not set up is skipped with the command that sets it up.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import HERE, PEERS_DIR, SYSTEMS, installed, median, run_system  # noqa: E402


def _fmt(values: list[float]) -> str:
    """``"218 (214, 218, 224)"``: the median, then every value in run order."""
    if not values:
        return "-"
    return f"{median(values):,.0f} (" + ", ".join(f"{v:,.0f}" for v in values) + ")"


def format_side_by_side(rows: list[dict], reference: str = "zoo") -> str:
    """Markdown tables, one per workload, from result rows ``{"workload", "system", "label",
    "env_steps_per_s", "trained_env_steps_per_s"}`` (rows with ``"error"`` are listed under the
    table). ``Zoo / this``: the median trained env steps/s of ``reference`` over this row's
    (e.g. 300 / 200 = 1.50x)."""
    out = []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        ok = [r for r in mine if "error" not in r]
        ref = [r["trained_env_steps_per_s"] for r in ok if r["system"] == reference]
        out += [f"**{workload}**", "",
                "| system | env steps/s, median (all runs) | trained env steps/s, median (all runs) | "
                f"{reference} trained / this |", "|---|---|---|---|"]
        for system in dict.fromkeys(r["system"] for r in mine):
            got = [r for r in ok if r["system"] == system]
            if not got:
                continue
            trained = [r["trained_env_steps_per_s"] for r in got]
            ratio = (f"{median(ref) / median(trained):.2f}x" if ref and median(trained) > 0 else "-")
            out.append(f"| {got[0]['label']} | {_fmt([r['env_steps_per_s'] for r in got])} | {_fmt(trained)} | "
                       f"{ratio} |")
        for r in mine:
            if "error" in r:
                out.append(f"- {r['label']}, round {r.get('round', '?')}: {r['error']}")
        out.append("")
    return "\n".join(out)


def main() -> None:
    from zoo.bench.workloads import WORKLOADS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["pong", "cartpole"], choices=sorted(WORKLOADS))
    parser.add_argument("--systems", default="zoo,zoo-defaults,cleanrl,sample-factory,rllib",
                        help=f"comma-separated, of {','.join(SYSTEMS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds after the first progress report")
    parser.add_argument("--limit", type=float, default=420.0, help="give up on one run after this many seconds")
    parser.add_argument("--peer-threads", type=int, default=None, metavar="N",
                        help="OMP_NUM_THREADS for the peers (default: their own, torch's = the cores). On a machine "
                        "shared with other work, 2 spinning OpenMP threads on 2 cores collapse (CleanRL ppo.py: "
                        "41 SPS with 2 threads against 844 with 1 at load 25): use 1 there")
    parser.add_argument("--setup", action="store_true", help="run setup.sh for every peer not yet set up")
    parser.add_argument("--out", default=f"side-by-side-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    parser.add_argument("--logs", default=None, help="folder for each run's output (default: none kept)")
    parser.add_argument("--table", default=None, metavar="JSONL", help="only print the table of this file")
    args = parser.parse_args()
    if args.table:
        print(format_side_by_side([json.loads(x) for x in open(args.table) if x.strip()]))
        return
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names or args.repeats < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error(f"--systems: unknown {unknown} (known: {', '.join(SYSTEMS)})" if unknown or not names
                     else "--repeats >= 1, --seconds > 0 and --warmup >= 0 are needed")
    systems = []
    for name in names:
        s = SYSTEMS[name]
        if not installed(s) and args.setup:
            print(f"setting up {s.peer} in {PEERS_DIR / s.peer} ...", flush=True)
            subprocess.run(["bash", str(HERE / "setup.sh"), s.peer], check=False)
        if installed(s):
            systems.append(s)
        else:
            print(f"skipping {name}: not set up (bash benchmarks/peers/setup.sh {s.peer}, or pass --setup)",
                  flush=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {os.getloadavg()[0]:.1f}; "
          f"{args.repeats} rounds x {len(args.workloads)} workloads x {len(systems)} systems, "
          f"{args.seconds:g} s measured after {args.warmup:g} s warm-up each; peers' OMP threads: "
          f"{args.peer_threads or 'their default'}; results -> {args.out}", flush=True)
    logs = Path(args.logs) if args.logs else None
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(args.out, "a") as out:
        for r in range(1, args.repeats + 1):
            for wname in args.workloads:
                w = WORKLOADS[wname]
                for s in systems:
                    load = os.getloadavg()[0]
                    log = logs / f"{wname}-{s.name}-{r}.log" if logs else None
                    res = run_system(s, w, args.seconds, args.warmup, args.limit, log, args.peer_threads)
                    if res.get("error") == "no run for this workload":
                        continue
                    row = {"round": r, "workload": wname, "system": s.name, "label": s.label,
                           "load_average": load, "time_utc": time.strftime("%H:%M:%S", time.gmtime()), **res}
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    text = (res["error"] if "error" in res else
                            f"{res['env_steps_per_s']:,.0f} env steps/s, {res['trained_env_steps_per_s']:,.0f} "
                            f"trained env steps/s over {res['window_s']:.0f} s")
                    print(f"round {r} {wname:9} {s.name:15} load {load:4.1f}: {text}", flush=True)
    print()
    print(format_side_by_side(rows))


if __name__ == "__main__":
    main()
