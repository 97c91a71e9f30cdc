"""The arithmetic of ``zoo bench`` on its measurements, and the printed table.

Pure functions (no processes, no clocks), so each is unit-tested with hand-worked values.

Definitions (units in brackets):

- env steps/s: env steps the actors stepped (the trainer's ``env_steps`` counter) over the
  measured window [env steps / s]; frames/s = env steps/s x frame-skip.
- trained env steps/s: env steps whose samples the trainer used in updates over the window.
  The trainer's ``trained_env_steps`` counter when its status carries it; before that
  counter existed, ``updates x`` the env steps of one update
  (:func:`zoo.core.config.steps_per_update`: whole samples of ``G`` envs x ``T`` steps).
- dropped fraction: agent-slot samples dropped (too stale at the trainer, or at the actors)
  over dropped + used, in the window; used = trained env steps / ``T`` x agents.
- env ceiling: raw stepping of the same env with the same preprocessing on every core, random
  actions, no inference or transport [env steps / s].
- CPU-work bound: ``cores / (c_env + c_inf)`` where ``c_env`` is the core seconds of one raw
  env step and ``c_inf`` of the policy's forward pass per env step (one thread, at the policy
  worker's measured batch): the rate if every core did only that work [env steps / s].
- CPU-work bound with training: ``cores / (c_env + c_inf + c_train)`` where ``c_train`` is the
  core seconds of the algorithm's update per env step (the trainer's torch threads, a batch of
  the run's shape): the most trained env steps/s these cores could give if they did nothing
  else [trained env steps / s].
- replay figures (a replay algorithm: the trainer's status carries ``gradient_steps_total``,
  ``replayed``, ``inserted`` and the rate limiter's waits, :mod:`zoo.core.workers.accounting`),
  over the window: gradient steps/s and updates/s [1 / s]; replayed samples per env step (the
  growth of ``replayed`` over that of ``env_steps``, env steps received) and per inserted
  sample (over ``inserted``; the configured ``algo.samples_per_insert`` in the long run);
  the learner's waits for inserted data [batches, s, fraction of the window] and the seconds
  complete batches waited for the learner, holding the actors back [s, fraction of the window].
- inference round trip: the actors' round-trip histogram (:mod:`zoo.core.health`: from a
  request taken by the inference stream to its reply taken by the actor; buckets of
  :data:`zoo.core.health.ROUND_TRIP_EDGES_S`, 16 µs x 2^k up to 1.048576 s and an open
  bucket above), summed over the actors, grown over the window (the ``live.json`` snapshots
  before and at the window's end: each up to about 2 s old); its p50, p90 and p99,
  interpolated linearly within a bucket (:func:`zoo.core.health.histogram_percentile`) [ms].
- CPU share of a role: its processes' core seconds (``/proc/<pid>/stat`` utime + stime) over
  the window / (cores x window seconds); ``other`` is the rest of the machine's busy time
  (``/proc/stat``: other users of the cores), ``idle`` what no process used.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zoo.core.health import ROUND_TRIP_EDGES_S, ROUND_TRIP_PERCENTILES, round_trip_percentiles_ms

__all__ = ["rate", "run_counters", "trained_steps", "dropped_fraction", "cpu_work_bound", "cpu_shares",
           "bottleneck_words", "replay_figures", "round_trip_figures", "round_trip_line", "phase_figures",
           "format_table", "ROLES"]

ROLES = ("actor", "policy", "trainer", "controller")
IDLE_NOTE = 0.15
"""A window where at least this fraction of the cores was idle: Zoo leaves CPU unused (it waits)."""
OTHER_NOTE = 0.15
"""A window where other processes used at least this fraction of the cores: the machine was shared."""


def rate(start: dict[str, Any], end: dict[str, Any], key: str, seconds: float) -> float:
    """``(end[key] - start[key]) / seconds``. Example: env_steps 10,240 -> 40,960 over 100 s = 307.2."""
    return (end[key] - start[key]) / seconds


POLICY_SUMS = ("updates", "dropped_samples", "actor_dropped_samples")
"""Counters of a named policy's entry that add up over the run's policies (:func:`run_counters`)."""


def run_counters(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with the run's counters at its top level, for the window's arithmetic.

    A run of named policies shows a merged status (``core/policy_status.py``): the trained
    figures are only in each policy's entry under ``"policies"``. Here the run's
    ``trained_env_steps`` is the largest over the trainable policies' entries (every trainable
    policy trains on the same env steps of the actors, as ``env_steps`` is the largest they
    received), and :data:`POLICY_SUMS` (updates, dropped samples) are summed
    over them. A status without ``"policies"`` (the one implicit policy) is returned as it is.
    Example: entries ``{"a": {"trained_env_steps": 4096, "updates": 8}, "b": {"trained_env_steps":
    3584, "updates": 7}}`` -> ``trained_env_steps`` 4,096, ``updates`` 15.
    """
    policies = status.get("policies")
    if not isinstance(policies, dict):
        return status
    entries = [e for e in policies.values() if isinstance(e, dict) and not e.get("frozen")]
    out = dict(status)
    trained = [e["trained_env_steps"] for e in entries if isinstance(e.get("trained_env_steps"), (int, float))]
    if trained:
        out["trained_env_steps"] = max(trained)
    for key in POLICY_SUMS:
        values = [e[key] for e in entries if isinstance(e.get(key), (int, float))]
        if values:
            out[key] = sum(values)
    return out


