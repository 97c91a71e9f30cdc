"""Worker health aggregation (zoo.core.health) and its rendering (zoo.display): exact values
from heartbeat messages with known timers."""
from __future__ import annotations

import io
import json
import types

import pytest
from rich.console import Console

from tests.unit.fakes import round_trip_counts
from zoo.core import health as health_mod
from zoo.core.health import Health, Meter, bottleneck, percent
from zoo.display import Display, health_view, worker_activity

GRAPH = [("trainer", 0), ("policy", 0), ("actor", 0), ("actor", 1)]


def beat(role, index, clock_s, time_s, counts, pid=None, **extra):
    return {"type": "heartbeat", "role": role, "index": index, "pid": pid or 1000 + index + len(role),
            "host": "h", "clock_s": clock_s, "time_s": time_s, "counts": counts, **extra}


def fed_health(tmp_path=None, listener=None):
    """Two heartbeats per worker with hand-picked totals (differences worked out in the test)."""
    h = Health(GRAPH, run_dir=str(tmp_path) if tmp_path else None, interval_s=2.0, listener=listener,
               clock=lambda: 0.0, wall=lambda: 1_700_000_000.0)
    messages = [
        # actor 0: over 4 s, env +0.5 s, inference +0.5 s, push +2.5 s, +400 env steps, +4 samples
        beat("actor", 0, 100.0, {"env": 1.0, "inference": 2.0, "push": 0.5},
             {"env_steps": 1000, "samples_pushed": 10, "requests": 100}),
        beat("actor", 0, 104.0, {"env": 1.5, "inference": 2.5, "push": 3.0},
             {"env_steps": 1400, "samples_pushed": 14, "requests": 140}),
        # actor 1: over 2 s, env +0.2 s, inference +0.2 s, push +1.2 s, +200 env steps, +2 samples
        beat("actor", 1, 200.0, {"env": 0.0, "inference": 0.0, "push": 0.0},
             {"env_steps": 0, "samples_pushed": 0, "requests": 0}),
        beat("actor", 1, 202.0, {"env": 0.2, "inference": 0.2, "push": 1.2},
             {"env_steps": 200, "samples_pushed": 2, "requests": 20}),
        # policy: over 2 s, busy +0.5 s, latency +0.25 s, +50 batches of +1600 rows
        beat("policy", 0, 10.0, {"busy": 1.0, "latency": 2.0}, {"batches": 100, "rows": 3200}, policy_version=7),
        beat("policy", 0, 12.0, {"busy": 1.5, "latency": 2.25}, {"batches": 150, "rows": 4800}, policy_version=8),
        # trainer: over 4 s, waited +0.2 s, +4 samples pulled, +1 update
        beat("trainer", 0, 50.0, {"wait": 10.0}, {"samples_pulled": 8, "updates": 2}),
        beat("trainer", 0, 54.0, {"wait": 10.2}, {"samples_pulled": 12, "updates": 3}),
    ]
    for i, m in enumerate(messages):
        h.on_control(m, now=float(i))  # received at controller times 0..7 s
    h.on_control({"type": "status", "role": "trainer", "index": 0, "env_steps": 1600, "updates": 3}, now=7.5)
    return h


