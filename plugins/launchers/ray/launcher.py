"""The ``ray`` launcher: every worker is a Ray actor process placed on a Ray cluster.

``zoo train ALGO --env ENV --launcher ray --ray-address ADDR`` runs the controller (this
process) as the Ray driver of the cluster at ``ADDR`` (``auto``: the cluster running on this
machine, as ``ray.init(address="auto")``; ``local``: a new one-node cluster for this run
alone; ``IP:PORT``: the head node's GCS). Options: ``--set launcher_options.<name>=value``
(:class:`RayOptions`). Ray carries no sample or parameter data: the streams are Zoo's
transports (the ``auto`` transport picks ``shm`` between workers of one Ray node and nng
over tcp between nodes) and addresses are found through the ``ray`` resolver (Ray's
key-value store), the default with this launcher.

Placement. Each worker asks for the resources of its role (:func:`role_resources`: one CPU;
a GPU more for a policy worker or trainer on ``cuda``, a whole one each where the cluster
has a GPU for every such worker, else shares of one (:func:`gpu_shares`); or what
``launcher_options.<role>_resources`` says, custom resources included). The launcher asks
Ray for one placement group holding one bundle per worker (:func:`placement_request`, in
graph order, strategy ``launcher_options.strategy``) and waits at most
``launcher_options.placement_timeout_s`` for it; a group Ray cannot place by then is an
error naming what is missing (:func:`explain_unplaced`), never a silent wait. Each worker's
node is then known before anything starts: :meth:`RayLauncher.host_of` returns
``"<node IP>/<first 12 hex digits of the Ray node id>"``, distinct per Ray node even where
several nodes share one host name or IP address (the loopback test cluster).

Processes. A worker's Ray actor (:class:`~zoo.plugins.launchers.ray.host.WorkerHost`) starts
the worker as its child process and delivers its signals (stop: SIGTERM, kill: SIGKILL);
one zero-CPU :class:`~zoo.plugins.launchers.ray.host.NodeAgent` per node checks the run
directory at start and removes what the run left on its node at the end. A worker whose
actor or node died ends with ``-9`` and a note naming the node
(:meth:`RayHandle.end_note`), which the supervisor adds to its failure. When the
controller dies, Ray ends the actors it owned and their workers leave the run by themselves.

Run directory. Trainer rank 0 writes ``metrics.jsonl``, TensorBoard files and checkpoints to
the run directory at the same absolute path on its node, and a restarted or resumed
trainer reads its checkpoint there: ``runs_dir`` must be a folder shared by the
controller's machine and the node of trainer rank 0 (NFS, or the same disk). The launcher
checks it at start (:meth:`RayLauncher.check_run_dir`) and refuses to start otherwise,
naming the node and the folder.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from zoo.core.launcher import Launcher, LaunchError, WorkerHandle

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
INSTALL = 'pip install "zoo-rl[ray]"'
PID_WAIT_S = 30.0
"""Longest the controller waits for the workers' pids (their Ray actors starting) when it first
asks for one: one wait for every worker started by then (:func:`fetch_info`)."""
ADVERTISE = "ZOO_ADVERTISE_HOST"
RELEASE_WAIT_S = 2.0
"""At the end of a run, how long the launcher waits for every worker it killed, all together."""
NODES_CACHE_S = 1.0
"""How long one answer of ``ray.nodes()`` is used for every worker's node check."""
TRAINER_GPU_SHARE = 0.6
"""A trainer's share of a GPU where the cluster has fewer GPUs than workers on CUDA
(:func:`gpu_shares`): more than half, so no two trainers share a GPU (NCCL needs one per rank)."""
CLEAN_TIMEOUT_S = 20.0
"""Longest the node agents' clean-up may take at the end of a run."""
NODE_DEATH_S = 30.0
"""After a worker's actor became unreachable, how long its end waits for Ray to say whether
its node died. Ray marks a dead node about 3 s after its raylet's connection drops or, when it
only stops answering, after its health checks fail (by default every 3 s, 5 in a row: about
15 s). A worker whose node is not yet marked dead by then is taken for a lost actor on a live
node and restarted into the same bundle, which on a dead node never starts (10 s here let a
CI run wait past 120 s after a node loss, 2026-12-02)."""


