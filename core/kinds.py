"""Worker kinds: the kinds of worker process a run is made of, registered by plugins.

A worker kind says everything the core needs to run its workers (hook
``register_worker_kinds``, :mod:`zoo.core.hookspecs`); the controller, the worker graph
(:mod:`zoo.core.graph`, ``graph.json``), placement, supervision and the launchers work from
the registered kinds and know no kind by name. Actor, policy worker and trainer are kinds like
any other, registered by the built-in plugin ``zoo.workers`` (:mod:`zoo.core.workers.plugin`).

``register(name, entry, *, summary, **declaration)``, the keywords being the fields of
:class:`WorkerKind`:

- ``entry``: ``"module:function"``, ``function(ctx: WorkerContext) -> None``, what each worker
  process runs (imported in the worker only); it returns when ``ctx.stop`` is True or its work
  is done, and calls ``ctx.heartbeat()`` at least every second (:mod:`zoo.core.workers.base`).
- ``count``: ``"module:function"``, ``count(cfg) -> int``, how many workers of the kind the
  experiment config asks for (0: none). Left out, the count is the kind's option
  ``workers.<name>.count`` (default 0: the kind runs only when a config asks for it).
- ``options``: ``"module:Class"``, a dataclass of the kind's options, set as
  ``workers.<name>.<option>`` (``--set workers.param-stats.count=1``, or a TOML table
  ``[workers.param-stats]``); checked before any process starts, each bad key named with
  its fix. Without it the kind's only option is ``count``.
- ``listens`` / ``connects``: the streams (``inference``, ``sample``, ``parameter``) whose
  endpoints its workers bind and those they connect to, as a tuple or a
  ``"module:function"`` of the run's :class:`~zoo.core.graph.Graph` returning one (its
  ``cfg`` and ``counts``; the built-in actor connects to ``parameter`` only inline): placement resolves each stream's
  transport from the hosts of the workers at its ends.
- ``cpus``: CPUs one worker asks for (the ``ray`` launcher's bundle); ``device``: the dotted
  config path of its torch device option (``policy.device``), from which a launcher decides
  whether it asks for a GPU.
- ``restart``: ``"restartable"`` (a failed worker is started again, up to
  ``supervision.max_restarts`` times), ``"from-checkpoint"`` (up to
  ``supervision.trainer_restarts`` times, the new process continuing from the run's last
  checkpoint, as ``zoo resume``) or ``"never"`` (a failure stops the run).
- ``lead``: the kind that drives the run (the trainer): its worker 0 exiting with 0 ends the
  run (the budget is reached) and writes the run's metrics and checkpoints; none of its
  workers exiting 0 is a failure; on a stop its workers finish their work (up to
  ``supervision.stop_timeout_s``) where the others are killed after a grace period. One
  kind leads.
- ``order``: start order, lowest first (trainer 0, policy worker 10, actor 20; default 100),
  then by name; ``graph.json`` lists the workers in that order.
- ``describe``: ``"module:function"``, ``describe(graph, index) -> dict``, what ``graph.json``
  records of worker ``index`` besides its role and index (default: its streams).
- ``policy``: reserved for named policies (issue 22): the policy a kind's workers serve.
- ``check``: ``"module:function"``, ``check(cfg, registry) -> [(field, message), ...]``, the
  problems of a run that asks for workers of the kind which its options alone do not show
  (a name that must be an installed plugin, a policy the kind needs), checked with the whole
  config (named policies built, ``cfg.spec`` probed) before any process starts
  (:func:`kind_problems`); each message one line naming the field and the fix.

A kind's workers receive a :class:`~zoo.core.workers.base.WorkerContext` whose ``role`` is
the kind's name; :func:`options_of` gives a worker its ``workers.<name>`` options.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from zoo.core.options import ConfigError, bounded
from zoo.core.registry import load_object

STREAM_NAMES = ("inference", "sample", "parameter")
"""The streams a kind may listen on or connect to (:mod:`zoo.core.streams`)."""
RESTART_POLICIES = ("restartable", "from-checkpoint", "never")
DEFAULT_ORDER = 100
WORKERS_TABLE = "workers"
"""The experiment config's table of kind options: ``workers.<kind>.<option>``."""
DECLARATION = ("count", "options", "listens", "connects", "cpus", "device", "restart", "lead", "order", "describe",
               "policy", "check")
"""The keywords ``register`` takes for a worker kind besides ``name``, ``entry``, ``summary``."""


@dataclass
class KindOptions:
    """The options of a kind that declares none of its own: how many workers it runs."""

    count: int = field(default=0, metadata=bounded(ge=0))
    """Number of workers of this kind (0: none)."""


