"""Shared-memory segments and slot rings for the ``shm`` transport.

Naming: ``zoo-<run_id>.<stream>.<role>.p<owner pid>.g<generation>`` (run id and stream with
every character outside ``[A-Za-z0-9_-]`` replaced by ``_``). The ``.`` separators make
``zoo-<run_id>.`` an unambiguous prefix for one run. Next to them lies the run's lock file
``zoo-<run_id>.lock``: every process of the run holds a shared ``flock`` on it before it
creates its first segment and until it exits (:func:`hold_run_lock`), and a later run
reclaims a run's segments only while it holds that lock exclusively
(:func:`reclaim_stale_segments`) — proof that no process of that run is alive, which an
owner pid is not (pids are reused, and PID namespaces sharing ``/dev/shm`` each have their
own pid 4242). The lock file lives in ``/dev/shm`` itself, so exactly the processes that
share the segments share the lock.

Layout of a segment: a 4096-byte header (``magic b"ZOOSHM01", owner pid, slot bytes, slots,
generation`` as little-endian u64s) then ``slots`` slots of ``slot_bytes`` bytes each
(a multiple of 4096). A slot holds one wire frame, written by exactly one process at a time:
who may write and who may read a slot is decided by GRANT / SLOT / RELEASE records on the
notification socket, so the segment itself needs no locks.

Lifetime: exactly one owner creates and unlinks each segment. Segments are mapped with
``shm_open`` + ``mmap`` directly rather than through
:class:`multiprocessing.shared_memory.SharedMemory`, so :mod:`multiprocessing.resource_tracker`
never hears of them: on Python < 3.13 ``SharedMemory`` registers a segment even when a
process only attaches, and the tracker unlinks it when that process exits — under the feet
of the owner. Unregistering after attaching is not enough either: a process tree shares one
tracker that keeps a *set* of names, so two processes attaching at once send REGISTER,
REGISTER, UNREGISTER, UNREGISTER and the tracker prints a KeyError traceback. Crash clean-up
is ours instead: the controller's ``cleanup()`` unlinks every segment of its run, and a new
run reclaims the segments of runs whose lock no process holds.

Memory is reserved with ``posix_fallocate`` when a segment is created, so a full
``/dev/shm`` is a clear :class:`TransportError` at creation rather than a SIGBUS later.
"""
from __future__ import annotations

import collections
import functools
import logging
import mmap
import os
import re
import struct
import weakref
from collections.abc import Hashable
from typing import TypeVar

import numpy as np

try:  # the module multiprocessing.shared_memory itself uses (POSIX)
    import _posixshmem
except ImportError:  # pragma: no cover - not POSIX
    _posixshmem = None

from zoo.core.transport import TransportError
from zoo.transports.sockets.rundir import claim_lock, hold_lock, pid_alive, release_lock, safe_name

log = logging.getLogger("zoo.transports")

SHM_DIR = "/dev/shm"
HEADER_BYTES = 4096
PAGE = 4096
SEG_HEADER = struct.Struct("<8sQQQQ")
SEG_MAGIC = b"ZOOSHM01"
_NAME_RE = re.compile(r"^zoo-[A-Za-z0-9_-]+\.[A-Za-z0-9_.-]*\.p(\d+)\.g(\d+)$")
LOCK_SUFFIX = "lock"


def run_prefix(run_id: str) -> str:
    """The name prefix shared by every segment of ``run_id``."""
    return f"zoo-{safe_name(run_id)}."


def segment_name(run_id: str, stream: str, role: str, gen: int) -> str:
    """The name of generation ``gen`` of the ring ``role`` of ``stream``, owned by this process."""
    return f"{run_prefix(run_id)}{safe_name(stream)}.{role}.p{os.getpid()}.g{gen}"


def _shm_open(name: str, flags: int) -> int:
    if _posixshmem is not None:
        return _posixshmem.shm_open("/" + name, flags, mode=0o600)
    return os.open(os.path.join(SHM_DIR, name), flags, 0o600)


def _unlink_name(name: str) -> bool:
    try:
        if _posixshmem is not None:
            _posixshmem.shm_unlink("/" + name)
        else:
            os.unlink(os.path.join(SHM_DIR, name))
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return False


