"""Byte layout shared by the socket transports (``tcp``, and ``shm``'s notification channel).

Two layers:

1. **Wire frames** — exactly :func:`zoo.core.arrays.encode`'s format, but planned as a
   :class:`Layout` so a frame can be written straight into a shared-memory slot
   (:meth:`Layout.write_into`, one copy per array) or handed to ``sendmsg`` as a list of
   buffers (:meth:`Layout.parts`, no copy for contiguous arrays). ``b"".join(parts)`` is
   byte-for-byte ``encode(bundle, meta)`` (tested). Frames are still *decoded* only by
   :func:`zoo.core.arrays.decode`, which validates everything.

2. **Records** — what travels on a socket: a 16-byte header
   ``magic b"ZOS1" | kind u8 | 3 zero bytes | payload length u64 (little-endian)`` and the
   payload. Kinds:

   ========  ==========================================================================
   HELLO     dialer -> listener, first record: UTF-8 JSON (protocol version, run, stream,
             role, client id, pid, token)
   FRAME     a wire frame (``tcp`` data; ``shm``'s fallback for frames larger than a slot)
   RING      ``shm``: JSON naming a shared-memory ring (name, generation, slot bytes, slots)
   GRANT     ``shm``: ``(gen u32, slot u32)`` pairs the ring owner lends to the peer
   SLOT      ``shm``: ``gen u32, slot u32, nbytes u64, seq u64``: a frame lies in that slot
   RETURN    ``shm``: ``(gen u32, slot u32)`` pairs handed back unused (older generation)
   RELEASE   ``shm``: ``(gen u32, slot u32)`` pairs a subscriber has finished reading
   ========  ==========================================================================

   Control records (all but FRAME) are at most :data:`MAX_CONTROL_BYTES`; a record with a bad
   magic, an unknown kind or an oversized length cannot be resynchronised, so the receiver
   drops that connection (and keeps serving the others).
"""
from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from zoo.core.arrays import ALIGN, ALLOWED_DTYPES, FORMAT_VERSION, MAGIC, WireError, flatten

REC = struct.Struct("<4sB3xQ")
REC_MAGIC = b"ZOS1"
HELLO, FRAME, RING, GRANT, SLOT, RETURN, RELEASE = 1, 2, 3, 4, 5, 6, 7
KINDS = {HELLO: "HELLO", FRAME: "FRAME", RING: "RING", GRANT: "GRANT", SLOT: "SLOT", RETURN: "RETURN",
         RELEASE: "RELEASE"}
MAX_CONTROL_BYTES = 1 << 16
PROTOCOL_VERSION = 1
PAIR = struct.Struct("<II")
SLOT_REC = struct.Struct("<IIQQ")
_WIRE_PREFIX = struct.Struct("<4sI")


