"""The version history (:mod:`zoo.core.history`, :mod:`zoo.core.workers.history`): the schedule,
the store's rows and files, each query's weights and picks, the fallback, a resume's cut, the
options' checks. Every value is worked out by hand in the comments."""
from __future__ import annotations

import logging
import os
import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from zoo.core.checkpoint import load_checkpoint
from zoo.core.config import ConfigError, ExperimentConfig, HistoryConfig, history_problems, set_value, validate
from zoo.core.history import (
    HistoryError,
    HistorySchedule,
    Pick,
    Picker,
    Query,
    Version,
    VersionStore,
    draw,
    parse_query,
    pfsp_weight,
    pick_version,
    query_weights,
)
from zoo.core.workers.history import History, store_name


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Draws:
    """A generator whose ``random()`` returns the given numbers in turn."""

    def __init__(self, *u: float) -> None:
        self.u = list(u)

    def random(self) -> float:
        return self.u.pop(0)


def v(version: int, **kw) -> Version:
    return Version("learner", version, updates=version, env_steps=100 * version, time_s=float(version),
                   path=f"history/learner/v{version:08d}.pt", **kw)


# v10: no games (x = 0.5); v20: 3 wins of 4 (x = 0.75); v30: 2 draws of 4 (x = 0.25); v40: lost both (x = 0)
POOL = [v(10, rating=1200.0), v(20, rating=1300.0, games=4, wins=3, draws=0),
        v(30, rating=1300.0, games=4, wins=0, draws=2), v(40, games=2, wins=0, draws=0)]


# ----------------------------------------------------------------------------- schedule
def test_schedule_every_n_updates():
    s = HistorySchedule(every_updates=3, clock=Clock())
    assert [u for u in range(1, 11) if s.due(u)] == [3, 6, 9]


def test_schedule_every_m_seconds_counts_from_the_last_kept_version():
    clock = Clock()
    s = HistorySchedule(every_s=60.0, clock=clock)  # started at 100
    clock.now = 159.9
    assert not s.due(1)
    clock.now = 160.0
    assert s.due(2)
    s.kept()  # at 160
    clock.now = 219.0
    assert not s.due(3)
    clock.now = 220.0
    assert s.due(4)


def test_schedule_both_and_off():
    clock = Clock()
    s = HistorySchedule(every_updates=5, every_s=30.0, clock=clock)
    clock.now = 110.0
    assert [u for u in range(1, 8) if s.due(u)] == [5]  # 10 s passed: only the update schedule
    clock.now = 130.0
    assert s.due(7)  # 30 s since the start
    off = HistorySchedule(clock=clock)
    assert not off.on and not any(off.due(u) for u in range(1, 20))


# ----------------------------------------------------------------------------- queries
@pytest.mark.parametrize("text, query", [
    ("latest", Query("latest")), (" Uniform ", Query("uniform")), ("v120", Query("version", version=120)),
    ("7", Query("version", version=7)), ("top-5", Query("top", k=5)), ("pfsp", Query("pfsp", power=2.0)),
    ("pfsp:3", Query("pfsp", power=3.0)), ("PFSP:0.5", Query("pfsp", power=0.5)),
])
def test_parse_query(text, query):
    assert parse_query(text) == query


@pytest.mark.parametrize("text, message", [
    ("best", "history query 'best' is not a query; use one of latest, v<VERSION> (or <VERSION>), uniform, "
             "top-<K>, pfsp or pfsp:<P>"),
    ("top-0", "history query 'top-0': top-K needs K >= 1 (e.g. top-5)"),
    ("pfsp:0", "history query 'pfsp:0': pfsp:P needs a finite power P > 0 (e.g. pfsp:2)"),
    ("pfsp:x", "history query 'pfsp:x': pfsp:P needs a finite power P > 0 (e.g. pfsp:2)"),
    ("pfsp:inf", "history query 'pfsp:inf': pfsp:P needs a finite power P > 0 (e.g. pfsp:2)"),
])
def test_parse_query_refuses_in_one_line(text, message):
    with pytest.raises(ValueError) as exc:
        parse_query(text)
    assert str(exc.value) == message


def test_pfsp_weight_is_alphastar_hard_weighting():
    # f(x) = x^p of the version's win rate against the learner; no games: x = 0.5
    assert pfsp_weight(0.75) == 0.5625
    assert pfsp_weight(0.25, 3) == 0.015625
    assert pfsp_weight(None) == 0.25
    assert pfsp_weight(0.0) == 0.0


