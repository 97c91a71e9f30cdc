"""Exact resume of the trainer: a run stopped (or crashed) and resumed from its checkpoint
ends with the same weights, optimiser state, counters and metrics rows as the same run
left alone, bit for bit (the trainer is fed the same fixed samples in both cases)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.unit.fakes import assert_same_state
from tests.unit.trainer_harness import TrainerThread, fake_host, make_sample, trainer_config
from zoo.core.checkpoint import load_checkpoint

# Per algorithm: agents per env, and overrides making updates small (2 samples of 2 envs per batch).
CASES = {
    "ppo": (1, ("sample_length=16", "trainer.batch_samples=4", "algo.epochs=2", "algo.minibatches=2")),
    "impala": (1, ("sample_length=16", "trainer.batch_samples=4")),
    "mappo": (2, ("sample_length=16", "trainer.batch_samples=8", "algo.epochs=2", "algo.minibatches=2",
                  "algo.max_reuse=2")),
    # the replay (40 transitions: it wraps), its priorities and the rate limiter's credit are in the checkpoint
    "apex-dqn": (1, ("sample_length=16", "trainer.batch_samples=4", "algo.batch_size=8", "algo.samples_per_insert=3",
                     "algo.capacity=100", "algo.learning_starts=40", "algo.target_period=5")),
    # the same for SAC on Box actions: replay, three optimisers, log alpha, both RNGs, the warm-up flag
    "sac": (1, ("env.box_actions=true", "sample_length=16", "trainer.batch_samples=4", "algo.batch_size=8",
                "algo.samples_per_insert=3", "algo.capacity=100", "algo.learning_starts=40", "algo.hidden=16")),
    # sequences of 8 every 4 (3 per column, 12 per batch) into a 20-sequence replay (it wraps), with their states
    "r2d2": (1, ("sample_length=16", "trainer.batch_samples=4", "algo.sequence_length=8", "algo.burn_in=2",
                 "algo.hidden=8", "algo.lstm=8", "algo.batch_size=4", "algo.samples_per_insert=2",
                 "algo.capacity=20", "algo.learning_starts=8", "algo.target_period=5")),
}
BOX_ACTIONS = {"sac"}
T = 16
ENVS = 2  # envs per sample: a sample has ENVS x agents columns; 2 samples make a batch


def feed(trainer: TrainerThread, indices, agents: int, algo: str = "") -> None:
    for i in indices:
        sample, meta = make_sample(i, T, ENVS * agents, agents, box_actions=algo in BOX_ACTIONS)
        if algo == "r2d2":  # the recurrent state the policy worker fed at each step (LSTM of 8: h and c)
            sample["rnn_state"] = np.random.default_rng(1000 + i).normal(size=(T, ENVS * agents, 2, 8)).astype(
                np.float32)
        trainer.push(sample, meta)


def env_steps(n_samples: int) -> int:
    return n_samples * T * ENVS  # each sample: T steps of ENVS envs


def rows(run_dir) -> list[dict]:
    """metrics.jsonl without ``resume`` rows and without wall-clock times, rates and the rate
    limiter's waits (timings of when the test pushed)."""
    out = []
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        row = json.loads(line)
        for key in ("time_s", "mean_env_steps_per_s", "mean_trained_env_steps_per_s", "rate_limit_waits",
                    "rate_limit_wait_s", "rate_limit_held_s"):
            row.pop(key, None)
        if row["type"] != "resume":
            out.append(row)
    return out


def compare_final(straight_dir, resumed_dir) -> None:
    one = load_checkpoint(os.path.join(straight_dir, "checkpoints", "latest.pt"))
    two = load_checkpoint(os.path.join(resumed_dir, "checkpoints", "latest.pt"))
    assert_same_state(one["algorithm"], two["algorithm"], "algorithm")
    for key in ("policy_version", "updates", "env_steps", "frames", "episodes", "trained_env_steps"):
        assert one[key] == two[key], key
    t1, t2 = one["trainer"], two["trainer"]
    for key in ("dropped_samples", "actor_dropped_samples", "trained_samples", "nonfinite_updates", "recent",
                "pending_slots", "pending_share", "rng"):
        assert_same_state(t1[key], t2[key], key)
    assert rows(straight_dir) == rows(resumed_dir)


