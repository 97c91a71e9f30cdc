"""``zoo eval``: on a real ``zoo train`` run, and on checkpoints made in-process.

Checkpoints here are real trainer checkpoints made in-process: the config is resolved by
``build_config`` and written by ``save_config`` (as ``zoo train`` does), the algorithm is
built as the trainer builds it, and ``trainer.save_checkpoint`` writes it. The first test
trains with the real ``zoo train``.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import zoo.cli as cli
from zoo.core.plugins import get_host
from zoo.core.testing.cli import zoo as run_zoo

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.fixture(scope="module")
def app():
    return cli.build_app(get_host())


def invoke(app, args):
    return runner.invoke(app, args)


def make_run(root: Path, algo: str, env: str, name: str, overrides=(), counters=None) -> Path:
    """A run folder holding config.json and checkpoints/latest.pt, as ``zoo train`` writes them."""
    from zoo.core.config import build_config, save_config
    from zoo.core.workers.trainer import save_checkpoint

    registry = get_host().registry
    # A budget of at least one update (hide-and-seek: 1,280 env steps on 2 cores), as zoo train requires.
    cfg = build_config(registry, algo, env, overrides=[f"runs_dir={root}", *overrides], name=name, steps=100_000)
    run_dir = root / name
    save_config(cfg, run_dir)
    algorithm = registry.get("algorithm", algo).load()(cfg.algo, cfg.spec, cfg.seed)
    (run_dir / "checkpoints").mkdir()
    save_checkpoint(str(run_dir / "checkpoints" / "latest.pt"), algorithm,
                    counters or {"policy_version": 3, "updates": 3, "env_steps": 384, "frames": 384, "episodes": 5})
    return run_dir


def one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "\n" not in text, text  # a single line
    assert text.startswith("error: ")
    for needle in needles:
        assert needle in text, text


# ----------------------------------------------------------------------------- zoo eval
def zoo(*args: str) -> subprocess.CompletedProcess:
    return run_zoo(*args, env={**os.environ, "COLUMNS": "200"}, timeout=600)  # zoo runs: one line per run


def test_eval_of_a_trained_cartpole_run_and_runs_lists_it_finished(tmp_path):
    """A short real `zoo train`, then `zoo eval` twice (deterministic, one seed) and `zoo runs`."""
    train = zoo("train", "ppo", "--env", "CartPole-v1", "--steps", "2048", "--name", "cp", "--set",
                f"runs_dir={tmp_path}", "--set", "actors.count=1", "--set", "log.tensorboard=false")
    assert train.returncode == 0, train.stderr
    run = tmp_path / "cp"
    outs = [tmp_path / "one.jsonl", tmp_path / "two.jsonl"]
    results = [zoo("eval", str(run), "--episodes", "5", "--seed", "3", "--deterministic", "--out", str(o))
               for o in outs]
    assert all(r.returncode == 0 for r in results), results[0].stderr + results[1].stderr
    rows = [[json.loads(line) for line in o.read_text().splitlines()] for o in outs]
    returns = [r["return"] for r in rows[0]]
    assert len(returns) == 5 and returns == [r["return"] for r in rows[1]]
    line = next(ln for ln in results[0].stdout.splitlines() if ln.startswith("return"))
    assert line.split("mean ")[1].split()[0] == f"{np.mean(returns):.2f}"  # the mean of the lines, 2 decimals
    listing = zoo("runs", str(tmp_path))
    assert listing.returncode == 0, listing.stderr
    row = next(ln for ln in listing.stdout.splitlines() if "│ cp" in ln)
    assert "finished" in row and "ppo" in row and "latest.pt" in row


def test_eval_prints_the_mean_of_the_episodes_it_wrote_and_is_repeatable(tmp_path, app):
    run = make_run(tmp_path, "ppo", "CartPole-v1", "cp")
    out1, out2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    r1 = invoke(app, ["eval", str(run), "--episodes", "4", "--seed", "7", "--deterministic", "--out", str(out1)])
    r2 = invoke(app, ["eval", str(run / "checkpoints" / "latest.pt"), "-n", "4", "--seed", "7", "--deterministic",
                      "--out", str(out2)])
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    rows1 = [json.loads(line) for line in out1.read_text().splitlines()]
    rows2 = [json.loads(line) for line in out2.read_text().splitlines()]
    assert [r["episode"] for r in rows1] == [0, 1, 2, 3] and [r["seed"] for r in rows1] == [7, 8, 9, 10]
    assert [r["return"] for r in rows1] == [r["return"] for r in rows2]  # deterministic, same seeds
    # CartPole pays 1 per env step: the return is the length
    assert all(r["return"] == r["length"] for r in rows1)
    line = next(ln for ln in r1.output.splitlines() if ln.startswith("return"))
    printed = line.split("mean ")[1].split()[0]
    assert printed == f"{np.mean([r['return'] for r in rows1]):.2f}"  # the mean, with two decimals
    assert rows1[0]["policy_version"] == 3 and rows1[0]["trained_env_steps"] == 384
    # the default output file lives in the run folder
    r3 = invoke(app, ["eval", str(run), "-n", "1"])
    assert r3.exit_code == 0, r3.output
    assert (run / "eval" / "latest-seed0.jsonl").is_file()


def test_lock_step_envs_write_whole_episodes_to_the_video(tmp_path, app):
    """--envs 2: episodes finish out of order, each is written whole; frames = sum(length + 1)."""
    import imageio.v2 as imageio

    run = make_run(tmp_path, "ppo", "CartPole-v1", "cp")
    gif, out = tmp_path / "cp.gif", tmp_path / "cp.jsonl"
    result = invoke(app, ["eval", str(run), "-n", "3", "--envs", "2", "--video", str(gif), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["episode"] for r in rows] == [0, 1, 2]
    spans = sorted(r["video_frames"] for r in rows)
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))  # back to back
    assert all(end - first == r["length"] + 1 for r in rows for first, end in [r["video_frames"]])
    reader = imageio.get_reader(gif)
    count = sum(1 for _ in reader)
    reader.close()
    assert count == sum(r["length"] + 1 for r in rows) == spans[-1][1]


def test_eval_bad_input_is_one_line_exit_2(tmp_path, app):
    one_line_error(invoke(app, ["eval", str(tmp_path / "nope")]), "does not exist")
    ppo = make_run(tmp_path, "ppo", "CartPole-v1", "ppo-run")
    impala = make_run(tmp_path, "impala", "CartPole-v1", "impala-run")
    one_line_error(invoke(app, ["eval", str(impala / "checkpoints" / "latest.pt"), "--run", str(ppo)]),
                   "written by algorithm impala", "trains ppo")
    one_line_error(invoke(app, ["eval", str(ppo), "--video", str(tmp_path / "x.avi")]),
                   "unsupported video extension '.avi'", ".mp4 or .gif")
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    one_line_error(invoke(app, ["eval", str(not_a_run)]), "holds no config.json")


def test_policy_default_plays_another_checkpoint_of_a_run_without_named_policies(tmp_path, app):
    run = make_run(tmp_path, "ppo", "CartPole-v1", "a")
    other = make_run(tmp_path, "ppo", "CartPole-v1", "b", counters={"policy_version": 8, "env_steps": 1024})
    out = tmp_path / "swapped.jsonl"
    result = invoke(app, ["eval", str(run), "-n", "1", "--policy", f"default={other}", "--out", str(out)])
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text())
    assert (row["checkpoint"], row["policy_version"], row["trained_env_steps"]) == (
        str((other / "checkpoints" / "latest.pt").resolve()), 8, 1024)
    assert "policy_returns" not in row
    result = invoke(app, ["eval", str(run), "-n", "1", "--policy", f"default={other}"])
    from zoo.evaluate import checkpoint_label

    label = checkpoint_label(other / "checkpoints" / "latest.pt")  # b.latest.<6 hex>: another run's latest.pt
    assert label.startswith("b.latest.") and len(label) == len("b.latest.") + 6
    assert result.exit_code == 0 and (run / "eval" / f"default={label}-seed0.jsonl").is_file(), result.output
    impala = make_run(tmp_path, "impala", "CartPole-v1", "impala-run")
    one_line_error(invoke(app, ["eval", str(run), "--policy", f"default={impala}"]), "written by algorithm impala")
    one_line_error(invoke(app, ["eval", str(run), "--policy", "lead=x.pt"]),
                   "--policy lead=x.pt: run", "has no policy 'lead'",
                   "it names no policies (its one policy is 'default')")


def test_atari_video_is_the_rgb_game_one_frame_per_env_step(tmp_path, app):
    """A whole Breakout game (all 5 lives) with the untrained policy: frames = 1 + env steps."""
    import imageio.v2 as imageio

    from zoo.plugins.envs.atari.env import AtariConfig, make

    run = make_run(tmp_path, "ppo", "atari:Breakout", "breakout", overrides=["env.max_episode_frames=0"])
    video, out = tmp_path / "game.mp4", tmp_path / "game.jsonl"
    result = invoke(app, ["eval", str(run), "-n", "1", "--video", str(video), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    reader = imageio.get_reader(video)
    count, first = 0, None
    for frame in reader:
        first = frame if first is None else first
        count += 1
    reader.close()
    # the first screen, then one per env step (the game's length counts each lost life's no-op step)
    assert count == row["length"] + 1 == row["video_frames"][1]
    assert first.shape == (210, 160, 3)
    env = make("Breakout", AtariConfig(max_episode_frames=0), 0)
    env.reset(seed=0)  # episode 0 starts with seed 0: the same first screen, through H.264
    screen = env.env.unwrapped.ale.getScreenRGB()
    env.close()
    assert np.abs(first.astype(int) - screen).mean() < 3
    assert row["return"] == float(int(row["return"]))  # the raw score (points), not clipped rewards


def test_hide_and_seek_gif_has_one_frame_per_env_step_and_team_returns(tmp_path, app):
    import imageio.v2 as imageio

    run = make_run(tmp_path, "mappo", "hide-and-seek", "hns", overrides=["algo.hidden=32"])
    gif, out = tmp_path / "episode.gif", tmp_path / "hns.jsonl"
    result = invoke(app, ["eval", str(run), "-n", "1", "--video", str(gif), "--out", str(out), "--fps", "10"])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    frames = imageio.mimread(gif)
    assert row["length"] == 80  # the quadrant game's horizon
    assert len(frames) == 80 + 1 and frames[0].shape[:2] == (320, 320)
    assert set(row["team_returns"]) == {"hider", "seeker"}
    assert row["team_returns"]["hider"] == pytest.approx(row["hider_return"])
    assert "team hider return" in result.output and "agent seeker_1 return" in result.output