_NATIVE_NAMES = {np.dtype(name): name for name in ALLOWED_DTYPES}  # dtype.name is slow in numpy 2


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Layout:
    """One planned wire frame.

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
            out.append(memoryview(flat))
            pos = offset + flat.nbytes
        if self.size > pos:
            out.append(bytes(self.size - pos))
        return out

    def write_into(self, buf) -> None:
        """Write the frame into ``buf[:size]`` (one copy per array; padding bytes are left as they are).

        ``buf``: a writable uint8 ``np.ndarray`` or any writable buffer (``bytearray``, ``memoryview``).

        Raises:
            ValueError: ``buf`` is shorter than :attr:`size`.
        """
        dst_all = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        if dst_all.nbytes < self.size:
            raise ValueError(f"buffer of {dst_all.nbytes} bytes is shorter than the {self.size}-byte frame")
        dst_all[:len(self.head)] = np.frombuffer(self.head, np.uint8)
        for offset, arr in self.arrays:
            dst = dst_all[offset:offset + arr.nbytes].view(arr.dtype).reshape(arr.shape)
            np.copyto(dst, arr, casting="no")

    def to_bytes(self) -> bytearray:
        """The whole frame in one new buffer (what :func:`zoo.core.arrays.encode` returns)."""
        out = bytearray(self.size)
        self.write_into(out)
        return out


def layout(bundle: dict[str, Any] | None, meta: dict[str, Any] | None) -> Layout:
    """Plan the wire frame of ``(bundle, meta)`` without copying any array.

    Raises:
        WireError: a leaf's dtype is not in :data:`zoo.core.arrays.ALLOWED_DTYPES`.
        TypeError: ``meta`` is not JSON-serialisable.
        ValueError: a bundle key contains ``"/"``.
    """
    leaves = list(flatten(bundle or {}))
    entries, rel = [], 0
    for i, (name, arr) in enumerate(leaves):
        dt = _NATIVE_NAMES.get(arr.dtype)
        if dt is None:
            dt = arr.dtype.name
            if dt not in ALLOWED_DTYPES:
                raise WireError(f"array {name!r} has dtype {dt!r}, which the wire format does not allow "
                                f"(allowed: {', '.join(sorted(ALLOWED_DTYPES))})")
            arr = arr.astype(arr.dtype.newbyteorder("="))  # the wire is native (little-endian) order
            leaves[i] = (name, arr)
        entries.append([name, dt, list(arr.shape), rel, arr.nbytes])
        rel = _pad(rel + arr.nbytes)
    header = json.dumps({"version": FORMAT_VERSION, "meta": meta or {}, "arrays": entries},
                        separators=(",", ":")).encode()
    start = _pad(_WIRE_PREFIX.size + len(header))
    head = bytearray(start)
    _WIRE_PREFIX.pack_into(head, 0, MAGIC, len(header))
    head[_WIRE_PREFIX.size:_WIRE_PREFIX.size + len(header)] = header
    arrays = [(start + e[3], arr) for (_, arr), e in zip(leaves, entries) if arr.nbytes]
    return Layout(bytes(head), arrays, start + rel)


def record_header(kind: int, length: int) -> bytes:
    """The 16-byte header of a record of ``kind`` carrying ``length`` payload bytes."""
    return REC.pack(REC_MAGIC, kind, length)


def json_record(kind: int, obj: dict[str, Any]) -> bytes:
    """A whole control record whose payload is ``obj`` as UTF-8 JSON."""
    payload = json.dumps(obj, separators=(",", ":")).encode()
    if len(payload) > MAX_CONTROL_BYTES:
        raise ValueError(f"control record of {len(payload)} bytes exceeds {MAX_CONTROL_BYTES}")
    return record_header(kind, len(payload)) + payload


def pairs_record(kind: int, pairs: list[tuple[int, int]]) -> bytes:
    """A GRANT / RETURN / RELEASE record carrying ``(gen, slot)`` pairs."""
    payload = b"".join(PAIR.pack(g, s) for g, s in pairs)
    return record_header(kind, len(payload)) + payload


def parse_pairs(payload: bytes) -> list[tuple[int, int]]:
    """Inverse of :func:`pairs_record`'s payload.

    Raises:
        WireError: the payload length is not a multiple of 8 bytes.
    """
    if len(payload) % PAIR.size:
        raise WireError(f"pair record of {len(payload)} bytes is not a multiple of {PAIR.size}")
    return [PAIR.unpack_from(payload, i) for i in range(0, len(payload), PAIR.size)]


def parse_json(payload: bytes) -> dict[str, Any]:
    """Decode a HELLO / RING payload.

    Raises:
        WireError: not UTF-8 JSON, or not an object.
    """
    try:
        obj = json.loads(bytes(payload))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"control record is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise WireError("control record must be a JSON object")
    return obj


def wire_magic_ok(prefix: bytes | memoryview) -> bool:
    """Whether the first bytes of a FRAME payload are the wire format's magic."""
    return bytes(prefix[:len(MAGIC)]) == MAGIC
