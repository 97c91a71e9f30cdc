"""The experiment config: typed dataclasses, layered resolution, validation.

One :class:`ExperimentConfig` describes a whole run; the controller builds the worker
graph from it and every worker receives a copy. It is resolved in this order, each
layer overriding the previous one:

1. the dataclass defaults below (plus the defaults of the algorithm's and the
   environment's own ``Config`` dataclasses, under ``algo.*`` and ``env.*``);
2. the algorithm's ``presets(spec)``: dotted keys suited to the environment;
3. a TOML config file (``--config FILE``; nested tables or dotted keys);
4. ``--set key=value`` overrides, in the order given;
5. ``--seed``, ``--name``, ``--steps N`` / ``--frames N``.

Every value is checked against the field's type (``int``, ``float``, ``bool``, ``str``,
``Optional[...]``, ``Literal[...]``, ``tuple[...]``/``list[...]``); a bad value or an
unknown field raises :class:`ConfigError` naming the field, the bad value and what is
allowed, before any worker starts.

Units: ``env_steps`` are environment steps; ``frames`` are env steps x the environment's
frame-skip (``EnvSpec.frame_skip``); see :func:`budget`.
"""
from __future__ import annotations

import ast
import dataclasses
import datetime as _dt
import difflib
import inspect
import io
import json
import math
import re
import textwrap
import tokenize
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

from zoo.core.env import EnvSpec
from zoo.core.registry import Component, Registry, UnknownComponentError, load_object

__all__ = [
    "ActorsConfig", "PolicyConfig", "TrainerConfig", "StreamConfig", "StreamsConfig", "LogConfig",
    "ExperimentConfig", "ConfigError", "UnknownEnvError", "OptionInfo",
    "resolve_env", "make_env", "build_config", "apply_override", "set_value", "apply_mapping",
    "load_config_file", "validate", "config_to_dict", "save_config", "budget", "default_budget",
    "list_options", "algorithm_config_class", "env_config_class", "sanitize_name",
]


# ----------------------------------------------------------------------------- dataclasses
@dataclass
class ActorsConfig:
    """Actor workers: they step environments and cut trajectories into samples."""

    count: int = 2
    """Number of actor worker processes."""
    envs_per_actor: int = 8
    """Environments stepped by each actor; must be divisible by ``ring_size``."""
    ring_size: int = 2
    """Environment groups per actor: one group steps while the others wait for actions."""


@dataclass
class PolicyConfig:
    """The policy (inference) worker."""

    max_batch: int = 4096
    """Most agent-slots in one forward pass."""
    max_wait_ms: float = 1.0
    """Longest wait (milliseconds) for more requests before running a partial batch."""
    device: str = "cpu"
    """Torch device of the inference network: cpu, cuda, cuda:N or mps."""
    threads: int = 1
    """Torch CPU threads of the policy worker (actors use none)."""


@dataclass
class TrainerConfig:
    """The trainer worker."""

    batch_samples: int = 16
    """Length-T agent trajectories (samples) per update."""
    max_policy_lag: int = 4
    """Samples whose policy version is older than the trainer's by more than this are dropped."""
    checkpoint_interval: int = 100
    """Write a checkpoint every this many updates."""
    device: str = "cpu"
    """Torch device of the trainer: cpu, cuda, cuda:N or mps."""
    threads: int = 0
    """Torch CPU threads of the trainer; 0 = half the machine's cores (at least 1)."""
    learn: bool = True
    """False: count and discard samples without updating (sampling-throughput benchmarks)."""


@dataclass
class StreamConfig:
    """One stream of the dataflow."""

    transport: str = "nng"
    """Registered transport carrying this stream (see `zoo list transports`)."""


@dataclass
class StreamsConfig:
    """The three streams: actors <-> policy, actors -> trainer, trainer -> policy."""

    inference: StreamConfig = field(default_factory=StreamConfig)
    """Request/reply: observations to the policy worker, actions back."""
    sample: StreamConfig = field(default_factory=StreamConfig)
    """Push/pull: samples from actors to the trainer."""
    parameter: StreamConfig = field(default_factory=StreamConfig)
    """Publish/latest: versioned parameters from the trainer to the policy worker."""


