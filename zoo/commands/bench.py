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
``zoo: <role> <index> <run>``; ``other``: other processes on the machine), the bottleneck
in words, and the actors' inference round trips over the window (p50, p90, p99 from their
round-trip histogram, :func:`zoo.bench.report.round_trip_figures`) (:mod:`zoo.bench.report`).
``--json FILE`` writes the same figures, the round-trip histogram included.

Workloads: :data:`zoo.bench.workloads.WORKLOADS` (``pong``: CleanRL ``ppo_atari.py``'s, the
default; ``cartpole``: CleanRL ``ppo.py``'s; ``pong-defaults``/``cartpole-defaults``: Zoo's own
presets; replay: ``dqn-cartpole``, apex-dqn at CleanRL ``dqn.py``'s replay ratio,
``apex-pong``, apex-dqn on Pong at CleanRL ``dqn_atari.py``'s, and ``sac-halfcheetah``,
CleanRL ``sac_continuous_action.py``'s, whose end-to-end phase also
reports gradient steps/s, updates/s, replayed samples per env step and the rate limiter's
waits, :func:`zoo.bench.report.replay_figures`). Exit codes: 0 measured, 1 a measurement
failed, 2 bad options (before anything starts).

``--search`` (:func:`search_command`): the layout search of :mod:`zoo.bench.search` with these
measurements (each trial one train-phase run, or sampling-phase with ``--objective sampling``),
within ``--budget-s``; the best layout written as TOML for ``zoo train --config`` (``--out``),
the table of trials beside it (``.md``, ``.json``) (docs/benchmarking.md).
"""
from __future__ import annotations

import functools
import json
import math
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
                                 "ppo.py's), pong-defaults, cartpole-defaults (Zoo's own presets), dqn-cartpole "
                                 "(apex-dqn at CleanRL dqn.py's replay ratio), apex-pong (apex-dqn on Pong at CleanRL "
                                 "dqn_atari.py's replay ratio), sac-halfcheetah (CleanRL sac_continuous_action.py's)."),
    seconds: float | None = typer.Option(None, "--seconds", min=1.0, metavar="S",
                                         help="Measured seconds per phase (S >= 1; default 60, with --search 10 "
                                         "per trial)."),
    warmup: float | None = typer.Option(None, "--warmup", min=0.0, metavar="S",
                                        help="Seconds after the run's first trainer status before measuring (S >= 0; "
                                        "default 20, with --search 5)."),
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
    search: bool = typer.Option(False, "--search", metavar="",
                                help="Search layouts (actors, envs, ring groups, inline or policy workers, trainer "
                                "threads, precision) for the workload on this machine; write the best as a TOML file "
                                "for zoo train --config, with the table of trials beside it."),
    budget_s: float = typer.Option(600.0, "--budget-s", min=1.0, metavar="S",
                                   help="With --search: wall seconds for the whole search (default 600)."),
    repeats: int = typer.Option(1, "--repeats", min=1, metavar="N",
                                help="With --search: measure the best and the default N more times each at the end, "
                                "interleaved (default 1)."),
    confirm: bool = typer.Option(False, "--confirm", metavar="",
                                 help="With --search: before a dimension changes the best layout so far, measure the "
                                 "newcomer and the old best once more each and decide by their means (for a heavily "
                                 "shared machine; two trials per change)."),
    objective: str = typer.Option("trained", "--objective", metavar="WHAT",
                                  help="With --search: trained (trained env steps/s, default) or sampling (env "
                                  "steps/s with trainer.learn=false)."),
    out: Path | None = typer.Option(None, "--out", metavar="FILE", dir_okay=False,
                                    help="With --search: the TOML file to write (default search-<workload>.toml); "
                                    "the table goes beside it as FILE.json and FILE.md."),
) -> None:
    """Measure the env ceiling, Zoo's sampling and Zoo end to end at a named workload on this machine
    (or, with --search, find the layout that runs it fastest here)."""
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
    if search:
        if phases != ",".join(PHASES):
            raise _fail("--phases does not apply with --search (each trial is one run measured for --objective); "
                        "drop --phases")
        search_command(w, overrides, budget_s=budget_s, objective=objective, repeats=repeats, confirm=confirm,
                       seconds=10.0 if seconds is None else seconds, warmup=5.0 if warmup is None else warmup,
                       out=out, json_out=json_out, limit=limit)
        return
    for name, given in (("--budget-s", budget_s != 600.0), ("--objective", objective != "trained"),
                        ("--out", out is not None), ("--repeats", repeats != 1), ("--confirm", confirm)):
        if given:
            raise _fail(f"{name} applies only with --search; add --search or drop {name}")
    seconds = 60.0 if seconds is None else seconds
    warmup = 20.0 if warmup is None else warmup
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
                               raw_processes or os.cpu_count() or 1, overrides)
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
              processes: int, overrides: list[str] | None = None) -> dict:
    """Measure ``phases`` of workload ``w`` with the resolved configs ``cfgs`` (``{learn: cfg}``,
    made with ``--set``'s ``overrides`` after the workload's, which the result names);
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
              "overrides": cfg_overrides(w, cfgs, overrides or []),
              "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
              "machine": f"{platform.machine()}, {cores} cores, Python {platform.python_version()}, torch "
                         f"{torch.__version__}, load average {os.getloadavg()[0]:.1f} at start",
              "cores": cores, "frame_skip": spec.frame_skip, "seconds": seconds, "warmup": warmup,
              "env_steps_per_update": per_update, "ceiling": None, "bound": None, "sampling": None, "train": None,
              "replay_config": ({"samples_per_insert": cfg.algo.samples_per_insert, "batch_size": cfg.algo.batch_size}
                                if hasattr(cfg.algo, "samples_per_insert") else None)}
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


