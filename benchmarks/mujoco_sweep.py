"""PPO on MuJoCo against CleanRL's ppo_continuous_action.py: the sweep and its report.

Zoo runs ``zoo train ppo --env <Env>-v5 --steps 1000000 --config benchmarks/mujoco_ppo.toml``
on Hopper, HalfCheetah and Walker2d for each seed; CleanRL's own script runs unmodified in
its own virtual environment (never a dependency of Zoo), on the v4 envs its published
results use, with ``OMP_NUM_THREADS=1`` as CleanRL's benchmark script runs it. Set-up of
that environment, outside the repository (CleanRL pins gymnasium 0.29.1, which needs numpy < 2)::

    python3 -m venv /work/peers/cleanrl-venv
    /work/peers/cleanrl-venv/bin/pip install torch==2.13.0 "gymnasium[mujoco]==0.29.1" "numpy<2" tyro tensorboard
    # cleanrl/ppo_continuous_action.py from https://github.com/vwxyzjn/cleanrl, commit fe8d8a03

Run the sweep (a background job; re-running it skips the runs that finished)::

    nohup python benchmarks/mujoco_sweep.py run --out /work/peers/mujoco-runs \\
        --cleanrl-python /work/peers/cleanrl-venv/bin/python \\
        --cleanrl-script /work/peers/cleanrl/ppo_continuous_action.py --stop-at 03:00 &

Order (so partial results stay balanced): Zoo and CleanRL seed 1 on Hopper side by side
(their wall-clock times measured under the same load), Zoo seed 1 on HalfCheetah and
Walker2d, CleanRL seed 1 on those two, then Zoo seeds 2 and 3 per env, then CleanRL's
further seeds. At most ``--parallel`` runs at a time,
each under ``nice`` and ``timeout`` (never past ``--stop-at``, UTC). Each run's command,
exit code, wall-clock time, CPU time (user + system, the run's whole process tree, sampled
every 5 s) and load average go to ``<out>/jobs.jsonl``; Zoo runs write to
``<out>/zoo/<name>``, CleanRL's output (its ``global_step=..., episodic_return=...``
lines) to ``<out>/cleanrl/<name>.log``.

The report (markdown table on stdout, one PNG of learning curves per env drawn by
``zoo plot``: Zoo's runs, mean over the seeds that finished +- std band, and CleanRL's runs
on this machine, x in env steps; ``--unfinished`` also draws runs still going)::

    python benchmarks/mujoco_sweep.py report --out /work/peers/mujoco-runs --png-dir benchmarks

Final return of a run: the mean return of its last 100 episodes (Zoo: episode rows of
``metrics.jsonl``; CleanRL: its printed episodic returns); a table cell is the mean +- std
(numpy, ddof=0) of that over the seeds that reached the budget.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "benchmarks" / "mujoco_ppo.toml"
ENVS = ("Hopper", "HalfCheetah", "Walker2d")
CLEANRL_PUBLISHED = {"Hopper": (2383, 272), "HalfCheetah": (1443, 46), "Walker2d": (2288, 572)}
"""CleanRL's ppo_continuous_action.py at 1M env steps on the v4 envs (its documentation, 3 seeds)."""
LAST_EPISODES = 100
_CLEANRL_LINE = re.compile(r"global_step=(\d+), episodic_return=\[?([-0-9.eE+]+)")


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its reaped children) from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / TICKS  # utime stime cutime cstime


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by process ``root`` and all its descendants.

    Each live process counts its own time plus that of the children it has reaped, so a
    CPU second is counted once whether the process that spent it still runs or not (a worker
    that exited but was not yet reaped is missed until its parent reaps it).
    """
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            stats[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo += children.get(pid, [])
    return total


def jobs(seeds: list[int], cleanrl_seeds: list[int], steps: int) -> list[dict]:
    """The sweep in run order (module docstring)."""
    def zoo(env: str, seed: int) -> dict:
        return {"job": f"zoo-{env}-s{seed}", "kind": "zoo", "env": env, "seed": seed, "steps": steps}

    def cleanrl(env: str, seed: int) -> dict:
        return {"job": f"cleanrl-{env}-s{seed}", "kind": "cleanrl", "env": env, "seed": seed, "steps": steps}

    order: list[dict] = []
    first, cl_first = seeds[:1], cleanrl_seeds[:1]
    order += [zoo(ENVS[0], s) for s in first] + [cleanrl(ENVS[0], s) for s in cl_first]
    order += [zoo(env, s) for env in ENVS[1:] for s in first]
    order += [cleanrl(env, s) for env in ENVS[1:] for s in cl_first]
    for seed in seeds[1:]:
        order += [zoo(env, seed) for env in ENVS]
    for seed in cleanrl_seeds[1:]:
        order += [cleanrl(env, seed) for env in ENVS]
    return order


def command(job: dict, out: Path, args: argparse.Namespace) -> tuple[list[str], Path, dict]:
    """(argv, working directory, extra environment) of one run."""
    if job["kind"] == "zoo":
        argv = [sys.executable, "-m", "zoo", "train", "ppo", "--env", f"{job['env']}-v5",
                "--steps", str(job["steps"]), "--seed", str(job["seed"]), "--name", job["job"],
                "--config", str(CONFIG), "--set", f"runs_dir={out / 'zoo'}"]
        return argv, REPO, {}
    argv = [args.cleanrl_python, "-u", args.cleanrl_script, "--env-id", f"{job['env']}-v4",
            "--total-timesteps", str(job["steps"]), "--seed", str(job["seed"]), "--no-cuda"]
    return argv, out / "cleanrl", {"OMP_NUM_THREADS": "1"}


def finished_jobs(out: Path) -> set[str]:
    done = set()
    path = out / "jobs.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("rc") == 0:
                done.add(row["job"])
    return done


def run_sweep(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()
    (out / "zoo").mkdir(parents=True, exist_ok=True)
    (out / "cleanrl").mkdir(parents=True, exist_ok=True)
    stop_at = None
    if args.stop_at:
        hh, mm = (int(x) for x in args.stop_at.split(":"))
        stop_at = utc_now().replace(hour=hh, minute=mm, second=0, microsecond=0)
        if stop_at <= utc_now():
            stop_at += dt.timedelta(days=1)
    done = finished_jobs(out)
    todo = [j for j in jobs(args.seeds, args.cleanrl_seeds, args.steps) if j["job"] not in done]
    if not args.cleanrl_script:
        todo = [j for j in todo if j["kind"] == "zoo"]
    running: list[tuple[dict, subprocess.Popen, float, str, tuple, object]] = []
    log = open(out / "jobs.jsonl", "a", buffering=1)
    cpu: dict[str, float] = {}
    while todo or running:
        while todo and len(running) < args.parallel:
            left = (stop_at - utc_now()).total_seconds() if stop_at else args.timeout_s
            if left < 60:
                print(f"{utc_now():%H:%M:%S} stop time reached; not started: {[j['job'] for j in todo]}", flush=True)
                todo = []
                break
            job = todo.pop(0)
            argv, cwd, env = command(job, out, args)
            limit = int(min(args.timeout_s, left))
            full = ["nice", "-n", str(args.nice), "timeout", "--kill-after=120", str(limit)] + argv
            if job["kind"] == "zoo":  # a rerun of an unfinished run starts afresh
                subprocess.run(["rm", "-rf", str(out / "zoo" / job["job"])], check=False)
            stdout = open((out / "cleanrl" if job["kind"] == "cleanrl" else out / "zoo") / f"{job['job']}.log", "w")
            proc = subprocess.Popen(full, cwd=cwd, env={**os.environ, **env}, stdout=stdout,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            print(f"{utc_now():%H:%M:%S} started {job['job']} (pid {proc.pid}, limit {limit} s): {' '.join(full)}",
                  flush=True)
            running.append((job, proc, time.monotonic(), f"{utc_now():%Y-%m-%dT%H:%M:%SZ}", os.getloadavg(), stdout))
        time.sleep(5)
        for item in list(running):
            job, proc, t0, started, load0, stdout = item
            if proc.poll() is None:
                cpu[job["job"]] = tree_cpu_s(proc.pid)  # the last sample before it ends: at most 5 s old
                continue
            running.remove(item)
            stdout.close()
            row = {**job, "rc": proc.returncode, "wall_s": round(time.monotonic() - t0, 1), "started": started,
                   "ended": f"{utc_now():%Y-%m-%dT%H:%M:%SZ}", "loadavg_start": load0, "loadavg_end": os.getloadavg(),
                   "cpu_s": round(cpu.get(job["job"], 0.0), 1),
                   "cmd": " ".join(command(job, out, args)[0])}
            log.write(json.dumps(row) + "\n")
            print(f"{utc_now():%H:%M:%S} ended {job['job']}: rc {proc.returncode}, {row['wall_s']} s", flush=True)
    log.close()


def job_of(cmdline: list[str]) -> str | None:
    """The job name of a run's command line (``zoo-<Env>-s<seed>`` / ``cleanrl-<Env>-s<seed>``)."""
    opts = {k: v for k, v in zip(cmdline, cmdline[1:]) if k.startswith("--")}
    if "--name" in opts:
        return opts["--name"]
    if "--env-id" in opts and "--seed" in opts:
        return f"cleanrl-{opts['--env-id'].rsplit('-', 1)[0]}-s{opts['--seed']}"
    return None


