"""``zoo plot RUN --pbt`` on PBT run folders written by hand, with the rows the population manager
writes (core/pbt.py ``Population.round`` and ``PopulationManager.tick``; docs/pbt.md "Rows")."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import zoo.cli as cli
from tests.unit.fakes import one_line_error
from zoo.core.pbt import PBTOptions
from zoo.core.plugins import get_host
from zoo.population_plot import Exploit, log_scaled, plot_population, population_history
from zoo.runinfo import RunError

runner = CliRunner()

LR, EPOCHS = "algo.lr", "algo.epochs"
PBT = dataclasses.asdict(PBTOptions(members=3, interval_env_steps=20_000, fraction=0.34,
                                    hyperparameters={LR: [1e-5, 1e-3], EPOCHS: [2, 8]}))


def decision(env_steps, member, source, objective, from_objective, old, copied, new):
    """The exploit and explore rows of one exploiting member, as PopulationManager.tick appends them."""
    common = {"type": "pbt", "env_steps": env_steps, "member": member, "from_member": source,
              "objective": objective, "from_objective": from_objective, "objective_name": "return"}
    names = {"member_policy": f"default_{member}", "from_policy": f"default_{source}"}
    return [{**common, "event": "exploit", "old_hyperparameters": old, "new_hyperparameters": copied, **names},
            {**common, "event": "explore", "old_hyperparameters": copied, "new_hyperparameters": new, **names}]


# Three members start with lr 3e-4 / 1e-4 / 5e-5 and epochs 4 / 6 / 8 (fraction 0.34: one exploits per round).
# Round at 20,000 (objectives 50, 20, 10): member 2 copies member 0 (lr 3e-4, epochs 4) and explores
# lr x 1.2 = 3.6e-4, epochs x 0.8 = 3.2 -> 3. Round at 40,000 (objectives 40, 60, 45): member 0 copies
# member 1 (1e-4, 6) and explores lr x 0.8 = 8e-5, epochs x 1.2 = 7.2 -> 7. Member 1 never exploits.
OBJECTIVES = {0: [10.0, 50.0, 55.0, 40.0, 70.0], 1: [5.0, 20.0, 40.0, 60.0, 65.0], 2: [1.0, 10.0, 35.0, 45.0, 50.0]}
UPDATES = [{"type": "update", "env_steps": s, "policy": f"default_{m}", "episode_return_mean": ys[k], "lr": 1e-4}
           for k, s in enumerate((10_000, 20_000, 30_000, 40_000, 50_000)) for m, ys in OBJECTIVES.items()]
ROWS = (UPDATES[:6]
        + decision(20_000, 2, 0, 10.0, 50.0, {EPOCHS: 8.0, LR: 5e-5}, {EPOCHS: 4.0, LR: 3e-4},
                   {EPOCHS: 3.0, LR: 3.6e-4})
        + [{"type": "pbt", "event": "applied", "env_steps": 21_000, "member_policy": "default_2",
            "from_policy": "default_0", "seq": 1, "round_env_steps": 20_000,
            "hyperparameters": {EPOCHS: 3.0, LR: 3.6e-4}}]
        + UPDATES[6:12]
        + decision(40_000, 0, 1, 40.0, 60.0, {EPOCHS: 4.0, LR: 3e-4}, {EPOCHS: 6.0, LR: 1e-4}, {EPOCHS: 7.0, LR: 8e-5})
        + UPDATES[12:])
CONFIG = {"algo_name": "ppo", "env_name": "CartPole-v1", "seed": 1, "env_steps": 50_000, "frames": 0,
          "env_spec": {"frame_skip": 1}, "algo": {"lr": 3e-4, "epochs": 4}, "pbt": PBT}


def write_run(root: Path, name: str, rows: list[dict], config: dict, saved: dict | None = None) -> Path:
    """A run folder as zoo train writes it: config.json, metrics.jsonl, optional pbt/population.json."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({**config, "name": name, "runs_dir": str(root)}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if saved is not None:
        (run_dir / "pbt").mkdir()
        (run_dir / "pbt" / "population.json").write_text(json.dumps({"population": saved, "seq": [1, 0, 1]}))
    return run_dir


