"""Wall time to CleanRL dqn.py's final CartPole-v1 return: Zoo's DQN against CleanRL's ``dqn.py``.

    python benchmarks/peers/dqn_time_to_return.py --logs dqn-logs          # 3 interleaved rounds
    python benchmarks/peers/dqn_time_to_return.py --cleanrl-steps 100000 --zoo-limit 120
    python benchmarks/peers/dqn_time_to_return.py --table dqn-time-to-return-XXXX.jsonl   # table only

The target it checks (issue 24): Zoo reaches CleanRL's final mean return in at most half of
CleanRL's wall-clock time.

Definitions. **CleanRL's final mean return**: per seed, the mean episodic return of the last
``--window`` (100) episodes its run printed; the **target** is the mean of that over the seeds.
**Zoo's time to the target**: wall seconds from Zoo's launch to the first moment the mean of
its last 100 finished episodes (all its envs' episodes, exploring ones included, in the order
its ``metrics.jsonl`` lists them) is at least the target. **CleanRL's time**: wall seconds from
its launch to its exit (its ``--total-timesteps`` done). Times are ``time.monotonic()`` from just
before ``Popen``, start-up included; an episode is stamped when this script reads it (CleanRL's
line as it arrives, Zoo's row at the 0.2 s poll that finds it). The target line: the mean over
seeds of Zoo's times to the target over the mean of CleanRL's times, met when at most 0.5 (a Zoo
seed that never reached the target counts as "never" and the target is not met).

Round k (``--repeats`` rounds, default 3) runs, one after the other (interleaved, so load
changes hit both alike), with seed k:

1. Zoo (``zoo train dqn``: apex-dqn, its CartPole presets unless ``--zoo-set``), in a temporary
   folder::

       python -m zoo train dqn --env CartPole-v1 --steps ZOO_STEPS --seed K --name dqn-ttr-K --set runs_dir=<tmp>

   every episode row of ``metrics.jsonl`` kept with its time; run to its ``--zoo-steps`` or
   ``--zoo-limit`` seconds (the target is only known once CleanRL's seeds have run, so Zoo is not
   stopped at it; a limit of half CleanRL's expected time loses nothing the target could use).
2. CleanRL's ``dqn.py`` (``setup.sh cleanrl``) unchanged, at its defaults but ``--total-timesteps``::

       <peers>/cleanrl/venv/bin/python -u -W ignore cleanrl_compat.py --same-step-autoreset \\
           <peers>/cleanrl/src/cleanrl/dqn.py --total-timesteps STEPS --seed K --no-cuda

   its ``global_step=N, episodic_return=R`` lines read as they come; run to its end or ``--limit``.

Each run's row (with every episode as ``[seconds, env steps, return]``) is appended to ``--out``
(JSON lines) as it ends; the table is computed from the rows, so ``--table`` recomputes it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import HERE, PEERS_DIR, SYSTEMS, _stop, _venv_python, installed  # noqa: E402
from time_to_return import MeanTracker, Tail, parse_cleanrl_episode, parse_zoo_row  # noqa: E402

ENV = "CartPole-v1"
WINDOW = 100
GOAL = 0.5
POLL_S = 0.2
LABELS = {"zoo": "Zoo apex-dqn (`zoo train dqn`)", "cleanrl": "CleanRL dqn.py"}

Episode = tuple[float, int, float]
"""(wall seconds since launch, env steps, episodic return)."""


# ----------------------------------------------------------------------------- pure logic
def final_mean(episodes: list[Episode], window: int = WINDOW) -> float | None:
    """The mean return of the last ``window`` episodes (None with fewer).

    Example: returns 1..150, window 100 -> mean of 51..150 = 100.5."""
    if len(episodes) < window:
        return None
    return sum(e[2] for e in episodes[-window:]) / window


def time_to_mean(episodes: list[Episode], threshold: float, window: int = WINDOW) -> tuple[float, int, float] | None:
    """``(seconds, env steps, mean)`` at the first episode where the mean of the last ``window``
    returns is at least ``threshold``; None when it never is.

    Example: returns 1..150 at t = 1..150 s, window 100, threshold 60: the mean of 11..110 is
    60.5 at t = 110 (that of 10..109 is 59.5) -> (110, ..., 60.5)."""
    tracker = MeanTracker(threshold, window=window)
    for t, steps, ret in episodes:
        tracker.add(t, steps, ret)
        if tracker.reached is not None:
            return tracker.reached
    return None


def target_of(rows: list[dict], window: int = WINDOW) -> tuple[float | None, list[float | None]]:
    """CleanRL's final mean return: the mean over its runs (rows without ``error``) of each run's
    :func:`final_mean`; also each run's value. None when no run had ``window`` episodes."""
    per = [final_mean([tuple(e) for e in r["episodes"]], window) for r in rows
           if r["system"] == "cleanrl" and "error" not in r]
    got = [v for v in per if v is not None]
    return (sum(got) / len(got) if got else None), per