def watch_cpu(args: argparse.Namespace) -> None:
    """CPU seconds of the runs of a sweep driver started without them (process ``--driver``):
    every 5 s, per child of the driver, into ``<out>/cpu_watch.json``, until the driver ends."""
    out = Path(args.out).resolve()
    seen: dict[str, float] = {}
    if (out / "cpu_watch.json").exists():
        seen = json.loads((out / "cpu_watch.json").read_text())
    while Path(f"/proc/{args.driver}").exists():
        for name in os.listdir("/proc"):
            if not name.isdigit() or (st := _stat(int(name))) is None or st[0] != args.driver:
                continue
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_text().split("\0")
            except OSError:
                continue
            job = job_of(cmdline)
            if job:
                seen[job] = round(tree_cpu_s(int(name)), 1)
        tmp = out / "cpu_watch.json.tmp"
        tmp.write_text(json.dumps(seen, indent=1))
        tmp.replace(out / "cpu_watch.json")
        time.sleep(5)


# ----------------------------------------------------------------------------- report
def zoo_returns(run_dir: Path) -> tuple[list[float], int, dict]:
    """Episode returns in order, the last env-step count, and the end row (or {})."""
    returns, steps, end = [], 0, {}
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return returns, steps, end
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if row.get("type") == "episode":
            returns.append(float(row["return"]))
        if isinstance(row.get("env_steps"), (int, float)):
            steps = max(steps, int(row["env_steps"]))
        if row.get("type") == "end":
            end = row
    return returns, steps, end


