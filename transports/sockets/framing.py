"""Byte layout shared by the socket transports (``tcp``, and ``shm``'s notification channel).

Two layers:

1. **Wire frames** — exactly :func:`zoo.core.arrays.encode`'s format, planned as a
   :class:`~zoo.core.arrays.Layout` so a frame can be written straight
   into a shared-memory slot (:meth:`Layout.write_into`, one copy per array) or handed to
   ``sendmsg`` as a list of
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

   Control records (all but FRAME) are at most :data:`MAX_CONTROL_BYTES`, a HELLO at most
   :data:`MAX_HELLO_BYTES` (a listener reads nothing else from a peer before its HELLO is
   accepted); a record with a bad
   magic, an unknown kind or an oversized length cannot be resynchronised, so the receiver
   drops that connection (and keeps serving the others).
"""
from __future__ import annotations

import json
import struct
from typing import Any

from zoo.core.arrays import MAGIC, WireError

REC = struct.Struct("<4sB3xQ")
REC_MAGIC = b"ZOS1"
HELLO, FRAME, RING, GRANT, SLOT, RETURN, RELEASE = 1, 2, 3, 4, 5, 6, 7
KINDS = {HELLO: "HELLO", FRAME: "FRAME", RING: "RING", GRANT: "GRANT", SLOT: "SLOT", RETURN: "RETURN",
         RELEASE: "RELEASE"}
MAX_CONTROL_BYTES = 1 << 16
MAX_HELLO_BYTES = 4096
"""Largest HELLO payload: all a listener reads from a peer that has not authenticated yet."""
PROTOCOL_VERSION = 1
PAIR = struct.Struct("<II")
SLOT_REC = struct.Struct("<IIQQ")


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
