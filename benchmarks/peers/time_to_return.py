"""Wall time to a return: Zoo against CleanRL's PPO and SAC scripts, on this machine.

    python benchmarks/peers/time_to_return.py                        # 3 interleaved rounds
    python benchmarks/peers/time_to_return.py --repeats 1 --limit 120 --logs ttr-logs
    python benchmarks/peers/time_to_return.py --systems zoo,zoo-bf16,cleanrl   # Zoo also training in bfloat16
    python benchmarks/peers/time_to_return.py --task hopper --repeats 1 --limit 3600 --peer-threads 1 \
        --systems zoo,zoo-bf16,cleanrl                               # Hopper, 1M env steps each, run to the end
    python benchmarks/peers/time_to_return.py --task sac-hopper --repeats 1 --limit 0 --peer-threads 1 \
        --episodes sac-episodes.jsonl                                # every episode kept, for plot_curves.py
    python benchmarks/peers/time_to_return.py --table time-to-return-XXXX.jsonl   # earlier runs' table, nothing run

The target it checks: with Zoo's own defaults, the wall time to a mean-20 return of 450 is
no more than half of CleanRL's time to its best mean-20 return within 200k env steps.

Definitions. **mean-20**: the mean return of the last 20 finished episodes, in the order the
system reports them (none before the 20th episode); only episodes that ended within 200,000
env steps count. A **time** is wall-clock seconds since the system's process was launched
(``time.monotonic()`` just before ``Popen``), start-up included (imports, envs, workers); an
episode is stamped when this script reads it: CleanRL's line as it arrives, Zoo's
``metrics.jsonl`` row at the poll (every 0.2 s) that finds it (Zoo writes a batch's episode rows
when its trainer takes the batch).

Round k (``--repeats`` rounds, default 3) runs, one after the other (interleaved, so load
changes hit both alike), with seed K = k (``--first-seed S``: S + k - 1):

1. Zoo, the presets alone, in a temporary folder::

       python -m zoo train ppo --env CartPole-v1 --steps 200000 --seed K --name ttr-K --set runs_dir=<tmp>

   its ``<tmp>/ttr-K/metrics.jsonl`` episode rows (``{"type": "episode", "env_steps": N,
   "return": R, ...}``) read as they are written; stopped (Ctrl-C to its process group, then
   SIGTERM, SIGKILL: ``peers._stop``) at the first mean-20 >= 450, when it ends, or at ``--limit``
   seconds (default 300; ``--limit 0``: no limit, for the runs that go to their end, whose wall
   time a limit would have to guess: a SAC run here took 75 min on an idle core and over twice
   that when the machine slowed).
2. CleanRL's ``ppo.py`` (``setup.sh cleanrl``, its own virtual environment) unchanged, with its
   defaults for CartPole (4 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed)::

       <peers>/cleanrl/venv/bin/python -u -W ignore cleanrl_compat.py --same-step-autoreset \\
           <peers>/cleanrl/src/cleanrl/ppo.py --env-id CartPole-v1 --total-timesteps 200000 --seed K --no-cuda

   (``--same-step-autoreset``: gymnasium 0.29's vector episode ends, which the script was
   written for; see ``cleanrl_compat.py``); its ``global_step=N, episodic_return=R`` lines read
   as they come; run to its end (390 iterations x 512 = 199,680 env steps) or ``--limit``.
   ``--peer-threads N`` sets its OMP/MKL threads (default: its own, torch's = the cores).

**Systems** (``--systems``, default ``zoo,cleanrl``): ``zoo`` as above; ``zoo-bf16`` the same command
with ``--set algo.precision=bfloat16`` (the trainer's forward and backward passes under bfloat16
autocast, issue 25); ``cleanrl`` as above. **Tasks** (``--task``): ``cartpole`` (all of the
above) and ``hopper``: ``zoo train ppo --env Hopper-v5 --steps 1000000 --config
benchmarks/mujoco_ppo.toml`` (CleanRL's ``ppo_continuous_action.py`` settings, section "PPO on
MuJoCo vs CleanRL" of benchmarks/RESULTS.md) against CleanRL's ``ppo_continuous_action.py
--env-id Hopper-v4 --total-timesteps 1000000`` in its own venv (``setup.sh cleanrl-mujoco``:
gymnasium 0.29.1, which it was written for, so no ``cleanrl_compat.py``); every run goes to
its end (no stop at a target) and the row also gives the seconds to each of the task's
``bars`` (mean-20 >= 1,000, 1,500, 2,000, 2,500) and the **final return**, the mean of the last
100 episodes within the budget. ``sac-hopper`` and ``sac-halfcheetah``: ``zoo train sac --env
Hopper-v5`` / ``HalfCheetah-v5 --steps 300000`` (SAC's presets) against CleanRL's
``sac_continuous_action.py --env-id Hopper-v4`` / ``HalfCheetah-v4 --total-timesteps 300000``
(same venv), to the end, bars 1,000 / 2,000 / 3,000 (Hopper) and 2,000 / 4,000 / 6,000
(HalfCheetah). ``--steps N`` gives both systems a budget of N env steps instead of the task's.

Each run's result is appended to ``--out`` (JSON lines, default
``time-to-return-<timestamp>.jsonl``) as it ends: seconds to the first mean-20 >= 450 and the
env steps there (None: never), the best mean-20 (Zoo: until it was stopped) with the seconds
and env steps where it was first reached, the episodes and wall seconds of the run, how it
ended. At the end a markdown table gives per system the median and every value of those, and
the target line: Zoo's median seconds to 450 / CleanRL's median seconds to its best, against
0.5 (CleanRL runs stopped at ``--limit`` before their 200k env steps are left out of it: their
best is not the best within 200k; on a loaded machine give ``--limit`` room). In a median, a
run that never reached 450 counts as later than every run that did (the median is "never"
when most runs never did). ``--logs DIR`` keeps each run's output, and a Zoo run's
``metrics.jsonl`` (its losses, Q values and temperature, which the run's temporary folder takes
with it) as ``<system>-<round>.metrics.jsonl``. Ctrl-C, SIGTERM or SIGHUP
stops the rounds: the running system's process group is stopped, its temporary folder removed,
the rows of the runs that ended stay in ``--out``, and the exit status is 130, 143 or 129.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import HERE, PEERS_DIR, EpisodeLog, _stop, _venv_python, median  # noqa: E402
from ttr_tables import _cell, bars_table, median_time  # noqa: E402

from zoo.core.stopping import STOPS, signals_stop_the_run  # noqa: E402

ENV = "CartPole-v1"
STEPS = 200_000
"""Each run's env-step budget; episodes that end past it do not count."""
WINDOW = 20
TARGET = 450.0
GOAL = 0.5
"""The target: Zoo's time to mean-20 >= ``TARGET`` at most ``GOAL`` x CleanRL's time to its best."""
FINAL_WINDOW = 100
"""A run's final return: the mean of its last ``FINAL_WINDOW`` episodes within the budget."""
POLL_S = 0.2
ZOO_SETS = {"zoo": (), "zoo-bf16": ("algo.precision=bfloat16",)}
"""The ``--set`` options of each Zoo system on top of the task's command."""
LABELS = {"zoo": "Zoo PPO (its own defaults)", "zoo-bf16": "Zoo PPO, training in bfloat16",
          "cleanrl": "CleanRL ppo.py (its defaults)"}
