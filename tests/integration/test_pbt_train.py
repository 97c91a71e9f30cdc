"""`zoo train` with a population (docs/pbt.md), end to end: two PPO members on CartPole-v1,
each env routed to its member; the population manager writes exploit/explore rows and orders;
an exploiting member continues from bit-for-bit the weights of the source's checkpoint; a
resumed run continues the population from pbt/population.json."""
from __future__ import annotations

import json
import uuid

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import finish, leftovers, marked_processes, read_metrics, start

pytestmark = pytest.mark.integration

MEMBERS = ("default_0", "default_1")
SETTINGS = ("pbt.members=2", 'pbt.hyperparameters={"algo.lr": [1e-4, 1e-2]}', "pbt.interval_env_steps=1000",
            "actors.count=1", "actors.envs_per_actor=4", "sample_length=32", "trainer.batch_samples=4",
            "policy.inline=true", "trainer.keep_checkpoints=true", "trainer.checkpoint_interval=1000")


def _train(tmp_path, name, steps):
    sets = [a for s in SETTINGS for a in ("--set", s)]
    return _zoo("train", "ppo", "--env", "CartPole-v1", "--steps", str(steps), "--name", name,
                "--set", f"runs_dir={tmp_path / 'runs'}", *sets, run=tmp_path / "runs" / name)


def _zoo(*args, run):
    mark = uuid.uuid4().hex
    proc = start(*args, env=subprocess_env(ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    return run, out


def _digest_of(path):
    from zoo.core.checkpoint import load_checkpoint
    from zoo.core.pbt import weights_digest

    return weights_digest(load_checkpoint(str(path))["algorithm"]["policy"])


def test_a_population_of_two_exploits_from_the_source_checkpoint(tmp_path):
    run, out = _train(tmp_path, "pop", 3000)
    assert "policies default_0 (1 agent, inline, 1 trainer), default_1 (1 agent, inline, 1 trainer), 1 pbt worker" \
        in out
    rows = read_metrics(run)
    for member in MEMBERS:  # both members update and see their own envs' episodes
        assert [r for r in rows if r["type"] == "update" and r.get("policy") == member]
        assert [r for r in rows if r["type"] == "episode" and r.get("policy") == member]
    decided = [r for r in rows if r["type"] == "pbt" and r["event"] in ("exploit", "explore")]
    assert decided and decided[0]["event"] == "exploit" and decided[1]["event"] == "explore"
    applied = [r for r in rows if r["type"] == "pbt" and r["event"] == "applied"]
    assert applied, "no member applied an order"
    for row in applied:  # the weights it continued from are the source's checkpoint's, bit for bit
        kept = run / "checkpoints" / row["from_policy"] / f"policy-v{row['source_policy_version']:08d}.pt"
        assert row["weights_sha256"] == _digest_of(kept)
        assert row["from_policy"] != row["member_policy"]
    graph = json.loads((run / "graph.json").read_text())
    assert [w["members"] for w in graph["workers"] if w["role"] == "pbt"] == [list(MEMBERS)]
    saved = json.loads((run / "pbt" / "population.json").read_text())
    assert _lineage(saved) == sorted((r["env_steps"], r["member"], r["from_member"]) for r in decided
                                     if r["event"] == "exploit")
    config = json.loads((run / "config.json").read_text())
    assert config["pbt"]["members"] == 2 and "policies" not in config
    # each member's learning-rate schedule ends with the run (it trains on half the run's env steps, its
    # updates count twice): the last update's annealed lr is under 20% of the member's lr then
    from zoo.core.config import build_config
    from zoo.core.pbt import make_population
    from zoo.core.plugins import get_registry

    start_lr = [m.hyperparameters["algo.lr"] for m in make_population(
        build_config(get_registry(), "ppo", "CartPole-v1", overrides=list(SETTINGS))).members]
    for i, member in enumerate(MEMBERS):
        lr = start_lr[i]
        for r in rows:
            if r["type"] == "pbt" and r["event"] == "applied" and r["member_policy"] == member:
                lr = r["hyperparameters"]["algo.lr"]
            elif r["type"] == "update" and r.get("policy") == member:
                last = r["lr"] / lr
        assert last < 0.2, (member, last)


def _lineage(saved):
    return sorted((e[0], m["index"], e[1]) for m in saved["population"]["members"] for e in m["lineage"])


def test_a_resumed_population_continues_from_its_saved_state(tmp_path):
    run, _ = _train(tmp_path, "pop", 2500)
    saved = json.loads((run / "pbt" / "population.json").read_text())
    lineage, next_at = _lineage(saved), saved["population"]["next_at"]
    assert lineage
    _zoo("train", "--resume", str(run), "--steps", "4500", run=run)
    rows = read_metrics(run)
    assert [r for r in rows if r["type"] == "resume"]
    applied = [(r["member_policy"], r["seq"]) for r in rows if r["type"] == "pbt" and r["event"] == "applied"]
    assert len(applied) == len(set(applied))  # the final checkpoint kept pbt_seq: no order applied twice
    exploits = [r["env_steps"] for r in rows if r["type"] == "pbt" and r["event"] == "exploit"]
    assert exploits[:len(lineage)] == [e for e, _, _ in lineage]  # the first run's rows are kept
    assert exploits[len(lineage):] and min(exploits[len(lineage):]) >= next_at  # then the next rounds


def test_the_population_manager_killed_is_restarted_and_continues_the_population(tmp_path):
    import os
    import signal

    from zoo.core.testing.cli import mark_env, nothing_left, rows, wait_for, workers

    mark = uuid.uuid4().hex
    sets = [a for s in SETTINGS for a in ("--set", s)]
    proc = start("train", "ppo", "--env", "CartPole-v1", "--steps", "8000", "--name", "chaos",
                 "--set", f"runs_dir={tmp_path}", *sets, "--set", "supervision.restart_backoff_s=0.2",
                 env=mark_env(mark))
    run = tmp_path / "chaos"
    state = run / "pbt" / "population.json"
    wait_for(lambda: state.exists() and json.loads(state.read_text())["population"]["next_at"] >= 2000, 300,
             "the first round's population state", proc)
    pid = wait_for(lambda: workers(mark).get("zoo-pbt-0"), 120, "the pbt worker", proc)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: rows(run, "restart"), 120, "the pbt worker's restart", proc)
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert [(r["role"], r["reason"]) for r in rows(run, "restart")] == [("pbt", "killed by SIGKILL")]
    exploits = [(r["env_steps"], r["member"], r["from_member"]) for r in rows(run, "pbt") if r["event"] == "exploit"]
    saved = json.loads(state.read_text())["population"]
    # the restarted manager continued the saved population: its lineage holds every round, the
    # first run's too, each decided once
    lineage = sorted((e[0], m["index"], e[1]) for m in saved["members"] for e in m["lineage"])
    assert lineage == sorted(exploits) and len({e for e, _, _ in exploits}) == len(exploits) >= 2
    nothing_left(proc, mark)
