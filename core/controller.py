"""The controller: builds the worker graph from one experiment config, starts every worker
through the run's launcher (``cfg.launcher``, a plugin: :mod:`zoo.core.launcher`; ``local``
spawns processes), watches them (:mod:`zoo.core.supervision`) and stops them.

Graph: the workers of every registered worker kind (:mod:`zoo.core.kinds`; built in:
``actors.count`` actor workers, ``policy.count`` policy workers and ``trainer.count``
trainers, :mod:`zoo.core.graph`), joined by the inference, sample and parameter streams
(:mod:`zoo.core.streams`); every worker
reports to the controller over the control stream (heartbeats, status, errors,
warnings: printed to stderr, rate-limited by :func:`show_warning`).

Failed workers are restarted as their kind allows (``supervision.*``, :mod:`zoo.core.supervision`);
each restart is printed, written to ``metrics.jsonl`` as a ``restart`` row and handed to the
display's ``record_restart(role, index, reason)`` when it has one.

Exit codes of :func:`run`: 0 when the trainer reached the budget, 1 when a worker failed
beyond its restarts (its role, index and traceback are printed), 130 on Ctrl-C (SIGINT),
143 on SIGTERM, 129 on SIGHUP: each of these signals stops the run the same way. In every
case the workers are stopped (:meth:`Supervisor.stop_all`: the trainer finishes its update
and writes its checkpoint and ``end`` row), the run's transport files and resolver keys are removed, and
``status.json`` records the outcome (:mod:`zoo.core.rundir`) before :func:`run` returns.
"""
from __future__ import annotations

import copy
import functools
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from zoo.core.checkpoint import checkpoint_dir, remove_stale_tmp
from zoo.core.env import EnvSpec
from zoo.core.health import Health
from zoo.core.policy_status import PolicyStatuses
from zoo.core.rundir import (
    RunStatus,
    append_missing_restarts,
    append_row,
    claim_run_dir,
    launch_failed,
    stop_reasons,
    what_was_saved,
)
from zoo.core.stopping import (  # noqa: F401
    STOPS,
    StopRequested,
    checkpoint_on_disk,
    kept_checkpoint,
    raise_lost_stop,
    second_ctrl_c_stops_now,
)
from zoo.core.stopping import ignoring_stop_signals as _ignoring_stop_signals
from zoo.core.stopping import signals_stop_the_run as _signals_stop_the_run
from zoo.core.supervision import STOP_GRACE_S, Restart, Supervisor, WorkerCrashed  # noqa: F401 (re-exported)
from zoo.core.workers.base import WorkerContext

POLL_S = 0.1
WARNING_REPEAT_S = 60.0
"""A ``warning`` control message with the same (role, index, key) is printed at most this often."""


def show_warning(meta: dict[str, Any], shown: dict[tuple, float], now: float) -> bool:
    """Print a worker's ``warning`` control message to stderr, rate-limited; True if printed.

    ``meta``: ``{"role", "index", "key", "message"}`` (``key`` names the kind of warning;
    the message itself when absent). ``shown`` maps (role, index, key) to when it was
    last printed (``now``: monotonic seconds) and is updated.
    """
    key = (meta.get("role"), meta.get("index"), meta.get("key") or meta.get("message"))
    if key in shown and now - shown[key] < WARNING_REPEAT_S:
        return False
    shown[key] = now
    print(f"zoo: warning from {meta.get('role')} worker {meta.get('index')}: {meta.get('message', '')}",
          file=sys.stderr, flush=True)
    return True


def prepare_run_dir(cfg) -> str:
    """Claim ``<runs_dir>/<name>/`` atomically (:func:`~zoo.core.rundir.claim_run_dir`: a taken
    default name gets a suffix, ``cfg.name`` is updated; a taken explicit name raises
    FileExistsError), write the resolved config and the worker graph (``graph.json``)."""
    from zoo.core.config import config_to_dict
    from zoo.core.graph import write_graph

    run_dir = claim_run_dir(cfg)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config_to_dict(cfg), f, indent=2, default=str)
    write_graph(cfg, run_dir)
    return run_dir