@dataclass
class LogConfig:
    """Progress and metrics output."""

    interval_s: float = 5.0
    """Seconds between status lines and metric records."""
    tensorboard: bool = True
    """Also write TensorBoard event files to the run directory."""


@dataclass
class ExperimentConfig:
    """Everything one run needs; built by :func:`build_config`.

    ``spec`` is the :class:`~zoo.core.env.EnvSpec` of the environment, filled by
    :func:`build_config` from one in-process env instance. It is not an option: it
    cannot be set with ``--set`` and :func:`config_to_dict` writes it as ``env_spec``
    (with ``spec.resolved``), never reads it back.
    """

    algo_name: str
    """Registered algorithm name (e.g. ``ppo``)."""
    env_name: str
    """The environment as the user typed it (``CartPole-v1``, ``atari:Pong``)."""
    seed: int = 1
    """Base random seed (0 <= seed < 2**32)."""
    name: str = ""
    """Run name; the run writes to ``<runs_dir>/<name>``. Default ``<algo>-<env>-<YYYYmmdd-HHMMSS>``."""
    runs_dir: str = "runs"
    """Folder holding one sub-folder per run."""
    env_steps: int = 0
    """Budget in env steps (0: not set). At most one of env_steps and frames is non-zero."""
    frames: int = 0
    """Budget in frames = env steps x frame-skip (0: not set). 0 and 0: the env's default budget."""
    sample_length: int = 128
    """T: env steps per sample (each sample also holds the bootstrap observation)."""
    actors: ActorsConfig = field(default_factory=ActorsConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    algo: Any = None
    """The algorithm's ``Config`` dataclass instance (``--set algo.X=...``)."""
    env: Any = None
    """The environment plugin's ``Config`` dataclass instance (``--set env.X=...``)."""
    spec: EnvSpec | None = field(default=None, repr=False, compare=False)
    """Filled by :func:`build_config`; not an option (see the class docstring)."""


# Fields that are not options: positional on the command line, or computed.
_NOT_OPTIONS = frozenset({"algo_name", "env_name", "spec"})
_DEVICE_RE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
_BUDGET_KINDS = ("env_steps", "frames")


# ----------------------------------------------------------------------------- errors
class ConfigError(ValueError):
    """A bad experiment setting. The message names the field, the bad value and the fix.

    ``field`` is the dotted field name (``""`` when the error is not about one field);
    ``problems`` lists every message when :func:`validate` found several.
    """

    def __init__(self, message: str, field: str = "", problems: list[str] | None = None):
        super().__init__(message)
        self.field = field
        self.problems = problems or [message]


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


# ----------------------------------------------------------------------------- type handling
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}
_NONE = {"none", "null"}


def _hints(obj: Any) -> dict[str, Any]:
    """Resolved type hints of a dataclass (class or instance); falls back to raw annotations."""
    cls = obj if isinstance(obj, type) else type(obj)
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable forward refs: use what we have
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args):
            return True, (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)])
    return False, tp


def type_name(tp: Any) -> str:
    """A short human name for a field type: ``int``, ``float | None``, ``'a' | 'b'``."""
    optional, inner = _is_optional(tp)
    if optional:
        return f"{type_name(inner)} | None"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        args = typing.get_args(tp)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return f"tuple[{type_name(args[0])}, ...]"
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]" if args else origin.__name__
    if isinstance(tp, type):
        return tp.__name__
    if isinstance(tp, str):
        return tp
    return str(tp).replace("typing.", "")


def _article(name: str) -> str:
    return "an" if name[:1].lower() in "aeiou" else "a"


class _Bad(Exception):
    """Internal: a value does not fit a type; the message says what is allowed."""