def test_win_rate_counts_draws_as_half():
    assert POOL[1].win_rate() == 0.75  # (3 + 0) / 4
    assert POOL[2].win_rate() == 0.25  # (0 + 2/2) / 4
    assert POOL[0].win_rate() is None


def test_weights_of_each_query():
    def w(text):
        p, reason = query_weights(parse_query(text), POOL)
        assert reason == ""
        return p.tolist()

    assert w("latest") == [0, 0, 0, 1]
    assert w("v20") == [0, 1, 0, 0]
    assert w("uniform") == [0.25] * 4
    # top-2: ratings 1200, 1300, 1300, none: the two 1300s (v30 first, newer), v40 is no candidate
    assert w("top-2") == [0, 0.5, 0.5, 0]
    assert w("top-5") == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0], abs=0)  # only 3 rated
    # pfsp (p = 2): 0.5^2, 0.75^2, 0.25^2, 0^2 = 0.25, 0.5625, 0.0625, 0 (sum 0.875)
    assert w("pfsp") == pytest.approx([2 / 7, 9 / 14, 1 / 14, 0], rel=1e-15)
    # pfsp:1: 0.5, 0.75, 0.25, 0 (sum 1.5)
    assert w("pfsp:1") == pytest.approx([1 / 3, 1 / 2, 1 / 6, 0], rel=1e-15)


def test_draw_takes_the_first_index_whose_cumulative_weight_exceeds_u():
    p = np.array([2 / 7, 9 / 14, 1 / 14, 0.0])  # cumulative 0.2857, 0.9286, 1, 1
    rng = Draws(0.0, 0.2857, 0.2858, 0.9285, 0.9287, 0.99999)
    assert [draw(p, rng) for _ in range(6)] == [0, 0, 1, 1, 2, 2]  # never the weight-0 version


def test_picks_on_a_seeded_generator():
    # default_rng(7).random() x 6 = 0.6251, 0.8972, 0.7757, 0.2252, 0.3002, 0.8736
    def picks(text):
        rng = np.random.default_rng(7)
        return [pick_version(parse_query(text), POOL, rng).version.version for _ in range(6)]

    assert picks("uniform") == [30, 40, 40, 10, 20, 40]  # cumulative 0.25, 0.5, 0.75, 1
    assert picks("pfsp") == [20, 20, 20, 10, 20, 20]  # cumulative 0.2857, 0.9286, 1
    assert picks("top-2") == [30, 30, 30, 20, 20, 30]  # cumulative 0, 0.5, 1, 1
    assert picks("latest") == [40] * 6
    assert picks("20") == [20] * 6


def test_latest_and_fixed_take_no_draw():
    rng = np.random.default_rng(7)
    pick_version(Query("latest"), POOL, rng)
    pick_version(Query("version", version=10), POOL, rng)
    assert rng.random() == np.random.default_rng(7).random()


@pytest.mark.parametrize("text, pool, reason", [
    ("v25", POOL, "version 25 is not kept (kept: 10, 20, 30, 40)"),
    ("top-3", [v(10), v(20)], "no kept version has a rating yet"),
    ("pfsp", [v(10, games=3, wins=0), v(20, games=1, wins=0)],
     "the learner beat every kept version in every game (every pfsp weight is 0)"),
])
def test_a_query_that_matches_nothing_falls_back_to_latest(text, pool, reason):
    got = pick_version(parse_query(text), pool, np.random.default_rng(0))
    assert got == Pick(pool[-1], True, reason)


def test_no_version_at_all_gives_none():
    assert pick_version(Query("uniform"), [], np.random.default_rng(0)) == Pick(None, True, "no version is kept yet")


# ----------------------------------------------------------------------------- the store
def weights(x: float) -> dict:
    return {"format": 2, "algorithm": {"policy": {"w": torch.tensor([x])}, "config": {"lr": 0.1}}}


def rows(store: VersionStore, policy: str = "learner") -> list[tuple]:
    return [(r.version, r.updates, r.env_steps, r.time_s, r.kept) for r in store.versions(policy, kept_only=False)]