class Controller:
    """Owns the streams of one run and, through a launcher (:mod:`zoo.core.launcher`) and the
    :class:`~zoo.core.supervision.Supervisor`, its worker processes."""

    curriculum_stage = -1
    """The run's curriculum stage, which workers (re)started now begin at (docs/curriculum.md); -1: none."""

    def __init__(self, cfg, spec: EnvSpec, run_dir: str) -> None:
        from zoo.core.graph import Graph
        from zoo.core.kinds import worker_kinds
        from zoo.core.launcher import launcher_for
        from zoo.core.placement import GraphFile, plan, resolve_streams
        from zoo.core.plugins import get_registry
        from zoo.core.resolver import resolver_from_config
        from zoo.core.streams import STREAMS, transport_for

        self.cfg, self.spec, self.run_dir = cfg, spec, run_dir
        self.run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        registry = get_registry()
        self.resolver = resolver_from_config(registry, cfg)  # every listener publishes its address here
        self.graph = Graph.from_config(cfg, worker_kinds(registry))
        launcher = launcher_for(registry, cfg)
        self.places = plan(launcher, self.graph.workers())  # where each worker will run
        self.streams = resolve_streams(registry, cfg, self.places)  # e.g. auto -> shm on one host
        self.transports = []
        try:  # a transport refusing its settings (e.g. a bad ZOO_* variable) leaves nothing behind
            for stream in (*STREAMS, "control"):
                self.transports.append(transport_for(registry, cfg, stream, self.run_id, create=True,
                                                     choice=self.streams[stream], resolver=self.resolver))
            self.control = self.transports[-1].puller("control")
            self.supervisor = Supervisor(launcher, self.context, cfg.supervision, kinds=self.graph.kinds,
                                         finishers=self.finishers())
        except BaseException:
            self._clean_up()
            raise
        self.launcher = launcher
        self.graph_file = GraphFile(run_dir, cfg, self.places, self.streams, launcher, self.run_id)
        self.stopped = False
        # the run's curriculum stage (docs/curriculum.md): what (re)started workers begin at; -1: no curriculum.
        # A resumed run's: its last curriculum row (the trainer's checkpoint then says it with the parameters).
        self.curriculum_stage = -1
        if getattr(cfg, "curriculum", None) is not None and cfg.curriculum.on:
            from zoo.core.curriculum import last_stage

            self.curriculum_stage = last_stage(os.path.join(run_dir, "metrics.jsonl")) if cfg.resume else 0
        self.restart_rows: list[dict[str, Any]] = []  # every restart row written, for restore_restart_rows
        self.rows_checked = 0  # the trainer attempt whose cut rows were restored

    @functools.cached_property
    def graph(self) -> Any:
        """The run's :class:`~zoo.core.graph.Graph` (every registered worker kind; set at construction)."""
        from zoo.core.graph import Graph

        return Graph.from_config(self.cfg)

    def context(self, role: str, index: int, attempt: int) -> WorkerContext:
        """What worker ``(role, index)`` is started from: its kind's entry, its ``attempt``-th
        process (a restarted worker of a ``from-checkpoint`` kind, the trainer, continues from
        the run's last checkpoint: ``cfg.resume``, as ``zoo resume``)."""
        kind = self.graph.kind(role)
        cfg, spec, policy, local = self.cfg, self.spec, "", -1
        view_spec: EnvSpec | None = None
        found = self.graph.policy_of_worker(role, index) if self.graph.named else None
        if found is not None:  # a named policy's worker runs on that policy's view of the config
            from zoo.core.policies import policy_view

            pol, local = found
            cfg = policy_view(cfg, cfg.policies, pol.name)
            view_spec, policy = cfg.spec, pol.tag
            spec = view_spec if view_spec is not None else spec
        if kind.restart == "from-checkpoint" and attempt > 0:
            cfg = copy.copy(cfg)
            cfg.resume = (self.cfg.resume or 0) + attempt
        return WorkerContext(role, index, cfg, spec, self.run_id, self.run_dir, attempt=attempt, entry=kind.entry,
                             controller_pid=os.getpid(), controller_host=socket.gethostname(),
                             policy=policy, local=local, streams=self.streams,
                             curriculum_stage=self.curriculum_stage)

    def follow_stage(self, meta: dict[str, Any]) -> None:
        """Take the curriculum stage of a ``curriculum`` or ``status`` message from the lead trainer:
        workers started from now on (restarted actors) begin at it."""
        stage = meta.get("curriculum_stage")
        if self.curriculum_stage >= 0 and isinstance(stage, int):
            self.curriculum_stage = stage

    def start(self) -> None:
        self.supervisor.start_all(self.graph.workers())
        self.graph_file.started(self.supervisor.handles)

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        """Control messages received within ``timeout`` seconds (each also goes to the supervisor
        and to ``graph.json``: :class:`~zoo.core.placement.GraphFile`)."""
        out = []
        msg = self.control.recv(timeout)
        while msg is not None:
            meta = msg[1]
            self.supervisor.on_message(meta)
            out.append(meta)
            self.graph_file.on_message(meta)
            msg = self.control.recv(0)
        return out

    def finishers(self) -> list[tuple[str, int]]:
        """The workers whose exit with 0 ends the run: trainer 0, or with named policies every
        trainable policy's rank 0 (docs/policies.md, "When the run is done")."""
        lead = self.graph.lead()
        if not self.graph.named:
            return [lead]
        return [(lead[0], p.first_trainer) for p in self.graph.layout if p.trainers]

    def done_policies(self) -> set[str]:
        """The policies (their endpoint tags; "" the implicit one) whose ``done`` ends the run."""
        return {p.tag for p in self.graph.layout if p.trainers}

    def trainer_finished(self) -> bool:
        return self.supervisor.trainer_finished()

    def supervise(self) -> list[Restart]:
        """Restarts decided now (see :meth:`Supervisor.check`); raises :class:`WorkerCrashed`."""
        return self.supervisor.check(self.poll)

    def report_restart(self, r: Restart, display: Any, env_steps: int | None) -> None:
        """Print restart ``r``, add its ``restart`` row to ``metrics.jsonl``, tell the display."""
        limit = self.supervisor.allowed(self.supervisor.workers[(r.role, r.index)])
        print(f"zoo: {r.role} worker {r.index} failed ({r.reason}); restarting it in {r.delay_s:g} s "
              f"(restart {r.restarts} of {limit})" + (f"\n{r.detail}" if r.detail else ""), file=sys.stderr, flush=True)
        row = {"type": "restart", "role": r.role, "index": r.index, "reason": r.reason, "time": time.time(),
               "restarts": r.restarts, "attempt": r.attempt, "env_steps": env_steps}
        append_row(os.path.join(self.run_dir, "metrics.jsonl"), row)
        self.restart_rows.append(row)
        record = getattr(display, "record_restart", None)
        if callable(record):
            record(r.role, r.index, r.reason)

    def restore_restart_rows(self) -> None:
        """A restarted trainer (the leading worker) cuts ``metrics.jsonl`` back to its checkpoint's
        length (no duplicated update row); once it has started, the ``restart`` rows it cut are
        appended again."""
        w = self.supervisor.workers.get(self.supervisor.lead)
        if w is None or w.attempt == self.rows_checked or w.last_seen is None or w.busy == "start-up":
            return
        self.rows_checked = w.attempt
        append_missing_restarts(os.path.join(self.run_dir, "metrics.jsonl"), self.restart_rows)

    def stop(self, now: Callable[[], bool] | None = None) -> bool:
        """Stop every worker (:meth:`Supervisor.stop_all`; ``now()`` True: kill them at once, see
        :mod:`zoo.core.stopping`), then remove the run's transport resources (idempotent). Returns
        whether the workers were killed at once (then any half-written checkpoint is removed)."""
        if self.stopped:
            return False
        self.stopped = True

        def waiting(limit_s: float) -> None:
            print(f"zoo: waiting for the trainer to finish its update and write its checkpoint (at most {limit_s:g} s, "
                  "supervision.stop_timeout_s; Ctrl-C again stops now)", file=sys.stderr, flush=True)

        abandoned = self.supervisor.stop_all(self.poll, waiting, now)
        if abandoned:
            for tag in self.done_policies():  # each trainable policy's folder (named: checkpoints/<policy>)
                remove_stale_tmp(checkpoint_dir(self.run_dir, tag))
        self.control.close()
        self._clean_up()
        return abandoned

    def _clean_up(self) -> None:
        """Remove the run's transport resources and every key it published (nothing is left behind)."""
        for t in self.transports:
            t.cleanup()
        self.resolver.clear(self.run_id)


