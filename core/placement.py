"""Placement: the host every worker runs on, and the transport each stream resolves to.

The launcher says where it will start each worker (:meth:`zoo.core.launcher.Launcher.host_of`;
the ``local`` launcher: this host). From that the controller resolves, once per run and
before any worker starts, the transport of every stream (:func:`resolve_streams`): a stream
configured with a *choosing* transport — one whose factory has a
``choose(hosts, options) -> (transport, options)`` attribute, like ``auto`` — gets the
transport that fits the hosts of its ends; any other keeps its configured one. The workers
receive the resolved choice in their :class:`~zoo.core.workers.base.WorkerContext`.

The ends of each stream are the worker kinds that listen on it or connect to it
(:meth:`zoo.core.graph.Graph.stream_roles`, from each kind's declaration, :mod:`zoo.core.kinds`);
with the built-in kinds:

=============  ================================  ===============================================
stream         kinds at its ends                 e.g. auto resolves to
=============  ================================  ===============================================
inference      actor, policy                     shm when every actor and policy worker share a host
sample         actor, trainer                    nng over tcp when one actor runs elsewhere
parameter      trainer, policy
control        the controller and every worker   nng (ipc on one host, tcp across hosts)
=============  ================================  ===============================================

With ``policy.inline`` (no policy worker) the parameter stream joins the trainer and the
actors, and the inference stream has no ends; a plugin's kind that subscribes to the
parameter stream joins its ends.

:func:`write_placement` records the placement of every worker (role, index, host, pid) and
each stream's resolved transport in ``<run_dir>/graph.json`` next to the worker graph
(:mod:`zoo.core.graph`), so one file says who runs where and what connects them;
:class:`GraphFile` keeps it true while the run goes on (pids learnt late, the trainers' backend).
"""
from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from zoo.core.streams import CONTROL, CONTROL_OPTIONS, CONTROL_TRANSPORT, STREAMS, transport_options

CONTROLLER = ("controller", 0)
"""The controller's entry in a placement (it holds the control stream's listener)."""


@dataclass
class Place:
    """Where one worker (or the controller, role ``"controller"``) runs."""

    role: str
    index: int
    host: str
    pid: int | None = None


def plan(launcher: Any, workers: Iterable[tuple[str, int]], controller_host: str | None = None) -> list[Place]:
    """The placement before anything starts: the controller on ``controller_host`` (default
    this host), each worker on ``launcher.host_of(role, index)``."""
    here = controller_host or getattr(launcher, "controller_host", socket.gethostname)()
    return [Place(*CONTROLLER, here)] + [Place(role, index, launcher.host_of(role, index)) for role, index in workers]