def trained_steps(status: dict[str, Any], per_update: int) -> int:
    """Trained env steps at ``status``: its ``trained_env_steps`` when present, else
    ``updates x per_update`` (e.g. 7 updates x 1,024 env steps = 7,168)."""
    value = status.get("trained_env_steps")
    return int(value) if value is not None else int(status.get("updates", 0)) * per_update


def dropped_fraction(start: dict[str, Any], end: dict[str, Any], trained: float, sample_length: int,
                     agents: int = 1) -> float | None:
    """Dropped / (dropped + used) agent-slot samples in the window; None if neither happened.

    ``dropped``: the growth of ``dropped_samples + actor_dropped_samples``; ``used``: ``trained``
    (env steps trained on in the window) / ``sample_length`` x ``agents``. Example: 140 dropped,
    30,720 trained env steps at T = 128 -> 240 used -> 140 / 380 = 0.368.
    """
    keys = ("dropped_samples", "actor_dropped_samples")
    dropped = sum(end.get(k, 0) - start.get(k, 0) for k in keys)
    used = trained / sample_length * agents
    return dropped / (dropped + used) if dropped + used > 0 else None


def cpu_work_bound(cores: int, *core_s_per_step: float) -> float:
    """``cores / (the sum of core seconds per env step)``: env + inference (the CPU-work bound), or
    env + inference + training (the bound on trained env steps/s). Examples: 2 cores, 2.0 ms + 0.5
    ms -> 2 / 0.0025 = 800 env steps/s; 0.5 + 0.5 + 4.0 ms -> 400 trained env steps/s."""
    return cores / sum(core_s_per_step)