def cleanrl_returns(log: Path) -> tuple[list[float], int]:
    returns, steps = [], 0
    if log.exists():
        for m in _CLEANRL_LINE.finditer(log.read_text(errors="replace")):
            steps = max(steps, int(m.group(1)))
            returns.append(float(m.group(2)))
    return returns, steps


def cleanrl_run_folder(out: Path, job: str) -> str:
    """CleanRL's episodes as a folder ``zoo plot`` reads (``<out>/cleanrl-curves/<job>``: a
    ``config.json`` naming the script, env and seed, and episode rows in ``metrics.jsonl``),
    so its curve is drawn next to Zoo's by the same code."""
    returns_steps = [(int(m.group(1)), float(m.group(2))) for m in
                     _CLEANRL_LINE.finditer((out / "cleanrl" / f"{job}.log").read_text(errors="replace"))]
    _, env, seed = job.rsplit("-", 2)
    folder = out / "cleanrl-curves" / f"cleanrl-script-{env}-v4-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    config = {"algo_name": "CleanRL ppo_continuous_action.py", "env_name": f"{env}-v4", "seed": int(seed[1:]),
              "name": folder.name, "runs_dir": str(folder.parent)}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"type": "episode", "env_steps": steps, "return": ret}) + "\n" for steps, ret in returns_steps))
    return str(folder)


def _cell(values: list[float]) -> str:
    import numpy as np

    if not values:
        return "none at the budget yet"
    v = np.array(values)
    return f"{v.mean():,.0f} +- {v.std():,.0f} (n={len(v)})"


def _wall(rows: list[dict], cpu: dict[str, float]) -> str:
    """Per run: wall-clock minutes / CPU minutes, and the 5-minute load average around it."""
    if not rows:
        return "-"
    cells = []
    for r in rows:
        cpu_s = r.get("cpu_s") or cpu.get(r["job"], 0.0)
        load = (r["loadavg_start"][1] + r["loadavg_end"][1]) / 2
        cells.append(f"{r['wall_s'] / 60:.0f} / {cpu_s / 60:.0f} (load {load:.0f})")
    return ", ".join(cells)


