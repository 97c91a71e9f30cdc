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
one GPU more for a policy worker or trainer on ``cuda``; or what
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

import copy
import os
import signal
import time
import uuid
from dataclasses import dataclass
from typing import Any

from zoo.core.launcher import LaunchError, Launcher, WorkerHandle

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
ROLES = ("actor", "policy", "trainer")
INSTALL = 'pip install "zoo-rl[ray]"'
PID_WAIT_S = 30.0
"""Longest the controller waits for a worker's pid (its Ray actor starting) when asked for it."""
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
    """Of each policy worker (default ``{'CPU': 1}``, plus ``'GPU': 1`` with ``policy.device=cuda``)."""
    trainer_resources: dict[str, float] | None = None
    """Of each trainer (default ``{'CPU': 1}``, plus ``'GPU': 1`` with ``algo.device=cuda``)."""
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
        for role in ROLES:
            res = getattr(self, f"{role}_resources")
            if res is None:
                continue
            bad = {k: v for k, v in res.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0}
            if bad or not any(v > 0 for v in res.values()):
                raise ValueError(f"{role}_resources must map resource names to numbers >= 0, at least one > 0 "
                                 f"(e.g. {{'CPU': 1}}), got {res!r}")


def role_resources(cfg: Any, opts: RayOptions, role: str) -> dict[str, float]:
    """The Ray resources one worker of ``role`` asks for: ``launcher_options.<role>_resources``
    when set, else ``{"CPU": 1.0}`` plus ``"GPU": 1.0`` for a policy worker on
    ``policy.device=cuda*`` or a trainer on ``algo.device=cuda*``."""
    given = getattr(opts, f"{role}_resources")
    if given is not None:
        return {k: float(v) for k, v in given.items()}
    device = {"policy": getattr(cfg.policy, "device", "cpu"), "trainer": getattr(cfg.algo, "device", "cpu")}.get(role)
    return {"CPU": 1.0, **({"GPU": 1.0} if isinstance(device, str) and device.startswith("cuda") else {})}


def placement_request(cfg: Any, opts: RayOptions) -> list[tuple[str, int, dict[str, float]]]:
    """``[(role, index, resources)]``: one bundle per worker of the graph, in graph order
    (:meth:`zoo.core.graph.Graph.workers`); bundle ``i`` is the ``i``-th entry."""
    from zoo.core.graph import Graph

    return [(role, index, role_resources(cfg, opts, role)) for role, index in Graph.from_config(cfg).workers()]


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(res.items()))


def explain_unplaced(request: list[tuple[str, int, dict[str, float]]], nodes: list[dict[str, Any]],
                     available: dict[str, float], strategy: str, timeout_s: float) -> str:
    """Why Ray could not place ``request`` (the error message of an unplaced group).

    ``nodes``: the alive nodes as ``{"id", "ip", "resources": {name: total}}``;
    ``available``: the cluster's free resources now (``ray.available_resources()``).
    Names every worker whose bundle fits on no node, every resource of which the run asks
    more in all than the cluster has (or has free), and the strategy's own limits.
    """
    lines = []
    for role, index, res in request:
        if not any(all(n["resources"].get(k, 0.0) >= v for k, v in res.items()) for n in nodes):
            short = sorted(k for k, v in res.items() if not any(n["resources"].get(k, 0.0) >= v for n in nodes))
            lines.append(f"{role} worker {index} asks for {_fmt(res)}, and no node has "
                         + (", ".join(f"{k}={res[k]:g}" for k in short) if short else "all of that at once"))
    need: dict[str, float] = {}
    for _, _, res in request:
        for k, v in res.items():
            need[k] = need.get(k, 0.0) + v
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
    return (f"Ray could not place the run's {len(request)} workers within launcher_options.placement_timeout_s="
            f"{timeout_s:g} s (strategy {strategy}):\n  - " + "\n  - ".join(lines)
            + f"\nnodes: {nodes_text or 'none alive'}\nfix: add nodes or resources, ask for less "
            "(launcher_options.<role>_resources, actors.count, policy.count, trainer.count) or change "
            "launcher_options.strategy")


def node_label(node_id: str, ip: str) -> str:
    """``"<ip>/<first 12 hex digits of the node id>"``: a worker's host in placements and messages."""
    return f"{ip}/{node_id[:12]}"


