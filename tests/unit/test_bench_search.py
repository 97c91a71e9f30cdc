"""``zoo bench --search``: the search logic on hand-made figures (a fake measuring function and a
fake clock, no process started), the candidate grid, the TOML file read back through ``zoo
train``'s config path, and the refusals before anything starts."""
from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from zoo.bench import search as S
from zoo.bench.workloads import get_workload

runner = CliRunner()

DEFAULT = S.Layout(actors=1, envs_per_actor=4, ring_size=1, inline=True, policy_workers=1, trainer_threads=1,
                   algo_precision="float32", policy_precision="float32")


def grid(cores: int = 2) -> list[S.Dimension]:
    return S.dimensions(cores, 4, 1, training_bf16=True, inference_bf16=True)


def fake_score(x: S.Layout) -> float:
    """Hand-made figures (trained env steps/s), one term per dimension."""
    return (1000.0 + (0 if x.inline else -400) + {1: 0, 2: 300, 4: 100}[x.actors] + (0 if x.group == 4 else -200)
            + {1: 0, 2: 30, 4: -100}[x.ring_size] + (-50 if x.trainer_threads == 2 else 0)
            + (500 if x.algo_precision == "bfloat16" else 0) + (-10 if x.policy_precision == "bfloat16" else 0))


def fake_bound(x: S.Layout) -> float:
    return 10_000.0 + 100 * x.ring_size + (200 if x.policy_precision == "bfloat16" else 0)


class FakeClock:
    """Seconds that pass only when a trial runs (``cost`` each)."""

    def __init__(self, cost: float = 10.0) -> None:
        self.now, self.cost = 0.0, cost

    def __call__(self) -> float:
        return self.now


def searcher(clock: FakeClock, score=fake_score, fail=()):
    seen: list[S.Layout] = []

    def measure(x: S.Layout, label: str) -> dict:
        seen.append(x)
        clock.now += clock.cost
        if x in fail:
            raise RuntimeError("the run ended by itself (exit 1) before the window was measured\ntraceback ...")
        return {"score": score(x), "note": f"trial {label}"}
    return measure, seen


def test_pick_ties_broken_by_the_bound_then_the_incumbent():
    a, b, c = (dataclasses.replace(DEFAULT, actors=n) for n in (1, 2, 4))
    # 900 < 0.95 x 1,000 is out; 980 and 1,000 tie; the bound picks 980
    assert S.pick([(a, 1000.0, 3000.0), (b, 980.0, 4000.0), (c, 900.0, 9000.0)], a) == b
    # same bounds: the incumbent among the tied
    assert S.pick([(a, 980.0, 3000.0), (b, 1000.0, 3000.0)], a) == a
    assert S.pick([(a, 980.0, 3000.0), (b, 1000.0, 3000.0)], c) == b  # neither is the incumbent: the score
    # beyond the tie the score alone decides; a failed trial never wins; nothing scored keeps the incumbent
    assert S.pick([(a, 1000.0, 9000.0), (b, 1100.0, 1.0)], a) == b
    assert S.pick([(a, None, 9000.0), (b, 10.0, None)], a) == b
    assert S.pick([(a, None, 1.0), (b, None, 2.0)], c) == c


def test_dimensions_on_two_cores():
    dims = grid(2)
    assert [d.name for d in dims] == ["inference", "actors", "group", "ring", "training precision", "trainers",
                                      "inference precision"]
    opts = {d.name: d.options(DEFAULT) for d in dims}
    # 2 cores: inline or 1 policy worker; actors 1, 2, 4; groups of 2 or 4 (8 does not divide 4 samples)
    assert [(x.inline, x.policy_workers) for x in opts["inference"]] == [(True, 1), (False, 1)]
    assert [x.actors for x in opts["actors"]] == [1, 2, 4]
    assert [(x.envs_per_actor, x.ring_size) for x in opts["group"]] == [(2, 1), (4, 1)]
    assert [(x.envs_per_actor, x.ring_size) for x in opts["ring"]] == [(4, 1), (8, 2), (16, 4)]
    # one actor: no second trainer to feed, so one trainer of 1 or 2 threads
    assert [(x.trainers, x.trainer_threads, x.batch_samples) for x in opts["trainers"]] == [(1, 1, 0), (1, 2, 0)]
    assert [x.algo_precision for x in opts["training precision"]] == ["float32", "bfloat16"]


