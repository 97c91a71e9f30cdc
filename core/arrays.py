"""Nested arrays and Zoo's wire format.

A *bundle* is a (possibly nested) ``dict`` of ``str -> np.ndarray | dict``. On the wire it
becomes one frame::

    magic  b"ZOO\\x01"                 4 bytes
    header length (little-endian u32)  4 bytes
    header: UTF-8 JSON {"version": 1, "meta": {...}, "arrays": [[key, dtype, shape, offset, nbytes], ...]}
    padding to a multiple of 64 bytes
    raw array buffers, each starting at a multiple of 64 bytes from the frame start

Nested keys are joined with ``"/"``. ``meta`` holds JSON scalars (ids, versions, counters,
episode statistics). Arrays are rebuilt with ``np.frombuffer`` — nothing is unpickled —
after checking the magic, the format version, the header size, the dtype allow-list,
every shape against its byte count and every buffer against the frame's length. Any
violation raises :class:`WireError`, which receivers count and survive.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

MAGIC = b"ZOO\x01"
FORMAT_VERSION = 1
ALIGN = 64
MAX_HEADER_BYTES = 1 << 20
MAX_FRAME_BYTES = 1 << 30  # 1 GiB; the transports pass their own limit
ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
     "float16", "float32", "float64"]
)
_PREFIX = struct.Struct("<4sI")


class WireError(ValueError):
    """A frame that is malformed, truncated, oversized, of another version or a forbidden dtype."""


def flatten(bundle: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``("a/b", array)`` for every leaf of a nested dict, in insertion order."""
    for key, value in bundle.items():
        if "/" in key:
            raise ValueError(f"bundle key {key!r} must not contain '/'")
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from flatten(value, name + "/")
        else:
            yield name, np.asarray(value)


def unflatten(items: dict[str, np.ndarray]) -> dict[str, Any]:
    """Inverse of :func:`flatten`."""
    out: dict[str, Any] = {}
    for name, value in items.items():
        node = out
        *parents, leaf = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# Encoding also runs once per message: one JSON encoder (``json.dumps`` with separators
# builds a new one per call), dtype names looked up by dtype object (``dtype.name`` is slow
# in numpy 2).
_JSON_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_NATIVE_NAMES = {np.dtype(name): name for name in ALLOWED_DTYPES}


class Layout:
    """One planned wire frame, so it can be written straight into its destination.

    Attributes:
        head: bytes from the frame start to the first array (magic, header length, JSON
            header, zero padding to a multiple of 64).
        arrays: ``(offset, array)`` per leaf with ``nbytes > 0``; ``offset`` in bytes from the
            frame start; ``array`` is the caller's array (not copied, maybe non-contiguous).
        size: total frame length in bytes (equal to ``len(encode(bundle, meta))``).
    """

    __slots__ = ("head", "arrays", "size")

    def __init__(self, head: bytes, arrays: list[tuple[int, np.ndarray]], size: int) -> None:
        self.head, self.arrays, self.size = head, arrays, size

    def parts(self) -> list:
        """Buffers whose concatenation is the frame: head, then each array and its zero padding.

        Contiguous arrays are referenced, not copied; non-contiguous ones are copied once.
        """
        out: list = [self.head]
        pos = len(self.head)
        for offset, arr in self.arrays:
            if offset > pos:
                out.append(bytes(offset - pos))
            flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            out.append(flat.data)  # memoryview(flat)
            pos = offset + flat.nbytes
        if self.size > pos:
            out.append(bytes(self.size - pos))
        return out

    def write_into(self, buf) -> None:
        """Write the frame into ``buf[:size]`` (one copy per array; padding bytes are left as they are).

        ``buf``: a writable uint8 ``np.ndarray`` or any writable buffer (``bytearray``,
        ``memoryview``, ``mmap``).

        Raises:
            ValueError: ``buf`` is shorter than :attr:`size`.
        """
        dst_all = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        if dst_all.nbytes < self.size:
            raise ValueError(f"buffer of {dst_all.nbytes} bytes is shorter than the {self.size}-byte frame")
        head = self.head
        dst_all.data[:len(head)] = head
        for offset, arr in self.arrays:
            dst = dst_all[offset:offset + arr.nbytes].view(arr.dtype).reshape(arr.shape)
            np.copyto(dst, arr, casting="no")

    def to_bytes(self) -> bytearray:
        """The whole frame in one new buffer (what :func:`encode` returns)."""
        out = bytearray(self.size)
        self.write_into(out)
        return out