def test_rates_fractions_queue_and_bottleneck_from_heartbeats():
    snap = fed_health().snapshot(now=10.0)
    rows = {(r["role"], r["index"]): r for r in snap["workers"]}
    assert [(r["role"], r["index"]) for r in snap["workers"]] == GRAPH
    a0, a1, p, t = rows["actor", 0], rows["actor", 1], rows["policy", 0], rows["trainer", 0]
    # actor 0: 400 env steps / 4 s; 0.5/4, 0.5/4, 2.5/4 of the time
    assert (a0["env_steps_per_s"], a0["env_frac"], a0["inference_frac"], a0["push_frac"]) == (
        100.0, 0.125, 0.125, 0.625)
    # actor 1: 200 / 2 s; 0.2/2, 0.2/2, 1.2/2
    assert (a1["env_steps_per_s"], a1["env_frac"], a1["inference_frac"], a1["push_frac"]) == (100.0, 0.1, 0.1, 0.6)
    # policy: busy 0.5/2; 1600 rows / 50 batches; 0.25 s / 50 batches = 5 ms; 50 batches / 2 s
    assert (p["busy_frac"], p["batch_rows"], p["latency_ms"], p["batches_per_s"]) == (0.25, 32.0, 5.0, 25.0)
    assert p["policy_version"] == 8
    # trainer: busy 1 - 0.2/4 = 0.95; 4 samples per 1 update; 1 update / 4 s
    assert t["busy_frac"] == pytest.approx(0.95, abs=1e-12)
    assert (t["samples_per_update"], t["updates_per_s"]) == (4.0, 0.25)
    # queue: pushed 14 + 2 = 16, pulled 12 -> 4 waiting
    assert t["samples_waiting"] == 4 and snap["totals"] == {"actor_env_steps_per_s": 200.0, "samples_waiting": 4,
                                                   "round_trip_counts": None, "round_trip_ms": None}
    # heartbeat ages: last messages received at 1, 3, 5, 7.5 (the status) -> 10 - those
    assert (a0["heartbeat_age_s"], a1["heartbeat_age_s"], p["heartbeat_age_s"], t["heartbeat_age_s"]) == (
        9.0, 7.0, 5.0, 2.5)
    assert (a0["pid"], a0["host"], a0["restarts"]) == (1005, "h", 0)
    # mean actor fractions: push (0.625 + 0.6) / 2 = 0.6125 -> "61%"; trainer busy 95%
    neck = snap["bottleneck"]
    assert neck["kind"] == "trainer"
    assert neck["actors"] == {"env": (0.125 + 0.1) / 2, "inference": (0.125 + 0.1) / 2, "push": (0.625 + 0.6) / 2}
    assert neck["text"] == ("trainer-bound: actors wait 61% of the time for the trainer to take their samples "
                            "(trainer busy 95%)")
    assert (neck["policy_busy"], neck["trainer_busy"]) == (0.25, t["busy_frac"])
    assert snap["status"] == {"env_steps": 1600, "updates": 3}  # the latest status, bookkeeping keys dropped
    assert (snap["time"], snap["ended"], snap["interval_s"]) == (1_700_000_000.0, False, 2.0)


def test_a_worker_not_heard_from_is_starting_and_one_heartbeat_measures_nothing():
    h = Health(GRAPH, clock=lambda: 0.0)
    h.on_control(beat("actor", 0, 5.0, {"env": 1.0, "inference": 0.0, "push": 0.0}, {"env_steps": 10}), now=1.0)
    rows = {(r["role"], r["index"]): r for r in h.snapshot(now=3.0)["workers"]}
    assert rows["actor", 0]["heartbeat_age_s"] == 2.0 and rows["actor", 0]["env_frac"] is None
    assert rows["actor", 1]["heartbeat_age_s"] is None and rows["actor", 1]["pid"] is None
    snap = h.snapshot(now=3.0)
    assert snap["bottleneck"]["kind"] is None and snap["bottleneck"]["text"] == "measuring..."
    assert snap["totals"]["samples_waiting"] is None  # actor 1 and the trainer have not reported


def test_window_keeps_the_last_window_s_of_heartbeats():
    h = Health([("actor", 0)], window_s=5.0)
    for s in range(11):  # clock 0..10 s, env time = s * 0.5 until 5, then + 0.1 per s
        env = 0.5 * s if s <= 5 else 2.5 + 0.1 * (s - 5)
        h.on_control(beat("actor", 0, float(s), {"env": env, "inference": 0.0, "push": 0.0},
                          {"env_steps": 100 * s}), now=float(s))
    row = h.snapshot(now=10.0)["workers"][0]
    # beats 5..10 kept (10 - 5 = 5 is not more than the window): env (3.0 - 2.5) / 5 s
    assert row["env_frac"] == pytest.approx(0.1, abs=1e-12) and row["env_steps_per_s"] == 100.0


