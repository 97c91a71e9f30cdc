"""A short GPU check (issue 21): Zoo's CUDA paths, nine commands, about 12 minutes at most on one GPU.

    python benchmarks/gpu_check.py --out gpu_check.txt   # run every step, log and table to the file
    python benchmarks/gpu_check.py --dry-run             # the commands it would run, nothing started

Each step is one command with its own timeout (:data:`TOTAL_LIMIT_S` seconds for all nine
together), printed before it runs and followed by its exit status and wall time; a failed
step never stops the ones after it, and a table sums them up at the end. Exit 1 if any step
failed (a timeout is exit 124), else 0. The steps:

1. ``facts``: ``nvidia-smi``; torch's CUDA build, device count, each device's name, compute
   capability, bfloat16 support and what ``policy.precision=auto`` picks there;
2. ``cuda-tests``: the tests marked ``cuda`` (with ``ZOO_REQUIRE_CUDA=1``: without a usable
   CUDA device they fail instead of skipping);
3. ``ppo-cuda``: PPO on CartPole-v1, trainer and policy worker on CUDA, a checkpoint every 10
   updates, then 4. ``ppo-cuda-resume``: ``zoo resume`` of that run with twice the budget;
5. ``reward-norm``: PPO on Pendulum-v1 on CUDA, reward and observation normalisation on (as
   PPO's Box preset sets them);
6. ``pong-bf16``: PPO on Pong, bfloat16 inference on the GPU;
7. ``two-trainers``: two data-parallel trainers on CUDA (on one GPU both share it);
8. ``gpu-pong``: ``benchmarks/gpu_pong.py``, short;
9. ``contexts``: a run whose two policy workers and two trainers are on ``cuda`` (spread over
   the GPUs when there are several) is watched with ``nvidia-smi --query-compute-apps``: every
   Zoo process holding a context must be a worker assigned to that GPU, with one context
   there (no actor, no controller, no second GPU), and every assigned worker must be seen.

Runs go to a fresh temporary folder (``--work``), removed at the end unless ``--keep``.
``facts`` and ``contexts`` are this script's own sub-commands, so that every step is a
command that can be run alone.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join("benchmarks", "gpu_check.py")
TOTAL_LIMIT_S = 720
"""The sum of every step's timeout may not exceed this (12 minutes)."""
STOP_GRACE_S = 10.0
"""After a step's timeout: seconds between Ctrl-C (SIGINT) to its process group and SIGKILL."""
CONTEXTS_RUN = "gpu-check-contexts"


@dataclass(frozen=True)
class Step:
    """One command of the check."""

    name: str
    what: str
    argv: tuple[str, ...]
    timeout_s: int
    env: tuple[tuple[str, str], ...] = ()

    def line(self) -> str:
        """The command as a shell line (its extra environment variables first)."""
        return " ".join([f"{k}={shlex.quote(v)}" for k, v in self.env] + [shlex.join(self.argv)])


@dataclass
class Result:
    name: str
    rc: int
    seconds: float
    timeout_s: int
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0