def _plan(leaves: list[tuple[str, np.ndarray]]) -> tuple[str, list[int], int, bool]:
    """The header's ``arrays`` JSON, each leaf's offset in the data section, the data
    section's length, and whether any leaf must be converted to native byte order."""
    entries, offsets, rel, convert = [], [], 0, False
    for name, arr in leaves:
        dt = _NATIVE_NAMES.get(arr.dtype)
        if dt is None:
            dt = arr.dtype.name
            if dt not in ALLOWED_DTYPES:
                raise WireError(f"array {name!r} has dtype {dt!r}, which the wire format does not allow "
                                f"(allowed: {', '.join(sorted(ALLOWED_DTYPES))})")
            convert = True
        entries.append((name, dt, arr.shape, rel, arr.nbytes))  # tuples encode as JSON arrays
        offsets.append(rel)
        rel = _pad(rel + arr.nbytes)
    return _JSON_ENCODE(entries), offsets, rel, convert


# Workers send the same structure (names, dtypes, shapes) over and over: its part of the
# header is planned once. Bounded, so a stream of ever-new shapes cannot grow it forever.
_PLANS: dict[tuple, tuple[str, list[int], int, bool]] = {}
_MAX_PLANS = 256


def layout(bundle: dict[str, Any] | None, meta: dict[str, Any] | None) -> Layout:
    """Plan the wire frame of ``(bundle, meta)`` without copying any array.

    Raises:
        WireError: a leaf's dtype is not in :data:`ALLOWED_DTYPES`.
        TypeError: ``meta`` is not JSON-serialisable.
        ValueError: a bundle key contains ``"/"``.
    """
    leaves = list(flatten(bundle)) if bundle else []
    key = tuple([(name, arr.dtype, arr.shape) for name, arr in leaves])
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(leaves)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    arrays_json, offsets, data_bytes, convert = plan
    if convert:
        # Frames are native-endian: a byte-swapped array is converted first, else its raw
        # bytes would decode as other numbers.
        leaves = [(name, arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("=")))
                  for name, arr in leaves]
    # Offsets in the header are relative to the data section, whose start depends on the
    # header's own length.
    header = f'{{"version":{FORMAT_VERSION},"meta":{_JSON_ENCODE(meta or {})},"arrays":{arrays_json}}}'.encode()
    start = _pad(_PREFIX.size + len(header))
    head = _PREFIX.pack(MAGIC, len(header)) + header + bytes(start - _PREFIX.size - len(header))
    return Layout(head, [(start + off, arr) for off, (_, arr) in zip(offsets, leaves, strict=True) if arr.nbytes],
                  start + data_bytes)


def encode(bundle: dict[str, Any] | None = None, meta: dict[str, Any] | None = None) -> bytearray:
    """Encode a bundle and JSON metadata into one frame (one copy of each array).

    Raises:
        WireError: an array's dtype is not in :data:`ALLOWED_DTYPES`.
        TypeError: ``meta`` is not JSON-serialisable.
    """
    return layout(bundle, meta).to_bytes()


# Decoding runs once per message on every receiver, so the hot path avoids per-call
# allocations: one JSON decoder, dtype objects looked up by name, and offsets handed to
# ``np.frombuffer`` instead of slicing the frame.
_DTYPES = {name: np.dtype(name) for name in ALLOWED_DTYPES}
_JSON_RAW_DECODE = json.JSONDecoder().raw_decode  # .decode() also runs two whitespace regexes


def _json_decode(text: str) -> Any:
    obj, end = _JSON_RAW_DECODE(text)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return obj