def _convert(value: Any, tp: Any) -> Any:
    """``value`` as type ``tp``; raises :class:`_Bad` saying what is allowed.

    A str (from ``--set``) is parsed: bools from true/false/1/0/yes/no, ``none``/``null``
    for Optional fields, comma-separated items (optionally in brackets) for tuples and
    lists, ints also from ``1_000`` and ``1e6``. Any other value (presets, TOML) must
    already fit: an int is accepted for a float field, never a bool for a number.
    """
    text = value if isinstance(value, str) else None
    optional, inner = _is_optional(tp)
    if optional:
        if value is None or (text is not None and text.strip().lower() in _NONE | {""}):
            return None
        return _convert(value, inner)
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        if text is None:
            return value
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    if origin is Literal:
        choices = typing.get_args(tp)
        for choice in choices:
            if value == choice or (text is not None and str(choice) == text):
                return choice
        raise _Bad("one of " + ", ".join(repr(c) for c in choices))
    if origin in (tuple, list):
        args = typing.get_args(tp)
        if text is not None:
            body = text.strip()
            body = body[1:-1] if body[:1] in "[(" and body[-1:] in "])" else body
            items: list[Any] = [p.strip() for p in body.split(",")] if body.strip() else []
            if items and items[-1] == "":
                items.pop()  # trailing comma: "64,"
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise _Bad(f"a list ({type_name(tp)})")
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(items) != len(args):
                raise _Bad(f"{len(args)} comma-separated values ({type_name(tp)})")
            out = [_convert(i, a) for i, a in zip(items, args)]
        else:
            try:
                out = [_convert(i, args[0] if args else Any) for i in items]
            except _Bad as exc:
                raise _Bad(f"comma-separated values, each {exc}") from None
        return tuple(out) if origin is tuple else out
    if tp is bool:
        if isinstance(value, bool):
            return value
        if text is not None and text.strip().lower() in _TRUE | _FALSE:
            return text.strip().lower() in _TRUE
        raise _Bad("a bool (true/false/1/0/yes/no)")
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        if text is not None:
            try:
                return int(text.strip(), 10)
            except ValueError:
                try:  # "1e6" is an integer written in float notation
                    value, is_number = float(text), True
                except ValueError:
                    raise _Bad("an int") from None
        if is_number and math.isfinite(value) and float(value).is_integer():
            return int(value)
        raise _Bad("an int")
    if tp is float:
        if text is not None:
            try:
                return float(text.strip())
            except ValueError:
                raise _Bad("a float") from None
        if is_number:
            return float(value)
        raise _Bad("a float")
    if tp is str:
        if text is not None:
            return text
        raise _Bad("a str")
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            raise _Bad("a group of options (set one of its fields)")
        if isinstance(value, tp):
            return value
        try:
            return tp(value)
        except Exception:  # noqa: BLE001
            raise _Bad(f"{_article(tp.__name__)} {tp.__name__}") from None
    return value


# ----------------------------------------------------------------------------- option listing
@dataclass
class OptionInfo:
    """One settable leaf option: dotted ``path``, ``type`` name, ``default`` value, ``doc``."""

    path: str
    type: str
    default: Any
    doc: str


def _field_docs(cls: type) -> dict[str, str]:
    """Documentation of each field of dataclass ``cls``.

    Sources, first found wins: ``field(metadata={"help": ...})`` (or ``"doc"``); an
    attribute docstring (a string right after the field); a trailing ``# comment`` on the
    field's line; a ``name: text`` or ````name````: text line in the class docstring.
    """
    docs: dict[str, str] = {}
    names = [f.name for f in dataclasses.fields(cls)]
    for f in dataclasses.fields(cls):
        text = f.metadata.get("help") or f.metadata.get("doc") if f.metadata else None
        if text:
            docs[f.name] = str(text)
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        source, tree = "", None
    if tree is not None and tree.body and isinstance(tree.body[0], ast.ClassDef):
        comments: dict[int, str] = {}
        try:
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if tok.type == tokenize.COMMENT:
                    comments[tok.start[0]] = tok.string.lstrip("#").strip()
        except (tokenize.TokenError, IndentationError):
            pass
        body = tree.body[0].body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = node.target.id
                if name in docs or name not in names:
                    continue
                nxt = body[i + 1] if i + 1 < len(body) else None
                if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                        and isinstance(nxt.value.value, str)):
                    docs[name] = inspect.cleandoc(nxt.value.value)
                elif node.lineno in comments:
                    docs[name] = comments[node.lineno]
    current: str | None = None  # a docstring item being continued on indented lines
    for line in inspect.cleandoc(cls.__doc__ or "").splitlines():
        m = re.match(r"^\s*[-*]?\s*(?:``(\w+)``|(\w+))\s*(?:\([^)]*\))?\s*:\s*(.+)$", line)
        name = (m.group(1) or m.group(2)) if m else None
        if m and name in names and name not in docs:
            docs[name], current = m.group(3).strip(), name
        elif current and line[:1].isspace() and line.strip():
            docs[current] += " " + line.strip()
        else:
            current = None
    return {k: " ".join(v.split()) for k, v in docs.items()}


