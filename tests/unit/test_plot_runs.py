"""``zoo plot`` and ``zoo runs`` on run folders written by hand (``zoo eval``: tests/integration/test_eval.py)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

import zoo.cli as cli
from zoo.core.plugins import get_host
from zoo.plotting import plot_runs, smooth_curve
from zoo.runinfo import RunError, read_metrics, run_info

runner = CliRunner()


@pytest.fixture(scope="module")
def app():
    return cli.build_app(get_host())


def invoke(app, args):
    return runner.invoke(app, args)


def write_run(root: Path, name: str, rows: list[dict], config: dict | None = None, status: dict | None = None) -> Path:
    """A run folder written by hand: config.json, metrics.jsonl, optional status.json."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    cfg = {"algo_name": "ppo", "env_name": "CartPole-v1", "seed": 1, "name": name, "runs_dir": str(root),
           "env_steps": 100, "frames": 0, "env_spec": {"frame_skip": 1}}
    cfg.update(config or {})
    (run_dir / "config.json").write_text(json.dumps(cfg))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if status is not None:
        (run_dir / "status.json").write_text(json.dumps(status))
    return run_dir


def one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "\n" not in text, text  # a single line
    assert text.startswith("error: ")
    for needle in needles:
        assert needle in text, text


# ----------------------------------------------------------------------------- zoo plot
def episodes(steps, returns, **extra):
    return [{"type": "episode", "env_steps": s, "return": r, "length": 10, **extra}
            for s, r in zip(steps, returns, strict=True)]


def test_plot_draws_each_runs_rows_and_writes_a_png(tmp_path, app):
    a = write_run(tmp_path, "a", episodes([10, 20, 30], [1.0, 2.0, 6.0]))
    b = write_run(tmp_path, "b", episodes([5, 15], [4.0, 5.0]), config={"algo_name": "impala"})
    fig = plot_runs([a, b], smooth=1)
    lines = {line.get_gid(): line for line in fig.axes[0].lines}
    assert lines["a|return"].get_xydata().tolist() == [[10, 1], [20, 2], [30, 6]]
    assert lines["b|return"].get_xydata().tolist() == [[5, 4], [15, 5]]
    assert fig.axes[0].get_xlabel().startswith("env steps")
    # smoothing: trailing mean of 2 rows -> (1+2)/2, (2+6)/2 at the second and third rows
    fig = plot_runs([a], smooth=2)
    assert fig.axes[0].lines[0].get_xydata().tolist() == [[20, 1.5], [30, 4.0]]
    png = tmp_path / "curves.png"
    result = invoke(app, ["plot", str(a), str(b), "--out", str(png), "--smooth", "1"])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_frames_time_and_team_defaults(tmp_path):
    rows = episodes([10, 30], [1.0, 3.0], hider_return=2.0, seeker_return=-2.0)
    rows += [{"type": "update", "env_steps": 20, "frames": 80, "time_s": 2.0},
             {"type": "update", "env_steps": 40, "frames": 160, "time_s": 6.0}]
    run = write_run(tmp_path, "hns", rows, config={"env_spec": {"frame_skip": 4}})
    fig = plot_runs([run], smooth=1)  # default: the per-team returns
    assert sorted(line.get_gid() for line in fig.axes[0].lines) == ["hns|hider_return", "hns|seeker_return"]
    fig = plot_runs([run], ["return"], x="frames", smooth=1)
    assert fig.axes[0].lines[0].get_xdata().tolist() == [40, 120]  # 10 x 4, 30 x 4
    assert "frames" in fig.axes[0].get_xlabel()
    # wall time: episodes have no time_s; interpolated between (0, 0 s), (20, 2 s), (40, 6 s):
    # 10 -> 1.0 s, 30 -> 2 + (30 - 20) / 20 x 4 = 4.0 s
    fig = plot_runs([run], ["return"], x="time", smooth=1)
    assert fig.axes[0].lines[0].get_xdata().tolist() == [1.0, 4.0]
    assert "(s)" in fig.axes[0].get_xlabel()


def test_runs_differing_only_in_seed_are_a_mean_with_a_band(tmp_path):
    a = write_run(tmp_path, "cp-s1", episodes([10, 20, 30], [1.0, 2.0, 3.0]), config={"seed": 1})
    b = write_run(tmp_path, "cp-s2", episodes([10, 20, 30], [3.0, 4.0, 5.0]), config={"seed": 2})
    fig = plot_runs([a, b], smooth=1)
    (line,) = fig.axes[0].lines
    assert line.get_xydata().tolist() == [[10, 2], [20, 3], [30, 4]]  # (1+3)/2, (2+4)/2, (3+5)/2
    (band,) = fig.axes[0].collections
    assert band.get_gid().endswith("|band")
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == 1.0 and ys.max() == 5.0  # mean -+ std, std = 1 at every point
    assert "seeds 1, 2" in line.get_label()