def cfg_overrides(w, cfgs: dict, overrides: list[str]) -> list[str]:
    """The Zoo options the measured runs used on top of the presets (the workload's, then ``--set``'s
    ``overrides``), plus the resolved graph: ``actors.count``, ``actors.envs_per_actor``,
    ``trainer.batch_samples``, ... (the ``cfgs[True]`` config's values)."""
    cfg = cfgs[True]
    algo = " ".join(f"algo.{k}={getattr(cfg.algo, k):g}" for k in ("epochs", "minibatches", "samples_per_insert",
                                                                    "batch_size", "learning_starts")
                    if isinstance(getattr(cfg.algo, k, None), (int, float)))
    return [*w.overrides, *overrides, f"(resolved: actors.count={cfg.actors.count} actors.envs_per_actor="
            f"{cfg.actors.envs_per_actor} actors.ring_size={cfg.actors.ring_size} trainer.batch_samples="
            f"{cfg.trainer.batch_samples} sample_length={cfg.sample_length} {algo} "
            f"trainer.max_policy_lag={cfg.trainer.max_policy_lag})"]


OBJECTIVES = {"trained": "trained env steps/s", "sampling": "env steps/s (sampling, trainer.learn=false)"}
ENV_COST_WINDOW_S = 5.0
"""Longest window of the env-cost measurement (raw stepping) of a search, and its warm-up is
at most 2 s: the env's cost per step varies little, the trials need the time more."""


def _key(override: str) -> str:
    return override.partition("=")[0].strip()