def test_each_members_hyperparameters_change_at_its_explores():
    history = population_history(CONFIG, ROWS)
    assert history.members == ["default_0", "default_1", "default_2"]
    assert history.hyperparameters == [EPOCHS, LR]
    # member 2: lr 5e-5 until the round at 20,000, then 3.6e-4 (member 0's 3e-4 x 1.2); member 0 changes at
    # 40,000; member 1 never exploits: its values since env step 0 are those member 0 copied from it
    assert history.values[LR] == [[(0, 3e-4), (40_000, 8e-5)], [(0, 1e-4)], [(0, 5e-5), (20_000, 3.6e-4)]]
    assert history.values[EPOCHS] == [[(0, 4.0), (40_000, 7.0)], [(0, 6.0)], [(0, 8.0), (20_000, 3.0)]]
    assert history.exploits == [Exploit(20_000, 2, 0, 10.0, 50.0), Exploit(40_000, 0, 1, 40.0, 60.0)]
    assert history.end_env_steps == 50_000
    assert history.objective == "return"
    assert log_scaled(LR, history) and not log_scaled(EPOCHS, history)  # [1e-5, 1e-3]: x100; [2, 8]: x4


def test_a_member_in_no_row_takes_its_values_from_the_saved_population():
    config = {**CONFIG, "pbt": {**PBT, "members": 4}}
    saved = {"next_at": 60_000, "rng": [], "members": [
        {"index": 0, "hyperparameters": {EPOCHS: 7.0, LR: 8e-5}, "lineage": [[40_000, 1]]},
        {"index": 1, "hyperparameters": {EPOCHS: 6.0, LR: 1e-4}, "lineage": []},
        {"index": 2, "hyperparameters": {EPOCHS: 3.0, LR: 3.6e-4}, "lineage": [[20_000, 0]]},
        {"index": 3, "hyperparameters": {EPOCHS: 5.0, LR: 2e-5}, "lineage": []}]}
    assert population_history(config, ROWS, saved).values[LR][3] == [(0, 2e-5)]
    assert population_history(config, ROWS).values[LR][3] == []  # no row and no saved state: not drawn
    # "[]" (the option's declared bounds): the log axis is decided on the values drawn, 2e-5 .. 3.6e-4: x18
    ranged = population_history({**config, "pbt": {**config["pbt"], "hyperparameters": {LR: [], EPOCHS: []}}},
                                ROWS, saved)
    assert log_scaled(LR, ranged) and not log_scaled(EPOCHS, ranged)  # epochs 3 .. 8


def test_the_figure_draws_objectives_copies_and_step_lines(tmp_path):
    fig = plot_population(write_run(tmp_path, "pop", ROWS, CONFIG), smooth=1)
    top, tree, epochs, lr = fig.axes
    lines = {line.get_gid(): line for ax in fig.axes for line in ax.lines if line.get_gid()}
    assert lines["objective|default_2"].get_xydata().tolist() == [
        [10_000, 1.0], [20_000, 10.0], [30_000, 35.0], [40_000, 45.0], [50_000, 50.0]]
    assert lines[f"{LR}|default_2"].get_xydata().tolist() == [[0, 5e-5], [20_000, 3.6e-4], [50_000, 3.6e-4]]
    assert lines[f"{LR}|default_2"].get_drawstyle() == "steps-post"
    assert lines[f"{LR}|default_1"].get_xydata().tolist() == [[0, 1e-4], [50_000, 1e-4]]
    assert lines[f"{EPOCHS}|default_0"].get_xydata().tolist() == [[0, 4], [40_000, 7], [50_000, 7]]
    assert lr.get_yscale() == "log" and epochs.get_yscale() == "linear"
    copies = {t.get_gid(): (t.xy, t.xyann) for t in top.texts}
    assert copies == {"copy|default_2|20000": ((20_000, 10.0), (20_000, 50.0)),
                      "copy|default_0|40000": ((40_000, 40.0), (40_000, 60.0))}
    # the lineage panel: one row per member (y = its index), an arrow from the source's row to the member's
    edges = {t.get_gid(): (t.xy, t.xyann) for t in tree.texts}
    assert edges == {"lineage|default_2|20000": ((20_000, 2), (20_000, 0)),
                     "lineage|default_0|40000": ((40_000, 0), (40_000, 1))}
    assert [t.get_text() for t in tree.get_yticklabels()] == ["default_0", "default_1", "default_2"]
    assert [t.get_text() for t in top.get_legend().get_texts()] == ["default_0", "default_1", "default_2"]
    assert lr.get_ylabel() == f"{LR}\n(log scale)" and lr.get_xlabel().startswith("env steps")