def _entry_error(entry: Any) -> WireError:
    return WireError(f"malformed array entry {entry!r}")


def decode(frame: bytes | bytearray | memoryview | np.ndarray,
           max_bytes: int = MAX_FRAME_BYTES) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decode a frame into ``(bundle, meta)``.

    ``frame``: any bytes-like object, a uint8 array included. The arrays are views into
    ``frame`` (no copy; read-only when ``frame`` is): copy them to write. Shapes, offsets and
    sizes in the header must be JSON integers.

    Raises:
        WireError: on any malformed, truncated, oversized or wrong-version frame.
    """
    # numpy's stubs give ndarray its buffer (__buffer__) only for Python >= 3.12:
    buf = memoryview(frame)  # type: ignore[arg-type]  # (see above)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    size = buf.nbytes
    if size > max_bytes:
        raise WireError(f"frame of {size} bytes exceeds the limit of {max_bytes} bytes")
    if size < _PREFIX.size:
        raise WireError(f"frame of {size} bytes is shorter than the {_PREFIX.size}-byte prefix")
    magic, header_len = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): not a Zoo frame or another format version")
    if header_len > MAX_HEADER_BYTES or _PREFIX.size + header_len > size:
        raise WireError(f"declared header length {header_len} does not fit the {size}-byte frame")
    try:
        header = _json_decode(str(buf[_PREFIX.size:_PREFIX.size + header_len], "utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"header is not valid JSON: {exc}") from None
    if type(header) is not dict or header.get("version") != FORMAT_VERSION:
        raise WireError(f"frame format version {header.get('version') if isinstance(header, dict) else None!r} "
                        f"is not supported (this Zoo reads version {FORMAT_VERSION})")
    meta, entries = header.get("meta", {}), header.get("arrays", [])
    if type(meta) is not dict or type(entries) is not list:
        raise WireError("header 'meta' must be an object and 'arrays' a list")
    data_start = _pad(_PREFIX.size + header_len)
    items: dict[str, np.ndarray] = {}
    nested = False
    for entry in entries:
        if type(entry) is not list or len(entry) != 5:
            raise _entry_error(entry)
        name, dt, shape, off, nbytes = entry
        if type(shape) is not list or type(off) is not int or type(nbytes) is not int:
            raise _entry_error(entry)
        count = 1
        for s in shape:
            if type(s) is not int:
                raise _entry_error(entry)
            if s < 0:
                raise WireError(f"array {name!r}: negative shape, offset or size")
            count *= s
        dtype = _DTYPES.get(dt) if type(dt) is str else None
        if dtype is None or type(name) is not str:
            raise WireError(f"array {name!r}: dtype {dt!r} is not allowed")
        if off < 0 or nbytes < 0:
            raise WireError(f"array {name!r}: negative shape, offset or size")
        if count * dtype.itemsize != nbytes:
            raise WireError(f"array {name!r}: shape {tuple(shape)} x {dtype.itemsize} bytes != declared {nbytes} bytes")
        start = data_start + off
        if start + nbytes > size:
            raise WireError(f"array {name!r}: bytes {start}..{start + nbytes} lie past the frame end {size} "
                            "(truncated frame)")
        items[name] = np.frombuffer(buf, dtype, count, start).reshape(shape)
        nested = nested or "/" in name
    return (unflatten(items) if nested else items), meta


def concat(bundles: list[dict[str, Any]], axis: int = 0) -> dict[str, Any]:
    """Concatenate same-structured bundles leaf by leaf along ``axis``."""
    first = bundles[0]
    return {k: concat([b[k] for b in bundles], axis) if isinstance(v, dict)
            else np.concatenate([b[k] for b in bundles], axis=axis) for k, v in first.items()}


def map_leaves(fn, bundle: dict[str, Any]) -> dict[str, Any]:
    """Apply ``fn`` to every array of a nested dict."""
    return {k: map_leaves(fn, v) if isinstance(v, dict) else fn(v) for k, v in bundle.items()}