def search_command(w, overrides: list[str], *, budget_s: float, objective: str, seconds: float, warmup: float,
                   out: Path | None, json_out: Path | None, limit: float | None, repeats: int = 1,
                   confirm: bool = False) -> None:
    """``zoo bench --search``: every check before anything starts (the workload's config, the
    output folders, the budget against :func:`zoo.bench.search.minimum_budget_s`), then the env's
    cost per step (raw stepping, as ``zoo bench``'s ceiling), then :func:`zoo.bench.search.run_search`
    with ``zoo bench``'s measurement of a run (:func:`zoo.bench.measure.measure_run`, figures by
    :func:`zoo.bench.report.phase_figures`) and the CPU-work bound of each layout (its inference
    cost at its estimated batch, and its training cost on its threads in its precision); the
    chosen layout is written as TOML and read back through ``zoo train``'s config path."""
    from rich.table import Table

    from zoo.bench import search as S
    from zoo.bench.measure import (
        BenchError,
        bench_config,
        inference_cost,
        measure_run,
        raw_ceiling,
        training_cost,
        training_precision,
    )
    from zoo.bench.report import OTHER_NOTE, cpu_work_bound, phase_figures
    from zoo.cli import _console, _fail, _interrupted, _warn
    from zoo.core.config import ConfigError, build_config, steps_per_update
    from zoo.core.devices import choose_precision, training_bf16_native
    from zoo.core.plugins import get_registry
    from zoo.core.registry import UnknownComponentError
    from zoo.core.workers.threads import machine_cores, thread_plan

    if objective not in OBJECTIVES:
        raise _fail(f"--objective {objective!r} is not known; choose trained (trained env steps/s) or sampling "
                    "(env steps/s without training)")
    out = out if out is not None else Path(f"search-{w.name}.toml")
    for flag, path in (("--out", out), ("--json", json_out)):
        if path is not None and not path.parent.is_dir():
            raise _fail(f"{flag} {str(path)!r}: the folder {str(path.parent)!r} does not exist; create it or choose "
                        "another path")
    learn = objective == "trained"
    cores = machine_cores()
    need, arithmetic = S.minimum_budget_s(warmup, seconds, S.STARTUP_ESTIMATE_S + min(seconds, ENV_COST_WINDOW_S)
                                          + min(warmup, 2.0), repeats)
    if budget_s < need:
        raise _fail(f"--budget-s {budget_s:g} is too short for one candidate: {arithmetic}; give --budget-s "
                    f"{math.ceil(need)} or more, or shorten --seconds and --warmup")
    console = _console()
    started = time.monotonic()
    runs_dir = tempfile.mkdtemp(prefix="zoo-bench-")
    cfgs: dict = {}

    def cfg_for(layout, name: str = "bench-search"):
        if layout not in cfgs:
            cfgs[layout] = bench_config(w.algo, w.env, [*w.overrides, *overrides, *layout.overrides()], learn=learn,
                                        runs_dir=runs_dir, name=f"{name}-{w.name}-{len(cfgs) + 1}")
        return cfgs[layout]

    try:
        try:  # the workload's config, resolved before anything starts
            base = bench_config(w.algo, w.env, [*w.overrides, *overrides], learn=learn, runs_dir=runs_dir,
                                name=f"bench-search-{w.name}-0")
        except (ConfigError, UnknownComponentError) as exc:
            raise _fail(str(exc)) from None
        spec = base.spec
        algo_precision = getattr(base.algo, "precision", None)
        default = S.Layout(actors=base.actors.count, envs_per_actor=base.actors.envs_per_actor,
                           ring_size=base.actors.ring_size, inline=bool(base.policy.inline),
                           policy_workers=base.policy.count, trainer_threads=thread_plan(base).trainer,
                           algo_precision=training_precision(base) if isinstance(algo_precision, str) else None,
                           policy_precision=choose_precision(base.policy.precision, base.policy.device),
                           trainers=base.trainer.count, batch_samples=base.trainer.batch_samples)
        inference_bf16 = (training_bf16_native(base.policy.device)[0] if base.policy.device == "cpu"
                          else choose_precision("auto", base.policy.device) == "bfloat16")
        dims = S.dimensions(cores, base.trainer.batch_samples, spec.num_agents,
                            training_bf16=learn and training_bf16_native(getattr(base.algo, "device", "cpu"))[0],
                            inference_bf16=inference_bf16, has_algo_precision=isinstance(algo_precision, str))
        if not learn:
            dims = [d for d in dims if d.name not in ("trainers", "training precision")]
        header = [f"zoo bench --search: workload {w.name} ({w.algo} on {w.env}), objective {OBJECTIVES[objective]}",
                  f"machine: {platform.machine()}, {cores} cores, load average {os.getloadavg()[0]:.1f} at start; "
                  f"date {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC",
                  f"budget {budget_s:g} s, trials of {warmup:g} s warm-up + {seconds:g} s window, {repeats} "
                  f"repeat{'s' if repeats != 1 else ''} of the best and the default"
                  + (", changes confirmed" if confirm else "") + "; dimensions: "
                  + ", ".join(d.name for d in dims)]
        for line in header:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        try:
            raw = raw_ceiling(base.env_name, base.env, cores, base.actors.envs_per_actor,
                              min(seconds, ENV_COST_WINDOW_S), warmup=min(warmup, 2.0),
                              timeout_s=min(seconds, ENV_COST_WINDOW_S) + min(warmup, 2.0) + 120.0,
                              group=default.group)
        except BenchError as exc:
            raise _fail(f"zoo bench --search: {exc}", 1) from None
        console.print(f"env cost: {raw.cpu_s_per_step * 1e3:.3f} core-ms per env step (raw stepping, {cores} "
                      f"processes)", markup=False, highlight=False)
        costs: dict = {}

        def cost(key, fn):
            if key not in costs:
                costs[key] = fn()
            return costs[key]

        def batch_rows(x) -> int:
            """Estimated rows per forward pass: an inline actor's envs; a policy worker's actors'
            current groups (each actor of worker m has one group waiting)."""
            per = x.envs_per_actor if x.inline else -(-x.actors // x.policy_workers) * x.group
            return max(1, min(per * spec.num_agents, int(base.policy.max_batch)))

        def bound(x):
            cfg = cfg_for(x)
            rows = batch_rows(x)
            work = [raw.cpu_s_per_step,
                    cost(("inference", rows, x.policy_precision), lambda: inference_cost(cfg, rows))]
            if learn:
                work.append(cost(("train", x.trainer_threads, x.algo_precision, x.batch_samples),
                                 lambda: training_cost(cfg, x.trainer_threads)))
            return cpu_work_bound(cores, *work)

        def valid(x):
            try:
                cfg_for(x)
            except (ConfigError, UnknownComponentError) as exc:
                return str(exc)
            return None

        def measure(x, label):
            cfg = cfg_for(x)
            run = measure_run(cfg, seconds=seconds, warmup=warmup,
                              limit_s=limit if limit else warmup + seconds + 120.0)
            per_update, _ = steps_per_update(cfg, spec)
            fig = phase_figures(run, per_update, cfg.sample_length, spec.num_agents, spec.frame_skip, cores, None,
                                None)
            other = fig["cpu_shares"].get("other", 0.0)
            notes = [f"other processes {other:.0%}"] if other >= OTHER_NOTE else []
            if learn and fig["dropped_fraction"]:
                notes.append(f"dropped {fig['dropped_fraction']:.0%}")
            return {"score": fig["trained_env_steps_per_s"] if learn else fig["env_steps_per_s"],
                    "env_steps_per_s": fig["env_steps_per_s"],
                    "trained_env_steps_per_s": fig["trained_env_steps_per_s"] if learn else None,
                    "dropped_fraction": fig["dropped_fraction"], "cpu_shares": fig["cpu_shares"],
                    "window_s": fig["window_s"], "note": ", ".join(notes)}

        def show(t):
            score = "failed: " + t.error if t.score is None else f"{t.score:,.0f} {OBJECTIVES[objective]}"
            console.print(f"trial {t.index} ({t.stage}, {t.seconds:.0f} s): {t.layout.changes(default)}: {score}"
                          + (f" (bound {t.bound:,.0f})" if t.bound else ""), markup=False, highlight=False,
                          soft_wrap=True)

        result = S.run_search(default, dims, measure, bound, budget_s, warmup=warmup, seconds=seconds,
                              start=started, valid=valid, on_trial=show, repeats=repeats, confirm=confirm)
        if not any(t.score is not None for t in result.trials):
            raise _fail("zoo bench --search: no layout could be measured: "
                        + "; ".join(f"trial {t.index}: {t.error}" for t in result.trials), 1)
        # the chosen layout as zoo train's options: the workload's, --set's and the layout's, typed
        final = cfg_for(result.chosen)
        keys = [*(_key(o) for o in [*w.overrides, *overrides]), *S.LAYOUT_KEYS]
        keys = [k for k in keys if k not in ("trainer.learn", "runs_dir", "log.interval_s", "log.tensorboard")
                and (k != "algo.precision" or result.chosen.algo_precision is not None)]
        values = {"algo_name": w.algo, "env_name": w.env, **S.config_values(final, keys)}
        lines = S.summary_lines(result, OBJECTIVES[objective])
        busy = [str(t.index) for t in result.trials
                if (t.figures.get("cpu_shares") or {}).get("other", 0.0) >= OTHER_NOTE]
        shared = (f"the machine was shared: other processes used at least {OTHER_NOTE:.0%} of the cores in trial(s) "
                  f"{', '.join(busy)}; the figures are noisier than the repeats suggest") if busy else ""
        if shared:
            lines.append(f"note: {shared}")
        toml_header = [*header, *(line for line in lines if not line.startswith("note: ")),
                       *([f"note: {shared}"] if shared else []), "",
                       f"use: zoo train {w.algo} --env {w.env} --config {out.name}",
                       f"(the table of trials: {out.with_suffix('.md').name}, {out.with_suffix('.json').name})"]
        out.write_text(S.toml_text(values, toml_header))
        try:  # what zoo train --config does with it: read, layered, validated
            loaded = build_config(get_registry(), w.algo, w.env, config_file=out, name="bench-search-check",
                                  overrides=[f"runs_dir={runs_dir}"])
        except ConfigError as exc:
            raise _fail(f"zoo bench --search: the written {out} is refused by zoo train's config: {exc}", 1) from None
        back = {"algo_name": loaded.algo_name, "env_name": loaded.env_name, **S.config_values(loaded, keys)}
        if back != values:
            wrong = [k for k in values if back.get(k) != values[k]]
            raise _fail(f"zoo bench --search: {out} reads back different values for {', '.join(wrong)}", 1)
    except KeyboardInterrupt:  # Ctrl-C: the run under way was stopped as Ctrl-C stops a run; nothing written
        raise _interrupted() from None
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    table = Table(title=f"layout search: {w.name}, {OBJECTIVES[objective]}")
    for col in S.COLUMNS:
        table.add_column(col, justify="right" if col in ("#", "score", "bound", "of bound", "s") else "left")
    for row in S.table_rows(result):
        table.add_row(*row)
    console.print(table)
    for line in lines:
        if line != f"note: {shared}":
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if shared:
        _warn(console, shared)
    data = {"workload": w.name, "algo": w.algo, "env": w.env, "objective": objective, "cores": cores,
            "header": header, "env_ms_per_step": raw.cpu_s_per_step * 1e3, "toml": str(out), "values": values,
            "summary": lines, **S.result_json(result)}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(S.format_markdown(result, OBJECTIVES[objective],
                                                        [f"# {header[0]}", "", *(f"{h}  " for h in header[1:])],
                                                        [shared] if shared else []))
    if json_out is not None:
        json_out.write_text(json.dumps(data, indent=1, default=str) + "\n")
    console.print(f"wrote {out} (zoo train {w.algo} --env {w.env} --config {out}), {out.with_suffix('.md')}, "
                  f"{out.with_suffix('.json')}", markup=False, highlight=False, soft_wrap=True)
