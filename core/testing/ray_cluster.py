"""A throw-away one-node Ray cluster for tests (needs the ``ray`` extra).

:class:`LocalRayCluster` starts ``ray.init(address="local")`` in a child Python process (the
cluster's owner) on loopback (node IP 127.0.0.1), with its own temporary folder, no
dashboard and Ray's token authentication set explicitly off (``RAY_AUTH_MODE=disabled``:
Ray 2.60 turns it on for local clusters depending on a file in the home folder) and its workers
at the normal priority (``RAY_worker_niceness=0``, see :data:`ENV`). The owner
prints the GCS address and waits for its standard input to close; :meth:`close` closes it,
so Ray shuts the cluster down (its processes die with the owner in any case: Ray starts them
with the owner as their parent) and the temporary folder is removed. Start-up takes 5-15 s.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

OWNER = r"""
import sys, ray
ray.init(address="local", num_cpus=int(sys.argv[2]), include_dashboard=False, _node_ip_address="127.0.0.1",
         _temp_dir=sys.argv[1], log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
"""
START_S = 120.0
"""Longest wait for the cluster's GCS address."""

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0"}
"""Environment every process that talks to the test cluster gets (the owner, ``zoo train``).
``RAY_worker_niceness=0``: Ray starts its workers at niceness 15 by default, and the worker
hosts' children (Zoo's workers) inherit it; beside the suite's other processes and the busy
loops of a loaded CI run (niceness 0) such a worker got so little CPU that, asked to stop, it
took 38 s to end (the launcher contract allows 30)."""


class LocalRayCluster:
    """A one-node Ray cluster owned by a child process (see the module doc).

    Attributes:
        address: the GCS address ``IP:PORT`` (``--ray-address``, ``ZOO_RAY_GCS_ADDRESS``).
        temp_dir: the cluster's temporary folder (removed by :meth:`close`).

    Raises:
        RuntimeError: the cluster did not start within :data:`START_S` (its output is included).
    """

    def __init__(self, num_cpus: int = 8) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="zr-", dir="/tmp")  # short: Ray's socket paths are limited
        self.log = open(os.path.join(self.temp_dir, "owner.log"), "w+")
        self.proc = subprocess.Popen([sys.executable, "-c", OWNER, self.temp_dir, str(num_cpus)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env={**os.environ, **ENV}, text=True)
        deadline = time.monotonic() + START_S
        line = ""
        assert self.proc.stdout is not None  # stdout=PIPE
        while not line and time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline().strip()
        if not line:
            self.close()
            self.log.seek(0)
            raise RuntimeError(f"the test Ray cluster did not start within {START_S:g} s:\n{self.log.read()[-3000:]}")
        self.address = line

    def env(self) -> dict[str, str]:
        """This process's environment plus what a ``zoo train`` on this cluster needs."""
        return {**os.environ, **ENV, "RAY_ADDRESS": self.address}

    def close(self) -> None:
        """Stop the cluster (closing the owner's stdin; killed after 30 s) and remove its folder."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None  # stdin=PIPE
                self.proc.stdin.close()
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
