"""Environment resolution: which registered env component serves ``--env NAME``.

Also the per-component lookups the experiment config needs: the algorithm's and the
env's options dataclasses, the env's default budget, and building one env in-process
to read its :class:`~zoo.core.env.EnvSpec`.
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any

from zoo.core.env import EnvSpec
from zoo.core.options import ConfigError
from zoo.core.registry import Component, Registry, UnknownComponentError, load_object

__all__ = [
    "UnknownEnvError", "resolve_env", "make_env", "default_budget",
    "algorithm_config_class", "env_config_class",
]

_BUDGET_KINDS = ("env_steps", "frames")


class UnknownEnvError(UnknownComponentError):
    """``--env`` names no registered environment and no plugin resolves it.

    ``suggestions`` holds the closest registered names, ``NAME:ARG`` forms and ids listed
    by plugins (e.g. every Gymnasium id).
    """

    def __init__(self, name: str, suggestions: list[str], available: list[str]):
        super().__init__("env", name, suggestions, available)
        self.args = (
            f"unknown env {name!r}."
            + (f" Did you mean: {', '.join(suggestions)}?" if suggestions else "")
            + " Give a registered env name, NAME:ARG (e.g. atari:Pong) or an id a plugin serves"
            f" (e.g. a Gymnasium id); run `zoo list envs` to see all ({len(available)} installed).",
        )


def _env_listers(component: Component) -> Any:
    """The ``known_ids() -> list[str]`` of an env plugin, if it offers one.

    Taken from the registration option ``known_ids="module:function"``, else a
    ``known_ids`` function next to its ``resolves`` function.
    """
    lister = component.options.get("known_ids")
    if lister is None:
        resolver = component.options.get("resolves")
        if isinstance(resolver, str):
            lister = resolver.partition(":")[0] + ":known_ids"
        elif resolver is not None and getattr(resolver, "__module__", None):
            lister = resolver.__module__ + ":known_ids"
    if lister is None:
        return None
    try:
        fn = load_object(lister)
    except (ImportError, AttributeError):
        return None
    return fn if callable(fn) else None


def _suggest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Closest candidates, compared case-insensitively, in their original spelling."""
    by_lower: dict[str, str] = {}
    for c in candidates:
        by_lower.setdefault(c.lower(), c)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[c] for c in close]


def resolve_env(registry: Registry, env_name: str) -> tuple[Component, str | None]:
    """Find the env component for ``--env env_name`` and the argument to pass its factory.

    - a registered env name (or alias), e.g. ``gym`` -> ``(component, None)``;
    - ``NAME:ARG`` with ``NAME`` registered, e.g. ``atari:Pong`` -> ``(atari, "Pong")``
      (an empty ``ARG`` gives ``None``);
    - otherwise the first env component (by name) whose ``resolves`` option returns True
      for the whole id, e.g. ``CartPole-v1`` -> ``(gym, "CartPole-v1")``.

    Imports nothing heavy except what a ``resolves`` function imports (gymnasium).

    Raises:
        UnknownEnvError: none of the above; ``suggestions`` holds the closest registered
            names, ``NAME:ARG`` forms and ids listed by the plugins' ``known_ids``.
    """
    names = registry.names("env")
    try:
        return registry.get("env", env_name), None
    except UnknownComponentError:
        pass
    prefix, sep, arg = env_name.partition(":")
    if sep:
        try:
            return registry.get("env", prefix), (arg or None)
        except UnknownComponentError:
            pass
    components = registry.all("env")
    for component in components:
        if component.options.get("resolves") is None:
            continue
        try:
            if component.option("resolves")(env_name):
                return component, env_name
        except Exception:  # noqa: BLE001 - a broken resolver must not hide the others
            continue
    candidates = list(names)
    if sep:
        candidates += [f"{n}:{arg}" for n in _suggest(prefix, names)]
    for component in components:
        lister = _env_listers(component)
        if lister is None:
            continue
        try:
            ids = [str(i) for i in lister()]
        except Exception:  # noqa: BLE001
            continue
        candidates += ids
        if sep and prefix == component.name:
            candidates += [f"{component.name}:{i}" for i in ids]
    raise UnknownEnvError(env_name, _suggest(env_name, candidates), names)


def algorithm_config_class(component: Component) -> type | None:
    """The algorithm's hyperparameter dataclass: the ``config=`` registration option, else
    the class's ``Config`` attribute (which imports the algorithm), else None."""
    cls = component.option("config")
    if cls is None:
        cls = getattr(component.load(), "Config", None)
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def env_config_class(component: Component) -> type | None:
    """The env plugin's options dataclass from its ``config=`` registration option, or None."""
    cls = component.option("config")
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def default_budget(component: Component, arg: str | None) -> tuple[str, int]:
    """The env's ``default_budget`` option as ``("env_steps" | "frames", N)``.

    The option is a tuple, a callable, or a ``"module:function"`` path called with ``arg``.

    Raises:
        ConfigError: the env registers no default budget or an invalid one.
    """
    value = component.options.get("default_budget")
    if value is None:
        raise ConfigError(
            f"env {component.name!r} has no default budget; give one with --steps N (env steps) "
            "or --frames N", field="env_steps")
    if isinstance(value, str) or callable(value):
        value = load_object(value)(arg)
    if (not isinstance(value, (tuple, list)) or len(value) != 2 or value[0] not in _BUDGET_KINDS
            or isinstance(value[1], bool) or not isinstance(value[1], int) or value[1] < 1):
        raise ConfigError(
            f"env {component.name!r} registers default_budget={value!r}; expected "
            "('env_steps' or 'frames', a positive int). Pass --steps N or --frames N", field="env_steps")
    return str(value[0]), int(value[1])


