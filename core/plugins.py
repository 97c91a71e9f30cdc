"""The plugin host: one pluggy ``PluginManager("zoo")`` for built-ins and entry points.

Built-in plugins (listed in :data:`BUILTIN_PLUGINS`) and third-party ones (entry-point
group ``zoo.plugins``) go through the same hooks. A plugin that fails to import, or whose
hook raises, is recorded in :attr:`PluginHost.failures` and the others keep working;
with ``ZOO_STRICT_PLUGINS=1`` any failure raises :class:`PluginLoadError`. A hook
implementation whose name matches no hook spec (a misspelling) always raises.

Loading is idempotent: each process (workers are spawned, not forked) builds its own
host with :func:`get_host`.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata as md
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

import pluggy

from zoo.core import hookspecs
from zoo.core.registry import Component, Registry

ENTRY_POINT_GROUP = "zoo.plugins"
STRICT_ENV = "ZOO_STRICT_PLUGINS"

BUILTIN_PLUGINS = (
    "zoo.plugins.algorithms.ppo.plugin",
    "zoo.plugins.envs.gym.plugin",
    "zoo.plugins.envs.atari.plugin",
    "zoo.transports.nng.plugin",
)
OPTIONAL_BUILTIN_PLUGINS = (
    # Built-ins that may not exist yet in every checkout; absent modules are skipped quietly.
    "zoo.plugins.algorithms.impala.plugin",
    "zoo.plugins.algorithms.mappo.plugin",
    "zoo.plugins.envs.hide_and_seek.plugin",
    "zoo.transports.inline.plugin",
    "zoo.transports.shm.plugin",
    "zoo.transports.tcp.plugin",
)
HOOKS = ("register_algorithms", "register_envs", "register_transports")
KIND_OF_HOOK = {"register_algorithms": "algorithm", "register_envs": "env", "register_transports": "transport"}


class PluginLoadError(RuntimeError):
    """A plugin failed while ``ZOO_STRICT_PLUGINS=1`` is set, or a hook name is misspelt."""


@dataclass
class PluginInfo:
    """What ``zoo plugins`` shows for one plugin."""

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
    """Loads plugins and fills a :class:`Registry`."""

    def __init__(self, strict: bool | None = None, entry_points: bool = True) -> None:
        self.strict = os.environ.get(STRICT_ENV, "") not in ("", "0") if strict is None else strict
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.registry = Registry()
        self._load_builtins()
        if entry_points:
            self._load_entry_points()
        self._validate()
        self._collect()

    # -- loading -------------------------------------------------------------------
    def _fail(self, info: PluginInfo, exc: BaseException) -> None:
        info.error = f"{type(exc).__name__}: {exc}"
        self.plugins[info.name] = info
        if self.strict:
            raise PluginLoadError(
                f"plugin {info.name!r} ({info.distribution}) failed to load: {info.error} "
                f"[{STRICT_ENV}=1 makes this fatal; unset it to skip the plugin]"
            ) from exc

    def register_plugin(self, obj: Any, name: str, distribution: str, version: str, builtin: bool) -> None:
        """Register an already-imported plugin object (used by tests and entry points)."""
        self.pm.register(obj, name=name)
        self.plugins[name] = PluginInfo(name, distribution, version, builtin)

    def _load_builtins(self) -> None:
        version = _zoo_version()
        for module_name in BUILTIN_PLUGINS + OPTIONAL_BUILTIN_PLUGINS:
            short = "zoo." + module_name.split(".")[-2]
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if module_name in OPTIONAL_BUILTIN_PLUGINS and exc.name and module_name.startswith(exc.name):
                    continue  # this built-in is not part of this build
                self._fail(PluginInfo(short, "zoo-rl", version, True), exc)
                continue
            except Exception as exc:  # noqa: BLE001 - isolate any plugin failure
                self._fail(PluginInfo(short, "zoo-rl", version, True), exc)
                continue
            self.register_plugin(module, short, "zoo-rl", version, True)

    def _load_entry_points(self) -> None:
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else "?"
            if ep.name in self.plugins:
                continue  # the same distribution installed twice on sys.path
            try:
                obj = ep.load()
            except Exception as exc:  # noqa: BLE001
                self._fail(PluginInfo(ep.name, dist, version, False), exc)
                continue
            self.register_plugin(obj, ep.name, dist, version, False)

    def _validate(self) -> None:
        known = set(HOOKS) | {"register_commands"}
        for name in list(self.pm.list_name_plugin()):
            plugin_name, plugin = name
            if plugin is None:
                continue
            for attr in dir(plugin):
                fn = getattr(plugin, attr, None)
                if callable(fn) and hasattr(fn, hookspecs.PROJECT + "_impl") and attr not in known:
                    raise PluginLoadError(
                        f"plugin {plugin_name!r} implements unknown hook {attr!r}; "
                        f"known hooks: {', '.join(sorted(known))}"
                        + _did_you_mean(attr, known)
                    )
        self.pm.check_pending()

    def _collect(self) -> None:
        for hook in HOOKS:
            kind = KIND_OF_HOOK[hook]
            for impl in getattr(self.pm.hook, hook).get_hookimpls():
                info = self.plugins[impl.plugin_name]
                if hook not in info.hooks:
                    info.hooks.append(hook)
                register = functools.partial(self._register, kind, info)
                try:
                    impl.function(register=register)
                except Exception as exc:  # noqa: BLE001
                    if isinstance(exc, PluginLoadError) or type(exc).__name__ == "DuplicateComponentError":
                        raise
                    exc.__notes__ = [traceback.format_exc()]
                    self._fail(info, exc)
        for info in self.plugins.values():
            for impl_name in ("register_commands",):
                if any(i.plugin_name == info.name for i in self.pm.hook.register_commands.get_hookimpls()):
                    if impl_name not in info.hooks:
                        info.hooks.append(impl_name)

    def _register(self, kind: str, info: PluginInfo, name: str, factory: Any, *, summary: str = "",
                  aliases: tuple[str, ...] = (), **options: Any) -> None:
        self.registry.add(Component(kind, name, factory, summary, info.name, info.version, options), tuple(aliases))

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