def plan(work: str, python: str = "python") -> list[Step]:
    """The check's commands, run from the repository root, every run under ``work``."""
    zoo = (python, "-m", "zoo")
    runs = ("--set", f"runs_dir={work}")
    cuda = ("--set", "algo.device=cuda", "--set", "policy.device=cuda")
    return [
        Step("facts", "nvidia-smi; torch's CUDA devices, capability, bfloat16, auto precision",
             (python, SCRIPT, "facts"), 20),
        Step("cuda-tests", "the tests marked cuda (fail, not skip, without a usable CUDA device)",
             (python, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "tests"), 90,
             env=(("ZOO_REQUIRE_CUDA", "1"),)),
        Step("ppo-cuda", "PPO on CartPole-v1 on CUDA, a checkpoint every 10 updates",
             (*zoo, "train", "ppo", "--env", "CartPole-v1", "--steps", "10240", "--name", "ppo-cuda", *runs, *cuda,
              "--set", "trainer.checkpoint_interval=10"), 75),
        Step("ppo-cuda-resume", "zoo resume of ppo-cuda on CUDA, budget doubled",
             (*zoo, "resume", "ppo-cuda", "--runs-dir", work, "--steps", "20480"), 75),
        Step("reward-norm", "PPO on Pendulum-v1 on CUDA, reward and observation normalisation",
             (*zoo, "train", "ppo", "--env", "Pendulum-v1", "--steps", "8192", "--name", "reward-norm", *runs, *cuda,
              "--set", "algo.norm_reward=true", "--set", "algo.norm_obs=true"), 75),
        Step("pong-bf16", "PPO on Pong, bfloat16 inference on the GPU",
             (*zoo, "train", "ppo", "--env", "atari:Pong", "--frames", "40960", "--name", "pong-bf16", *runs, *cuda,
              "--set", "policy.precision=bfloat16"), 90),
        Step("two-trainers", "two data-parallel trainers on CUDA",
             (*zoo, "train", "ppo", "--env", "CartPole-v1", "--steps", "10240", "--name", "two-trainers", *runs, *cuda,
              "--set", "trainer.count=2"), 75),
        Step("gpu-pong", "benchmarks/gpu_pong.py, short",
             (python, os.path.join("benchmarks", "gpu_pong.py"), "--seconds", "15", "--warmup", "10", "--limit", "60",
              "--json", os.path.join(work, "gpu_pong.json")), 140),
        Step("contexts", "no stray CUDA context: each Zoo process only on the GPU it is assigned",
             (python, SCRIPT, "contexts", "--work", work, "--seconds", "35"), 70),
    ]


def contexts_command(work: str, python: str = "python") -> list[str]:
    """The run the ``contexts`` step watches: two policy workers and two trainers on ``cuda``
    (worker i on GPU i mod GPUs), two actors on the CPU, a budget it never reaches (stopped)."""
    return [python, "-m", "zoo", "train", "ppo", "--env", "CartPole-v1", "--steps", "100000000",
            "--name", CONTEXTS_RUN, "--set", f"runs_dir={work}", "--set", "actors.count=2",
            "--set", "policy.count=2", "--set", "policy.device=cuda",
            "--set", "trainer.count=2", "--set", "algo.device=cuda"]