def list_options(obj: Any, prefix: str = "") -> list[OptionInfo]:
    """Every settable leaf option of a config dataclass (class or instance), depth first.

    ``prefix`` is prepended to each path (``"algo."``). For an :class:`ExperimentConfig`
    the non-options (``algo_name``, ``env_name``, ``spec``) are skipped, and ``algo``/
    ``env`` are expanded only when they hold a dataclass instance.
    """
    out: list[OptionInfo] = []
    if obj is None or not dataclasses.is_dataclass(obj):
        return out
    cls = obj if isinstance(obj, type) else type(obj)
    hints = _hints(cls)
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls):
        if cls is ExperimentConfig and f.name in _NOT_OPTIONS:
            continue
        if isinstance(obj, type):
            if f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                value = f.default_factory()  # type: ignore[misc]
            else:
                value = None
        else:
            value = getattr(obj, f.name)
        tp = hints.get(f.name, f.type)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += list_options(value, f"{prefix}{f.name}.")
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out += list_options(tp, f"{prefix}{f.name}.")
        elif tp is Any and value is None:
            continue  # algo/env without a Config dataclass
        else:
            out.append(OptionInfo(prefix + f.name, type_name(tp), value, docs.get(f.name, "")))
    return out


# ----------------------------------------------------------------------------- setting values
def _split_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text}: expected key=value, e.g. --set actors.count=4")
    return key, value


def _leaf_paths(cfg: Any) -> list[str]:
    return [o.path for o in list_options(cfg)]


def _unknown_field(cfg: Any, path: str, parent: Any, parent_path: str) -> ConfigError:
    paths = _leaf_paths(cfg)
    close = difflib.get_close_matches(path, paths, n=3, cutoff=0.6)
    msg = f"unknown field {path!r}"
    if close:
        msg += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    if parent is None:
        msg += f" ({parent_path} has no options)"
    else:
        names = [f.name for f in dataclasses.fields(parent)
                 if not (isinstance(parent, ExperimentConfig) and f.name in _NOT_OPTIONS)]
        where = parent_path or "the experiment config"
        msg += f" ({where} has: {', '.join(names)})"
    return ConfigError(msg, field=path)


def set_value(cfg: ExperimentConfig, path: str, value: Any, *, source: str = "") -> None:
    """Set the dotted option ``path`` of ``cfg`` to ``value``, checking its type.

    ``value`` may be a string (parsed as the field's type, as for ``--set``) or an already
    typed value (presets, TOML files), which must fit the field's type (an int is
    accepted for a float field). ``source`` prefixes error messages (``"--set a=b"``).

    Raises:
        ConfigError: unknown field (with the closest names and the options at that level),
            a group of options set as a whole, a non-option field, or a value of the
            wrong type ("actors.count expects an int, got 'abc'").
    """
    prefix = f"{source}: " if source else ""
    parts = path.split(".")
    if not all(parts):
        raise ConfigError(f"{prefix}malformed field name {path!r}", field=path)
    if parts[0] in _NOT_OPTIONS:
        why = ("is computed from the environment" if parts[0] == "spec"
               else "is given on the command line (zoo train ALGO --env ENV)")
        raise ConfigError(f"{prefix}{parts[0]} is not an option: it {why}", field=path)
    obj: Any = cfg
    for i, part in enumerate(parts):
        names = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
        if part not in names:
            err = _unknown_field(cfg, path, obj if names else None, ".".join(parts[:i]))
            raise ConfigError(prefix + str(err), field=path) from None
        if i == len(parts) - 1:
            break
        obj = getattr(obj, part)
    leaf = parts[-1]
    current = getattr(obj, leaf)
    tp = _hints(obj).get(leaf, Any)
    if dataclasses.is_dataclass(current) and not isinstance(current, type):
        subs = ", ".join(f"{path}.{f.name}" for f in dataclasses.fields(current))
        raise ConfigError(f"{prefix}{path} is a group of options; set one of {subs}", field=path)
    if tp is Any and current is not None and not isinstance(value, str):
        tp = type(current)  # an untyped field holding a value: keep its type
    try:
        new = _convert(value, tp)
    except _Bad as exc:
        raise ConfigError(f"{prefix}{path} expects {exc}, got {value!r}", field=path) from None
    setattr(obj, leaf, new)