REPO = HERE.parents[1]
SAC_LABEL = "CleanRL sac_continuous_action.py (its defaults)"


@dataclasses.dataclass(frozen=True)
class Task:
    """One comparison: the env and budget of both systems, CleanRL's script and venv, Zoo's config
    file (None: the presets), whether a run stops at its ``target`` (mean-20) and the bars timed on the way."""

    name: str
    env: str
    steps: int
    cleanrl_env: str
    cleanrl_peer: str
    cleanrl_script: str
    compat: bool
    zoo_config: str | None = None
    stop_at_target: bool = True
    bars: tuple[float, ...] = ()
    cleanrl_label: str = LABELS["cleanrl"]
    target: float = TARGET
    algo: str = "ppo"
    zoo_label: str | None = None


TASKS = {
    "cartpole": Task("cartpole", ENV, STEPS, ENV, "cleanrl", "cleanrl/ppo.py", compat=True),
    "hopper": Task("hopper", "Hopper-v5", 1_000_000, "Hopper-v4", "cleanrl-mujoco", "cleanrl/ppo_continuous_action.py",
                   compat=False, zoo_config="benchmarks/mujoco_ppo.toml", stop_at_target=False,
                   bars=(1000.0, 1500.0, 2000.0, 2500.0),
                   cleanrl_label="CleanRL ppo_continuous_action.py (its defaults)", target=2000.0),
    "sac-hopper": Task("sac-hopper", "Hopper-v5", 300_000, "Hopper-v4", "cleanrl-mujoco",
                       "cleanrl/sac_continuous_action.py", compat=False, stop_at_target=False,
                       bars=(1000.0, 2000.0, 3000.0), cleanrl_label=SAC_LABEL, target=2000.0, algo="sac",
                       zoo_label="Zoo SAC (its presets)"),
    "sac-halfcheetah": Task("sac-halfcheetah", "HalfCheetah-v5", 300_000, "HalfCheetah-v4", "cleanrl-mujoco",
                            "cleanrl/sac_continuous_action.py", compat=False, stop_at_target=False,
                            bars=(2000.0, 4000.0, 6000.0), cleanrl_label=SAC_LABEL, target=4000.0, algo="sac",
                            zoo_label="Zoo SAC (its presets)"),
}


