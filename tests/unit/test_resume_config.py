"""What `zoo resume` accepts: the saved config plus safe changes; everything else is refused
with the list of differing keys, before any process starts."""
from __future__ import annotations

import json
import os
import socket

import pytest

from zoo.core.checkpoint import FORMAT, latest_path, write_checkpoint
from zoo.core.config import ConfigError, build_config, save_config
from zoo.core.resume import ABSENT, config_changes, find_run_dir, is_safe, resume_config
from tests.unit.trainer_harness import fake_host


@pytest.fixture
def run_dir(tmp_path):
    """A finished fake-counting PPO run of 1,000 env steps: its config.json and a checkpoint."""
    host = fake_host()
    cfg = build_config(host.registry, "ppo", "fake-counting", name="r", steps=1000,
                       overrides=[f"runs_dir={tmp_path}", "env.episode_length=7"])
    path = tmp_path / "r"
    save_config(cfg, path)
    os.makedirs(path / "checkpoints")
    write_checkpoint(latest_path(str(path)), {"format": FORMAT, "algorithm": {}, "policy_version": 4, "updates": 4,
                                              "env_steps": 1024, "frames": 1024, "episodes": 140, "resumes": 2})
    return host, str(path)


def test_the_saved_config_comes_back_with_a_longer_budget_and_the_next_resume_count(run_dir):
    host, path = run_dir
    cfg, ckpt = resume_config(host.registry, path, steps=3000, overrides=["log.interval_s=9"])
    assert (cfg.algo_name, cfg.env_name, cfg.name, cfg.env.episode_length, cfg.env_steps) == \
        ("ppo", "fake-counting", "r", 7, 3000)
    assert cfg.log.interval_s == 9.0 and cfg.resume == 3 and ckpt["updates"] == 4
    assert cfg.runs_dir == os.path.dirname(path)


def test_changed_keys_are_refused_and_listed(run_dir):
    host, path = run_dir
    with pytest.raises(ConfigError) as info:
        resume_config(host.registry, path, steps=3000, seed=5,
                      overrides=["algo.lr=0.5", "env.episode_length=9", "log.interval_s=9"])
    # the episode length is also the observation space's upper bound: the env's spec changed too
    assert info.value.problems == ["algo.lr: 0.001 -> 0.5", "env.episode_length: 7 -> 9",
                                   "env_spec.observation_space.obs: 'Box(0.0, 7.0, (1,), float32)' -> "
                                   "'Box(0.0, 9.0, (1,), float32)'", "seed: 1 -> 5"]
    assert info.value.field == "algo.lr"
    assert str(info.value).startswith(f"cannot resume {path} with a different config: 4 key(s) differ from its "
                                      "config.json: algo.lr: 0.001 -> 0.5; env.episode_length: 7 -> 9; ")


def test_another_algorithm_or_env_is_refused(run_dir):
    host, path = run_dir
    with pytest.raises(ConfigError) as info:
        resume_config(host.registry, path, algo="impala", steps=3000)
    assert "algo_name: 'ppo' -> 'impala'" in info.value.problems


def test_a_budget_already_spent_is_refused_with_the_fix(run_dir):
    host, path = run_dir
    with pytest.raises(ConfigError) as info:
        resume_config(host.registry, path)
    assert info.value.field == "env_steps"
    assert str(info.value) == (f"{path} already did 1,024 env steps of its budget of 1,000; to continue it give a "
                               "larger budget, counted from the run's start: e.g. --steps 2000")


def test_no_checkpoint_and_a_running_run_are_refused(run_dir):
    host, path = run_dir
    with open(os.path.join(path, "status.json"), "w") as f:
        json.dump({"status": "running", "pid": os.getpid(), "host": socket.gethostname()}, f)
    with pytest.raises(ConfigError, match=rf"{path} is still running \(controller pid {os.getpid()} on this host"):
        resume_config(host.registry, path, steps=3000)
    os.remove(os.path.join(path, "status.json"))
    os.remove(latest_path(path))
    with pytest.raises(ConfigError, match=rf"cannot resume {path}: no checkpoint at {latest_path(path)}"):
        resume_config(host.registry, path, steps=3000)


def test_find_run_dir_takes_a_path_or_a_name(run_dir, tmp_path):
    _, path = run_dir
    assert find_run_dir(path) == path
    assert find_run_dir("r", tmp_path) == str(tmp_path / "r")
    with pytest.raises(ConfigError, match=r"^run folder 'nope' does not exist \(nor '.*/nope'\); give a run folder such as runs/NAME"):
        find_run_dir("nope", tmp_path)


def test_safe_keys_and_changes():
    assert [k for k in ("log.interval_s", "streams.sample.options.slots", "trainer.checkpoint_interval_s",
                        "trainer.checkpoint_interval", "env_steps", "algo.device", "policy.device")] == \
        [k for k in ("log.interval_s", "streams.sample.options.slots", "trainer.checkpoint_interval_s",
                     "trainer.checkpoint_interval", "env_steps", "algo.device", "policy.device") if is_safe(k)]
    assert is_safe("stop_when") and is_safe("stop_over_episodes")  # when to stop, as the budget
    assert not any(is_safe(k) for k in ("algo.lr", "seed", "sample_length", "trainer.batch_samples", "logx",
                                        "env.episode_length", "env_spec.action_space", "algo_name"))
    assert config_changes({"a": {"b": 1, "c": [1, 2]}, "d": 0}, {"a": {"b": 2, "c": [1, 2]}, "e": 1}) == [
        ("a.b", 1, 2), ("d", 0, ABSENT), ("e", ABSENT, 1)]


def test_an_option_added_since_the_run_started_takes_its_value(run_dir):
    host, path = run_dir
    saved = json.loads(open(os.path.join(path, "config.json")).read())
    del saved["trainer"]["batch_samples"]  # as if the run's Zoo had no such option
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(saved, f)
    cfg, _ = resume_config(host.registry, path, steps=3000)
    assert cfg.trainer.batch_samples == 8  # PPO's preset
