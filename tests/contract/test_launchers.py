"""Every registered launcher passes the conformance checks (:mod:`zoo.core.testing.launcher_checks`):
start / alive / exit code / stop / kill / restart on tiny workers, over a real control stream."""
from __future__ import annotations

import glob

import pytest

from zoo.core.plugins import get_registry
from zoo.core.testing.launcher_checks import CHECKS, LauncherUnderTest

EXPECTED = ("local", "ray")
NAMES = sorted(set(get_registry().names("launcher")) | set(EXPECTED))


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("name", NAMES)
def test_launcher_contract(name, check, request):
    if name not in get_registry().names("launcher"):
        pytest.fail(f"launcher {name!r} is not registered")
    if name == "ray":
        request.getfixturevalue("ray_cluster")  # a one-node Ray cluster (skips without Ray)
    with LauncherUnderTest(name) as lut:
        CHECKS[check](lut)
    assert all(h.exitcode() is not None for h in lut.handles)  # nothing left running
    assert glob.glob(f"/tmp/zoo-{lut.run_id}*") == [] and glob.glob(f"/dev/shm/*{lut.run_id}*") == []
