"""The trainer's sync (:mod:`zoo.core.workers.sync`): one trainer's and data-parallel trainers'
update points, the counts they pool and the stop and budget decisions they take; values
worked out by hand. The data-parallel group is a fake that returns what the test gives it
(the real exchange: tests/unit/test_distributed.py)."""
from __future__ import annotations

import numpy as np

from zoo.core.workers.receiver import fresh_share
from zoo.core.workers.sync import GroupSync, Meeting, SoloSync, UpdatePoint


def ready(versions: list[list[int]], agents: int = 1) -> tuple:
    """A receiver's ``(batch, samples, origins, share)`` of one sample whose steps were acted
    at ``versions`` ([T][B])."""
    v = np.array(versions, np.int64)
    batch = {"reward": np.zeros(v.shape, np.float32), "policy_version": v, "active": np.ones(v.shape, bool)}
    return batch, [batch], [(0, 0, agents, v.shape[1])], fresh_share()


def test_a_local_point_has_the_batch_s_env_steps_and_policy_lags():
    # trained at version 3: lags 3, 2, 1, 1 (T = 2, B = 2)
    point = UpdatePoint.local(ready([[0, 1], [2, 2]]), version=3, agents=1, sources=[])
    assert point == UpdatePoint(used_steps=4, used_slots=2, lag_mean=1.75, lag_max=3, lag_sum=7, lag_count=4)
    # 2 agents per env: 2 steps x 1 env
    assert UpdatePoint.local(ready([[3, 3], [3, 3]], agents=2), 3, 1, []).used_steps == 2
    sources = [{"actor": 0, "env": 1, "agent": 0, "keys": ["reward"]}]
    assert UpdatePoint.local(None, 3, 1, sources) == UpdatePoint(sources=sources)  # no batch: a rank asked to stop
    inactive = ready([[0, 1]])
    inactive[0]["active"][:] = False
    assert UpdatePoint.local(inactive, 3, 1, []) == UpdatePoint(used_steps=2, used_slots=2)  # no active step, no lag


def test_pooled_points_sum_counts_and_pool_the_mean_lag():
    a = UpdatePoint(used_steps=4, used_slots=2, lag_mean=1.75, lag_max=3, lag_sum=7, lag_count=4,
                    sources=[{"actor": 0}])
    b = UpdatePoint(used_steps=6, used_slots=3, lag_mean=2.5, lag_max=2, lag_sum=5, lag_count=2,
                    sources=[{"actor": 1}])
    pooled = UpdatePoint.pool([a.record(), b.record()])
    # (7 + 5) / (4 + 2) = 2.0, not the mean of the means (2.125)
    assert pooled == UpdatePoint(used_steps=10, used_slots=5, lag_mean=2.0, lag_max=3, lag_sum=12, lag_count=6,
                                 sources=[{"actor": 0}, {"actor": 1}])
    assert UpdatePoint.pool([UpdatePoint().record(), UpdatePoint().record()]) == UpdatePoint()


def test_one_trainer_adds_its_counts_at_once_and_ends_before_waiting():
    sync = SoloSync()
    assert sync.join(module=None) is True and sync.info is None and not sync.data_parallel
    assert (sync.ended(stop=False, budget_reached=False), sync.ended(False, True), sync.ended(True, False),
            sync.ended(True, True)) == (None, True, False, False)
    assert sync.receiving(stop=True) is True
    share = {**fresh_share(), "env_steps": 8}
    assert sync.received(share) == [share]
    point = UpdatePoint(used_steps=4)
    assert sync.meet(point, stop=True) == Meeting(point, [], False)
    assert sync.end_at(Meeting(point, [], True), budget_reached=True) is None
    assert (sync.stop_in_update(True), sync.stop_in_update(False)) == (True, False)


class FakeGroup:
    """Rank 0's view of a group of two: ``sync`` answers this rank's record followed by ``peer``."""

    backend, devices, gpus = "gloo", ["cpu", "cpu"], [None, None]

    def __init__(self, peer: dict | None) -> None:
        self.peer, self.sent, self.broadcast, self.closed = peer, [], [], False

    def sync(self, record: dict) -> list[dict] | None:
        self.sent.append(record)
        return None if self.peer is None else [record, self.peer]

    def broadcast_module(self, module) -> None:
        self.broadcast.append(module)

    def close(self, leave: bool = True) -> None:
        self.closed = "together" if leave else "at once"


def peer(env_steps: int, stop: bool = False, **point) -> dict:
    return {**fresh_share(), "env_steps": env_steps, **UpdatePoint(**point).record(), "stop": stop}


def test_data_parallel_ranks_keep_their_counts_for_the_sync_point_and_pool_them_there():
    group = FakeGroup(peer(20, used_steps=6, used_slots=3, lag_max=2, lag_sum=5, lag_count=2))
    sync = GroupSync(0, 2, lambda: group)
    assert sync.info is None  # before joining
    assert sync.join(module="policy") is True
    assert group.broadcast == ["policy"] and sync.data_parallel
    assert sync.info == {"backend": "gloo", "devices": ["cpu", "cpu"], "gpus": [None, None]}
    assert sync.ended(stop=True, budget_reached=True) is None  # ends only at sync points
    assert (sync.receiving(stop=False), sync.receiving(stop=True)) == (True, False)
    ep = {"return": 1.0, "length": 2}
    assert sync.received({**fresh_share(), "env_steps": 8, "episodes": [ep], "episode_at": [8], "dropped": 1}) == []
    assert sync.received({**fresh_share(), "env_steps": 4, "actor_dropped": 2}) == []
    meeting = sync.meet(UpdatePoint(used_steps=4, used_slots=2, lag_mean=1.75, lag_max=3, lag_sum=7, lag_count=4),
                        stop=False)
    # this rank sent 8 + 4 env steps received since the last sync point, its episode at 8, and its point
    assert group.sent == [{"env_steps": 12, "episodes": [ep], "episode_at": [8], "dropped": 1, "actor_dropped": 2,
                           "lag_sum": 7, "lag_count": 4, "lag_max": 3, "bad": [], "used_steps": 4, "used_slots": 2,
                           "stop": False}]
    assert meeting is not None
    assert meeting.shares == [group.sent[0], group.peer] and meeting.stop is False
    assert meeting.point == UpdatePoint(used_steps=10, used_slots=5, lag_mean=2.0, lag_max=3, lag_sum=12,
                                        lag_count=6)
    assert sync.unshared == fresh_share()  # counted once
    assert sync.stop_in_update(True) is False
    sync.close()
    assert group.closed == "together"


def test_data_parallel_ranks_end_together_at_a_sync_point():
    sync = GroupSync(0, 2, lambda: FakeGroup(peer(0, stop=True)))
    sync.join(module=None)
    meeting = sync.meet(UpdatePoint(), stop=False)
    assert meeting is not None and meeting.stop is True  # the peer asked to stop
    assert sync.end_at(meeting, budget_reached=False) is False
    assert sync.end_at(meeting, budget_reached=True) is False  # a stop asked for: not finished
    go_on = Meeting(UpdatePoint(), [], stop=False)
    assert (sync.end_at(go_on, budget_reached=True), sync.end_at(go_on, budget_reached=False)) == (True, None)


def test_a_stop_while_waiting_for_the_group_ends_without_a_meeting():
    assert GroupSync(1, 2, lambda: None).join(module=None) is False  # stopped before every rank arrived
    stopped = GroupSync(0, 2, lambda: FakeGroup(None))
    stopped.join(module=None)
    assert stopped.meet(UpdatePoint(), stop=True) is None
    GroupSync(1, 2, lambda: None).close()  # never joined: nothing to close
