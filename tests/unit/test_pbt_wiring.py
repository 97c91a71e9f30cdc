"""PBT wired into `zoo train` (docs/pbt.md): the [pbt] table expanded into member policies by
build_config, its refusals before any worker starts, config.json with and without it, per-env
routing of actions to members, and the population manager's reading of the members' env steps."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from gymnasium import spaces

from zoo.core.config import build_config, config_to_dict
from zoo.core.env import EnvSpec
from zoo.core.options import ConfigError
from zoo.core.plugins import get_registry
from zoo.core.workers.actor import ActionAssembler
from zoo.core.workers.population import UpdateRows, count

LR = 'pbt.hyperparameters={"algo.lr": [1e-4, 1e-2]}'


def _build(*overrides, **kw):
    return build_config(get_registry(), "ppo", "CartPole-v1", overrides=list(overrides), **kw)


def test_the_pbt_table_expands_the_runs_policy_into_members_with_seeded_starting_hyperparameters():
    cfg = _build("pbt.members=3", LR, "actors.envs_per_actor=6", "algo.lr=0.002", "actors.ring_size=2", seed=5)
    assert list(cfg.policies.named) == ["default_0", "default_1", "default_2"] and not cfg.policies.implicit
    rng = random.Random(5)  # member 0 keeps the configured value; 1 and 2 draw log-uniformly, in order
    draws = [math.exp(rng.uniform(math.log(1e-4), math.log(1e-2))) for _ in range(2)]
    assert [p.algo.lr for p in cfg.policies.named.values()] == [0.002, *draws]
    assert all(p.agents == ("agent_0",) and p.trainable for p in cfg.policies.named.values())
    assert cfg.algo.lr == 0.002 and count(cfg) == 1
    saved = config_to_dict(cfg)  # the members come from the pbt table, not a policies table
    assert saved["pbt"]["members"] == 3 and saved["pbt"]["hyperparameters"] == {"algo.lr": [1e-4, 1e-2]}
    assert "policies" not in saved and "agents" not in saved
    # built again from its config.json (a resume's base): the same members
    base = {k: v for k, v in json.loads(json.dumps(saved)).items()
            if k not in ("env_spec", "algo_name", "env_name")}
    again = build_config(get_registry(), "ppo", "CartPole-v1", base=base)
    assert [p.algo.lr for p in again.policies.named.values()] == [0.002, *draws]


def test_without_a_pbt_table_config_json_has_no_pbt_key_and_no_pbt_worker():
    cfg = _build()
    assert "pbt" not in config_to_dict(cfg) and cfg.policies is None and count(cfg) == 0


def test_a_range_set_entry_by_entry_reads_as_numbers():
    cfg = _build("pbt.members=2", "pbt.hyperparameters.algo.lr=[1e-4, 1e-2]", "actors.envs_per_actor=4")
    assert cfg.pbt.hyperparameters == {"algo.lr": [1e-4, 1e-2]}
    with pytest.raises(ConfigError) as info:
        _build("pbt.members=2", "pbt.hyperparameters.algo.lr=big")
    assert str(info.value).startswith("--set pbt.hyperparameters.algo.lr=big: pbt.hyperparameters.algo.lr expects "
                                      "list[float], got 'big'")


def test_a_population_the_run_cannot_route_or_train_is_refused_naming_each_fix():
    with pytest.raises(ConfigError) as info:
        _build("pbt.members=2", LR, "actors.envs_per_actor=2", "actors.ring_size=2", "trainer.count=2",
               "actors.count=2")
    assert info.value.problems == [
        "pbt: a member with data-parallel trainers (trainer.count=2) is not built yet; set trainer.count=1 (each "
        "member has its own trainer)",
        "pbt.members=2: every agent of env e acts with member e % 2, so each ring group's envs "
        "(actors.envs_per_actor / actors.ring_size = 1) must be a multiple of 2; set actors.envs_per_actor=4"]


def test_a_population_of_a_named_policy_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as info:
        _build("pbt.members=2", LR, "actors.envs_per_actor=4", "policies.solo.trainer.batch_samples=2")
    assert info.value.problems[0] == (
        "pbt: a population of a named policy ([policies.NAME]) is not built yet; train the run's one policy "
        "(pbt.policy = \"default\", no [policies.NAME] tables)")


def test_per_env_routing_gives_each_env_the_actions_of_its_member():
    obs = {"obs": spaces.Box(0, 1, (2,), np.float32)}
    spec = EnvSpec("two", ("a", "b"), obs, spaces.Discrete(9))
    both = np.array([0, 1])  # every agent acts with every member, in its own envs
    envs = {"m0": np.array([0, 2]), "m1": np.array([1, 3])}  # env e -> member e % 2
    assemble = ActionAssembler(spec, {"m0": both, "m1": both}, 4, envs)
    out = assemble({"m0": np.array([1, 2, 3, 4]), "m1": np.array([5, 6, 7, 8])})
    # row e * 2 + agent: env 0 (m0) 1, 2; env 1 (m1) 5, 6; env 2 (m0) 3, 4; env 3 (m1) 7, 8
    assert out[0].tolist() == [1, 2, 5, 6, 3, 4, 7, 8]


def test_the_manager_reads_the_env_steps_every_member_passed_and_rereads_a_cut_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = UpdateRows(str(path), ["p_0", "p_1"])
    assert rows.members_env_steps() == 0  # no file yet
    lines = [{"type": "update", "policy": "p_0", "env_steps": 512}, {"type": "episode", "policy": "p_1",
                                                                    "env_steps": 900},
             {"type": "update", "policy": "p_1", "env_steps": 768}, {"type": "update", "policy": "p_0",
                                                                     "env_steps": 1024}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"type": "upd')  # a row being appended
    assert rows.members_env_steps() == 768
    with path.open("a") as f:
        f.write('ate", "policy": "p_1", "env_steps": 1280}\n')
    assert rows.members_env_steps() == 1024
    path.write_text(json.dumps({"type": "update", "policy": "p_0", "env_steps": 256}) + "\n"
                    + json.dumps({"type": "update", "policy": "p_1", "env_steps": 256}) + "\n")  # cut back
    assert rows.members_env_steps() == 256


def test_zoo_runs_lists_the_members_and_zoo_eval_of_the_run_names_a_members_checkpoint(tmp_path):
    from zoo.runinfo import RunError, resolve_target, run_info

    run = tmp_path / "pop"
    (run / "checkpoints" / "default_0").mkdir(parents=True)
    (run / "checkpoints" / "default_0" / "latest.pt").write_bytes(b"x")
    (run / "config.json").write_text(json.dumps({"algo_name": "ppo", "env_name": "CartPole-v1", "env_steps": 4000,
                                                 "pbt": {"members": 2, "policy": "default"}}))
    rows = [{"type": "episode", "policy": "default_0", "return": 10.0}, {"type": "episode", "policy": "default_1",
                                                                         "return": 30.0},
            {"type": "episode", "policy": "default_0", "return": 20.0},
            {"type": "update", "policy": "default_1", "env_steps": 512, "policy_version": 3}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = run_info(run)
    assert [(p.name, p.return_mean, p.version) for p in info.policies] == [("default_0", 15.0, None),
                                                                          ("default_1", 30.0, 3)]
    assert info.policies[0].checkpoint == run / "checkpoints" / "default_0" / "latest.pt"
    with pytest.raises(RunError) as err:
        resolve_target(run)
    assert str(err.value) == (f"run {str(run)!r} is a PBT population (pbt.members=2), a checkpoint per member: name "
                              f"one, e.g. {run / 'checkpoints' / 'default_0' / 'latest.pt'}")
