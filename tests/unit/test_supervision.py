"""The supervisor's decisions, with a fake launcher and a fake clock (no processes)."""
from __future__ import annotations

import pytest

from tests.unit.fakes import GRAPH, Clock, FakeLauncher, all_beat, beat, make_supervisor
from zoo.core.config import SupervisionConfig
from zoo.core.supervision import Supervisor, WorkerCrashed


def test_a_killed_actor_is_restarted_after_a_doubling_backoff_up_to_max_restarts():
    s, launcher, clock = make_supervisor(max_restarts=3)
    all_beat(s)
    actor = s.workers[("actor", 1)]
    delays = []
    for n in range(1, 4):
        actor.handle.code = -9  # SIGKILLed
        (r,) = s.check()
        assert (r.role, r.index, r.reason, r.restarts, r.attempt) == ("actor", 1, "killed by SIGKILL", n, n)
        delays.append(r.delay_s)
        assert s.check() == [] and launcher.started[-1] != ("actor", 1, n)  # not before the backoff
        clock.t += r.delay_s
        assert s.check() == []
        assert launcher.started[-1] == ("actor", 1, n)  # the n-th restart, as attempt n
        beat(s, "actor", 1, attempt=n)
    # backoff 1 s, doubled per restart, capped at restart_backoff_max_s = 3: 1, 2, 3 (not 4)
    assert delays == [1.0, 2.0, 3.0]
    actor.handle.code = -9
    with pytest.raises(WorkerCrashed) as info:
        s.check()
    assert (info.value.role, info.value.index) == ("actor", 1)
    assert info.value.reason == "killed by SIGKILL (restarted 3 times already: the limit)"
    # 4 starts of the graph + 3 restarts
    assert len(launcher.started) == 4 + 3


def test_each_worker_has_its_own_restart_count_and_the_policy_worker_restarts_too():
    s, launcher, clock = make_supervisor(max_restarts=1)
    all_beat(s)
    s.workers[("actor", 0)].handle.code = 1
    s.on_message({"type": "error", "role": "actor", "index": 0, "attempt": 0, "traceback": "Traceback: boom"})
    s.workers[("policy", 0)].handle.code = -9
    restarts = s.check()
    assert [(r.role, r.index, r.reason, r.detail) for r in restarts] == [
        ("policy", 0, "killed by SIGKILL", "(no traceback: killed by a signal?)"),
        ("actor", 0, "raised an exception", "Traceback: boom")]
    clock.t += 1.0
    s.check()
    assert launcher.started[-2:] == [("policy", 0, 1), ("actor", 0, 1)]


def test_messages_of_an_old_attempt_are_ignored():
    s, launcher, clock = make_supervisor()
    all_beat(s)
    s.workers[("actor", 0)].handle.code = -9
    s.check()
    clock.t += 1.0
    s.check()  # attempt 1 started
    # the dead attempt's error message arrives late: it must not fail the new process
    s.on_message({"type": "error", "role": "actor", "index": 0, "attempt": 0, "traceback": "old"})
    assert s.workers[("actor", 0)].error is None
    assert s.check() == []


def test_a_silent_worker_is_failed_after_heartbeat_timeout_even_if_alive():
    s, launcher, clock = make_supervisor()
    all_beat(s)
    clock.t += 10.0  # exactly the timeout: not yet
    for role, index in GRAPH:
        if (role, index) != ("actor", 0):
            beat(s, role, index)
    assert s.check() == []
    clock.t += 0.5  # 10.5 s of silence > 10 s
    for role, index in GRAPH:
        if (role, index) != ("actor", 0):
            beat(s, role, index)
    (r,) = s.check()
    assert (r.role, r.index) == ("actor", 0)
    assert r.reason == "no heartbeat for 10 s (supervision.heartbeat_timeout_s=10 s): hung"
    assert launcher.handles[2].calls == ["kill"]  # the hung process is killed before the restart


def test_a_busy_trainer_is_not_hung_while_its_background_heartbeats_come():
    s, launcher, clock = make_supervisor(busy_timeout_s=0.0)
    all_beat(s)
    for _ in range(100):  # a 1000-s update, heartbeats every 10 s from the busy thread
        clock.t += 10.0
        for role, index in GRAPH:
            beat(s, role, index, **({"busy": "update", "busy_s": clock.t - 1000.0} if role == "trainer" else {}))
        assert s.check() == []
    clock.t += 10.5  # but a process whose busy heartbeats stop is failed like any other
    for role, index in GRAPH[1:]:
        beat(s, role, index)
    with pytest.raises(WorkerCrashed) as info:
        s.check()
    assert info.value.role == "trainer" and "no heartbeat for 10 s" in info.value.reason


