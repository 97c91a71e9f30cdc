"""The shm transport's lending ring: who gets which slot, with exact counts."""
import gc
import os
import uuid

import pytest

from zoo.transports.shm.segments import LendingRing, list_segments, run_prefix, unlink_run_segments


class Peer:
    """Stands for a connection: the ring only uses connections as keys."""


@pytest.fixture
def ring():
    run_id = f"ring{os.getpid()}-{uuid.uuid4().hex[:6]}"
    r = LendingRing(run_id, "s", "pull", 4096, 8, 1 << 20, max_lent=2)
    yield r
    r.close()
    # the ring's segments are gone; the run lock this process holds stays until the run's clean-up
    assert list_segments(run_prefix(run_id)) == [f"zoo-{run_id}.lock"]
    unlink_run_segments(run_id)
    assert list_segments(run_prefix(run_id)) == []


def test_one_peer_gets_half_the_ring_and_announced_slots_count_as_held(ring):
    a = Peer()
    got = ring.grant([a])
    assert got == {a: [(0, 7), (0, 6), (0, 5), (0, 4)]}  # cap = max(2, 8 // 2)
    assert ring.lent_count(a) == 4 and ring.free == [0, 1, 2, 3]
    ring.announced(a, 0, 7, 100)
    assert ring.lent_count(a) == 3
    assert ring.grant([a]) == {a: [(0, 3)]}  # back to its cap of unused grants
    with pytest.raises(ValueError, match="not granted"):
        ring.announced(Peer(), 0, 6, 100)
    with pytest.raises(ValueError, match="more than the slot"):
        ring.announced(a, 0, 6, 4097)


def test_free_slots_go_to_the_peer_holding_fewest(ring):
    a, b = Peer(), Peer()
    assert ring.grant([a, b]) == {a: [(0, 7), (0, 5)], b: [(0, 6), (0, 4)]}  # cap = max(2, 8 // 4)
    ring.announced(a, 0, 7, 10)
    ring.announced(a, 0, 5, 10)
    # a holds 2 announced frames, b 2 unused grants: a may take 2 more (cap counts unused grants only)
    assert ring.grant([a, b]) == {a: [(0, 3), (0, 2)]}
    view = ring.consume(0, 7, 10)
    assert view.nbytes == 10 and ring.loaned.keys() == {(0, 7)}
    del view
    gc.collect()
    assert ring.reap() is True and ring.free == [0, 1, 7]
    ring.conn_gone(b)
    assert ring.lent_count(b) == 0 and ring.free == [0, 1, 7, 6, 4]
    assert ring.grant([a]) == {a: [(0, 4), (0, 6)]}  # alone now: cap = 4 unused grants
    assert ring.lent_count(a) == 4 and ring.grant([a]) == {}


def test_frames_are_copied_once_half_the_ring_is_on_loan(ring):
    a = Peer()
    keys = ring.grant([a])[a]
    for key in keys:
        ring.announced(a, *key, 8)
    keys.append(ring.grant([a])[a][0])  # 4 more granted once the first 4 are announced
    ring.announced(a, *keys[4], 8)
    views = [ring.consume(gen, slot, 8) for gen, slot in keys[:4]]
    assert len(ring.loaned) == 4 and all(v.base is not None for v in views)
    copy = ring.consume(*keys[4], 8)
    assert copy.base is None and len(ring.loaned) == 4  # a private copy: its slot is free at once
    assert ring.free[-1] == keys[4][1]


def test_a_new_generation_drops_old_grants_from_the_counts(ring):
    a = Peer()
    ring.grant([a])
    assert ring.grow(10_000) is True and ring.gen == 1 and ring.slot_bytes == 16384  # 1.25 x 10000, in whole pages
    assert ring.lent_count(a) == 0 and ring.free == list(range(8))
    assert ring.grant([a]) == {a: [(1, 7), (1, 6), (1, 5), (1, 4)]}
    ring.returned(a, [(0, 7), (0, 6), (0, 5), (0, 4)])
    assert sorted(ring.gens) == [1]  # generation 0 unlinked once all its slots came back
