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
transport options: :func:`zoo.core.streams.check_options`). A ``dict[str, dict[...]]``
field is a table of tables: ``table.name.option=value`` (``workers.param-stats.count=1``).

A field that is not an option carries ``metadata={NOT_OPTION: "why"}`` (``why`` completes
"it ..."): it is skipped by :func:`list_options` and refused by :func:`set_value`.

A numeric option declares the values that can work with ``metadata=bounded(...)``
(``field(default=2.5e-4, metadata=bounded(gt=0))``): :func:`bound_problems` checks every
such field of a config tree at once, and every ``float`` option, bounded or not, must be
finite unless it says ``finite=False``. ``zoo train --help`` shows the range.
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
    "ConfigError", "OptionInfo", "NOT_OPTION", "BOUNDS", "Bound", "bounded", "bound_of", "bound_problems",
    "check_bounds", "type_name", "list_options", "set_value", "convert_value", "apply_override", "apply_mapping",
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


# ----------------------------------------------------------------------------- value bounds
BOUNDS = "bounds"
"""Field-metadata key holding the :class:`Bound` of a numeric option (see :func:`bounded`)."""


def _num(x: float) -> str:
    """``2**32`` as ``4294967296``, ``1.0`` as ``1``, ``0.5`` as ``0.5``."""
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class Bound:
    """The values a numeric option accepts: ``ge``/``gt`` (lower), ``le``/``lt`` (upper).

    ``finite`` (default True) refuses ``nan`` and ``inf`` in float options; ``hint`` says
    what special values mean (``"0 = no limit"``) and follows the range in messages. For a
    tuple or list option the bound applies to each item.
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    finite: bool = True
    hint: str = ""

    def describe(self, is_float: bool = True) -> str:
        """The allowed range in words: ``">= 1"``, ``"in [0, 1)"``, ``"finite and > 0"``, ``"finite"``."""
        low = (f">= {_num(self.ge)}", "[", self.ge) if self.ge is not None else (
            (f"> {_num(self.gt)}", "(", self.gt) if self.gt is not None else None)
        high = (f"<= {_num(self.le)}", "]", self.le) if self.le is not None else (
            (f"< {_num(self.lt)}", ")", self.lt) if self.lt is not None else None)
        if low and high:
            return f"in {low[1]}{_num(low[2])}, {_num(high[2])}{high[1]}"
        text = (low or high or ("",))[0]
        if is_float and self.finite:
            return f"finite and {text}" if text else "finite"
        return text

    def allows(self, value: float) -> bool:
        """True when ``value`` (an int or float) is within the bound."""
        x = float(value)
        if math.isnan(x):
            return not self.finite and self.ge is None and self.gt is None and self.le is None and self.lt is None
        if self.finite and math.isinf(x):
            return False
        return ((self.ge is None or x >= self.ge) and (self.gt is None or x > self.gt)
                and (self.le is None or x <= self.le) and (self.lt is None or x < self.lt))


def bounded(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
            lt: float | None = None, finite: bool = True, hint: str = "") -> dict[str, Bound]:
    """Field metadata declaring a numeric option's allowed values, e.g.
    ``count: int = field(default=2, metadata=bounded(ge=1))``.

    Raises:
        ValueError: both ``ge`` and ``gt`` (or ``le`` and ``lt``) are given.
    """
    if (ge is not None and gt is not None) or (le is not None and lt is not None):
        raise ValueError("give at most one lower bound (ge or gt) and one upper bound (le or lt)")
    return {BOUNDS: Bound(ge, gt, le, lt, finite, hint)}


_FINITE = Bound()


def _numeric_kind(tp: Any) -> type | None:
    """``int`` or ``float`` when option type ``tp`` holds numbers (also inside Optional, tuple, list)."""
    _, inner = _is_optional(tp)
    if typing.get_origin(inner) in (tuple, list):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        kinds = {_numeric_kind(a) for a in args} - {None}
        return float if float in kinds else (int if int in kinds else None)
    return inner if inner in (int, float) else None


def bound_of(cls: Any, name: str) -> Bound | None:
    """The :class:`Bound` of field ``name`` of dataclass ``cls``: its ``bounded`` metadata, else
    "finite" for a float option, else None."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    bound = f.metadata.get(BOUNDS)
    if bound is None and _numeric_kind(_hints(cls).get(name, f.type)) is float:
        return _FINITE
    return bound