@pytest.mark.parametrize("algo", ["ppo", "impala", "mappo", "apex-dqn", "sac", "r2d2"])
def test_a_stopped_and_resumed_run_ends_bit_for_bit_like_the_uninterrupted_one(tmp_path, algo):
    agents, overrides = CASES[algo]
    host = fake_host()
    # 12 samples = 6 updates of 2 samples; the stopped run stops after 3 updates and one more
    # sample (kept in the checkpoint as received but not trained on), then resumes with the rest.
    straight = trainer_config(host, algo, str(tmp_path / "a"), agents, overrides)
    run_a = str(tmp_path / "a" / "run")
    os.makedirs(run_a)
    t = TrainerThread(host, straight, run_a)
    feed(t, range(12), agents, algo)
    t.wait_status(updates=6, env_steps=env_steps(12))
    t.stop()
    assert t.error is None

    resumed = trainer_config(host, algo, str(tmp_path / "b"), agents, overrides)
    run_b = str(tmp_path / "b" / "run")
    os.makedirs(run_b)
    t = TrainerThread(host, resumed, run_b)
    feed(t, range(7), agents, algo)
    t.wait_status(updates=3, env_steps=env_steps(7))
    t.stop()
    assert t.error is None
    first = load_checkpoint(os.path.join(run_b, "checkpoints", "latest.pt"))
    # apex-dqn and r2d2 take no gradient step at update 1 (empty replay): it keeps version 0 (sac's update 1
    # clears its warm-up flag, a change of the policy: version 1)
    version = 2 if algo in ("apex-dqn", "r2d2") else 3
    assert (first["policy_version"], first["updates"], first["env_steps"]) == (version, 3, env_steps(7))
    assert first["trainer"]["pending_slots"] == ENVS * agents  # sample 6, not yet trained on
    assert [r["type"] for r in rows(run_b)][-1] == "end"

    t = TrainerThread(host, resumed, run_b, resume=1)
    feed(t, range(7, 12), agents, algo)
    t.wait_status(updates=6, env_steps=env_steps(12))
    t.stop()
    assert t.error is None
    compare_final(run_a, run_b)
    kinds = [json.loads(line)["type"] for line in open(os.path.join(run_b, "metrics.jsonl"))]
    # one `end` row (the stopped segment's was cut), the resume row right after update 3's row
    assert kinds.count("end") == 1 and kinds[-1] == "end"
    assert kinds.count("resume") == 1 and kinds.index("resume") == kinds.index("episode", kinds.index("resume") - 1) + 1
    if algo == "ppo":  # the learning rate (annealed over the budget) and Adam's step count continue too
        ckpt = load_checkpoint(os.path.join(run_b, "checkpoints", "latest.pt"))
        # 6 updates x 2 epochs x 2 minibatches = 24 Adam steps
        assert all(float(s["step"]) == 24.0 for s in ckpt["algorithm"]["optimizer"]["state"].values())
    if algo == "mappo":  # max_reuse=2: the last batch is kept for one more update, in the checkpoint
        ckpt = load_checkpoint(os.path.join(run_b, "checkpoints", "latest.pt"))
        assert [e["uses"] for e in ckpt["algorithm"]["buffer"]] == [1]
    if algo == "apex-dqn":  # 6 updates of 64 transitions into a 100-transition replay, credit 3 x 64 each
        ckpt = load_checkpoint(os.path.join(run_b, "checkpoints", "latest.pt"))
        state = ckpt["algorithm"]
        # steps of 8: none at update 1 (empty replay; its credit carries), 48 at update 2, then 24 each
        assert state["replay"]["trans_written"] == 384 and state["gradient_steps"] == 48 + 4 * 24
        # full: the observation ring holds 264 rows (two batches of 4 columns x 33), so only the transition
        # ring evicts
        assert state["credit"] == 0.0 and state["replay"]["n_valid"] == 100
        assert state["replay"]["obs_capacity"] == 264
    if algo == "r2d2":  # 6 updates of 12 sequences into a 20-sequence replay, credit 2 x 12 each, steps of 4
        state = load_checkpoint(os.path.join(run_b, "checkpoints", "latest.pt"))["algorithm"]
        # none at update 1 (empty replay; its credit carries), 12 at update 2, then 6 each
        assert state["replay"]["written"] == 72 and state["gradient_steps"] == 12 + 4 * 6
        assert state["credit"] == 0.0 and state["replay"]["n_valid"] == 20


