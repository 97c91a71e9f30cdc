"""Measurements of ``zoo bench`` (and of ``benchmarks/sampling_bench.py``).

- :func:`raw_ceiling`: raw env stepping, one process per core, same env and preprocessing,
  random actions, no inference and no transport: the env ceiling of this machine.
- :func:`inference_cost`: CPU seconds of one policy forward pass (1 torch thread) at a batch.
- :func:`training_cost`: CPU seconds of one update of the algorithm on a batch of the run's
  shape, per env step (the trainer's torch threads).
- :func:`measure_run`: a real Zoo run (``zoo.core.controller.run``) measured over a window:
  the trainer's counters at the window's two ends, each worker's CPU from ``/proc/<pid>/stat``
  (workers found by their process titles ``zoo: <role> <index> <run>``), and the last
  ``live.json`` snapshot (:mod:`zoo.core.health`: bottleneck, policy batch rows) and the one
  before the window (for the actors' round-trip histogram's growth over the window).

Every function stops what it started: worker processes are stopped by the controller
(the run is ended as by Ctrl-C), the raw processes are joined, the run folder is kept
under ``runs_dir`` only when asked.
"""
from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from zoo.bench.report import run_counters

__all__ = ["BenchError", "RawResult", "RunResult", "TICKS", "RATE_LIMITED_REPEATS", "cpu_seconds", "find_workers",
           "raw_ceiling", "inference_cost", "training_cost", "training_precision", "measure_run"]

TICKS = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second of ``/proc/<pid>/stat``'s utime and stime."""


class BenchError(RuntimeError):
    """A measurement could not be made (a run gave no status in time, a worker crashed)."""


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of process ``pid`` in seconds (``/proc/<pid>/stat`` fields 14 and 15);
    None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return None


def machine_cpu() -> tuple[float, float]:
    """``(busy, total)`` core seconds of the whole machine since boot: every CPU line of
    ``/proc/stat`` (:func:`zoo.core.workers.threads.cpu_times`: busy = user + nice + system + irq +
    softirq + steal, total adds idle + iowait)."""
    from zoo.core.workers.threads import cpu_times

    with open("/proc/stat") as f:
        busy, total, _ = cpu_times(f.read())
    return busy / TICKS, total / TICKS


def parse_title(cmdline: bytes, run_name: str) -> tuple[str, int] | None:
    """``(role, index)`` from a worker's ``/proc/<pid>/cmdline`` when its title is
    ``zoo: <role> <index> <run_name>`` (setproctitle; NULs and padding ignored); else None.

    ``b"zoo: actor 1 bench-pong-1\\x00\\x00"`` with run ``bench-pong-1`` -> ``("actor", 1)``.
    """
    text = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    parts = text.split(" ")
    if len(parts) != 4 or parts[0] != "zoo:" or parts[3] != run_name or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


