"""``benchmarks/peers/time_to_return.py``: the mean-20 tracker, the two line parsers, the file
tail, the medians and the table, each with hand-worked values; and a stop signal's clean-up (one
child process)."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers"))
import time_to_return as ttr  # noqa: E402


# ----------------------------------------------------------------------------- the tracker
def test_tracker_returns_1_to_25():
    tr = ttr.MeanTracker(12.0)
    means = [tr.add(float(i), 100 * i, float(i)) for i in range(1, 26)]
    # no mean before the 20th episode; then the means of 1..20 = 10.5, 2..21 = 11.5, ..., 6..25 = 15.5
    assert means[:19] == [None] * 19
    assert means[19:] == [10.5, 11.5, 12.5, 13.5, 14.5, 15.5]
    # 12.0 first reached at episode 22 (mean of 3..22 = 12.5), t = 22 s, 2,200 env steps
    assert tr.reached == (22.0, 2200, 12.5)
    assert tr.best == (15.5, 25.0, 2500)
    assert tr.result() == {"seconds_to_target": 22.0, "steps_at_target": 2200, "best_mean20": 15.5,
                           "seconds_to_best": 25.0, "steps_at_best": 2500, "episodes": 25, "env_steps": 2500}


def test_tracker_needs_20_episodes_and_keeps_the_first_time_of_the_best():
    tr = ttr.MeanTracker(1.0)
    for i in range(19):
        assert tr.add(float(i), i, 500.0) is None
    assert tr.reached is None and tr.best is None
    assert tr.result()["best_mean20"] is None and tr.result()["seconds_to_target"] is None
    assert tr.add(19.0, 19, 500.0) == 500.0  # the 20th: mean 500 at t = 19
    assert tr.add(30.0, 30, 500.0) == 500.0  # the same mean later: the best's time stays 19
    assert tr.best == (500.0, 19.0, 19)
    assert tr.reached == (19.0, 19, 500.0)


def test_tracker_ignores_episodes_past_the_budget():
    tr = ttr.MeanTracker(450.0, max_steps=200_000)
    for i in range(20):
        tr.add(float(i), 199_000 + i, 10.0)
    # one 500 past 200k would lift the mean to (19 x 10 + 500) / 20 = 34.5: it does not count
    assert tr.add(99.0, 200_512, 500.0) is None
    assert tr.best == (10.0, 19.0, 199_019)
    assert tr.episodes == 20 and tr.env_steps == 199_019


# ----------------------------------------------------------------------------- parsers
def test_parse_cleanrl_episode():
    assert ttr.parse_cleanrl_episode("global_step=1234, episodic_return=21.0\n") == (1234, 21.0)
    assert ttr.parse_cleanrl_episode("global_step=199680, episodic_return=[500.]") == (199680, 500.0)
    assert ttr.parse_cleanrl_episode("global_step=52, episodic_return=-3.5e1") == (52, -35.0)
    assert ttr.parse_cleanrl_episode("SPS: 812") is None
    assert ttr.parse_cleanrl_episode("global_step=52, episodic_length=10") is None


def test_parse_zoo_row():
    row = {"type": "episode", "env_steps": 1234, "return": 21.0, "length": 21}
    assert ttr.parse_zoo_row(json.dumps(row) + "\n") == (1234, 21.0)
    assert ttr.parse_zoo_row('{"type": "update", "env_steps": 256, "episode_return_mean": 14.0}') is None
    assert ttr.parse_zoo_row('{"type": "episode", "env_steps": 12') is None  # a broken line
    assert ttr.parse_zoo_row('{"type": "episode", "env_steps": 12}') is None  # no return
    assert ttr.parse_zoo_row("[1, 2]") is None


def test_tail_gives_whole_lines_once(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = ttr.Tail(path)
    assert tail.lines() == []  # not there yet
    path.write_bytes(b'{"a": 1}\n{"b"')
    assert tail.lines() == ['{"a": 1}']
    with open(path, "ab") as f:
        f.write(b': 2}\n{"c": 3}\n')
    assert tail.lines() == ['{"b": 2}', '{"c": 3}']
    assert tail.lines() == []


def test_median_time_counts_never_as_latest():
    assert ttr.median_time([30.0, None, 10.0]) == 30.0
    assert ttr.median_time([None, None, 10.0]) is None
    assert ttr.median_time([10.0, 20.0, 30.0, None]) == 25.0
    assert ttr.median_time([10.0, 20.0, None, None]) is None
    assert ttr.median_time([]) is None


# ----------------------------------------------------------------------------- the table
def _zoo(t: float | None, rnd: int = 1) -> dict:
    return {"round": rnd, "system": "zoo", "label": "Zoo", "seconds_to_target": t,
            "steps_at_target": 40_960 if t is not None else None, "best_mean20": 455.5 if t is not None else 300.0,
            "seconds_to_best": t if t is not None else 60.0, "steps_at_best": 40_960, "episodes": 300,
            "env_steps": 40_960, "ended": "target" if t is not None else "limit", "wall_s": 31.0}


def _cleanrl(best_t: float, rnd: int = 1) -> dict:
    return {"round": rnd, "system": "cleanrl", "label": "CleanRL", "seconds_to_target": None,
            "steps_at_target": None, "best_mean20": 431.5, "seconds_to_best": best_t, "steps_at_best": 150_016,
            "episodes": 900, "env_steps": 199_680, "ended": "exit 0", "wall_s": 95.0}


def test_table_and_target_met_at_exactly_half():
    text = ttr.format_table([_zoo(40.0), _cleanrl(80.0)])
    lines = text.splitlines()
    assert lines[2] == "| Zoo | 40.0 (40.0) | 40,960 (40,960) | 455.5 (455.5) | 40.0 (40.0) | 40,960 (40,960) |"
    assert lines[3] == "| CleanRL | never (never) | never (never) | 431.5 (431.5) | 80.0 (80.0) | 150,016 (150,016) |"
    # 40 / 80 = 0.50 <= 0.5
    assert lines[-1] == ("Zoo's median s to mean-20 >= 450 / CleanRL's median s to its best mean-20 within 200k "
                         "= 40.0 / 80.0 = 0.50: target <= 0.5 met")


def test_target_not_met_and_medians_over_rounds():
    rows = [_zoo(41.0, 1), _cleanrl(70.0, 1), _zoo(30.0, 2), _cleanrl(80.0, 2), _zoo(None, 3), _cleanrl(90.0, 3)]
    text = ttr.format_table(rows)
    # Zoo: 41, 30, never -> median 41 (never counts as latest); CleanRL: median of 70, 80, 90 = 80 -> 41 / 80 = 0.5125
    assert text.splitlines()[-1].endswith("= 41.0 / 80.0 = 0.51: target <= 0.5 not met")
    assert "| Zoo | 41.0 (41.0, 30.0, never) |" in text
    assert "| 455.5 (455.5, 455.5, 300.0) | 41.0 (41.0, 30.0, 60.0) |" in text  # best: median of 300, 455.5, 455.5
    assert "- Zoo, round 3: stopped at the time limit after 40,960 env steps" in text


def test_target_never_and_missing_peer():
    text = ttr.format_table([_zoo(None), _cleanrl(80.0)])
    assert text.splitlines()[-1].endswith("= never / 80.0: target <= 0.5 not met (Zoo's median run never reached 450)")
    text = ttr.format_table([_zoo(40.0), {"round": 1, "system": "cleanrl", "label": "CleanRL", "error": "boom"}])
    assert "- CleanRL, round 1: boom" in text
    assert text.splitlines()[-1].endswith(": - (no complete CleanRL result), target <= 0.5")


def test_cleanrl_runs_cut_by_the_limit_are_left_out_of_the_target():
    cut = dict(_cleanrl(30.0, 2), ended="limit", env_steps=8_648)
    text = ttr.format_table([_zoo(40.0, 1), _cleanrl(80.0, 1), _zoo(40.0, 2), cut])
    # CleanRL's median over the complete run only: 80 (not (30 + 80) / 2 = 55) -> 40 / 80 = 0.50
    assert text.splitlines()[-1].endswith(
        "= 40.0 / 80.0 = 0.50: target <= 0.5 met (1 CleanRL run that did not complete 200k env steps not counted)")
    assert "- CleanRL, round 2: stopped at the time limit after 8,648 env steps" in text
    text = ttr.format_table([_zoo(40.0), dict(cut, round=1)])
    assert text.splitlines()[-1].endswith(": - (no complete CleanRL result), target <= 0.5 (1 CleanRL run that "
                                          "did not complete 200k env steps not counted)")


def test_commands():
    zoo = ttr.zoo_command(2, "/tmp/r")
    assert zoo[1:] == ["-m", "zoo", "train", "ppo", "--env", "CartPole-v1", "--steps", "200000", "--seed", "2",
                       "--name", "ttr-2", "--set", "runs_dir=/tmp/r"]
    cl = ttr.cleanrl_command(3)
    assert cl[1:4] == ["-u", "-W", "ignore"] and cl[4].endswith("cleanrl_compat.py")
    assert cl[5] == "--same-step-autoreset" and cl[6].endswith("/cleanrl/src/cleanrl/ppo.py")
    assert cl[7:] == ["--env-id", "CartPole-v1", "--total-timesteps", "200000", "--seed", "3", "--no-cuda"]


# ----------------------------------------------------------------------------- bfloat16 and the Hopper task
def test_tracker_bars_and_final_mean_of_the_last_100():
    tr = ttr.MeanTracker(450.0, bars=(10.0, 60.0, 1000.0))
    for i in range(1, 121):  # returns 1..120 at t = i s, 10 env steps each
        tr.add(float(i), 10 * i, float(i))
    res = tr.result()
    # mean-20 >= 10 at once (episode 20: mean of 1..20 = 10.5); >= 60 at episode 70 (mean of 51..70 = 60.5);
    # 1000 never; final: the mean of the last 100 returns, 21..120 = 70.5
    assert res["seconds_to_bar"] == {"10": [20.0, 200], "60": [70.0, 700], "1000": None}
    assert res["final_mean"] == 70.5
    short = ttr.MeanTracker(450.0, bars=(10.0,))
    for i in range(99):
        short.add(float(i), i, 50.0)
    assert short.result()["final_mean"] is None  # fewer than 100 episodes


def test_bfloat16_target_line_beside_float32():
    bf16 = dict(_zoo(30.0), system="zoo-bf16", label="Zoo bf16")
    lines = ttr.format_table([_zoo(40.0), bf16, _cleanrl(80.0)]).splitlines()
    assert lines[3] == "| Zoo bf16 | 30.0 (30.0) | 40,960 (40,960) | 455.5 (455.5) | 30.0 (30.0) | 40,960 (40,960) |"
    assert lines[-2].endswith("= 40.0 / 80.0 = 0.50: target <= 0.5 met")
    # 30 / 80 = 0.375
    assert lines[-1] == ("Zoo bfloat16's median s to mean-20 >= 450 / CleanRL's median s to its best mean-20 within "
                         "200k = 30.0 / 80.0 = 0.38: target <= 0.5 met")


def test_bars_table_of_hopper_rows():
    def row(system, label, bars, final, wall, cpu):
        return {"task": "hopper", "round": 1, "system": system, "label": label, "seconds_to_target": None,
                "steps_at_target": None, "best_mean20": 2900.0, "seconds_to_best": 900.0, "steps_at_best": 990_000,
                "episodes": 2500, "env_steps": 1_000_448, "ended": "exit 0", "wall_s": wall, "cpu_s": cpu,
                "seconds_to_bar": bars, "final_mean": final}

    rows = [row("zoo", "Zoo", {"1000": [100.0, 120_000], "2500": [700.0, 800_256]}, 2812.25, 900.4, 1500.6),
            row("cleanrl", "CleanRL", {"1000": [300.0, 250_000], "2500": None}, 1972.0, 1200.0, None)]
    text = ttr.format_table(rows).split("\n\n")[-1].splitlines()
    assert text[0] == ("| system | s, env steps to mean-20 >= 1000 | s, env steps to mean-20 >= 2500 | final return "
                       "(last 100 episodes) | wall s | CPU s |")
    assert text[2] == ("| Zoo | 100 s, 120,000 (100 s, 120,000) | 700 s, 800,256 (700 s, 800,256) | 2812.2 (2812.2) "
                       "| 900 (900) | 1,501 (1,501) |")
    assert text[3] == ("| CleanRL | 300 s, 250,000 (300 s, 250,000) | never (never) | 1972.0 (1972.0) | 1,200 (1,200) "
                       "| - (-) |")


def test_hopper_and_bfloat16_commands():
    hopper = ttr.TASKS["hopper"]
    zoo = ttr.zoo_command(1, "/tmp/r", hopper, "zoo-bf16")
    assert zoo[1:11] == ["-m", "zoo", "train", "ppo", "--env", "Hopper-v5", "--steps", "1000000", "--seed", "1"]
    assert zoo[13] == "--config" and zoo[14].endswith("benchmarks/mujoco_ppo.toml") and Path(zoo[14]).is_file()
    assert zoo[15:] == ["--set", "runs_dir=/tmp/r", "--set", "algo.precision=bfloat16"]
    cl = ttr.cleanrl_command(2, hopper)
    assert cl[0].endswith("/cleanrl-mujoco/venv/bin/python") and cl[1:4] == ["-u", "-W", "ignore"]
    assert cl[4].endswith("/cleanrl-mujoco/src/cleanrl/ppo_continuous_action.py")  # no compatibility shim
    assert cl[5:] == ["--env-id", "Hopper-v4", "--total-timesteps", "1000000", "--seed", "2", "--no-cuda"]


def test_sac_commands_and_a_shorter_budget():
    sac = dataclasses.replace(ttr.TASKS["sac-halfcheetah"], steps=60_000)
    zoo = ttr.zoo_command(3, "/tmp/r", sac, "zoo")
    assert zoo[1:11] == ["-m", "zoo", "train", "sac", "--env", "HalfCheetah-v5", "--steps", "60000", "--seed", "3"]
    assert zoo[11:] == ["--name", "ttr-3", "--set", "runs_dir=/tmp/r"]  # SAC's presets: no config file
    cl = ttr.cleanrl_command(1, sac)
    assert cl[4].endswith("/cleanrl-mujoco/src/cleanrl/sac_continuous_action.py")
    assert cl[5:] == ["--env-id", "HalfCheetah-v4", "--total-timesteps", "60000", "--seed", "1", "--no-cuda"]
    assert (ttr.TASKS["sac-hopper"].steps, ttr.TASKS["sac-hopper"].bars) == (300_000, (1000.0, 2000.0, 3000.0))


def test_cleanrl_env_puts_its_sources_on_the_path():
    sac = ttr.TASKS["sac-hopper"]
    env = ttr.cleanrl_env({"PYTHONPATH": "/x", "HOME": "/h"}, sac, peer_threads=1)
    src = str(ttr.PEERS_DIR / "cleanrl-mujoco" / "src")
    assert env == {"PYTHONPATH": src + ":/x", "HOME": "/h", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert ttr.cleanrl_env({}, sac) == {"PYTHONPATH": src}


def fake_zoo_run(monkeypatch) -> None:
    """Zoo's command becomes a script writing the ``metrics.jsonl`` of run ``ttr-SEED``: 25 episodes,
    return i at 100 i env steps (i = 1..25)."""
    writer = ("import json, pathlib, sys; d = pathlib.Path(sys.argv[1], 'ttr-' + sys.argv[2]); d.mkdir(); "
              "f = open(d / 'metrics.jsonl', 'w'); "
              "[f.write(json.dumps({'type': 'episode', 'env_steps': 100 * i, 'return': float(i)}) + '\\n') "
              "for i in range(1, 26)]")
    monkeypatch.setattr(ttr, "zoo_command",
                        lambda seed, runs_dir, *a: [sys.executable, "-c", writer, runs_dir, str(seed)])


def test_limit_0_runs_to_the_end(tmp_path, monkeypatch, capsys):
    # Before: --limit had to be > 0, and a limit guessed for an idle machine cut SAC runs short
    # when the machine slowed (a 300k-env-step run at 30 instead of 67 env steps/s).
    fake_zoo_run(monkeypatch)
    out = tmp_path / "rows.jsonl"
    monkeypatch.setattr(sys, "argv", ["time_to_return.py", "--task", "sac-hopper", "--steps", "3000", "--systems",
                                      "zoo", "--repeats", "1", "--limit", "0", "--out", str(out),
                                      "--logs", str(tmp_path / "logs")])
    ttr.main()
    assert "no time limit (every run to its end)" in capsys.readouterr().out
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    # --logs keeps the run's metrics.jsonl (before, it went with the temporary folder: a SAC run
    # that collapsed near its end, 2026-12-07, left no loss to read): the 25 episode rows
    kept = [json.loads(x) for x in (tmp_path / "logs" / "zoo-1.metrics.jsonl").read_text().splitlines()]
    assert [(r["env_steps"], r["return"]) for r in kept] == [(100 * i, float(i)) for i in range(1, 26)]
    # 25 episodes, returns 1..25: the best mean-20 is that of 6..25 = 15.5, at 2,500 env steps
    assert (row["ended"], row["episodes"], row["best_mean20"], row["steps_at_best"]) == ("exit 0", 25, 15.5, 2500)
    monkeypatch.setattr(sys, "argv", ["time_to_return.py", "--limit", "-1"])
    with pytest.raises(SystemExit) as err:
        ttr.main()
    assert err.value.code == 2 and "--limit >= 0 (0: none)" in capsys.readouterr().err


def test_episodes_file_keeps_every_episode_and_plot_curves_draws_it(tmp_path, monkeypatch, capsys):
    # --episodes: each episode the tracker reads, as a row plot_curves.py draws (before, the Zoo
    # run's metrics.jsonl went with its temporary folder, and curves had to be rebuilt by hand)
    import plot_curves

    fake_zoo_run(monkeypatch)
    episodes = tmp_path / "episodes.jsonl"
    monkeypatch.setattr(sys, "argv", ["time_to_return.py", "--task", "sac-hopper", "--steps", "3000", "--systems",
                                      "zoo", "--repeats", "1", "--first-seed", "3", "--limit", "0",
                                      "--out", str(tmp_path / "rows.jsonl"), "--episodes", str(episodes)])
    ttr.main()
    rows = [json.loads(x) for x in episodes.read_text().splitlines()]
    assert [(r["system"], r["seed"], r["env_steps"], r["return"]) for r in rows] == \
        [("zoo", 3, 100 * i, float(i)) for i in range(1, 26)]
    assert all(r["t"] >= 0 for r in rows)
    # a second file: a CleanRL seed-1 run with 21 episodes of return 2 at 10, 20, ..., 210 env steps
    other = tmp_path / "cleanrl.jsonl"
    other.write_text("".join(json.dumps({"system": "cleanrl", "seed": 1, "t": 60.0 * i, "env_steps": 10 * i,
                                         "return": 2.0}) + "\n" for i in range(1, 22)))
    runs = plot_curves.read_episodes([episodes, other])
    assert list(runs) == [("zoo", 3), ("cleanrl", 1)]
    fig = plot_curves.plot(runs, window=20)
    steps_axes, time_axes = fig.axes
    zoo_line, cleanrl_line = steps_axes.get_lines()
    # Zoo: the means of 1..20 = 10.5, ..., 6..25 = 15.5 at 2,000..2,500 env steps (2.0..2.5 thousand)
    assert list(zoo_line.get_xdata()) == [2.0, 2.1, 2.2, 2.3, 2.4, 2.5]
    assert list(zoo_line.get_ydata()) == [10.5, 11.5, 12.5, 13.5, 14.5, 15.5]
    # CleanRL: 2.0 at episodes 20 and 21 (200 and 210 env steps; 20 and 21 minutes)
    assert list(cleanrl_line.get_xdata()) == [0.2, 0.21] and list(cleanrl_line.get_ydata()) == [2.0, 2.0]
    assert list(time_axes.get_lines()[1].get_xdata()) == [20.0, 21.0]
    assert [ln.get_label() for ln in time_axes.get_lines()] == ["Zoo seed 3", "CleanRL seed 1"]
    # a broken row names its file and line
    other.write_text(json.dumps({"system": "cleanrl", "t": 1.0, "env_steps": 10, "return": 2.0}) + "\n{}\n")
    with pytest.raises(ValueError, match=r"cleanrl.jsonl:2: not an episode row"):
        plot_curves.read_episodes([other])


# ----------------------------------------------------------------------------- stop signals
CHILD = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job starts with SIGINT ignored
sys.path.insert(0, {peers!r})
import time_to_return as ttr
sleeper = ("import os, pathlib, time; pathlib.Path({pid_file!r}).write_text(str(os.getpid())); "
           "time.sleep(600)")
ttr.zoo_command = lambda *args: [sys.executable, "-c", sleeper]
sys.argv = ["time_to_return.py", "--task", "sac-hopper", "--systems", "zoo", "--repeats", "2", "--limit", "600",
            "--out", {out!r}]
ttr.main()
"""