def test_a_crashed_run_resumes_from_its_last_checkpoint_without_duplicated_rows(tmp_path):
    host = fake_host()
    agents, overrides = CASES["ppo"]
    overrides = (*overrides, "trainer.checkpoint_interval=2")
    straight = trainer_config(host, "ppo", str(tmp_path / "a"), agents, overrides)
    run_a = str(tmp_path / "a" / "run")
    os.makedirs(run_a)
    t = TrainerThread(host, straight, run_a)
    feed(t, range(12), agents)
    t.wait_status(updates=6, env_steps=env_steps(12))
    t.stop()

    run_b = str(tmp_path / "b" / "run")
    os.makedirs(run_b)
    t = TrainerThread(host, trainer_config(host, "ppo", str(tmp_path / "b"), agents, overrides), run_b)
    feed(t, range(6), agents)
    t.wait_status(updates=3, env_steps=env_steps(6))
    t.push(*make_sample(99, T, ENVS * agents, agents)[:1], {"actor": 0})  # no env_steps: the trainer raises
    t.join()
    assert isinstance(t.error, KeyError)
    # update 3's row is on disk, past the checkpoint of update 2
    assert [r["updates"] for r in rows(run_b) if r["type"] == "update"] == [1, 2, 3]
    ckpt = load_checkpoint(os.path.join(run_b, "checkpoints", "latest.pt"))
    assert (ckpt["updates"], ckpt["env_steps"]) == (2, env_steps(4))

    with open(os.path.join(run_b, "metrics.jsonl"), "a") as f:  # another writer's row, after the crash
        f.write(json.dumps({"type": "restart", "role": "trainer", "index": 0, "reason": "exit code 1"}) + "\n")
    # the supervisor restarts the trainer: attempt 1 of the same run (cfg.resume stays 0)
    t = TrainerThread(host, trainer_config(host, "ppo", str(tmp_path / "b"), agents, overrides), run_b, attempt=1)
    # what the checkpoint had not received: the trainer receives the next batch while it trains, so
    # the checkpoint of update 2 may hold samples 4 and 5 (pending, with their uncounted env steps)
    held = ckpt["trainer"]["pending_share"]["env_steps"]
    assert held == ckpt["trainer"]["pending_slots"] * T and held in (0, env_steps(1), env_steps(2))
    feed(t, range(4 + held // env_steps(1), 12), agents)
    t.wait_status(updates=6, env_steps=env_steps(12))
    t.stop()
    assert t.error is None
    assert [r["updates"] for r in rows(run_b) if r["type"] == "update"] == [1, 2, 3, 4, 5, 6]
    # update 3's first row was cut; the restart row was kept, just before the resume row
    kinds = [json.loads(line)["type"] for line in open(os.path.join(run_b, "metrics.jsonl"))]
    assert kinds.index("restart") + 1 == kinds.index("resume")
    restart_free = os.path.join(str(tmp_path), "restart-free")
    os.makedirs(restart_free)
    with open(os.path.join(restart_free, "metrics.jsonl"), "w") as f:
        f.writelines(line for line in open(os.path.join(run_b, "metrics.jsonl")) if '"restart"' not in line)
    os.makedirs(os.path.join(restart_free, "checkpoints"))
    os.link(os.path.join(run_b, "checkpoints", "latest.pt"), os.path.join(restart_free, "checkpoints", "latest.pt"))
    compare_final(run_a, restart_free)


def test_checkpoints_are_also_written_by_wall_time(tmp_path):
    host = fake_host()
    agents, overrides = CASES["ppo"]
    # every 1000 updates, or when 1 ns has passed since the last one: after every update
    cfg = trainer_config(host, "ppo", str(tmp_path), agents,
                         (*overrides, "trainer.checkpoint_interval=1000", "trainer.checkpoint_interval_s=1e-9"))
    run = str(tmp_path / "run")
    os.makedirs(run)
    t = TrainerThread(host, cfg, run)
    feed(t, range(2), agents)
    t.wait_status(updates=1)
    ckpt = load_checkpoint(os.path.join(run, "checkpoints", "latest.pt"))  # written while the trainer runs
    t.stop()
    assert (ckpt["policy_version"], ckpt["env_steps"]) == (1, env_steps(2))
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["latest.pt"]


def test_cut_metrics_drops_the_trainers_rows_after_the_checkpoint_and_keeps_the_others(tmp_path):
    from zoo.core.workers.trainer import cut_metrics

    path = tmp_path / "metrics.jsonl"
    kept = '{"type": "update", "updates": 1}\n'
    path.write_text(kept + '{"type": "episode", "return": 3}\n{"type": "restart", "role": "actor"}\n'
                    '{"type": "update", "updates": 2}\n{"type": "upd')  # a half-written last line
    assert cut_metrics(str(path), len(kept)) == 3  # episode, update 2, the half line
    assert path.read_text() == kept + '{"type": "restart", "role": "actor"}\n'
    assert cut_metrics(str(path), 10_000) == 0 and path.read_text() == kept + '{"type": "restart", "role": "actor"}\n'


def test_tensorboard_hides_the_steps_after_the_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from zoo.core.workers.trainer import MetricsWriter

    first = MetricsWriter(str(tmp_path), True)
    for step in (10, 20, 30, 40):  # rows at 30 and 40 came after the checkpoint at 20
        first.write({"type": "update", "loss": float(step)}, step)
    first.close()
    second = MetricsWriter(str(tmp_path), True, purge_step=21)  # the resume: checkpoint env_steps 20 + 1
    second.write({"type": "update", "loss": 31.0}, 31)
    second.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("update/loss")] == [(10, 10.0), (20, 20.0), (31, 31.0)]