def test_smooth_curve_window():
    x, y = np.arange(4.0), np.array([0.0, 2.0, 4.0, 8.0])
    assert smooth_curve(x, y, 3)[1].tolist() == [2.0, 14 / 3]  # (0+2+4)/3, (2+4+8)/3
    assert smooth_curve(x, y, 9)[1].tolist() == [3.5]  # capped at 4 rows: 14/4


def test_plot_bad_input_is_one_line_exit_2(tmp_path, app):
    run = write_run(tmp_path, "a", episodes([10], [1.0]) + [{"type": "update", "env_steps": 10, "pg_loss": 0.5}])
    one_line_error(invoke(app, ["plot", str(run), "--y", "nope", "--out", str(tmp_path / "p.png")]),
                   "unknown metric 'nope'", "return, length, pg_loss")
    one_line_error(invoke(app, ["plot", str(tmp_path / "missing"), "--out", str(tmp_path / "p.png")]),
                   "does not exist")


# named policies: update rows carry "policy", episode rows "<P>_return" (written by the episode writer, lead)
TEAM_ROWS = [
    {"type": "episode", "env_steps": 10, "return": -3.0, "length": 25, "lead_return": -1.0, "rest_return": -4.0,
     "policy": "lead"},
    {"type": "update", "env_steps": 20, "policy_version": 1, "v_loss": 0.5, "policy": "rest"},
    {"type": "update", "env_steps": 20, "policy_version": 1, "v_loss": 0.9, "policy": "lead"},
    {"type": "episode", "env_steps": 30, "return": -2.0, "length": 20, "lead_return": 0.0, "rest_return": -3.0,
     "policy": "lead"},
    {"type": "update", "env_steps": 40, "policy_version": 2, "v_loss": 0.25, "kl": 0.1, "policy": "rest"},
    {"type": "update", "env_steps": 40, "policy_version": 2, "v_loss": 0.7, "policy": "lead"},
]
TEAMS = {"policies": {"lead": {"agents": ["agent_0"]}, "rest": {"agents": ["agent_1", "agent_2"]}}}


def drawn(fig) -> dict[str, list]:
    return {line.get_gid(): line.get_xydata().tolist() for line in fig.axes[0].lines}


def test_every_named_policy_is_its_own_line_with_a_legend(tmp_path):
    run = write_run(tmp_path, "teams", TEAM_ROWS, config=TEAMS)
    fig = plot_runs([run], smooth=1)  # default: each policy's return
    assert drawn(fig) == {"teams|lead_return": [[10, -1], [30, 0]], "teams|rest_return": [[10, -4], [30, -3]]}
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["teams: lead return", "teams: rest return"]
    assert fig.axes[0].get_ylabel() == "return per episode (mean over the policy's agents)"
    # an update-row metric: each policy's own rows
    fig = plot_runs([run], ["v_loss"], smooth=1)
    assert drawn(fig) == {"teams|v_loss@lead": [[20, 0.9], [40, 0.7]], "teams|v_loss@rest": [[20, 0.5], [40, 0.25]]}
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["teams: lead v_loss", "teams: rest v_loss"]
    # one only rest logged: lead (as a frozen opponent, which has no update rows or ratings) is left out
    assert drawn(plot_runs([run], ["kl"], smooth=1)) == {"teams|kl@rest": [[40, 0.1]]}