@dataclass
class RayOptions:
    """Options of the ``ray`` launcher (``--set launcher_options.<name>=value``; ``--ray-address``
    sets ``address``)."""

    address: str = "auto"
    """The Ray cluster: ``auto`` (the one running on this machine, or ``RAY_ADDRESS``),
    ``local`` (start a one-node cluster for this run) or the head's GCS address ``IP:PORT``."""
    strategy: str = "PACK"
    """Placement-group strategy: PACK (few nodes), SPREAD (many nodes), STRICT_PACK (one
    node), STRICT_SPREAD (one worker per node)."""
    placement_timeout_s: float = 60.0
    """Longest wait for Ray to place every worker before the run is refused (seconds)."""
    actor_resources: dict[str, float] | None = None
    """Ray resources of each actor worker, e.g. ``{'CPU': 2}`` (default ``{'CPU': 1}``)."""
    policy_resources: dict[str, float] | None = None
    """Of each policy worker (default ``{'CPU': 1}``, plus a GPU or a share of one with
    ``policy.device=cuda``: :func:`gpu_shares`)."""
    trainer_resources: dict[str, float] | None = None
    """Of each trainer (default ``{'CPU': 1}``, plus a GPU or a share of one with
    ``algo.device=cuda``: :func:`gpu_shares`)."""
    resources: dict[str, dict[str, float]] | None = None
    """Ray resources of each worker by kind, e.g. ``{'param-stats': {'CPU': 0.5}}`` for a
    plugin's kind (default: the kind's ``cpus``); wins over ``<role>_resources``."""
    log_to_driver: bool = False
    """Show the workers' stdout and stderr in this terminal (Ray's log forwarding); off: they
    stay in Ray's logs on each node (errors reach the controller anyway)."""

    def __post_init__(self) -> None:
        if not self.address:
            raise ValueError("address must be auto, local or the head's IP:PORT")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if not self.placement_timeout_s > 0:
            raise ValueError(f"placement_timeout_s must be > 0, got {self.placement_timeout_s!r}")
        given = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.name.endswith("_resources")]
        if self.resources is not None:
            if not isinstance(self.resources, dict) or not all(isinstance(v, dict) for v in self.resources.values()):
                raise ValueError("resources must map worker kinds to resources (e.g. "
                                 f"{{'param-stats': {{'CPU': 1}}}}), got {self.resources!r}")
            given += [(f"resources.{kind}", res) for kind, res in self.resources.items()]
        for name, res in given:
            if res is None:
                continue
            bad = {k: v for k, v in res.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0}
            if bad or not any(v > 0 for v in res.values()):
                raise ValueError(f"{name} must map resource names to numbers >= 0, at least one > 0 "
                                 f"(e.g. {{'CPU': 1}}), got {res!r}")


def _graph(cfg: Any) -> Any:
    """The run's worker graph (:class:`zoo.core.graph.Graph`, every registered kind)."""
    from zoo.core.graph import Graph

    return Graph.from_config(cfg)


def role_device(cfg: Any, role: str) -> str | None:
    """The torch device workers of kind ``role`` are configured with (the kind's ``device``
    option: ``policy.device`` for a policy worker, ``algo.device`` for a trainer); None for a
    kind without one (actors)."""
    return _graph(cfg).kind(role).device_of(cfg)


def _on_cuda(cfg: Any, role: str) -> bool:
    return (role_device(cfg, role) or "").startswith("cuda")


def gpu_shares(cfg: Any, cluster_gpus: float | None) -> dict[str, float]:
    """The GPU each worker on CUDA asks for by default, ``{kind: GPUs}`` (kinds whose device
    option is not on CUDA, or without workers, absent).

    ``cluster_gpus``: the GPUs of the cluster's alive nodes (None: unknown). Where the cluster
    has a GPU for every worker on CUDA, or the number is unknown, each asks for a whole GPU
    (``1.0``). Otherwise they share: a worker of the kind that leads the run (a trainer) asks
    :data:`TRAINER_GPU_SHARE` (0.6: more than half, so two trainers never share a GPU and
    data-parallel trainers keep NCCL), and the other kinds' workers (policy workers) split the
    rest, ``(1 - 0.6) / ceil(M / G)`` each (``M`` such workers on ``G`` GPUs; ``1 / ceil(M / G)``
    without trainers on CUDA). So one policy worker and one trainer on a one-GPU node ask for
    0.4 and 0.6 and are placed together.
    """
    graph = _graph(cfg)
    on_cuda = [k for k in graph.kinds if graph.counts[k.name] and (k.device_of(cfg) or "").startswith("cuda")]
    leads = sum(graph.counts[k.name] for k in on_cuda if k.lead)
    others = sum(graph.counts[k.name] for k in on_cuda if not k.lead)
    out: dict[str, float] = {}
    whole = cluster_gpus is None or cluster_gpus < 1 or cluster_gpus >= leads + others
    per_gpu = math.ceil(others / max(1, int(cluster_gpus or 1)))
    left = 1.0 - (TRAINER_GPU_SHARE if leads else 0.0)
    for k in on_cuda:
        out[k.name] = 1.0 if whole else TRAINER_GPU_SHARE if k.lead else round(left / per_gpu, 4)
    return out


def given_resources(opts: RayOptions, role: str) -> dict[str, float] | None:
    """What ``launcher_options`` asks for workers of kind ``role``: ``resources[role]``, else the
    option ``<role>_resources`` where :class:`RayOptions` has one (actor, policy, trainer); None: not set."""
    if opts.resources and role in opts.resources:
        return opts.resources[role]
    return getattr(opts, f"{role}_resources", None)


def resources_option(role: str) -> str:
    """The ``launcher_options`` key that sets the resources of kind ``role``."""
    return f"{role}_resources" if f"{role}_resources" in {f.name for f in dataclasses.fields(RayOptions)} else \
        f"resources.{role}"


def role_resources(cfg: Any, opts: RayOptions, role: str, cluster_gpus: float | None = None) -> dict[str, float]:
    """The Ray resources one worker of kind ``role`` asks for: what ``launcher_options`` says
    (:func:`given_resources`) when set, else the kind's ``cpus`` (1 for the built-in kinds) plus
    ``"GPU"`` when its device option is on CUDA (a policy worker on ``policy.device=cuda*``, a
    trainer on ``algo.device=cuda*``): a whole GPU or a share of one (:func:`gpu_shares` of
    ``cluster_gpus``)."""
    given = given_resources(opts, role)
    if given is not None:
        return {k: float(v) for k, v in given.items()}
    share = gpu_shares(cfg, cluster_gpus).get(role)
    return {"CPU": float(_graph(cfg).kind(role).cpus), **({"GPU": share} if share else {})}


