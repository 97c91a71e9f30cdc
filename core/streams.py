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
                                (meta only); always on ``nng`` (``CONTROL_TRANSPORT``)
=============  ===============  ==========================================================

Which transport carries each stream is set by ``streams.<name>.transport`` in the
experiment config, and that transport's options by ``streams.<name>.options.<option>``
(checked against the transport's ``Options`` dataclass, see :func:`check_options`).
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
from typing import Any

from zoo.core.options import ConfigError, convert_value
from zoo.core.registry import Registry

STREAMS = ("inference", "sample", "parameter")
CONTROL = "control"
CONTROL_TRANSPORT = "nng"


def check_options(factory: Any, name: str, options: dict[str, Any], path: str,
                  kind: str = "transport") -> dict[str, Any]:
    """``options`` checked against ``kind`` (transport, resolver) ``name``'s ``factory.Options``
    dataclass and typed.

    A transport (or resolver) declares its options as a dataclass ``Options`` on its factory: field names
    are keyword arguments of the factory, field types say how values are parsed (``"16"``
    from ``--set`` becomes ``16``), and its ``__post_init__`` may raise ``ValueError`` for
    bad values (message starting with the field name). Options set to None are left out,
    so the transport falls back to its environment variables and defaults.

    Returns:
        ``{option: typed value}`` for the options set.

    Raises:
        ConfigError: every problem at once (``problems``), each naming ``<path>.<option>``:
            an option the transport does not have (with the closest names and the ones it
            has), a value of the wrong type, or a value its ``Options`` refuses.
    """
    if not options:
        return {}
    opts_cls = getattr(factory, "Options", None)
    if not isinstance(opts_cls, type) or not dataclasses.is_dataclass(opts_cls):  # a dataclass, not an instance
        first = next(iter(options))
        raise ConfigError(f"{path}.{first}: {kind} {name!r} has no options; remove "
                          f"{', '.join(f'{path}.{k}' for k in options)}", field=f"{path}.{first}")
    hints = typing.get_type_hints(opts_cls)
    known = [f.name for f in dataclasses.fields(opts_cls)]
    problems: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    for key, value in options.items():
        field = f"{path}.{key}"
        if key not in known:
            close = difflib.get_close_matches(key, known, n=2, cutoff=0.6)
            hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
            problems.append((field, f"{field}: {kind} {name!r} has no option {key!r}; {hint}"
                                    f"its options: {', '.join(known)}"))
            continue
        try:
            out[key] = convert_value(value, hints[key], field)
        except ConfigError as exc:
            problems.append((field, str(exc)))
    if not problems:
        try:
            opts_cls(**out)
        except (ValueError, TypeError) as exc:
            text = str(exc)
            first = text.split(" ", 1)[0]
            if first in out:  # "slots must be >= 1, got 0" -> streams.<s>.options.slots must be ...
                problems.append((f"{path}.{first}", f"{path}.{text}"))
            else:
                problems.append((path, f"{path}: {text}"))
    if problems:
        raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0], problems=[m for _, m in problems])
    return {k: v for k, v in out.items() if v is not None}


def transport_options(registry: Registry, cfg: Any, stream: str) -> dict[str, Any]:
    """The typed options of ``stream``'s transport set in ``cfg.streams.<stream>.options`` (``control``: none).

    Raises:
        ConfigError: see :func:`check_options`.
    """
    sc = None if stream == CONTROL else getattr(cfg.streams, stream)
    if sc is None or not sc.options:
        return {}  # nothing to check: the transport's module is not even imported
    factory = registry.get("transport", sc.transport).load()
    return check_options(factory, sc.transport, sc.options, f"streams.{stream}.options")


CONTROL_OPTIONS = {"spin_us": 0}
"""The control stream carries a few messages a second: it never busy-polls (and so reads no
``ZOO_SPIN_US``)."""


def transport_for(registry: Registry, cfg: Any, stream: str, run_id: str, create: bool = False, *,
                  choice: tuple[str, dict[str, Any]] | None = None, resolver: Any = None):
    """Build the transport that carries ``stream`` with its configured options
    (``control`` always uses :data:`CONTROL_TRANSPORT`, ``nng``, with :data:`CONTROL_OPTIONS`).

    ``choice``: ``(transport name, typed options)`` resolved for this run from the placement
    (:func:`zoo.core.placement.resolve_streams`), used instead of the config's.
    ``resolver``: the run's :class:`~zoo.core.resolver.Resolver`, handed to factories that
    take a ``resolver`` keyword (their listeners publish through it). Factories that take a
    ``producers`` keyword get the graph's most senders to one listener of ``stream``
    (:meth:`zoo.core.graph.Graph.producers`).

    Raises:
        TransportError: the transport refuses its settings (e.g. a bad ``ZOO_*`` variable).
    """
    if choice is not None:
        name, options = choice
    elif stream == CONTROL:
        name, options = CONTROL_TRANSPORT, CONTROL_OPTIONS
    else:
        name, options = getattr(cfg.streams, stream).transport, transport_options(registry, cfg, stream)
    factory = registry.get("transport", name).load()
    if resolver is not None and takes_keyword(factory, "resolver"):
        options = {**options, "resolver": resolver}
    if stream != CONTROL and takes_keyword(factory, "producers"):  # e.g. shm sizes its shared rings by it
        from zoo.core.graph import Graph

        options = {**options, "producers": max(1, Graph.from_config(cfg).producers(stream))}
    return factory(run_id, create=create, **options)


def takes_keyword(factory: Any, name: str) -> bool:
    """Whether ``factory`` accepts the keyword argument ``name`` (or any keyword)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) or p.kind == p.VAR_KEYWORD
               for p in params)