def apply_override(cfg: ExperimentConfig, override: str) -> None:
    """Apply one ``--set`` override, ``"dotted.key=value"``; the value is parsed by field type.

    Bools accept true/false/1/0/yes/no; ``Optional`` fields accept ``none``/``null``;
    tuple and list fields take comma-separated items (``64,64`` or ``[64, 64]``); ints
    accept ``1_000_000`` and ``1e6``.

    Raises:
        ConfigError: e.g. ``"--set actors.count=abc: actors.count expects an int, got 'abc'"``
            or ``"--set actors.cont=3: unknown field 'actors.cont'; did you mean
            'actors.count'? (actors has: count, envs_per_actor, ring_size)"``.
    """
    key, value = _split_override(override)
    set_value(cfg, key, value, source=f"--set {override}")


def _flatten(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, path + ".")
        else:
            out.append((path, value))
    return out


def apply_mapping(cfg: ExperimentConfig, mapping: dict[str, Any], *, source: str) -> None:
    """Apply a nested mapping (TOML tables) or dotted keys with typed values.

    Raises:
        ConfigError: as :func:`set_value`, prefixed with ``source``.
    """
    for path, value in _flatten(mapping):
        set_value(cfg, path, value, source=source)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML experiment config file into a nested dict.

    Raises:
        ConfigError: the file is missing, unreadable or not valid TOML.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file", field="config") from None
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it: {exc}", field="config") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}", field="config") from None


# ----------------------------------------------------------------------------- components
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
    """Build one env in-process, read its spec, close it."""
    try:
        env = component.load()(arg, env_config, seed)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported as a setup error before any worker starts
        raise ConfigError(f"--env {env_name}: the env failed to build: {type(exc).__name__}: {exc}",
                          field="env") from exc
    try:
        spec = env.spec
    finally:
        try:
            env.close()
        except Exception:  # noqa: BLE001
            pass
    if not isinstance(spec, EnvSpec):
        raise ConfigError(f"--env {env_name}: env plugin {component.plugin!r} returned an env whose "
                          f"spec is {type(spec).__name__}, not zoo.core.env.EnvSpec", field="env")
    return spec


# ----------------------------------------------------------------------------- build
def _now() -> _dt.datetime:
    return _dt.datetime.now()


def sanitize_name(name: str) -> str:
    """A run name safe as one folder name: characters other than ``A-Za-z0-9._-`` become ``-``.

    ``"ppo-atari:Pong"`` -> ``"ppo-atari-Pong"``; ``"ALE/Pong-v5"`` -> ``"ALE-Pong-v5"``.
    """
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
    return out.lstrip(".")


def _user_layers(cfg: ExperimentConfig, file_data: dict | None, config_file: Any,
                 overrides: Iterable[str]) -> None:
    if file_data:
        for key in ("algo_name", "env_name"):
            if key in file_data:
                if file_data[key] != getattr(cfg, key):
                    raise ConfigError(
                        f"--config {config_file}: {key} = {file_data[key]!r} but the command line says "
                        f"{getattr(cfg, key)!r}; remove {key} from the file", field=key)
        data = {k: v for k, v in file_data.items() if k not in ("algo_name", "env_name")}
        apply_mapping(cfg, data, source=f"--config {config_file}")
    for override in overrides:
        apply_override(cfg, override)


def _fresh(algo_name: str, env_name: str, algo_cls: type | None, env_cls: type | None) -> ExperimentConfig:
    return ExperimentConfig(algo_name=algo_name, env_name=env_name,
                            algo=algo_cls() if algo_cls else None, env=env_cls() if env_cls else None)