# ----------------------------------------------------------------------------- pure logic
class MeanTracker:
    """The running mean of the last ``window`` returns, fed ``(t, env_steps, return)`` in the
    order the episodes ended. ``reached``: ``(t, env_steps, mean)`` at the first mean >=
    ``threshold`` (None until then); ``best``: ``(mean, t, env_steps)`` where the highest mean
    was first reached (None before ``window`` episodes). Episodes past ``max_steps`` env steps
    are ignored.

    Example: returns 1, 2, ..., 25 at t = 1, ..., 25 s: the first mean (of 1..20) is 10.5 at
    t = 20; threshold 12 is first reached at t = 22 (mean of 3..22 = 12.5); the best is 15.5
    (6..25) at t = 25.

    With ``bars``, the row also gives ``seconds_to_bar`` (per bar, ``[t, env_steps]`` at the first
    mean >= it, or None) and ``final_mean``, the mean of the last ``FINAL_WINDOW`` returns (None
    before that many).
    """

    def __init__(self, threshold: float, window: int = WINDOW, max_steps: int | None = None,
                 bars: tuple[float, ...] = ()) -> None:
        self.threshold, self.window, self.max_steps, self.bars = threshold, window, max_steps, bars
        self.last: collections.deque[float] = collections.deque(maxlen=window)
        self.final: collections.deque[float] = collections.deque(maxlen=FINAL_WINDOW)
        self.bar_reached: dict[float, tuple[float, int] | None] = {b: None for b in bars}
        self.episodes = 0
        self.env_steps = 0
        self.reached: tuple[float, int, float] | None = None
        self.best: tuple[float, float, int] | None = None

    def add(self, t: float, env_steps: int, ret: float) -> float | None:
        """Count one episode; the mean now (None with fewer than ``window`` episodes, or when the
        episode ended past ``max_steps``)."""
        if self.max_steps is not None and env_steps > self.max_steps:
            return None
        self.episodes += 1
        self.env_steps = max(self.env_steps, env_steps)
        self.last.append(ret)
        self.final.append(ret)
        if len(self.last) < self.window:
            return None
        mean = sum(self.last) / self.window
        for bar, got in self.bar_reached.items():
            if got is None and mean >= bar:
                self.bar_reached[bar] = (t, env_steps)
        if self.reached is None and mean >= self.threshold:
            self.reached = (t, env_steps, mean)
        if self.best is None or mean > self.best[0]:
            self.best = (mean, t, env_steps)
        return mean

    def result(self) -> dict[str, Any]:
        """The JSON fields of a run's row."""
        return {"seconds_to_target": self.reached[0] if self.reached else None,
                "steps_at_target": self.reached[1] if self.reached else None,
                "best_mean20": self.best[0] if self.best else None,
                "seconds_to_best": self.best[1] if self.best else None,
                "steps_at_best": self.best[2] if self.best else None,
                "episodes": self.episodes, "env_steps": self.env_steps,
                **({"seconds_to_bar": {f"{b:g}": (list(got) if got else None) for b, got in self.bar_reached.items()},
                    "final_mean": (sum(self.final) / len(self.final) if len(self.final) == FINAL_WINDOW else None)}
                   if self.bars else {})}