@pytest.mark.parametrize("signum,code,name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_stop_signal_removes_the_run_folder_and_its_processes(tmp_path, signum, code, name):
    # Before: SIGTERM (pkill) mid-run left the Zoo run's temporary folder (ttr-zoo-*) behind.
    tmp, pid_file, out = tmp_path / "tmp", tmp_path / "run.pid", tmp_path / "rows.jsonl"
    tmp.mkdir()
    peers = str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers")
    script = CHILD.format(peers=peers, pid_file=str(pid_file), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.is_file() or not pid_file.read_text():  # the run started in its folder
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the run did not start within 120 s"
            time.sleep(0.05)
        assert [p.name.startswith("ttr-zoo-") for p in tmp.iterdir()] == [True]
        run_pid = int(pid_file.read_text())
        proc.send_signal(signum)
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed test leaves nothing running: the script, then its run
            proc.kill()
            proc.wait()
            if pid_file.is_file() and pid_file.read_text():
                try:
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    assert proc.returncode == code, text
    assert f"stopped by {name} after 0 run(s); their rows are in {out}" in text
    assert list(tmp.iterdir()) == []  # the run's folder is gone
    try:
        os.kill(run_pid, 0)
        state = Path(f"/proc/{run_pid}/stat").read_text().split(")")[-1].split()[0]
        assert state == "Z", f"the run's process {run_pid} is still alive ({state})"
    except (ProcessLookupError, FileNotFoundError):
        pass  # gone: stopped by peers._stop before the folder was removed
