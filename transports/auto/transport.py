"""The ``auto`` transport: chosen per stream from where its ends run.

``auto`` is the default transport of every stream. When a run starts, the controller knows
the host of every worker from its launcher (the placement, :mod:`zoo.core.placement`), and
for each stream whose transport is ``auto`` it calls :func:`choose` with the hosts of that
stream's ends:

- all on one host (always so with the ``local`` launcher): ``shm``, the fastest path
  between processes of one host;
- on more than one host: ``nng`` with ``scheme=tcp``, listening on ``host`` (default
  ``0.0.0.0``, every interface, so other hosts can dial; set ``token`` then) and published
  through the run's resolver with this machine's host name.

The workers receive the concrete choice (they never build ``auto`` themselves in a run), and
the controller records it per stream in ``<run_dir>/graph.json``. Built directly — in a test,
or when ``zoo train`` checks the config — ``auto_transport`` without ``hosts`` is ``shm``.

Options (``--set streams.<stream>.options.<name>=value``, :class:`AutoOptions`) are those of
``shm`` and of ``nng``; each goes to the transport chosen when it has it (``slots`` only
matters when the stream resolves to ``shm``, ``token`` only when it resolves to ``nng``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zoo.transports.nng.transport import NngOptions, NngTransport
from zoo.transports.shm.transport import ShmOptions, ShmTransport

SHM_OPTIONS = tuple(f.name for f in dataclasses.fields(ShmOptions))
NNG_OPTIONS = ("spin_us", "host", "connect_host", "token")
CROSS_HOST_BIND = "0.0.0.0"
"""Where a cross-host stream's listeners bind unless ``host`` is set: every interface."""


@dataclass
class AutoOptions:
    """Options of the ``auto`` transport: each is passed to the transport a stream resolves to
    when that transport has it (see the module docstring). Unset (None): that transport's default."""

    slots: int | None = None
    """shm: slots per ring (``ZOO_SHM_SLOTS``, default 8)."""
    slot_bytes: int | None = None
    """shm: initial slot size in bytes (``ZOO_SHM_SLOT_BYTES``, default 1 MiB)."""
    max_slot_bytes: int | None = None
    """shm: largest slot in bytes (``ZOO_SHM_MAX_SLOT_BYTES``, default 256 MiB)."""
    max_lent: int | None = None
    """shm: unused grants one producer may hold (``ZOO_SHM_GRANTS``, default 2)."""
    max_frame_bytes: int | None = None
    """shm: largest frame in bytes (default 1 GiB)."""
    spin_us: int | None = None
    """shm and nng: busy-poll budget of one wait in microseconds (``ZOO_SPIN_US``, default 100)."""
    host: str | None = None
    """nng across hosts: address listeners bind to (default ``0.0.0.0``: every interface)."""
    connect_host: str | None = None
    """nng across hosts: address dialers connect to (default: the published host name)."""
    token: str | None = None
    """nng across hosts: shared secret every message carries (``ZOO_NNG_TOKEN``); advised
    whenever streams cross hosts."""

    def __post_init__(self) -> None:
        ShmOptions(**{k: getattr(self, k) for k in SHM_OPTIONS})
        NngOptions(**{k: getattr(self, k) for k in NNG_OPTIONS})


def choose(hosts: Sequence[str], options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The transport and options of a stream whose ends run on ``hosts``.

    Args:
        hosts: the host of every worker at either end of the stream (repeats allowed).
        options: the stream's typed ``auto`` options.

    Returns:
        ``("shm", shm options)`` when ``hosts`` holds at most one distinct host, else
        ``("nng", {"scheme": "tcp", "host": "0.0.0.0", ...nng options})``.
    """
    options = dict(options or {})
    if len(set(hosts)) <= 1:
        return "shm", {k: v for k, v in options.items() if k in SHM_OPTIONS}
    nng = {k: v for k, v in options.items() if k in NNG_OPTIONS}
    return "nng", {"scheme": "tcp", "host": CROSS_HOST_BIND, **nng}


def auto_transport(run_id: str, base_dir: str | None = None, create: bool = False, *,
                   hosts: Sequence[str] = (), resolver=None, **options: Any):
    """The transport :func:`choose` picks for ``hosts`` (none given: one host, ``shm``), built
    with ``options`` and ``resolver``."""
    name, chosen = choose(hosts, options)
    factory = ShmTransport if name == "shm" else NngTransport
    return factory(run_id, base_dir=base_dir, create=create, resolver=resolver, **chosen)


# The factory's attributes the host reads (CONTRIBUTING.md, "A transport"); mypy allows no new
# attributes on a function, hence the ignores.
auto_transport.Options = AutoOptions  # type: ignore[attr-defined]  # (see above)
auto_transport.choose = choose  # type: ignore[attr-defined]  # (see above)
auto_transport.cross_process = True  # type: ignore[attr-defined]  # (see above)