def build_config(
    registry: Registry,
    algo_name: str,
    env_name: str,
    *,
    seed: int | None = None,
    config_file: str | Path | None = None,
    overrides: Iterable[str] = (),
    steps: int | None = None,
    frames: int | None = None,
    name: str | None = None,
) -> ExperimentConfig:
    """Resolve the full experiment config; nothing is started.

    Order: dataclass defaults -> ``algorithm.presets(spec)`` -> ``config_file`` (TOML)
    -> ``overrides`` (``"a.b=value"``) -> ``seed`` / ``name`` / ``steps`` / ``frames``.
    ``seed=None`` and ``name=None`` keep what the layers set (default seed 1, default name
    ``<algo>-<env>-<YYYYmmdd-HHMMSS>``, sanitised). ``steps`` (env steps) or ``frames``
    replaces any budget set by the layers; when neither the layers nor these set a budget,
    the env's ``default_budget`` is written into ``env_steps`` or ``frames``.

    One env is built in-process (``component.load()(arg, cfg.env, cfg.seed)``) to read its
    :class:`EnvSpec`, then closed; the spec is stored in ``cfg.spec``. If presets change
    ``env.*`` options the env is built again with the final options.

    Raises:
        UnknownComponentError: unknown algorithm (closest names suggested); checked first,
            before anything is imported.
        UnknownEnvError: unknown env (closest names and ids suggested).
        ConfigError: a bad file, override, budget or env, or :func:`validate` failed.
    """
    overrides = list(overrides)
    algo_component = registry.get("algorithm", algo_name)
    env_component, env_arg = resolve_env(registry, env_name)
    if steps is not None and frames is not None:
        raise ConfigError("--steps and --frames are mutually exclusive: give the budget in env steps "
                          "or in frames, not both", field="env_steps")
    file_data = load_config_file(config_file) if config_file is not None else None
    algo_cls = algorithm_config_class(algo_component)
    env_cls = env_config_class(env_component)

    def finish(cfg: ExperimentConfig) -> None:
        if seed is not None:
            set_value(cfg, "seed", seed, source="--seed")
        if name is not None:
            cfg.name = name
        if steps is not None:
            cfg.env_steps, cfg.frames = int(steps), 0
        if frames is not None:
            cfg.env_steps, cfg.frames = 0, int(frames)
        cfg.name = sanitize_name(cfg.name)

    # Pass 1: the user's layers alone decide the env options used to probe the spec.
    scratch = _fresh(algo_name, env_name, algo_cls, env_cls)
    _user_layers(scratch, file_data, config_file, overrides)
    finish(scratch)
    validate(scratch, registry, check_budget=False)
    spec = _probe_spec(env_component, env_arg, scratch.env, scratch.seed, env_name)

    # Pass 2: the real order, with presets for this spec.
    cfg = _fresh(algo_name, env_name, algo_cls, env_cls)
    presets_fn = getattr(algo_component.load(), "presets", None)
    presets = presets_fn(spec) if callable(presets_fn) else {}
    for key, value in (presets or {}).items():
        set_value(cfg, key, value, source=f"{algo_name} presets for {spec.env_id}")
    _user_layers(cfg, file_data, config_file, overrides)
    finish(cfg)
    if cfg.env != scratch.env:
        spec = _probe_spec(env_component, env_arg, cfg.env, cfg.seed, env_name)
    cfg.spec = spec

    if cfg.env_steps == 0 and cfg.frames == 0:
        kind, n = default_budget(env_component, env_arg)
        setattr(cfg, kind, n)
    if not cfg.name:
        cfg.name = f"{algo_name}-{env_name}-{_now():%Y%m%d-%H%M%S}"
        cfg.name = sanitize_name(cfg.name)
    validate(cfg, registry)
    return cfg


