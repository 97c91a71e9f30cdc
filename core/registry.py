"""The registries that the ``register_*`` hooks fill.

One :class:`Registry` holds every component kind (``algorithm``, ``env``, ``transport``,
``launcher``, ``resolver``, ``worker``: the worker kinds of :mod:`zoo.core.kinds`).
Names are unique per kind across all plugins: a second registration of a name raises
:class:`DuplicateComponentError` naming both plugins. Factories may be given as
``"package.module:attr"`` strings and are imported only by :meth:`Component.load`.
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from typing import Any

KINDS = ("algorithm", "env", "transport", "launcher", "resolver", "worker", "baseline")


class DuplicateComponentError(RuntimeError):
    """Two plugins registered the same component name for one kind."""


class UnknownComponentError(LookupError):
    """No component of that kind has that name; ``suggestions`` holds the closest names."""

    def __init__(self, kind: str, name: str, suggestions: list[str], available: list[str],
                 installed: int | None = None):
        self.kind, self.name, self.suggestions, self.available = kind, name, suggestions, available
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        count = len(available) if installed is None else installed  # aliases are names, not components
        super().__init__(
            f"unknown {kind} {name!r}.{hint} Run `zoo list {kind}s` to see all "
            f"({count} installed)."
        )


def load_object(path: Any) -> Any:
    """Import ``"package.module:attr"`` (or return ``path`` unchanged if it is not a str)."""
    if not isinstance(path, str):
        return path
    module_name, _, attr = path.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _origin(component: Component) -> str:
    return f" ({component.distribution} {component.version})" if component.distribution else ""


@dataclass
class Component:
    """One registered algorithm, environment, transport, launcher, resolver or worker kind."""

    kind: str
    name: str
    factory: Any
    summary: str
    plugin: str
    version: str
    options: dict[str, Any] = field(default_factory=dict)
    distribution: str = ""  # the installed distribution that provides ``plugin``

    def load(self) -> Any:
        """The factory object itself (imports its module on first use)."""
        return load_object(self.factory)

    def option(self, key: str, default: Any = None) -> Any:
        """An extra registration keyword (``config``, ``default_budget``...), loaded if a path."""
        value = self.options.get(key, default)
        return load_object(value) if key in ("config", "resolves", "default_budget", "renderer",
                                                          "vector_factory") else value


class Registry:
    """Components by kind and name, filled by the plugin host."""

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[str, Component]] = {k: {} for k in KINDS}
        self._aliases: dict[str, dict[str, str]] = {k: {} for k in KINDS}

    def add(self, component: Component, aliases: tuple[str, ...] = ()) -> None:
        """Add ``component``; raises :class:`DuplicateComponentError` if its name is taken."""
        table = self._by_kind[component.kind]
        for name in (component.name, *aliases):
            owner = table.get(name) or table.get(self._aliases[component.kind].get(name, ""))
            if owner is not None:
                raise DuplicateComponentError(
                    f"{component.kind} {name!r} is registered by both plugin {owner.plugin!r}{_origin(owner)} "
                    f"and plugin {component.plugin!r}{_origin(component)}; uninstall one of them or "
                    "rename the component"
                )
        table[component.name] = component
        for alias in aliases:
            self._aliases[component.kind][alias] = component.name

    def get(self, kind: str, name: str) -> Component:
        """The component, or :class:`UnknownComponentError` with close matches."""
        table = self._by_kind[kind]
        name = self._aliases[kind].get(name, name)
        if name in table:
            return table[name]
        candidates = sorted(table) + sorted(self._aliases[kind])
        raise UnknownComponentError(kind, name, difflib.get_close_matches(name, candidates, n=3), candidates,
                                    installed=len(table))

    def names(self, kind: str) -> list[str]:
        return sorted(self._by_kind[kind])

    def all(self, kind: str | None = None) -> list[Component]:
        kinds = [kind] if kind else list(KINDS)
        return [self._by_kind[k][n] for k in kinds for n in sorted(self._by_kind[k])]