def replay_figures(start: dict[str, Any], end: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """A replay algorithm's figures over a window of ``seconds`` from the trainer's status at its
    two ends (module docstring); None when the status has no ``gradient_steps_total`` (not a replay
    algorithm). A ratio whose denominator did not grow is None.

    Example: over 50 s, gradient steps 100 -> 600, updates 10 -> 50, env steps 1,280 -> 6,400,
    replayed 12,800 -> 76,800, inserted 1,280 -> 6,400, waits 3 -> 5 (1.5 -> 4.0 s), held 10 -> 40 s:
    10 gradient steps/s, 0.8 updates/s, 64,000 / 5,120 = 12.5 replayed per env step and per
    inserted, 2 waits of 2.5 s (0.05 of the window), 30 s held (0.6).
    """
    if "gradient_steps_total" not in end or "gradient_steps_total" not in start:
        return None

    def grew(key: str) -> float:
        return end.get(key, 0) - start.get(key, 0)

    env, inserted, replayed = grew("env_steps"), grew("inserted"), grew("replayed")
    wait_s, held_s = grew("rate_limit_wait_s"), grew("rate_limit_held_s")
    return {"gradient_steps_per_s": grew("gradient_steps_total") / seconds, "updates_per_s": grew("updates") / seconds,
            "replayed_per_env_step": replayed / env if env > 0 else None,
            "replayed_per_inserted": replayed / inserted if inserted > 0 else None,
            "rate_limit_waits": int(grew("rate_limit_waits")), "rate_limit_wait_s": wait_s,
            "rate_limit_held_s": held_s, "wait_fraction": wait_s / seconds, "held_fraction": held_s / seconds}


def round_trip_figures(start: dict[str, Any] | None, end: dict[str, Any] | None) -> dict[str, Any] | None:
    """The actors' inference round trips over a window, from the ``live.json`` snapshots
    before it (``start``) and at its end (``end``): their ``totals.round_trip_counts``
    (cumulative, summed over the actors) subtracted bucket by bucket (a count below 0, which
    only a lost heartbeat gives, as 0; ``start`` without counts: none yet, all 0).

    Returns:
        None without both snapshots or without counts at the end; else ``{"edges_s": the 17
        bucket edges in seconds, "counts": 18 ints, "requests": their sum, "p50_ms",
        "p90_ms", "p99_ms"}`` (:func:`zoo.core.health.histogram_percentile` in milliseconds;
        None when no request was answered in the window). Example: counts grown by 4 in
        [512, 1024) µs and 1 in [1.024, 2.048) ms: 5 requests, p50 at rank 2.5 = 512 + 512 x
        2.5/4 = 832 µs -> 0.832 ms.
    """
    if start is None or end is None:
        return None
    last = (end.get("totals") or {}).get("round_trip_counts")
    first = (start.get("totals") or {}).get("round_trip_counts") or [0] * len(last or ())
    if not last or len(first) != len(last) or len(last) != len(ROUND_TRIP_EDGES_S) + 1:
        return None
    counts = [max(0, int(b) - int(a)) for a, b in zip(first, last, strict=True)]
    ms = round_trip_percentiles_ms(counts) or {}
    return {"edges_s": list(ROUND_TRIP_EDGES_S), "counts": counts, "requests": sum(counts),
            **{f"p{q}_ms": ms.get(f"p{q}") for q in ROUND_TRIP_PERCENTILES}}


def _ms(x: float | None) -> str:
    """Milliseconds for the round-trip line: ``"-"`` for None, ``">= 1,049 ms"`` in the open
    bucket, else 3 decimals under 1 ms (0.832), 1 under 100 (12.3), none from 100 (1,024)."""
    if x is None:
        return "-"
    if x >= ROUND_TRIP_EDGES_S[-1] * 1e3:
        return f">= {x:,.0f} ms"
    return f"{x:.3f} ms" if x < 1 else f"{x:.1f} ms" if x < 100 else f"{x:,.0f} ms"


def round_trip_line(label: str, figures: dict[str, Any]) -> str:
    """The printed line of :func:`round_trip_figures` for the phase ``label``. Example:
    ``inference round trip, sampling: p50 0.832 ms, p90 3.4 ms, p99 12.3 ms (12,345 requests)``."""
    return (f"inference round trip, {label}: "
            + ", ".join(f"p{q} {_ms(figures.get(f'p{q}_ms'))}" for q in ROUND_TRIP_PERCENTILES)
            + f" ({figures['requests']:,} request{'s' if figures['requests'] != 1 else ''})")


def cpu_shares(cpu_s: dict[tuple[str, int], float], seconds: float, cores: int) -> dict[str, float]:
    """Fractions of the machine's cores over a window of ``seconds``, by role (:data:`ROLES`),
    plus ``other`` (the machine's busy time not used by these processes, when
    ``("machine", 0)`` is given) and ``idle`` (1 - all busy; from ``("machine-total", 0)`` when given).

    Example: actors 12 + 10 s, policy 20 s, trainer 60 s, controller 2 s over 50 s on 2 cores ->
    actor 0.22, policy 0.2, trainer 0.6, controller 0.02; machine busy 98 of 100 s -> other 0.0,
    idle 0.02.
    """
    capacity = cores * seconds
    shares = {role: sum(v for (r, _), v in cpu_s.items() if r == role) / capacity for role in ROLES}
    ours = sum(shares.values())
    if ("machine", 0) in cpu_s:
        total = cpu_s.get(("machine-total", 0)) or capacity
        busy = cpu_s[("machine", 0)] / total
        shares["other"] = max(0.0, busy - ours)
        shares["idle"] = max(0.0, 1.0 - max(busy, ours))
    else:
        shares["idle"] = max(0.0, 1.0 - ours)
    return shares


def _pct(x: float) -> str:
    return f"{int(x * 100 + 0.5)}%"


def bottleneck_words(shares: dict[str, float], health: str | None, cores: int) -> str:
    """What limits Zoo in this window, in words, from the CPU shares and the live display's
    bottleneck sentence (``health``, :func:`zoo.core.health.bottleneck`).

    In this order: idle >= :data:`IDLE_NOTE`: Zoo's pipeline waits (the cores are not the limit);
    other processes >= :data:`OTHER_NOTE`: the cores were shared; else CPU-bound, naming the role
    with the largest share.
    """
    idle, other = shares.get("idle", 0.0), shares.get("other", 0.0)
    top = max(ROLES, key=lambda r: shares.get(r, 0.0))
    roles = ", ".join(f"{r} {_pct(shares.get(r, 0.0))}" for r in ROLES)
    if idle >= IDLE_NOTE:
        text = (f"Zoo leaves {_pct(idle)} of the {cores} cores idle, so its pipeline waits rather than "
                f"the CPU running out (core use: {roles})")
    elif other >= OTHER_NOTE:
        text = (f"the cores were shared: other processes used {_pct(other)} of them, Zoo got the rest "
                f"({roles}); the {top} took the most")
    else:
        text = (f"CPU-bound: the {cores} cores are busy ({_pct(1 - idle)}), most of it in the {top} "
                f"({_pct(shares.get(top, 0.0))}; {roles})")
    return text + (f"; live display: {health}" if health else "")


def phase_figures(run: Any, per_update: int, sample_length: int, agents: int, frame_skip: int, cores: int,
                  ceiling: float | None, bound: float | None) -> dict[str, Any]:
    """The figures of one measured Zoo run (:class:`zoo.bench.measure.RunResult`) as plain data."""
    seconds = run.t1 - run.t0
    env = rate(run.start, run.end, "env_steps", seconds)
    trained = (trained_steps(run.end, per_update) - trained_steps(run.start, per_update))
    shares = cpu_shares(run.cpu_s, seconds, cores)
    live = run.live or {}
    health = (live.get("bottleneck") or {}).get("text")
    return {
        "window_s": seconds, "env_steps_per_s": env, "trained_env_steps_per_s": trained / seconds,
        "frames_per_s": env * frame_skip,
        "dropped_fraction": dropped_fraction(run.start, run.end, trained, sample_length, agents),
        "of_ceiling": env / ceiling if ceiling else None, "of_bound": env / bound if bound else None,
        "cpu_shares": shares, "health": health, "bottleneck": bottleneck_words(shares, health, cores),
        "policy_batch_rows": _batch_rows(live.get("workers", ())),
        "replay": replay_figures(run.start, run.end, seconds),
        "round_trip": round_trip_figures(getattr(run, "live_start", None), run.live),
    }


def _batch_rows(rows: Iterable[dict[str, Any]]) -> float | None:
    got = [r["batch_rows"] for r in rows if r.get("role") == "policy" and r.get("batch_rows")]
    return sum(got) / len(got) if got else None


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def replay_lines(replay: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The printed lines of :func:`replay_figures` (end to end), with the configured
    ``samples_per_insert`` and ``batch_size`` from ``config`` when given."""
    per = config.get("batch_size")
    spi = config.get("samples_per_insert")
    ratio = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    waits = replay["rate_limit_waits"]
    return [
        f"replay, end to end: {replay['gradient_steps_per_s']:,.1f} gradient steps/s"
        + (f" of {per} samples" if per else "") + f" ({replay['updates_per_s']:,.2f} updates/s), "
        f"{ratio(replay['replayed_per_env_step'])} replayed samples per env step, "
        f"{ratio(replay['replayed_per_inserted'])} per inserted" + (f" (configured {spi:g})" if spi else ""),
        f"rate limiter, end to end: the learner waited for inserted data before {waits} "
        f"batch{'es' if waits != 1 else ''} "
        f"({replay['rate_limit_wait_s']:.1f} s, {_pct(replay['wait_fraction'])} of the window); complete batches "
        f"waited {replay['rate_limit_held_s']:.1f} s for the learner ({_pct(replay['held_fraction'])}: the actors "
        "held back)"]


def format_table(result: dict[str, Any]) -> str:
    """The printed report of ``zoo bench`` from its JSON result (see :func:`zoo.commands.bench`)."""
    lines = [f"zoo bench: {result['workload']} - {result['summary']}",
             f"machine: {result['machine']}",
             f"{'':34}{'env steps/s':>12}{'trained/s':>11}{'frames/s':>10}{'of ceiling':>12}{'of CPU bound':>14}"
             f"{'dropped':>9}"]
    ceiling, bound = result.get("ceiling"), result.get("bound")
    if ceiling:
        lines.append(f"{'env ceiling (raw, ' + str(ceiling['processes']) + ' processes)':34}"
                     f"{_num(ceiling['env_steps_per_s']):>12}{'':>11}"
                     f"{_num(ceiling['env_steps_per_s'] * result['frame_skip']):>10}{'100%':>12}")
    if bound:
        lines.append(f"{'CPU-work bound (env + inference)':34}{_num(bound['env_steps_per_s']):>12}{'':>11}"
                     f"{_num(bound['env_steps_per_s'] * result['frame_skip']):>10}{'':>12}{'100%':>14}")
    if bound and bound.get("trained_env_steps_per_s"):
        lines.append(f"{'CPU-work bound (+ training)':34}{'':>12}{_num(bound['trained_env_steps_per_s']):>11}")
    for key, label in (("sampling", "zoo sampling (no training)"), ("train", "zoo end to end (training)")):
        p = result.get(key)
        if not p:
            continue
        pct = lambda x: "-" if x is None else _pct(x)  # noqa: E731
        lines.append(f"{label:34}{_num(p['env_steps_per_s']):>12}"
                     f"{_num(p['trained_env_steps_per_s']) if key == 'train' else '':>11}"
                     f"{_num(p['frames_per_s']):>10}{pct(p['of_ceiling']):>12}{pct(p['of_bound']):>14}"
                     f"{pct(p['dropped_fraction']) if key == 'train' else '':>9}")
    if bound:
        lines.append(f"CPU work per env step: env {bound['env_ms_per_step']:.3f} core-ms, inference "
                     f"{bound['inference_ms_per_step']:.3f} core-ms (policy batch {bound['batch']} rows, 1 thread)"
                     + (f", training {bound['train_ms_per_step']:.3f} core-ms ({bound['train_threads']} trainer "
                        f"thread{'s' if bound['train_threads'] != 1 else ''}"
                        + (f", {bound['train_precision']}" if bound.get("train_precision") else "") + ")"
                        if bound.get("train_ms_per_step") else ""))
        train = result.get("train")
        if train and bound.get("trained_env_steps_per_s"):
            share = train["trained_env_steps_per_s"] / bound["trained_env_steps_per_s"]
            lines.append(f"trained env steps/s end to end: {_pct(share)} of the CPU-work bound with training")
        if bound.get("train_note"):
            lines.append(f"training cost: {bound['train_note']}")
    train = result.get("train")
    replay = (train or {}).get("replay")
    if replay:
        lines.extend(replay_lines(replay, result.get("replay_config") or {}))
    for phase, reason in (result.get("errors") or {}).items():
        lines.append(f"{phase} failed: {reason}")
    for key, label in (("sampling", "sampling"), ("train", "end to end")):
        p = result.get(key)
        if not p:
            continue
        shares = p["cpu_shares"]
        lines.append(f"CPU share, {label} ({p['window_s']:.0f} s window): "
                     + ", ".join(f"{k} {_pct(v)}" for k, v in shares.items()))
        lines.append(f"bottleneck, {label}: {p['bottleneck']}")
        if p.get("round_trip"):
            lines.append(round_trip_line(label, p["round_trip"]))
    return "\n".join(lines)
