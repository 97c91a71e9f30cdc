"""benchmarks/gpu_apex_pong.py without a GPU: it refuses in one line, its dry run starts nothing,
its zoo command parses with the CLI and builds a valid config (CUDA stood in for by a one-GPU
machine with the GPU machine's host memory), and the figures it reads from metrics.jsonl."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.unit.fakes import load_benchmark as load
from tests.unit.gpu_harness import ROOT, build, parsed


@pytest.fixture(scope="module")
def gap():
    return load("gpu_apex_pong")


def test_without_cuda_it_refuses_in_one_line_before_starting_anything(tmp_path):
    import torch

    if torch.version.cuda is not None and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_apex_pong.py"), "--runs-dir",
                          str(tmp_path / "runs"), "--out", str(tmp_path / "out.json")],
                         capture_output=True, text=True, timeout=120, env={"CUDA_VISIBLE_DEVICES": "",
                                                                           "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_apex_pong.py needs a CUDA GPU: torch "), out.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out.json").exists()


def test_dry_run_prints_the_command_and_starts_nothing(gap, tmp_path, capsys):
    assert gap.main(["--dry-run", "--actors", "14", "--runs-dir", str(tmp_path / "runs")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("python -m zoo train apex-dqn --env atari:Pong --steps 3000000 --seed 1 --name "
                           f"apex-pong-gpu --set runs_dir={tmp_path / 'runs'} --set policy.device=cuda --set "
                           "actors.count=14 --set actors.envs_per_actor=8")
    assert not (tmp_path / "runs").exists()
    with pytest.raises(SystemExit):
        gap.main(["--dry-run", "--envs", "3"])
    assert "an even --envs >= 2" in capsys.readouterr().err


@pytest.mark.usefixtures("one_gpu")
def test_the_zoo_command_builds_a_valid_config_on_the_gpu_machine(gap, tmp_path, monkeypatch):
    from zoo.core.config import steps_per_update
    from zoo.plugins.algorithms import replay
    from zoo.plugins.algorithms.apex import config as apex_config

    monkeypatch.setattr(apex_config, "available_memory", lambda: 120 * 2**30)  # the GPU machine: 128 GiB
    args = gap.build_parser().parse_args(["--actors", "14", "--set", "algo.priority_alpha=0.5"])
    argv = gap.zoo_command(args, str(tmp_path), "python")
    assert argv[:4] == ["python", "-m", "zoo", "train"]
    params = parsed("train", argv[4:])
    assert (params["steps"], params["seed"]) == (3_000_000, 1)
    cfg = build(params)  # every --set key exists and every value is valid (ConfigError otherwise)
    assert (cfg.algo_name, cfg.env_name, cfg.runs_dir, cfg.env_steps) == ("apex-dqn", "atari:Pong", str(tmp_path),
                                                                          3_000_000)
    assert (cfg.algo.device, cfg.policy.device, cfg.actors.count, cfg.actors.envs_per_actor) == ("cuda", "cuda", 14, 8)
    a = cfg.algo
    assert (a.capacity, a.learning_starts, a.batch_size, a.samples_per_insert, a.lr, a.target_period) == \
        (1_000_000, 50_000, 128, 8.0, 1e-4, 2_500)
    assert (a.priority_alpha, a.double_q, a.dueling, a.frame_stack) == (0.5, True, True, "auto")  # --set wins
    assert steps_per_update(cfg, cfg.spec)[0] == 32 * 32  # 64 gradient steps of 128 per update
    need = replay.experiment_replay_bytes(a.capacity, cfg, 8, a.frame_stack)
    assert need.total == 7_327_069_056  # 6.82 GiB: frames stored once (rows would take 27 GiB)
    monkeypatch.setattr(apex_config, "available_memory", lambda: 4 * 2**30)  # and the check does run
    from zoo.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"algo.capacity=1,000,000 transitions need .* more than the 4.00 GiB"):
        build(params)


def test_progress_reads_the_mean_return_and_the_rates(gap):
    p = gap.Progress(target=19.0, window=3, max_steps=1_000)
    rows = [
        {"type": "update", "env_steps": 100, "time_s": 10.0, "gradient_steps": 0.0, "mean_env_steps_per_s": 10.0},
        {"type": "episode", "env_steps": 150, "return": 18.0, "length": 9},
        {"type": "update", "env_steps": 200, "time_s": 12.0, "gradient_steps": 4.0, "mean_env_steps_per_s": 16.7},
        {"type": "episode", "env_steps": 250, "return": 19.0, "length": 9},
        {"type": "episode", "env_steps": 260, "return": 19.0, "length": 9},  # mean 18.67
        {"type": "update", "env_steps": 600, "time_s": 16.0, "gradient_steps": 16.0, "mean_env_steps_per_s": 37.5},
        {"type": "episode", "env_steps": 610, "return": 20.0, "length": 9},  # mean 19.33: reached
        {"type": "episode", "env_steps": 1_100, "return": -21.0, "length": 9},  # past the budget: ignored
    ]
    for i, row in enumerate(rows):
        p.add(json.dumps(row), now=float(i))
    p.add('{"type": "upd', now=9.0)  # a line being written
    r = p.result()
    assert (r["seconds_to_target"], r["steps_at_target"], r["episodes"]) == (6.0, 610, 4)
    assert r["best_mean"] == pytest.approx(58 / 3)
    # from the first update with gradient steps (200 env steps at 12 s) to the last (600 at 16 s)
    assert (r["env_steps"], r["env_steps_per_s"], r["learning_env_steps_per_s"], r["gradient_steps_per_s"]) == \
        (610, 37.5, 100.0, 4.0)
