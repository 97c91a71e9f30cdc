"""The ``ray`` resolver: each key is an entry of the Ray cluster's key-value store.

Key ``<run_id>/<name>`` is stored as the bytes ``<run_id>/<name>`` in the store's namespace
``namespace`` (default ``zoo``), the value the address as JSON. The store lives in Ray's GCS
(the head node), so a listener published on any node is found from every other; a lookup
costs one GCS round trip (1-2 ms on loopback).

Processes reach the store through a GCS client (``ray._raylet.GcsClient``, the client
``ray.experimental.internal_kv`` itself uses) without joining the cluster as Ray workers:
the address is the option ``address`` (``"IP:PORT"`` of the GCS), else the environment
variable ``ZOO_RAY_GCS_ADDRESS`` (the ``ray`` launcher sets it for every worker), else the
GCS of the Ray cluster this process is connected to (``ray.init``, the controller). With
Ray's token authentication on (``RAY_AUTH_MODE=token``) the client reads the token where
Ray does (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or Ray's default token file).

``clear(run_id)`` deletes every key starting with ``<run_id>/`` in one call. A run whose
controller was killed leaves its keys until its last worker leaves (the workers clear them,
:meth:`zoo.core.workers.base.WorkerContext.cleanup_transports`).
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from zoo.core.resolver import Resolver, run_key, split_key

ADDRESS_ENV = "ZOO_RAY_GCS_ADDRESS"
RPC_TIMEOUT_S = 10.0
"""Longest one call to the store may take before it raises (the GCS is unreachable)."""


@dataclass
class RayResolverOptions:
    """Options of the ``ray`` resolver (``--set resolver.options.<name>=value``)."""

    address: str | None = None
    """The GCS address ``IP:PORT`` (default: ``ZOO_RAY_GCS_ADDRESS``, else the connected cluster's)."""
    namespace: str = "zoo"
    """Namespace of the store holding the keys."""

    def __post_init__(self) -> None:
        if self.address is not None and (":" not in self.address or not self.address.rsplit(":", 1)[1].isdigit()):
            raise ValueError(f"address must be the GCS address IP:PORT (e.g. 10.0.0.7:6379), got {self.address!r}")
        if not self.namespace:
            raise ValueError("namespace must not be empty")


def gcs_address(address: str | None = None) -> str:
    """The GCS address to use (see the module doc).

    Raises:
        RuntimeError: none given, none in ``ZOO_RAY_GCS_ADDRESS`` and this process is not
            connected to a Ray cluster.
    """
    if address:
        return address
    if os.environ.get(ADDRESS_ENV):
        return os.environ[ADDRESS_ENV]
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context().gcs_address
    raise RuntimeError(f"the ray resolver needs the Ray cluster's GCS address: set resolver.options.address=IP:PORT "
                       f"or {ADDRESS_ENV}, or use it with --launcher ray")


class RayResolver(Resolver):
    """Keys in the Ray cluster's key-value store (see the module docstring)."""

    name = "ray"
    Options = RayResolverOptions

    def __init__(self, address: str | None = None, namespace: str = "zoo") -> None:
        RayResolverOptions(address=address, namespace=namespace)
        self.address, self.namespace = address, namespace.encode()
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The GCS client, connected on first use (the controller connects to Ray after building
        its resolver)."""
        with self._lock:
            if self._client is None:
                from ray._raylet import GcsClient  # type: ignore[attr-defined]  # ray/_raylet.pyi lists few of its names

                self._client = GcsClient(address=gcs_address(self.address))
            return self._client

    def publish(self, key: str, address: dict[str, Any]) -> None:
        """Store ``address`` under ``key`` (replacing what was there).

        Raises:
            ValueError: a bad key, or ``address`` is not a JSON-serialisable dict.
        """
        split_key(key)
        if not isinstance(address, dict):
            raise ValueError(f"address for {key!r} must be a dict, got {type(address).__name__}")
        self.client.internal_kv_put(key.encode(), json.dumps(address).encode(), True, self.namespace,
                                    timeout=RPC_TIMEOUT_S)

    def get(self, key: str) -> dict[str, Any] | None:
        split_key(key)
        raw = self.client.internal_kv_get(key.encode(), self.namespace, timeout=RPC_TIMEOUT_S)
        if raw is None:
            return None
        try:
            found = json.loads(raw)
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def remove(self, key: str) -> None:
        split_key(key)
        self.client.internal_kv_del(key.encode(), False, self.namespace, timeout=RPC_TIMEOUT_S)

    def clear(self, run_id: str) -> None:
        prefix = run_key(run_id, "x")[:-1]  # validates run_id; "<run_id>/"
        self.client.internal_kv_del(prefix.encode(), True, self.namespace, timeout=RPC_TIMEOUT_S)

    def keys(self, run_id: str) -> list[str]:
        prefix = run_key(run_id, "x")[:-1]
        found = self.client.internal_kv_keys(prefix.encode(), self.namespace, timeout=RPC_TIMEOUT_S)
        return sorted(k.decode() for k in found)