def test_trainers_dimension_splits_the_update_batch():
    """The Pong workload's layout on 2 cores (2 actors x 2 groups of 2 envs, 8 samples per update):
    2 data-parallel trainers of 1 thread take 4 samples each, the update batch of 8 kept."""
    pong = S.Layout(actors=2, envs_per_actor=4, ring_size=2, inline=False, policy_workers=1, trainer_threads=2,
                    algo_precision="bfloat16", policy_precision="float32", trainers=1, batch_samples=8)
    trainers = {d.name: d for d in S.dimensions(2, 8, 1, training_bf16=True, inference_bf16=False)}["trainers"]
    got = trainers.options(pong)
    assert [(x.trainers, x.trainer_threads, x.batch_samples) for x in got] == [(1, 1, 8), (1, 2, 8), (2, 1, 4)]
    assert got[2].changes(pong) == "trainer.threads=1, trainer.count=2, trainer.batch_samples=4"
    assert got[2].describe() == ("2 actors x 4 envs (2 groups of 2), 1 policy worker, 2 trainers x 1 thread, "
                                 "training bfloat16, inference float32")
    # from the 2-trainer layout the same grid comes back (the batch is every trainer's together)
    assert [(x.trainers, x.trainer_threads, x.batch_samples) for x in trainers.options(got[2])] == [
        (1, 1, 8), (1, 2, 8), (2, 1, 4)]
    # a share that is not whole groups is not offered: groups of 4 envs, 4 samples per update
    wide = S.dimensions(2, 4, 1, training_bf16=False, inference_bf16=False)[-1]
    assert wide.name == "trainers"
    assert [(x.trainers, x.trainer_threads) for x in wide.options(dataclasses.replace(DEFAULT, actors=2))] == [
        (1, 1), (1, 2)]
    # the group dimension divides each trainer's share: groups of 2 or 4 divide 4 samples, 8 does not
    group = S.dimensions(2, 8, 1, training_bf16=False, inference_bf16=False)[2]
    assert [x.group for x in group.options(dataclasses.replace(got[2], ring_size=1, envs_per_actor=4))] == [2, 4]


def test_dimensions_on_sixteen_cores_and_without_bfloat16():
    dims = S.dimensions(16, 16, 1, training_bf16=False, inference_bf16=False)
    assert [d.name for d in dims] == ["inference", "actors", "group", "ring", "trainers"]
    eight = dataclasses.replace(DEFAULT, actors=8, inline=False, policy_workers=4)
    opts = {d.name: d.options(eight) for d in dims}
    assert [(x.inline, x.policy_workers) for x in opts["inference"]] == [(True, 1), (False, 1), (False, 2),
                                                                         (False, 4)]
    # fewer policy workers than actors: 1 actor keeps 1 worker
    assert [(x.actors, x.policy_workers) for x in opts["actors"]] == [(1, 1), (8, 4), (16, 4), (32, 4)]
    assert [x.group for x in opts["group"]] == [2, 4, 8]  # 4 x 1 agent, halved and doubled, all divide 16
    # 8 actors, 16 samples in groups of 4: 2 trainers of 8 samples (1 or 8 threads), 4 of 4 samples (1 or 4
    # threads); 8 trainers would take 2 samples each, not whole groups of 4
    assert [(x.trainers, x.trainer_threads, x.batch_samples) for x in opts["trainers"]] == [
        (1, 1, 0), (1, 8, 0), (1, 16, 0), (2, 1, 8), (2, 8, 8), (4, 1, 4), (4, 4, 4)]
    # 2 agents per env: groups of 2 x 2 and 4 x 2 divide 8 agent-slot samples, 8 x 2 does not
    two = S.dimensions(16, 8, 2, training_bf16=False, inference_bf16=False)[2]
    assert [x.group for x in two.options(DEFAULT)] == [2, 4]


