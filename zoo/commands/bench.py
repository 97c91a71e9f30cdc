"""``zoo bench``: Zoo's throughput at a named workload next to this machine's limits, in one sitting.

Three measurements, in this order, each bounded in time:

1. **ceiling**: raw env stepping with the same env options and preprocessing, one process per
   core (``--raw-processes``), random actions (:func:`zoo.bench.measure.raw_ceiling`); then the
   policy's forward pass per env step (:func:`zoo.bench.measure.inference_cost`), giving the
   CPU-work bound ``cores / (env + inference core seconds per step)``; with the train phase
   also one update of the algorithm on a batch of the run's shape on the trainer's threads
   (:func:`zoo.bench.measure.training_cost`), giving the bound on trained env steps/s
   ``cores / (env + inference + training core seconds per step)``;
2. **sampling**: a Zoo run at the workload with ``trainer.learn=false`` (the trainer counts and
   discards samples): env stepping + batched inference + transports;
3. **train**: the same run training as usual: end to end.

Each Zoo run is measured over ``--seconds`` after ``--warmup`` seconds past the trainer's first
status, then stopped as Ctrl-C stops a run (workers stopped, shared memory removed); its run
folder lives in a temporary folder removed at the end. Printed: env steps/s, trained env
steps/s, frames/s, the ratios to the ceiling and to the CPU-work bound, the dropped fraction,
each role's share of the cores (``/proc/<pid>/stat`` of the workers, found by their titles
``zoo: <role> <index> <run>``; ``other``: other processes on the machine) and the bottleneck
in words (:mod:`zoo.bench.report`). ``--json FILE`` writes the same figures.

Workloads: :data:`zoo.bench.workloads.WORKLOADS` (``pong``: CleanRL ``ppo_atari.py``'s, the
default; ``cartpole``: CleanRL ``ppo.py``'s; ``pong-defaults``/``cartpole-defaults``: Zoo's own
presets). Exit codes: 0 measured, 1 a measurement failed, 2 bad options (before anything starts).
"""
from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import typer

PHASES = ("ceiling", "sampling", "train")


def parse_phases(text: str) -> tuple[str, ...]:
    """``"ceiling,train"`` -> ``("ceiling", "train")`` in :data:`PHASES` order.

    Raises:
        ValueError: an unknown or empty phase list (the message names the allowed ones).
    """
    got = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in got if p not in PHASES]
    if bad or not got:
        raise ValueError(f"--phases {text!r}: {'unknown ' + ', '.join(bad) if bad else 'empty'}; "
                         f"give a comma-separated subset of {','.join(PHASES)}")
    return tuple(p for p in PHASES if p in got)


def bench_command(
    workload: str = typer.Option("pong", "--workload", "-w", metavar="NAME",
                                 help="Named workload: pong (CleanRL ppo_atari.py's, default), cartpole (CleanRL "
                                 "ppo.py's), pong-defaults, cartpole-defaults (Zoo's own presets)."),
    seconds: float = typer.Option(60.0, "--seconds", min=1.0, metavar="S",
                                  help="Measured seconds per phase (S >= 1)."),
    warmup: float = typer.Option(20.0, "--warmup", min=0.0, metavar="S",
                                 help="Seconds after the run's first trainer status before measuring (S >= 0)."),
    limit: float | None = typer.Option(None, "--limit", min=10.0, metavar="S",
                                       help="Give up on a phase after S seconds (default warm-up + seconds + 240)."),
    phases: str = typer.Option(",".join(PHASES), "--phases", metavar="LIST",
                               help="Which measurements: a comma-separated subset of ceiling,sampling,train."),
    overrides: list[str] = typer.Option([], "--set", "-s", metavar="KEY=VALUE",
                                        help="Extra Zoo option on top of the workload's (repeatable)."),
    raw_processes: int = typer.Option(0, "--raw-processes", min=0, metavar="N",
                                      help="Processes for raw stepping (default 0 = one per core)."),
    json_out: Path | None = typer.Option(None, "--json", metavar="FILE", dir_okay=False,
                                         help="Also write the figures as JSON to FILE."),
) -> None:
    """Measure the env ceiling, Zoo's sampling and Zoo end to end at a named workload on this machine."""
    from zoo.bench.measure import BenchError, bench_config
    from zoo.bench.workloads import UnknownWorkload, get_workload
    from zoo.cli import _fail
    from zoo.core.config import ConfigError
    from zoo.core.registry import UnknownComponentError

    try:
        w = get_workload(workload)
        chosen = parse_phases(phases)
    except (UnknownWorkload, ValueError) as exc:
        raise _fail(str(exc)) from None
    if json_out is not None and not json_out.parent.is_dir():
        raise _fail(f"--json {str(json_out)!r}: the folder {str(json_out.parent)!r} does not exist; create it or "
                    "choose another path")
    runs_dir = tempfile.mkdtemp(prefix="zoo-bench-")
    try:
        try:  # every config is resolved before anything starts
            cfgs = {learn: bench_config(w.algo, w.env, [*w.overrides, *overrides], learn=learn, runs_dir=runs_dir,
                                        name=f"bench-{w.name}-{'train' if learn else 'sampling'}")
                    for learn in (False, True)}
        except (ConfigError, UnknownComponentError) as exc:
            raise _fail(str(exc)) from None
        try:
            result = run_bench(w, cfgs, chosen, seconds, warmup, limit if limit else warmup + seconds + 240.0,
                               raw_processes or os.cpu_count() or 1)
        except BenchError as exc:
            raise _fail(f"zoo bench: {exc}", 1) from None
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    from zoo.bench.report import format_table
    from zoo.cli import _console

    _console().print(format_table(result), markup=False, highlight=False, soft_wrap=True)
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if result.get("errors"):
        raise _fail(f"zoo bench: {len(result['errors'])} phase(s) failed: {', '.join(result['errors'])} (see above)", 1)