def bound_problems(obj: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every option of the config tree ``obj`` whose value is outside its :class:`Bound`.

    Walks nested dataclass instances depth first (``Any`` fields holding one included);
    ``prefix`` starts each path (``"algo."``). A ``Literal`` option holding none of its
    choices is reported too. Returns ``(path, message)`` pairs, e.g.
    ``("algo.lr", "algo.lr must be finite and > 0, got inf")``.
    """
    out: list[tuple[str, str]] = []
    if obj is None or not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return out
    hints = _hints(obj)
    for f in dataclasses.fields(obj):
        if not _is_option(f):
            continue
        value, path = getattr(obj, f.name), prefix + f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += bound_problems(value, path + ".")
            continue
        tp = hints.get(f.name, f.type)
        if typing.get_origin(_is_optional(tp)[1]) is Literal and value is not None:
            choices = typing.get_args(_is_optional(tp)[1])
            if value not in choices:
                out.append((path, f"{path} must be one of {', '.join(map(repr, choices))}, got {value!r}"))
            continue
        bound = bound_of(type(obj), f.name)
        if bound is None:
            continue
        is_float = _numeric_kind(hints.get(f.name, f.type)) is float
        items = value if isinstance(value, (tuple, list)) else [value]
        bad = [v for v in items if isinstance(v, (int, float)) and not isinstance(v, bool) and not bound.allows(v)]
        if bad:
            what = "each item " if isinstance(value, (tuple, list)) else ""
            out.append((path, f"{path} must be {what}{bound.describe(is_float)}"
                              + (f" ({bound.hint})" if bound.hint else "") + f", got {value!r}"))
    return out


def check_bounds(obj: Any, prefix: str = "") -> None:
    """Raise :class:`ConfigError` listing every :func:`bound_problems` of ``obj`` (for a plugin
    config's ``__post_init__``: ``check_bounds(self, "algo.")``).

    Raises:
        ConfigError: ``field`` is the first bad path, ``problems`` every message.
    """
    problems = bound_problems(obj, prefix)
    if problems:
        raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0],
                          problems=[m for _, m in problems])


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
            # a Union built at run time from a tuple of types: `X | Y` has no such form
            return True, (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)])  # noqa: UP007
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
            out = [_convert(i, a) for i, a in zip(items, args, strict=True)]
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
    """One settable leaf option: dotted ``path``, ``type`` name, ``default`` value, ``doc``,
    and ``allowed``: its :class:`Bound` in words (``">= 1"``; ``""`` when unbounded)."""

    path: str
    type: str
    default: Any
    doc: str
    allowed: str = ""


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
        item = (m.group(1) or m.group(2)) if m else None
        if m and item in names and item not in docs:
            docs[item], current = m.group(3).strip(), item
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
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
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
            bound = bound_of(cls, f.name)
            allowed = bound.describe(_numeric_kind(tp) is float) if bound is not None else ""
            if bound is not None and bound.hint:
                allowed += f" ({bound.hint})"
            out.append(OptionInfo(prefix + f.name, type_name(tp), value, docs.get(f.name, ""), allowed))
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


DOTTED_NAMES = "dotted_names"
"""Field metadata key: the ``dict`` option's entry names may hold dots, so every part of a
dotted path after the table's name is the entry's name (``pbt.hyperparameters.algo.lr``)."""


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
            if _table_of_tables(_hints(obj).get(part)) and i + 3 == len(parts):
                entry = child.setdefault(parts[-2], {})  # workers.<kind>.<option>
                if not isinstance(entry, dict):
                    entry = child[parts[-2]] = {}
                entry[parts[-1]] = value
                return
            if fields[part].metadata.get(DOTTED_NAMES):  # entry names with dots: pbt.hyperparameters.algo.lr
                entry_tp = (typing.get_args(_hints(obj).get(part)) or (Any, Any))[-1]
                try:  # a --set string parsed as the entries' type ("[1e-4, 1e-2]" -> a list of floats)
                    child[".".join(parts[i + 1:])] = _convert(value, entry_tp) if isinstance(value, str) else value
                except _Bad as exc:
                    raise ConfigError(f"{prefix}{path} expects {type_name(entry_tp)}, got {value!r} ({exc})",
                                      field=path) from None
                return
            if i + 2 != len(parts):
                shape = "<name>.<option>" if _table_of_tables(_hints(obj).get(part)) else "<name>"
                raise ConfigError(f"{prefix}{table} is a table of name=value entries: set "
                                  f"{table}.{shape}=value", field=path)
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


def _table_of_tables(tp: Any) -> bool:
    """Whether ``tp`` is ``dict[str, dict[...]]``: a table whose entries are tables
    (``workers.<kind>.<option>=value``)."""
    args = typing.get_args(tp)
    return typing.get_origin(tp) is dict and len(args) == 2 and typing.get_origin(args[1]) is dict


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


def _is_table(cfg: Any, path: str) -> bool:
    """Whether dotted ``path`` names a table of ``cfg`` (a ``dict`` field such as
    ``launcher_options`` or ``streams.sample.options``), whose entries are set as a whole."""
    obj: Any = cfg
    for part in path.split("."):
        if not dataclasses.is_dataclass(obj) or part not in {f.name for f in dataclasses.fields(obj)}:
            return False
        parent, obj = obj, getattr(obj, part)
    return isinstance(obj, dict) and typing.get_origin(_hints(parent).get(part)) is dict


def _flatten(mapping: dict[str, Any], prefix: str = "", cfg: Any = None) -> list[tuple[str, Any]]:
    """``[(dotted path, value)]`` of a nested mapping; an entry of a table of ``cfg`` keeps a
    mapping value whole (``launcher_options.actor_resources = {CPU = 0.5}``)."""
    out: list[tuple[str, Any]] = []
    in_table = bool(prefix) and cfg is not None and _is_table(cfg, prefix[:-1])
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and not in_table:
            out += _flatten(value, path + ".", cfg)
        else:
            out.append((path, value))
    return out


def apply_mapping(cfg: Any, mapping: dict[str, Any], *, source: str) -> None:
    """Apply a nested mapping (TOML tables) or dotted keys with typed values; an entry of a
    table (a ``dict`` option such as ``launcher_options``) may itself be a mapping, set whole.

    Raises:
        ConfigError: as :func:`set_value`, prefixed with ``source``.
    """
    for path, value in _flatten(mapping, cfg=cfg):
        set_value(cfg, path, value, source=source)
