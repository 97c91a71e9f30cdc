"""Run folders claimed atomically, status.json, rows appended by the controller."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket

import pytest

from zoo.core.config import ExperimentConfig
from zoo.core.rundir import RunStatus, append_row, claim_run_dir, is_default_name, last_row, pid_alive, what_was_saved


def cfg(tmp_path, name):
    return ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", name=name, runs_dir=str(tmp_path))


def test_default_names_are_recognised():
    default = "ppo-atari-Pong-20261201-210000"
    assert is_default_name(ExperimentConfig(algo_name="ppo", env_name="atari:Pong", name=default))
    assert not is_default_name(ExperimentConfig(algo_name="ppo", env_name="atari:Pong", name="mine"))
    assert not is_default_name(ExperimentConfig(algo_name="ppo", env_name="atari:Pong", name="ppo-atari-Pong-2026"))


def test_a_taken_default_name_gets_a_suffix_and_a_taken_explicit_name_is_refused(tmp_path):
    first = cfg(tmp_path, "ppo-CartPole-v1-20261201-210000")
    assert claim_run_dir(first) == str(tmp_path / "ppo-CartPole-v1-20261201-210000")
    second = cfg(tmp_path, "ppo-CartPole-v1-20261201-210000")
    path = claim_run_dir(second)
    assert second.name.startswith("ppo-CartPole-v1-20261201-210000-") and len(second.name) == 31 + 5
    assert path == str(tmp_path / second.name) and os.path.isdir(path)
    mine = cfg(tmp_path, "mine")
    claim_run_dir(mine)
    with pytest.raises(FileExistsError, match=r"run directory '.*/mine' already exists; pass --name NEW or remove it"):
        claim_run_dir(cfg(tmp_path, "mine"))


def _claim(runs_dir: str, barrier, out) -> None:
    c = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", name="ppo-CartPole-v1-20261201-210000",
                         runs_dir=runs_dir)
    barrier.wait()
    out.put(claim_run_dir(c))


def test_three_runs_started_at_once_in_one_folder_get_three_folders(tmp_path):
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(tmp_path), barrier, out)) for _ in range(3)]
    for p in procs:
        p.start()
    paths = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(set(paths)) == 3 and sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)
    assert sum(os.path.basename(p) == "ppo-CartPole-v1-20261201-210000" for p in paths) == 1


def test_status_json_when_running_and_when_ended(tmp_path):
    status = RunStatus(str(tmp_path))
    status.start()
    data = json.loads((tmp_path / "status.json").read_text())
    assert data == {"status": "running", "pid": os.getpid(), "host": socket.gethostname(),
                    "started": data["started"], "ended": None, "exit_code": None, "reason": None,
                    "failed_worker": None}
    status.end("crashed", 1, "actor worker 1 exited with code 1",
               {"role": "actor", "index": 1, "detail": "Traceback ..."})
    data = json.loads((tmp_path / "status.json").read_text())
    assert (data["status"], data["exit_code"], data["reason"], data["failed_worker"]) == \
        ("crashed", 1, "actor worker 1 exited with code 1", {"role": "actor", "index": 1, "detail": "Traceback ..."})
    assert data["ended"] >= data["started"]
    assert os.listdir(tmp_path) == ["status.json"]  # no temporary file left


def test_appended_rows_are_whole_lines_and_the_final_message_says_what_is_on_disk(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    assert what_was_saved(str(tmp_path)) == f"no checkpoint was written; metrics so far are in {tmp_path}"
    append_row(str(metrics), {"type": "update", "policy_version": 3})
    append_row(str(metrics), {"type": "restart", "role": "actor", "index": 0})
    assert [json.loads(x) for x in metrics.read_text().splitlines()] == [
        {"type": "update", "policy_version": 3}, {"type": "restart", "role": "actor", "index": 0}]
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest.pt").write_bytes(b"x")
    assert what_was_saved(str(tmp_path)).startswith("the trainer did not finish (no end row); the last checkpoint is ")
    append_row(str(metrics), {"type": "end", "policy_version": 3, "env_steps": 768})
    assert last_row(str(metrics)) == {"type": "end", "policy_version": 3, "env_steps": 768}
    assert what_was_saved(str(tmp_path)) == (
        f"the trainer wrote its final checkpoint ({tmp_path}/checkpoints/latest.pt, policy version 3, 768 env steps) "
        "and the end row of metrics.jsonl")
    # Counts as the status lines write them (was "1280 env steps" under a line showing "1,280").
    append_row(str(metrics), {"type": "end", "policy_version": 3, "env_steps": 1280})
    assert what_was_saved(str(tmp_path)) == (
        f"the trainer wrote its final checkpoint ({tmp_path}/checkpoints/latest.pt, policy version 3, 1,280 env steps) "
        "and the end row of metrics.jsonl")


def test_what_a_run_with_named_policies_saved_is_said_per_trainable_policy(tmp_path):
    """Each trainable policy has its own checkpoint and end row (rows carry "policy"); the
    sentence looked at checkpoints/latest.pt only and said none was written."""
    import time

    (tmp_path / "config.json").write_text(json.dumps(
        {"policies": {"lead": {}, "rest": {}, "third": {}, "fixed": {"trainable": False}}}))
    for p in ("lead", "rest"):
        (tmp_path / "checkpoints" / p).mkdir(parents=True)
        (tmp_path / "checkpoints" / p / "latest.pt").write_bytes(b"x")
    os.utime(tmp_path / "checkpoints" / "rest" / "latest.pt", (1_700_000_000, 1_700_000_000))
    metrics = tmp_path / "metrics.jsonl"
    append_row(str(metrics), {"type": "end", "policy": "lead", "policy_version": 5, "env_steps": 3000})
    append_row(str(metrics), {"type": "update", "policy": "rest", "policy_version": 7})
    written = time.strftime("%H:%M:%S", time.localtime(1_700_000_000))
    assert what_was_saved(str(tmp_path)) == (
        f"policy lead: final checkpoint {tmp_path}/checkpoints/lead/latest.pt (policy version 5, 3,000 env steps) "
        f"and its end row; policy rest: did not finish (no end row); last checkpoint "
        f"{tmp_path}/checkpoints/rest/latest.pt, written {written}; policy third: no checkpoint written; "
        f"metrics are in {metrics}")


def test_pid_alive_one_rule_for_every_reader():
    """One pid check serves the workers' controller watch, reclaim, `zoo runs`, `zoo watch`
    and resume: not an int > 0 is never alive; a zombie (killed, not yet reaped) is dead."""
    import subprocess
    import time

    assert pid_alive(os.getpid()) is True
    assert pid_alive(0) is False and pid_alive(-1) is False
    assert pid_alive(True) is False and pid_alive("1") is False and pid_alive(None) is False
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(child.pid) is True
        child.kill()
        deadline = time.monotonic() + 5
        while pid_alive(child.pid) and time.monotonic() < deadline:  # a zombie until reaped
            time.sleep(0.01)
        assert pid_alive(child.pid) is False
    finally:
        child.wait(5)
    assert pid_alive(child.pid) is False