def make_env(registry: Registry, env_name: str, env_config: Any, seed: int) -> Any:
    """Build one environment the way workers do: ``component.load()(arg, env_config, seed)``.

    Raises:
        UnknownEnvError: as :func:`resolve_env`.
        Exception: whatever the env factory raises.
    """
    component, arg = resolve_env(registry, env_name)
    return component.load()(arg, env_config, seed)


def _probe_spec(component: Component, arg: str | None, env_config: Any, seed: int, env_name: str) -> EnvSpec:
    """Build one env in-process, read its spec, check it, close it.

    The check is :func:`zoo.core.testing.check_env` cut down to one ``reset(seed)`` and one
    ``step`` with random actions (no determinism replay, no observation-bounds check): an
    env whose arrays lack the agent axis, or whose dtypes or keys differ from its spec, is
    refused here, naming the call and the array, instead of failing later in a worker
    (e.g. inside the policy network). A vector backend the plugin offers for this config is
    checked too (:func:`_probe_vector`).

    Raises:
        ConfigError: the env failed to build, its spec is not an ``EnvSpec``, it breaks the
            env contract, or ``reset``/``step`` raised (the same for its vector env).
    """
    from zoo.core.testing.env_check import EnvCheckError, check_env

    try:
        env = component.load()(arg, env_config, seed)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported as a setup error before any worker starts
        text = str(exc)
        for named in (f"--env {env_name}: ", f"--env {arg}: "):  # the plugin named the env already
            text = text.removeprefix(named)
        raise ConfigError(f"--env {env_name}: the env failed to build: {type(exc).__name__}: {text}",
                          field="env") from exc
    try:
        spec = env.spec
        if not isinstance(spec, EnvSpec):
            raise ConfigError(f"--env {env_name}: env plugin {component.plugin!r} returned an env whose "
                              f"spec is {type(spec).__name__}, not zoo.core.env.EnvSpec", field="env")
        try:
            check_env(env, seed=seed, episodes=1, max_steps=1, check_determinism=False, check_bounds=False,
                      close=False)
        except EnvCheckError as exc:
            raise ConfigError(f"--env {env_name}: env plugin {component.plugin!r} breaks Zoo's env contract "
                              f"(zoo.core.testing.check_env): {exc}", field="env") from None
        except Exception as exc:  # noqa: BLE001 - the env's own failure, before any worker starts
            raise ConfigError(f"--env {env_name}: the env failed in its first reset/step: "
                              f"{type(exc).__name__}: {exc}", field="env") from exc
    finally:
        try:
            env.close()
        except Exception:  # noqa: BLE001
            pass
    _probe_vector(component, arg, env_config, seed, env_name, spec)
    return spec


def _probe_vector(component: Component, arg: str | None, env_config: Any, seed: int, env_name: str,
                  spec: EnvSpec) -> None:
    """When the env plugin has a ``vector_factory`` that gives a vector env for this config,
    build one of 2 envs and check it (:func:`zoo.core.testing.check_vector_env`: its spec
    equals ``spec``, one reset and one step), so that a vector backend that cannot work is
    refused before any worker starts.

    Raises:
        ConfigError: the vector env failed to build, breaks the contract or raised.
    """
    from zoo.core.testing.env_check import EnvCheckError, check_vector_env

    factory = component.option("vector_factory")
    if factory is None:
        return
    try:
        venv = factory(arg, env_config, 2)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported as a setup error before any worker starts
        raise ConfigError(f"--env {env_name}: the vector env failed to build: {type(exc).__name__}: {exc}",
                          field="env") from exc
    if venv is None:
        return
    try:
        check_vector_env(venv, spec, seed=seed, steps=1, close=False)
    except EnvCheckError as exc:
        raise ConfigError(f"--env {env_name}: env plugin {component.plugin!r}'s vector env breaks Zoo's vector "
                          f"env contract (zoo.core.testing.check_vector_env): {exc}", field="env") from None
    except Exception as exc:  # noqa: BLE001 - the env's own failure, before any worker starts
        raise ConfigError(f"--env {env_name}: the vector env failed in its first reset/step: "
                          f"{type(exc).__name__}: {exc}", field="env") from exc
    finally:
        try:
            venv.close()
        except Exception:  # noqa: BLE001
            pass