def test_restart_and_new_pid_start_the_measurement_again():
    h = fed_health()
    h.record_restart("actor", 1, "heartbeat timeout")
    h.record_restart("actor", 1, "exit code -9")
    rows = {(r["role"], r["index"]): r for r in h.snapshot(now=10.0)["workers"]}
    assert (rows["actor", 1]["restarts"], rows["actor", 1]["last_restart"]) == (2, "exit code -9")
    assert rows["actor", 1]["env_frac"] is None  # the old process's totals are gone
    assert (rows["actor", 1]["pid"], rows["actor", 1]["heartbeat_age_s"]) == (None, None)  # starting again
    # actor 0 comes back as a new process whose totals start from 0: no difference with the old series
    h.on_control(beat("actor", 0, 300.0, {"env": 0.1, "inference": 0.0, "push": 0.0}, {"env_steps": 5}, pid=42),
                 now=9.0)
    rows = {(r["role"], r["index"]): r for r in h.snapshot(now=10.0)["workers"]}
    assert rows["actor", 0]["pid"] == 42 and rows["actor", 0]["env_steps_per_s"] is None


@pytest.mark.parametrize("actors, policy, trainer, kind, text", [
    (None, None, None, None, "measuring..."),
    ({"env": 0.7, "inference": 0.2, "push": 0.1}, 0.9, 0.5, "env", "env-bound: actors step envs 70% of the time"),
    ({"env": 0.7, "inference": 0.2, "push": 0.1}, 0.9, 0.95, "env",
     "env-bound: actors step envs 70% of the time; the trainer is busy 95%: updates fall behind sampling"),
    ({"env": 0.3, "inference": 0.63, "push": 0.07}, 0.8, None, "inference",
     "inference-bound: actors wait 63% of the time for actions (policy worker busy 80%)"),
    ({"env": 0.3, "inference": 0.63, "push": 0.07}, None, 0.2, "inference",
     "inference-bound: actors wait 63% of the time for actions"),
    ({"env": 0.3, "inference": 0.63, "push": 0.07}, 0.2, 0.3, "inference-latency",
     "inference-latency-bound: actors wait 63% of the time for actions but the policy worker is busy only 20% "
     "(try a larger actors.ring_size or a smaller policy.max_wait_ms)"),
    # a tie between pushing and waiting for actions names the trainer (it is checked first)
    ({"env": 0.2, "inference": 0.4, "push": 0.4}, 0.9, None, "trainer",
     "trainer-bound: actors wait 40% of the time for the trainer to take their samples"),
])
def test_bottleneck_sentence(actors, policy, trainer, kind, text):
    assert bottleneck(actors, policy, trainer) == (kind, text)


def test_percent_rounds_half_up():
    assert [percent(x) for x in (0.0, 0.005, 0.634, 0.635 + 1e-9, 1.0)] == ["0%", "1%", "63%", "64%", "100%"]