def round_slot(nbytes: int) -> int:
    """``nbytes`` rounded up to a whole number of 4096-byte pages (at least one)."""
    return max(PAGE, (nbytes + PAGE - 1) // PAGE * PAGE)


class Segment:
    """One mapped segment of ``slots`` slots of ``slot_bytes`` bytes.

    Use :meth:`create` (owner) or :meth:`attach`. ``size`` is the mapped length in bytes.
    """

    def __init__(self, name: str, mm: mmap.mmap, slot_bytes: int, slots: int, gen: int, owner: bool) -> None:
        self.name, self.mm = name, mm
        self.slot_bytes, self.slots, self.gen, self.owner = slot_bytes, slots, gen, owner
        self.size = len(mm)
        self._closed = False
        # One array over the whole mapping: slicing it is cheaper than a frombuffer per message.
        self._bytes: np.ndarray | None = np.frombuffer(mm, np.uint8)

    @classmethod
    def create(cls, name: str, slot_bytes: int, slots: int, gen: int) -> Segment:
        """Create, reserve (``posix_fallocate``) and map a new segment.

        Raises:
            TransportError: the segment exists already, or ``/dev/shm`` cannot hold it.
        """
        size = HEADER_BYTES + slot_bytes * slots
        try:
            fd = _shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR)
        except FileExistsError:
            raise TransportError(f"shared-memory segment {name!r} exists already (a process with this pid "
                                 "created it and did not clean up)") from None
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:  # pragma: no cover - macOS
                os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        except OSError as exc:
            _unlink_name(name)
            raise TransportError(
                f"cannot reserve {size} bytes of shared memory for {name!r} ({exc}); free space in "
                f"{SHM_DIR} (in Docker: --shm-size=1g), lower the ring with --set "
                "streams.<stream>.options.slots=N / slot_bytes / max_slot_bytes, or carry the stream on "
                "another transport: --set streams.<stream>.transport=nng") from None
        finally:
            os.close(fd)
        SEG_HEADER.pack_into(mm, 0, SEG_MAGIC, os.getpid(), slot_bytes, slots, gen)
        return cls(name, mm, slot_bytes, slots, gen, owner=True)

    @classmethod
    def attach(cls, name: str, slot_bytes: int, slots: int, gen: int) -> Segment:
        """Map an existing segment and check its header against what its owner announced.

        Raises:
            TransportError: missing segment, or a size or header that does not match.
        """
        try:
            fd = _shm_open(name, os.O_RDWR)
        except OSError as exc:
            raise TransportError(f"cannot attach shared-memory segment {name!r}: {exc}") from None
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_BYTES + slot_bytes * slots:
                raise TransportError(f"segment {name!r} has {size} bytes, fewer than the announced "
                                     f"{slots} slots of {slot_bytes} bytes")
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        magic, _pid, sb, n, g = SEG_HEADER.unpack_from(mm, 0)
        if (magic, sb, n, g) != (SEG_MAGIC, slot_bytes, slots, gen):
            mm.close()
            raise TransportError(f"segment {name!r} header {(magic, sb, n, g)} does not match the announced "
                                 f"{(SEG_MAGIC, slot_bytes, slots, gen)}")
        return cls(name, mm, slot_bytes, slots, gen, owner=False)

    def offset(self, slot: int) -> int:
        return HEADER_BYTES + slot * self.slot_bytes

    def view(self, slot: int, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes of ``slot`` as a uint8 array (a view: drop it before :meth:`close`)."""
        start = HEADER_BYTES + slot * self.slot_bytes
        if self._bytes is None:
            raise TransportError(f"segment {self.name} is closed")
        return self._bytes[start:start + nbytes]

    def copy_out(self, slot: int, nbytes: int) -> np.ndarray:
        """A private copy of the first ``nbytes`` bytes of ``slot``."""
        out = np.empty(nbytes, np.uint8)
        np.copyto(out, self.view(slot, nbytes))
        return out

    def close(self) -> None:
        """Unmap (idempotent). The owner also unlinks."""
        if self._closed:
            return
        self._closed = True
        self._bytes = None  # its own export of the mapping; views handed out keep theirs
        try:
            self.mm.close()
        except BufferError:
            log.debug("segment %s still has views; it is unmapped when they are freed", self.name)
        if self.owner:
            _unlink_name(self.name)


def list_segments(prefix: str = "zoo-") -> list[str]:
    """Names in ``/dev/shm`` that start with ``prefix`` (empty where there is no ``/dev/shm``)."""
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))
    except OSError:
        return []


def run_lock_path(run_id: str) -> str:
    """``/dev/shm/zoo-<run_id>.lock``: the lock every process of the run holds (see module doc)."""
    return os.path.join(SHM_DIR, f"{run_prefix(run_id)}{LOCK_SUFFIX}")


def hold_run_lock(run_id: str) -> None:
    """Hold ``run_id``'s segment lock for this process's lifetime (before creating segments).

    Raises:
        TransportError: ``/dev/shm`` does not exist or refuses the file.
    """
    try:
        hold_lock(run_lock_path(run_id))
    except OSError as exc:
        raise TransportError(f"cannot hold the run lock {run_lock_path(run_id)}: {exc}") from None


def reclaim_stale_segments() -> list[str]:
    """Unlink the segments (and lock files) of every run that no live process holds.

    For each run with names in ``/dev/shm``: its lock taken exclusively (nobody holds it)
    -> all its segments and its lock file are unlinked; held -> nothing of it is touched;
    no lock file (segments of a Zoo version before run locks) -> the segments whose owner
    pid is dead are unlinked. Returns the unlinked names (lock files included).
    """
    by_run: dict[str, list[str]] = collections.defaultdict(list)
    for name in list_segments():
        by_run[name.split(".", 1)[0]].append(name)  # "zoo-<run_id>"
    removed = []
    for prefix, names in by_run.items():
        lock_name = f"{prefix}.{LOCK_SUFFIX}"
        claimed = claim_lock(os.path.join(SHM_DIR, lock_name))
        if claimed is False:
            continue
        try:
            for name in names:
                if name == lock_name:
                    continue
                m = _NAME_RE.match(name)
                if m is None or (claimed is None and pid_alive(int(m.group(1)))):
                    continue
                if _unlink_name(name):
                    removed.append(name)
                    log.info("reclaimed shared-memory segment %s (no live process holds its run)", name)
            if claimed is not None and _unlink_name(lock_name):
                removed.append(lock_name)
        finally:
            if claimed is not None:
                os.close(claimed)
    return removed


def unlink_run_segments(run_id: str) -> list[str]:
    """Unlink every segment of ``run_id`` whoever owns it, and its lock file, and drop this
    process's hold on that lock (the controller's clean-up)."""
    removed = [n for n in list_segments(run_prefix(run_id)) if _unlink_name(n)]
    release_lock(run_lock_path(run_id))
    return removed


C = TypeVar("C", bound=Hashable)  # a connection, as the transport knows it (only hashed here)

def _loan_ended(back: collections.deque[tuple[int, int]], key: tuple[int, int], _ref: weakref.ref) -> None:
    """A slot view's finalizer: queue its slot for :meth:`LendingRing.reap`."""
    back.append(key)