def test_policy_draws_only_that_policys_rows(tmp_path, app):
    run = write_run(tmp_path, "teams", TEAM_ROWS, config=TEAMS)
    assert drawn(plot_runs([run], smooth=1, policies=["rest"])) == {"teams|rest_return": [[10, -4], [30, -3]]}
    fig = plot_runs([run], ["return", "v_loss", "length"], smooth=1, policies=["lead"])
    assert drawn(fig) == {"teams|lead_return": [[10, -1], [30, 0]], "teams|v_loss@lead": [[20, 0.9], [40, 0.7]],
                          "teams|length": [[10, 25], [30, 20]]}  # length: the run's episodes, one line
    with pytest.raises(RunError) as err:
        plot_runs([run], ["kl"], policies=["lead"])
    assert str(err.value) == ("unknown metric 'kl' for policy lead of run 'teams'; it logged: return, length, "
                              "lead_return, rest_return, policy_version, v_loss")
    png = tmp_path / "p.png"
    result = invoke(app, ["plot", str(run), "--policy", "rest,lead", "--out", str(png), "--smooth", "1"])
    assert result.exit_code == 0 and png.is_file(), result.output
    one_line_error(invoke(app, ["plot", str(run), "--policy", "lead", "--policy", "leader", "--out", str(png)]),
                   "--policy leader: run 'teams' has no policy 'leader'; its policies: lead, rest")
    one_line_error(invoke(app, ["plot", str(run), "--policy", "lead,", "--out", str(png)]),
                   "--policy 'lead,': give policy names")


def test_a_run_without_named_policies_has_one_called_default(tmp_path):
    run = write_run(tmp_path, "cp", episodes([10, 20], [1.0, 2.0]))
    assert drawn(plot_runs([run], smooth=1, policies=["default"])) == {"cp|return": [[10, 1], [20, 2]]}
    with pytest.raises(RunError) as err:
        plot_runs([run], policies=["lead"])
    assert str(err.value) == ("--policy lead: run 'cp' has no policy 'lead'; it names no policies (its one policy: "
                              "default)")


# ----------------------------------------------------------------------------- zoo runs
def render(table) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def test_runs_shows_finished_stopped_and_crashed(tmp_path, app):
    from zoo.commands.runs import runs_table

    end = {"type": "end", "env_steps": 100, "time_s": 61.0, "episode_return_mean": 42.5}
    started = 1_000.0
    write_run(tmp_path, "done", [end], status={"status": "finished", "pid": 1, "host": "h", "started": started,
                                               "ended": started + 75, "exit_code": 0, "reason": "budget reached",
                                               "failed_worker": None})
    write_run(tmp_path, "ctrl-c", [{**end, "env_steps": 40}],
              status={"status": "stopped", "pid": 1, "host": "h", "started": started, "ended": started + 30,
                      "exit_code": 130, "reason": "Ctrl-C", "failed_worker": None})
    write_run(tmp_path, "boom", [{"type": "update", "env_steps": 60, "time_s": 9.0}],
              status={"status": "crashed", "pid": 1, "host": "h", "started": started, "ended": started + 10,
                      "exit_code": 1, "reason": "a worker failed",
                      "failed_worker": {"role": "actor", "index": 1,
                                        "detail": "Traceback (most recent call last):\n  File \"a.py\", line 1\n"
                                                  "ValueError: bad action\n"}})
    text = render(runs_table(tmp_path, now=started + 100))
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert "finished" in rows["done"] and "100 / 100" in rows["done"] and "42.50" in rows["done"]
    assert "1m15s" in rows["done"]  # ended - started = 75 s
    assert "stopped: Ctrl-C" in rows["ctrl-c"] and "40 / 100" in rows["ctrl-c"]
    assert "crashed: actor 1 failed: ValueError: bad action" in rows["boom"]
    result = invoke(app, ["runs", str(tmp_path)])
    assert result.exit_code == 0 and "crashed" in result.output


def test_runs_status_fallbacks(tmp_path):
    # no status.json: an end row at the budget is finished, before it stopped, none unknown
    assert run_info(write_run(tmp_path, "a", [{"type": "end", "env_steps": 128}])).status == "finished"
    assert run_info(write_run(tmp_path, "b", [{"type": "end", "env_steps": 64}])).status == "stopped"
    assert run_info(write_run(tmp_path, "c", [{"type": "update", "env_steps": 64}])).status == "unknown"
    # frames budget: 400 frames / frame-skip 4 = 100 env steps
    d = write_run(tmp_path, "d", [{"type": "end", "env_steps": 100}],
                  config={"env_steps": 0, "frames": 400, "env_spec": {"frame_skip": 4}})
    assert run_info(d).status == "finished" and run_info(d).budget_env_steps == 100
    # "running" whose controller is gone (a pid that exited) on this host: crashed
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = write_run(tmp_path, "e", [], status={"status": "running", "pid": int(proc.stdout), "started": 1.0,
                                                "host": socket.gethostname(), "ended": None})
    info = run_info(gone)
    assert (info.status, info.detail) == ("crashed", "controller gone")
    alive = write_run(tmp_path, "f", [], status={"status": "running", "pid": os.getpid(), "started": 1.0,
                                                 "host": socket.gethostname(), "ended": None})
    assert run_info(alive, now=11.0).status == "running" and run_info(alive, now=11.0).duration_s == 10.0