def stream_hosts(places: Iterable[Place], stream: str, ends: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """The distinct hosts of the workers at the ends of ``stream``, sorted. ``ends``: the kinds
    at each stream's ends (:meth:`~zoo.core.graph.Graph.stream_roles`), default those of the
    built-in kinds with a policy worker; the control stream's ends are every place (the
    controller and every worker)."""
    places = list(places)
    if stream == CONTROL:
        return sorted({p.host for p in places})
    if ends is None:
        from zoo.core.graph import Graph

        ends = Graph(1, 1, 1).stream_roles()
    roles = ends[stream]
    return sorted({p.host for p in places if p.role in roles})


def resolve_streams(registry: Any, cfg: Any, places: list[Place]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{stream: (transport name, typed options)}`` for the three streams and ``control``.

    A stream's configured transport is kept unless its factory has ``choose``, which is
    then called with :func:`stream_hosts` and the stream's options. The control stream is
    ``nng`` (:data:`~zoo.core.streams.CONTROL_TRANSPORT`), over ``ipc`` when the controller
    and every worker share a host and over ``tcp`` (listening on every interface) otherwise.

    Raises:
        ConfigError: a stream's options do not fit its transport (checked before, in
            :func:`zoo.core.config.build_config`).
    """
    from zoo.core.graph import Graph
    from zoo.core.kinds import worker_kinds

    ends = Graph.from_config(cfg, worker_kinds(registry)).stream_roles()
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for stream in STREAMS:
        name = getattr(cfg.streams, stream).transport
        options = transport_options(registry, cfg, stream)
        choose = getattr(registry.get("transport", name).load(), "choose", None)
        out[stream] = choose(stream_hosts(places, stream, ends), options) if callable(choose) else (name, options)
    cross = len(stream_hosts(places, CONTROL)) > 1
    out[CONTROL] = (CONTROL_TRANSPORT, {**CONTROL_OPTIONS, **({"scheme": "tcp", "host": "0.0.0.0"} if cross else {})})
    return out


def placement_record(places: list[Place], streams: dict[str, tuple[str, dict[str, Any]]],
                     configured: dict[str, str], ends: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The ``controller`` and ``streams`` parts of ``graph.json``:
    ``{"controller": {"host", "pid"}, "streams": {stream: {"configured", "transport",
    "options", "hosts"}}}``.

    ``configured``: each stream's transport as configured (``auto`` before resolution; the
    control stream's is its resolved one). Options whose name contains ``token`` are
    written as ``"***"``.
    """
    ctl = next((p for p in places if (p.role, p.index) == CONTROLLER), None)
    return {
        "controller": None if ctl is None else {"host": ctl.host, "pid": ctl.pid},
        "streams": {s: {"configured": configured.get(s, name), "transport": name,
                        "options": {k: ("***" if "token" in k else v) for k, v in options.items()},
                        "hosts": stream_hosts(places, s, ends)}
                    for s, (name, options) in streams.items()},
    }


def write_placement(run_dir: str, cfg: Any, places: list[Place], streams: dict[str, tuple[str, dict[str, Any]]],
                    launcher: dict[str, Any] | None = None, run_id: str | None = None) -> str:
    """Write the worker graph of ``cfg`` (:meth:`zoo.core.graph.Graph.to_dict`) with
    :func:`placement_record` to ``<run_dir>/graph.json`` atomically; each worker entry also
    gets its ``host`` and ``pid`` (of its first process), and ``launcher`` (when given) is
    the ``launcher`` entry: what the launcher chose (its ``describe()``, e.g. the ``ray``
    launcher's GPU shares and GPU ids) and the data-parallel trainers' backend; ``run_id``
    (when given) the run's id, which names everything the run holds outside its folder
    (``/dev/shm/zoo-<run id>.*``, ``<tmp>/zoo-<run id>``, resolver keys ``<run id>/...``).
    Returns the path."""
    from zoo.core.graph import Graph

    g = Graph.from_config(cfg)
    graph = g.to_dict()
    configured = {s: getattr(cfg.streams, s).transport for s in STREAMS}
    where = {(p.role, p.index): p for p in places}
    record = dict(graph)
    record["workers"] = [{**w, "host": where[(w["role"], w["index"])].host, "pid": where[(w["role"], w["index"])].pid}
                         if (w["role"], w["index"]) in where else w for w in graph.get("workers", [])]
    record.update(placement_record(places, streams, configured, g.stream_roles()))
    if launcher is not None:
        record["launcher"] = launcher
    if run_id is not None:
        record["run_id"] = run_id
    path = os.path.join(run_dir, "graph.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


class GraphFile:
    """``<run_dir>/graph.json`` of a running run, kept true while it runs (the controller calls
    one method at each point):

    - :meth:`started`, once the workers are started: every place gets its pid (the
      controller's own; each worker's from its handle, None where the launcher does not know
      it yet, e.g. a Ray actor not yet up) and the file is written;
    - :meth:`on_message`, for each control message: a ``group`` message (trainer rank 0: the
      ``backend``, ``devices`` and ``gpus`` of the data-parallel trainers) becomes the
      launcher entry's ``trainers``, and a heartbeat's ``pid`` (int) fills in its worker's pid
      where the file has none; either rewrites the file;
    - :meth:`complete`, at most every ``every_s`` seconds: the pids still missing are taken
      from the handles that know them now, without waiting.

    The file is :func:`write_placement`'s, with the launcher entry
    ``{"name": cfg.launcher, "trainers"?, **launcher.describe()}`` and the run id. ``places``
    is shared with the caller and updated in place.
    """

    def __init__(self, run_dir: str, cfg: Any, places: list[Place], streams: dict[str, tuple[str, dict[str, Any]]],
                 launcher: Any, run_id: str) -> None:
        self.run_dir, self.cfg, self.places, self.streams = run_dir, cfg, places, streams
        self.launcher, self.run_id = launcher, run_id
        self.trainer_group: dict[str, Any] | None = None  # the data-parallel trainers' backend, once rank 0 says
        self.checked = float("-inf")  # time.monotonic() of complete()'s last look at the handles
        self.by_key = {(p.role, p.index): p for p in places}  # a heartbeat's place in one lookup

    def write(self) -> None:
        """(Re)write ``graph.json`` from the places as they are now."""
        entry: dict[str, Any] = {"name": self.cfg.launcher, **getattr(self.launcher, "describe", dict)()}
        if self.trainer_group is not None:
            entry["trainers"] = self.trainer_group
        write_placement(self.run_dir, self.cfg, self.places, self.streams, launcher=entry, run_id=self.run_id)

    def started(self, handles: Mapping[tuple[str, int], Any]) -> None:
        """Record the pids once the workers of ``handles`` (``(role, index)`` -> handle) are
        started, and write the file."""
        for place in self.places:
            handle = handles.get((place.role, place.index))
            place.pid = os.getpid() if place.role == "controller" else getattr(handle, "pid", None)
        self.write()

    def on_message(self, meta: dict[str, Any]) -> None:
        """Take what ``graph.json`` records from one control message (see the class doc)."""
        if meta.get("type") == "group":
            self.trainer_group = {k: meta.get(k) for k in ("backend", "devices", "gpus")}
            self.write()
        elif meta.get("type") == "heartbeat" and isinstance(meta.get("pid"), int):
            place = self.by_key.get((meta.get("role"), meta.get("index")))  # type: ignore[arg-type]
            if place is not None and place.pid is None:
                place.pid = meta["pid"]
                self.write()

    def complete(self, handles: Mapping[tuple[str, int], Any], every_s: float = 1.0) -> None:
        """At most every ``every_s`` seconds: fill in the pids the file still lacks from
        ``handles`` (``(role, index)`` -> handle), without waiting, and rewrite the file if any
        was found."""
        now = time.monotonic()
        if now - self.checked < every_s or all(p.pid is not None for p in self.places):
            return
        self.checked = now
        found = False
        for place in self.places:
            handle = handles.get((place.role, place.index))
            pid = None if place.pid is not None or handle is None else known_pid(handle)
            if pid is not None:
                place.pid, found = pid, True
        if found:
            self.write()


def known_pid(handle: Any) -> int | None:
    """A worker handle's pid if its launcher knows it now, without waiting: the handle's
    ``known_pid`` where it has one (a Ray actor's ``pid`` may wait for the actor to start),
    else its ``pid``."""
    if hasattr(type(handle), "known_pid"):
        return handle.known_pid
    return getattr(handle, "pid", None)