def summarise(rows: list[dict], window: int = WINDOW) -> dict[str, Any]:
    """The figures of the table: ``target`` and ``cleanrl_final`` (per run), ``cleanrl_wall`` (per
    run, those that exited 0), ``zoo_times`` (per Zoo run: seconds to the target, None = never),
    ``zoo_steps`` (env steps there), ``zoo_wall``, ``ratio`` (mean Zoo time / mean CleanRL wall;
    None when a Zoo run never reached it or nothing to compare) and ``met``."""
    target, per = target_of(rows, window)
    cl = [r for r in rows if r["system"] == "cleanrl" and "error" not in r]
    zoo = [r for r in rows if r["system"] == "zoo" and "error" not in r]
    cl_wall = [r["wall_s"] for r in cl if r.get("ended") == "exit 0"]
    hits = [time_to_mean([tuple(e) for e in r["episodes"]], target, window) if target is not None else None
            for r in zoo]
    times = [h[0] if h else None for h in hits]
    ratio = None
    if target is not None and cl_wall and times and all(t is not None for t in times):
        ratio = (sum(times) / len(times)) / (sum(cl_wall) / len(cl_wall))  # type: ignore[arg-type]
    return {"target": target, "cleanrl_final": per, "cleanrl_wall": cl_wall,
            "cleanrl_steps": [r["env_steps"] for r in cl], "zoo_times": times,
            "zoo_steps": [h[1] if h else None for h in hits], "zoo_wall": [r["wall_s"] for r in zoo],
            "zoo_final": [final_mean([tuple(e) for e in r["episodes"]], window) for r in zoo],
            "ratio": ratio, "met": ratio is not None and ratio <= GOAL}


def _fmt(values: list, digits: int = 1, thousands: bool = False) -> str:
    def one(v: Any) -> str:
        if v is None:
            return "never"
        return f"{v:,.{digits}f}" if thousands else f"{v:.{digits}f}"
    mean = [v for v in values if v is not None]
    head = one(sum(mean) / len(mean)) if mean and len(mean) == len(values) else ("never" if values else "-")
    return f"{head} ({', '.join(one(v) for v in values)})"


def format_table(rows: list[dict], window: int = WINDOW) -> str:
    """The markdown table of :func:`summarise`'s figures (means, then every seed's value), the
    notes (errors, runs stopped at the limit) and the target line."""
    s = summarise(rows, window)
    out = [f"CleanRL's final mean return (mean of its last {window} episodes per seed, averaged): "
           + (f"{s['target']:.1f} " + _fmt(s["cleanrl_final"]).split(" ", 1)[1] if s["target"] is not None
              else "- (no CleanRL run with enough episodes)"),
           "",
           "| system | wall s (mean, per seed) | s to the target (mean, per seed) | env steps there | "
           f"final mean-{window} |",
           "|---|---|---|---|---|",
           f"| {LABELS['zoo']} | {_fmt(s['zoo_wall'])} | {_fmt(s['zoo_times'])} | {_fmt(s['zoo_steps'], 0, True)} | "
           f"{_fmt(s['zoo_final'])} |",
           f"| {LABELS['cleanrl']} | {_fmt(s['cleanrl_wall'])} | (its whole run) | "
           f"{_fmt([float(v) for v in s['cleanrl_steps']], 0, True)} | {_fmt(s['cleanrl_final'])} |"]
    for r in rows:
        who = f"{r.get('label', r['system'])}, seed {r.get('seed', '?')}"
        if "error" in r:
            out.append(f"- {who}: {r['error']}")
        elif r.get("ended") not in ("exit 0",) and not (r["system"] == "zoo" and r.get("ended") == "limit"):
            out.append(f"- {who}: ended ({r.get('ended')}) after {r['env_steps']:,} env steps")
    out.append("")
    if s["ratio"] is None:
        out.append(f"mean Zoo s to {s['target'] if s['target'] is None else round(s['target'], 1)} / mean CleanRL "
                   f"wall s: - (a Zoo seed never reached it, or nothing to compare): target <= {GOAL:g} not met")
    else:
        zt = sum(s["zoo_times"]) / len(s["zoo_times"])
        cw = sum(s["cleanrl_wall"]) / len(s["cleanrl_wall"])
        out.append(f"mean Zoo s to {s['target']:.1f} / mean CleanRL wall s = {zt:.1f} / {cw:.1f} = {s['ratio']:.2f}: "
                   f"target <= {GOAL:g} {'met' if s['met'] else 'not met'}")
    return "\n".join(out)