_CLEANRL_EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?([-0-9.eE+]+)")


def parse_cleanrl_episode(line: str) -> tuple[int, float] | None:
    """CleanRL's ``global_step=1234, episodic_return=21.0`` (gymnasium 0.29 printed
    ``[21.]``) -> ``(1234, 21.0)``; any other line -> None."""
    m = _CLEANRL_EPISODE.search(line)
    if not m:
        return None
    try:
        return int(m.group(1)), float(m.group(2))
    except ValueError:
        return None


def parse_zoo_row(line: str) -> tuple[int, float] | None:
    """A ``metrics.jsonl`` episode row ``{"type": "episode", "env_steps": N, "return": R, ...}``
    -> ``(N, R)``; any other row (``update``, ``end``, ...) or a broken line -> None."""
    try:
        row = json.loads(line)
        if row.get("type") != "episode":
            return None
        return int(row["env_steps"]), float(row["return"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class Tail:
    """The whole lines appended to a file since the last call (a line still being written, with
    no newline yet, waits for the next call; a file not there yet has none)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = Path(path), 0, b""

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *whole, self.partial = (self.partial + data).split(b"\n")
        return [x.decode(errors="replace") for x in whole]


def target_line(rows: list[dict], system: str = "zoo") -> str:
    """Zoo's median seconds to mean-20 >= 450 over CleanRL's median seconds to its best mean-20,
    against ``GOAL``: "met" when the ratio is at most 0.5. Only CleanRL runs that completed their
    env steps (``ended == "exit 0"``) count: one stopped at the time limit has no best within 200k.
    ``system``: which Zoo system's runs (``zoo`` or ``zoo-bf16``, named "Zoo bfloat16" in the line)."""
    zoo = [r for r in rows if r["system"] == system and "error" not in r]
    cl_all = [r for r in rows if r["system"] == "cleanrl" and "error" not in r]
    cl = [r for r in cl_all if r.get("ended") == "exit 0" and r.get("seconds_to_best") is not None]
    left = (f" ({len(cl_all) - len(cl)} CleanRL run{'s' if len(cl_all) - len(cl) != 1 else ''} that did not "
            f"complete {STEPS // 1000}k env steps not counted)" if len(cl) < len(cl_all) else "")
    who = "Zoo" if system == "zoo" else "Zoo bfloat16"
    head = f"{who}'s median s to mean-20 >= {TARGET:g} / CleanRL's median s to its best mean-20 within {STEPS // 1000}k"
    if not zoo or not cl:
        return f"{head}: - (no {who if not zoo else 'complete CleanRL'} result), target <= {GOAL:g}{left}"
    zoo_t = median_time([r["seconds_to_target"] for r in zoo])
    cl_t = median([r["seconds_to_best"] for r in cl])
    if zoo_t is None:
        return (f"{head} = never / {cl_t:.1f}: target <= {GOAL:g} not met ({who}'s median run never reached "
                f"{TARGET:g}){left}")
    ratio = zoo_t / cl_t
    return (f"{head} = {zoo_t:.1f} / {cl_t:.1f} = {ratio:.2f}: target <= {GOAL:g} "
            f"{'met' if ratio <= GOAL else 'not met'}{left}")


def format_table(rows: list[dict]) -> str:
    """The markdown table of result rows (:meth:`MeanTracker.result` fields with ``system``,
    ``label``, ``round``, ``ended``; rows with ``error`` and runs that did not end as planned are
    listed under it), then :func:`target_line` for each Zoo system of a CartPole comparison, or
    :func:`bars_table` for a task with bars (its runs are not stopped at the target)."""
    task = TASKS[rows[0].get("task", "cartpole")] if rows else TASKS["cartpole"]
    out = [f"| system | s to mean-20 >= {task.target:g}, median (all runs) | env steps there | "
           f"best mean-20 (Zoo: until stopped), median (all runs) | s to that best | env steps there |",
           "|---|---|---|---|---|---|"]
    ok = [r for r in rows if "error" not in r]
    for system in dict.fromkeys(r["system"] for r in ok):
        got = [r for r in ok if r["system"] == system]
        t = [r["seconds_to_target"] for r in got]
        steps_t = [r["steps_at_target"] for r in got]
        with_best = [r for r in got if r["best_mean20"] is not None]
        best = [r["best_mean20"] for r in got]
        best_mid = median([r["best_mean20"] for r in with_best]) if with_best else None
        tb_mid = median([r["seconds_to_best"] for r in with_best]) if with_best else None
        sb_mid = median([r["steps_at_best"] for r in with_best]) if with_best else None
        out.append(f"| {got[0]['label']} | {_cell(t, 1, mid=median_time(t))} | "
                   f"{_cell(steps_t, 0, True, mid=median_time(steps_t))} | "
                   f"{_cell(best, 1, never='-', mid=best_mid)} | "
                   f"{_cell([r['seconds_to_best'] for r in got], 1, never='-', mid=tb_mid)} | "
                   f"{_cell([r['steps_at_best'] for r in got], 0, True, never='-', mid=sb_mid)} |")
    notes = []
    for r in rows:
        who = f"{r.get('label', r['system'])}, round {r.get('round', '?')}"
        if "error" in r:
            notes.append(f"- {who}: {r['error']}")
        elif r.get("ended") == "limit":
            notes.append(f"- {who}: stopped at the time limit after {r['env_steps']:,} env steps")
        elif r.get("ended") not in ("target", "exit 0", None):
            notes.append(f"- {who}: ended ({r['ended']}) after {r['env_steps']:,} env steps")
    if task.bars:
        return "\n".join([*out, *notes, "", bars_table(rows)])
    zoo_systems = [x for x in dict.fromkeys(r["system"] for r in rows) if x in ZOO_SETS] or ["zoo"]
    return "\n".join([*out, *notes, "", *(target_line(rows, x) for x in zoo_systems)])


# ----------------------------------------------------------------------------- running the two
def zoo_command(seed: int, runs_dir: str, task: Task = TASKS["cartpole"], system: str = "zoo") -> list[str]:
    """``python -m zoo train ALGO`` of ``task`` for Zoo system ``system`` (its ``ZOO_SETS`` added)."""
    config = ["--config", str(REPO / task.zoo_config)] if task.zoo_config else []
    sets = [x for kv in ZOO_SETS[system] for x in ("--set", kv)]
    return [sys.executable, "-m", "zoo", "train", task.algo, "--env", task.env, "--steps", str(task.steps),
            "--seed", str(seed), "--name", f"ttr-{seed}", *config, "--set", f"runs_dir={runs_dir}", *sets]


def cleanrl_command(seed: int, task: Task = TASKS["cartpole"]) -> list[str]:
    """CleanRL's script of ``task`` in its venv, unchanged, at its defaults but for the env and budget."""
    compat = [str(HERE / "cleanrl_compat.py"), "--same-step-autoreset"] if task.compat else []
    return [_venv_python(task.cleanrl_peer), "-u", "-W", "ignore", *compat,
            str(PEERS_DIR / task.cleanrl_peer / "src" / task.cleanrl_script), "--env-id", task.cleanrl_env,
            "--total-timesteps", str(task.steps), "--seed", str(seed), "--no-cuda"]


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's waited-for descendants so far (a Zoo run's
    workers are waited for by its controller, so its whole tree counts once it is waited for)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_zoo(seed: int, limit_s: float, log: Path | None = None, task: Task = TASKS["cartpole"],
            system: str = "zoo", episodes: EpisodeLog | None = None) -> dict[str, Any]:
    """One Zoo run, stopped at the first mean-20 >= the task's target where it says so (else at its
    end), or at ``limit_s``; each episode also to ``episodes`` (``--episodes``)."""
    tracker = MeanTracker(task.target, max_steps=task.steps, bars=task.bars)
    with tempfile.TemporaryDirectory(prefix="ttr-zoo-") as workdir:
        out = open(log, "w") if log else subprocess.DEVNULL
        tail = Tail(Path(workdir, f"ttr-{seed}", "metrics.jsonl"))
        cpu0 = _children_cpu_s()
        began = time.monotonic()
        proc = subprocess.Popen(zoo_command(seed, workdir, task, system), cwd=workdir, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                exited = proc.poll() is not None  # before the read: rows written before the exit are read
                now = time.monotonic() - began
                for line in tail.lines():
                    got = parse_zoo_row(line)
                    if got is not None:
                        tracker.add(now, *got)
                        if episodes is not None:
                            episodes.write(system, seed, now, *got)
                if tracker.reached is not None and task.stop_at_target:
                    ended = "target"
                    break
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
                if tail.path.exists():  # its losses, Q values and temperature outlive the temporary folder
                    shutil.copyfile(tail.path, log.with_suffix(".metrics.jsonl"))
    return {**tracker.result(), "ended": ended, "wall_s": wall, "cpu_s": _children_cpu_s() - cpu0}


def cleanrl_env(env: dict[str, str], task: Task, peer_threads: int | None = None) -> dict[str, str]:
    """``env`` for CleanRL's script: its exported sources first on ``PYTHONPATH`` (the scripts import
    ``cleanrl_utils``, which CleanRL's own install puts on the path) and, with ``peer_threads``,
    that many OpenMP / MKL threads."""
    src = str(PEERS_DIR / task.cleanrl_peer / "src")
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)}
    if peer_threads:
        env.update(OMP_NUM_THREADS=str(peer_threads), MKL_NUM_THREADS=str(peer_threads))
    return env