def test_search_picks_the_best_on_hand_made_figures():
    clock = FakeClock()
    measure, seen = searcher(clock)
    result = S.run_search(DEFAULT, grid(), measure, fake_bound, 1000.0, warmup=5, seconds=10, clock=clock)
    got = [(t.stage, t.layout.changes(DEFAULT), t.score) for t in result.trials]
    assert got == [
        ("default", "(default)", 1000.0),
        ("inference", "policy.inline=false", 600.0),
        ("actors", "actors.count=2", 1300.0),  # equal bounds: the grid's order
        ("actors", "actors.count=4", 1100.0),
        ("group", "actors.count=2, actors.envs_per_actor=2", 1100.0),
        ("ring", "actors.count=2, actors.envs_per_actor=16, actors.ring_size=4", 1200.0),  # highest bound first
        ("ring", "actors.count=2, actors.envs_per_actor=8, actors.ring_size=2", 1330.0),  # ties 1,300: higher bound
        ("training precision", "actors.count=2, actors.envs_per_actor=8, actors.ring_size=2, "
         "algo.precision=bfloat16", 1830.0),
        ("trainers", "actors.count=2, actors.envs_per_actor=8, actors.ring_size=2, trainer.threads=2, "
         "algo.precision=bfloat16", 1780.0),  # ties 1,830 with the same bound: the incumbent stays
        ("inference precision", "actors.count=2, actors.envs_per_actor=8, actors.ring_size=2, "
         "algo.precision=bfloat16, policy.precision=bfloat16", 1820.0),  # ties, higher bound
        ("repeat", "actors.count=2, actors.envs_per_actor=8, actors.ring_size=2, algo.precision=bfloat16, "
         "policy.precision=bfloat16", 1820.0),
        ("repeat", "(default)", 1000.0),
    ]
    best = S.Layout(actors=2, envs_per_actor=8, ring_size=2, inline=True, policy_workers=1, trainer_threads=1,
                    algo_precision="bfloat16", policy_precision="bfloat16")
    assert result.chosen == result.searched == best
    assert result.scores(best) == [1820.0, 1820.0] and result.scores(DEFAULT) == [1000.0, 1000.0]
    assert result.seconds == 120.0 and result.notes == []
    assert [t.bound for t in result.trials][:2] == [10_100.0, 10_100.0]
    assert len(seen) == 12 and len(set(seen)) == 10  # nothing measured twice but the two repeats
    lines = S.summary_lines(result, "trained env steps/s")
    assert lines[2] == ("trained env steps/s: chosen 1,820 then 1,820 (mean 1,820); default 1,000 then 1,000 "
                        "(mean 1,000)")
    assert lines[3].startswith("chosen / default: 1.82x")


def test_search_respects_the_budget():
    clock = FakeClock(10.0)
    measure, _ = searcher(clock)
    result = S.run_search(DEFAULT, grid(), measure, fake_bound, 60.0, warmup=5, seconds=10, clock=clock)
    # each start needs now + 3 x 10 s (it and the two repeats) <= 60: at 0, 10, 20 and 30 s; not at 40
    assert [t.stage for t in result.trials] == ["default", "inference", "actors", "actors", "repeat", "repeat"]
    assert clock.now == result.seconds == 60.0
    two = dataclasses.replace(DEFAULT, actors=2)
    assert result.chosen == two and result.scores(two) == [1300.0, 1300.0]
    assert result.notes == ["the budget (60 s) ran out in 'group' (not tried: actors.envs_per_actor=2); dimensions "
                            "not tried: ring, training precision, trainers, inference precision"]
    # before the first trial the estimate is start-up + warm-up + window: 8 + 5 + 10 = 23 s, so a budget of
    # 23 x 3 = 69 s starts nothing but the default and its repeat
    slow = FakeClock(23.0)
    measure, _ = searcher(slow)
    result = S.run_search(DEFAULT, grid(), measure, fake_bound, 69.0, warmup=5, seconds=10, clock=slow)
    assert [t.stage for t in result.trials] == ["default", "repeat"] and result.chosen == DEFAULT
    assert slow.now == 46.0


def test_search_counts_time_spent_before_it_and_the_bound():
    clock = FakeClock(10.0)
    clock.now = 100.0
    measure, _ = searcher(clock)
    # started at 75 s: 25 s are spent already, so the budget of 75 s leaves room for the default, 2 candidates
    result = S.run_search(DEFAULT, grid(), measure, fake_bound, 75.0, warmup=5, seconds=10, clock=clock, start=75.0)
    assert [t.stage for t in result.trials] == ["default", "inference", "actors", "repeat", "repeat"]
    assert clock.now - 75.0 == 75.0


