"""The trainer worker's loop end to end (the real ``trainer.run`` in a thread, samples the test
makes): the ``metrics.jsonl`` rows, control messages and checkpoint a short run writes, with
every counter worked out by hand, and a resume that cuts the run's ``end`` row and continues."""
from __future__ import annotations

import dataclasses
import json
import os

from tests.unit.trainer_harness import TrainerThread, fake_host, make_sample, trainer_config
from zoo.core.checkpoint import load_checkpoint

T, ENVS = 16, 2  # a pushed sample: T steps of ENVS envs (32 env steps, one episode); 2 samples make a batch
OVERRIDES = ("sample_length=16", "trainer.batch_samples=4", "algo.epochs=1", "algo.minibatches=1")
RATES = {"mean_env_steps_per_s", "mean_trained_env_steps_per_s"}
COUNTERS = ("policy_version", "updates", "env_steps", "frames", "episodes", "trained_env_steps")


def rows(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def counters(version: int, steps: int, episodes: int, trained: int, frame_skip: int) -> dict:
    return {"policy_version": version, "updates": version, "env_steps": steps, "frames": steps * frame_skip,
            "episodes": episodes, "trained_env_steps": trained}


def test_two_updates_to_the_budget_then_a_resume_that_ends_at_once(tmp_path):
    host = fake_host()
    cfg = dataclasses.replace(trainer_config(host, "ppo", str(tmp_path), 1, OVERRIDES), env_steps=128)
    fs = cfg.spec.frame_skip
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    t = TrainerThread(host, cfg, run_dir)
    for i in range(4):  # samples 0..3, acted at version 0, episodes returning 0, 1, 2, 3
        t.push(*make_sample(i, T, ENVS, 1))
    t.join()  # 128 env steps: the budget is reached after the second update
    assert t.error is None
    got = rows(run_dir)
    assert [r["type"] for r in got] == ["episode", "episode", "update", "episode", "episode", "update", "end"]
    # each episode stamped with the env steps up to the sample that brought it
    assert [r for r in got if r["type"] == "episode"] == [
        {"type": "episode", "env_steps": 32 * (i + 1), "return": float(i), "length": T} for i in range(4)]
    first, second, end = got[2], got[5], got[6]
    # update 1 trains samples 0, 1 at version 0 (lag 0); update 2 samples 2, 3 at version 1 (lag 1)
    fixed = {"dropped_samples": 0, "actor_dropped_samples": 0, "dropped_fraction": 0.0}
    assert {k: first[k] for k in (*COUNTERS, *fixed, "trained_samples", "policy_lag_mean", "policy_lag_max",
                                  "episode_return_mean")} == {
        **counters(1, 64, 2, 64, fs), **fixed, "trained_samples": 4, "policy_lag_mean": 0.0, "policy_lag_max": 0,
        "episode_return_mean": 0.5}
    assert {k: second[k] for k in (*COUNTERS, *fixed, "trained_samples", "policy_lag_mean", "policy_lag_max",
                                   "episode_return_mean")} == {
        **counters(2, 128, 4, 128, fs), **fixed, "trained_samples": 8, "policy_lag_mean": 1.0, "policy_lag_max": 1,
        "episode_return_mean": 1.5}
    assert RATES <= set(second) and "time_s" in second and "approx_kl" in second  # the algorithm's stats
    assert set(end) - RATES == {"type", *COUNTERS, "time_s", *fixed, "trained_samples", "episode_return_mean"}
    assert {k: end[k] for k in (*COUNTERS, "trained_samples", "episode_return_mean")} == {
        **counters(2, 128, 4, 128, fs), "trained_samples": 8, "episode_return_mean": 1.5}

    status = [m for m in t.messages if m.get("type") == "status"]
    done = [m for m in t.messages if m.get("type") == "done"]
    assert len(done) == 1 and t.messages.index(done[0]) > t.messages.index(status[-1])
    assert {k: status[-1][k] for k in (*COUNTERS, "budget_env_steps", "episode_return_mean", "policy_lag_mean",
                                       "policy_lag_max", "trained_samples", "dropped_fraction")} == {
        **counters(2, 128, 4, 128, fs), "budget_env_steps": 128, "episode_return_mean": 1.5, "policy_lag_mean": 1.0,
        "policy_lag_max": 1, "trained_samples": 8, "dropped_fraction": 0.0}
    assert "nonfinite_updates" not in status[-1]  # only once there is something to show
    assert {k: done[0][k] for k in (*COUNTERS, *fixed, "trained_samples")} == {
        **counters(2, 128, 4, 128, fs), **fixed, "trained_samples": 8}

    ckpt = load_checkpoint(os.path.join(run_dir, "checkpoints", "latest.pt"))
    assert set(ckpt) == {"format", "algorithm", *COUNTERS, "resumes", "trainer"}
    assert {k: ckpt[k] for k in COUNTERS} == counters(2, 128, 4, 128, fs) and ckpt["resumes"] == 0
    assert set(ckpt["trainer"]) == {"dropped_samples", "actor_dropped_samples", "trained_samples", "pending_share",
                                    "nonfinite_updates", "nonfinite_streak", "time_s", "metrics_bytes", "recent",
                                    "recent_stats", "pending", "origins", "pending_slots", "rng",
                                    "rate_limit_waits", "rate_limit_wait_s", "rate_limit_held_s"}
    # counted for every algorithm, shown only for rate-limited (replay) ones: not in PPO's update rows
    assert "rate_limit_waits" not in first and "rate_limit_waits" not in second
    assert ckpt["trainer"]["recent"] == [0.0, 1.0, 2.0, 3.0] and ckpt["trainer"]["pending"] == []
    size_before_end = os.path.getsize(os.path.join(run_dir, "metrics.jsonl")) - len(json.dumps(end)) - 1
    assert ckpt["trainer"]["metrics_bytes"] == size_before_end  # the final checkpoint comes before the end row

    t = TrainerThread(host, cfg, run_dir, resume=1)  # the budget is reached already: it ends at once
    t.join()
    assert t.error is None
    again = rows(run_dir)
    # the first segment's end row is cut (written after its checkpoint); a resume row, then a new end row
    assert [r["type"] for r in again] == ["episode", "episode", "update", "episode", "episode", "update", "resume",
                                          "end"]
    assert again[:6] == got[:6]
    assert {k: again[6][k] for k in ("type", "resume", "attempt", *COUNTERS)} == {
        "type": "resume", "resume": 1, "attempt": 0, **counters(2, 128, 4, 128, fs)}
    assert {k: again[7][k] for k in (*COUNTERS, "trained_samples", "episode_return_mean")} == {
        **counters(2, 128, 4, 128, fs), "trained_samples": 8, "episode_return_mean": 1.5}
    assert [m["type"] for m in t.messages if m.get("type") in ("status", "done")][-2:] == ["status", "done"]
    assert load_checkpoint(os.path.join(run_dir, "checkpoints", "latest.pt"))["resumes"] == 1


def test_a_batch_that_completes_past_the_budget_is_trained_even_when_its_samples_come_one_by_one(tmp_path):
    # Before: the budget was judged on the running count, so the third sample (96 of 80 env steps)
    # ended the run before the fourth completed the second batch: 1 update when the samples came
    # one by one, 2 when they came together (a named policy's test counted 2 or 3 updates by timing).
    host = fake_host()
    cfg = dataclasses.replace(trainer_config(host, "ppo", str(tmp_path), 1, OVERRIDES), env_steps=80)
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    t = TrainerThread(host, cfg, run_dir)
    t.push(*make_sample(0, T, ENVS, 1))
    t.push(*make_sample(1, T, ENVS, 1))
    t.wait_status(updates=1, env_steps=64)
    t.push(*make_sample(2, T, ENVS, 1))
    t.wait_status(updates=1, env_steps=96)  # counted past the budget, half a batch waiting
    t.push(*make_sample(3, T, ENVS, 1))
    t.join()
    assert t.error is None
    got = rows(run_dir)
    assert [(r["type"], r["env_steps"]) for r in got if r["type"] != "episode"] == [
        ("update", 64), ("update", 128), ("end", 128)]  # ceil(80 / 64) = 2 updates


def test_a_rate_limited_algorithm_s_rows_and_status_carry_its_waits_and_replay_counters(tmp_path):
    """apex-dqn: each batch is pushed only after the trainer has asked for it (a status from an
    empty receive shows it asked), so the learner waited for both: rate_limit_waits 1, then 2. The
    status carries the algorithm's counters: update 1 inserts 64 transitions into the empty replay
    (credit 3 x 64 = 192, no step), update 2 64 more (credit 384: 48 gradient steps of 8)."""
    host = fake_host()
    cfg = trainer_config(host, "apex-dqn", str(tmp_path), 1, (
        "sample_length=16", "trainer.batch_samples=4", "algo.batch_size=8", "algo.samples_per_insert=3",
        "algo.capacity=100", "algo.learning_starts=40"))
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    t = TrainerThread(host, cfg, run_dir)
    try:
        t.wait_status(updates=0)  # sent after an empty receive: the trainer is asking for batch 1
        for i in range(2):
            t.push(*make_sample(i, T, ENVS, 1))
        t.wait_status(updates=1)  # after update 1 ...
        t.wait_status(updates=1)  # ... and after the next empty receive: asking for batch 2
        for i in range(2, 4):
            t.push(*make_sample(i, T, ENVS, 1))
        status = t.wait_status(updates=2)
    finally:
        t.stop()
    assert t.error is None
    assert {k: status[k] for k in ("gradient_steps", "replayed", "inserted", "rate_limit_waits")} == {
        "gradient_steps": 48, "replayed": 384, "inserted": 128, "rate_limit_waits": 2}
    first, second = [r for r in rows(run_dir) if r["type"] == "update"]
    assert (first["rate_limit_waits"], second["rate_limit_waits"]) == (1, 2)
    assert (first["gradient_steps"], second["gradient_steps"]) == (0.0, 48.0)
    # waits are sums of seconds: each batch came after the ask (at least one empty receive of 0.5 s)
    assert second["rate_limit_wait_s"] > first["rate_limit_wait_s"] > 0
    assert second["rate_limit_held_s"] >= first["rate_limit_held_s"] >= 0
