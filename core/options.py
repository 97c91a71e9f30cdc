"""Typed-dataclass options: list them, document them, set them from strings or values.

Generic machinery, nothing experiment-specific. An *option* is a leaf field of a
(nested) dataclass, addressed by a dotted path (``actors.count``). Values given as
strings (``--set key=value``) are parsed by the field's type; typed values (presets,
TOML) must already fit it. Supported types: ``int``, ``float``, ``bool``, ``str``,
``Optional[...]``, ``Literal[...]``, ``tuple[...]``/``list[...]``, ``Any`` and plain
classes. A bad value or an unknown field raises :class:`ConfigError` naming the field,
the bad value and what is allowed.

A ``dict[str, ...]`` field is a *table*: ``table.name=value`` stores the value as given
under ``name``, and whoever owns the table checks names and types later (a stream's
transport options: :func:`zoo.core.streams.check_options`).

A field that is not an option carries ``metadata={NOT_OPTION: "why"}`` (``why`` completes
"it ..."): it is skipped by :func:`list_options` and refused by :func:`set_value`.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import io
import math
import re
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ConfigError", "OptionInfo", "NOT_OPTION", "type_name", "list_options",
    "set_value", "convert_value", "apply_override", "apply_mapping",
]

NOT_OPTION = "not_option"
"""Field-metadata key marking a field that is not an option; its value says why."""


class ConfigError(ValueError):
    """A bad setting. The message names the field, the bad value and the fix.

    ``field`` is the dotted field name (``""`` when the error is not about one field);
    ``problems`` lists every message when several were found at once.
    """

    def __init__(self, message: str, field: str = "", problems: list[str] | None = None):
        super().__init__(message)
        self.field = field
        self.problems = problems or [message]


def _is_option(f: dataclasses.Field) -> bool:
    return NOT_OPTION not in f.metadata


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
    if origin is dict:
        # A table of name -> value entries whose owner types them later (e.g. a stream's
        # transport options): a whole table is given as a literal, ``{"slots": 16}``.
        if text is not None:
            try:
                value = ast.literal_eval(text.strip() or "{}")
            except (ValueError, SyntaxError):
                raise _Bad("a table such as {'name': value}") from None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _Bad("a table such as {'name': value}")
        return dict(value)
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
        text = f.metadata.get("help") or f.metadata.get("doc")
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

    ``prefix`` is prepended to each path (``"algo."``). Fields marked :data:`NOT_OPTION`
    are skipped; an ``Any`` field holding ``None`` is skipped too, and one holding a
    dataclass instance is expanded.
    """
    out: list[OptionInfo] = []
    if obj is None or not dataclasses.is_dataclass(obj):
        return out
    cls = obj if isinstance(obj, type) else type(obj)
    hints = _hints(cls)
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls):
        if not _is_option(f):
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
            continue  # e.g. algo/env without a Config dataclass
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


def _unknown_field(cfg: Any, path: str, parent: Any, parent_path: str) -> ConfigError:
    paths = [o.path for o in list_options(cfg)]
    close = difflib.get_close_matches(path, paths, n=3, cutoff=0.6)
    msg = f"unknown field {path!r}"
    if close:
        msg += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    if parent is None:
        msg += f" ({parent_path} has no options)"
    else:
        names = [f.name for f in dataclasses.fields(parent) if _is_option(f)]
        where = parent_path or "the experiment config"
        msg += f" ({where} has: {', '.join(names)})"
    return ConfigError(msg, field=path)


def set_value(cfg: Any, path: str, value: Any, *, source: str = "") -> None:
    """Set the dotted option ``path`` of dataclass instance ``cfg`` to ``value``, checking its type.

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
    obj: Any = cfg
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else {}
        if part not in fields:
            err = _unknown_field(cfg, path, obj if fields else None, ".".join(parts[:i]))
            raise ConfigError(prefix + str(err), field=path) from None
        if not _is_option(fields[part]):
            raise ConfigError(f"{prefix}{part} is not an option: it {fields[part].metadata[NOT_OPTION]}",
                              field=path)
        if i == len(parts) - 1:
            break
        child = getattr(obj, part)
        if isinstance(child, dict) and typing.get_origin(_hints(obj).get(part)) is dict:
            table = ".".join(parts[:i + 1])
            if i + 2 != len(parts):
                raise ConfigError(f"{prefix}{table} is a table of name=value entries: set "
                                  f"{table}.<name>=value", field=path)
            # Stored as given; the table's owner checks names and types (see its docs).
            child[parts[-1]] = value
            return
        obj = child
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


def convert_value(value: Any, tp: Any, path: str) -> Any:
    """``value`` as type ``tp``, parsed like ``--set`` when it is a str.

    Raises:
        ConfigError: ``"<path> expects an int, got 'abc'"``.
    """
    try:
        return _convert(value, tp)
    except _Bad as exc:
        raise ConfigError(f"{path} expects {exc}, got {value!r}", field=path) from None


def apply_override(cfg: Any, override: str) -> None:
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


def apply_mapping(cfg: Any, mapping: dict[str, Any], *, source: str) -> None:
    """Apply a nested mapping (TOML tables) or dotted keys with typed values.

    Raises:
        ConfigError: as :func:`set_value`, prefixed with ``source``.
    """
    for path, value in _flatten(mapping):
        set_value(cfg, path, value, source=source)