def run_cleanrl(seed: int, limit_s: float, log: Path | None = None, peer_threads: int | None = None,
                task: Task = TASKS["cartpole"], episodes: EpisodeLog | None = None) -> dict[str, Any]:
    """One CleanRL run, to its end (the task's env steps) or ``limit_s``; each episode also to
    ``episodes`` (``--episodes``)."""
    tracker = MeanTracker(task.target, max_steps=task.steps, bars=task.bars)
    env = cleanrl_env(dict(os.environ), task, peer_threads)
    with tempfile.TemporaryDirectory(prefix="ttr-cleanrl-") as workdir:  # its runs/ (TensorBoard) goes here
        out = open(log, "w", buffering=1) if log else None  # line-buffered: the log can be watched as it runs
        cpu0 = _children_cpu_s()
        began = time.monotonic()
        proc = subprocess.Popen(cleanrl_command(seed, task), cwd=workdir, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True, bufsize=1, env=env)

        def read() -> None:
            for line in proc.stdout:
                now = time.monotonic() - began
                if out:
                    out.write(line)
                got = parse_cleanrl_episode(line)
                if got is not None:
                    tracker.add(now, *got)
                    if episodes is not None:
                        episodes.write("cleanrl", seed, now, *got)

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
    return {**tracker.result(), "ended": ended, "wall_s": wall, "cpu_s": _children_cpu_s() - cpu0}