@dataclass(frozen=True)
class WorkerKind:
    """One registered worker kind (the module doc says what each field means)."""

    name: str
    entry: str
    count: Any = None
    options: Any = None
    listens: Any = ()
    connects: Any = ()
    cpus: float = 1.0
    device: str | None = None
    restart: str = "restartable"
    lead: bool = False
    order: int = DEFAULT_ORDER
    describe: Any = None
    policy: str | None = None
    check: Any = None
    summary: str = ""
    plugin: str = ""

    def options_class(self) -> type:
        """The dataclass of its ``workers.<name>`` options (:class:`KindOptions` when it declares none)."""
        return load_object(self.options) if self.options is not None else KindOptions

    def option_values(self, cfg: Any) -> Any:
        """Its options in ``cfg`` (``workers.<name>``, typed and checked by :func:`worker_options`)."""
        given = (getattr(cfg, WORKERS_TABLE, None) or {}).get(self.name) or {}
        return self.options_class()(**given)

    def workers(self, cfg: Any) -> int:
        """How many workers of this kind ``cfg`` asks for (0 while its ``workers.<name>`` options
        are bad: :func:`worker_options` reports them, before anything starts)."""
        if self.count is None:
            try:
                return max(0, int(self.option_values(cfg).count))
            except (TypeError, ValueError):
                return 0
        return int(load_object(self.count)(cfg))

    def streams(self, graph: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(listens, connects)``: the streams its workers bind and connect to in ``graph``."""
        return _streams(self.listens, graph), _streams(self.connects, graph)

    def device_of(self, cfg: Any) -> str | None:
        """The torch device its workers are configured with (its ``device`` path in ``cfg``), or None."""
        if not self.device:
            return None
        value = config_value(cfg, self.device)
        return value if isinstance(value, str) else None

    def restarts_allowed(self, sv: Any) -> int:
        """How many restarts one of its workers may have under ``supervision`` settings ``sv``."""
        if self.restart == "restartable":
            return int(sv.max_restarts)
        if self.restart == "from-checkpoint":
            return int(sv.trainer_restarts)
        return 0

    def graph_entry(self, graph: Any, index: int) -> dict[str, Any]:
        """Worker ``index``'s entry in ``graph.json``: role, index and what :attr:`describe` adds
        (default: ``listens`` and ``connects``, its streams)."""
        if self.describe is not None:
            extra = load_object(self.describe)(graph, index)
        else:
            listens, connects = self.streams(graph)
            extra = {"listens": list(listens), "connects": list(connects)}
        return {"role": self.name, "index": index, **extra}


def _streams(value: Any, graph: Any) -> tuple[str, ...]:
    return tuple(load_object(value)(graph)) if isinstance(value, str) else tuple(value)


def config_value(cfg: Any, path: str) -> Any:
    """The value at dotted ``path`` of ``cfg``, through dataclass fields and dict keys (None if absent)."""
    obj = cfg
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def declaration_problem(name: str, entry: Any, declaration: Mapping[str, Any]) -> str | None:
    """Why a ``register_worker_kinds`` call cannot be a worker kind, or None (checked at
    registration: the plugin then fails to load, naming it)."""
    unknown = sorted(set(declaration) - set(DECLARATION))
    if unknown:
        return (f"worker kind {name!r}: unknown keyword(s) {', '.join(unknown)}; a worker kind takes "
                f"{', '.join(DECLARATION)}")
    if not isinstance(entry, str) or ":" not in entry:
        return f"worker kind {name!r}: entry must be 'module:function' (taking a WorkerContext), got {entry!r}"
    if declaration.get("restart", "restartable") not in RESTART_POLICIES:
        return (f"worker kind {name!r}: restart={declaration['restart']!r}; use one of "
                f"{', '.join(RESTART_POLICIES)}")
    for key in ("listens", "connects"):
        value = declaration.get(key, ())
        if isinstance(value, str):
            if ":" not in value:
                return f"worker kind {name!r}: {key} must be a tuple of streams or 'module:function', got {value!r}"
            continue
        bad = [s for s in value if s not in STREAM_NAMES]
        if bad:
            return (f"worker kind {name!r}: {key} names unknown stream(s) {', '.join(map(repr, bad))}; streams: "
                    f"{', '.join(STREAM_NAMES)}")
    cpus = declaration.get("cpus", 1.0)
    if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or cpus < 0:
        return f"worker kind {name!r}: cpus must be a number >= 0, got {cpus!r}"
    order = declaration.get("order", DEFAULT_ORDER)
    if isinstance(order, bool) or not isinstance(order, int):
        return f"worker kind {name!r}: order must be an int, got {order!r}"
    return None


def kind_from_component(component: Any) -> WorkerKind:
    """The :class:`WorkerKind` of a registry component of kind ``worker``."""
    return WorkerKind(name=component.name, entry=component.factory, summary=component.summary,
                      plugin=component.plugin, **component.options)


def in_order(kinds: Iterable[WorkerKind]) -> list[WorkerKind]:
    """``kinds`` in start order: by ``order``, then by name."""
    return sorted(kinds, key=lambda k: (k.order, k.name))


def worker_kinds(registry: Any = None) -> list[WorkerKind]:
    """Every registered worker kind, in start order (``registry``: default the process-wide one).

    Raises:
        ConfigError: not exactly one kind leads the run (``lead=True``); the message names them.
    """
    if registry is None:
        from zoo.core.plugins import get_registry

        registry = get_registry()
    kinds = in_order(kind_from_component(c) for c in registry.all("worker"))
    leads = [k for k in kinds if k.lead]
    if len(leads) != 1:
        named = ", ".join(f"{k.name!r} (plugin {k.plugin!r})" for k in leads) or "none"
        raise ConfigError(f"exactly one worker kind must lead the run (lead=True), found {named}; uninstall the "
                          "plugin that adds a second one", field=WORKERS_TABLE)
    return kinds


def by_name(kinds: Iterable[WorkerKind]) -> dict[str, WorkerKind]:
    return {k.name: k for k in kinds}


def lead_kind(kinds: Iterable[WorkerKind]) -> WorkerKind:
    """The kind that leads the run (see the module doc)."""
    return next(k for k in kinds if k.lead)


def worker_options(kinds: Iterable[WorkerKind], cfg: Any) -> dict[str, dict[str, Any]]:
    """``cfg.workers`` checked against the kinds and typed: ``{kind: {option: value}}``.

    Raises:
        ConfigError: every problem at once, each naming ``workers.<kind>[.<option>]`` and the
            fix: a kind nobody registered (closest names suggested), a kind's entry that is not
            a table, an option the kind does not have, a value of the wrong type or out of range.
    """
    import difflib

    from zoo.core.options import bound_problems
    from zoo.core.streams import check_options

    table = getattr(cfg, WORKERS_TABLE, None) or {}
    known = by_name(kinds)
    problems: list[tuple[str, str]] = []
    out: dict[str, dict[str, Any]] = {}
    for name, given in table.items():
        path = f"{WORKERS_TABLE}.{name}"
        kind = known.get(name)
        if kind is None:
            close = difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.6)
            problems.append((path, f"{path}: no worker kind {name!r} is installed; "
                             + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                             + f"worker kinds: {', '.join(sorted(known))} (see `zoo list workers`)"))
            continue
        if not isinstance(given, dict):
            problems.append((path, f"{path} is a table of the kind's options: set {path}.<option>=value "
                             f"(e.g. {path}.count=1), got {given!r}"))
            continue
        if not given:
            continue  # an empty table (TOML [workers.x] without keys): nothing set
        if kind.count is not None and kind.options is None:
            first = next(iter(given), "count")
            doc = (getattr(load_object(kind.count), "__doc__", None) or "").strip().splitlines()
            where = f" (its number of workers: {doc[0].replace('``', '').rstrip('.')})" if doc else ""
            problems.append((f"{path}.{first}", f"{path}.{first}: worker kind {name!r} (plugin {kind.plugin!r}) has "
                             f"no options under {path}{where}; remove {', '.join(f'{path}.{k}' for k in given)}"))
            continue
        try:
            typed = check_options(SimpleNamespace(Options=kind.options_class()), name, given, path,
                                  kind="worker kind")
        except ConfigError as exc:
            problems += [(exc.field, m) for m in exc.problems]
            continue
        problems += bound_problems(kind.options_class()(**typed), prefix=f"{path}.")
        out[name] = typed
    if problems:
        raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0], problems=[m for _, m in problems])
    return out


def kind_problems(kinds: Iterable[WorkerKind], cfg: Any, registry: Any) -> list[tuple[str, str]]:
    """The ``check`` problems (module doc) of every kind ``cfg`` asks workers of, in start order."""
    out: list[tuple[str, str]] = []
    for kind in kinds:
        if kind.check is not None and kind.workers(cfg) > 0:
            out += [(str(f), str(m)) for f, m in load_object(kind.check)(cfg, registry)]
    return out


def options_of(ctx: Any) -> Any:
    """The ``workers.<kind>`` options of the worker running with context ``ctx`` (an instance of
    its kind's options dataclass, defaults filled in)."""
    return by_name(worker_kinds(ctx.registry))[ctx.role].option_values(ctx.cfg)