def test_repeats_that_reverse_the_search_keep_the_default():
    clock = FakeClock()
    lucky = dataclasses.replace(DEFAULT, actors=2)
    count = {"n": 0}

    def score(x: S.Layout) -> float:
        if x == lucky:
            count["n"] += 1
            return 1300.0 if count["n"] == 1 else 700.0  # lucky once: the mean 1,000 < 0.95 x the default's
        return 1060.0 if x == DEFAULT else 100.0
    measure, _ = searcher(clock, score)
    result = S.run_search(DEFAULT, grid()[:2], measure, lambda x: None, 1000.0, warmup=5, seconds=10, clock=clock)
    assert result.searched == lucky and result.chosen == DEFAULT
    assert result.scores(lucky) == [1300.0, 700.0] and result.scores(DEFAULT) == [1060.0, 1060.0]
    assert result.notes == ["the repeats reversed the search: actors.count=2 averaged 1,000 against the default's "
                            "1,060; the default is kept"]


def test_confirm_stops_a_lucky_window_from_moving_the_search():
    clock = FakeClock()
    two, four = (dataclasses.replace(DEFAULT, actors=n) for n in (2, 4))
    figures = {two: iter([1300.0, 800.0]), DEFAULT: iter([1000.0, 1040.0, 1000.0]), four: iter([700.0])}
    measure, seen = searcher(clock, lambda x: next(figures[x]) if x in figures else 10.0)
    result = S.run_search(DEFAULT, grid()[:2], measure, lambda x: None, 1000.0, warmup=5, seconds=10, clock=clock,
                          confirm=True)
    # actors=2 wins its dimension on one window (1,300), then is confirmed against the default:
    # means 1,050 (1,300, 800) and 1,020 (1,000, 1,040) tie within 5% (>= 997.5): the incumbent stays
    assert [(t.stage, t.layout.changes(DEFAULT), t.score) for t in result.trials] == [
        ("default", "(default)", 1000.0), ("inference", "policy.inline=false", 10.0),
        ("actors", "actors.count=2", 1300.0), ("actors", "actors.count=4", 700.0),
        ("confirm", "actors.count=2", 800.0), ("confirm", "(default)", 1040.0), ("repeat", "(default)", 1000.0)]
    assert result.searched == result.chosen == DEFAULT
    # without confirm the same figures move the search to actors=2 (the repeats then reverse it)
    clock = FakeClock()
    figures = {two: iter([1300.0, 900.0]), DEFAULT: iter([1000.0, 1040.0]), four: iter([700.0])}
    measure, _ = searcher(clock, lambda x: next(figures[x]) if x in figures else 10.0)
    result = S.run_search(DEFAULT, grid()[:2], measure, lambda x: None, 1000.0, warmup=5, seconds=10, clock=clock)
    assert result.searched == two and [t.stage for t in result.trials][-2:] == ["repeat", "repeat"]
    # with the hand-made figures of test_search_picks_the_best, confirm adds two trials per change (4 changes)
    clock = FakeClock()
    measure, _ = searcher(clock)
    result = S.run_search(DEFAULT, grid(), measure, fake_bound, 1000.0, warmup=5, seconds=10, clock=clock,
                          confirm=True)
    assert [t.stage for t in result.trials].count("confirm") == 8 and len(result.trials) == 20
    assert result.chosen.changes(DEFAULT) == ("actors.count=2, actors.envs_per_actor=8, actors.ring_size=2, "
                                              "algo.precision=bfloat16, policy.precision=bfloat16")


def test_more_repeats_interleave_and_the_noise_is_stated():
    clock = FakeClock()
    two = dataclasses.replace(DEFAULT, actors=2)
    figures = {two: iter([1300.0, 1000.0, 1200.0]), DEFAULT: iter([1000.0, 1100.0, 1000.0])}
    measure, seen = searcher(clock, lambda x: next(figures[x]) if x in figures else 10.0)
    # trials of 10 s, each start needs now + (1 + 2 x 2) x 10 s <= 70: at 0, 10 and 20 s, not at 30 s (80 s)
    result = S.run_search(DEFAULT, grid()[:2], measure, lambda x: None, 70.0, warmup=5, seconds=10, clock=clock,
                          repeats=2)
    assert [t.stage for t in result.trials] == ["default", "inference", "actors", "repeat", "repeat", "repeat",
                                                "repeat"]
    assert seen[3:] == [two, DEFAULT, two, DEFAULT]  # interleaved
    assert result.notes == ["the budget (70 s) ran out in 'actors' (not tried: actors.count=4)"]
    # means 1,166.7 and 1,033.3: 1.13x, within the noise of the chosen's 1,300 vs 1,000 (23%)
    assert result.chosen == two
    assert S.summary_lines(result, "trained env steps/s")[3:6] == [
        "chosen / default: 1.13x (means of each one's measurements; the spread of each one's figures is the noise)",
        "noise: one layout's figures differed by up to 23% (highest - lowest, over the highest)",
        "the difference between the chosen and the default is within that noise: search again on a quieter machine, "
        "or with a longer --seconds or more --repeats, before relying on it"]
    assert S.minimum_budget_s(5.0, 10.0, 15.0, repeats=2)[0] == 15.0 + 6 * 23.0