def test_runs_shows_the_total_duration_of_a_resumed_run(tmp_path, monkeypatch):
    # Segment 1 ran 100 s and stopped; the resume ran 30 s. Before: zoo runs showed 30 s.
    import zoo.core.rundir as rundir

    run_dir = write_run(tmp_path, "r", [{"type": "end", "env_steps": 100}])
    clock = {"now": 1000.0}
    monkeypatch.setattr(rundir.time, "time", lambda: clock["now"])
    first = rundir.RunStatus(str(run_dir))
    first.start()
    clock["now"] = 1100.0
    first.end("stopped", 130, "Ctrl-C")
    clock["now"] = 2000.0
    second = rundir.RunStatus(str(run_dir))
    second.start()
    clock["now"] = 2030.0
    second.end("finished", 0, "budget reached")
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["segments"], status["earlier_s"], status["started"], status["ended"]) == (2, 100.0, 2000.0, 2030.0)
    assert run_info(run_dir).duration_s == 130.0


def test_runs_of_a_missing_folder_is_one_line_exit_2(tmp_path, app):
    one_line_error(invoke(app, ["runs", str(tmp_path / "nowhere")]), "does not exist")
    # The fix names the argument (was "give the runs_dir your runs were written to", and `zoo runs` has no runs_dir).
    result = invoke(app, ["runs", str(tmp_path / "nowhere")])
    assert result.output.strip() == (
        f"error: runs folder {str(tmp_path / 'nowhere')!r} does not exist; give the folder your runs were written to: "
        "zoo runs PATH (zoo train writes to ./runs unless --set runs_dir=PATH)")


def test_an_archived_run_with_gzipped_metrics_plots_the_same(tmp_path):
    import gzip

    rows = episodes([10, 20], [1.0, 3.0])
    run = write_run(tmp_path, "archived", rows)
    data = (run / "metrics.jsonl").read_bytes()
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl.gz").write_bytes(gzip.compress(data))
    fig = plot_runs([run], ["return"], smooth=1)
    assert fig.axes[0].lines[0].get_xydata().tolist() == [[10, 1], [20, 3]]


def test_the_committed_demo_run_reads_back():
    """benchmarks/data/hide-and-seek-demo: the run behind the README's learning-curve PNG."""
    run = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "hide-and-seek-demo"
    fig = plot_runs([run], smooth=1)
    lines = {line.get_gid(): line for line in fig.axes[0].lines}
    assert set(lines) == {"hide-and-seek-demo|hider_return", "hide-and-seek-demo|seeker_return"}
    # 101,116 env steps of 80-step episodes: 1,260 episodes, zero-sum between the teams, ending at 157
    # env-step values (the envs of a sample end their episodes together): one point each, their mean
    hider = lines["hide-and-seek-demo|hider_return"].get_ydata()
    seeker = lines["hide-and-seek-demo|seeker_return"].get_ydata()
    episodes = [r for r in read_metrics(run) if r.get("type") == "episode"]
    assert len(episodes) == 1260 and len({r["env_steps"] for r in episodes}) == 157
    assert len(hider) == 157 and np.array_equal(hider, -seeker)


def test_episodes_that_share_an_env_step_value_are_one_point_their_mean(tmp_path):
    # one sample of a ring group of 4 MPE envs ends 4 episodes at once: 4 rows at env step 100, 4 at 200
    rows = [{"type": "episode", "env_steps": s, "return": r, "length": 25, "lead_return": r, "rest_return": 2 * r,
             "policy": "lead"} for s, r in ((100, -10.0), (100, -30.0), (100, -20.0), (100, -40.0),
                                            (200, -5.0), (200, -15.0), (200, -10.0), (200, -10.0))]
    run = write_run(tmp_path, "teams", rows, config=TEAMS)
    # drawn row by row the line went 100:-10 -> -30 -> -20 -> -40 -> 200:-5 ...: spikes at one x
    assert drawn(plot_runs([run], smooth=1)) == {"teams|lead_return": [[100, -25], [200, -10]],
                                                 "teams|rest_return": [[100, -50], [200, -20]]}
    assert drawn(plot_runs([run], smooth=2)) == {"teams|lead_return": [[200, -17.5]],
                                                 "teams|rest_return": [[200, -35]]}