def test_store_rows_files_and_keep(tmp_path):
    with VersionStore(tmp_path) as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert store.add("learner", 2, 2, 256, 1.5, weights(2.0), keep=2) == []
        assert store.add("learner", 4, 4, 512, 3.0, weights(4.0), keep=2) == []
        assert store.add("learner", 6, 6, 768, 4.5, weights(6.0), keep=2) == [2]
        assert store.add("other", 6, 6, 768, 4.5, weights(-6.0)) == []
        assert rows(store) == [(2, 2, 256, 1.5, False), (4, 4, 512, 3.0, True), (6, 6, 768, 4.5, True)]
        assert [r.version for r in store.versions("learner")] == [4, 6]
        assert rows(store, "other") == [(6, 6, 768, 4.5, True)]
        listed = sorted(os.listdir(tmp_path / "history" / "learner"))
        assert listed == ["v00000004.pt", "v00000006.pt"]
        got = store.get("learner", 6)
        assert got.path == os.path.join("history", "learner", "v00000006.pt")
        assert got.rating is got.games is got.wins is got.draws is got.mean_return is None
        ckpt = load_checkpoint(store.file(got))
        assert ckpt["algorithm"]["policy"]["w"].tolist() == [6.0]
        assert (ckpt["policy_version"], ckpt["updates"], ckpt["env_steps"]) == (6, 6, 768)


def test_update_metadata(tmp_path):
    with VersionStore(tmp_path) as store:
        store.add("learner", 3, 3, 10, 1.0, weights(1.0))
        row = store.update_metadata("learner", 3, rating=1234.5, games=10, wins=4)
        assert (row.rating, row.games, row.wins, row.draws, row.mean_return) == (1234.5, 10, 4, None, None)
        store.update_metadata("learner", 3, draws=2, mean_return=-0.25)
        got = store.get("learner", 3)
        assert (got.rating, got.games, got.wins, got.draws, got.mean_return) == (1234.5, 10, 4, 2, -0.25)
        assert got.win_rate() == 0.5  # (4 + 1) / 10
        with pytest.raises(KeyError, match="policy learner has no version 4 in the history store"):
            store.update_metadata("learner", 4, rating=1.0)
        with pytest.raises(ValueError, match=r"^update_metadata: elo is not a metadata column"):
            store.update_metadata("learner", 3, elo=1.0)
        with pytest.raises(ValueError, match=r"^update_metadata: games=-1 must be an int >= 0$"):
            store.update_metadata("learner", 3, games=-1)
        with pytest.raises(ValueError, match=r"^update_metadata: wins=9 \+ draws=2 is more than games=10$"):
            store.update_metadata("learner", 3, wins=9)
        assert store.get("learner", 3).wins == 4  # nothing written by the refused calls


def test_a_reader_sees_the_writers_rows_and_cannot_write(tmp_path):
    with VersionStore(tmp_path, readonly=True) as reader:
        # opened before the store exists (a policy worker before the trainer's first version): sees nothing
        assert reader.versions("learner") == [] and reader.get("learner", 1) is None
        assert reader.pick("learner", "pfsp", np.random.default_rng(0)) == Pick(None, True, "no version is kept yet")
        assert not os.path.exists(tmp_path / "history.sqlite")
        with VersionStore(tmp_path) as writer:
            writer.add("learner", 1, 1, 8, 0.5, weights(1.0))
            assert [r.version for r in reader.versions("learner")] == [1]  # connected once it was there
            with pytest.raises(HistoryError, match="opened read-only"):
                reader.update_metadata("learner", 1, rating=1.0)
    with VersionStore(tmp_path) as writer:
        with VersionStore(tmp_path, readonly=True) as reader:
            assert [r.version for r in reader.versions("learner")] == [1]
            writer.add("learner", 2, 2, 16, 1.0, weights(2.0))
            assert [r.version for r in reader.versions("learner")] == [1, 2]
            with pytest.raises(HistoryError, match="opened read-only"):
                reader.update_metadata("learner", 1, rating=1.0)
            got = reader.pick("learner", "pfsp", np.random.default_rng(7))  # 0.625 of [0.5, 1]: v2
            assert got == Pick(reader.get("learner", 2))


def test_a_reader_of_a_store_made_but_without_its_table_yet_reads_nothing(tmp_path):
    sqlite3.connect(tmp_path / "history.sqlite").close()  # the writer's connect made the file, not yet the table
    with VersionStore(tmp_path, readonly=True) as reader:
        assert reader.versions("learner") == []