def placement_request(cfg: Any, opts: RayOptions, cluster_gpus: float | None = None
                      ) -> list[tuple[str, int, dict[str, float]]]:
    """``[(role, index, resources)]``: one bundle per worker of the graph, in graph order
    (:meth:`zoo.core.graph.Graph.workers`); bundle ``i`` is the ``i``-th entry. ``cluster_gpus``:
    see :func:`gpu_shares`."""
    return [(role, index, role_resources(cfg, opts, role, cluster_gpus)) for role, index in _graph(cfg).workers()]


def device_problem(cfg: Any, request: list[tuple[str, int, dict[str, float]]]) -> str | None:
    """Why a worker's ``cuda:N`` cannot work under Ray, or None: Ray makes visible to each worker
    the GPUs its bundle holds (``CUDA_VISIBLE_DEVICES``), numbered from 0, so ``cuda:N`` needs
    ``N`` below that count (a share of a GPU is one). A kind asking no GPU is not checked."""
    graph = _graph(cfg)
    for role, _, res in request:
        kind = graph.kind(role)
        device = kind.device_of(cfg)
        if not device or not device.startswith("cuda:") or "GPU" not in res:
            continue
        visible = math.ceil(res["GPU"] - 1e-9)
        n = int(device.split(":", 1)[1])
        if n >= visible:
            path = kind.device
            return (f"{path}={device!r}: under Ray each {role} worker sees only the {visible} GPU(s) its bundle holds "
                    f"(GPU={res['GPU']:g}), numbered from cuda:0; use --set {path}=cuda (or cuda:0"
                    + (f"..cuda:{visible - 1}" if visible > 1 else "")
                    + f"), or ask more with launcher_options.{resources_option(role)}")
    return None


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(res.items()))


def totals(request: list[tuple[str, int, dict[str, float]]]) -> dict[str, float]:
    """What the run asks for in all, ``{resource: amount}``."""
    need: dict[str, float] = {}
    for _, _, res in request:
        for k, v in res.items():
            need[k] = need.get(k, 0.0) + v
    return need


def _fitting_cpu_shares(request: list[tuple[str, int, dict[str, float]]], nodes: list[dict[str, Any]]) -> str:
    """The ``--set`` options that make ``request`` fit the CPUs of a one-node cluster, as the
    start of a fix line (``"e.g. --set ... ; or "``), or ``""`` when CPUs are not what is short:
    every worker gets an equal share of the node's CPUs, rounded down to hundredths (e.g. 4
    workers on CPU=2: 0.5 each); a role that asks no more than that is left as it is, and a
    role's other resources (a GPU share) are kept."""
    total = sum(n["resources"].get("CPU", 0.0) for n in nodes)
    if totals(request).get("CPU", 0.0) <= total or not request:
        return ""
    share = math.floor(total * 100 / len(request)) / 100
    if share <= 0:
        return ""
    sets = []
    for role in reversed(dict.fromkeys(ro for ro, _, _ in request)):  # each kind once: actors first, trainers last
        res = next(r for ro, _, r in request if ro == role)
        if res.get("CPU", 0.0) <= share:
            continue
        given = ", ".join(f"'{k}': {share if k == 'CPU' else v:g}" for k, v in res.items())
        option = resources_option(role)
        if option.startswith("resources."):
            sets.append(f"--set \"launcher_options.resources={{'{role}': {{{given}}}}}\"")
        else:
            sets.append(f"--set \"launcher_options.{option}={{{given}}}\"")
    if not sets:
        return ""
    return (f"e.g. {share:g} CPU for each of the {len(request)} workers fits CPU={total:g}: " + " ".join(sets)
            + "; or other amounts with ")