def report(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()
    rows = [json.loads(line) for line in (out / "jobs.jsonl").read_text().splitlines()] \
        if (out / "jobs.jsonl").exists() else []
    ok = {r["job"]: r for r in rows if r["rc"] == 0}
    cpu = json.loads((out / "cpu_watch.json").read_text()) if (out / "cpu_watch.json").exists() else {}
    print("| env | Zoo (v5): last 100 episodes, mean +- std over seeds | Zoo per run: wall / CPU minutes "
          "| CleanRL published (v4) | CleanRL's script here (v4) | CleanRL per run: wall / CPU minutes |")
    print("|---|---|---|---|---|---|")
    partial = []
    for env in ENVS:
        zoo_final, zoo_rows, runs = [], [], []
        for name, r in sorted(ok.items()):
            if r["kind"] != "zoo" or r["env"] != env:
                continue
            returns, steps, _ = zoo_returns(out / "zoo" / name)
            if steps >= r["steps"] and returns:
                zoo_final.append(sum(returns[-LAST_EPISODES:]) / len(returns[-LAST_EPISODES:]))
                zoo_rows.append(r)
                runs.append(str(out / "zoo" / name))
        cl_final, cl_rows, cl_runs = [], [], []
        for name, r in sorted(ok.items()):
            if r["kind"] != "cleanrl" or r["env"] != env:
                continue
            returns, steps = cleanrl_returns(out / "cleanrl" / f"{name}.log")
            if steps >= r["steps"] - 2048 and returns:  # its last iteration ends at 488 x 2048 steps
                cl_final.append(sum(returns[-LAST_EPISODES:]) / len(returns[-LAST_EPISODES:]))
                cl_rows.append(r)
                cl_runs.append(cleanrl_run_folder(out, name))
        for d in sorted((out / "zoo").glob(f"zoo-{env}-s*")):
            if d.is_dir() and d.name not in ok:
                returns, steps, _ = zoo_returns(d)
                partial.append((d.name, steps, returns))
                if args.unfinished and returns:
                    runs.append(str(d))
        for log in sorted((out / "cleanrl").glob(f"cleanrl-{env}-s*.log")):
            if log.stem not in ok:
                returns, steps = cleanrl_returns(log)
                partial.append((log.stem, steps, returns))
                if args.unfinished and returns:
                    cl_runs.append(cleanrl_run_folder(out, log.stem))
        pub = CLEANRL_PUBLISHED[env]
        print(f"| {env} | {_cell(zoo_final)} | {_wall(zoo_rows, cpu)} | {pub[0]:,} +- {pub[1]} | {_cell(cl_final)} "
              f"| {_wall(cl_rows, cpu)} |")
        if args.png_dir and (runs or cl_runs):
            png = Path(args.png_dir) / f"mujoco_{env.lower()}.png"
            cmd = [sys.executable, "-m", "zoo", "plot", *runs, *cl_runs, "--out", str(png), "--title",
                   f"{env}: Zoo PPO (v5, benchmarks/mujoco_ppo.toml) and CleanRL's script (v4), this machine"]
            print(f"<!-- {' '.join(cmd[1:])} -->", file=sys.stderr)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    if partial:
        print("\nNot (yet) at the budget:\n")
    for name, steps, returns in partial:
        last = returns[-LAST_EPISODES:]
        mean = f"{sum(last) / len(last):,.0f}" if last else "n/a"
        print(f"- {name}: {steps:,} env steps, mean of its last {len(last)} episodes {mean}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the sweep")
    r.add_argument("--out", required=True, help="folder for every run's output (outside the repository)")
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    r.add_argument("--cleanrl-seeds", type=int, nargs="+", default=[1])
    r.add_argument("--cleanrl-python", default=sys.executable, help="python of CleanRL's own venv")
    r.add_argument("--cleanrl-script", default="", help="CleanRL's ppo_continuous_action.py (none: Zoo only)")
    r.add_argument("--steps", type=int, default=1_000_000, help="budget of every run in env steps")
    r.add_argument("--parallel", type=int, default=2, help="runs at a time")
    r.add_argument("--nice", type=int, default=5)
    r.add_argument("--timeout-s", type=int, default=4 * 3600, help="longest run")
    r.add_argument("--stop-at", default="", help="UTC HH:MM: start nothing after, stop every run by then")
    w = sub.add_parser("watch-cpu", help="CPU seconds of the runs of a driver started without them")
    w.add_argument("--out", required=True)
    w.add_argument("--driver", type=int, required=True, help="pid of the `run` process")
    q = sub.add_parser("report", help="print the table, draw the curves")
    q.add_argument("--out", required=True)
    q.add_argument("--png-dir", default="", help="write mujoco_<env>.png here (zoo plot)")
    q.add_argument("--unfinished", action="store_true", help="also draw the runs not (yet) at the budget")
    args = p.parse_args(argv)
    {"run": run_sweep, "watch-cpu": watch_cpu, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