RATE_WINDOW_S = 30.0
"""Seconds of the trailing window over which the status line's env steps/s are taken (see
:class:`StatusPacer`)."""


class StatusPacer:
    """When the controller shows the trainer's status, and the env-step rate it adds.

    A status is shown once, when it is new and at least ``interval_s`` seconds after the
    previous one (or when the run is done): a trainer that reports less often than that
    (hide-and-seek updates take minutes) repeats no lines.

    The rate is taken over a trailing window of at least :data:`RATE_WINDOW_S` seconds (or
    ``interval_s`` if longer): env steps since the newest shown status with progress that is
    at least that old (the oldest one while the run is younger than the window), over the time
    since. Env steps arrive in whole updates (Pong: 1,024 per update of about 2.5 s), so a rate
    over one 5 s interval jumped between 204 and 408 env steps/s while the run averaged 334; over
    30 s an update more or less moves it by a twelfth at most. It is recomputed only when at
    least ``interval_s`` passed since the last status with progress (the final status, shown at
    once, keeps the last rate instead of a burst): ``env_steps_per_s`` and ``frames_per_s``
    (x ``frame_skip``) are added to the status, and ``trained_env_steps_per_s`` over the same
    window when the status carries ``trained_env_steps``.
    """

    def __init__(self, interval_s: float, frame_skip: int) -> None:
        self.interval_s, self.frame_skip = interval_s, frame_skip
        self.window_s = max(RATE_WINDOW_S, interval_s)
        self.latest: dict[str, Any] | None = None
        self.fresh = False
        self.last_shown = float("-inf")
        self.points: list[tuple[float, int, int]] = []  # (time, env steps, trained) of shown statuses with progress
        self.rate: float | None = None
        self.trained_rate: float | None = None
        self.shown_steps: int | None = None

    def offer(self, status: dict[str, Any]) -> None:
        self.latest, self.fresh = status, True

    def due(self, now: float, done: bool = False) -> dict[str, Any] | None:
        """The status to show now (``now``: ``time.monotonic()`` seconds), or None."""
        status = self.latest
        if not self.fresh or status is None or (now - self.last_shown < self.interval_s and not done):
            return None
        steps = status["env_steps"]
        trained = status.get("trained_env_steps")
        if not self.points:
            self.points.append((now, steps, trained or 0))
        elif steps != self.points[-1][1] and now - self.points[-1][0] >= self.interval_s:
            old = [p for p in self.points if now - p[0] >= self.window_s]
            ref = old[-1] if old else self.points[0]
            self.points = self.points[self.points.index(ref):] + [(now, steps, trained or 0)]
            self.rate = (steps - ref[1]) / (now - ref[0])
            if trained is not None:
                self.trained_rate = (trained - ref[2]) / (now - ref[0])
        if self.rate is not None and steps != self.shown_steps:  # no rate on a status without progress
            status.update(env_steps_per_s=self.rate, frames_per_s=self.rate * self.frame_skip)
            if trained is not None and self.trained_rate is not None:
                status["trained_env_steps_per_s"] = self.trained_rate
        self.last_shown, self.shown_steps, self.fresh = now, steps, False
        return status


