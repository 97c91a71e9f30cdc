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
def _ray_cluster_address():
    """The GCS address of a :class:`zoo.core.testing.ray_cluster.LocalRayCluster` kept for the
    session (started by the first test that asks for :func:`ray_cluster`)."""
    if RAY_MISSING:
        pytest.skip(SKIP_RAY)
    from zoo.core.testing.ray_cluster import LocalRayCluster

    with LocalRayCluster() as cluster:
        try:
            yield cluster.address
        finally:
            import ray

            ray.shutdown()


@pytest.fixture
def ray_cluster(_ray_cluster_address):
    """The session's Ray cluster's GCS address; during the test (only: the autouse fixture puts
    ``os.environ`` back after it) ``RAY_ADDRESS``, ``ZOO_RAY_GCS_ADDRESS`` and ``RAY_AUTH_MODE``
    point this process and the processes it spawns at it. Set for the whole session they
    reached every later test's ``zoo train`` (which then ignored a Ctrl-C while its workers
    started: a CI failure of test_interrupt after the Ray resolver's contract tests)."""
    from zoo.core.testing.ray_cluster import ENV

    os.environ.update({**ENV, "RAY_ADDRESS": _ray_cluster_address, "ZOO_RAY_GCS_ADDRESS": _ray_cluster_address})
    return _ray_cluster_address


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
BASELINE_HANDLERS = {s: signal.getsignal(s) for s in STOP_SIGNALS}  # pytest's, before any test ran
BASELINE_MASK = signal.pthread_sigmask(signal.SIG_BLOCK, set())


@pytest.fixture(autouse=True)
def _restore_environment_signals_and_stop_clis():
    """After each test: ``os.environ`` and the stop signals' handlers as before it; CLIs it
    started and left running killed. The CLI run in-process (``typer.testing.CliRunner``) sets
    SIGINT to ignored once it is interrupted, as the real command does on its way out: left so,
    every child a later test starts would inherit SIGINT ignored (exec keeps it)."""
    saved = dict(os.environ)
    yield
    from zoo.core.testing.cli import kill_started

    kill_started()
    # back to pytest's own: a handler or mask left by in-process code (the CLI under CliRunner,
    # Ray initialised in this process) is inherited by every child a later test starts
    # (SIG_IGN and a blocked signal survive exec), which then ignores Ctrl-C
    for s, handler in BASELINE_HANDLERS.items():
        if signal.getsignal(s) is not handler and handler is not None:
            signal.signal(s, handler)
    if signal.pthread_sigmask(signal.SIG_BLOCK, set()) != BASELINE_MASK:
        signal.pthread_sigmask(signal.SIG_SETMASK, BASELINE_MASK)
    from zoo.core.stopping import CTRL_C, RECEIVED

    CTRL_C.clear()  # a Ctrl-C recorded by zoo's handler in this process: later errors are not its
    RECEIVED.clear()  # nor a later controller's loop's stop
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