def test_failed_and_refused_layouts_are_rows_not_stops():
    clock = FakeClock()
    worker = dataclasses.replace(DEFAULT, inline=False)
    measure, _ = searcher(clock, fail=(worker,))
    result = S.run_search(DEFAULT, grid()[:2], measure, fake_bound, 1000.0, warmup=5, seconds=10, clock=clock,
                          valid=lambda x: "actors.count=4 is refused here" if x.actors == 4 else None)
    rows = [(t.stage, t.layout.changes(DEFAULT), t.score, t.error) for t in result.trials]
    assert rows == [("default", "(default)", 1000.0, ""),
                    ("inference", "policy.inline=false", None,
                     "the run ended by itself (exit 1) before the window was measured"),
                    ("actors", "actors.count=2", 1300.0, ""),
                    ("repeat", "actors.count=2", 1300.0, ""), ("repeat", "(default)", 1000.0, "")]
    assert result.notes == ["actors: skipped actors.count=4: actors.count=4 is refused here"]
    assert S.table_rows(result)[1] == ("2", "inference", "policy.inline=false", "-", "10,100", "-", "10",
                                       "the run ended by itself (exit 1) before the window was measured")
    assert S.table_rows(result)[2] == ("3 *", "actors", "actors.count=2", "1,300", "10,100", "13%", "10",
                                       "trial 3")


def test_minimum_budget_arithmetic():
    need, text = S.minimum_budget_s(5.0, 10.0, 15.0)
    assert need == 107.0  # 15 + 4 x (8 + 5 + 10)
    assert text.endswith("= 107 s") and "4 trials" in text


def test_toml_text_tables_and_values():
    text = S.toml_text({"algo_name": "ppo", "sample_length": 128, "actors.count": 2, "policy.inline": True,
                        "algo.lr": 0.00025, "algo.hidden": [64, 64], "streams.sample.options.slots": 16,
                        "algo.precision": "bfloat16"}, ["made by a test", ""])
    assert text == ('# made by a test\n#\n\nalgo_name = "ppo"\nsample_length = 128\n\n[actors]\ncount = 2\n\n'
                    '[policy]\ninline = true\n\n[algo]\nlr = 0.00025\nhidden = [64, 64]\nprecision = "bfloat16"\n\n'
                    '[streams.sample.options]\nslots = 16\n')


def test_written_toml_round_trips_through_the_config_loader(tmp_path, two_cores):
    """The file the search writes for the CartPole workload and a layout, read by build_config as
    ``zoo train ppo --env CartPole-v1 --config FILE`` reads it: the exact values come back (the
    layout's 2 trainer threads: on 2 cores, ``two_cores``, whatever this machine has)."""
    from zoo.bench.measure import bench_config
    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry

    w = get_workload("cartpole")
    layout = S.Layout(actors=2, envs_per_actor=4, ring_size=2, inline=False, policy_workers=1, trainer_threads=2,
                      algo_precision="bfloat16", policy_precision="bfloat16")
    cfg = bench_config(w.algo, w.env, [*w.overrides, *layout.overrides()], learn=True, runs_dir=str(tmp_path),
                       name="t")
    keys = [*(o.partition("=")[0] for o in w.overrides), *S.LAYOUT_KEYS]
    values = {"algo_name": "ppo", "env_name": "CartPole-v1", **S.config_values(cfg, keys)}
    path = tmp_path / "best.toml"
    path.write_text(S.toml_text(values, ["a test"]))
    loaded = build_config(get_registry(), "ppo", "CartPole-v1", config_file=path, overrides=[f"runs_dir={tmp_path}"])
    assert S.config_values(loaded, keys) == {k: v for k, v in values.items() if "." in k or k == "sample_length"}
    assert (loaded.actors.count, loaded.actors.envs_per_actor, loaded.actors.ring_size) == (2, 4, 2)
    assert (loaded.policy.inline, loaded.policy.count, loaded.trainer.threads) == (False, 1, 2)
    assert (loaded.algo.precision, loaded.policy.precision) == ("bfloat16", "bfloat16")
    assert (loaded.algo.lr, loaded.algo.clip_vloss, loaded.trainer.batch_samples) == (2.5e-4, True, 4)
    # the file names its workload: another env is refused with the fix
    from zoo.core.config import ConfigError
    with pytest.raises(ConfigError, match="env_name = 'CartPole-v1' but the command line says 'Acrobot-v1'"):
        build_config(get_registry(), "ppo", "Acrobot-v1", config_file=path)