# ----------------------------------------------------------------------------- validation
def validate(cfg: ExperimentConfig, registry: Registry | None = None, *, check_budget: bool = True) -> None:
    """Check cross-field rules; every problem is reported at once.

    Rules: ``actors.count``, ``actors.envs_per_actor``, ``actors.ring_size``,
    ``sample_length``, ``trainer.batch_samples``, ``trainer.checkpoint_interval``,
    ``policy.max_batch`` >= 1; ``envs_per_actor`` divisible by ``ring_size``;
    ``trainer.max_policy_lag`` >= 0; ``policy.max_wait_ms`` >= 0; ``log.interval_s`` > 0;
    ``env_steps``, ``frames`` >= 0 and not both non-zero; ``0 <= seed < 2**32``; devices
    are cpu, cuda, cuda:N or mps; ``name`` is a plain folder name; every
    ``streams.*.transport`` is registered (``registry`` defaults to the process-wide one);
    the algorithm's and the env's Config dataclasses are rebuilt with
    ``dataclasses.replace`` (re-running their ``__post_init__`` checks) and their
    ``validate()`` is called when they have one; a ``ValueError``/``TypeError`` from either
    is reported as a problem.

    Raises:
        ConfigError: ``field`` is the first bad field, ``problems`` lists all messages.
    """
    problems: list[tuple[str, str]] = []

    def need(ok: bool, path: str, msg: str) -> None:
        if not ok:
            problems.append((path, msg))

    def at_least(path: str, value: Any, low: int | float) -> None:
        need(value >= low, path, f"{path} must be >= {low}, got {value!r}; set e.g. --set {path}={max(low, 1)}")

    a, p, t = cfg.actors, cfg.policy, cfg.trainer
    at_least("actors.count", a.count, 1)
    at_least("actors.envs_per_actor", a.envs_per_actor, 1)
    at_least("actors.ring_size", a.ring_size, 1)
    if a.envs_per_actor >= 1 and a.ring_size >= 1 and a.envs_per_actor % a.ring_size:
        problems.append((
            "actors.envs_per_actor",
            f"actors.envs_per_actor={a.envs_per_actor} is not divisible by actors.ring_size={a.ring_size}; "
            f"each ring group holds the same number of envs: use a multiple of {a.ring_size} "
            f"(e.g. {a.ring_size * max(1, a.envs_per_actor // a.ring_size)}) or change actors.ring_size",
        ))
    at_least("sample_length", cfg.sample_length, 1)
    at_least("policy.max_batch", p.max_batch, 1)
    need(p.max_wait_ms >= 0, "policy.max_wait_ms", f"policy.max_wait_ms must be >= 0, got {p.max_wait_ms!r}")
    at_least("trainer.batch_samples", t.batch_samples, 1)
    need(t.max_policy_lag >= 0, "trainer.max_policy_lag",
         f"trainer.max_policy_lag must be >= 0, got {t.max_policy_lag!r} (0 accepts only the current version)")
    at_least("trainer.checkpoint_interval", t.checkpoint_interval, 1)
    at_least("policy.threads", p.threads, 1)
    need(t.threads >= 0, "trainer.threads", f"trainer.threads must be >= 0 (0 = automatic), got {t.threads!r}")
    need(cfg.log.interval_s > 0, "log.interval_s", f"log.interval_s must be > 0 seconds, got {cfg.log.interval_s!r}")
    for path, dev in (("policy.device", p.device), ("trainer.device", t.device)):
        need(bool(_DEVICE_RE.match(dev)), path, f"{path}={dev!r} is not a device; use cpu, cuda, cuda:N or mps")
    need(0 <= cfg.seed < 2**32, "seed", f"seed must be in [0, 2**32), got {cfg.seed}")
    need(cfg.env_steps >= 0, "env_steps", f"env_steps must be >= 0, got {cfg.env_steps}")
    need(cfg.frames >= 0, "frames", f"frames must be >= 0, got {cfg.frames}")
    need(not (cfg.env_steps and cfg.frames), "env_steps",
         f"both env_steps={cfg.env_steps} and frames={cfg.frames} are set; set only one budget "
         "(--steps N or --frames N)")
    if check_budget and cfg.env_steps == 0 and cfg.frames == 0:
        problems.append(("env_steps", "no budget: set env_steps or frames (--steps N or --frames N)"))
    need(bool(cfg.runs_dir), "runs_dir", "runs_dir must not be empty")
    if cfg.name or check_budget:
        need(bool(cfg.name) and cfg.name == sanitize_name(cfg.name) and cfg.name not in (".", ".."),
             "name", f"name {cfg.name!r} is not a plain folder name; use letters, digits, '.', '_' and '-'")
    reg = registry
    if reg is None:
        from zoo.core.plugins import get_registry

        reg = get_registry()
    transports = reg.names("transport")
    for stream in ("inference", "sample", "parameter"):
        path = f"streams.{stream}.transport"
        value = getattr(cfg.streams, stream).transport
        if value not in transports:
            close = _suggest(value, transports)
            problems.append((path, f"{path}={value!r} is not a registered transport; "
                             + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                             + f"installed: {', '.join(transports) or 'none'}"))
    for part in ("algo", "env"):
        sub = getattr(cfg, part)
        if not dataclasses.is_dataclass(sub) or isinstance(sub, type):
            continue
        try:
            dataclasses.replace(sub)  # re-runs the plugin's __post_init__ checks on the final values
            check = getattr(sub, "validate", None)
            if callable(check):
                check()
        except (ValueError, TypeError) as exc:
            text = str(exc)
            problems.append((part, text if text.startswith(part + ".") else f"{part}: {text}"))
    if problems:
        raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0],
                          problems=[m for _, m in problems])


