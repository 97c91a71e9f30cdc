"""`zoo train` of the replay algorithms with two data-parallel trainers (`trainer.count=2`): both
ranks take the rate limiter's global grant (a rank with an empty shard holds every rank back),
rank 1 checkpoints its replay shard beside latest.pt, and a resume restores every shard.

Each run is short (a few updates; measured 12-20 s per `zoo train` on 2 loaded cores, two runs
per test)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.core.checkpoint import load_checkpoint
from zoo.core.testing.cli import zoo

pytestmark = pytest.mark.integration


def rows(run_dir: Path) -> list[dict]:
    return [r for r in (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())
            if r["type"] in ("update", "resume")]


def shards(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("replay-rank"))


def test_apex_dqn_with_two_trainers_updates_checkpoints_every_shard_and_resumes(tmp_path):
    # CartPole presets: each trainer inserts 8 columns x 16 steps = 128 transitions an update (one actor
    # each), 16 replayed per insert, batch 64; learning after 256 (set here). Update 1: 256 together,
    # credit 4,096, but the shards are empty before the insert: no step. Update 2: 8,192 / (2 x 64) = 64
    # steps. Then 32 an update. The run counts 4 batches (1,024 env steps) and trains 3.
    run = tmp_path / "a"
    common = ["--set", "trainer.count=2", "--set", "algo.learning_starts=256"]
    first = zoo("train", "apex-dqn", "--env", "CartPole-v1", "--seed", "1", "--steps", "1024", "--name", "a",
                "--set", f"runs_dir={tmp_path}", *common, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    updates = [r for r in rows(run) if r["type"] == "update"]
    assert [(u["updates"], u["gradient_steps"], u["replay_size"], u["agent_steps"]) for u in updates] == [
        (1, 0.0, 128.0, 256.0), (2, 64.0, 256.0, 256.0), (3, 32.0, 384.0, 256.0)]
    assert shards(run) == ["replay-rank1-u00000003.pt"]
    shard = load_checkpoint(str(run / "checkpoints" / "replay-rank1-u00000003.pt"))
    assert (shard["rank"], shard["updates"], shard["rank_state"]["replay"]["n_valid"]) == (1, 3, 384)
    latest = load_checkpoint(str(run / "checkpoints" / "latest.pt"))["algorithm"]
    # every rank's inserts and replayed samples; rank 0's own shard
    assert (latest["inserted"], latest["gradient_steps"], latest["replayed"], latest["replay"]["n_valid"]) == (
        768, 96, 96 * 128, 384)

    second = zoo("train", "--resume", str(run), "--steps", "2048", timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "shard starts empty" not in second.stdout + second.stderr
    after = [r for r in rows(run) if r["type"] == "update" and r["updates"] > 3]
    # rank 1's shard came back: an empty one would have granted no step at update 4
    assert [(u["updates"], u["gradient_steps"], u["replay_size"]) for u in after] == [
        (4, 32.0, 512.0), (5, 32.0, 640.0), (6, 32.0, 768.0)]
    assert shards(run) == ["replay-rank1-u00000003.pt", "replay-rank1-u00000006.pt"]
    shard = load_checkpoint(str(run / "checkpoints" / "replay-rank1-u00000006.pt"))
    assert shard["rank_state"]["replay"]["n_valid"] == 768


def test_sac_with_two_trainers_on_pendulum_updates_and_resumes(tmp_path):
    # Pendulum presets with 2 actors and T = 16 (set here; the presets' is 4): 4 columns x 16 steps = 64
    # transitions per trainer and update;
    # batch 32, 16 per insert, learning after 128 (set here): update 1 credits 128 x 16 = 2,048 but
    # the shards are empty, update 2 takes 4,096 / 64 = 64 steps, then 32 an update.
    run = tmp_path / "s"
    first = zoo("train", "sac", "--env", "Pendulum-v1", "--seed", "1", "--steps", "512", "--name", "s",
                "--set", f"runs_dir={tmp_path}", "--set", "trainer.count=2", "--set", "actors.count=2",
                "--set", "algo.learning_starts=128", "--set", "algo.batch_size=32", "--set", "sample_length=16",
                "--set", "algo.samples_per_insert=16", "--set", "algo.hidden=64", timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    updates = [r for r in rows(run) if r["type"] == "update"]
    assert [(u["gradient_steps"], u["replay_size"], u["warmup"]) for u in updates] == [
        (0.0, 64.0, 0.0), (64.0, 128.0, 0.0), (32.0, 192.0, 0.0)]
    assert shards(run) == ["replay-rank1-u00000003.pt"]
    second = zoo("train", "--resume", str(run), "--steps", "1024", timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "shard starts empty" not in second.stdout + second.stderr
    after = [r for r in rows(run) if r["type"] == "update" and r["updates"] > 3]
    assert [(u["gradient_steps"], u["replay_size"]) for u in after] == [(32.0, 256.0), (32.0, 320.0), (32.0, 384.0)]
    shard = load_checkpoint(str(run / "checkpoints" / "replay-rank1-u00000006.pt"))
    assert shard["rank_state"]["replay"]["n_valid"] == 384


def test_r2d2_with_two_trainers_updates_and_a_lost_shard_restarts_empty(tmp_path):
    # CartPole presets: 8 columns x 40 steps per trainer, sequences of 20 every 10 steps: 24 a trainer
    # and update; 8 per insert (set here), batch 16. Update 1: 48 x 8 = 384 credit, shards empty; update 2:
    # 768 / (2 x 16) = 24 steps. The run counts 3 batches (1,920 env steps) and trains 2.
    run = tmp_path / "r"
    result = zoo("train", "r2d2", "--env", "CartPole-v1", "--seed", "1", "--steps", "1920", "--name", "r",
                 "--set", f"runs_dir={tmp_path}", "--set", "trainer.count=2", "--set", "algo.learning_starts=16",
                 "--set", "algo.samples_per_insert=8", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    updates = [r for r in rows(run) if r["type"] == "update"]
    assert [(u["gradient_steps"], u["replay_size"], u["sequences"]) for u in updates] == [
        (0.0, 24.0, 24.0), (24.0, 48.0, 24.0)]
    assert shards(run) == ["replay-rank1-u00000002.pt"]
    shard = load_checkpoint(str(run / "checkpoints" / "replay-rank1-u00000002.pt"))
    assert (shard["rank"], shard["updates"]) == (1, 2)
    assert shard["rank_state"]["replay"]["n_valid"] == 48
    # Without rank 1's file (as after a crash between the two writes) the resume warns, rank 1's shard
    # starts empty, and the global grant holds every rank back for an update: the credit carries.
    (run / "checkpoints" / "replay-rank1-u00000002.pt").unlink()
    second = zoo("train", "--resume", str(run), "--steps", "3840", timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    warning = ("zoo: warning from trainer worker 1: trainer rank 1: no replay-rank1-u00000002.pt beside latest.pt "
               "(update 2); its replay shard starts empty and fills from its actors' next samples")
    assert warning in second.stdout + second.stderr
    after = [r for r in rows(run) if r["type"] == "update" and r["updates"] > 2]
    # update 3: no step (rank 1's shard was empty before its insert), credit 384 carried; update 4: 768 / 32
    assert [(u["updates"], u["gradient_steps"], u["replay_size"]) for u in after] == [(3, 0.0, 72.0), (4, 24.0, 96.0)]
    assert shards(run) == ["replay-rank1-u00000004.pt"]
    assert load_checkpoint(str(run / "checkpoints" / "replay-rank1-u00000004.pt"))["rank_state"]["replay"][
        "n_valid"] == 48