class LendingRing:
    """A ring owned by a *receiver* (puller, reply server, request client's replies).

    The owner lends free slots to connected senders (GRANT); a sender writes a frame into a
    granted slot and announces it (SLOT); the owner copies the frame out when the application
    receives it and lends the slot again. A connection holds at most
    ``max(max_lent, slots // (2 x connections))`` unused grants (a producer that stops sending
    keeps them, so ``slots`` should exceed that times the idle producers); a freed slot goes
    to the eligible connection with the
    fewest slots in use (granted + announced), ties to the one served longest ago, so no
    active producer starves. Frames larger than a slot travel inline on the socket; the first such frame
    makes the owner :meth:`grow` the ring (a new generation with bigger slots, up to
    ``max_slot_bytes``); older generations are unlinked once all their slots are back.

    Every message passes through :meth:`grant`, :meth:`announced` and :meth:`consume`, so the
    per-connection counts they need are kept up to date as slots move rather than recounted.
    """

    def __init__(self, run_id: str, stream: str, role: str, slot_bytes: int, slots: int, max_slot_bytes: int,
                 max_lent: int = 2) -> None:
        self.run_id, self.stream, self.role = run_id, stream, role
        self.slots, self.max_slot_bytes, self.max_lent = slots, max_slot_bytes, max_lent
        self.gens: dict[int, Segment] = {}
        self.gen = -1
        self.free: list[int] = []
        self.lent: dict[tuple[int, int], object] = {}   # granted, not yet announced: -> conn
        self.full: dict[tuple[int, int], object] = {}   # announced, not yet consumed: -> conn
        self.loaned: dict[tuple[int, int], weakref.ref] = {}  # handed to the application without a copy
        self._back: collections.deque = collections.deque()  # loans ended (appended by finalizers)
        self._granted_at: dict[object, int] = {}         # conn -> grant counter (ties: longest wait first)
        self._grants = 0
        # conn -> unused grants of the current generation; conn -> those + announced frames (any generation)
        self._n_lent: collections.Counter = collections.Counter()
        self._n_held: collections.Counter = collections.Counter()
        self._new_gen(round_slot(slot_bytes))

    @property
    def slot_bytes(self) -> int:
        return self.gens[self.gen].slot_bytes

    def _new_gen(self, slot_bytes: int) -> None:
        gen = self.gen + 1
        hold_run_lock(self.run_id)  # before the segment exists: a reclaimer never sees it unheld
        name = segment_name(self.run_id, self.stream, self.role, gen)
        self.gens[gen] = Segment.create(name, slot_bytes, self.slots, gen)
        self.gen = gen
        self.free = list(range(self.slots))
        # Grants of older generations are useless to the peers: they no longer count.
        self._n_held.subtract(self._n_lent)
        self._n_lent.clear()
        for old in [g for g in self.gens if g != gen]:
            self._maybe_retire(old)

    def ring_info(self) -> dict:
        seg = self.gens[self.gen]
        return {"name": seg.name, "gen": seg.gen, "slot_bytes": seg.slot_bytes, "slots": seg.slots}

    def grow(self, need: int) -> bool:
        """Start a generation whose slots hold ``need`` bytes; False if over ``max_slot_bytes``."""
        new = round_slot(max(2 * self.slot_bytes, need + need // 4))
        new = min(new, round_slot(self.max_slot_bytes))
        if need > new:
            return False
        self._new_gen(new)
        return True

    def cap(self, n_conns: int) -> int:
        """Most unused grants one of ``n_conns`` connections may hold (few producers: deeper pipelines)."""
        return max(self.max_lent, self.slots // (2 * max(1, n_conns)))

    def grant(self, conns: list[C]) -> dict[C, list[tuple[int, int]]]:
        """Lend free slots to ``conns`` (see the class doc); returns the new grants per connection."""
        out: dict[C, list[tuple[int, int]]] = {}
        if not conns or not self.free:
            return out
        cap, n_lent, n_held = self.cap(len(conns)), self._n_lent, self._n_held
        if len(conns) == 1 and n_lent[conns[0]] >= cap:
            return out  # the usual case with one peer: it holds all it may
        while self.free:
            conn: C | None = None
            for c in conns:
                if n_lent[c] < cap and (conn is None or (n_held[c], self._granted_at.get(c, -1))
                                        < (n_held[conn], self._granted_at.get(conn, -1))):
                    conn = c
            if conn is None:
                break
            key = (self.gen, self.free.pop())
            self.lent[key] = conn
            n_lent[conn] += 1
            n_held[conn] += 1
            self._grants += 1
            self._granted_at[conn] = self._grants
            out.setdefault(conn, []).append(key)
        return out

    def lent_count(self, conn) -> int:
        """Unused grants of the current generation that ``conn`` holds."""
        return self._n_lent[conn]

    def _unlend(self, key: tuple[int, int], conn) -> None:
        """``key``, lent to ``conn``, is no longer an unused grant (it is being announced or given back)."""
        del self.lent[key]
        if key[0] == self.gen:
            self._n_lent[conn] -= 1
            self._n_held[conn] -= 1

    def revoke(self, pairs: list[tuple[int, int]]) -> None:
        """Take back grants that could not be sent."""
        for key in pairs:
            conn = self.lent.get(key)
            if conn is not None:
                self._unlend(key, conn)
            self._give_back(key)

    def announced(self, conn, gen: int, slot: int, nbytes: int) -> None:
        """A SLOT record from ``conn``.

        Raises:
            ValueError: the slot is not lent to ``conn`` or ``nbytes`` exceeds the slot.
        """
        key = (gen, slot)
        if self.lent.get(key) is not conn:
            raise ValueError(f"SLOT {key} was not granted to this peer")
        if nbytes > self.gens[gen].slot_bytes:
            raise ValueError(f"SLOT {key} declares {nbytes} bytes, more than the slot's {self.gens[gen].slot_bytes}")
        self._unlend(key, conn)
        self.full[key] = conn
        self._n_held[conn] += 1

    def consume(self, gen: int, slot: int, nbytes: int) -> np.ndarray:
        """The announced frame in ``(gen, slot)`` as a uint8 array the application may keep.

        While fewer than half of the slots are on loan, the array is a view into the slot (no
        copy): the slot comes back once every array decoded from it has been freed (a
        finalizer queues it; :meth:`reap` frees it). Otherwise the frame is copied out and the
        slot is free at once — so an application that keeps many messages never starves its
        producers.
        """
        key = (gen, slot)
        conn = self.full.pop(key)
        if conn in self._n_held:
            self._n_held[conn] -= 1
        seg = self.gens[gen]
        if len(self.loaned) < self.slots // 2:
            view = seg.view(slot, nbytes)
            back = self._back
            self.loaned[key] = weakref.ref(view, functools.partial(_loan_ended, back, key))
            return view
        try:
            return seg.copy_out(slot, nbytes)
        finally:
            self._give_back(key)

    def reap(self) -> bool:
        """Free the slots whose loans ended since the last call; True if there were any."""
        any_back = False
        while self._back:
            key = self._back.popleft()
            if self.loaned.pop(key, None) is not None:
                self._give_back(key)
                any_back = True
        return any_back

    def returned(self, conn, pairs: list[tuple[int, int]]) -> None:
        """RETURN: grants ``conn`` hands back unused."""
        for key in pairs:
            if self.lent.get(key) is conn:
                self._unlend(key, conn)
                self._give_back(key)

    def conn_gone(self, conn) -> None:
        """Take back every grant of a closed connection (announced frames stay deliverable)."""
        for key in [k for k, c in self.lent.items() if c is conn]:
            self._unlend(key, conn)
            self._give_back(key)
        self._granted_at.pop(conn, None)
        # Its announced frames are still consumed later; their counts no longer matter.
        self._n_lent.pop(conn, None)
        self._n_held.pop(conn, None)

    def _give_back(self, key: tuple[int, int]) -> None:
        gen, slot = key
        if gen == self.gen:
            if slot not in self.free:
                self.free.append(slot)
        else:
            self._maybe_retire(gen)

    def _maybe_retire(self, gen: int) -> None:
        if gen in self.gens and gen != self.gen and not any(
                k[0] == gen for k in (*self.lent, *self.full, *self.loaned)):
            self.gens.pop(gen).close()

    def close(self) -> None:
        for seg in self.gens.values():
            seg.close()
        self.gens.clear()


class PublishRing:
    """A ring owned by a *sender* (the publisher): slots are reference-counted.

    A slot is free when no subscriber holds an unreleased announcement of it and it is not
    the current value. :meth:`acquire` grows the ring (new generation) for a larger frame.
    """

    def __init__(self, run_id: str, stream: str, slot_bytes: int, slots: int, max_slot_bytes: int) -> None:
        self.run_id, self.stream = run_id, stream
        self.slots, self.max_slot_bytes = slots, max_slot_bytes
        self.gens: dict[int, Segment] = {}
        self.refs: dict[tuple[int, int], int] = {}
        self.gen = -1
        self._new_gen(round_slot(slot_bytes))

    @property
    def slot_bytes(self) -> int:
        return self.gens[self.gen].slot_bytes

    def _new_gen(self, slot_bytes: int) -> None:
        gen = self.gen + 1
        hold_run_lock(self.run_id)  # before the segment exists: a reclaimer never sees it unheld
        self.gens[gen] = Segment.create(segment_name(self.run_id, self.stream, "pub", gen), slot_bytes, self.slots, gen)
        self.gen = gen
        for old in [g for g in self.gens if g != gen]:
            self._maybe_retire(old)

    def ring_info(self, gen: int) -> dict:
        seg = self.gens[gen]
        return {"name": seg.name, "gen": seg.gen, "slot_bytes": seg.slot_bytes, "slots": seg.slots}

    def acquire(self, nbytes: int) -> tuple[int, int] | None:
        """A free slot able to hold ``nbytes`` (growing the ring if needed), or None (use the inline path)."""
        if nbytes > self.slot_bytes:
            new = min(round_slot(max(2 * self.slot_bytes, nbytes + nbytes // 4)), round_slot(self.max_slot_bytes))
            if nbytes > new:
                return None
            self._new_gen(new)
        for slot in range(self.slots):
            if self.refs.get((self.gen, slot), 0) == 0:
                return (self.gen, slot)
        return None

    def ref(self, key: tuple[int, int]) -> None:
        self.refs[key] = self.refs.get(key, 0) + 1

    def unref(self, key: tuple[int, int]) -> None:
        n = self.refs.get(key, 0) - 1
        if n > 0:
            self.refs[key] = n
        else:
            self.refs.pop(key, None)
            if key[0] != self.gen:
                self._maybe_retire(key[0])

    def _maybe_retire(self, gen: int) -> None:
        if gen in self.gens and gen != self.gen and not any(k[0] == gen for k in self.refs):
            self.gens.pop(gen).close()

    def close(self) -> None:
        for seg in self.gens.values():
            seg.close()
        self.gens.clear()
        self.refs.clear()