def explain_unplaced(request: list[tuple[str, int, dict[str, float]]], nodes: list[dict[str, Any]],
                     available: dict[str, float], strategy: str, timeout_s: float | None) -> str:
    """Why Ray could not place ``request`` (the error message of an unplaced group).

    ``nodes``: the alive nodes as ``{"id", "ip", "resources": {name: total}}``;
    ``available``: the cluster's free resources now (``ray.available_resources()``);
    ``timeout_s``: how long placement was waited for (None: not at all, the cluster was
    started for this run and is too small). Names every worker whose bundle fits on no node,
    every resource of which the run asks more in all than the cluster has (or has free), and
    the strategy's own limits.
    """
    lines = []
    for role, index, res in request:
        if not any(all(n["resources"].get(k, 0.0) >= v for k, v in res.items()) for n in nodes):
            short = sorted(k for k, v in res.items() if not any(n["resources"].get(k, 0.0) >= v for n in nodes))
            lines.append(f"{role} worker {index} asks for {_fmt(res)}, and no node has "
                         + (", ".join(f"{k}={res[k]:g}" for k in short) if short else "all of that at once"))
    need = totals(request)
    for k, v in sorted(need.items()):
        total = sum(n["resources"].get(k, 0.0) for n in nodes)
        if v > total:
            lines.append(f"the run asks for {k}={v:g} in all, the cluster has {k}={total:g}")
        elif v > available.get(k, 0.0):
            lines.append(f"the run asks for {k}={v:g} in all, {available.get(k, 0.0):g} of the cluster's {total:g} "
                         "are free now (other jobs hold the rest)")
    if strategy == "STRICT_SPREAD" and len(request) > len(nodes):
        lines.append(f"strategy STRICT_SPREAD puts each of the {len(request)} workers on its own node, the cluster "
                     f"has {len(nodes)} nodes")
    if strategy == "STRICT_PACK" and not any(all(n["resources"].get(k, 0.0) >= v for k, v in need.items())
                                             for n in nodes):
        lines.append(f"strategy STRICT_PACK puts every worker on one node, and no node has {_fmt(need)}")
    if not lines:
        lines.append("the cluster has enough in all, but not on nodes where the bundles fit together")
    nodes_text = "; ".join(f"{n['ip']}/{n['id'][:12]}: {_fmt({k: v for k, v in n['resources'].items() if k in need})}"
                           for n in nodes)
    if timeout_s is None:
        head = (f"the one-node Ray cluster started for this run (--ray-address local) cannot hold the run's "
                f"{len(request)} workers (strategy {strategy}):")
        fix = ("\nfix: ask for less (" + _fitting_cpu_shares(request, nodes) + "launcher_options.actor_resources, "
               "policy_resources, trainer_resources; actors.count, policy.count, trainer.count), "
               "use the local launcher, or a larger Ray cluster (--ray-address IP:PORT)")
    else:
        head = (f"Ray could not place the run's {len(request)} workers within launcher_options.placement_timeout_s="
                f"{timeout_s:g} s (strategy {strategy}):")
        fix = ("\nfix: add nodes or resources, ask for less (launcher_options.<role>_resources, actors.count, "
               "policy.count, trainer.count) or change launcher_options.strategy")
    return head + "\n  - " + "\n  - ".join(lines) + f"\nnodes: {nodes_text or 'none alive'}" + fix


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Inside, Ctrl-C (SIGINT) is noted, not raised; on leaving, a noted one raises
    :class:`KeyboardInterrupt`. Ray's start-up interrupted half-way leaves its core worker
    broken and the interpreter's exit then crashes (exit 139); deferred, ``zoo train`` exits
    130 as after any Ctrl-C before the workers started. Outside the main thread: no effect."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if noted:
        raise KeyboardInterrupt


def node_label(node_id: str, ip: str) -> str:
    """``"<ip>/<first 12 hex digits of the node id>"``: a worker's host in placements and messages."""
    return f"{ip}/{node_id[:12]}"


