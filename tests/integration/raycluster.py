"""A Ray cluster of several nodes on loopback, each node in namespaces of its own (root only).

For the integration tests of the ``ray`` launcher (``tests/integration/test_ray_cluster.py``)
and the Ray scaling benchmark (``benchmarks/scaling_bench.py --ray``). Layout::

    unshare --net --pid --mount --fork      the cluster: a fresh network namespace (only lo,
      cluster init (PID 1)                  brought up), PID namespace and mount namespace
        unshare --mount --pid --fork        one per node, entered through nsenter:
          node init (PID 1 of the node)       its own tmpfs on /dev/shm and on /tmp (TMPDIR and
          ray start [--head] ...              HOME under it), its own Ray ports; `ray stop` in it
          (zoo train: the driver, node 0)     sees only this node's processes

So nothing passes between nodes through a shared ``/tmp`` or ``/dev/shm``: each node sees
only its own. The paths a node needs from the host that lie under ``/tmp`` (the virtual
environment, the repository, a runs folder the caller names) are bound back into that
node's ``/tmp``; everything else there is the node's. Every init process watches a pipe the
harness holds: when the harness process dies, however it dies, they exit, and the kernel
kills every process left in their PID namespaces. Token authentication is set explicitly
(``RAY_AUTH_MODE``, a fresh ``RAY_AUTH_TOKEN`` per cluster): Ray 2.60 otherwise decides from
a file in the home folder. Ray's workers (and so Zoo's workers, their children) run at the
normal priority (``RAY_worker_niceness=0``; Ray's default 15 starves them beside the busy loops
of a loaded CI run, see :data:`zoo.core.testing.ray_cluster.ENV`).

Command line (root; for benchmarks and by hand)::

    python tests/integration/raycluster.py [--nodes 3] [--cpus 4] [--share DIR] -- COMMAND ...

starts the cluster, runs COMMAND in node 0's namespaces (the Ray address in ``ZOO_RAY_ADDRESS``
and ``RAY_ADDRESS``), stops the cluster, checks nothing is left, and exits with COMMAND's status.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GCS_PORT = 6379
"""The head's GCS port: fixed, since the cluster has a network namespace of its own."""
RAY_ENV_DROP = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_TMPDIR",
                "TMPDIR", "ZOO_RAY_ADDRESS", "ZOO_RAY_GCS_ADDRESS")
"""Variables that would point a node's processes at another cluster: the session's one-node test
cluster (tests/conftest.py sets RAY_ADDRESS and ZOO_RAY_GCS_ADDRESS while it runs) is not
reachable from the namespaced nodes (CI: every run here failed when test_ray.py ran first)."""


class ClusterError(RuntimeError):
    """The cluster could not be started, or something was left after it stopped."""