def served_versions(graph: Any, health: Health) -> dict[str, int]:
    """``{frozen policy: the version its first policy worker serves}`` for the frozen named
    policies whose policy worker has reported it (inline ones have none): their row on the
    live display shows it (:class:`~zoo.core.policy_status.PolicyStatuses`)."""
    if not getattr(graph, "named", False):
        return {}
    out = {}
    for p in graph.layout:
        if not p.trainable and p.policy_workers and (v := health.served_version(p.first_policy_worker)) is not None:
            out[p.name] = v
    return out


def run(cfg, spec: EnvSpec, on_status: Callable[[dict[str, Any]], None], run_dir: str | None = None) -> int:
    """Run one experiment to its budget; returns the process exit code (see module doc)."""
    run_dir = run_dir or prepare_run_dir(cfg)
    try:
        controller = Controller(cfg, spec, run_dir)
    except BaseException as exc:
        launch_failed(run_dir, exc)
        raise
    status = RunStatus(run_dir)
    status.start()
    pacer = StatusPacer(cfg.log.interval_s, spec.frame_skip)
    # named policies: the status shown merges every policy's latest (one row each on the display)
    graph = controller.graph
    statuses = PolicyStatuses({p.name: p.trainable for p in graph.layout} if getattr(graph, "named", False) else {})
    # live.json, the workers table and the bottleneck; supervision reports restarts to it
    health = Health(controller.graph.workers(), run_dir, cfg.log.interval_s, on_status)
    warnings_shown: dict[tuple, float] = {}
    outcome: tuple = ("crashed", 1, "the controller failed", None)
    with _signals_stop_the_run():
        try:
            controller.start()
            awaited = controller.done_policies()  # every trainable policy says done (named: its rank 0)
            finished: set[str] = set()
            reasons: list[str] = []  # the trainers' own, when stop_when ended their part early
            while True:
                raise_lost_stop()  # a Ctrl-C or SIGTERM that code it interrupted swallowed: stop now
                done = False
                for meta in controller.poll(POLL_S):
                    health.on_control(meta)
                    if meta["type"] == "heartbeat" and meta.get("role") == "policy" and statuses.policies:
                        if (again := statuses.serve(served_versions(graph, health))) is not None:
                            # a frozen policy's (an opponent's) newer version; the rates stay the last shown
                            rates = ("env_steps_per_s", "frames_per_s", "trained_env_steps_per_s")
                            pacer.offer({**{k: v for k, v in (pacer.latest or {}).items() if k in rates}, **again})
                    if meta["type"] in ("status", "curriculum"):
                        controller.follow_stage(meta)
                    if meta["type"] == "status":
                        statuses.served.update(served_versions(graph, health))
                        pacer.offer(statuses.offer(meta))
                    elif meta["type"] == "done":
                        finished.add(str(meta.get("policy", "")))
                        done = finished >= awaited
                        if meta.get("reason"):  # stop_when held (docs/looking-at-runs.md, "Stopping early")
                            reasons.append(str(meta["reason"]))
                    elif meta["type"] == "warning":
                        show_warning(meta, warnings_shown, time.monotonic())
                controller.graph_file.complete(controller.supervisor.handles)
                shown = pacer.due(time.monotonic(), done)
                if shown is not None:
                    health.show(shown)  # on to on_status
                health.tick()
                if done or controller.trainer_finished():
                    # a policy whose done was lost (its trainer exited 0 first): its end row says why
                    reasons += stop_reasons(run_dir, awaited - finished)
                    outcome = ("finished", 0, "; ".join(reasons) or "budget reached", None)
                    return 0
                for restart in controller.supervise():
                    controller.report_restart(restart, health, (pacer.latest or {}).get("env_steps"))
                controller.restore_restart_rows()
        except WorkerCrashed as crash:
            print(f"zoo: {crash.role} worker {crash.index} failed ({crash.reason}); stopping the run.\n"
                  f"{crash.detail}", file=sys.stderr, flush=True)
            outcome = ("crashed", 1, f"{crash.role} worker {crash.index} {crash.reason}",
                       {"role": crash.role, "index": crash.index, "detail": crash.detail})
            return 1
        except KeyboardInterrupt as stop:
            label, code = STOPS[getattr(stop, "signum", signal.SIGINT)]
            with second_ctrl_c_stops_now() as now:  # a second Ctrl-C kills every worker at once
                print(f"zoo: stopping ({label}): the trainer finishes its update and writes its checkpoint; "
                      f"Ctrl-C again to stop now (keeps {checkpoint_on_disk(run_dir)})", file=sys.stderr, flush=True)
                if controller.stop(now.is_set):
                    print(f"zoo: stopped now ({label}, then Ctrl-C again); every worker killed, the update under "
                          f"way abandoned; {kept_checkpoint(run_dir)}", file=sys.stderr, flush=True)
                    outcome = ("stopped", 130, f"{label}, then Ctrl-C again: update abandoned", None)
                    return 130
            print(f"zoo: interrupted ({label}); all workers stopped; {what_was_saved(run_dir)}",
                  file=sys.stderr, flush=True)
            outcome = ("stopped", code, label, None)
            return code
        except BaseException as exc:
            outcome = ("crashed", 1, f"the controller failed: {type(exc).__name__}: {exc}", None)
            raise
        finally:
            with _ignoring_stop_signals():  # nor may one during the normal end's clean-up
                controller.stop()
                health.close()
                status.end(*outcome)

