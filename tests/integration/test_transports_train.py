"""`zoo train ppo --env CartPole-v1` with every stream on each inter-process transport."""
from __future__ import annotations

import glob
import json

import pytest

from zoo.core.testing.cli import finish, start, wait_for, zoo

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("transport", ["nng", "nng-tcp", "shm", "tcp"])
def test_short_cartpole_run_over_each_transport(tmp_path, transport):
    name, _, scheme = transport.partition("-")  # nng-tcp: nng over tcp:// (option scheme=tcp)
    sets = [a for s in ("inference", "sample", "parameter") for a in ("--set", f"streams.{s}.transport={name}")]
    if scheme:
        sets += [a for s in ("inference", "sample", "parameter")
                 for a in ("--set", f"streams.{s}.options.scheme={scheme}")]
    proc = start("train", "ppo", "--env", "CartPole-v1", "--steps", "3000", "--name", transport,
                 "--set", f"runs_dir={tmp_path}", *sets,
                 "--set", "trainer.keep_checkpoints=true", "--set", "trainer.checkpoint_interval=4")
    _, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    rows = [json.loads(line) for line in (tmp_path / transport / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if r["type"] == "update"]
    # 3,000 env steps in batches of 8 samples x 32 steps: at least 8 updates, versions 1, 2, 3, ...
    assert len(updates) >= 8 and [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))
    # The last row holds the final counters: the budget reached, the last update's version.
    assert rows[-1]["type"] == "end" and rows[-1]["env_steps"] >= 3000 and rows[-1]["policy_version"] == len(updates)
    # A snapshot every 4th update and of the final weights, named by policy version, besides latest.pt.
    snapshots = sorted(p.name for p in (tmp_path / transport / "checkpoints").iterdir())
    kept = sorted({*range(4, len(updates) + 1, 4), len(updates)})
    assert snapshots == ["latest.pt"] + [f"policy-v{v:08d}.pt" for v in kept]
    config = json.loads((tmp_path / transport / "config.json").read_text())
    assert {config["streams"][s]["transport"] for s in ("inference", "sample", "parameter")} == {name}
    # The run id starts with the controller's pid: nothing of this run is left behind.
    assert glob.glob(f"/dev/shm/zoo-{proc.pid}-*") == [] and glob.glob(f"/tmp/zoo-{proc.pid}-*") == []


def test_inline_is_refused_for_multi_process_runs(tmp_path):
    proc = zoo("train", "ppo", "--env", "CartPole-v1", "--steps", "1000", "--name", "inl",
               "--set", "streams.sample.transport=inline", "--set", f"runs_dir={tmp_path}", timeout=300)
    # Refused while the config is built: exit 2, the field and the fix named, no run started.
    assert proc.returncode == 2
    assert ("streams.sample.transport='inline' joins endpoints within one process only, but zoo train runs every "
            "worker as its own process; use auto (the default), shm, nng or tcp") in proc.stderr
    assert not (tmp_path / "inl").exists()


def test_zoo_list_transports_shows_all_five_and_resolvers_the_files_one():
    out = zoo("list", "transports", timeout=300).stdout
    for name in ("auto", "inline", "nng", "shm", "tcp"):
        assert name in out
    out = zoo("list", "resolvers", timeout=300).stdout
    assert "files" in out and "zoo.files" in out


def test_default_auto_run_resolves_shm_records_placement_and_leaves_no_resolver_keys(tmp_path):
    """The default transport (auto) on one host is shm for every stream; graph.json says so and
    where each worker ran; every listener published its address through the resolver (here
    the files resolver under tmp_path/keys), and the run clears all of its keys at the end."""
    keys_root = tmp_path / "keys"
    proc = start("train", "ppo", "--env", "CartPole-v1", "--steps", "1500", "--name", "auto",
                 "--set", f"runs_dir={tmp_path}", "--set", f"resolver.options.root={keys_root}")
    seen: set[str] = set()

    def collect() -> bool:  # the keys published while the run lasts; True once it ended
        nonlocal seen
        seen |= {p.relative_to(keys_root).as_posix() for p in keys_root.glob("zoo-*/keys/*.json")}
        return proc.poll() is not None

    wait_for(collect, 600, "zoo train to reach its budget", poll_s=0.05)
    _, err = finish(proc, 60)
    assert proc.returncode == 0, err[-3000:]
    run_id = f"{proc.pid}-" + next(iter(seen)).split("/")[0].rsplit("-", 1)[1]
    # listeners: the policy worker's inference-0, the trainer's sample-0 and parameter (shm), the
    # controller's control puller (nng ipc)
    assert seen == {f"zoo-{run_id}/keys/{k}.json" for k in ("inference-0.shm", "sample-0.shm", "parameter.shm",
                                                           "control.ipc")}
    assert list(keys_root.iterdir()) == []  # no key, no folder left behind
    graph = json.loads((tmp_path / "auto" / "graph.json").read_text())
    assert {s: (v["configured"], v["transport"]) for s, v in graph["streams"].items()} == {
        "inference": ("auto", "shm"), "sample": ("auto", "shm"), "parameter": ("auto", "shm"),
        "control": ("nng", "nng")}
    assert [(w["role"], w["index"]) for w in graph["workers"]] == [("trainer", 0), ("policy", 0), ("actor", 0),
                                                                   ("actor", 1)]
    assert {w["host"] for w in graph["workers"]} == {graph["controller"]["host"]}
    assert graph["controller"]["pid"] == proc.pid and all(isinstance(w["pid"], int) for w in graph["workers"])
    assert glob.glob(f"/dev/shm/zoo-{proc.pid}-*") == [] and glob.glob(f"/tmp/zoo-{proc.pid}-*") == []