# ----------------------------------------------------------------------------- running steps
class Log:
    """Lines printed and, with a file, written to it as they come (flushed: a killed check keeps its log)."""

    def __init__(self, path: str | None = None) -> None:
        self.file = open(path, "w") if path else None
        self.lock = threading.Lock()

    def __call__(self, text: str = "") -> None:
        with self.lock:
            print(text, flush=True)
            if self.file:
                self.file.write(text + "\n")
                self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Ctrl-C to ``proc``'s process group (a Zoo run stops its workers on it), SIGKILL after ``grace_s``."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_step(step: Step, log: Log) -> Result:
    """Run ``step`` from the repository root in its own process group, its output copied to
    ``log`` line by line; after ``step.timeout_s`` the group is stopped and the exit is 124."""
    env = {**os.environ, **dict(step.env), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    try:
        # SIGINT at its default in the step, as from a terminal: started from a harness that ignores
        # it (nohup, a background job of a script), the step inherited SIG_IGN and outlived the
        # Ctrl-C that stop_group sends at its timeout, until SIGKILL STOP_GRACE_S later
        proc = subprocess.Popen(step.argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
                                preexec_fn=_default_sigint)
    except OSError as exc:
        return Result(step.name, 127, time.monotonic() - started, step.timeout_s, f"not started: {exc}")

    def copy() -> None:
        for line in proc.stdout:
            log("    " + line.rstrip("\n"))

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    note = ""
    try:
        rc = proc.wait(timeout=step.timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        rc, note = 124, f"timed out after {step.timeout_s} s"
    reader.join(timeout=5.0)
    return Result(step.name, rc, time.monotonic() - started, step.timeout_s, note)


def run_all(steps: Sequence[Step], log: Log, runner: Callable[[Step, Log], Result] = run_step) -> list[Result]:
    """Every step in order, whatever the ones before did; a runner that raises is a failed step."""
    results = []
    for i, step in enumerate(steps, 1):
        log(f"[{i}/{len(steps)}] {step.name}: {step.what} (timeout {step.timeout_s} s)")
        log(f"$ {step.line()}")
        started = time.monotonic()
        try:
            result = runner(step, log)
        except Exception as exc:  # noqa: BLE001 - one broken step must not stop the others
            result = Result(step.name, 1, time.monotonic() - started, step.timeout_s,
                            f"the check itself failed: {type(exc).__name__}: {exc}")
        log(f"-> {step.name}: exit {result.rc} in {result.seconds:.1f} s" + (f" ({result.note})" if result.note else ""))
        log()
        results.append(result)
    return results


def summary(results: Iterable[Result]) -> str:
    """The table printed at the end: one row per step, then how many failed."""
    results = list(results)
    rows = [("step", "status", "exit", "seconds", "timeout", "note")]
    rows += [(r.name, "ok" if r.ok else "FAILED", str(r.rc), f"{r.seconds:.1f}", str(r.timeout_s), r.note)
             for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) if i in (0, 1) else cell.rjust(w) for i, (cell, w) in
                       enumerate(zip(row[:5], widths))) + ("  " + row[5] if row[5] else "") for row in rows]
    failed = [r.name for r in results if not r.ok]
    lines.append(f"{len(results) - len(failed)} of {len(results)} steps passed"
                 + (f"; failed: {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)


def exit_code(results: Iterable[Result]) -> int:
    return 0 if all(r.ok for r in results) else 1


# ----------------------------------------------------------------------------- facts
def facts() -> int:
    """Print ``nvidia-smi`` and torch's view of the CUDA devices; exit 1 when either is missing."""
    problems = []
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=15)
        print(out.stdout + out.stderr, end="")
        if out.returncode:
            problems.append(f"nvidia-smi exited {out.returncode}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        problems.append(f"nvidia-smi: {exc}")
    import torch

    from zoo.core.devices import bf16_native, choose_precision

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, cudnn "
          f"{torch.backends.cudnn.version() if count else None}, devices visible: {count} "
          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    for i in range(count):
        cap = tuple(torch.cuda.get_device_capability(i))
        supported = bool(torch.cuda.is_bf16_supported())
        props = torch.cuda.get_device_properties(i)
        print(f"cuda:{i}: {torch.cuda.get_device_name(i)}, compute capability {cap[0]}.{cap[1]}, "
              f"{props.total_memory / 2**30:.1f} GiB, torch.cuda.is_bf16_supported()={supported}, "
              f"native bfloat16={bf16_native(cap, supported)}, policy.precision=auto -> "
              f"{choose_precision('auto', f'cuda:{i}')}")
    if not count:
        problems.append("torch sees no CUDA device" if torch.version.cuda else
                        f"torch {torch.__version__} is a CPU-only build")
    for p in problems:
        print(f"facts: {p}", file=sys.stderr)
    return 1 if problems else 0


# ----------------------------------------------------------------------------- contexts
def query(args: list[str]) -> list[list[str]]:
    """Rows of ``nvidia-smi <args> --format=csv,noheader,nounits``, cells stripped."""
    out = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         timeout=15, check=True).stdout
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def visible_gpus(rows: list[list[str]], cuda_visible: str | None) -> list[tuple[int, str]]:
    """``[(nvidia-smi index, uuid)]`` of each CUDA ordinal in order, with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    (nvidia-smi's order): all GPUs, or those ``CUDA_VISIBLE_DEVICES`` names by index or UUID (prefix).

    Raises:
        ValueError: an entry of ``CUDA_VISIBLE_DEVICES`` matches no GPU.
    """
    gpus = [(int(i), uuid) for i, uuid in rows]
    if cuda_visible is None:
        return gpus
    chosen = []
    for entry in (e.strip() for e in cuda_visible.split(",") if e.strip()):
        match = [g for g in gpus if (entry.isdigit() and g[0] == int(entry)) or
                 (not entry.isdigit() and g[1].startswith(entry))]
        if not match:
            raise ValueError(f"CUDA_VISIBLE_DEVICES entry {entry!r} is no GPU nvidia-smi lists")
        chosen.append(match[0])
    return chosen


def judge(samples: list[list[tuple[int, str, int]]], workers: dict[tuple[str, int], int], controller: int,
          expected: dict[tuple[str, int], str]) -> tuple[bool, list[str]]:
    """Whether every Zoo process held CUDA contexts only where it should, and the lines saying so.

    ``samples``: each poll's ``nvidia-smi --query-compute-apps`` rows ``(pid, gpu uuid, MiB)``;
    ``workers``: ``{(role, index): pid}`` of the run (process titles); ``controller``: the
    ``zoo train`` process; ``expected``: ``{(role, index): gpu uuid}`` of the workers assigned a GPU.
    Fails on a Zoo process with a context on a GPU it is not assigned (an actor, the controller,
    a worker on a second GPU), on one with two contexts on one GPU in one sample, and on an
    assigned worker never seen on its GPU (nvidia-smi's pids may be another PID namespace's:
    then no Zoo process is seen at all, and the check cannot pass).
    """
    names = {pid: f"{role} {index}" for (role, index), pid in workers.items()}
    names.setdefault(controller, "controller")
    assigned = {workers[k]: uuid for k, uuid in expected.items() if k in workers}
    problems, seen, memory = [], set(), {}
    for rows in samples:
        counts: dict[tuple[int, str], int] = {}
        for pid, uuid, mib in rows:
            counts[(pid, uuid)] = counts.get((pid, uuid), 0) + 1
            if pid in names:
                seen.add((pid, uuid))
                memory[(pid, uuid)] = max(memory.get((pid, uuid), 0), mib)
        for (pid, uuid), n in counts.items():
            if pid in names and n > 1:
                problems.append(f"{names[pid]} (pid {pid}) holds {n} contexts on {uuid}")
    for pid, uuid in sorted(seen):
        if assigned.get(pid) != uuid:
            where = f"assigned {assigned[pid]}" if pid in assigned else "assigned no GPU"
            problems.append(f"stray context: {names[pid]} (pid {pid}, {where}) on {uuid}, {memory[(pid, uuid)]} MiB")
    for key, uuid in sorted(expected.items()):
        pid = workers.get(key)
        if pid is None:
            problems.append(f"{key[0]} {key[1]} was never found by its process title")
        elif (pid, uuid) not in seen:
            problems.append(f"{key[0]} {key[1]} (pid {pid}) was never seen on its GPU {uuid}")
    if samples and not seen and any(samples):
        problems.append("nvidia-smi listed compute apps but none is a Zoo process: its pids may belong to "
                        "another PID namespace (a container); the check could not be made")
    lines = [f"{names[pid]} (pid {pid}) on {uuid}: {memory[(pid, uuid)]} MiB" for pid, uuid in sorted(seen)]
    return not problems, lines + problems


def expected_gpus(gpus: list[tuple[int, str]], policy_count: int = 2, trainer_count: int = 2) -> dict[tuple[str, int], str]:
    """``{(role, index): uuid}`` for :func:`contexts_command`'s run: ``cuda`` puts worker i of a
    role on CUDA ordinal i mod GPUs (:func:`zoo.core.graph.worker_device`)."""
    out = {("policy", m): gpus[m % len(gpus)][1] for m in range(policy_count)}
    out.update({("trainer", k): gpus[k % len(gpus)][1] for k in range(trainer_count)})
    return out


def contexts(work: str, seconds: float) -> int:
    """Start :func:`contexts_command`'s run, sample nvidia-smi once a second while it lives
    (until every assigned worker was seen on its GPU three samples running, or ``seconds``),
    stop it with Ctrl-C, and judge the samples (:func:`judge`)."""
    from zoo.bench.measure import find_workers

    try:
        gpus = visible_gpus(query(["--query-gpu=index,uuid"]), os.environ.get("CUDA_VISIBLE_DEVICES"))
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        print(f"contexts: cannot list the GPUs: {exc}", file=sys.stderr)
        return 1
    if not gpus:
        print("contexts: nvidia-smi lists no GPU", file=sys.stderr)
        return 1
    expected = expected_gpus(gpus)
    print("GPUs (CUDA ordinal: nvidia-smi index, uuid): "
          + "; ".join(f"cuda:{i}: {idx}, {uuid}" for i, (idx, uuid) in enumerate(gpus)))
    print("assigned: " + "; ".join(f"{r} {i} -> {u}" for (r, i), u in sorted(expected.items())))
    os.makedirs(work, exist_ok=True)
    log_path = os.path.join(work, "contexts.log")
    argv = contexts_command(work, sys.executable)
    print(f"$ {shlex.join(argv)} > {log_path}", flush=True)
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1"}
    samples: list[list[tuple[int, str, int]]] = []
    workers: dict[tuple[str, int], int] = {}
    with open(log_path, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline, complete, failed_query = time.monotonic() + seconds, 0, False
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                workers.update(find_workers(CONTEXTS_RUN))
                try:
                    rows = query(["--query-compute-apps=pid,gpu_uuid,used_memory"])
                except (OSError, subprocess.SubprocessError) as exc:
                    print(f"contexts: nvidia-smi --query-compute-apps failed: {exc}", file=sys.stderr)
                    failed_query = True
                    break
                samples.append([(int(p), u, int(m) if m.isdigit() else 0) for p, u, m in rows])
                ok, _ = judge(samples[-1:], workers, proc.pid, expected)
                complete = complete + 1 if ok else 0
                if complete >= 3:
                    break
                time.sleep(1.0)  # the sampling interval of nvidia-smi, not a wait for an event
        finally:
            alive = proc.poll() is None
            stop_group(proc, grace_s=15.0)
    ok, lines = judge(samples, workers, proc.pid, expected)
    print(f"{len(samples)} nvidia-smi samples; run {'stopped by the check' if alive else f'ended by itself (exit {proc.returncode})'}")
    for line in lines:
        print(line)
    if failed_query:
        ok = False
    if not alive:
        with open(log_path) as f:
            print("the run's last lines:\n" + "".join(f.readlines()[-15:]))
        ok = False
    print("contexts: " + ("every Zoo process only on its assigned GPU" if ok else "FAILED"))
    return 0 if ok else 1


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Sub-commands facts and contexts are single steps of the check.")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit 0; nothing runs")
    parser.add_argument("--out", metavar="FILE", help="also write everything printed, and the table, to FILE")
    parser.add_argument("--work", metavar="DIR", help="folder for the runs (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' folder at the end")
    sub = parser.add_subparsers(dest="probe", metavar="{facts,contexts}")
    sub.add_parser("facts", help="step 1 alone: nvidia-smi and torch's CUDA devices")
    ctx = sub.add_parser("contexts", help="step 9 alone: stray CUDA contexts of a run")
    ctx.add_argument("--work", required=True, metavar="DIR", help="folder for the watched run")
    ctx.add_argument("--seconds", type=float, default=35.0, help="longest the run is watched (default 35)")
    return parser


def main(argv: Sequence[str] | None = None, runner: Callable[[Step, Log], Result] = run_step) -> int:
    args = build_parser().parse_args(argv)
    if args.probe == "facts":
        return facts()
    if args.probe == "contexts":
        return contexts(args.work, args.seconds)
    work = args.work or (os.path.join(tempfile.gettempdir(), "zoo-gpu-check-XXXXXX") if args.dry_run
                         else tempfile.mkdtemp(prefix="zoo-gpu-check-"))
    steps = plan(os.path.abspath(work), sys.executable if not args.dry_run else "python")
    if args.dry_run:
        for step in steps:
            print(step.line())
        print(f"# {len(steps)} commands, timeouts summing to {sum(s.timeout_s for s in steps)} s, from {ROOT}")
        return 0
    os.makedirs(work, exist_ok=True)
    log = Log(args.out)
    try:
        log(f"gpu_check: {len(steps)} steps, at most {sum(s.timeout_s for s in steps)} s, runs under {work}")
        log()
        results = run_all(steps, log, runner)
        log(summary(results))
    finally:
        log.close()
        if not args.keep and not args.work:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
