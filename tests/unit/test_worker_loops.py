"""The small parts of the actor's and the policy worker's loops: the actor's inference
requests in flight and its sample outbox (:mod:`zoo.core.workers.actor_streams`), the policy worker's
batching and stall warning (:mod:`zoo.core.workers.policy`); values worked out by hand, with
fake streams that answer what the test gives them."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from zoo.core.health import Meter
from zoo.core.workers.actor import DROP_WAIT_S, REQUEST_RETRY_S, REQUEST_TIMEOUT_S, InferenceRequests, SampleOutbox
from zoo.core.workers.policy import StallWatch, gather, stall_message


class Ctx:
    """What the parts use of a WorkerContext: ``index``, ``stop`` and ``heartbeat()``."""

    def __init__(self, stop_after_heartbeats: int | None = None) -> None:
        self.index, self.stop, self.heartbeats, self.stop_after = 3, False, 0, stop_after_heartbeats

    def heartbeat(self) -> None:
        self.heartbeats += 1
        if self.stop_after is not None and self.heartbeats >= self.stop_after:
            self.stop = True


class Stream:
    """A pusher/client whose ``send`` answers the given results in turn (then True), recording each call."""

    def __init__(self, *results: bool) -> None:
        self.results, self.calls = list(results), []

    def send(self, payload, meta, timeout) -> bool:
        self.calls.append((payload, dict(meta), timeout))
        return self.results.pop(0) if self.results else True


def group(active: list[bool]) -> SimpleNamespace:
    n = len(active)
    return SimpleNamespace(active=np.array(active), obs={"obs": np.arange(n, dtype=np.float32)[:, None]},
                           on_reset=np.array([True] + [False] * (n - 1)), request_id=-1)


# ----------------------------------------------------------------------------- actor: requests
def test_requests_carry_the_acting_slots_and_ids_from_the_first_one():
    client, ctx, meter = Stream(), Ctx(), Meter("actor")
    groups = [group([True, False, True]), group([False, True])]
    requests = InferenceRequests(ctx, client, groups, first_id=1000, meter=meter)
    requests.send(0)
    requests.send(1)
    (req0, meta0, timeout0), (req1, meta1, _) = client.calls
    assert meta0 == {"request_id": 1000, "rows": 2, "group": 0} and meta1 == {"request_id": 1001, "rows": 1, "group": 1}
    assert req0["slot"].tolist() == [0, 2] and req0["obs"]["obs"].tolist() == [[0.0], [2.0]]
    assert req0["on_reset"].tolist() == [True, False] and req1["slot"].tolist() == [1]
    assert timeout0 == REQUEST_TIMEOUT_S
    assert (requests.pending, meter.counts["requests"]) == ({1000: 0, 1001: 1}, 2)
    assert requests.answered(1000) == 0
    assert requests.answered(1000) is None  # answered already: a late duplicate matches nothing
    assert requests.pending == {1001: 1}


def test_a_full_inference_stream_is_waited_for_with_heartbeats_until_a_stop():
    client, ctx, meter = Stream(False, False, True), Ctx(), Meter("actor")
    requests = InferenceRequests(ctx, client, [group([True])], first_id=0, meter=meter)
    requests.send(0)
    assert (len(client.calls), ctx.heartbeats, meter.counts["requests"]) == (3, 2, 1)
    stopped, ctx2 = Stream(*[False] * 10), Ctx(stop_after_heartbeats=2)
    requests = InferenceRequests(ctx2, stopped, [group([True])], first_id=0, meter=Meter("actor"))
    requests.send(0)  # returns once stopped: 2 heartbeats, then the third failed send sees the stop
    assert (len(stopped.calls), ctx2.heartbeats, requests.meter.counts["requests"]) == (3, 2, 0)


def test_a_request_unanswered_for_the_retry_time_is_sent_again_with_a_new_id():
    client = Stream()
    requests = InferenceRequests(Ctx(), client, [group([True]), group([True])], first_id=5, meter=Meter("actor"))
    requests.send(0)
    requests.send(1)
    requests.sent_at = [100.0, 104.0]
    requests.retry_stale(now=100.0 + REQUEST_RETRY_S)  # not more than the retry time: kept
    assert requests.pending == {5: 0, 6: 1}
    requests.retry_stale(now=100.5 + REQUEST_RETRY_S)  # group 0's is stale: sent again as 7
    assert requests.pending == {6: 1, 7: 0}
    assert [c[1]["request_id"] for c in client.calls] == [5, 6, 7]
    assert requests.answered(5) is None and requests.answered(7) == 0


def test_each_reply_taken_counts_its_round_trip_from_the_send(monkeypatch):
    from zoo.core import health as health_mod
    from zoo.core.workers import actor_streams

    # perf_counter reads: send 0 starts at 9.9999 and the stream takes it at 10.0; send 1: 10.0001, 10.0002
    clock = iter([9.9999, 10.0, 10.0001, 10.0002])
    fake = SimpleNamespace(perf_counter=lambda: next(clock))
    monkeypatch.setattr(health_mod, "time", fake)
    monkeypatch.setattr(actor_streams, "time", fake)
    meter = Meter("actor")
    requests = InferenceRequests(Ctx(), Stream(), [group([True]), group([True])], first_id=1000, meter=meter)
    requests.send(0)
    requests.send(1)
    assert requests.sent_at == [10.0, 10.0002]
    assert requests.answered(1000, 10.0005) == 0  # 0.5 ms: bucket 5, [256, 512) us
    assert requests.answered(1001, 10.0302) == 1  # 30 ms: bucket 11, [16.384, 32.768) ms
    assert requests.answered(1000, 11.0) is None  # a late duplicate: no round trip
    expected = [0] * 18
    expected[5] = expected[11] = 1
    assert meter.round_trip == expected


# ----------------------------------------------------------------------------- actor: outbox
def bundle(slots: int) -> dict:
    return {"reward": np.zeros((4, slots), np.float32)}


def test_a_sample_carries_the_counts_since_the_last_one_sent():
    pusher, meter = Stream(), Meter("actor")
    outbox = SampleOutbox(Ctx(), pusher, drop_when_full=False, meter=meter)
    outbox.stepped(2)
    outbox.stepped(2)
    outbox.episodes.append({"return": 1.5, "length": 3})
    assert outbox.push(bundle(2), env_offset=4, agents=1, t=0.0) is True
    assert pusher.calls[0][1] == {"actor": 3, "env_offset": 4, "agents": 1, "env_steps": 4,
                                  "episodes": [{"return": 1.5, "length": 3}], "dropped_at_actor": 0}
    assert (outbox.env_steps, outbox.episodes, outbox.dropped) == (0, [], 0)
    assert (meter.counts["env_steps"], meter.counts["samples_pushed"]) == (4, 1)


def test_a_dropped_sample_s_counts_travel_with_the_next_that_gets_through():
    pusher, meter = Stream(False, True), Meter("actor")
    outbox = SampleOutbox(Ctx(), pusher, drop_when_full=True, meter=meter)
    outbox.stepped(3)
    outbox.episodes.append({"return": 2.0, "length": 9})
    assert outbox.push(bundle(6), env_offset=0, agents=2, t=0.0) is True  # dropped: 6 agent-slot samples
    assert (outbox.env_steps, outbox.dropped, meter.counts["samples_pushed"]) == (3, 6, 0)
    outbox.stepped(3)
    assert outbox.push(bundle(6), env_offset=0, agents=2, t=0.0) is True
    assert pusher.calls[1][1] == {"actor": 3, "env_offset": 0, "agents": 2, "env_steps": 6,
                                  "episodes": [{"return": 2.0, "length": 9}], "dropped_at_actor": 6}
    assert [c[2] for c in pusher.calls] == [DROP_WAIT_S, DROP_WAIT_S]  # never waits for the trainer
    assert (outbox.env_steps, outbox.dropped, meter.counts["samples_pushed"]) == (0, 0, 1)


def test_without_dropping_the_actor_waits_for_the_trainer_until_a_stop():
    pusher, ctx = Stream(False, True), Ctx()
    assert SampleOutbox(ctx, pusher, drop_when_full=False, meter=Meter("actor")).push(bundle(1), 0, 1, 0.0) is True
    assert (len(pusher.calls), ctx.heartbeats, pusher.calls[0][2]) == (2, 1, REQUEST_TIMEOUT_S)
    blocked, ctx = Stream(*[False] * 10), Ctx(stop_after_heartbeats=1)
    outbox = SampleOutbox(ctx, blocked, drop_when_full=False, meter=Meter("actor"))
    outbox.stepped(1)
    assert outbox.push(bundle(1), 0, 1, 0.0) is False
    assert (len(blocked.calls), outbox.env_steps) == (2, 1)  # nothing sent: the counts stay


# ----------------------------------------------------------------------------- policy worker
class Server:
    """An inference server whose ``recv`` answers the queued requests, then None."""

    def __init__(self, *rows: int) -> None:
        self.queue = [(f"req{i}", {}, {"rows": r}) for i, r in enumerate(rows, 1)]

    def recv(self, timeout: float):
        return self.queue.pop(0) if self.queue else None


def test_a_batch_gathers_requests_until_it_holds_max_batch_rows():
    first = ("req0", {}, {"rows": 3})
    server = Server(4, 2, 5)
    batch, rows = gather(server, first, max_rows=8, max_wait_s=1.0)
    assert ([r[0] for r in batch], rows) == (["req0", "req1", "req2"], 9)  # 3 + 4 + 2: the one that reaches 8 is kept
    assert [r[0] for r in server.queue] == ["req3"]  # left for the next batch
    assert gather(Server(), first, max_rows=8, max_wait_s=1.0) == ([first], 3)  # nothing else came
    server = Server(1)
    assert gather(server, first, max_rows=3, max_wait_s=1.0) == ([first], 3) and len(server.queue) == 1


def test_the_stall_warning_names_the_version_served_and_the_lag_limit():
    watch = StallWatch(30.0, now=10.0)
    for _ in range(12):
        watch.served()
    assert stall_message(watch, now=75.4, version=4, max_policy_lag=8) == (
        "no new parameters for 65 s: still serving policy version 4 (12 inference batches since it arrived); "
        "actors act with stale weights and the policy lag grows (samples older than trainer.max_policy_lag=8 "
        "versions are dropped). Is the trainer stalled, or much slower than sampling?")