def _summary(res: dict, target: float = TARGET) -> str:
    if "error" in res:
        return res["error"]
    t = res["seconds_to_target"]
    best = res["best_mean20"]
    return (f"mean-20 >= {target:g} " + (f"at {t:.1f} s ({res['steps_at_target']:,} env steps)" if t is not None
                                         else "never") +
            (f"; best {best:.1f} first at {res['seconds_to_best']:.1f} s ({res['steps_at_best']:,} env steps)"
             if best is not None else "; no mean-20 (fewer than 20 episodes)") +
            (f"; final (last {FINAL_WINDOW}) {res['final_mean']:.1f}" if res.get("final_mean") is not None else "") +
            f"; {res['episodes']} episodes, {res['env_steps']:,} env steps, {res['wall_s']:.0f} s, {res['ended']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds (zoo, cleanrl), seeds S..S+N-1")
    parser.add_argument("--first-seed", type=int, default=1, metavar="S", help="the first round's seed (default 1)")
    parser.add_argument("--limit", type=float, default=300.0,
                        help="stop a run after this many seconds (0: no limit, every run to its end)")
    parser.add_argument("--peer-threads", type=int, default=None, metavar="N",
                        help="OMP_NUM_THREADS / MKL_NUM_THREADS for CleanRL (default: its own, torch's = the cores)")
    parser.add_argument("--out", default=f"time-to-return-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    parser.add_argument("--logs", default=None,
                        help="folder for each run's output (default: none kept) and each Zoo run's "
                        "metrics.jsonl (<system>-<round>.metrics.jsonl)")
    parser.add_argument("--episodes", default=None, metavar="JSONL",
                        help="append every episode (system, seed, seconds, env steps, return) to this file, "
                             "for benchmarks/peers/plot_curves.py")
    parser.add_argument("--table", default=None, metavar="JSONL", help="only print the table of this file")
    parser.add_argument("--task", choices=sorted(TASKS), default="cartpole",
                        help="cartpole (stop at mean-20 >= 450), hopper (PPO, 1M env steps to the end, bars), "
                             "sac-hopper or sac-halfcheetah (SAC, 300k env steps to the end, bars)")
    parser.add_argument("--steps", type=int, default=None,
                        help="both systems' env-step budget instead of the task's (a shorter sitting)")
    parser.add_argument("--systems", default="zoo,cleanrl",
                        help=f"comma-separated, run in this order each round: {', '.join([*ZOO_SETS, 'cleanrl'])}")
    args = parser.parse_args()
    if args.table:
        print(format_table([json.loads(x) for x in open(args.table) if x.strip()]))
        return
    if args.repeats < 1 or args.limit < 0 or args.first_seed < 0:
        parser.error("--repeats >= 1, --limit >= 0 (0: none) and --first-seed >= 0 are needed")
    args.limit = args.limit or math.inf
    task = TASKS[args.task] if args.steps is None else dataclasses.replace(TASKS[args.task], steps=args.steps)
    systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    unknown = [x for x in systems if x not in (*ZOO_SETS, "cleanrl")]
    if unknown or not systems:
        parser.error(f"--systems: unknown {unknown or 'empty list'}; choose from {', '.join([*ZOO_SETS, 'cleanrl'])}")
    if "cleanrl" in systems and not (PEERS_DIR / task.cleanrl_peer / "installed.txt").is_file():
        print(f"skipping cleanrl: not set up (bash benchmarks/peers/setup.sh {task.cleanrl_peer})", flush=True)
        systems.remove("cleanrl")
    logs = Path(args.logs) if args.logs else None
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    limit_text = f"limit {args.limit:g} s per run" if args.limit < math.inf else "no time limit (every run to its end)"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {os.getloadavg()[0]:.1f}; "
          f"{args.repeats} rounds x {len(systems)} systems on {task.env}, {task.steps:,} env steps, "
          f"{limit_text}; CleanRL's OMP threads: {args.peer_threads or 'its default'}; "
          f"results -> {args.out}", flush=True)
    rows = []
    try:  # SIGTERM and SIGHUP stop the rounds as Ctrl-C does: each run's process group and folder go
        with open(args.out, "a") as out, signals_stop_the_run():
            episodes = EpisodeLog(Path(args.episodes)) if args.episodes else None
            try:
                run_rounds(args, task, systems, logs, out, rows, episodes)
            finally:
                if episodes is not None:
                    episodes.close()
    except KeyboardInterrupt as exc:
        name, code = STOPS.get(getattr(exc, "signum", signal.SIGINT), ("Ctrl-C", 130))
        print(f"stopped by {name} after {len(rows)} run(s); their rows are in {args.out}", flush=True)
        sys.exit(code)
    print()
    print(format_table(rows))