def test_a_newer_schema_is_refused(tmp_path):
    VersionStore(tmp_path).close()
    with sqlite3.connect(tmp_path / "history.sqlite") as db:
        db.execute("PRAGMA user_version=9")
    with pytest.raises(HistoryError, match="is a history store of schema 9; this Zoo reads schema 1"):
        VersionStore(tmp_path)


def test_picker_says_a_fallback_once(tmp_path, caplog):
    with VersionStore(tmp_path) as store:
        store.add("learner", 5, 5, 40, 1.0, weights(1.0))
        picker = Picker(store, np.random.default_rng(0))
        with caplog.at_level(logging.WARNING, logger="zoo.history"):
            first, second = picker.pick("learner", "top-3"), picker.pick("learner", "top-3")
        assert first == second == Pick(store.get("learner", 5), True, "no kept version has a rating yet")
        line = "history query top-3 of policy learner: no kept version has a rating yet; using latest (version 5)"
        assert picker.said == [line]
        assert [r.getMessage() for r in caplog.records] == [line]


# ----------------------------------------------------------------------------- the trainer's part, resume
class Net(torch.nn.Module):
    def __init__(self, x: float) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([x]))


def trainer_history(run_dir, every_updates, keep, *, resume=0, attempt=0, version=0, policy=""):
    ctx = SimpleNamespace(run_dir=str(run_dir), policy=policy, attempt=attempt)
    cfg = SimpleNamespace(resume=resume, trainer=SimpleNamespace(
        history=HistoryConfig(every_updates=every_updates, keep=keep)))
    return History.open(ctx, cfg, version)


def run_updates(history: History, first: int, last: int) -> None:
    """Updates ``first..last`` as the trainer does them: version = updates, 100 env steps each."""
    algo_cfg = HistoryConfig()  # any dataclass: stored as the algorithm's options
    for u in range(first, last + 1):
        if history.due(u):
            history.keep(SimpleNamespace(policy=Net(float(u))), algo_cfg,
                         SimpleNamespace(version=u, updates=u, env_steps=100 * u), time_s=u / 10)


def test_history_off_opens_nothing(tmp_path):
    assert trainer_history(tmp_path, every_updates=0, keep=0) is None
    assert not os.path.exists(tmp_path / "history.sqlite")


def test_resume_drops_the_versions_after_the_checkpoint_and_continues(tmp_path):
    h = trainer_history(tmp_path, every_updates=2, keep=2)
    assert h.policy == "default" == store_name("")
    run_updates(h, 1, 7)  # keeps 2, 4, 6; 6 drops 2 (keep 2)
    assert rows(h.store, "default") == [(2, 2, 200, 0.2, False), (4, 4, 400, 0.4, True), (6, 6, 600, 0.6, True)]
    file = load_checkpoint(h.store.file(h.store.get("default", 6)))
    assert file["algorithm"]["policy"]["w"].tolist() == [6.0]
    assert file["algorithm"]["config"] == {"every_updates": 0, "every_minutes": 0.0, "keep": 0}
    h.store.update_metadata("default", 4, rating=1100.0)
    (tmp_path / "history" / "default" / "v00000008.pt.tmp").write_bytes(b"half")  # a crash mid-write
    h.close()
    # the last checkpoint was at version 5: version 6 is forgotten, 2 stays dropped, 4 keeps its rating
    h = trainer_history(tmp_path, every_updates=2, keep=2, resume=1, version=5)
    assert rows(h.store, "default") == [(2, 2, 200, 0.2, False), (4, 4, 400, 0.4, True)]
    assert h.store.get("default", 4).rating == 1100.0
    assert sorted(os.listdir(tmp_path / "history" / "default")) == ["v00000004.pt"]
    run_updates(h, 6, 9)  # the schedule continues: 6 and 8 (8 drops 4)
    assert rows(h.store, "default") == [(2, 2, 200, 0.2, False), (4, 4, 400, 0.4, False),
                                        (6, 6, 600, 0.6, True), (8, 8, 800, 0.8, True)]
    assert sorted(os.listdir(tmp_path / "history" / "default")) == ["v00000006.pt", "v00000008.pt"]
    h.close()