def find_workers(run_name: str) -> dict[tuple[str, int], int]:
    """``{(role, index): pid}`` of this machine's processes titled ``zoo: <role> <index> <run_name>``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                key = parse_title(f.read(), run_name)
        except OSError:
            continue
        if key is not None:
            found[key] = int(entry)
    return found


# ----------------------------------------------------------------------------- raw env ceiling
@dataclass
class RawResult:
    """Raw stepping: ``env_steps_per_s`` summed over ``processes``, and ``cpu_s_per_step`` (core
    seconds per env step, each process's ``time.process_time()`` over its steps, averaged)."""

    env_steps_per_s: float
    cpu_s_per_step: float
    processes: int
    envs_per_process: int


def _raw_worker(env_name: str, env_cfg: Any, n_envs: int, group: int, seconds: float, warmup: float, seed: int,
                out) -> None:
    import numpy as np

    from zoo.core.config import resolve_env
    from zoo.core.plugins import get_registry

    component, arg = resolve_env(get_registry(), env_name)
    factory = component.option("vector_factory")  # the backend the actors use (e.g. Atari's vector env)
    venvs = [factory(arg, env_cfg, group) for _ in range(n_envs // group)] if factory is not None else []
    if venvs and all(v is not None for v in venvs):
        for g, v in enumerate(venvs):
            v.reset([seed + g * group + i for i in range(group)])
        space, rows = venvs[0].spec.action_space, group * venvs[0].spec.num_agents

        def step_all() -> int:
            for v in venvs:  # the env resets ended episodes itself
                v.step(np.stack([space.sample() for _ in range(rows)]))
            return n_envs
        envs = venvs
    else:
        envs = [component.load()(arg, env_cfg, seed + i) for i in range(n_envs)]
        space, agents = envs[0].spec.action_space, envs[0].spec.num_agents
        rng = np.random.default_rng(seed)
        for env in envs:
            env.reset(seed=int(rng.integers(1 << 30)))

        def step_all() -> int:
            for env in envs:
                _, _, term, trunc, _ = env.step(np.stack([space.sample() for _ in range(agents)]))
                if np.all(term | trunc):
                    env.reset()
            return n_envs
    steps, start, counted_from, cpu_from = 0, time.monotonic(), None, 0.0
    try:
        while True:
            now = time.monotonic()
            if counted_from is None and now - start >= warmup:
                counted_from, cpu_from, steps = now, time.process_time(), 0
            if counted_from is not None and now - counted_from >= seconds:
                break
            steps += step_all()
        out.put((steps, time.monotonic() - counted_from, time.process_time() - cpu_from))
    finally:
        for env in envs:
            env.close()


def raw_ceiling(env_name: str, env_cfg: Any, processes: int, envs_per_process: int, seconds: float,
                warmup: float, timeout_s: float | None = None, group: int | None = None) -> RawResult:
    """Step ``envs_per_process`` envs in each of ``processes`` spawned processes with random
    actions for ``seconds`` after ``warmup`` seconds; the summed env-step rate and the CPU cost.
    When the env plugin's ``vector_factory`` gives a vector env for ``env_cfg`` (the backend the
    actors then use), each process steps vector envs of ``group`` envs (an actor's ring group;
    default all ``envs_per_process``), else envs built one by one.

    Raises:
        BenchError: a process gave no result within ``timeout_s`` (default warmup + seconds + 120 s).
    """
    import queue

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_raw_worker, args=(env_name, env_cfg, envs_per_process, group or envs_per_process,
                                                   seconds, warmup, 1000 * i, out),
                         daemon=True) for i in range(processes)]
    limit = time.monotonic() + (timeout_s if timeout_s is not None else warmup + seconds + 120.0)
    results = []
    try:
        for p in procs:
            p.start()
        for _ in procs:
            try:
                results.append(out.get(timeout=max(0.1, limit - time.monotonic())))
            except queue.Empty:
                raise BenchError(f"raw stepping of {env_name}: {len(results)} of {processes} processes reported "
                                 "within the time limit") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    rate = sum(steps / wall for steps, wall, _ in results)
    cpu = sum(cpu / steps for steps, _, cpu in results) / len(results)
    return RawResult(rate, cpu, processes, envs_per_process)


# ----------------------------------------------------------------------------- inference cost
def cpu_ms(fn, repeats: int, warmup: int = 3) -> float:
    """CPU milliseconds (``time.process_time``) per call of ``fn``, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    start = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - start) / repeats * 1e3


def device_ms(fn, repeats: int, warmup: int = 3, device: Any = "cpu") -> float:
    """Milliseconds per call of ``fn`` on the device it runs on, after ``warmup`` calls.

    On ``cpu`` (or any non-CUDA device): CPU core-milliseconds (:func:`cpu_ms`, every thread of
    this process). On ``cuda[:N]``: GPU milliseconds between two CUDA events recorded on that
    device's current stream around the ``repeats`` calls, after ``torch.cuda.synchronize``
    (the work queued by the warm-up calls is not counted; the events' end waits for the last).
    """
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return cpu_ms(fn, repeats, warmup)
    with torch.cuda.device(dev):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        torch.cuda.synchronize(dev)
        return start.elapsed_time(end) / repeats


def _model_device(module: Any) -> Any:
    """The device of ``module``'s first parameter (``cpu`` for a module without any)."""
    import torch

    param = next(iter(module.parameters()), None)
    return torch.device("cpu") if param is None else param.device


def _algorithm_and_first_obs(cfg: Any) -> tuple[Any, dict[str, Any]]:
    """``cfg``'s algorithm class (the interface of :mod:`zoo.core.algorithm`: a duck type, no
    static type) and the first observation of its env (``reset(seed=0)``; the env is closed again)."""
    from zoo.core.config import resolve_env
    from zoo.core.plugins import get_registry

    registry = get_registry()
    algo_cls = registry.get("algorithm", cfg.algo_name).load()
    component, arg = resolve_env(registry, cfg.env_name)
    env = component.load()(arg, cfg.env, 0)
    try:
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    return algo_cls, obs


def inference_cost(cfg: Any, batch: int, repeats: int = 30) -> float:
    """Seconds per env step of the policy's forward pass (``act``) at ``batch`` observations on
    ``cfg.policy.device``, float32 or ``cfg.policy.precision`` as the policy worker runs it, on
    one torch thread (the policy worker's ``policy.threads=1`` default); observations are the
    env's reset observation repeated ``batch`` times, placed on the device before timing. On the
    CPU the seconds are core seconds (``time.process_time``); on CUDA they are GPU seconds timed
    with CUDA events (:func:`device_ms`). Per env step = per pass / ``batch`` x agents."""
    import numpy as np
    import torch

    from zoo.core.devices import choose_precision
    from zoo.core.workers.policy import cast_for_precision, inference_autocast

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        algo_cls, obs = _algorithm_and_first_obs(cfg)
        device = torch.device(getattr(cfg.policy, "device", "cpu") or "cpu")
        policy = algo_cls.build_policy(cfg.algo, cfg.spec).to(device).eval()
        precision = choose_precision(cfg.policy.precision, device)
        cast_for_precision(policy, precision)
        agents = cfg.spec.num_agents
        rows = max(1, batch)
        x = {k: torch.as_tensor(np.repeat(np.asarray(v), -(-rows // agents), axis=0)[:rows], device=device)
             for k, v in obs.items()}
        state = policy.zero_state(rows) if getattr(policy, "state_shape", None) is not None else None
        if state is not None:
            state = state.to(device)
        with torch.inference_mode(), inference_autocast(precision, device.type):
            call = (lambda: policy.act(x, state=state)) if state is not None else (lambda: policy.act(x))
            ms = device_ms(call, repeats, device=device)
        return ms / 1e3 / rows * agents
    finally:
        torch.set_num_threads(threads)


def synthetic_batch(cfg: Any, policy: Any, obs: dict[str, Any]) -> dict[str, Any]:
    """A batch of the run's shape (:data:`zoo.core.algorithm.Batch`) for timing an update: ``T =
    sample_length`` steps x ``B = trainer.batch_samples`` agent-slots, every observation the env's
    reset observation ``obs``, the actions and extras (``logp``, ``value``, ...) from ``policy.act``
    on them, rewards N(0, 1) (seed 0), no episode ends, every step active, policy version 0.
    The observations go to ``policy`` on its own device (that of its first parameter); the
    batch is host numpy arrays, as the trainer receives it from the sample stream (what ``act``
    returns is copied back with ``.cpu()``).

    Raises:
        BenchError: the policy is recurrent (its state is not part of this batch).
    """
    import numpy as np
    import torch

    if getattr(policy, "state_shape", None) is not None:
        raise BenchError("a recurrent policy's training cost is not measured (its state is not in the batch)")
    T, B, agents = int(cfg.sample_length), int(cfg.trainer.batch_samples), int(cfg.spec.num_agents)
    rows = (T + 1) * B
    full = {k: np.repeat(np.asarray(v), -(-rows // agents), axis=0)[:rows] for k, v in obs.items()}
    batch_obs = {k: v.reshape(T + 1, B, *v.shape[1:]) for k, v in full.items()}
    device = _model_device(policy)
    with torch.inference_mode():
        out = policy.act({k: torch.as_tensor(v[:T].reshape(T * B, *v.shape[2:]), device=device)
                          for k, v in batch_obs.items()})
    batch = {"obs": batch_obs,
             "reward": np.random.default_rng(0).standard_normal((T, B)).astype(np.float32),
             "terminated": np.zeros((T, B), bool), "truncated": np.zeros((T, B), bool),
             "active": np.ones((T, B), bool), "on_reset": np.zeros((T, B), bool),
             "policy_version": np.zeros((T, B), np.int64), "disc_return": np.zeros((T, B), np.float32),
             "final_obs": {k: v[:0] for k, v in full.items()}, "final_index": np.zeros((0, 2), np.int64)}
    for key, value in out.items():
        value = value.float() if value.dtype == torch.bfloat16 else value
        batch[key] = value.detach().cpu().numpy().reshape(T, B, *value.shape[1:])
    return batch


def training_precision(cfg: Any) -> str | None:
    """The arithmetic :func:`training_cost` trains in: ``algo.precision`` resolved on this machine
    (``"float32"`` or ``"bfloat16"``), None for an algorithm without that option."""
    precision = getattr(cfg.algo, "precision", None)
    if not isinstance(precision, str):
        return None
    from zoo.core.devices import choose_training_precision
    from zoo.core.plugins import get_registry
    from zoo.plugins.algorithms.precision import largest_layer

    policy = get_registry().get("algorithm", cfg.algo_name).load().build_policy(cfg.algo, cfg.spec)
    return choose_training_precision(precision, getattr(cfg.algo, "device", "cpu"), largest_layer(policy))[0]


RATE_LIMITED_REPEATS = 5
"""Timed updates of a rate-limited algorithm in :func:`training_cost`: its gradient steps per
update vary with the carried credit (dqn-cartpole: 13, 13, 13, 12, 13 at 12.8 per update) and
average out over five."""


def training_cost(cfg: Any, threads: int, repeats: int = 2) -> float:
    """Core seconds per env step of one update of ``cfg``'s algorithm (``update``) on
    :func:`synthetic_batch` (``sample_length x trainer.batch_samples`` agent-slots: the Pong
    workload's 128 x 8 = 1,024 env steps), on ``threads`` torch threads, after one warm-up update,
    on the algorithm's ``algo.device``. On the CPU, core seconds are ``time.process_time`` (every
    thread of this process), so two threads that each work 1 s count 2 s; on CUDA, GPU seconds
    timed with CUDA events (:func:`device_ms`). Per env step = per update / (``T x B / agents``).

    A rate-limited (replay) algorithm (``rate_limited``, :mod:`zoo.core.algorithm`) is measured
    in its steady state: ``algo.learning_starts`` = 0, two warm-up updates (the first fills the
    empty replay and takes no step), then at least :data:`RATE_LIMITED_REPEATS` timed ones, each
    with the gradient steps its rate limiter grants (``samples_per_insert / batch_size`` per
    inserted transition on average).

    Raises:
        BenchError: the algorithm's batch cannot be made here (a recurrent policy), or the update failed.
    """
    import dataclasses

    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        algo_cls, obs = _algorithm_and_first_obs(cfg)
        limited = bool(getattr(algo_cls, "rate_limited", False))
        config = dataclasses.replace(cfg.algo, learning_starts=0) if limited else cfg.algo
        algo = algo_cls(config, cfg.spec, 0)
        batch = synthetic_batch(cfg, algo.policy, obs)
        try:
            ms = device_ms(lambda: algo.update(batch), max(repeats, RATE_LIMITED_REPEATS) if limited else repeats,
                           warmup=2 if limited else 1,
                           device=getattr(algo, "device", None) or _model_device(algo.policy))
        except Exception as exc:  # an algorithm whose batch needs more than the layout's keys
            raise BenchError(f"the training cost of {cfg.algo_name} could not be measured: "
                             f"{type(exc).__name__}: {exc}") from None
        env_steps = cfg.sample_length * cfg.trainer.batch_samples / cfg.spec.num_agents
        return ms / 1e3 / env_steps
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- a measured Zoo run
@dataclass
class RunResult:
    """What :func:`measure_run` saw over its window.

    ``start`` and ``end``: the trainer's status at the window's two ends (``env_steps``,
    ``updates``, ``dropped_samples``, ... and ``trained_env_steps`` when the trainer reports
    it); ``t0``/``t1``: when they arrived (monotonic seconds); ``cpu_s``: core seconds per
    ``(role, index)`` over the window (``("controller", 0)`` is this process, ``("machine", 0)``
    every process of the machine, ``("machine-total", 0)`` the cores' seconds, idle included:
    :func:`machine_cpu`); ``live``: the
    last ``live.json`` snapshot; ``live_start``: the last one before the window started (None
    if none came yet; both are up to ``log.interval_s`` = 1 s old at their end of the window,
    from heartbeats up to a second older); ``run_dir``: the run folder (removed unless kept)."""

    start: dict[str, Any]
    end: dict[str, Any]
    t0: float
    t1: float
    cpu_s: dict[tuple[str, int], float]
    live: dict[str, Any] | None = None
    run_dir: str = ""
    exit_code: int = 0
    stderr: str = ""
    notes: list[str] = field(default_factory=list)
    live_start: dict[str, Any] | None = None


class _Window:
    """The run's status listener: marks the window's ends and stops the run (as Ctrl-C) once the
    window is measured or the time limit passed."""

    def __init__(self, run_name: str, warmup: float, seconds: float, limit_s: float) -> None:
        self.run_name, self.warmup, self.seconds = run_name, warmup, seconds
        self.began = time.monotonic()
        self.deadline = self.began + limit_s
        self.first: float | None = None
        self.start: tuple[float, dict, dict] | None = None  # (time, status, cpu)
        self.end: tuple[float, dict, dict] | None = None
        self.live: dict[str, Any] | None = None
        self.live_start: dict[str, Any] | None = None  # the last snapshot before the window
        self.stopping = False
        self.timed_out = False

    def cpu(self) -> dict[tuple[str, int], float]:
        pids = find_workers(self.run_name)
        out = {key: cpu_seconds(pid) for key, pid in pids.items()}
        out[("controller", 0)] = cpu_seconds(os.getpid())
        out[("machine", 0)], out[("machine-total", 0)] = machine_cpu()
        return {k: v for k, v in out.items() if v is not None}

    def _stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            raise KeyboardInterrupt

    def __call__(self, status: dict[str, Any]) -> None:
        now = time.monotonic()
        if self.stopping:
            return
        status = run_counters(status)  # a run of named policies: its trained figures, summed up
        if self.first is None:
            self.first = now
        if self.start is None and now - self.first >= self.warmup:
            self.start = (now, dict(status), self.cpu())
            self.live_start = self.live
        elif (self.start is not None and now - self.start[0] >= self.seconds
              and status.get("env_steps", 0) > self.start[1].get("env_steps", 0)):
            # the first status at least `seconds` later that shows progress (a trainer also reports
            # while it waits for samples: a window ending there could be empty on a loaded machine)
            self.end = (now, dict(status), self.cpu())
            self._stop()
        if now > self.deadline:
            self.timed_out = True
            self._stop()

    def show_live(self, snapshot: dict[str, Any]) -> None:
        if self.stopping:
            return
        self.live = snapshot
        if time.monotonic() > self.deadline:
            self.timed_out = True
            self._stop()


def bench_config(algo: str, env: str, overrides: list[str], *, learn: bool, runs_dir: str, name: str) -> Any:
    """The resolved config of one measured run: ``algo`` on ``env`` with ``overrides``, an
    unbounded budget (the window stops it), ``trainer.learn=learn``, status every second, no
    TensorBoard, run folder under ``runs_dir``. Nothing is started.

    Raises:
        zoo.core.options.ConfigError: a bad option (field, value and fix in the message).
        zoo.core.registry.UnknownComponentError: an unknown algorithm or env.
    """
    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry

    return build_config(get_registry(), algo, env, steps=10**12, name=name, overrides=[
        "log.interval_s=1", "log.tensorboard=false", f"runs_dir={runs_dir}", *overrides,
        f"trainer.learn={str(learn).lower()}"])


def measure_run(cfg: Any, *, seconds: float, warmup: float, limit_s: float, keep: bool = False) -> RunResult:
    """Run Zoo with ``cfg`` (:func:`bench_config`) until ``seconds`` of measurement after
    ``warmup`` seconds past its first trainer status; stop it as Ctrl-C does (every worker
    stopped, transports removed); the run folder is removed unless ``keep``.

    Raises:
        BenchError: no measured window within ``limit_s`` seconds, or the run ended by itself.
        KeyboardInterrupt: Ctrl-C (SIGINT) stopped the run before its window was measured.
    """
    from zoo.core.controller import prepare_run_dir, run

    algo, env, learn = cfg.algo_name, cfg.env_name, cfg.trainer.learn
    run_dir = prepare_run_dir(cfg)
    window = _Window(os.path.basename(os.path.normpath(run_dir)), warmup, seconds, limit_s)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = run(cfg, cfg.spec, window, run_dir)
    finally:
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    if window.end is None and code == 130 and not window.timed_out and not window.stopping:
        raise KeyboardInterrupt  # Ctrl-C stopped the run, not the window: stop the measuring too
    if window.end is None:
        why = (f"no measured window within {limit_s:g} s (warm-up {warmup:g} s + {seconds:g} s after the first "
               "trainer status); the machine may be too loaded: raise --limit" if window.timed_out
               else f"the run ended by itself (exit {code}) before the window was measured")
        tail = err.getvalue().strip().splitlines()[-15:]
        raise BenchError(f"{algo} on {env} ({'training' if learn else 'sampling'}): {why}"
                         + ("\n" + "\n".join(tail) if tail else ""))
    assert window.start is not None, "a window starts before it ends"
    (t0, s0, c0), (t1, s1, c1) = window.start, window.end
    cpu = {k: c1[k] - c0[k] for k in c1 if k in c0}
    return RunResult(s0, s1, t0, t1, cpu, window.live, run_dir if keep else "", code, err.getvalue(),
                     live_start=window.live_start)