def unavailable_reason() -> str | None:
    """Why a namespaced Ray cluster cannot run here (None: it can)."""
    if sys.platform != "linux":
        return "needs Linux namespaces"
    if os.geteuid() != 0:
        return "needs root (unshare --net --pid --mount)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs the {tool!r} command (util-linux)"
    if shutil.which("ray", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")) is None:
        return 'needs Ray: pip install -e ".[ray]"'
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        return f'needs Ray (import ray: {exc}): pip install -e ".[ray]"'
    probe = subprocess.run(["unshare", "--net", "--pid", "--mount", "--fork", "true"], capture_output=True, text=True,
                           timeout=30)
    if probe.returncode != 0:
        return f"unshare --net --pid --mount failed here: {probe.stderr.strip()}"
    return None


def ray_cli() -> str:
    """The ``ray`` command of this interpreter's environment."""
    here = os.path.join(os.path.dirname(sys.executable), "ray")
    return here if os.path.exists(here) else shutil.which("ray") or "ray"


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _init_below(pid: int) -> int | None:
    """The host PID of the init process (this file's ``_init``) started below ``pid``, if any."""
    todo = [pid]
    while todo:
        p = todo.pop(0)
        if _cmdline(p)[1:3] == [__file__, "_init"]:
            return p
        todo += _children(p)
    return None


def _ns(pid: int, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def processes_in(namespaces: set[str]) -> list[tuple[int, str]]:
    """(host PID, command line) of every live process in one of ``namespaces`` (``pid:[...]``, ``net:[...]``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if any(_ns(pid, kind) in namespaces for kind in ("pid", "net", "mnt")) and not _is_zombie(pid):
            found.append((pid, " ".join(_cmdline(pid)).strip()[:200]))
    return found


@dataclass
class Node:
    """One Ray node: its index, init process (host PID), namespaces and ports."""

    index: int
    init_pid: int
    popen: subprocess.Popen
    ports: dict[str, int]
    namespaces: set[str] = field(default_factory=set)
    stopped: bool = False

    @property
    def resource(self) -> str:
        """The custom resource only this node has (1 unit x 1000): pin work with it."""
        return f"zoo_node_{self.index}"


class RayCluster:
    """``nodes`` Ray nodes on loopback in fresh namespaces; ``start()``, ``run``/``popen`` in a node, ``stop()``.

    Args:
        nodes: number of Ray nodes (node 0 is the head, where the driver runs).
        cpus: logical CPUs each node offers to Ray (``ray start --num-cpus``); more than the
            machine has is fine, it is a placement budget.
        keep: per node index, extra host paths under ``/tmp`` to bind into that node (e.g. a runs
            folder for the head); the repository and the interpreter's environment are always bound.
        auth: ``RAY_AUTH_MODE`` for every node and the driver: ``token`` (a fresh token) or ``disabled``.
        timeout: bound in seconds for the cluster to start (all nodes alive) and to stop.
    """

    def __init__(self, nodes: int = 3, cpus: int = 4, keep: dict[int, list[str]] | None = None,
                 auth: str = "token", object_store_mb: int = 100, timeout: float = 180.0) -> None:
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: a cluster needs at least 1 node")
        if auth not in ("token", "disabled"):
            raise ValueError(f"auth={auth!r}: use 'token' or 'disabled'")
        self.n, self.cpus, self.auth, self.timeout = nodes, cpus, auth, timeout
        self.object_store_mb = object_store_mb
        self.keep = {i: list((keep or {}).get(i, [])) for i in range(nodes)}
        self.token = secrets.token_hex(32)
        self.nodes: list[Node] = []
        self.cluster_popen: subprocess.Popen | None = None
        self.cluster_pid: int | None = None
        self.namespaces: set[str] = set()
        self.start_seconds: float | None = None
        self._watch_r, self._watch_w = os.pipe()  # the inits exit at EOF: when this process dies
        os.set_inheritable(self._watch_r, True)

    # -- addresses and environments ------------------------------------------------------------
    @property
    def address(self) -> str:
        """The head's GCS address (``--ray-address`` / ``ray.init(address=...)``)."""
        return f"127.0.0.1:{GCS_PORT}"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of every process started in a node: private TMPDIR and HOME, explicit auth."""
        env = {k: v for k, v in os.environ.items() if k not in RAY_ENV_DROP}
        env.update(TMPDIR="/tmp", HOME="/tmp/home", RAY_AUTH_MODE=self.auth, RAY_USAGE_STATS_ENABLED="0",
                   RAY_worker_niceness="0", ZOO_RAY_ADDRESS=self.address, PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
        if self.auth == "token":
            env["RAY_AUTH_TOKEN"] = self.token
        env.update(extra or {})
        return env

    @staticmethod
    def ports(index: int) -> dict[str, int]:
        """Node ``index``'s ports: each its own, fixed (the network namespace is the cluster's alone)."""
        base = 20000 + 1000 * index
        return {"node-manager-port": base + 1, "object-manager-port": base + 2,
                "dashboard-agent-listen-port": base + 3, "dashboard-agent-grpc-port": base + 4,
                "metrics-export-port": base + 5, "runtime-env-agent-port": base + 6,
                "min-worker-port": base + 100, "max-worker-port": base + 999}

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> "RayCluster":
        """Start the namespaces and every node; return once all nodes are alive in Ray (bounded)."""
        began = time.monotonic()
        try:
            self._start_cluster_namespace()
            for i in range(self.n):
                self._start_node_namespace(i)
            self._ray_start(0)
            workers = [self.popen(i, [ray_cli(), "start", *self._ray_args(i)]) for i in range(1, self.n)]
            for i, proc in enumerate(workers, start=1):
                try:
                    self._finish(proc, f"ray start on node {i}")
                except ClusterError:  # once more, alone (see _ray_start)
                    self.run(i, [ray_cli(), "stop", "--force"], timeout=60)
                    self._ray_start(i, tries=1)
            self.wait_nodes(self.n)
        except BaseException:
            self.stop(check=False)
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _start_cluster_namespace(self) -> None:
        status_r, status_w = os.pipe()
        cmd = ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", "--propagation", "private",
               sys.executable, __file__, "_init", "--watch-fd", str(self._watch_r), "--status-fd", str(status_w),
               "--lo"]
        self.cluster_popen = subprocess.Popen(cmd, pass_fds=(self._watch_r, status_w), stdin=subprocess.DEVNULL)
        os.close(status_w)
        self._read_ready(status_r, "the cluster namespace")
        pid = _init_below(self.cluster_popen.pid)
        if pid is None:
            raise ClusterError("the cluster's init process is not among unshare's children")
        self.cluster_pid = pid
        self.namespaces |= {_ns(pid, "pid"), _ns(pid, "net"), _ns(pid, "mnt")}

    def _start_node_namespace(self, i: int) -> None:
        status_r, status_w = os.pipe()
        keep = [str(REPO), sys.prefix, sys.base_prefix, *self.keep[i]]
        spec = json.dumps({"node": i, "keep": keep})
        cmd = ["nsenter", "-t", str(self.cluster_pid), "-n", "-m", "-p", "--",
               "unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private",
               sys.executable, __file__, "_init", "--watch-fd", str(self._watch_r), "--status-fd", str(status_w),
               "--node-spec", spec]
        popen = subprocess.Popen(cmd, pass_fds=(self._watch_r, status_w), stdin=subprocess.DEVNULL)
        os.close(status_w)
        self._read_ready(status_r, f"node {i}'s namespace")
        pid = _init_below(popen.pid)
        if pid is None:
            raise ClusterError(f"node {i}'s init process is not among nsenter's descendants")
        node = Node(i, pid, popen, self.ports(i), {_ns(pid, "pid"), _ns(pid, "mnt")})
        self.namespaces |= node.namespaces
        self.nodes.append(node)

    def _read_ready(self, fd: int, what: str) -> None:
        with os.fdopen(fd, "rb") as f:
            ready, _, _ = select.select([f], [], [], self.timeout)
            line = f.readline().decode().strip() if ready else ""
        if line != "ready":
            raise ClusterError(f"{what} did not start: {line or 'no answer within %g s' % self.timeout}")

    def _ray_args(self, i: int) -> list[str]:
        node = self.nodes[i]
        args = [f"--{k}={v}" for k, v in node.ports.items()]
        args += [f"--num-cpus={self.cpus}", "--num-gpus=0", f"--resources={json.dumps({node.resource: 1000})}",
                 f"--object-store-memory={self.object_store_mb * 1024 * 1024}", "--node-ip-address=127.0.0.1",
                 "--disable-usage-stats"]
        if i == 0:
            return ["--head", f"--port={GCS_PORT}", "--include-dashboard=false", "--ray-client-server-port=10001",
                    *args]
        return [f"--address={self.address}", *args]

    def _ray_start(self, i: int, tries: int = 2) -> None:
        """``ray start`` on node ``i``, ``tries`` times at most, ``ray stop --force`` after a failure: on a
        loaded machine a raylet can miss the 30 s Ray gives it to register ("The current node timed
        out during startup")."""
        for attempt in range(1, tries + 1):
            try:
                self._finish(self.popen(i, [ray_cli(), "start", *self._ray_args(i)]), f"ray start on node {i}")
                return
            except ClusterError:
                self.run(i, [ray_cli(), "stop", "--force"], timeout=60)
                if attempt == tries:
                    raise

    def _finish(self, proc: subprocess.Popen, what: str) -> str:
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise ClusterError(f"{what}: no end within {self.timeout:g} s:\n{out[-2000:]}{err[-2000:]}") from None
        if proc.returncode != 0:
            raise ClusterError(f"{what} exited {proc.returncode}:\n{out[-2000:]}{err[-2000:]}")
        return out

    def wait_nodes(self, count: int, timeout: float | None = None) -> list[dict]:
        """Wait (bounded) until Ray counts exactly ``count`` alive nodes; return Ray's node table."""
        code = ("import json, sys, time, ray\n"
                "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "deadline = time.monotonic() + float(sys.argv[3])\n"
                "while True:\n"
                "    nodes = [n for n in ray.nodes() if n['Alive']]\n"
                "    if len(nodes) == int(sys.argv[2]) or time.monotonic() > deadline: break\n"
                "    time.sleep(0.2)\n"
                "print(json.dumps([{'NodeID': n['NodeID'], 'Resources': n['Resources']} for n in nodes]))\n")
        wait = self.timeout if timeout is None else timeout
        out = self._finish(self.popen(0, [sys.executable, "-c", code, self.address, str(count), str(wait)]),
                           "listing Ray's nodes")
        nodes = json.loads(out.strip().splitlines()[-1])
        if len(nodes) != count:
            raise ClusterError(f"Ray counts {len(nodes)} alive nodes, not {count}, after {wait:g} s")
        return nodes

    # -- running things in a node -----------------------------------------------------------------
    def popen(self, i: int, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None,
              **kwargs) -> subprocess.Popen:
        """Start ``argv`` in node ``i``'s namespaces (network, mount, PID) with the node's environment.

        stdout and stderr are pipes of text unless given. ``cwd`` must exist in the node (the
        repository, a bound folder, or under the node's own /tmp); default: the repository.
        """
        node = self.nodes[i]
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        cmd = ["nsenter", "-t", str(node.init_pid), "-n", "-m", "-p", f"--wd={cwd or REPO}", "--", *argv]
        return subprocess.Popen(cmd, env=self.env(env), stdin=subprocess.DEVNULL, **kwargs)

    def run(self, i: int, argv: list[str], timeout: float = 60.0, **kwargs) -> subprocess.CompletedProcess:
        """Run ``argv`` in node ``i`` to its end (killed after ``timeout`` s); stdout and stderr as text."""
        proc = self.popen(i, argv, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_tree(proc)
            out, err = proc.communicate()
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    @staticmethod
    def kill_tree(proc: subprocess.Popen) -> None:
        """SIGKILL a process started by ``popen`` and what it started (nsenter forks the command)."""
        todo, seen = [proc.pid], []
        while todo:
            p = todo.pop()
            seen.append(p)
            todo += _children(p)
        for p in reversed(seen):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def processes(self, i: int) -> list[tuple[int, str]]:
        """(host PID, command line) of every live process in node ``i``'s PID namespace."""
        pid_ns = _ns(self.nodes[i].init_pid, "pid")
        return [p for p in processes_in({pid_ns}) if p[0] != self.nodes[i].init_pid]

    def files(self, i: int, pattern: str) -> list[str]:
        """Paths in node ``i``'s own mount namespace matching a glob (e.g. ``/dev/shm/*``)."""
        code = "import glob, json, sys; print(json.dumps(sorted(glob.glob(sys.argv[1]))))"
        out = self.run(i, [sys.executable, "-c", code, pattern], timeout=30)
        if out.returncode != 0:
            raise ClusterError(f"listing {pattern} on node {i}: {out.stderr[-1000:]}")
        return json.loads(out.stdout)

    def kill_node(self, i: int) -> None:
        """Power node ``i`` off: SIGKILL its init, so the kernel kills every process of the node at once."""
        node = self.nodes[i]
        os.kill(node.init_pid, signal.SIGKILL)
        node.popen.wait(30)
        node.stopped = True

    # -- stop -------------------------------------------------------------------------------------
    def stop(self, check: bool = True) -> list[tuple[int, str]]:
        """``ray stop`` on each node, then end the inits (the kernel kills what is left in the
        namespaces); return what is still alive in them afterwards (``check``: raise if anything is)."""
        stops = [self.popen(n.index, [ray_cli(), "stop", "--grace-period=10"]) for n in self.nodes
                 if not n.stopped and n.popen.poll() is None]  # every node at once
        for proc in stops:
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill_tree(proc)
                proc.communicate()
        if self._watch_w is not None:
            os.close(self._watch_w)  # EOF: every init exits
            self._watch_w = None
            os.close(self._watch_r)
        for popen in [n.popen for n in self.nodes] + ([self.cluster_popen] if self.cluster_popen else []):
            try:
                popen.wait(self.timeout)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(10)
        for node in self.nodes:
            node.stopped = True
        deadline = time.monotonic() + 10
        left = processes_in(self.namespaces)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = processes_in(self.namespaces)
        if check and left:
            raise ClusterError(f"left alive after the cluster stopped: {left}")
        return left

    def __enter__(self) -> "RayCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop(check=exc[0] is None)


# -- the init processes (PID 1 of the cluster's and of each node's PID namespace) -----------------
MS_BIND, MS_REC = 4096, 16384


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _private_tmp(keep: list[str]) -> None:
    """Fresh tmpfs on /dev/shm and /tmp; bind the ``keep`` paths that lie under /tmp back into it."""
    under = sorted({os.path.realpath(p) for p in keep if os.path.realpath(p).startswith("/tmp/")})
    under = [p for p in under if not any(p.startswith(q + "/") for q in under if q != p)]
    fds = {p: os.open(p, os.O_PATH) for p in under if os.path.isdir(p)}  # reachable after /tmp is covered
    _mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777,size=1g")
    _mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777,size=2g")
    for path, fd in fds.items():
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
        os.close(fd)
    os.makedirs("/tmp/home", exist_ok=True)


def _loopback_up() -> None:
    """``ip link set lo up``, as the ioctls it makes (a fresh network namespace has lo down)."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sh", fcntl.ioctl(s, siocgifflags, struct.pack("16sh", b"lo", 0)))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def _init_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watch-fd", type=int, required=True)
    parser.add_argument("--status-fd", type=int, required=True)
    parser.add_argument("--lo", action="store_true")
    parser.add_argument("--node-spec")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        if args.lo:
            _loopback_up()
        if args.node_spec:
            _private_tmp(json.loads(args.node_spec)["keep"])
    except Exception as exc:  # told to the harness, which raises it
        os.write(args.status_fd, f"{type(exc).__name__}: {exc}\n".encode())
        os._exit(1)
    os.write(args.status_fd, b"ready\n")
    os.close(args.status_fd)
    while True:  # reap orphans (PID 1's job) until the harness goes
        ready, _, _ = select.select([args.watch_fd], [], [], 0.5)
        if ready and not os.read(args.watch_fd, 1):
            os._exit(0)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_init":
        _init_main(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description="Run COMMAND in node 0 of a namespaced loopback Ray cluster.")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=4, help="logical CPUs per node (ray start --num-cpus)")
    parser.add_argument("--share", action="append", default=[], metavar="DIR",
                        help="a folder every node sees at the same path (created if missing; e.g. a runs folder)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for COMMAND (then it is killed)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a COMMAND after --")
    reason = unavailable_reason()
    if reason:
        print(f"raycluster: cannot run: {reason}", file=sys.stderr)
        return 2
    shared = [os.path.abspath(p) for p in args.share]
    for path in shared:
        os.makedirs(path, exist_ok=True)
    cluster = RayCluster(args.nodes, args.cpus, keep={i: shared for i in range(args.nodes)})
    cluster.start()
    print(f"raycluster: {args.nodes} nodes alive at {cluster.address} after {cluster.start_seconds:.1f} s",
          file=sys.stderr, flush=True)
    try:
        proc = cluster.popen(0, command, cwd=os.getcwd(), stdout=None, stderr=None)
        try:
            code = proc.wait(args.timeout)
        except subprocess.TimeoutExpired:
            cluster.kill_tree(proc)
            code = proc.wait()
    finally:
        began = time.monotonic()
        left = cluster.stop(check=False)
        print(f"raycluster: stopped in {time.monotonic() - began:.1f} s; left: {left or 'nothing'}", file=sys.stderr)
    return code if not left else 1


if __name__ == "__main__":
    sys.exit(main())