def test_a_restarted_trainer_without_a_checkpoint_forgets_every_version(tmp_path):
    h = trainer_history(tmp_path, every_updates=1, keep=0, policy="hiders")
    run_updates(h, 1, 3)
    h.close()
    h = trainer_history(tmp_path, every_updates=1, keep=0, attempt=1, version=0, policy="hiders")
    assert rows(h.store, "hiders") == []
    h.close()


def test_a_fresh_segment_cuts_nothing(tmp_path):
    h = trainer_history(tmp_path, every_updates=1, keep=0)
    run_updates(h, 1, 2)
    h.close()
    h = trainer_history(tmp_path, every_updates=1, keep=0, version=0)  # neither resume nor attempt
    assert [r[0] for r in rows(h.store, "default")] == [1, 2]
    h.close()


# ----------------------------------------------------------------------------- options
def history_messages(**options) -> list[str]:
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=1000)
    for key, value in options.items():
        set_value(cfg, f"trainer.{key}", value)
    with pytest.raises(ConfigError) as exc:
        validate(cfg, check_budget=False)
    return [m for m in exc.value.problems if "history" in m]


def test_bad_history_options_one_line_each():
    assert history_messages(**{"history.every_updates": -1, "history.every_minutes": float("nan"),
                               "history.keep": -2}) == [
        "trainer.history.every_updates must be >= 0 (0 = not by updates), got -1",
        "trainer.history.every_minutes must be finite and >= 0 (0 = not by time), got nan",
        "trainer.history.keep must be >= 0 (0 = keep every version), got -2"]


def test_keep_without_a_schedule_and_a_schedule_without_learning():
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    set_value(cfg, "trainer.history.keep", 3)
    assert history_problems(cfg) == [(
        "trainer.history.keep", "trainer.history.keep=3 has no schedule to keep versions by: set "
        "trainer.history.every_updates=N and/or trainer.history.every_minutes=M, or drop trainer.history.keep "
        "(docs/history.md)")]
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    set_value(cfg, "trainer.history.every_minutes", "5")
    set_value(cfg, "trainer.learn", "false")
    assert history_problems(cfg) == [(
        "trainer.history.every_minutes", "trainer.history.every_minutes keeps versions of a policy that "
        "trainer.learn=false never updates; drop trainer.history.every_minutes, or set trainer.learn=true")]
    assert history_problems(ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")) == []


def test_a_resume_may_change_the_history_options():
    from zoo.core.resume import is_safe

    assert is_safe("trainer.history.every_updates") and is_safe("trainer.history.keep")
    assert is_safe("policies.learner.trainer.history.every_minutes")
    assert not is_safe("trainer.batch_samples")


def test_a_resume_that_turns_the_history_off_still_cuts_it_back(tmp_path):
    h = trainer_history(tmp_path, every_updates=1, keep=0)
    run_updates(h, 1, 4)
    h.close()
    assert trainer_history(tmp_path, every_updates=0, keep=0, resume=1, version=2) is None
    with VersionStore(tmp_path, readonly=True) as store:
        assert [r[0] for r in rows(store, "default")] == [1, 2]
    assert sorted(os.listdir(tmp_path / "history" / "default")) == ["v00000001.pt", "v00000002.pt"]


def test_zoo_eval_finds_the_run_of_a_kept_version(tmp_path):
    from zoo.runinfo import RunError, resolve_target

    kept = tmp_path / "history" / "default" / "v00000004.pt"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"")
    with pytest.raises(RunError, match="is not inside a run folder"):
        resolve_target(kept)  # no config.json yet
    (tmp_path / "config.json").write_text("{}")
    assert resolve_target(kept) == (tmp_path, kept)


def test_a_writer_waits_for_the_lock_and_says_so_when_it_stays_taken(tmp_path):
    with VersionStore(tmp_path) as trainer, VersionStore(tmp_path, timeout_s=0.05) as evaluator:
        trainer.add("learner", 1, 1, 8, 0.5, weights(1.0))
        trainer.db.execute("BEGIN IMMEDIATE")  # the trainer is writing
        assert [r.version for r in evaluator.versions("learner")] == [1]  # readers read meanwhile
        with pytest.raises(HistoryError, match=r"stayed locked by another writer for 0.05 s \(database is locked\)"):
            evaluator.update_metadata("learner", 1, rating=1.0)
        trainer.db.execute("COMMIT")
        assert evaluator.update_metadata("learner", 1, rating=1.0).rating == 1.0
        assert trainer.get("learner", 1).rating == 1.0
