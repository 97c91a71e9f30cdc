"""Fixtures of the whole suite.

- ``ray_cluster``: a one-node Ray cluster shared by the tests of the ``ray`` launcher and resolver
  (contract and integration), started on first use, stopped at the end of the session; those
  checks skip without Ray.
- every test: this process's environment is put back as it was before the test (code under test
  may set variables in-process: the ``ray`` launcher sets ``ZOO_ADVERTISE_HOST``), and any ``zoo``
  CLI that :func:`zoo.core.testing.cli.start` started and that still runs (a test that failed
  half-way) is killed with its workers.
"""
from __future__ import annotations

import importlib.util
import os
import signal

import pytest

RAY_MISSING = importlib.util.find_spec("ray") is None
SKIP_RAY = 'Ray is not installed (pip install "zoo-rl[ray]"): the ray launcher and resolver are not checked'


@pytest.fixture(scope="session")
def ray_cluster():
    """The GCS address of a :class:`zoo.core.testing.ray_cluster.LocalRayCluster`; while it runs,
    ``RAY_ADDRESS``, ``ZOO_RAY_GCS_ADDRESS`` and ``RAY_AUTH_MODE`` point this process (and the
    processes it spawns) at it."""
    if RAY_MISSING:
        pytest.skip(SKIP_RAY)
    from zoo.core.testing.ray_cluster import ENV, LocalRayCluster

    saved = {k: os.environ.get(k) for k in (*ENV, "RAY_ADDRESS", "ZOO_RAY_GCS_ADDRESS", "ZOO_ADVERTISE_HOST")}
    with LocalRayCluster() as cluster:
        os.environ.update({**ENV, "RAY_ADDRESS": cluster.address, "ZOO_RAY_GCS_ADDRESS": cluster.address})
        try:
            yield cluster.address
        finally:
            import ray

            ray.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _restore_environment_signals_and_stop_clis():
    """After each test: ``os.environ`` and the stop signals' handlers as before it; CLIs it
    started and left running killed. The CLI run in-process (``typer.testing.CliRunner``) sets
    SIGINT to ignored once it is interrupted, as the real command does on its way out: left so,
    every child a later test starts would inherit SIGINT ignored (exec keeps it)."""
    saved = dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    from zoo.core.testing.cli import kill_started

    kill_started()
    for s, handler in handlers.items():
        if signal.getsignal(s) is not handler and handler is not None:
            signal.signal(s, handler)
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


def cuda_problem() -> str | None:
    """Why the tests marked ``cuda`` cannot run here (a CPU-only torch, no visible device), or None."""
    import torch

    if torch.version.cuda is None:
        return f"needs a CUDA device: torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return (f"needs a CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees none "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    return None


def pytest_runtest_setup(item):
    """A test marked ``cuda`` skips without a usable CUDA device, saying why; with
    ``ZOO_REQUIRE_CUDA=1`` (``benchmarks/gpu_check.py``) it fails instead, so that a GPU check
    on a machine whose torch cannot reach the GPU does not pass by skipping everything."""
    if item.get_closest_marker("cuda") is None:
        return
    problem = cuda_problem()
    if problem is None:
        return
    if os.environ.get("ZOO_REQUIRE_CUDA") == "1":
        pytest.fail(f"{problem} (ZOO_REQUIRE_CUDA=1)", pytrace=False)
    pytest.skip(problem)
