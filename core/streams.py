"""The three streams of SRL's dataflow and the control stream, over registered transports.

=============  ===============  ==========================================================
stream         pattern          messages
=============  ===============  ==========================================================
inference      request/reply    actor -> policy worker: ``{"obs": {...}}`` with meta
                                ``{client_id, request_id, rows}``; reply: ``{"action",
                                <extras>}`` with meta ``{request_id, policy_version}``
sample         push/pull        actor -> trainer: one time-major sample batch (see
                                :mod:`zoo.core.algorithm`) with meta ``{env_steps,
                                episodes, actor}``
parameter      publish/latest   trainer -> policy worker: the policy's state dict with
                                meta ``{policy_version, updates, env_steps}``
control        push/pull        every worker -> controller: heartbeats, status, errors
                                (meta only); always on the default transport
=============  ===============  ==========================================================

Which transport carries each stream is set by ``streams.<name>.transport`` in the
experiment config.
"""
from __future__ import annotations

from typing import Any

from zoo.core.registry import Registry

STREAMS = ("inference", "sample", "parameter")
CONTROL = "control"
CONTROL_TRANSPORT = "nng"


def transport_for(registry: Registry, cfg: Any, stream: str, run_id: str, create: bool = False):
    """Build the transport that carries ``stream`` (``control`` uses the default transport)."""
    name = CONTROL_TRANSPORT if stream == CONTROL else getattr(cfg.streams, stream).transport
    factory = registry.get("transport", name).load()
    return factory(run_id, create=create)