# ----------------------------------------------------------------------------- running the two
def zoo_command(seed: int, steps: int, runs_dir: str, extra: list[str]) -> list[str]:
    sets = [x for kv in extra for x in ("--set", kv)]
    return [sys.executable, "-m", "zoo", "train", "dqn", "--env", ENV, "--steps", str(steps), "--seed", str(seed),
            "--name", f"dqn-ttr-{seed}", "--set", f"runs_dir={runs_dir}", *sets]


def cleanrl_command(seed: int, steps: int) -> list[str]:
    return [_venv_python("cleanrl"), "-u", "-W", "ignore", str(HERE / "cleanrl_compat.py"), "--same-step-autoreset",
            str(PEERS_DIR / "cleanrl" / "src" / "cleanrl" / "dqn.py"), "--total-timesteps", str(steps),
            "--seed", str(seed), "--no-cuda"]


def run_zoo(seed: int, steps: int, limit_s: float, extra: list[str], log: Path | None) -> dict[str, Any]:
    """One Zoo run to its ``steps`` or ``limit_s``; every episode with its time."""
    episodes: list[list] = []
    with tempfile.TemporaryDirectory(prefix="dqn-ttr-zoo-") as workdir:
        out = open(log, "w") if log else subprocess.DEVNULL
        tail = Tail(Path(workdir, f"dqn-ttr-{seed}", "metrics.jsonl"))
        began = time.monotonic()
        proc = subprocess.Popen(zoo_command(seed, steps, workdir, extra), cwd=workdir, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                exited = proc.poll() is not None
                now = time.monotonic() - began
                for line in tail.lines():
                    got = parse_zoo_row(line)
                    if got is not None:
                        episodes.append([round(now, 2), *got])
                if exited:
                    ended = f"exit {proc.returncode}"
                    break
                if now >= limit_s:
                    ended = "limit"
                    break
                time.sleep(POLL_S)
            wall = time.monotonic() - began
        finally:
            _stop(proc)
            if log:
                out.close()
    return {"episodes": episodes, "env_steps": max((e[1] for e in episodes), default=0), "ended": ended,
            "wall_s": wall}


def run_cleanrl(seed: int, steps: int, limit_s: float, log: Path | None, peer_threads: int | None) -> dict[str, Any]:
    """One CleanRL dqn.py run, to its end or ``limit_s``; every episode with its time."""
    episodes: list[list] = []
    env = dict(os.environ)
    if peer_threads:
        env.update(OMP_NUM_THREADS=str(peer_threads), MKL_NUM_THREADS=str(peer_threads))
    with tempfile.TemporaryDirectory(prefix="dqn-ttr-cleanrl-") as workdir:  # its runs/ (TensorBoard) goes here
        out = open(log, "w") if log else None
        began = time.monotonic()
        proc = subprocess.Popen(cleanrl_command(seed, steps), cwd=workdir, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True, bufsize=1, env=env)

        def read() -> None:
            for line in proc.stdout:
                now = time.monotonic() - began
                if out:
                    out.write(line)
                got = parse_cleanrl_episode(line)
                if got is not None:
                    episodes.append([round(now, 2), *got])

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            while proc.poll() is None and time.monotonic() - began < limit_s:
                time.sleep(POLL_S)
            wall = time.monotonic() - began
            ended = "limit" if proc.poll() is None else f"exit {proc.returncode}"
        finally:
            _stop(proc)
            reader.join(10)
            if out:
                out.close()
    return {"episodes": episodes, "env_steps": max((e[1] for e in episodes), default=0), "ended": ended,
            "wall_s": wall}


def _summary(res: dict) -> str:
    if "error" in res:
        return res["error"]
    fm = final_mean([tuple(e) for e in res["episodes"]])
    return (f"{len(res['episodes'])} episodes, {res['env_steps']:,} env steps, {res['wall_s']:.0f} s, {res['ended']}; "
            f"final mean-{WINDOW} " + ("-" if fm is None else f"{fm:.1f}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds (zoo, cleanrl), seeds 1..N")
    parser.add_argument("--cleanrl-steps", type=int, default=500_000, help="dqn.py's --total-timesteps (its default)")
    parser.add_argument("--zoo-steps", type=int, default=500_000, help="zoo train's --steps")
    parser.add_argument("--zoo-limit", type=float, default=600.0, help="stop a Zoo run after this many seconds")
    parser.add_argument("--zoo-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a Zoo option on top of apex-dqn's CartPole presets (repeatable)")
    parser.add_argument("--limit", type=float, default=3600.0, help="stop a CleanRL run after this many seconds")
    parser.add_argument("--peer-threads", type=int, default=None, metavar="N",
                        help="OMP_NUM_THREADS / MKL_NUM_THREADS for CleanRL (default: torch's = the cores)")
    parser.add_argument("--out", default=f"dqn-time-to-return-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    parser.add_argument("--logs", default=None, help="folder for each run's output (default: none kept)")
    parser.add_argument("--table", default=None, metavar="JSONL",
                        help="only print the table of this file (.jsonl or .jsonl.gz)")
    args = parser.parse_args()
    if args.table:
        with (gzip.open(args.table, "rt") if args.table.endswith(".gz") else open(args.table)) as f:
            print(format_table([json.loads(x) for x in f if x.strip()]))
        return
    if args.repeats < 1 or args.limit <= 0 or args.zoo_limit <= 0 or args.cleanrl_steps < 1 or args.zoo_steps < 1:
        parser.error("--repeats, --cleanrl-steps, --zoo-steps >= 1 and --limit, --zoo-limit > 0 are needed")
    if not installed(SYSTEMS["cleanrl"]) or not (PEERS_DIR / "cleanrl" / "src" / "cleanrl" / "dqn.py").is_file():
        parser.error("CleanRL's dqn.py is not set up: bash benchmarks/peers/setup.sh cleanrl "
                     "(remove <peers>/cleanrl first if it was set up without dqn.py)")
    logs = Path(args.logs) if args.logs else None
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {os.getloadavg()[0]:.1f}; "
          f"{args.repeats} rounds on {ENV}: Zoo {args.zoo_steps:,} env steps or {args.zoo_limit:g} s "
          f"(--set {' '.join(args.zoo_set) or 'none'}), CleanRL dqn.py {args.cleanrl_steps:,} env steps; "
          f"results -> {args.out}", flush=True)
    rows = []
    with open(args.out, "a") as out:
        for r in range(1, args.repeats + 1):
            for system in ("zoo", "cleanrl"):
                load = os.getloadavg()[0]
                log = logs / f"{system}-{r}.log" if logs else None
                try:
                    res = (run_zoo(r, args.zoo_steps, args.zoo_limit, args.zoo_set, log) if system == "zoo"
                           else run_cleanrl(r, args.cleanrl_steps, args.limit, log, args.peer_threads))
                except OSError as exc:
                    res = {"error": f"could not run: {exc}"}
                row = {"round": r, "seed": r, "system": system, "label": LABELS[system], "load_average": load,
                       "time_utc": time.strftime("%H:%M:%S", time.gmtime()),
                       **({"total_timesteps": args.cleanrl_steps} if system == "cleanrl"
                          else {"zoo_steps": args.zoo_steps, "zoo_set": args.zoo_set}), **res}
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"round {r} {system:8} load {load:4.1f}: {_summary(res)}", flush=True)
    print()
    print(format_table(rows))


if __name__ == "__main__":
    main()