# ----------------------------------------------------------------------------- output
def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        try:
            return _jsonable(value.item())
        except (TypeError, ValueError):
            pass
    if isinstance(value, Path):
        return str(value)
    return str(value)


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The config as JSON-serialisable data for ``runs/<name>/config.json``.

    Every field except ``spec``, with ``algo``/``env`` as dicts of their fields, plus
    ``env_spec``: ``{env_id, agents, frame_skip, observation_space, action_space,
    resolved}`` (spaces as their ``str``; ``resolved`` holds what the env plugin resolved,
    e.g. Atari's frame-skip and sticky-action probability). Tuples become lists; values
    JSON cannot hold become strings.
    """
    out = {f.name: _jsonable(getattr(cfg, f.name)) for f in dataclasses.fields(cfg) if f.name != "spec"}
    spec = cfg.spec
    if spec is not None:
        out["env_spec"] = {
            "env_id": spec.env_id,
            "agents": list(spec.agents),
            "frame_skip": spec.frame_skip,
            "observation_space": {k: str(v) for k, v in spec.observation_space.items()},
            "action_space": str(spec.action_space),
            "resolved": _jsonable(spec.resolved),
        }
    return out


def save_config(cfg: ExperimentConfig, run_dir: str | Path) -> Path:
    """Write :func:`config_to_dict` to ``run_dir/config.json`` (indented); returns the path."""
    path = Path(run_dir) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config_to_dict(cfg), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def budget(cfg: ExperimentConfig, spec: EnvSpec | None = None, registry: Registry | None = None) -> tuple[str, int]:
    """The run's budget as ``("env_steps", N)``.

    ``env_steps`` is used as is; ``frames`` is converted with ``spec.frame_skip``
    (``ceil(frames / frame_skip)`` env steps, so at least that many frames are played:
    100,000 frames at frame-skip 4 -> 25,000 env steps). ``spec`` defaults to
    ``cfg.spec``. When both are 0 the env's default budget is used (resolved from
    ``registry``, default the process-wide one).

    Raises:
        ConfigError: both budgets set, a negative budget, or no spec to convert frames.
    """
    spec = spec if spec is not None else cfg.spec
    env_steps, frames = cfg.env_steps, cfg.frames
    if env_steps < 0 or frames < 0:
        raise ConfigError(f"budget must be >= 0, got env_steps={env_steps} frames={frames}", field="env_steps")
    if env_steps and frames:
        raise ConfigError(f"both env_steps={env_steps} and frames={frames} are set; set only one budget",
                          field="env_steps")
    if not env_steps and not frames:
        if registry is None:
            from zoo.core.plugins import get_registry

            registry = get_registry()
        component, arg = resolve_env(registry, cfg.env_name)
        kind, n = default_budget(component, arg)
        env_steps, frames = (n, 0) if kind == "env_steps" else (0, n)
    if env_steps:
        return ("env_steps", int(env_steps))
    if spec is None:
        raise ConfigError("frames budget needs the env spec (its frame_skip) to convert to env steps", field="frames")
    skip = max(1, int(spec.frame_skip))
    return ("env_steps", -(-int(frames) // skip))