class RayHandle(WorkerHandle):
    """One worker's Ray actor (:class:`~zoo.plugins.launchers.ray.host.WorkerHost`).

    ``launcher``: the :class:`RayLauncher` that started it (None in tests): the pid is read for
    all its workers at once (:func:`fetch_info`) and a lost actor's node is asked
    through that node's agent.
    """

    def __init__(self, role: str, index: int, actor: Any, node_id: str, ip: str, launcher: Any = None) -> None:
        self.role, self.index, self.actor, self.node_id, self.ip = role, index, actor, node_id, ip
        self.launcher = launcher
        self.host = node_label(node_id, ip)
        self.info_ref: Any = actor.info.remote()
        """The actor's :meth:`~zoo.plugins.launchers.ray.host.WorkerHost.info`, until it answered."""
        self.info: dict[str, Any] | None = None
        """``{"pid", "gpu_ids", "cuda_visible_devices"}`` of the started worker, once known."""
        self.info_waited = False
        self._wait_ref = actor.wait.remote()
        self._code: int | None = None
        self._note = ""
        self._error: BaseException | None = None
        self._error_at = 0.0
        self._ping: Any = None
        self.restartable = True
        """False once the worker's node died: its bundle and the streams chosen for it are gone."""

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        """The worker process's pid on its node. The first read waits up to :data:`PID_WAIT_S`
        for every worker of the launcher still starting, at once; later reads do not wait."""
        if self.info is None and self.info_ref is not None:
            fetch_info([self] if self.launcher is None else self.launcher.pending_info(self),
                       0.0 if self.info_waited else PID_WAIT_S)
        return None if self.info is None else self.info.get("pid")

    @property
    def known_pid(self) -> int | None:
        """The pid if the actor has answered by now (a zero-timeout look), never waiting."""
        if self.info is None and self.info_ref is not None:
            fetch_info([self], 0.0)
        return None if self.info is None else self.info.get("pid")

    def take_info(self, value: Any) -> None:
        """Keep the actor's answer to ``info`` (an int: the pid alone)."""
        self.info = dict(value) if isinstance(value, dict) else {"pid": int(value)}
        self.info_ref = None

    def _node_lost(self) -> bool | None:
        """Whether this worker's node died: True (Ray says so, or Ray's error says the node died),
        False (the node's agent answered a ping after the actor died), None (not known yet)."""
        import ray

        if node_dead(self.node_id) or isinstance(self._error, getattr(ray.exceptions, "NodeDiedError", ())):
            return True
        if self._ping is None and self.launcher is not None and self.node_id in self.launcher.agents:
            self._ping = self.launcher.agents[self.node_id].info.remote()
        if self._ping not in (None, False) and ray.wait([self._ping], timeout=0)[0]:
            try:
                ray.get(self._ping)
                return False  # its node's agent answers: only the actor died
            except ray.exceptions.RayError:
                self._ping = False  # the agent is gone too: wait for Ray's word on the node
        return None

    def _settle(self) -> None:
        """Take the exit status once the actor answered; an actor that died is ended with -9 as
        soon as its node is known alive (its agent answers) or dead (Ray says so), at most
        :data:`NODE_DEATH_S` after the error."""
        import ray

        if self._error is None:
            try:
                self._code = int(ray.get(self._wait_ref))
            except ray.exceptions.RayError as exc:
                self._error, self._error_at = exc, time.monotonic()
        if self._error is not None:
            lost = self._node_lost()
            if lost is None and time.monotonic() - self._error_at < NODE_DEATH_S:
                return  # not decided yet: still "running"
            lost = bool(lost)
            self._code, self.restartable = -int(signal.SIGKILL), not lost
            self._note = death_note(self.node_id, self.ip, self._error, lost)
        ray.kill(self.actor, no_restart=True)  # its bundle is free for a restart

    def exitcode(self) -> int | None:
        import ray

        if self._code is None and self.info is None and self.info_ref is not None and node_dead(self.node_id):
            self._end_unstarted(lost=True)  # its bundle's node died before the actor started: it never will
        if self._code is None and (self._error is not None or ray.wait([self._wait_ref], timeout=0)[0]):
            self._settle()
        return self._code

    def _end_unstarted(self, lost: bool) -> None:
        """End a worker whose Ray actor has not started (no pid yet): Ray is told to drop the actor,
        so it never starts later beside a restarted one; its status is -9."""
        import ray

        if self.info_ref is not None and ray.wait([self.info_ref], timeout=0)[0]:
            fetch_info([self], 0.0)
            if self.info is not None:
                return  # it has just started: signals reach it
        ray.kill(self.actor, no_restart=True)
        self._code, self.restartable = -int(signal.SIGKILL), not lost
        self._note = (f"Ray node {self.host} died" if lost else
                      f"its Ray actor had not started on node {self.host} (is its bundle's node overloaded?)")

    def stop(self) -> None:
        if self.exitcode() is None:
            self.actor.signal.remote(int(signal.SIGTERM))  # an actor still starting gets it once started

    def kill(self) -> None:
        if self.exitcode() is None:
            if self.info is None and self.info_ref is not None:
                self._end_unstarted(lost=False)
            if self._code is None:
                self.actor.signal.remote(int(signal.SIGKILL))

    def wait(self, timeout: float) -> int | None:
        import ray

        deadline = time.monotonic() + max(0.0, timeout)
        while self.exitcode() is None and time.monotonic() < deadline:
            if self._error is None:
                ray.wait([self._wait_ref], timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            else:  # the actor died: waiting for word on its node
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return self._code

    def end_note(self) -> str:
        """Where the worker ran, or that its actor or node died (added to its failure's reason)."""
        return self._note or f"on Ray node {self.host}"


def fetch_info(handles: list[RayHandle], timeout: float) -> None:
    """Read the pid (and GPUs) of every handle in ``handles`` whose actor has not answered yet:
    one ``ray.wait`` for all of them, at most ``timeout`` seconds, then one ``ray.get`` of those
    that answered. A handle whose actor did not answer within a ``timeout`` > 0 keeps ``info``
    None and is not waited for again (``info_waited``); one whose actor failed keeps None for good."""
    import ray

    pending = [h for h in handles if h.info is None and h.info_ref is not None]
    if not pending:
        return
    refs = [h.info_ref for h in pending]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    for h in pending if timeout > 0 else ():  # a later read does not wait again
        h.info_waited = True
    done = [h for h in pending if h.info_ref in ready]
    if not done:
        return
    try:
        values = ray.get([h.info_ref for h in done])
    except ray.exceptions.RayError:  # one failed: the others one by one
        values = []
        for h in done:
            try:
                values.append(ray.get(h.info_ref))
            except ray.exceptions.RayError:
                values.append(None)
    for h, value in zip(done, values, strict=True):
        if value is None:
            h.info_ref = None  # its actor failed: no pid (its end says why)
        else:
            h.take_info(value)


_NODES: tuple[float, dict[str, bool]] = (float("-inf"), {})


def node_dead(node_id: str) -> bool:
    """Whether Ray reports the node ``node_id`` dead (or no longer knows it). One ``ray.nodes()``
    answers every call for :data:`NODES_CACHE_S` seconds."""
    global _NODES
    import ray

    if time.monotonic() - _NODES[0] > NODES_CACHE_S:
        _NODES = (time.monotonic(), {n["NodeID"]: n["Alive"] for n in ray.nodes()})
    return not _NODES[1].get(node_id, False)


def death_note(node_id: str, ip: str, exc: BaseException, lost: bool) -> str:
    """``"Ray node <ip>/<id> died"`` when the worker's node is ``lost``, else that its actor died
    (with the first line of Ray's error)."""
    if lost:
        return f"Ray node {node_label(node_id, ip)} died"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"its Ray actor on node {node_label(node_id, ip)} died: {first}"


class RayLauncher(Launcher):
    """Connects to the Ray cluster and places the run's workers (see the module docstring).

    Raises:
        LaunchError: Ray is not installed, no cluster answers at the address, the workers
            cannot be placed in time (the message names what is missing), the ``files``
            resolver would have to span nodes, or trainer rank 0's node does not see the
            run directory.
    """

    name = "ray"
    Options = RayOptions

    def __init__(self, cfg: Any) -> None:
        try:
            import ray
            from ray.util.placement_group import placement_group, remove_placement_group
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        except ImportError as exc:
            raise LaunchError(f"--launcher ray needs Ray, which is not installed ({exc}): {INSTALL}") from None
        from zoo.plugins.launchers.ray.host import ADVERTISE_ENV, NodeAgent, WorkerHost

        self.cfg = cfg
        self.opts = RayOptions(**dict(getattr(cfg, "launcher_options", None) or {}))
        self.handles: list[RayHandle] = []
        self.agents: dict[str, Any] = {}
        self.cleaned: dict[str, list[str]] = {}
        self.run: tuple | None = None
        # the run's PlacementGroup, None before it is made and once removed; Any: start() passes it
        # to Ray where a worker has a bundle, which only a placed group gives
        self.pg: Any = None
        self._started_ray = False
        self.temp_dir: str | None = None
        """The per-run folder of a cluster started for this run (``--ray-address local``): Ray's
        session files and the cluster's token; removed when the run ends."""
        self._env_set: dict[str, str | None] = {}  # variables this launcher set, with their old values
        problem = device_problem(cfg, placement_request(cfg, self.opts))
        if problem:  # before connecting: cuda:N beyond what each worker's bundle holds
            raise LaunchError(problem)
        try:
            self._connect(ray)
            self.driver_node = ray.get_runtime_context().get_node_id()
            self._setenv(ADVERTISE_ENV, ray.util.get_node_ip_address(), keep=True)  # this process's tcp listeners
            self.cluster_gpus = float(ray.cluster_resources().get("GPU", 0.0))
            self.request = placement_request(cfg, self.opts, self.cluster_gpus)
            if self._started_ray:  # a cluster of this run alone: what it lacks now, it will always lack
                nodes = self._nodes()
                if any(sum(n["resources"].get(k, 0.0) for n in nodes) < need
                       for k, need in totals(self.request).items()):
                    raise LaunchError(explain_unplaced(self.request, nodes, ray.available_resources(),
                                                       self.opts.strategy, None))
            self.pg = placement_group([res for _, _, res in self.request], strategy=self.opts.strategy,
                                      name=f"zoo-{cfg.name}")
            if not self.pg.wait(timeout_seconds=self.opts.placement_timeout_s):
                message = explain_unplaced(self.request, self._nodes(), ray.available_resources(), self.opts.strategy,
                                           self.opts.placement_timeout_s)
                raise LaunchError(message)
            table = ray.util.placement_group_table(self.pg)["bundles_to_node_id"]
            ips = {n["id"]: n["ip"] for n in self._nodes()}
            self.where = {(role, index): (i, table[i], ips.get(table[i], "?"))
                          for i, (role, index, _) in enumerate(self.request)}
            self._host_cls = ray.remote(WorkerHost)
            agent_cls = ray.remote(NodeAgent)
            for node in sorted({node for _, node, _ in self.where.values()} | {self.driver_node}):
                self.agents[node] = agent_cls.options(
                    num_cpus=0, max_concurrency=4, name=None, lifetime="detached",
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
            self._check_resolver()
            self.check_run_dir()
        except BaseException:
            self._release(remove_placement_group, now=True)
            raise

    # -- set-up -----------------------------------------------------------------------------
    def _setenv(self, name: str, value: str, keep: bool = False) -> None:
        """Set ``os.environ[name]`` (``keep``: only where unset), restored by :meth:`close`."""
        if keep and os.environ.get(name):
            return
        self._env_set.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def _local_cluster_settings(self) -> dict[str, Any]:
        """What ``ray.init`` gets for ``--ray-address local``: the node on loopback (``127.0.0.1``:
        nothing of it listens on other interfaces), Ray's session files in a per-run temporary
        folder (:attr:`temp_dir`) instead of Ray's default ``/tmp/ray``, and, unless
        ``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH`` says otherwise, a fresh
        token in that folder (Ray would write ``~/.ray/auth_token``)."""
        import secrets
        import tempfile

        import ray

        # Ray's own modules (not its public API: the version pinned in the `ray` extra has them),
        # looked up before anything is created, so another Ray version is one LaunchError
        try:
            from ray._private import ray_constants
            from ray._raylet import Config  # type: ignore[attr-defined]  # ray/_raylet.pyi lists few of its names

            ray_constants.ENABLE_RAY_CLUSTER  # noqa: B018 - present, or AttributeError
            initialize = Config.initialize
        except (ImportError, AttributeError) as exc:
            raise LaunchError(f"--ray-address local needs Ray's internals of the version the `ray` extra pins "
                              f"(pip install 'zoo-rl[ray]'); Ray {ray.__version__} lacks them ({exc}): start a "
                              "cluster with `ray start --head` and use --ray-address auto instead") from None
        self.temp_dir = tempfile.mkdtemp(prefix=f"zoo-ray-{os.getpid()}-")  # this process: the controller
        ray_constants.ENABLE_RAY_CLUSTER = False  # else Ray turns 127.0.0.1 into the machine's outward address
        if not any(os.environ.get(v) for v in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
            path = os.path.join(self.temp_dir, "auth_token")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(secrets.token_hex(32))
            self._setenv("RAY_AUTH_MODE", "token")
            self._setenv("RAY_AUTH_TOKEN_PATH", path)
            initialize("")  # Ray reads the mode once: make this process see it
        return {"include_dashboard": False, "_node_ip_address": "127.0.0.1", "_temp_dir": self.temp_dir}

    def _connect(self, ray: Any) -> None:
        address = self.opts.address
        kwargs: dict[str, Any] = {"log_to_driver": self.opts.log_to_driver, "namespace": "zoo"}
        if ray.is_initialized():
            return
        try:
            with sigint_deferred():  # Ctrl-C during Ray's start-up: KeyboardInterrupt once it is done
                if address == "local":
                    self._started_ray = True
                    ray.init(address="local", **self._local_cluster_settings(), **kwargs)
                else:
                    ray.init(address=address, **kwargs)
        except LaunchError:  # (a RuntimeError) already says what is wrong
            raise
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = "on this machine" if address == "auto" else f"at {address}"
            raise LaunchError(f"no Ray cluster answers {where} (--ray-address {address}): {exc}; start one with "
                              "`ray start --head` (docs/cluster.md), or use --ray-address local for a one-node "
                              "cluster of this run alone") from None

    def _nodes(self) -> list[dict[str, Any]]:
        import ray

        return [{"id": n["NodeID"], "ip": n["NodeManagerAddress"], "resources": dict(n.get("Resources") or {})}
                for n in ray.nodes() if n.get("Alive")]

    def _check_resolver(self) -> None:
        section = getattr(self.cfg, "resolver", None)
        if getattr(section, "name", "files") != "files" or (getattr(section, "options", None) or {}).get("root"):
            return
        away = sorted({node_label(n, ip) for _, n, ip in self.where.values() if n != self.driver_node})
        if away:
            raise LaunchError(f"resolver.name='files' keeps addresses in each node's temporary folder, but workers run "
                              f"on other Ray nodes ({', '.join(away)}): use --set resolver.name=ray (the default "
                              "with --launcher ray) or a folder every node shares as resolver.options.root")

    def check_run_dir(self) -> None:
        """Refuse to start unless trainer rank 0's node sees the run directory (see the module doc).

        Raises:
            LaunchError: naming the node and the folder.
        """
        import ray

        from zoo.core.graph import Graph

        key = Graph.from_config(self.cfg).lead()
        if key not in self.where:
            return
        run_dir = os.path.abspath(os.path.join(self.cfg.runs_dir, self.cfg.name))
        if not self.cfg.name or not os.path.isdir(run_dir):
            return  # no run directory (yet): nothing a worker could write to
        probe = os.path.join(run_dir, f".ray-check-{uuid.uuid4().hex[:12]}")
        _, node, ip = self.where[key]
        with open(probe, "w") as f:
            f.write("zoo: shared run-directory check\n")
        try:
            seen = ray.get(self.agents[node].sees.remote(probe), timeout=PID_WAIT_S + 30)
        except ray.exceptions.GetTimeoutError:
            raise LaunchError(f"the Ray agent on node {node_label(node, ip)} did not answer within "
                              f"{PID_WAIT_S + 30:g} s (is the node overloaded or gone?)") from None
        finally:
            os.unlink(probe)
        if not seen:
            raise LaunchError(
                f"{key[0]} {key[1]} runs on Ray node {node_label(node, ip)}, which does not see the run directory "
                f"{run_dir}: its metrics and checkpoints must reach this machine. Set --set runs_dir=PATH to a folder "
                f"every node mounts at the same path (NFS, a shared disk), or give {key[0]} {key[1]} a resource only "
                f"this machine's node has (launcher_options.{resources_option(key[0])}, docs/cluster.md)")

    # -- the launcher interface ---------------------------------------------------------------
    def _place(self, role: str, index: int) -> tuple[int | None, str, str]:
        """``(bundle index, node id, node IP)`` of a worker; one outside the run's graph (the
        launcher conformance checks' tiny workers) runs on the controller's node, without a bundle."""
        if (role, index) in self.where:
            return self.where[(role, index)]
        ips = {n["id"]: n["ip"] for n in self._nodes()}
        return None, self.driver_node, ips.get(self.driver_node, "?")

    def host_of(self, role: str, index: int) -> str:
        """``"<node IP>/<node id prefix>"`` of the Ray node the worker's bundle was placed on."""
        _, node, ip = self._place(role, index)
        return node_label(node, ip)

    def controller_host(self) -> str:
        """The label of the Ray node this process (the driver) runs on."""
        ips = {n["id"]: n["ip"] for n in self._nodes()}
        return node_label(self.driver_node, ips.get(self.driver_node, "?"))

    def start(self, ctx: Any) -> RayHandle:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        from zoo.core.distributed import NODE_ENV
        from zoo.plugins.launchers.ray.host import ADVERTISE_ENV
        from zoo.plugins.launchers.ray.resolver import ADDRESS_ENV, gcs_address

        bundle, node, ip = self._place(ctx.role, ctx.index)
        res = self.request[bundle][2] if bundle is not None else {"CPU": 0.0}
        ctx = copy.copy(ctx)
        ctx.run_dir = os.path.abspath(ctx.run_dir)  # the same path on every node (a shared folder)
        if self.run is None:
            import ray

            self.run = (ctx.run_id, ctx.cfg, dict(ctx.streams))
            job = ray.get_runtime_context().get_job_id()
            for agent in self.agents.values():  # the agents clean up even if this process is killed
                agent.watch.remote(job, *self.run)
        env = {ADDRESS_ENV: gcs_address(), ADVERTISE_ENV: ip, NODE_ENV: node}
        try:
            actor = self._host_cls.options(
                num_cpus=res.get("CPU", 0.0), num_gpus=res.get("GPU", 0.0),
                resources={k: v for k, v in res.items() if k not in ("CPU", "GPU", "memory")},
                **({"memory": res["memory"]} if "memory" in res else {}),
                max_concurrency=4, max_restarts=0, name=None,
                scheduling_strategy=(PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=bundle)
                                     if bundle is not None else NodeAffinitySchedulingStrategy(node, soft=False)),
            ).remote(ctx, env)
        except Exception as exc:  # noqa: BLE001 - Ray refuses the actor (e.g. serialisation)
            raise LaunchError(f"cannot start {ctx.role} worker {ctx.index} on Ray node {node_label(node, ip)}: "
                              f"{exc}") from exc
        handle = RayHandle(ctx.role, ctx.index, actor, node, ip, launcher=self)
        self.handles.append(handle)
        return handle

    def pending_info(self, first: RayHandle) -> list[RayHandle]:
        """``first`` and every other worker whose pid is not known yet and not yet waited for."""
        return [first] + [h for h in self.handles if h is not first and h.info is None and h.info_ref is not None
                          and not h.info_waited]

    def describe(self) -> dict[str, Any]:
        """The launcher's entry of ``graph.json``: the address, the strategy, the cluster's GPUs and
        per worker its node, the resources its bundle asks for (GPU shares included) and, once
        its actor started, the GPU ids Ray gave it (``ray.get_gpu_ids()``) and its
        ``CUDA_VISIBLE_DEVICES``."""
        latest = {(h.role, h.index): h for h in self.handles}
        workers = []
        for role, index, res in self.request:
            _, node, ip = self.where[(role, index)]
            entry: dict[str, Any] = {"role": role, "index": index, "node": node_label(node, ip), "resources": res}
            h = latest.get((role, index))
            if h is not None and h.info is not None:
                entry.update(gpu_ids=h.info.get("gpu_ids"), cuda_visible_devices=h.info.get("cuda_visible_devices"))
            workers.append(entry)
        return {"address": self.opts.address, "strategy": self.opts.strategy, "cluster_gpus": self.cluster_gpus,
                "gpu_shares": gpu_shares(self.cfg, self.cluster_gpus), "workers": workers}

    def close(self) -> None:
        """Kill what still runs, let every node's agent remove what the run left there (its
        report: :attr:`cleaned`, node label -> what was found), then release the agents and
        the placement group."""
        from ray.util.placement_group import remove_placement_group

        self._release(remove_placement_group)

    def _release(self, remove_placement_group: Any, now: bool = False) -> None:
        """Release the workers, agents and placement group; with ``now`` (a failed start) also the
        cluster of this run alone (:meth:`shutdown`), else that waits for this process's exit:
        the controller still clears the run's keys in Ray's store after :meth:`close`."""
        import atexit

        import ray

        try:
            if ray.is_initialized():
                self._release_cluster(remove_placement_group)
        finally:
            self._restore_env([ADVERTISE])
            if now:
                self.shutdown()
            elif self._started_ray or self.temp_dir is not None:
                atexit.register(self.shutdown)  # after Ray's own (atexit runs the last registered first)

    def shutdown(self) -> None:
        """Stop the cluster started for this run (``--ray-address local``), remove its temporary
        folder and restore the environment variables the launcher set. Idempotent."""
        import ray

        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False
        if self.temp_dir is not None:
            import shutil

            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None
        self._restore_env(list(self._env_set))

    def _restore_env(self, names: list[str]) -> None:
        for name in names:
            if name not in self._env_set:
                continue
            old = self._env_set.pop(name)
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

    def _release_cluster(self, remove_placement_group: Any) -> None:
        import ray

        live = [h for h in self.handles if h.exitcode() is None]
        for h in live:  # kill them all, then one wait for all
            h.kill()
        refs = [h._wait_ref for h in live if h.exitcode() is None and h._error is None]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=RELEASE_WAIT_S)
        for h in live:
            if h.exitcode() is None:
                ray.kill(h.actor, no_restart=True)
        if self.run is not None and self.agents:
            run_id, cfg, streams = self.run
            cleans = {node: agent.clean.remote(run_id, cfg, streams) for node, agent in self.agents.items()}
            ready, _ = ray.wait(list(cleans.values()), num_returns=len(cleans), timeout=CLEAN_TIMEOUT_S)
            ips = {n["id"]: n["ip"] for n in self._nodes()}
            for node, ref in cleans.items():
                try:
                    label = node_label(node, ips.get(node, "?"))
                    self.cleaned[label] = ray.get(ref) if ref in ready else ["(no answer)"]
                except ray.exceptions.RayError as exc:  # a dead node: nothing to clean there
                    self.cleaned[node_label(node, ips.get(node, "?"))] = [f"(agent lost: {type(exc).__name__})"]
        for agent in self.agents.values():
            ray.kill(agent, no_restart=True)
        self.agents = {}
        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001 - already gone with its job
                pass
            self.pg = None
