"""`zoo train` with the eval manager (docs/history.md, "The eval manager") on tic-tac-toe
(PettingZoo classic, turn-based, action masks), self-play of one policy keeping a version
after every update: the ``eval`` worker plays each kept version against the ``random``
baseline and the version before it, and writes games and Elo ratings to the store, which
``zoo league`` prints. The run is stopped with Ctrl-C once two versions are rated."""
from __future__ import annotations

import json
import uuid

import pytest

from zoo.core.history import VersionStore
from zoo.core.testing.cli import interrupt, mark_env, marked_processes, nothing_left, start, title, wait_for, zoo

pytestmark = pytest.mark.integration

EPISODES = 4


def rated(run) -> set[int]:
    """Versions that have played the random baseline and (all but the first) the version before them."""
    if not (run / "history.sqlite").exists():
        return set()
    with VersionStore(run, readonly=True) as store:
        results = store.eval_results("default")
    vs = {(r.player, r.opponent): r.games for r in results}
    return {v for v in range(1, 100) if vs.get((f"v{v}", "random")) == EPISODES
            and (v == 1 or vs.get((f"v{v}", f"v{v - 1}")) == EPISODES)}


def test_the_eval_manager_rates_kept_versions_and_zoo_league_prints_them(tmp_path):
    mark = uuid.uuid4().hex
    run = tmp_path / "ev"
    proc = start("train", "mappo", "--env", "pettingzoo:pettingzoo.classic.tictactoe_v3", "--steps", "10000000",
                 "--name", "ev", "--set", f"runs_dir={tmp_path}", "--set", "log.tensorboard=false",
                 "--set", "actors.count=1", "--set", "actors.envs_per_actor=4", "--set", "sample_length=16",
                 "--set", "trainer.batch_samples=8", "--set", "algo.epochs=1",
                 "--set", "trainer.history.every_updates=1", "--set", "workers.eval.count=1",
                 "--set", f"workers.eval.episodes={EPISODES}", "--set", "workers.eval.past_versions=1",
                 env=mark_env(mark), new_session=True)
    wait_for(lambda: {1, 2} <= rated(run), 300, "versions 1 and 2 rated by the eval manager", proc)
    titles = sorted(title(pid) for pid in marked_processes(mark) if pid != proc.pid)
    out, err = interrupt(proc)
    nothing_left(proc, mark)
    assert "zoo: eval 0 ev" in titles, titles
    assert "1 trainer, 1 eval worker, run dir" in out

    graph = json.loads((run / "graph.json").read_text())
    assert graph["counts"] == {"trainer": 1, "policy": 1, "actor": 1, "eval": 1, "pbt": 0}
    entry = next(w for w in graph["workers"] if w["role"] == "eval")
    assert (entry["index"], entry["policy"], entry["baselines"], entry["listens"], entry["connects"]) == (
        0, "default", ["random"], [], [])
    assert isinstance(entry["pid"], int) and graph["kinds"]["eval"]["plugin"] == "zoo.workers"

    with VersionStore(run, readonly=True) as store:
        rows = store.db.execute("SELECT player, opponent, seat, score, player_return, opponent_return, k, initial, "
                                "deterministic FROM eval_games WHERE policy = 'default' ORDER BY id").fetchall()
        standings = {s.player: s for s in store.standings("default")}
        training = store.versions("default")
    first = [g[:3] for g in rows if g[0] == "v1"][:EPISODES]
    # v1 against random first: the first 2 games as the first player (seat 0), then 2 as the second
    assert first == [("v1", "random", 0), ("v1", "random", 0), ("v1", "random", 1), ("v1", "random", 1)]
    games = [g[3:] for g in rows]
    for score, mine, theirs, k, initial, deterministic in games:
        # tic-tac-toe is zero-sum: +1 / -1 for a win, 0 each for a draw; the score follows the returns
        assert mine == -theirs and mine in (-1.0, 0.0, 1.0)
        assert score == {1.0: 1.0, 0.0: 0.5, -1.0: 0.0}[mine]
        assert (k, initial, deterministic) == (32.0, 1000.0, 0)
    # every game moves the two ratings by opposite amounts: the pool's total stays 1000 per player
    assert sum(s.rating for s in standings.values()) == pytest.approx(1000.0 * len(standings))
    assert {"random", "v1", "v2"} <= set(standings)
    assert standings["v1"].games == sum(1 for g in rows if "v1" in (g[0], g[1]))
    assert all(v.games is None for v in training)  # no training games (self-play of one policy): eval is apart

    league = zoo("league", str(run), env={"COLUMNS": "200"}, timeout=120)
    assert league.returncode == 0, league.stderr
    lines = [" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in league.stdout.splitlines()]
    assert "player env steps rating fit rating games vs random mean return" in lines
    with VersionStore(run, readonly=True) as store:
        fit = store.fitted_ratings("default")["v1"]
    v1 = f"v1 {training[0].env_steps:,} {standings['v1'].rating:.1f} {fit:.1f} {standings['v1'].games}"
    assert any(line.startswith(v1) for line in lines), lines


def test_an_unknown_baseline_is_refused_before_any_process_starts(tmp_path):
    mark = uuid.uuid4().hex
    result = zoo("train", "mappo", "--env", "pettingzoo:pettingzoo.classic.tictactoe_v3", "--name", "bad",
                 "--set", f"runs_dir={tmp_path}", "--set", "trainer.history.every_updates=1",
                 "--set", "workers.eval.count=1", "--set", "workers.eval.baselines=random,minimax",
                 env=mark_env(mark), timeout=300)
    assert result.returncode == 2
    assert ("workers.eval.baselines: no baseline 'minimax' is installed; baselines: lookahead, random (see `zoo list "
            "baselines`)") in " ".join(result.stderr.split())
    assert not (tmp_path / "bad").exists() and marked_processes(mark) == []