class RayHandle(WorkerHandle):
    """One worker's Ray actor (:class:`~zoo.plugins.launchers.ray.host.WorkerHost`)."""

    def __init__(self, role: str, index: int, actor: Any, node_id: str, ip: str) -> None:
        self.role, self.index, self.actor, self.node_id, self.ip = role, index, actor, node_id, ip
        self.host = node_label(node_id, ip)
        self._pid_ref = actor.pid.remote()
        self._wait_ref = actor.wait.remote()
        self._pid: int | None = None
        self._code: int | None = None
        self._note = ""
        self._error: BaseException | None = None
        self._error_at = 0.0
        self.restartable = True
        """False once the worker's node died: its bundle and the streams chosen for it are gone."""

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        """The worker process's pid on its node (waits up to :data:`PID_WAIT_S` for its actor to start)."""
        import ray

        if self._pid is None and self._pid_ref is not None:
            ready, _ = ray.wait([self._pid_ref], timeout=PID_WAIT_S)
            try:
                self._pid = int(ray.get(ready[0])) if ready else None
            except ray.exceptions.RayError:
                pass
            self._pid_ref = None if self._pid is not None or ready else self._pid_ref
        return self._pid

    def _settle(self) -> None:
        """Take the exit status once the actor answered; an actor that died is ended with -9 as
        soon as Ray says whether its node died too (at most :data:`NODE_DEATH_S` later)."""
        import ray

        if self._error is None:
            try:
                self._code = int(ray.get(self._wait_ref))
            except ray.exceptions.RayError as exc:
                self._error, self._error_at = exc, time.monotonic()
        if self._error is not None:
            lost = node_dead(self.node_id) or isinstance(self._error, getattr(ray.exceptions, "NodeDiedError", ()))
            if not lost and time.monotonic() - self._error_at < NODE_DEATH_S:
                return  # not decided yet: still "running"
            self._code, self.restartable = -int(signal.SIGKILL), not lost
            self._note = death_note(self.node_id, self.ip, self._error, lost)
        ray.kill(self.actor, no_restart=True)  # its bundle is free for a restart

    def exitcode(self) -> int | None:
        import ray

        if self._code is None and (self._error is not None or ray.wait([self._wait_ref], timeout=0)[0]):
            self._settle()
        return self._code

    def stop(self) -> None:
        if self.exitcode() is None:
            self.actor.signal.remote(int(signal.SIGTERM))

    def kill(self) -> None:
        if self.exitcode() is None:
            self.actor.signal.remote(int(signal.SIGKILL))

    def wait(self, timeout: float) -> int | None:
        import ray

        deadline = time.monotonic() + max(0.0, timeout)
        while self.exitcode() is None and time.monotonic() < deadline:
            if self._error is None:
                ray.wait([self._wait_ref], timeout=max(0.0, deadline - time.monotonic()))
            else:  # the actor died: waiting for Ray's word on its node
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return self._code

    def end_note(self) -> str:
        """Where the worker ran, or that its actor or node died (added to its failure's reason)."""
        return self._note or f"on Ray node {self.host}"


def node_dead(node_id: str) -> bool:
    """Whether Ray reports the node ``node_id`` dead (or no longer knows it)."""
    import ray

    return not {n["NodeID"]: n["Alive"] for n in ray.nodes()}.get(node_id, False)


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
        self.pg = None
        self._started_ray = False
        try:
            self._connect(ray)
            self.driver_node = ray.get_runtime_context().get_node_id()
            os.environ.setdefault(ADVERTISE_ENV, ray.util.get_node_ip_address())  # this process's tcp listeners
            self.request = placement_request(cfg, self.opts)
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
            self._release(remove_placement_group)
            raise

    # -- set-up -----------------------------------------------------------------------------
    def _connect(self, ray: Any) -> None:
        address = self.opts.address
        kwargs: dict[str, Any] = {"log_to_driver": self.opts.log_to_driver, "namespace": "zoo"}
        if ray.is_initialized():
            return
        try:
            if address == "local":
                ray.init(address="local", include_dashboard=False, **kwargs)
                self._started_ray = True
            else:
                ray.init(address=address, **kwargs)
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

        key = ("trainer", 0)
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
                f"trainer 0 runs on Ray node {node_label(node, ip)}, which does not see the run directory {run_dir}: "
                "its metrics and checkpoints must reach this machine. Set --set runs_dir=PATH to a folder every node "
                "mounts at the same path (NFS, a shared disk), or give trainer 0 a resource only this machine's node "
                "has (launcher_options.trainer_resources, docs/cluster.md)")

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
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from zoo.plugins.launchers.ray.host import ADVERTISE_ENV
        from zoo.plugins.launchers.ray.resolver import ADDRESS_ENV, gcs_address

        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

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
        env = {ADDRESS_ENV: gcs_address(), ADVERTISE_ENV: ip}
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
        handle = RayHandle(ctx.role, ctx.index, actor, node, ip)
        self.handles.append(handle)
        return handle

    def close(self) -> None:
        """Kill what still runs, let every node's agent remove what the run left there (its
        report: :attr:`cleaned`, node label -> what was found), then release the agents and
        the placement group."""
        from ray.util.placement_group import remove_placement_group

        self._release(remove_placement_group)

    def _release(self, remove_placement_group: Any) -> None:
        import ray

        if not ray.is_initialized():
            return
        for h in self.handles:
            if h.exitcode() is None:
                h.kill()
                h.wait(2.0)
                if h.exitcode() is None:
                    ray.kill(h.actor, no_restart=True)
        if self.run is not None and self.agents:
            run_id, cfg, streams = self.run
            refs = {node: agent.clean.remote(run_id, cfg, streams) for node, agent in self.agents.items()}
            ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=CLEAN_TIMEOUT_S)
            ips = {n["id"]: n["ip"] for n in self._nodes()}
            for node, ref in refs.items():
                try:
                    self.cleaned[node_label(node, ips.get(node, "?"))] = ray.get(ref) if ref in ready else ["(no answer)"]
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
