"""The trainer's receive path (one batch ahead, exact counts), the trained-env-steps counter,
the dropped fraction, the per-role thread plan, and how they are shown."""
from __future__ import annotations

import collections
import json
import os
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from zoo.core.workers.receiver import SampleReceiver, batch_env_steps, fresh_share, merge_shares, sample_env_steps
from zoo.core.workers.threads import thread_plan, thread_problems
from zoo.core.workers.trainer import collate, sample_origin
from zoo.display import format_status_line, format_summary
from tests.unit.trainer_harness import TrainerThread, fake_host, make_sample, trainer_config

WAIT_S = 30.0


class FakePuller:
    """A sample puller over a list of ``(sample, meta)``; counts the messages handed out."""

    def __init__(self, messages) -> None:
        self.messages = collections.deque(messages)
        self.handed = 0
        self.closed = False
        self.lock = threading.Lock()

    def recv(self, timeout: float):
        with self.lock:
            if self.messages:
                self.handed += 1
                return self.messages.popleft()
        time.sleep(min(timeout, 0.01))
        return None

    def close(self) -> None:
        self.closed = True


def wait_until(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def receiver(messages, batch_samples=4, max_policy_lag=1, version=0) -> tuple[SampleReceiver, FakePuller]:
    puller = FakePuller(messages)
    r = SampleReceiver(puller, batch_samples, max_policy_lag, 1, collate, lambda m, s: sample_origin(m, s, 1),
                       version=version)
    return r, puller


# ----------------------------------------------------------------------------- receiver
def test_the_receiver_holds_one_batch_ahead_and_then_stops_pulling():
    # samples of T = 8 steps x 2 envs (16 env steps, 2 agent-slots); a batch is 4 agent-slots = 2 messages
    messages = [make_sample(i, 8, 2, 1) for i in range(7)]
    r, puller = receiver(messages)
    r.start()
    try:
        wait_until(lambda: r.ready is not None, "the first batch")
        # the batch is complete after the 2nd message and nothing more is pulled while it waits
        # (the thread checks for a waiting batch before every pull): the actors are held back
        assert puller.handed == 2 and len(puller.messages) == 5
        ready, share = r.take(WAIT_S)
        batch, used, origins = ready[:3]
        assert batch["reward"].shape == (8, 4) and len(used) == 2
        # 2 messages x 16 env steps; one episode each (make_sample), stamped at 16 and 32 env steps
        assert share["env_steps"] == 32 and share["episode_at"] == [16, 32] and share["dropped"] == 0
        assert batch_env_steps(used, origins, 1) == 32
        wait_until(lambda: r.ready is not None, "the second batch")  # taking it let the thread pull on
        assert puller.handed == 4
    finally:
        r.close()
    assert puller.closed


def test_the_receiver_stamps_when_each_batch_was_complete(monkeypatch):
    """``last_ready_at``: the receiver's clock when the batch handed out was complete (the
    rate limiter's waits are measured from it, zoo.core.workers.accounting)."""
    from zoo.core.workers import receiver as receiver_mod

    clock = [5.0]
    monkeypatch.setattr(receiver_mod, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    r, _ = receiver([make_sample(i, 8, 2, 1) for i in range(4)])  # two batches of 2 messages
    r.start()
    try:
        wait_until(lambda: r.ready is not None, "the first batch")
        clock[0] = 7.5  # the second batch is completed after this, once the first is taken
        ready, _ = r.take(WAIT_S)
        assert ready is not None and r.last_ready_at == 5.0
        wait_until(lambda: r.ready is not None, "the second batch")
        ready, _ = r.take(WAIT_S)
        assert ready is not None and r.last_ready_at == 7.5
    finally:
        r.close()


def test_the_receiver_judges_staleness_at_the_version_the_batch_will_be_trained_at():
    # trainer at version 5, an update running: the batch being filled is trained at version 6.
    # max_policy_lag = 1: a sample of version 4 lags 6 - 4 = 2 > 1 (dropped), version 5 lags 1 (kept)
    old = make_sample(0, 8, 2, 1, version=4)
    new = [make_sample(i, 8, 2, 1, version=5) for i in (1, 2)]
    r, _ = receiver([old, *new], version=5)
    r.set_version(5, updating=True)
    r.start()
    try:
        ready, share = r.take(WAIT_S)
        assert ready is not None and [int(s["policy_version"][0, 0]) for s in ready[1]] == [5, 5]
        # counts: all 3 messages' env steps, the old one's 2 agent-slots dropped
        assert (share["env_steps"], share["dropped"]) == (48, 2)
    finally:
        r.close()
    # not updating: trained at version 5 itself, where version 4 lags 1 and is kept
    r, _ = receiver([make_sample(0, 8, 2, 1, version=4), make_sample(1, 8, 2, 1, version=4)], version=5)
    r.start()
    try:
        ready, share = r.take(WAIT_S)
        assert ready is not None and share["dropped"] == 0
    finally:
        r.close()


def test_a_sample_pulled_right_after_the_hand_over_is_judged_at_the_next_version():
    # The race CI hit (IMPALA, max_policy_lag 2, a batch with lag 3): the trainer took a batch and
    # only then said an update was running; a sample pulled in between was judged one version too
    # young. take(updating=True) sets it in the hand-over itself. Trainer at version 5, lag limit
    # 1: batch 1 = two version-5 samples; the version-4 sample after it is trained (after this
    # update) at version 6, lag 2 > 1: dropped (2 agent-slots), and batch 2 is the two version-5 ones.
    first = [make_sample(i, 8, 2, 1, version=5) for i in (0, 1)]
    rest = [make_sample(2, 8, 2, 1, version=4)] + [make_sample(i, 8, 2, 1, version=5) for i in (3, 4)]
    r, puller = receiver(first + rest, version=5)
    r.start()
    try:
        ready, share = r.take(WAIT_S, updating=True)  # no set_version call: the hand-over alone
        assert ready is not None and share["dropped"] == 0
        ready, share = r.take(WAIT_S, updating=True)
        assert ready is not None and [int(s["policy_version"][0, 0]) for s in ready[1]] == [5, 5]
        assert (share["env_steps"], share["dropped"]) == (48, 2) and puller.handed == 5
    finally:
        r.close()


def test_a_snapshot_holds_every_sample_not_trained_on_with_its_uncounted_steps():
    messages = [make_sample(i, 8, 2, 1) for i in range(3)]
    r, _ = receiver(messages)
    r.start()
    try:
        wait_until(lambda: r.ready is not None, "a batch")
        samples, origins, share = r.snapshot()
        assert len(samples) == 2 and share["env_steps"] == 32 and share["episode_at"] == [16, 32]
        r.take(WAIT_S)
        wait_until(lambda: r.puller.handed == 3, "the third message")
        wait_until(lambda: len(r.pending) == 1, "the third message to be pending")
        samples, origins, share = r.snapshot()
        assert len(samples) == 1 and share["env_steps"] == 16
    finally:
        r.close()
    # a receiver started from it counts those steps once, with the batch they complete
    rest = [make_sample(9, 8, 2, 1)]
    r2, _ = receiver(rest)
    r2 = SampleReceiver(r2.puller, 4, 1, 1, collate, lambda m, s: sample_origin(m, s, 1),
                        pending=samples, origins=origins, share=share).start()
    try:
        ready, share = r2.take(WAIT_S)
        assert ready is not None and share["env_steps"] == 32 and share["episode_at"] == [16, 32]
    finally:
        r2.close()


def test_shares_merge_in_order_and_env_steps_count_envs_not_agents():
    a = {**fresh_share(), "env_steps": 10, "episodes": [{"return": 1.0}], "episode_at": [10], "dropped": 2}
    b = {**fresh_share(), "env_steps": 5, "episodes": [{"return": 2.0}], "episode_at": [3], "actor_dropped": 4}
    m = merge_shares(a, b)
    assert m == {"env_steps": 15, "episodes": [{"return": 1.0}, {"return": 2.0}], "episode_at": [10, 13],
                 "dropped": 2, "actor_dropped": 4}
    # T = 32 steps of 2 envs x 3 agents = 6 columns: 32 x 6 / 3 = 64 env steps (192 agent steps)
    assert sample_env_steps({"reward": np.zeros((32, 6))}, 3) == 64


# ----------------------------------------------------------------------------- the trainer's counters
def test_trained_env_steps_is_the_sum_of_the_samples_the_trainer_used(tmp_path):
    host = fake_host()
    # T = 16, samples of 2 envs (32 env steps, 2 agent-slots); a batch of 4 agent-slots = 2 samples;
    # max_policy_lag = 0: only samples of the trainer's own version are used
    cfg = trainer_config(host, "ppo", str(tmp_path), 1, ("sample_length=16", "trainer.batch_samples=4",
                                                         "algo.epochs=1", "algo.minibatches=1",
                                                         "trainer.max_policy_lag=0"))
    run = str(tmp_path / "run")
    os.makedirs(run)
    t = TrainerThread(host, cfg, run)
    try:
        for i in (0, 1):  # version 0: update 1 -> version 1
            t.push(*make_sample(i, 16, 2, 1, version=0))
        t.wait_status(updates=1)
        t.push(*make_sample(2, 16, 2, 1, version=0))  # lags 1 > 0 whenever it arrives: dropped
        for i in (3, 4):  # version 1: update 2
            t.push(*make_sample(i, 16, 2, 1, version=1))
        last = t.wait_status(updates=2, env_steps=160)
    finally:
        t.stop()
    assert t.error is None
    # used: samples 0, 1, 3, 4 = 4 x 32 = 128 env steps, 8 agent-slots; received 5 x 32 = 160;
    # dropped 2 agent-slots: 2 / (2 + 8) = 0.2
    assert (last["trained_env_steps"], last["trained_samples"], last["dropped_samples"]) == (128, 8, 2)
    assert last["dropped_fraction"] == pytest.approx(0.2)
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    assert [r["trained_env_steps"] for r in rows if r["type"] == "update"] == [64, 128]
    end = [r for r in rows if r["type"] == "end"][0]
    assert (end["env_steps"], end["trained_env_steps"], end["dropped_samples"]) == (160, 128, 2)
    import torch

    ckpt = torch.load(os.path.join(run, "checkpoints", "latest.pt"), weights_only=False)
    assert ckpt["trained_env_steps"] == 128 and ckpt["trainer"]["trained_samples"] == 8  # a resume keeps them


# ----------------------------------------------------------------------------- threads per role
def cfg_of(actors=2, policies=1, policy_threads=1, trainers=1, trainer_threads=0, inline=False, images=False,
           algo="ppo"):
    from gymnasium import spaces

    obs = ({"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)} if images else {"obs": spaces.Box(-1, 1, (4,))})
    obs["zoo:action_mask"] = spaces.Box(0, 1, (6,), np.int8)  # Zoo's own keys never count as images
    return SimpleNamespace(algo_name=algo, actors=SimpleNamespace(count=actors),
                           policy=SimpleNamespace(count=policies, threads=policy_threads, inline=inline),
                           trainer=SimpleNamespace(count=trainers, threads=trainer_threads),
                           spec=SimpleNamespace(observation_space=obs))


def test_a_convolutional_trainer_shares_every_core():
    p = thread_plan(cfg_of(images=True), cores=16)  # 1 trainer: all 16 cores (held-back actors leave theirs)
    assert (p.trainer, p.images, p.trainer_auto) == (16, True, True)
    assert thread_plan(cfg_of(images=True), cores=2).trainer == 2
    # 2 trainers on 16 cores: 16 // 2 = 8 each; 3 trainers on 2 cores: 2 // 3 = 0, so at least 1
    assert thread_plan(cfg_of(actors=4, policies=2, policy_threads=2, trainers=2, images=True), cores=16).trainer == 8
    assert thread_plan(cfg_of(actors=3, trainers=3, images=True), cores=2).trainer == 1
    assert thread_plan(cfg_of(images=True), cores=16).describe() == (
        "threads on 16 cores: 2 actors x 1 + 1 policy worker x 1 + 1 trainer x 16 (every core for a convolutional "
        "network: held-back actors leave theirs; --set trainer.threads=N sets it)")


def test_an_mlp_trainer_gets_the_cores_the_actors_and_policy_workers_leave():
    p = thread_plan(cfg_of(), cores=16)  # 16 - 2 actors - 1 policy thread = 13
    assert (p.trainer, p.images, p.trainer_auto) == (13, False, True)
    assert thread_plan(cfg_of(), cores=2).trainer == 1  # 2 - 2 - 1 < 1: at least 1
    # 4 actors, 2 policy workers x 2 threads, 2 trainers on 16 cores: (16 - 4 - 4) // 2 = 4 each
    assert thread_plan(cfg_of(actors=4, policies=2, policy_threads=2, trainers=2), cores=16).trainer == 4
    assert thread_plan(cfg_of(inline=True), cores=16).trainer == 14  # no policy worker: 16 - 2 x 1
    # inline actors of 3 threads each: 16 - 2 x 3 = 10
    assert thread_plan(cfg_of(inline=True, policy_threads=3), cores=16).trainer == 10
    p = thread_plan(cfg_of(trainer_threads=3, images=True), cores=16)  # explicit wins either way
    assert (p.trainer, p.trainer_auto) == (3, False)
    assert thread_plan(cfg_of(), cores=16).describe() == (
        "threads on 16 cores: 2 actors x 1 + 1 policy worker x 1 + 1 trainer x 13 (the cores the others leave, "
        "at least 1; --set trainer.threads=N sets it)")
    assert thread_plan(cfg_of(trainers=2, inline=True), cores=16).describe() == (
        "threads on 16 cores: 2 actors x 1 + no policy worker (policy.inline) + 2 trainers x 7 each (the cores the "
        "others leave, at least 1; --set trainer.threads=N sets it)")


def test_a_rate_limited_learner_shares_every_core_whatever_its_network():
    for algo in ("sac", "apex-dqn", "r2d2"):  # rate_limited = True: the actors wait for the granted steps
        p = thread_plan(cfg_of(algo=algo), cores=16)
        assert (p.trainer, p.replay, p.images, p.trainer_auto) == (16, True, False, True)
        assert thread_plan(cfg_of(algo=algo), cores=2).trainer == 2  # was 1: 2 - 2 actors - 1 policy thread < 1
    assert thread_plan(cfg_of(algo="sac", trainers=3), cores=16).trainer == 5  # 16 // 3
    assert thread_plan(cfg_of(algo="sac", trainer_threads=1), cores=16).trainer == 1  # explicit wins
    for algo in ("ppo", "impala", "no-such-algorithm"):  # not rate-limited, or unknown (refused elsewhere)
        p = thread_plan(cfg_of(algo=algo), cores=16)
        assert (p.trainer, p.replay) == (13, False)
    assert thread_plan(cfg_of(algo="sac"), cores=16).describe() == (
        "threads on 16 cores: 2 actors x 1 + 1 policy worker x 1 + 1 trainer x 16 (every core for a rate-limited "
        "(replay) learner: held-back actors leave theirs; --set trainer.threads=N sets it)")


def test_explicit_thread_counts_above_the_cores_are_refused():
    assert thread_problems(cfg_of(trainer_threads=16, policy_threads=2), cores=16) == []
    (field, message), = thread_problems(cfg_of(trainer_threads=17), cores=16)
    assert field == "trainer.threads" and message.startswith(
        "trainer.threads=17 is more than the 16 CPU cores of this machine")
    (field, _), = thread_problems(cfg_of(policy_threads=3), cores=2)
    assert field == "policy.threads"


def test_build_config_refuses_more_trainer_threads_than_cores():
    from zoo.core.config import ConfigError, build_config
    from zoo.core.workers.threads import machine_cores

    n = machine_cores() + 1
    with pytest.raises(ConfigError) as err:
        build_config(fake_host().registry, "ppo", "CartPole-v1", overrides=[f"trainer.threads={n}"])
    assert err.value.field == "trainer.threads" and f"trainer.threads={n} is more than" in str(err.value)


# ----------------------------------------------------------------------------- how they are shown
STATUS = {"env_steps": 12_800, "trained_env_steps": 12_288, "frames": 12_800, "env_steps_per_s": 2100.4,
          "trained_env_steps_per_s": 2010.0, "policy_lag_mean": 0.43, "policy_lag_max": 1,
          "dropped_samples": 3, "actor_dropped_samples": 5, "dropped_fraction": 0.0123, "trained_samples": 640,
          "updates": 50}


def test_the_status_line_shows_trained_env_steps_and_the_dropped_fraction():
    # dropped = 3 at the trainer + 5 at the actors; 0.0123 -> 1.2%
    assert format_status_line(STATUS) == (
        "env_steps=12,800 trained=12,288 frames=12,800 env_steps/s=2,100 trained/s=2,010 lag=0.4/1 "
        "dropped=8 (1.2%) updates=50")


def test_the_done_line_rates_are_over_the_duration_it_shows():
    # Before: the trainer's own rates over its own time (1,043 and 1,021) beside the controller's
    # wall time, so steps / time on the line did not give the rate on it.
    status = {**STATUS, "mean_env_steps_per_s": 1043.4, "mean_trained_env_steps_per_s": 1020.6}
    assert format_summary(status, 160.0, "runs/r") == (  # 12,800 / 160 = 80; 12,288 / 160 = 76.8
        "done: 12,800 env steps (12,800 frames) in 2m40s, 80 env steps/s, 77 trained env steps/s, "
        "1.2% dropped; run dir runs/r: metrics.jsonl, tensorboard/, checkpoints/latest.pt")


def test_the_done_line_of_a_resumed_run_gives_this_segments_steps_time_and_rates():
    # Resumed from a checkpoint at 4,800 env steps (4,288 trained): this segment added 8,000 in 100 s.
    # Before: all 12,800 env steps were divided by this segment's time.
    start = {"env_steps": 4_800, "trained_env_steps": 4_288, "resume": 2}
    assert format_summary(STATUS, 100.0, "runs/r", start) == (
        "done: 12,800 env steps (12,800 frames); resume #2: 8,000 env steps in 1m40s, 80 env steps/s, "
        "80 trained env steps/s, 1.2% dropped; run dir runs/r: metrics.jsonl, tensorboard/, checkpoints/latest.pt")


def test_the_pacer_adds_the_trained_rate():
    from zoo.core.controller import StatusPacer

    pacer = StatusPacer(interval_s=5.0, frame_skip=1)
    pacer.offer({"env_steps": 1000, "trained_env_steps": 768})
    pacer.due(10.0)
    pacer.offer({"env_steps": 3000, "trained_env_steps": 2816})
    # (3000 - 1000) / 20 s = 100 env steps/s; (2816 - 768) / 20 s = 102.4 trained env steps/s
    assert pacer.due(30.0) == {"env_steps": 3000, "trained_env_steps": 2816, "env_steps_per_s": 100.0,
                               "frames_per_s": 100.0, "trained_env_steps_per_s": 102.4}


def test_busy_cores_from_two_reads_of_proc_stat():
    from zoo.core.workers.threads import busy_cores, cpu_times

    # fields: user nice system idle iowait irq softirq steal guest guest_nice
    first = ("cpu  110 0 60 1830 0 0 0 0 0 0\n"
             "cpu0 100 0 50 850 0 0 0 0 0 0\n"
             "cpu1 10 0 10 980 0 0 0 0 0 0\n"
             "cpu2 500 0 0 500 0 0 0 0 0 0\n"
             "intr 12345\n")
    second = ("cpu  330 0 110 1960 100 0 0 20 0 0\n"
              "cpu0 200 0 100 880 0 0 0 20 0 0\n"  # busy 150 -> 320 (steal counts), total 1000 -> 1200
              "cpu1 10 0 10 1080 100 0 0 0 0 0\n"  # busy 20 -> 20 (iowait is idle), total 1000 -> 1200
              "cpu2 700 0 0 500 0 0 0 0 0 0\n"     # not in the CPU set below
              "intr 23456\n")
    assert cpu_times(first, {0, 1}) == (170, 2000, 2)
    assert cpu_times(second, {0, 1}) == (340, 2400, 2)
    assert cpu_times(second) == (1040, 3600, 3)  # every CPU line, never the summary line "cpu"
    reads, waited = iter([first, second]), []
    # CPUs 0 and 1: 2 x (340 - 170) / (2400 - 2000) = 0.85 cores busy
    assert busy_cores(0.5, read=lambda: next(reads), wait=waited.append, cpus={0, 1}) == 0.85
    assert waited == [0.5]
    reads = iter([first, first])  # no tick passed
    assert busy_cores(read=lambda: next(reads), wait=lambda s: None, cpus={0, 1}) is None
    reads = iter([first, second])  # none of the CPUs listed
    assert busy_cores(read=lambda: next(reads), wait=lambda s: None, cpus={7}) is None

    def unreadable():
        raise OSError("no /proc here")

    assert busy_cores(read=unreadable, wait=lambda s: None) is None


def test_the_busy_machine_hint_speaks_only_for_a_trainer_of_several_chosen_threads():
    plan = thread_plan(cfg_of(algo="sac"), cores=2)  # a rate-limited learner: 2 threads on 2 cores
    assert plan.busy_hint(0.85) == (
        "busy machine: 0.85 of 2 cores were busy with other processes as this run started; a trainer's 2 threads "
        "wait for each other's time slices beside such work (a replay or convolutional learner can run many times "
        "slower); --set trainer.threads=1 if that work goes on")
    assert plan.busy_hint(0.49) is None  # below BUSY_HINT_CORES = 0.5
    assert plan.busy_hint(None) is None  # not measured
    assert thread_plan(cfg_of(), cores=2).busy_hint(2.0) is None  # an MLP's 1 thread on 2 cores
    assert thread_plan(cfg_of(algo="sac", trainer_threads=2), cores=2).busy_hint(2.0) is None  # set by the user
