"""What the ``ray`` launcher runs inside the Ray cluster: one worker host per worker, one
agent per node. Both are plain classes made Ray actors by the launcher (``ray.remote``), so
this module imports without Ray.

:class:`WorkerHost` is the Ray actor of one worker: placed in its placement-group bundle
(the worker's resources), it starts the worker as its child process
(``python -m zoo.plugins.launchers.ray.child``, the context on standard input), delivers
signals to it and reports its exit status. The child is a fresh interpreter without Ray's
threads, so the worker installs its signal handlers and runs exactly as under the ``local``
launcher; it watches its host as its controller (``PR_SET_PDEATHSIG`` and the parent
watch of :mod:`zoo.core.workers.base`): when the host dies — the controller died and Ray
ended the actors it owned, or the actor was killed — the worker stops and leaves the run
through its transports like any orphaned worker. The child's environment adds
:data:`RUN_ENV` (the run id, so the node agent finds the run's processes),
``ZOO_RAY_GCS_ADDRESS`` (the ``ray`` resolver), ``ZOO_ADVERTISE_HOST`` (the node's IP
address, which its tcp listeners publish for dialers on other nodes) and ``ZOO_NODE_ID``
(the Ray node id, which tells nodes apart in the trainers' GPU identities,
:func:`zoo.core.distributed.gpu_identity`); it inherits the ``CUDA_VISIBLE_DEVICES`` Ray set
for the actor, so a worker sees the GPUs of its bundle as ``cuda:0``, ``cuda:1``...

:class:`NodeAgent` is a zero-CPU actor pinned to one node: it checks that the node sees the
run directory, and at the end of the run removes what the run left on its node: processes
(SIGKILL), shared-memory segments, socket folders and lock files
(:meth:`NodeAgent.clean`).
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from typing import Any

RUN_ENV = "ZOO_RUN_ID"
"""Environment variable naming the run in every worker process the launcher starts."""
ADVERTISE_ENV = "ZOO_ADVERTISE_HOST"


def node_info() -> dict[str, str]:
    """``{"node_id", "ip", "hostname"}`` of the Ray node this process runs on."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname()}


def gpu_ids() -> list[Any]:
    """The GPU ids Ray gave the calling actor (``ray.get_gpu_ids()``; ``[]`` outside Ray)."""
    try:
        import ray

        return list(ray.get_gpu_ids())
    except Exception:  # noqa: BLE001 - not inside a Ray worker
        return []


class WorkerHost:
    """One worker's Ray actor (see the module doc). ``ctx``: the worker's context; ``env``:
    variables added to the child's environment."""

    def __init__(self, ctx: Any, env: dict[str, str]) -> None:
        ctx.controller_pid, ctx.controller_host = os.getpid(), socket.gethostname()  # the worker watches this host
        child_env = {**os.environ, **env, RUN_ENV: ctx.run_id}
        self.proc = subprocess.Popen([sys.executable, "-m", "zoo.plugins.launchers.ray.child"],
                                     stdin=subprocess.PIPE, env=child_env, close_fds=True)
        assert self.proc.stdin is not None  # stdin=PIPE
        self.proc.stdin.write(pickle.dumps(ctx))
        self.proc.stdin.close()

    def pid(self) -> int:
        """The worker process's pid."""
        return self.proc.pid

    def info(self) -> dict[str, Any]:
        """``{"pid", "gpu_ids", "cuda_visible_devices"}``: the worker process's pid, the GPU ids Ray
        gave this actor (``ray.get_gpu_ids()``, ``[]`` without GPUs) and the
        ``CUDA_VISIBLE_DEVICES`` the worker inherited (None: unset), under which each worker
        numbers its GPUs from ``cuda:0``."""
        return {"pid": self.proc.pid, "gpu_ids": gpu_ids(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def wait(self) -> int:
        """Block until the worker exits; its status (``-N``: ended by signal ``N``)."""
        return self.proc.wait()

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the worker if it still runs."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass


def run_pids(run_id: str) -> list[int]:
    """Pids of this node's processes whose environment names ``run_id`` (:data:`RUN_ENV`)."""
    needle = f"{RUN_ENV}={run_id}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(int(entry))
        except OSError:
            continue
    return sorted(out)


def run_leftovers(run_id: str) -> list[str]:
    """What the run still holds on this node: ``pid N`` entries, ``/dev/shm`` segments and lock
    files, and its socket folder in the temporary folder."""
    from zoo.transports.shm.segments import list_segments, run_prefix
    from zoo.transports.sockets.rundir import run_dir

    found = [f"pid {p}" for p in run_pids(run_id)]
    found += [f"/dev/shm/{name}" for name in list_segments(run_prefix(run_id))]
    return found + ([run_dir(run_id)] if os.path.exists(run_dir(run_id)) else [])


WATCH_S = 1.0
"""How often a node agent checks that the controller's Ray job still lives."""


class NodeAgent:
    """The run's agent on one node (see the module doc). A detached actor: it outlives the
    controller, so that when the controller's Ray job dies (``kill -9``: Ray then SIGKILLs the
    worker hosts and their workers, which cannot leave the run themselves) :meth:`watch` still
    removes what the run left on its node and the run's keys, then ends the agent."""

    def info(self) -> dict[str, str]:
        return node_info()

    def sees(self, path: str) -> bool:
        """Whether ``path`` exists on this node (the shared run-directory check)."""
        return os.path.exists(path)

    def leftovers(self, run_id: str) -> list[str]:
        return run_leftovers(run_id)

    def watch(self, job_id: str, run_id: str, cfg: Any, streams: dict[str, tuple[str, dict[str, Any]]]) -> None:
        """Every :data:`WATCH_S` seconds, check that the Ray job ``job_id`` (the controller) lives;
        once it is dead: :meth:`clean` this node, clear the run's keys in Ray's store, and end
        this actor. Runs until then (the launcher kills the agent when the run ends normally)."""
        import threading

        def loop() -> None:
            import ray
            from ray._private import state

            try:
                while True:
                    time.sleep(WATCH_S)
                    jobs = [j for j in state.jobs() if j.get("JobID") == job_id]
                    if jobs and jobs[0].get("IsDead"):
                        break
                time.sleep(2 * WATCH_S)  # Ray ends the worker hosts (and their workers) meanwhile
                self.clean(run_id, cfg, streams)
                from zoo.plugins.launchers.ray.resolver import RayResolver

                RayResolver(address=ray.get_runtime_context().gcs_address).clear(run_id)
            finally:
                os._exit(0)  # a detached actor must end itself

        threading.Thread(target=loop, name="zoo-watch", daemon=True).start()

    def clean(self, run_id: str, cfg: Any, streams: dict[str, tuple[str, dict[str, Any]]]) -> list[str]:
        """Kill the run's processes left on this node, then remove its transport resources (every
        stream's transport's ``cleanup``, as the controller does on its own node). Returns what
        was there before (:func:`run_leftovers`)."""
        from zoo.core.plugins import get_registry
        from zoo.core.streams import transport_for

        before = run_leftovers(run_id)
        for pid in run_pids(run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        registry = get_registry()
        for stream, choice in streams.items():
            try:
                transport_for(registry, cfg, stream, run_id, choice=choice).cleanup()
            except Exception:  # noqa: BLE001 - the next stream's resources still go
                pass
        return before
