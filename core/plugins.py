"""The plugin host: one pluggy ``PluginManager("zoo")`` for built-ins and entry points.

Built-in plugins (listed in :data:`BUILTIN_PLUGINS`) and third-party ones (entry-point
group ``zoo.plugins``) go through the same hooks. A plugin that fails to import, or whose
hook raises, is recorded in :attr:`PluginHost.failures` (none of its components is
registered) and the others keep working; with ``ZOO_STRICT_PLUGINS=1`` any failure makes
building the host raise :class:`PluginLoadError` naming every failed plugin. A hook
implementation whose name matches no hook spec (a misspelling), or whose arguments do
not match its spec, always raises :class:`PluginLoadError`. Two plugins registering the
same component name raise :class:`zoo.core.registry.DuplicateComponentError`.

Loading is idempotent: each process (workers are spawned, not forked) builds its own
host with :func:`get_host`.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata as md
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import pluggy

from zoo.core import hookspecs
from zoo.core.registry import Component, DuplicateComponentError, Registry  # noqa: F401 (re-exported)

ENTRY_POINT_GROUP = "zoo.plugins"
STRICT_ENV = "ZOO_STRICT_PLUGINS"

BUILTIN_PLUGINS = (
    "zoo.plugins.algorithms.ppo.plugin",
    "zoo.plugins.envs.gym.plugin",
    "zoo.plugins.envs.atari.plugin",
    "zoo.plugins.envs.pettingzoo.plugin",
    "zoo.transports.nng.plugin",
    "zoo.plugins.algorithms.impala.plugin",
    "zoo.plugins.algorithms.mappo.plugin",
    "zoo.plugins.algorithms.apex.plugin",
    "zoo.plugins.algorithms.sac.plugin",
    "zoo.plugins.algorithms.r2d2.plugin",
    "zoo.plugins.envs.hide_and_seek.plugin",
    "zoo.transports.inline.plugin",
    "zoo.transports.shm.plugin",
    "zoo.transports.tcp.plugin",
    "zoo.transports.auto.plugin",
    "zoo.plugins.launchers.local.plugin",
    "zoo.commands.plugin",
    "zoo.plugins.resolvers.files.plugin",
    "zoo.plugins.launchers.ray.plugin",
    "zoo.core.workers.plugin",
)
HOOKS = ("register_algorithms", "register_envs", "register_transports", "register_launchers", "register_resolvers",
         "register_worker_kinds", "register_baselines")
KIND_OF_HOOK = {"register_algorithms": "algorithm", "register_envs": "env", "register_transports": "transport",
                "register_launchers": "launcher", "register_resolvers": "resolver", "register_worker_kinds": "worker",
                "register_baselines": "baseline"}
_FORBIDDEN_IN_NAMES = (":", " ", "\t", "\n")


class PluginLoadError(RuntimeError):
    """A plugin failed while ``ZOO_STRICT_PLUGINS=1`` is set, or a hook name is misspelt."""


@dataclass
class PluginInfo:
    """What ``zoo plugins`` shows for one plugin.

    ``name``: the plugin's name in the host (``zoo.gym`` for built-ins, the entry-point
    name for third-party plugins); ``hooks``: the ``register_*`` hooks it implements;
    ``error``: ``"ExceptionType: message"`` when it failed to load, else None.
    """

    name: str
    distribution: str
    version: str
    builtin: bool
    hooks: list[str] = field(default_factory=list)
    error: str | None = None


def _zoo_version() -> str:
    try:
        return md.version("zoo-rl")
    except md.PackageNotFoundError:
        return "0+unknown"


class PluginHost:
    """Loads plugins and fills a :class:`Registry`.

    Raises (from the constructor):
        PluginLoadError: a hook implementation matches no hook spec or has the wrong
            arguments; or, in strict mode, any plugin failed (the message names each).
        DuplicateComponentError: two plugins registered the same name for one kind.
    """

    def __init__(self, strict: bool | None = None, entry_points: bool = True) -> None:
        self.strict = os.environ.get(STRICT_ENV, "") not in ("", "0") if strict is None else strict
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.registry = Registry()
        self._ready = False
        self._load_builtins()
        if entry_points:
            self._load_entry_points()
        self._validate()
        self._collect()
        self._ready = True
        if self.strict and self.failures:
            raise PluginLoadError(
                "plugins failed to load: "
                + "; ".join(f"plugin {p.name!r} ({p.distribution} {p.version}): {p.error}" for p in self.failures)
                + f" [{STRICT_ENV}=1 makes this fatal; unset it to skip failed plugins]"
            )

    # -- loading -------------------------------------------------------------------
    def _fail(self, info: PluginInfo, exc: BaseException) -> None:
        info.error = f"{type(exc).__name__}: {exc}"
        self.plugins[info.name] = info

    def register_plugin(self, obj: Any, name: str, distribution: str, version: str, builtin: bool) -> None:
        """Register an already-imported plugin object (used by tests and entry points).

        After the host is built, the plugin's ``register_*`` hooks are called at once, so
        its components appear in :attr:`registry`.

        Raises:
            ValueError: ``name`` is already a plugin of this host.
            PluginLoadError: a hook implementation is misspelt or has the wrong arguments.
            DuplicateComponentError: one of its components' names is taken.
        """
        if name in self.plugins:
            raise ValueError(f"a plugin named {name!r} is already registered")
        try:
            self.pm.register(obj, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(f"plugin {name!r} ({distribution} {version}): {exc}") from exc
        info = PluginInfo(name, distribution, version, builtin)
        self.plugins[name] = info
        if self._ready:
            self._validate_plugin(name, obj)
            self._collect_plugin(info)

    def _load_builtins(self) -> None:
        version = _zoo_version()
        for module_name in BUILTIN_PLUGINS:
            short = "zoo." + module_name.split(".")[-2]
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # noqa: BLE001 - isolate any plugin failure
                self._fail(PluginInfo(short, "zoo-rl", version, True), exc)
                continue
            self.register_plugin(module, short, "zoo-rl", version, True)

    def _load_entry_points(self) -> None:
        seen: set[tuple[str, str]] = set()
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else "?"
            if (dist, ep.name) in seen:
                continue  # the same distribution found twice on sys.path
            seen.add((dist, ep.name))
            name = ep.name if ep.name not in self.plugins else f"{dist}.{ep.name}"
            try:
                obj = ep.load()
            except Exception as exc:  # noqa: BLE001
                self._fail(PluginInfo(name, dist, version, False), exc)
                continue
            self.register_plugin(obj, name, dist, version, False)

    def _validate(self) -> None:
        for plugin_name, plugin in list(self.pm.list_name_plugin()):
            if plugin is not None:
                self._validate_plugin(plugin_name, plugin)
        self.pm.check_pending()

    def _validate_plugin(self, plugin_name: str, plugin: Any) -> None:
        """A hook implementation that matches no hook spec (and is not optional) raises."""
        known = {name for name in vars(self.pm.hook) if not name.startswith("_")
                 and getattr(self.pm.hook, name).has_spec()}
        for caller in self.pm.get_hookcallers(plugin) or []:
            if caller.has_spec():
                continue
            if all(impl.optionalhook for impl in caller.get_hookimpls() if impl.plugin is plugin):
                continue
            info = self.plugins.get(plugin_name)
            where = f" ({info.distribution} {info.version})" if info else ""
            raise PluginLoadError(
                f"plugin {plugin_name!r}{where} implements unknown hook {caller.name!r}"
                + _did_you_mean(caller.name, known)
                + f"; known hooks: {', '.join(sorted(known))}"
            )

    def _collect(self) -> None:
        for info in list(self.plugins.values()):
            if info.error is None:
                self._collect_plugin(info)

    def _collect_plugin(self, info: PluginInfo) -> None:
        """Call the plugin's ``register_*`` hooks; its components are added only if all succeed."""
        plugin = self.pm.get_plugin(info.name)
        staged: list[tuple[Component, tuple[str, ...]]] = []
        try:
            for hook in HOOKS:
                for impl in getattr(self.pm.hook, hook).get_hookimpls():
                    if impl.plugin is not plugin:
                        continue
                    if hook not in info.hooks:
                        info.hooks.append(hook)
                    impl.function(register=functools.partial(self._register, staged, KIND_OF_HOOK[hook], info))
        except Exception as exc:  # noqa: BLE001 - a failing hook fails only its plugin
            if sys.version_info >= (3, 11):  # notes: Python >= 3.11
                exc.add_note(traceback.format_exc())
            self._fail(info, exc)
            if self._ready and self.strict:
                raise PluginLoadError(f"plugin {info.name!r} ({info.distribution} {info.version}) failed: "
                                      f"{info.error} [{STRICT_ENV}=1 makes this fatal]") from exc
            return
        if any(i.plugin is plugin for i in self.pm.hook.register_commands.get_hookimpls()):
            info.hooks.append("register_commands")
        for component, aliases in staged:
            self.registry.add(component, aliases)  # DuplicateComponentError propagates

    def _register(self, staged: list, kind: str, info: PluginInfo, name: str, factory: Any, *,
                  summary: str = "", aliases: tuple[str, ...] | str = (), **options: Any) -> None:
        """The ``register`` callback handed to hooks.

        Raises:
            ValueError: ``name`` (or an alias) is empty, not a str, or holds ':' or
                whitespace; ``factory`` is None.
        """
        if isinstance(aliases, str):
            aliases = (aliases,)
        aliases = tuple(aliases)
        for n in (name, *aliases):
            if not isinstance(n, str) or not n or any(c in n for c in _FORBIDDEN_IN_NAMES):
                raise ValueError(f"{kind} name {n!r} from plugin {info.name!r} must be a non-empty str "
                                 "without ':' or whitespace")
        if factory is None:
            raise ValueError(f"{kind} {name!r} from plugin {info.name!r} has no factory")
        if kind == "worker":
            from zoo.core.kinds import declaration_problem

            problem = declaration_problem(name, factory, options)
            if problem:
                raise ValueError(f"{problem} (plugin {info.name!r})")
        component = Component(kind, name, factory, summary, info.name, info.version, options,
                              distribution=info.distribution)
        staged.append((component, aliases))

    @property
    def failures(self) -> list[PluginInfo]:
        return [p for p in self.plugins.values() if p.error]


def _did_you_mean(name: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


@functools.lru_cache(maxsize=1)
def get_host() -> PluginHost:
    """The process-wide plugin host (built on first call)."""
    return PluginHost()


def get_registry() -> Registry:
    return get_host().registry