def test_busy_timeout_bounds_one_long_operation():
    s, launcher, clock = make_supervisor(busy_timeout_s=100.0)
    all_beat(s)
    beat(s, "trainer", 0, busy="update", busy_s=100.0)
    assert s.check() == []
    beat(s, "trainer", 0, busy="update", busy_s=101.0)
    with pytest.raises(WorkerCrashed) as info:
        s.check()
    assert info.value.reason == "busy in 'update' for 101 s, over supervision.busy_timeout_s=100 s"


def test_start_up_is_bounded_by_start_timeout():
    s, launcher, clock = make_supervisor()
    beat(s, "trainer", 0, busy="start-up", busy_s=5.0)
    clock.t += 30.0  # start_timeout_s: not yet
    assert s.check() == []
    for role, index in GRAPH[:3]:  # all but actor 1 have started (their main loops report)
        beat(s, role, index)
    clock.t += 0.5
    (r,) = s.check()  # actor 1 never said anything in 30.5 s
    assert (r.role, r.index, r.reason) == (
        "actor", 1, "did not finish starting within supervision.start_timeout_s=30 s (no message at all)")
    s, launcher, clock = make_supervisor()
    all_beat(s)
    beat(s, "trainer", 0, busy="start-up", busy_s=30.5)  # still building its networks
    clock.t += 30.5
    for role, index in GRAPH[1:]:
        beat(s, role, index)
    with pytest.raises(WorkerCrashed) as info:
        s.check()
    assert info.value.reason == "did not finish starting within supervision.start_timeout_s=30 s"


def test_a_trainer_failure_ends_the_run_with_its_traceback():
    s, launcher, clock = make_supervisor()
    all_beat(s)
    s.workers[("trainer", 0)].handle.code = 1
    s.on_message({"type": "error", "role": "trainer", "index": 0, "attempt": 0, "traceback": "Traceback: nan"})
    with pytest.raises(WorkerCrashed) as info:
        s.check()
    assert (info.value.detail, info.value.reason) == ("Traceback: nan", "raised an exception")


def test_with_trainer_restarts_a_failed_trainer_is_started_again_as_the_next_attempt():
    s, launcher, clock = make_supervisor(trainer_restarts=1)
    all_beat(s)
    s.workers[("trainer", 0)].handle.code = -9
    (r,) = s.check()
    assert (r.role, r.restarts, r.attempt, r.delay_s) == ("trainer", 1, 1, 1.0)
    clock.t += 1.0
    s.check()
    assert launcher.started[-1] == ("trainer", 0, 1)
    beat(s, "trainer", 0, attempt=1)
    s.workers[("trainer", 0)].handle.code = -9
    with pytest.raises(WorkerCrashed) as info:  # the second failure is past trainer_restarts=1
        s.check()
    assert info.value.reason == "killed by SIGKILL (restarted 1 times already: the limit)"


def test_a_restarted_trainer_resumes_and_the_run_config_is_left_alone(tmp_path):
    from zoo.core.config import ExperimentConfig
    from zoo.core.controller import Controller

    c = Controller.__new__(Controller)  # no streams, no processes
    c.cfg, c.spec, c.run_id, c.run_dir = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1"), None, "r", "d"
    c.streams = {}
    assert c.context("trainer", 0, 0).cfg is c.cfg and c.cfg.resume == 0
    assert c.context("trainer", 0, 2).cfg.resume == 2  # the trainer's second restart: resume #2
    assert c.context("actor", 1, 2).cfg.resume == 0 and c.cfg.resume == 0
    c.cfg.resume = 3  # a run continued with zoo resume (its 3rd time), whose trainer then restarts once
    assert c.context("trainer", 0, 1).cfg.resume == 4


def test_actor_exiting_0_early_is_a_failure_and_a_trainer_exiting_0_is_the_end():
    s, launcher, clock = make_supervisor(max_restarts=0)
    all_beat(s)
    s.workers[("trainer", 0)].handle.code = 0
    assert s.check() == [] and s.trainer_finished() is True
    s.workers[("actor", 0)].handle.code = 0
    with pytest.raises(WorkerCrashed) as info:
        s.check()
    assert info.value.reason == "exited before the run ended"


def test_stop_all_stops_everyone_kills_the_deaf_and_waits_for_a_busy_trainer():
    s, launcher, clock = make_supervisor(stop_timeout_s=50.0)
    all_beat(s)
    trainer = s.workers[("trainer", 0)].handle
    told = []
    ticks = iter(range(100))

    def poll(timeout):  # the trainer keeps heartbeating while it finishes, and ends at the 30th poll
        clock.t += 1.0
        beat(s, "trainer", 0, busy="update", busy_s=clock.t - 1000.0)
        if next(ticks) == 29:
            trainer.code = 0

    s.stop_all(poll, told.append)
    assert [h.calls for h in launcher.handles] == [["stop"], ["stop", "kill"], ["stop", "kill"], ["stop", "kill"]]
    assert trainer.code == 0  # finished by itself, never killed
    assert told == [50.0] and launcher.closed


