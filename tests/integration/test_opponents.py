"""`zoo train` with a learner and an opponent served from its history (docs/history.md,
"Opponents from the history"): mpe2's simple_spread_v3, agents 0 and 1 the learner, agent 2
the opponent, which plays a uniformly picked kept version of the learner each episode (a cache of
2 networks for many kept versions: the evicted network takes the next version's weights)."""
from __future__ import annotations

import json
import uuid

import pytest

from zoo.core.history import VersionStore
from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import finish, leftovers, marked_processes, read_metrics, start, zoo

pytestmark = pytest.mark.integration

CONFIG = """
sample_length = 25
[actors]
count = 1
envs_per_actor = 4
ring_size = 2
[trainer]
batch_samples = 8
[policies.learner]
algo = "mappo"
trainer.history.every_updates = 1
[policies.opponent]
algo = "mappo"
opponent = {source = "learner", pick = "uniform", every = "episode", cache = 2}
[[agents]]
match = "agent_2"
policy = "opponent"
[[agents]]
match = "*"
policy = "learner"
"""


def test_an_opponent_plays_past_versions_of_the_learner_and_episode_rows_name_them(tmp_path):
    mark = uuid.uuid4().hex
    config = tmp_path / "opp.toml"
    config.write_text(CONFIG)
    proc = start("train", "mappo", "--env", "pettingzoo:mpe2.simple_spread_v3", "--config", str(config),
                 "--steps", "2000", "--name", "opp", "--set", f"runs_dir={tmp_path}",
                 env=subprocess_env(ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    run = tmp_path / "opp"
    rows = read_metrics(run)
    assert {r["policy"] for r in rows if r["type"] == "update"} == {"learner"}  # the opponent trains nothing
    final = max(r["policy_version"] for r in rows if r["type"] == "update")
    episodes = [r for r in rows if r["type"] == "episode"]
    assert len(episodes) >= 40 and all(isinstance(e.get("opponent_version"), int) for e in episodes)
    # each env's first episode starts before any version is kept: the learner's current weights, version 0
    assert [e["opponent_version"] for e in episodes[:4]] == [0, 0, 0, 0]
    with VersionStore(run, readonly=True) as store:
        rows = store.versions("learner")
    kept = [v.version for v in rows]
    assert kept == list(range(1, final + 1))
    # the learner's trainer counted each episode against a kept version as a game of that version
    # (docs/history.md, "Results and ratings"): games, wins (the learner lost) and draws per version
    for v in rows:
        mine = [e for e in episodes if e["opponent_version"] == v.version]
        assert (v.games or 0) == len(mine), v
        assert (v.wins or 0) == sum(e["learner_return"] < e["opponent_return"] for e in mine), v
        assert (v.draws or 0) == sum(e["learner_return"] == e["opponent_return"] for e in mine), v
        assert v.rating is not None  # the learner's when kept, then moved by its games
    assert sum(v.games or 0 for v in rows) >= 10
    played = {e["opponent_version"] for e in episodes}
    assert played <= {0, *kept}
    assert len({v for v in played if 1 <= v < final}) >= 2  # past versions played, not only the newest
    assert ("history query uniform of policy learner: no version is kept yet; using latest (the learner's current "
            "weights)") in out + err

    # zoo eval plays the opponent with its source's latest weights
    scores = tmp_path / "eval.jsonl"
    result = zoo("eval", str(run), "-n", "2", "--out", str(scores), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    played = [json.loads(line) for line in scores.read_text().splitlines()]
    assert len(played) == 2 and all(set(r["policy_returns"]) == {"learner", "opponent"} for r in played)