def test_cli_search_refuses_bad_input_before_anything_starts(tmp_path):
    from zoo.cli import build_app
    from zoo.core.plugins import get_host

    app = build_app(get_host())  # with the plugin commands, `zoo bench` among them
    r = runner.invoke(app, ["bench", "--search", "--workload", "cartpole", "--budget-s", "30", "--out",
                            str(tmp_path / "x.toml")])
    assert r.exit_code == 2
    # env cost 8 + 5 + 2 = 15 s, trials 8 + 5 + 10 = 23 s: 15 + 4 x 23 = 107 s
    assert "--budget-s 30 is too short for one candidate" in r.output and "= 107 s; give --budget-s 107" in r.output
    assert list(tmp_path.iterdir()) == []
    r = runner.invoke(app, ["bench", "--search", "--workload", "nope"])
    assert r.exit_code == 2 and "--workload 'nope' is not a known workload" in r.output
    r = runner.invoke(app, ["bench", "--search", "--objective", "fast"])
    assert r.exit_code == 2 and "--objective 'fast' is not known" in r.output
    r = runner.invoke(app, ["bench", "--search", "--out", str(tmp_path / "no" / "x.toml")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["bench", "--budget-s", "100"])
    assert r.exit_code == 2 and "--budget-s applies only with --search" in r.output
    r = runner.invoke(app, ["bench", "--confirm"])
    assert r.exit_code == 2 and "--confirm applies only with --search" in r.output
    r = runner.invoke(app, ["bench", "--repeats", "3"])
    assert r.exit_code == 2 and "--repeats applies only with --search" in r.output
    # 2 repeats: env cost 15 s + 6 trials x 23 s = 153 s
    r = runner.invoke(app, ["bench", "--search", "--workload", "cartpole", "--repeats", "2", "--budget-s", "150"])
    assert r.exit_code == 2 and "6 trials (the default, one candidate, then both 2 times again)" in r.output
    assert "= 153 s; give --budget-s 153" in r.output
    r = runner.invoke(app, ["bench", "--search", "--phases", "train"])
    assert r.exit_code == 2 and "--phases does not apply with --search" in r.output


def test_ctrl_c_during_a_measured_run_stops_the_measuring(tmp_path, monkeypatch):
    """A run stopped by Ctrl-C (exit 130 before its window) raised BenchError, so ``zoo bench``
    went on to its next phase and a search to its next trial; now KeyboardInterrupt. A run that
    ended by itself is still a BenchError."""
    from types import SimpleNamespace

    import zoo.core.controller as controller
    from zoo.bench.measure import BenchError, measure_run

    cfg = SimpleNamespace(algo_name="ppo", env_name="CartPole-v1", trainer=SimpleNamespace(learn=True), spec=None)
    monkeypatch.setattr(controller, "prepare_run_dir", lambda cfg: str(tmp_path / "run"))
    monkeypatch.setattr(controller, "run", lambda cfg, spec, listener, run_dir: 130)
    with pytest.raises(KeyboardInterrupt):
        measure_run(cfg, seconds=1.0, warmup=0.0, limit_s=10.0)
    monkeypatch.setattr(controller, "run", lambda cfg, spec, listener, run_dir: 0)
    with pytest.raises(BenchError, match=r"the run ended by itself \(exit 0\)"):
        measure_run(cfg, seconds=1.0, warmup=0.0, limit_s=10.0)