@pytest.fixture(scope="module")
def app():
    return cli.build_app(get_host())


def test_zoo_plot_pbt_writes_a_png(tmp_path, app):
    run = write_run(tmp_path, "pop", ROWS, CONFIG)
    png = tmp_path / "pop.png"
    result = runner.invoke(app, ["plot", str(run), "--pbt", "--out", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_zoo_plot_pbt_refuses_a_run_without_a_population_in_one_line(tmp_path, app):
    png = tmp_path / "p.png"
    plain = {k: v for k, v in CONFIG.items() if k != "pbt"}
    run = write_run(tmp_path, "plain", [{"type": "episode", "env_steps": 10, "return": 1.0}], plain)
    result = runner.invoke(app, ["plot", str(run), "--pbt", "--out", str(png)])
    one_line_error(result)
    assert result.output.strip() == (
        "error: --pbt: run 'plain' did not train a population (its config.json has no pbt table: pbt.members was 0), "
        "so there is no lineage or hyperparameter to draw; plot it without --pbt, or train with --set pbt.members=4 "
        "(docs/pbt.md)")
    assert not png.exists()
    early = write_run(tmp_path, "early", UPDATES[:6], CONFIG)  # a population before its first round
    one_line_error(runner.invoke(app, ["plot", str(early), "--pbt", "--out", str(png)]),
                   "--pbt: run 'early' has no exploit rows in metrics.jsonl yet",
                   "pbt.interval_env_steps=20000", "its members reached 20000")
    pop = write_run(tmp_path, "pop", ROWS, CONFIG)
    one_line_error(runner.invoke(app, ["plot", str(pop), str(pop), "--pbt", "--out", str(png)]),
                   "--pbt draws one run's population; give one run (got 2")
    one_line_error(runner.invoke(app, ["plot", str(pop), "--pbt", "--y", "lr", "--out", str(png)]),
                   "--y 'lr': --pbt draws every member's objective and hyperparameters over env steps; leave out --y")
    one_line_error(runner.invoke(app, ["plot", str(pop), "--pbt", "--x", "time", "--out", str(png)]),
                   "--x 'time'")
    with pytest.raises(RunError):
        plot_population(run)
    assert not png.exists()


def test_rows_the_population_manager_writes_give_each_members_start_lineage_and_end(tmp_path):
    """The format the plot reads is the one PopulationManager.tick appends: six rounds of a population of
    six, objectives drawn at random; each member's series starts at its starting values, changes at its
    lineage's env steps and ends at the manager's saved values."""
    import random

    from zoo.core.pbt import POPULATION_FILE, Population, PopulationManager, Range, member_names
    from zoo.runinfo import read_metrics

    opts = PBTOptions(members=6, interval_env_steps=1000, resample_probability=0.5,
                      hyperparameters={EPOCHS: [1, 10], LR: [1e-5, 1e-3]})
    population = Population(opts, {EPOCHS: Range(1, 10, True), LR: Range(1e-5, 1e-3)}, {EPOCHS: 4, LR: 2.5e-4}, 7)
    start = [dict(m.hyperparameters) for m in population.members]
    names = member_names("default", 6)
    manager = PopulationManager(str(tmp_path), population, names)
    draw = random.Random(0)
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as f:
        for steps in range(1000, 7000, 1000):
            f.writelines(json.dumps({"type": "update", "env_steps": steps, "policy": n,
                                     "episode_return_mean": draw.uniform(0, 100)}) + "\n" for n in names)
            f.flush()
            assert manager.tick(steps)
    saved = json.loads((tmp_path / POPULATION_FILE).read_text())["population"]
    history = population_history({"pbt": dataclasses.asdict(opts)}, read_metrics(tmp_path), saved)
    assert history.end_env_steps == 6000 and len(history.exploits) == 6  # one exploits per round (0.25 x 6)
    for i, member in enumerate(population.members):
        for name in (EPOCHS, LR):
            series = history.values[name][i]
            assert series[0] == (0, start[i][name])
            assert [e for e, _ in series[1:]] == [e for e, _ in member.lineage]
            assert series[-1][1] == member.hyperparameters[name]
    assert [(x.env_steps, x.member, x.from_member) for x in history.exploits] == sorted(
        (e, m.index, j) for m in population.members for e, j in m.lineage)