def run_bench(w, cfgs: dict, phases: tuple[str, ...], seconds: float, warmup: float, limit_s: float,
              processes: int) -> dict:
    """Measure ``phases`` of workload ``w`` with the resolved configs ``cfgs`` (``{learn: cfg}``);
    returns the JSON result (see :func:`zoo.bench.report.format_table`).

    A phase that fails (``ceiling``, ``sampling``, ``train``, ``inference``: a ``BenchError``, a
    run past ``limit_s``, or any other exception such as a CUDA error) leaves its figures out
    and its one-line reason in ``result["errors"][phase]``; the others are still measured. A
    failed training cost is ``result["bound"]["train_note"]``.
    """
    import torch

    from zoo.bench.measure import (
        BenchError,
        inference_cost,
        measure_run,
        raw_ceiling,
        training_cost,
        training_precision,
    )
    from zoo.bench.report import cpu_work_bound, phase_figures
    from zoo.core.config import steps_per_update
    from zoo.core.workers.threads import thread_plan

    cfg = cfgs[True]
    spec, cores = cfg.spec, os.cpu_count() or 1
    per_update, _ = steps_per_update(cfg, spec)
    group = cfg.actors.envs_per_actor // cfg.actors.ring_size
    result = {"workload": w.name, "summary": w.summary, "algo": w.algo, "env": w.env,
              "overrides": list(cfg_overrides(w, cfgs)), "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
              "machine": f"{platform.machine()}, {cores} cores, Python {platform.python_version()}, torch "
                         f"{torch.__version__}, load average {os.getloadavg()[0]:.1f} at start",
              "cores": cores, "frame_skip": spec.frame_skip, "seconds": seconds, "warmup": warmup,
              "env_steps_per_update": per_update, "ceiling": None, "bound": None, "sampling": None, "train": None}
    errors: dict[str, str] = {}

    def attempt(phase: str, fn):
        """``fn()``, or None with the failure kept in ``result["errors"][phase]``: one failed
        phase does not cost the others their figures."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - any failure of a phase is reported in its row
            errors[phase] = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
            return None

    raw = None
    if "ceiling" in phases:
        raw = attempt("ceiling", lambda: raw_ceiling(cfg.env_name, cfg.env, processes, cfg.actors.envs_per_actor,
                                                     seconds, warmup=min(warmup, 5.0), timeout_s=limit_s, group=group))
        if raw is not None:
            result["ceiling"] = {"env_steps_per_s": raw.env_steps_per_s, "processes": raw.processes,
                                 "envs_per_process": raw.envs_per_process, "env_ms_per_step": raw.cpu_s_per_step * 1e3}
    runs = {}
    for phase, learn in (("sampling", False), ("train", True)):
        if phase in phases:
            run = attempt(phase, functools.partial(measure_run, cfgs[learn], seconds=seconds, warmup=warmup,
                                                   limit_s=limit_s))
            if run is not None:
                runs[phase] = run
    if raw is not None:
        live_rows = [r for run in runs.values() for r in ((run.live or {}).get("workers") or ())
                     if r.get("role") == "policy" and r.get("batch_rows")]
        batch = (round(sum(r["batch_rows"] for r in live_rows) / len(live_rows)) if live_rows
                 else group * spec.num_agents)
        inf = attempt("inference", lambda: inference_cost(cfg, batch))
        if inf is not None:
            bound = cpu_work_bound(cores, raw.cpu_s_per_step, inf)
            result["bound"] = {"env_steps_per_s": bound, "env_ms_per_step": raw.cpu_s_per_step * 1e3,
                               "inference_ms_per_step": inf * 1e3, "batch": batch}
        if "train" in phases and inf is not None:
            threads = thread_plan(cfg).trainer
            train = attempt("training cost", lambda: training_cost(cfg, threads))
            if train is None:
                result["bound"]["train_note"] = errors.pop("training cost")
            else:
                result["bound"].update(train_ms_per_step=train * 1e3, train_threads=threads,
                                       train_precision=attempt("training precision", lambda: training_precision(cfg)),
                                       trained_env_steps_per_s=cpu_work_bound(cores, raw.cpu_s_per_step, inf, train))
    result["errors"] = errors
    ceiling = raw.env_steps_per_s if raw else None
    bound_rate = result["bound"]["env_steps_per_s"] if result["bound"] else None
    for phase, run in runs.items():
        result[phase] = phase_figures(run, per_update, cfg.sample_length, spec.num_agents, spec.frame_skip, cores,
                                      ceiling, bound_rate)
    return result


def cfg_overrides(w, cfgs: dict) -> list[str]:
    """The Zoo options the measured runs used on top of the presets (the workload's and --set's),
    plus the resolved graph: ``actors.count``, ``actors.envs_per_actor``, ``trainer.batch_samples``."""
    cfg = cfgs[True]
    return [*w.overrides, f"(resolved: actors.count={cfg.actors.count} actors.envs_per_actor="
            f"{cfg.actors.envs_per_actor} actors.ring_size={cfg.actors.ring_size} trainer.batch_samples="
            f"{cfg.trainer.batch_samples} sample_length={cfg.sample_length} algo.epochs={cfg.algo.epochs} "
            f"algo.minibatches={cfg.algo.minibatches} trainer.max_policy_lag={cfg.trainer.max_policy_lag})"]