def test_meter_adds_the_time_between_laps(monkeypatch):
    clock = iter([10.0, 10.25, 11.0])
    monkeypatch.setattr(health_mod, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    m = Meter("actor")
    assert m.report() == {"time_s": {"env": 0.0, "inference": 0.0, "push": 0.0},
                          "counts": {"env_steps": 0, "samples_pushed": 0, "requests": 0},
                          "round_trip": [0] * 18}
    t = m.lap("inference", 9.5)  # 10.0 - 9.5
    t = m.lap("env", t)          # 10.25 - 10.0
    m.lap("push", t)             # 11.0 - 10.25
    m.counts["env_steps"] += 8
    report = m.report()
    assert report["time_s"] == {"env": 0.25, "inference": 0.5, "push": 0.75} and report["counts"]["env_steps"] == 8
    m.counts["env_steps"] += 1
    assert report["counts"]["env_steps"] == 8  # a report is a copy


class Listener:
    def __init__(self):
        self.statuses, self.snapshots = [], []

    def __call__(self, status):
        self.statuses.append(status)

    def show_live(self, snap):
        self.snapshots.append(snap)


def test_tick_writes_live_json_every_interval_and_close_marks_the_end(tmp_path):
    listener = Listener()
    h = fed_health(tmp_path, listener)
    status = {"type": "status", "role": "trainer", "index": 0, "env_steps": 1600, "env_steps_per_s": 400.0}
    h.show(status)
    assert listener.statuses == [status]  # forwarded as given
    first = h.tick(now=20.0)
    assert first is not None and listener.snapshots == [first]
    assert json.loads((tmp_path / "live.json").read_text()) == first
    assert first["status"] == {"env_steps": 1600, "env_steps_per_s": 400.0}  # the shown one, with its rate
    assert h.tick(now=21.9) is None  # 1.9 s < interval_s = 2
    assert h.tick(now=22.0) is not None and len(listener.snapshots) == 2
    last = h.close(now=22.5)
    assert last["ended"] is True and json.loads((tmp_path / "live.json").read_text())["ended"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["live.json"]  # no temporary file left


def test_worker_activity_lines():
    rows = {(r["role"], r["index"]): r for r in fed_health().snapshot(now=10.0)["workers"]}
    assert worker_activity(rows["actor", 0]) == (
        "100 env steps/s · envs 13% · waits for actions 13% · waits for trainer 63%")  # 12.5% and 62.5% round up
    assert worker_activity(rows["policy", 0]) == "batch 32.0 rows · latency 5.0 ms · busy 25% · version 8"
    assert worker_activity(rows["trainer", 0]) == "busy 95% · 4.0 samples/update · 4 samples waiting · 0.25 updates/s"
    assert worker_activity({"role": "actor", "index": 3}) == "measuring..."
    # a worker of a plugin's kind: alive once it has reported, nothing more is measured
    assert worker_activity({"role": "param-stats", "index": 0, "heartbeat_age_s": None}) == "measuring..."
    assert worker_activity({"role": "param-stats", "index": 0, "heartbeat_age_s": 0.4}) == "running"
    assert worker_activity({"role": "param-stats", "index": 0, "heartbeat_age_s": 0.4, "busy": "flush",
                            "busy_s": 3.0}) == "in flush for 3 s"


def test_live_display_shows_every_worker_and_the_bottleneck():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    h = fed_health()
    h.record_restart("actor", 1, "heartbeat timeout")
    with Display(console, title="run-1") as display:
        display({"env_steps": 1600, "budget_env_steps": 3200})
        display.show_live(h.snapshot(now=10.0))
    text = out.getvalue()
    for name in ("trainer 0", "policy 0", "actor 0", "actor 1"):
        assert name in text
    assert "1 (last: heartbeat timeout)" in text and "9.0 s ago" in text
    assert "bottleneck: trainer-bound: actors wait" in text  # actor 1's restart left actor 0 alone: 62.5% -> 63%
    assert "63% of the time for the trainer" in text


def test_plain_display_prints_no_worker_table():
    out = io.StringIO()
    with Display(Console(file=out, width=200)) as display:
        display({"env_steps": 1600})
        display.show_live(fed_health().snapshot(now=10.0))
    assert out.getvalue() == "env_steps=1,600\n"


def test_health_view_names_hosts_only_when_there_are_several():
    snap = fed_health().snapshot(now=10.0)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(health_view(snap))
    assert "host" not in console.file.getvalue()
    snap["workers"][0]["host"] = "other"
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(health_view(snap))
    assert "host" in console.file.getvalue() and "other" in console.file.getvalue()


def test_the_queue_keeps_the_samples_of_replaced_processes():
    h = fed_health()
    h.record_restart("actor", 0, "exit code -9")  # its last heartbeat said 14 samples pushed
    h.on_control(beat("actor", 0, 5.0, {"env": 0.0, "inference": 0.0, "push": 0.0}, {"samples_pushed": 3}, pid=42),
                 now=9.0)
    # pushed: 14 (the replaced actor 0) + 3 (its new process) + 2 (actor 1) = 19; pulled 12 -> 7 waiting
    assert h.snapshot(now=10.0)["totals"]["samples_waiting"] == 7
    # the trainer replaced too, by a new pid without a restart record: its 12 pulled still count
    h.on_control(beat("trainer", 0, 1.0, {"wait": 0.0}, {"samples_pulled": 5, "updates": 0}, pid=77), now=9.5)
    assert h.snapshot(now=10.0)["totals"]["samples_waiting"] == 19 - (12 + 5)


def test_a_busy_heartbeat_shows_the_long_operation_until_the_loop_reports_again():
    h = fed_health()
    h.on_control({"type": "heartbeat", "role": "trainer", "index": 0, "busy": "update", "busy_s": 12.4}, now=9.0)
    h.on_control({"type": "heartbeat", "role": "policy", "index": 0, "busy": "checkpoint"}, now=9.0)
    rows = {(r["role"], r["index"]): r for r in h.snapshot(now=10.0)["workers"]}
    assert (rows["trainer", 0]["busy"], rows["trainer", 0]["busy_s"], rows["trainer", 0]["heartbeat_age_s"]) == (
        "update", 12.4, 1.0)
    assert worker_activity(rows["trainer", 0]).endswith(" · 0.25 updates/s · in update for 12 s")
    assert worker_activity(rows["policy", 0]).endswith(" · version 8 · in checkpoint")  # the version stays
    h.on_control(beat("trainer", 0, 60.0, {"wait": 10.2}, {"samples_pulled": 16, "updates": 4}), now=9.8)
    row = h.snapshot(now=10.0)["workers"][0]
    assert "busy" not in row and "busy_s" not in row
    # the update took the 6 s since the last beat: busy 1 - 0 / 6 over beats 54..60 s (the window drops 50 s)
    assert (row["busy_frac"], row["samples_per_update"]) == (1.0, 4.0)


def test_a_trainer_in_a_long_update_counts_it_as_busy_and_the_bottleneck_says_so():
    # Env-bound actors; the trainer waited 9.9 of its last 10 s of timed heartbeats, then began
    # an update 30 s ago: busy (0.1 + 30) / (10 + 30) = 0.7525. Before: "busy 1%".
    from zoo.core.health import busy_with_operation

    assert busy_with_operation(0.01, 10.0, 30.0) == pytest.approx(0.7525, abs=1e-12)
    assert busy_with_operation(0.01, 10.0, None) == 0.01 and busy_with_operation(0.5, 4.0, 0) == 0.5
    h = Health([("trainer", 0), ("actor", 0)], clock=lambda: 0.0)
    h.on_control(beat("actor", 0, 0.0, {"env": 0.0, "inference": 0.0, "push": 0.0}, {"env_steps": 0}), now=0.0)
    h.on_control(beat("actor", 0, 4.0, {"env": 3.6, "inference": 0.4, "push": 0.0}, {"env_steps": 400}), now=1.0)
    h.on_control(beat("trainer", 0, 100.0, {"wait": 0.0}, {"samples_pulled": 0, "updates": 0}), now=0.0)
    h.on_control(beat("trainer", 0, 110.0, {"wait": 9.9}, {"samples_pulled": 8, "updates": 0}), now=1.0)
    h.on_control({"type": "heartbeat", "role": "trainer", "index": 0, "busy": "update", "busy_s": 90.0}, now=2.0)
    snap = h.snapshot(now=2.0)
    assert snap["workers"][0]["busy_frac"] == pytest.approx((0.1 + 90.0) / 100.0, abs=1e-12)  # 0.901
    assert snap["bottleneck"]["text"] == ("env-bound: actors step envs 90% of the time; the trainer is busy 90%: "
                                          "updates fall behind sampling")


def test_a_worker_heartbeat_carries_pid_host_clock_and_the_meter_totals():
    import os
    import socket

    from zoo.core.workers.base import WorkerContext

    sent = []
    ctx = WorkerContext("actor", 3, None, None, "run-id", "run-dir")
    ctx.control = types.SimpleNamespace(send=lambda bundle, meta, timeout: sent.append(meta) or True)
    ctx.meter = Meter("actor")
    ctx.meter.counts["env_steps"] = 64
    ctx.heartbeat(policy_version=5)
    assert len(sent) == 1
    meta = sent[0]
    assert (meta["type"], meta["role"], meta["index"], meta["pid"], meta["host"]) == (
        "heartbeat", "actor", 3, os.getpid(), socket.gethostname())
    assert isinstance(meta["clock_s"], float) and meta["policy_version"] == 5
    assert meta["time_s"] == {"env": 0.0, "inference": 0.0, "push": 0.0}
    assert meta["counts"] == {"env_steps": 64, "samples_pushed": 0, "requests": 0}


# ----------------------------------------------------------------------------- inference round trips
def test_round_trip_buckets_are_16_us_times_powers_of_two_up_to_about_a_second():
    from zoo.core.health import ROUND_TRIP_BUCKETS, ROUND_TRIP_EDGES_S, round_trip_bucket

    assert ROUND_TRIP_BUCKETS == 18 and len(ROUND_TRIP_EDGES_S) == 17
    assert ROUND_TRIP_EDGES_S[0] == 16e-6 and ROUND_TRIP_EDGES_S[1] == 32e-6 and ROUND_TRIP_EDGES_S[-1] == 1.048576
    # an edge starts its bucket; just below it is the bucket before
    for k, edge in enumerate(ROUND_TRIP_EDGES_S):
        assert round_trip_bucket(edge) == k + 1
        assert round_trip_bucket(edge * (1 - 1e-9)) == k
    assert [round_trip_bucket(s) for s in (-1.0, 0.0, 15.9e-6, 100e-6, 1e-3, 0.5, 1.048576, 30.0, float("inf"))] == [
        0, 0, 0, 3, 6, 15, 17, 17, 17]  # 100 us in [64, 128) us; 1 ms in [512, 1024) us; 0.5 s in [262, 524) ms


def test_histogram_percentile_interpolates_within_the_bucket():
    from zoo.core.health import histogram_percentile, round_trip_percentiles_ms

    # edges 1, 2, 4: buckets [0, 1), [1, 2), [2, 4), [4, inf); 10 values
    counts = [0, 6, 3, 1]
    # p50: rank 5, in [1, 2) with 0 before: 1 + 1 x 5/6
    assert histogram_percentile(counts, 50, (1.0, 2.0, 4.0)) == pytest.approx(1 + 5 / 6, abs=1e-12)
    # p90: rank 9, in [2, 4) with 6 before: 2 + 2 x 3/3 = 4.0; p99: rank 9.9 in the open bucket: its lower edge
    assert histogram_percentile(counts, 90, (1.0, 2.0, 4.0)) == 4.0
    assert histogram_percentile(counts, 99, (1.0, 2.0, 4.0)) == 4.0
    # bucket 0 starts at 0: 4 values under 1, p25 = rank 1 -> 0 + 1 x 1/4
    assert histogram_percentile([4, 0, 0, 0], 25, (1.0, 2.0, 4.0)) == 0.25
    # empty buckets before the rank are skipped: p100 of [2, 0, 2, 0] -> rank 4 in [2, 4) at 2 + 2 x 2/2
    assert histogram_percentile([2, 0, 2, 0], 100, (1.0, 2.0, 4.0)) == 4.0
    assert histogram_percentile([0, 0, 0, 0], 50, (1.0, 2.0, 4.0)) is None
    with pytest.raises(ValueError, match="3 counts for 3 edges"):
        histogram_percentile([1, 2, 3], 50, (1.0, 2.0, 4.0))
    with pytest.raises(ValueError, match="q=0"):
        histogram_percentile(counts, 0, (1.0, 2.0, 4.0))
    # the round-trip edges, in ms: 80 in [512, 1024) us, 20 in [1.024, 2.048) ms
    rt = [0] * 18
    rt[6], rt[7] = 80, 20
    got = round_trip_percentiles_ms(rt)
    assert got is not None
    # p50: rank 50 -> 0.512 + 0.512 x 50/80 = 0.832 ms; p90: rank 90, 10 into the 20 -> 1.024 + 1.024 x 10/20 = 1.536;
    # p99: 19 of 20 -> 1.024 + 1.024 x 19/20 = 1.9968
    assert got == pytest.approx({"p50": 0.832, "p90": 1.536, "p99": 1.9968}, abs=1e-12)
    assert round_trip_percentiles_ms([0] * 18) is None and round_trip_percentiles_ms(None) is None


def test_the_meter_counts_each_round_trip_in_its_bucket():
    m = Meter("actor")
    for seconds in (10e-6, 16e-6, 500e-6, 0.003, 0.003, 2.0):
        m.took_reply(seconds)
    expected = [0] * 18
    expected[0] = expected[1] = expected[5] = expected[17] = 1  # under 16 us, [16, 32) us, [256, 512) us, >= 1.05 s
    expected[8] = 2  # 3 ms in [2.048, 4.096) ms
    report = m.report()
    assert report["round_trip"] == expected
    m.took_reply(0.003)
    assert report["round_trip"][8] == 2  # a report is a copy
    assert "round_trip" not in Meter("policy").report() and "round_trip" not in Meter("trainer").report()


def test_round_trips_are_summed_over_the_actors_and_kept_for_replaced_processes():
    h = Health([("actor", 0), ("actor", 1)], clock=lambda: 0.0)
    zero = {"env": 0.0, "inference": 0.0, "push": 0.0}
    # actor 0: 10 in [512, 1024) us before its window, +30 there and +10 in [1.024, 2.048) ms over it
    h.on_control(beat("actor", 0, 100.0, zero, {}, round_trip=round_trip_counts(b6=10)), now=0.0)
    h.on_control(beat("actor", 0, 102.0, zero, {}, round_trip=round_trip_counts(b6=40, b7=10)), now=1.0)
    # actor 1: +50 in [512, 1024) us over its window
    h.on_control(beat("actor", 1, 50.0, zero, {}, round_trip=round_trip_counts(b6=0)), now=0.0)
    h.on_control(beat("actor", 1, 53.0, zero, {}, round_trip=round_trip_counts(b6=50)), now=1.0)
    totals = h.snapshot(now=2.0)["totals"]
    assert totals["round_trip_counts"] == round_trip_counts(b6=90, b7=10)
    # window: 80 in [512, 1024) us, 10 in [1.024, 2.048) ms (90 round trips):
    # p50: rank 45 -> 0.512 + 0.512 x 45/80 = 0.8 ms; p90: rank 81, 1 of the 10 -> 1.024 + 1.024 x 1/10 = 1.1264;
    # p99: rank 89.1, 9.1 of the 10 -> 1.024 + 1.024 x 0.91 = 1.95584
    assert totals["round_trip_ms"] == pytest.approx({"p50": 0.8, "p90": 1.1264, "p99": 1.95584}, abs=1e-12)
    # actor 1 is replaced: its 50 stay in the cumulative counts, its new process adds its own
    h.record_restart("actor", 1, "exit code -9")
    h.on_control(beat("actor", 1, 1.0, zero, {}, pid=99, round_trip=round_trip_counts(b3=5)), now=3.0)
    assert h.snapshot(now=4.0)["totals"]["round_trip_counts"] == round_trip_counts(b3=5, b6=90, b7=10)
