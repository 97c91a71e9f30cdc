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
import math
import struct
from typing import Any, Iterator

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


def encode(bundle: dict[str, Any] | None = None, meta: dict[str, Any] | None = None) -> bytearray:
    """Encode a bundle and JSON metadata into one frame (one copy of each array).

    Raises:
        WireError: an array's dtype is not in :data:`ALLOWED_DTYPES`.
        TypeError: ``meta`` is not JSON-serialisable.
    """
    # Frames are native-endian: a byte-swapped array is converted first, else its raw bytes
    # would decode as other numbers.
    leaves = [(n, a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))) for n, a in flatten(bundle or {})]
    entries, offset_rel = [], 0
    for name, arr in leaves:
        dt = arr.dtype.name
        if dt not in ALLOWED_DTYPES:
            raise WireError(f"array {name!r} has dtype {dt!r}, which the wire format does not allow "
                            f"(allowed: {', '.join(sorted(ALLOWED_DTYPES))})")
        entries.append([name, dt, list(arr.shape), offset_rel, arr.nbytes])
        offset_rel = _pad(offset_rel + arr.nbytes)
    # Offsets are relative to the data section until the header size is known.
    header = json.dumps({"version": FORMAT_VERSION, "meta": meta or {}, "arrays": entries},
                        separators=(",", ":")).encode()
    data_start = _pad(_PREFIX.size + len(header))
    frame = bytearray(data_start + offset_rel)
    _PREFIX.pack_into(frame, 0, MAGIC, len(header))
    frame[_PREFIX.size:_PREFIX.size + len(header)] = header
    view = memoryview(frame)
    for (name, arr), (_, _, _, off, nbytes) in zip(leaves, entries):
        if nbytes:
            dst = np.frombuffer(view[data_start + off:data_start + off + nbytes], dtype=arr.dtype).reshape(arr.shape)
            np.copyto(dst, arr)
    return frame


def decode(frame: bytes | bytearray | memoryview, max_bytes: int = MAX_FRAME_BYTES) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decode a frame into ``(bundle, meta)``.

    The arrays are read-only views into ``frame`` (no copy); copy them to write.

    Raises:
        WireError: on any malformed, truncated, oversized or wrong-version frame.
    """
    buf = memoryview(frame)
    if buf.nbytes > max_bytes:
        raise WireError(f"frame of {buf.nbytes} bytes exceeds the limit of {max_bytes} bytes")
    if buf.nbytes < _PREFIX.size:
        raise WireError(f"frame of {buf.nbytes} bytes is shorter than the {_PREFIX.size}-byte prefix")
    magic, header_len = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): not a Zoo frame or another format version")
    if header_len > MAX_HEADER_BYTES or _PREFIX.size + header_len > buf.nbytes:
        raise WireError(f"declared header length {header_len} does not fit the {buf.nbytes}-byte frame")
    try:
        header = json.loads(bytes(buf[_PREFIX.size:_PREFIX.size + header_len]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
        raise WireError(f"frame format version {header.get('version') if isinstance(header, dict) else None!r} "
                        f"is not supported (this Zoo reads version {FORMAT_VERSION})")
    meta, entries = header.get("meta", {}), header.get("arrays", [])
    if not isinstance(meta, dict) or not isinstance(entries, list):
        raise WireError("header 'meta' must be an object and 'arrays' a list")
    data_start = _pad(_PREFIX.size + header_len)
    items: dict[str, np.ndarray] = {}
    for entry in entries:
        try:
            name, dt, shape, off, nbytes = entry
            shape = tuple(int(s) for s in shape)
            off, nbytes = int(off), int(nbytes)
        except (TypeError, ValueError):
            raise WireError(f"malformed array entry {entry!r}") from None
        if not isinstance(name, str) or dt not in ALLOWED_DTYPES:
            raise WireError(f"array {name!r}: dtype {dt!r} is not allowed")
        if any(s < 0 for s in shape) or off < 0 or nbytes < 0:
            raise WireError(f"array {name!r}: negative shape, offset or size")
        itemsize = np.dtype(dt).itemsize
        if math.prod(shape) * itemsize != nbytes:
            raise WireError(f"array {name!r}: shape {shape} x {itemsize} bytes != declared {nbytes} bytes")
        start = data_start + off
        if start + nbytes > buf.nbytes:
            raise WireError(f"array {name!r}: bytes {start}..{start + nbytes} lie past the frame end {buf.nbytes} (truncated frame)")
        items[name] = np.frombuffer(buf[start:start + nbytes], dtype=dt).reshape(shape)
    return unflatten(items), meta


def concat(bundles: list[dict[str, Any]], axis: int = 0) -> dict[str, Any]:
    """Concatenate same-structured bundles leaf by leaf along ``axis``."""
    first = bundles[0]
    return {k: concat([b[k] for b in bundles], axis) if isinstance(v, dict)
            else np.concatenate([b[k] for b in bundles], axis=axis) for k, v in first.items()}


def map_leaves(fn, bundle: dict[str, Any]) -> dict[str, Any]:
    """Apply ``fn`` to every array of a nested dict."""
    return {k: map_leaves(fn, v) if isinstance(v, dict) else fn(v) for k, v in bundle.items()}