def test_stop_all_waits_for_every_trainer_and_kills_a_silent_one():
    launcher, clock = FakeLauncher(), Clock()
    s = Supervisor(launcher, lambda role, index, attempt: (role, index, attempt),
                   SupervisionConfig(heartbeat_timeout_s=10.0, stop_timeout_s=100.0), clock)
    s.start_all([("trainer", 0), ("trainer", 1), ("actor", 0)])
    for role, index in (("trainer", 0), ("trainer", 1), ("actor", 0)):
        beat(s, role, index)
    rank0, rank1, actor = launcher.handles

    def poll(timeout):  # rank 0 finishes its update at 30 s; rank 1 never reports again (hung)
        clock.t += 1.0
        if clock.t - 1000.0 < 30:
            beat(s, "trainer", 0, busy="update", busy_s=clock.t - 1000.0)
        else:
            rank0.code = 0

    s.stop_all(poll)
    assert rank1.calls == ["stop", "kill"] and rank1.code == -9  # silent for 11 s > 10 s: killed
    assert rank0.calls == ["stop"] and rank0.code == 0  # finished by itself
    assert actor.calls == ["stop", "kill"]


def test_stop_all_kills_a_trainer_past_stop_timeout():
    s, launcher, clock = make_supervisor(stop_timeout_s=20.0)
    all_beat(s)

    def poll(timeout):
        clock.t += 1.0
        beat(s, "trainer", 0, busy="update", busy_s=1.0)

    s.stop_all(poll)
    assert launcher.handles[0].calls == ["stop", "kill"] and launcher.handles[0].code == -9
    assert clock.t == 1000.0 + 22.0  # polled once a second; killed in the pass at 21 s > 20 s (its poll: 22)


def test_supervision_values_are_checked_up_front():
    from zoo.core.config import ConfigError, ExperimentConfig, apply_override, validate
    from zoo.core.plugins import get_registry

    c = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    for override in ("supervision.heartbeat_timeout_s=0", "supervision.start_timeout_s=nan",
                     "supervision.max_restarts=-1", "supervision.restart_backoff_s=40",
                     "supervision.busy_timeout_s=-1"):
        apply_override(c, override)
    with pytest.raises(ConfigError) as info:
        validate(c, get_registry(), check_budget=False)
    assert info.value.problems == [
        "supervision.heartbeat_timeout_s must be finite and > 0, got 0.0",
        "supervision.start_timeout_s must be finite and > 0, got nan",
        "supervision.busy_timeout_s must be finite and >= 0 (0 means no limit), got -1.0",
        "supervision.max_restarts must be >= 0 (0: no restart), got -1",
        "supervision.restart_backoff_max_s=30.0 is below supervision.restart_backoff_s=40.0; "
        "raise it or lower the backoff"]
    assert info.value.field == "supervision.heartbeat_timeout_s"
    c = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    apply_override(c, "supervision.trainer_restarts=1")
    c.trainer.count = 2  # data-parallel trainers (the graph's trainer.count)
    with pytest.raises(ConfigError) as info:
        validate(c, get_registry(), check_budget=False)
    assert info.value.problems == [
        "supervision.trainer_restarts=1 needs a single trainer, but trainer.count=2 (a restarted rank cannot rejoin "
        "its torch.distributed group); set --set supervision.trainer_restarts=0 and resume a stopped run with "
        "zoo resume NAME"]



def test_with_named_policies_the_run_is_finished_when_every_trainable_policys_rank_0_exited_0():
    from tests.unit.fakes import Clock, FakeLauncher

    graph = [("trainer", 0), ("trainer", 1), ("trainer", 2), ("policy", 0), ("actor", 0)]
    s = Supervisor(FakeLauncher(), lambda role, index, attempt: (role, index, attempt),
                   SupervisionConfig(heartbeat_timeout_s=10.0, start_timeout_s=30.0), Clock(),
                   finishers=[("trainer", 0), ("trainer", 1)])  # policy A: trainer 0; policy B: trainers 1, 2
    s.start_all(graph)
    for role, index in graph:
        beat(s, role, index)
    s.workers[("trainer", 0)].handle.code = 0
    assert s.check() == [] and s.trainer_finished() is False  # policy B still trains
    s.workers[("trainer", 2)].handle.code = 0  # a rank that is not B's rank 0: the run is not finished
    assert s.check() == [] and s.trainer_finished() is False
    s.workers[("trainer", 1)].handle.code = 0
    assert s.trainer_finished() is True
