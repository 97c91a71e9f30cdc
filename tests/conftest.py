"""A one-node Ray cluster shared by the tests of the ``ray`` launcher and resolver (contract and integration)
(started on first use, stopped at the end of the session; those checks skip without Ray)."""
from __future__ import annotations

import importlib.util
import os

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

    saved = {k: os.environ.get(k) for k in (*ENV, "RAY_ADDRESS", "ZOO_RAY_GCS_ADDRESS")}
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