def run_rounds(args: argparse.Namespace, task: Task, systems: list[str], logs: Path | None, out: Any,
               rows: list[dict], episodes: EpisodeLog | None = None) -> None:
    """The rounds of :func:`main`: each system once per round, a row per run appended to ``rows``
    and written to ``out``; every episode to ``episodes`` where given."""
    for r in range(1, args.repeats + 1):
        seed = args.first_seed + r - 1
        for system in systems:
            load = os.getloadavg()[0]
            log = logs / f"{system}-{r}.log" if logs else None
            try:
                res = (run_zoo(seed, args.limit, log, task, system, episodes) if system in ZOO_SETS
                       else run_cleanrl(seed, args.limit, log, args.peer_threads, task, episodes))
            except OSError as exc:
                res = {"error": f"could not run: {exc}"}
            label = (task.cleanrl_label if system == "cleanrl" else
                     task.zoo_label if system == "zoo" and task.zoo_label else LABELS[system])
            row = {"task": task.name, "steps": task.steps, "round": r, "seed": seed, "system": system, "label": label,
                   "load_average": load,
                   "time_utc": time.strftime("%H:%M:%S", time.gmtime()),
                   **({"peer_threads": args.peer_threads} if system == "cleanrl" else {}), **res}
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"round {r} {system:8} load {load:4.1f}: {_summary(res, task.target)}", flush=True)


if __name__ == "__main__":
    main()
