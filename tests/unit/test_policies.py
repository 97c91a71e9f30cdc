"""Named policies (issue 22): the configuration model, its validation, the agent -> policy
mapping, per-agent spaces in the env layer, and config.json round trips (core/policies.py,
core/env.py). Routing is not wired yet: `zoo train` still refuses [policies.*] as unknown."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from mpe2 import simple_adversary_v3, simple_spread_v3

from zoo.core.checkpoint import FORMAT, latest_path, write_checkpoint
from zoo.core.config import (
    ConfigError,
    ExperimentConfig,
    algorithm_config_class,
    build_config,
    config_to_dict,
    load_config_file,
)
from zoo.core.env import PettingZooEnv
from zoo.core.plugins import get_registry
from zoo.core.policies import (
    DEFAULT_POLICY,
    AgentRule,
    agent_policies,
    build_policies,
    policies_from_saved,
    policies_to_dict,
    policy_view,
    resolve_weights,
    split_policy_layers,
)
from zoo.core.resume import resume_config
from zoo.plugins.envs.pettingzoo.env import PettingZooConfig

ADV = "mpe2.simple_adversary_v3"
FIXTURE = Path(__file__).parent / "data" / "config_before_policies.json"


@pytest.fixture(scope="module")
def registry():
    return get_registry()


@pytest.fixture(scope="module")
def adv_spec():
    env = PettingZooEnv(simple_adversary_v3.parallel_env(), ADV, mixed_spaces=True)
    env.close()
    return env.spec


def _cfg(registry, spec, algo="mappo", **kw) -> ExperimentConfig:
    """A run config over ``spec`` as build_config would give it (its probe cannot build a mixed env yet)."""
    cfg = ExperimentConfig(algo_name=algo, env_name=f"pettingzoo:{spec.env_id}",
                           algo=algorithm_config_class(registry.get("algorithm", algo))(), env=PettingZooConfig(),
                           env_steps=1_000_000, name="teams", **kw)
    cfg.spec = spec
    return cfg


TEAMS = {"policies": {"adversary": {"algo": "mappo"}, "good": {"algo": "mappo"}},
         "agents": [{"match": "adversary_*", "policy": "adversary"}, {"match": "agent_*", "policy": "good"}]}


def _build(registry, spec, data=None, overrides=(), cfg=None, **kw):
    cfg = cfg or _cfg(registry, spec)
    rest, rest_overrides, layers = split_policy_layers(data, list(overrides), source="--config teams.toml")
    return build_policies(registry, cfg, layers, file_data=rest, overrides=rest_overrides, **kw)


def _refused(registry, spec, data=None, overrides=(), **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _build(registry, spec, data, overrides, **kw)
    return info.value


def _with(**tables):
    """TEAMS with some policy tables replaced or extended."""
    data = json.loads(json.dumps(TEAMS))
    for name, table in tables.items():
        data["policies"][name] = table
    return data


# ----------------------------------------------------------------------------- env layer
def test_a_mixed_spec_lists_each_agents_spaces_groups_them_and_gives_a_subsets_spec(adv_spec):
    spec = adv_spec
    assert spec.mixed and spec.agents == ("adversary_0", "agent_0", "agent_1")
    assert spec.space_groups() == [("adversary_0",), ("agent_0", "agent_1")]
    assert spec.observation_space_of("adversary_0")["obs"].shape == (8,)
    assert spec.observation_space_of("agent_1")["obs"].shape == (10,)
    assert spec.observation_space["obs"].shape == (8,)  # agents[0]'s
    good = spec.subset(["agent_1", "agent_0"])
    assert good.agents == ("agent_0", "agent_1") and good.agent_spaces is None and not good.mixed
    assert good.observation_space["obs"].shape == (10,) and good.action_space.n == 5
    with pytest.raises(ValueError) as info:
        spec.subset(["adversary_0", "agent_1"])
    assert str(info.value) == ("agents 'adversary_0' and 'agent_1' of env 'mpe2.simple_adversary_v3' have different "
                               "spaces: observation 'obs' Box(8,) float32 (adversary_0) vs Box(10,) float32 (agent_1)")
    with pytest.raises(ValueError, match=r"has no agent\(s\) 'seeker_0'"):
        spec.subset(["seeker_0"])


def test_a_homogeneous_env_keeps_todays_spec_and_layout_and_mixed_spaces_change_nothing_for_it():
    plain = PettingZooEnv(simple_spread_v3.parallel_env(), "spread")
    flagged = PettingZooEnv(simple_spread_v3.parallel_env(), "spread", mixed_spaces=True)
    assert plain.spec == flagged.spec and plain.spec.agent_spaces is None and not plain.spec.mixed
    assert plain.spec.space_groups() == [("agent_0", "agent_1", "agent_2")]
    obs_a, _ = plain.reset(seed=3)
    obs_b, _ = flagged.reset(seed=3)
    assert isinstance(obs_a, dict) and obs_a.keys() == obs_b.keys()
    for k in obs_a:
        np.testing.assert_array_equal(obs_a[k], obs_b[k])
    step_a = plain.step(np.array([1, 2, 3]))
    step_b = flagged.step(np.array([1, 2, 3]))
    np.testing.assert_array_equal(step_a[1], step_b[1])
    np.testing.assert_array_equal(step_a[0]["obs"], step_b[0]["obs"])
    assert plain.spec.subset(plain.spec.agents) == plain.spec


def test_agents_with_different_spaces_are_refused_without_mixed_spaces_and_travel_per_space_group_with_it():
    with pytest.raises(TypeError, match="agents 'adversary_0' and 'agent_0' have different spaces"):
        PettingZooEnv(simple_adversary_v3.parallel_env(), ADV)
    env = PettingZooEnv(simple_adversary_v3.parallel_env(max_cycles=3), ADV, mixed_spaces=True)
    obs, info = env.reset(seed=1)
    assert [{k: v.shape for k, v in group.items()} for group in obs] == [
        {"obs": (1, 8), "zoo:global_state": (1, 28)}, {"obs": (2, 10), "zoo:global_state": (2, 28)}]
    assert info["active"].tolist() == [True, True, True]
    sent = []
    real_step = env.env.step
    env.env.step = lambda acts: (sent.append(dict(acts)), real_step(acts))[1]
    obs, reward, terminated, truncated, info = env.step([np.array([4]), np.array([2, 3])])
    assert sent == [{"adversary_0": 4, "agent_0": 2, "agent_1": 3}]
    assert reward.shape == terminated.shape == truncated.shape == (3,)
    assert [group["obs"].shape for group in obs] == [(1, 8), (2, 10)]
    with pytest.raises(ValueError, match=r"actions for 1 space group\(s\); its agents fall into 2"):
        env.step([np.array([0, 0, 0])])
    env.close()


def test_a_mixed_spec_writes_every_agents_spaces_to_config_json(registry, adv_spec):
    from zoo.core.config import config_to_dict

    out = config_to_dict(_cfg(registry, adv_spec))["env_spec"]
    assert out["agent_spaces"]["adversary_0"]["observation_space"]["obs"] == "Box(-inf, inf, (8,), float32)"
    assert out["agent_spaces"]["agent_0"]["action_space"] == "Discrete(5)"


# ----------------------------------------------------------------------------- mapping
def test_the_first_matching_pattern_wins_and_agents_keep_the_env_order(adv_spec):
    rules = [AgentRule("agent_1", "b"), AgentRule("*", "a")]
    assert agent_policies(adv_spec, ["a", "b"], rules) == {"adversary_0": "a", "agent_0": "a", "agent_1": "b"}
    assert agent_policies(adv_spec, {"only": None}, []) == {"adversary_0": "only", "agent_0": "only", "agent_1": "only"}


def _mapping_error(spec, names, rules) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        agent_policies(spec, names, [AgentRule(*r) for r in rules])
    return info.value


def test_a_pattern_that_matches_no_agent_is_refused_naming_it(adv_spec):
    exc = _mapping_error(adv_spec, ["a", "b"], [("hider_*", "a"), ("*", "b")])
    assert exc.field == "agents[0].match"
    assert str(exc) == ("agents[0].match = 'hider_*' matches no agent of env 'mpe2.simple_adversary_v3' (agents: "
                        "adversary_0, agent_0, agent_1); fix the pattern or remove the entry")


def test_a_pattern_shadowed_by_earlier_ones_is_refused(adv_spec):
    exc = _mapping_error(adv_spec, ["a", "b"], [("*", "a"), ("agent_*", "b")])
    assert exc.problems[0] == ("agents[1].match = 'agent_*' matches only agents that earlier entries already map "
                               "(agent_0 -> agents[0], agent_1 -> agents[0]); the first match wins: remove the entry "
                               "or move it up")


def test_an_agent_that_matches_no_pattern_is_named(adv_spec):
    exc = _mapping_error(adv_spec, ["a", "b"], [("adversary_*", "a"), ("agent_0", "b")])
    assert exc.field == "agents"
    assert str(exc) == ("agent 'agent_1' of env 'mpe2.simple_adversary_v3' matches no [[agents]] pattern "
                        "('adversary_*', 'agent_0'); add an [[agents]] entry for them (match = \"*\" as the last "
                        "entry maps every agent left)")


def test_a_policy_no_agent_uses_is_refused(adv_spec):
    exc = _mapping_error(adv_spec, ["a", "b", "spare"], [("adversary_*", "a"), ("*", "b")])
    assert exc.field == "policies.spare"
    assert str(exc) == ("policies.spare: no agent maps to it (the [[agents]] entries map adversary_0 -> a, "
                        "agent_0 -> b, agent_1 -> b); map agents to it (policy = 'spare') or remove [policies.spare]")


def test_an_entry_naming_no_policy_and_two_policies_without_entries_are_refused(adv_spec):
    exc = _mapping_error(adv_spec, ["hiders", "seekers"], [("*", "hider")])
    assert str(exc) == ("agents[0].policy = 'hider' names no policy; did you mean 'hiders'? (policies: hiders, "
                        "seekers); use one of them or add [policies.hider]")
    exc = _mapping_error(adv_spec, ["a", "b"], [])
    assert str(exc) == ("agents: 2 policies are named (a, b) but no [[agents]] entry maps env "
                        "'mpe2.simple_adversary_v3''s agents (adversary_0, agent_0, agent_1) to them; add [[agents]] "
                        "tables with match (a pattern) and policy (a name)")


# ----------------------------------------------------------------------------- building
def test_two_teams_get_their_own_algorithm_options_workers_and_agents(registry, adv_spec, tmp_path):
    toml = tmp_path / "teams.toml"
    toml.write_text('actors.count = 3\nalgo.hidden = 32\n\n[policies.adversary]\nalgo = "mappo"\n'
                    "policy.count = 2\n\n[policies.good]\nalgo_name = \"mappo\"\nalgo.lr = 1e-3\n"
                    'trainer.count = 3\n\n[[agents]]\nmatch = "adversary_*"\npolicy = "adversary"\n\n'
                    '[[agents]]\nmatch = "agent_*"\npolicy = "good"\n')
    data = load_config_file(toml)
    cfg = _cfg(registry, adv_spec)
    cfg.actors.count = 3
    cfg.trainer.batch_samples = 24  # the run's trainer.* are every policy's defaults
    pols = _build(registry, adv_spec, data, ["policies.adversary.algo.ent_coef=0.05", "algo.layers=3"], cfg=cfg)
    assert not pols.implicit and list(pols.named) == ["adversary", "good"] and pols.trainable == ["adversary", "good"]
    assert pols.agents == {"adversary_0": "adversary", "agent_0": "good", "agent_1": "good"}
    adv, good = pols["adversary"], pols["good"]
    assert (adv.agents, good.agents) == (("adversary_0",), ("agent_0", "agent_1"))
    assert (adv.policy.count, good.policy.count, adv.trainer.count, good.trainer.count) == (2, 1, 1, 3)
    assert (adv.trainer.batch_samples, good.trainer.batch_samples) == (24, 24)
    # the run's algo.* (file and --set) over the presets, then each policy's own
    assert (adv.algo.hidden, good.algo.hidden, adv.algo.layers, good.algo.layers) == (32, 32, 3, 3)
    assert (adv.algo.ent_coef, good.algo.ent_coef, good.algo.lr) == (0.05, 0.01, 1e-3)
    assert good.explicit == {"algo_name", "algo.lr", "trainer.count"}


def test_a_policys_workers_see_the_run_config_with_its_own_algorithm_options_workers_and_spec(registry, adv_spec):
    cfg = _cfg(registry, adv_spec)
    pols = _build(registry, adv_spec, TEAMS, ["policies.good.policy.count=2", "policies.good.algo.lr=0.002"], cfg=cfg)
    view = policy_view(cfg, pols, "good")
    good = pols["good"]
    assert view.algo is good.algo and view.policy is good.policy and view.trainer is good.trainer
    assert (view.algo.lr, view.policy.count, view.spec.agents, view.spec.observation_space["obs"].shape) == \
        (0.002, 2, ("agent_0", "agent_1"), (10,))
    assert (view.actors, view.seed, view.env_steps, view.name) == (cfg.actors, cfg.seed, cfg.env_steps, cfg.name)
    assert cfg.policy.count == 1 and cfg.spec is adv_spec  # the run's own config is left as it was


def test_no_policy_named_gives_the_one_default_policy_of_the_runs_own_options(registry):
    spread = PettingZooEnv(simple_spread_v3.parallel_env(), "mpe2.simple_spread_v3").spec
    cfg = _cfg(registry, spread)
    pols = _build(registry, spread, {}, [], cfg=cfg)
    assert pols.implicit and list(pols.named) == [DEFAULT_POLICY] and policies_to_dict(pols) == {}
    default = pols[DEFAULT_POLICY]
    assert default.algo is cfg.algo and default.policy is cfg.policy and default.trainer is cfg.trainer
    assert pols.agents == {"agent_0": "default", "agent_1": "default", "agent_2": "default"}
    assert policy_view(cfg, pols, DEFAULT_POLICY) is cfg


def test_one_policy_for_agents_with_different_spaces_is_refused(registry, adv_spec):
    exc = _refused(registry, adv_spec, {})
    assert exc.field == "policies"
    assert str(exc) == ("env 'mpe2.simple_adversary_v3': its agents have different spaces (adversary_0: observation "
                        "obs [8], zoo:global_state [28], action Discrete(5); agent_0, agent_1: observation obs [10], "
                        "zoo:global_state [28], action Discrete(5)), so one network cannot act for all of them; name "
                        "a policy for each group of agents with one space ([policies.NAME] tables and [[agents]] "
                        "entries: docs/policies.md)")
    data = {"policies": {"all": {}, "spare": {}}, "agents": [{"match": "*", "policy": "all"}]}
    exc = _refused(registry, adv_spec, data)
    assert exc.problems[0] == ("policies.spare: no agent maps to it (the [[agents]] entries map adversary_0 -> all, "
                               "agent_0 -> all, agent_1 -> all); map agents to it (policy = 'spare') or remove "
                               "[policies.spare]")
    exc = _refused(registry, adv_spec, {"policies": {"all": {}}})
    assert exc.field == "policies.all.agents"
    assert str(exc) == ("policies.all: its agents (adversary_0, agent_0, agent_1) must share one observation and one "
                        "action space (one network acts for all of them), but agents 'adversary_0' and 'agent_0' of "
                        "env 'mpe2.simple_adversary_v3' have different spaces: observation 'obs' Box(8,) float32 "
                        "(adversary_0) vs Box(10,) float32 (agent_0); map agents with different spaces to different "
                        "policies")


def test_one_policy_for_a_box_agent_and_a_discrete_agent_is_refused_naming_both_spaces(registry):
    """fake-mixed: mover acts with Box(-1, 1, (2,)), chooser with Discrete(4)."""
    from zoo.core.env import PaddedSpaces
    from zoo.core.testing.fake_envs import MoverChooserEnv

    spec = PaddedSpaces(MoverChooserEnv()).spec
    exc = _refused(registry, spec, {"policies": {"both": {"algo": "ppo"}}}, cfg=_cfg(registry, spec, algo="ppo"))
    assert exc.field == "policies.both.agents"
    assert str(exc) == ("policies.both: its agents (mover, chooser) must share one observation and one action space "
                        "(one network acts for all of them), but agents 'mover' and 'chooser' of env 'fake-mixed' "
                        "have different spaces: observation 'obs' Box(3,) float32 (mover) vs Box(5,) float32 "
                        "(chooser); action space Box(-1.0, 1.0, (2,), float32) (mover) vs Discrete(4) (chooser); map "
                        "agents with different spaces to different policies")
    pols = _build(registry, spec, {"policies": {"mover": {"algo": "ppo"}, "chooser": {"algo": "ppo"}},
                                   "agents": [{"match": "mover", "policy": "mover"},
                                              {"match": "chooser", "policy": "chooser"}]},
                  cfg=_cfg(registry, spec, algo="ppo"))
    assert pols.agents == {"mover": "mover", "chooser": "chooser"}


def test_two_policies_of_one_name_in_a_toml_file_are_refused(tmp_path):
    toml = tmp_path / "teams.toml"
    toml.write_text('[policies.hiders]\nalgo = "mappo"\n\n[policies.hiders]\ntrainable = false\n')
    with pytest.raises(ConfigError) as info:
        load_config_file(toml)
    assert str(info.value) == (f"--config {toml}: [policies.hiders] is declared twice (again at line 4): two policies "
                               "cannot share a name; rename one, or merge the two tables into one")
    toml.write_text('[policies.hiders]\nalgo = "mappo"\n\n[policies]\nhiders.trainable = false\n')
    with pytest.raises(ConfigError) as info:
        load_config_file(toml)
    assert str(info.value) == (f"--config {toml}: [policies.hiders] is declared twice (again at line 5): two policies "
                               "cannot share a name; rename one, or merge the two tables into one")
    toml.write_text("[actors]\ncount = 2\n[actors]\nring_size = 1\n")  # any other table: the same fix, said plainly
    with pytest.raises(ConfigError) as info:
        load_config_file(toml)
    assert str(info.value) == (f"--config {toml}: [actors] is declared twice (again at line 3); merge the two tables "
                               "into one")
    toml.write_text("[actors]\ncount = 2\ncount = 3\n")  # other TOML errors keep tomllib's words
    with pytest.raises(ConfigError) as info:
        load_config_file(toml)
    assert str(info.value).startswith(f"--config {toml}: not valid TOML: Cannot overwrite a value")  # tomllib's (or
    # tomli's, on Python 3.10) own words follow


def test_names_that_differ_only_in_case_and_bad_names_are_refused(registry, adv_spec):
    exc = _refused(registry, adv_spec, TEAMS, ["policies.Good.algo=mappo"])
    assert exc.field == "policies.Good"
    assert str(exc) == ("policies.good and policies.Good differ only in case; a policy's name names its checkpoint "
                        "folder (checkpoints/<policy>/), and the two would be one folder on a case-insensitive file "
                        "system: rename one")
    exc = _refused(registry, adv_spec, None, ["policies.red-team.algo=mappo"])
    assert str(exc) == ("policies.red-team: the name is not allowed: a policy name is a letter, then letters, digits "
                        "or '_' (at most 64 characters): it is part of endpoint names (inference-<policy>-<m>) and "
                        "of folder names (checkpoints/<policy>/); e.g. policies.red_team")


def test_set_overrides_a_policy_from_the_file_and_bad_keys_name_the_policy(registry, adv_spec):
    pols = _build(registry, adv_spec, TEAMS, ["policies.good.policy.count=2", "policies.good.policy.count=1"])
    assert pols["good"].policy.count == 1  # the last --set wins, as for top-level keys
    exc = _refused(registry, adv_spec, TEAMS, ["policies.good.policy.cont=2"])
    assert exc.field == "policies.good.policy.cont"
    assert str(exc) == ("--set policies.good.policy.cont=2: unknown field 'policy.cont'; did you mean 'policy.count' "
                        "or 'policy.precision' or 'policy.inline'? (policy has: count, max_batch, max_wait_ms, device, "
                        "threads, inline, precision, stall_warning_s)")
    exc = _refused(registry, adv_spec, TEAMS, ["policies.good=mappo"])
    assert str(exc) == ("--set policies.good=mappo: set one option of one policy: --set policies.NAME.KEY=VALUE "
                        "(e.g. policies.hiders.policy.count=2)")
    exc = _refused(registry, adv_spec, _with(good={"algo": "mapo"}))
    assert exc.field == "policies.good.algo"
    assert str(exc).startswith("policies.good.algo = 'mapo' is not a registered algorithm; did you mean 'mappo'?")


def test_agents_entries_from_set_replace_the_files_and_malformed_entries_are_refused(registry, adv_spec):
    pols = _build(registry, adv_spec, TEAMS,
                  ["agents=[{'match': 'agent_?', 'policy': 'good'}, {'match': '*', 'policy': 'adversary'}]"])
    assert pols.agents == {"adversary_0": "adversary", "agent_0": "good", "agent_1": "good"}
    assert pols.rules == [AgentRule("agent_?", "good"), AgentRule("*", "adversary")]
    data = _with()
    data["agents"] = [{"match": "*", "polcy": "good"}]
    exc = _refused(registry, adv_spec, data)
    assert exc.problems[:2] == [
        "--config teams.toml [[agents]]: agents[0] has unknown key(s) polcy; an [[agents]] entry has match (an fnmatch "
        "pattern) and policy (a policy name)",
        "--config teams.toml [[agents]]: agents[0].policy must be a non-empty string, got None (missing); e.g. "
        "policy = \"hiders\""]
    exc = _refused(registry, adv_spec, {"agents": [{"match": "*", "policy": "default"}]})
    assert str(exc) == ("--config teams.toml [[agents]]: [[agents]] entries map agents to named policies, but no "
                        "[policies.NAME] table names one; add the tables, or remove the entries (without them every "
                        "agent acts with the run's one policy)")


def test_a_policys_options_are_checked_by_the_runs_own_rules(registry, adv_spec):
    exc = _refused(registry, adv_spec, TEAMS, ["policies.good.policy.count=5"])
    assert exc.field == "policies.good.policy.count"
    assert str(exc) == ("policies.good: policy.count=5 is more than actors.count=2: actor i goes to policy worker i "
                        "mod policy.count, so 3 policy worker(s) would get no actor and wait forever; set --set "
                        "policy.count=2 or --set actors.count=5")
    exc = _refused(registry, adv_spec, TEAMS, ["policies.adversary.policy.inline=true",
                                               "policies.adversary.policy.count=2"])
    assert exc.field == "policies.adversary.policy.count"
    assert exc.problems[0].startswith("policies.adversary: policy.count=2 contradicts policy.inline=true")


# ----------------------------------------------------------------------------- frozen policies
def _save_policy(registry, spec, agents, path, algo_cfg=None, with_config=False, algo="mappo") -> str:
    """A checkpoint of a fresh ``algo`` network for ``agents``; ``with_config``: with the algorithm's
    options in it, as the trainer writes them (``["algorithm"]["config"]``)."""
    algo_cls = registry.get("algorithm", algo).load()
    cfg = algo_cfg or algorithm_config_class(registry.get("algorithm", algo))()
    net = algo_cls.build_policy(cfg, spec.subset(agents))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    state = {"policy": net.state_dict(), **({"config": dataclasses.asdict(cfg)} if with_config else {})}
    write_checkpoint(str(path), {"format": FORMAT, "algorithm": state, "policy_version": 7,
                                 "updates": 7, "env_steps": 700, "frames": 700, "episodes": 3, "resumes": 0})
    return str(path)


def test_a_frozen_policy_without_weights_is_refused(registry, adv_spec):
    exc = _refused(registry, adv_spec, _with(adversary={"trainable": False}))
    assert exc.field == "policies.adversary.weights"
    assert str(exc) == ("policies.adversary.weights: policy adversary is frozen (trainable = false) but has no weights "
                        "to serve; set policies.adversary.weights to a checkpoint file, a run folder, POLICY@VERSION "
                        "or \"init\" (its initial weights; docs/policies.md), or make the policy trainable")


def test_trainer_options_on_a_frozen_policy_are_refused(registry, adv_spec, tmp_path):
    ckpt = _save_policy(registry, adv_spec, ["adversary_0"], tmp_path / "adv.pt")
    exc = _refused(registry, adv_spec, _with(adversary={"trainable": False, "weights": ckpt,
                                                        "trainer": {"count": 2, "threads": 1}}))
    assert exc.field == "policies.adversary.trainer.count"
    assert exc.problems == [
        "policies.adversary.trainer.count: policy adversary is frozen (trainable = false) and has no trainers; remove "
        "policies.adversary.trainer.count, or make the policy trainable",
        "policies.adversary.trainer.threads: policy adversary is frozen (trainable = false) and has no trainers; "
        "remove policies.adversary.trainer.threads, or make the policy trainable"]


def test_weights_on_a_trainable_policy_and_every_policy_frozen_are_refused(registry, adv_spec, tmp_path):
    adv = _save_policy(registry, adv_spec, ["adversary_0"], tmp_path / "adv.pt")
    good = _save_policy(registry, adv_spec, ["agent_0"], tmp_path / "good.pt")
    exc = _refused(registry, adv_spec, _with(adversary={"weights": adv}))
    assert str(exc) == (f"policies.adversary.weights = {adv!r} is set on a trainable policy; weights are what a frozen "
                        "policy serves: set policies.adversary.trainable = false, or remove policies.adversary.weights")
    exc = _refused(registry, adv_spec, _with(adversary={"trainable": False, "weights": adv},
                                             good={"trainable": False, "weights": good}))
    assert str(exc) == ("policies: every policy is frozen (trainable = false: adversary, good), so the run would train "
                        "nothing; make one trainable (zoo eval plays frozen weights)")


def test_weights_whose_shapes_do_not_fit_the_agents_spaces_are_refused(registry, adv_spec, tmp_path):
    good = _save_policy(registry, adv_spec, ["agent_0"], tmp_path / "good.pt")  # obs 10, the adversary sees 8
    exc = _refused(registry, adv_spec, _with(adversary={"trainable": False, "weights": good}))
    assert exc.field == "policies.adversary.weights"
    assert str(exc) == (f"policies.adversary.weights: {Path(good).resolve()} does not fit policy adversary (mappo "
                        "for agents adversary_0): obs_norm.stats.obs.m is [10] in it, [8] here; obs_norm.stats.obs.s "
                        "is [10] in it, [8] here; actor_encoder.mlp.0.weight is [64, 10] in it, [64, 8] here; give "
                        "weights saved for these agents' spaces with the same policies.adversary.algo options")
    narrow = algorithm_config_class(registry.get("algorithm", "mappo"))(hidden=32)
    small = _save_policy(registry, adv_spec, ["adversary_0"], tmp_path / "small.pt", narrow)
    exc = _refused(registry, adv_spec, _with(adversary={"trainable": False, "weights": small}))
    assert str(exc) == (f"policies.adversary.weights: {Path(small).resolve()} does not fit policy adversary (mappo "
                        "for agents adversary_0): actor_encoder.mlp.0.weight is [32, 8] in it, [64, 8] here; "
                        "actor_encoder.mlp.0.bias is [32] in it, [64] here; actor_encoder.mlp.2.weight is [32] in it, "
                        "[64] here (and 15 more); give weights saved for these agents' spaces with the same "
                        "policies.adversary.algo options")
    pols = _build(registry, adv_spec, _with(adversary={"trainable": False, "weights": small, "algo": {"hidden": 32},
                                                       "algo_name": "mappo"}))  # the options it was saved with
    assert pols["adversary"].weights == str(Path(small).resolve()) and pols["adversary"].algo.hidden == 32


def test_a_frozen_policy_is_built_with_the_options_its_checkpoint_was_trained_with(registry, adv_spec, tmp_path):
    trained = algorithm_config_class(registry.get("algorithm", "mappo"))(hidden=32, layers=3, device="cuda:3")
    ckpt = _save_policy(registry, adv_spec, ["adversary_0"], tmp_path / "adv.pt", trained, with_config=True)
    pols = _build(registry, adv_spec, _with(adversary={"trainable": False, "weights": ckpt}), ["algo.hidden=128"])
    adv, good = pols["adversary"], pols["good"]
    assert (adv.algo.hidden, adv.algo.layers, adv.algo.device, good.algo.hidden) == (32, 3, "cpu", 128)
    exc = _refused(registry, adv_spec, _with(adversary={"trainable": False, "weights": ckpt, "algo_name": "mappo",
                                                        "algo": {"hidden": 64}}))  # its own table still wins
    assert exc.field == "policies.adversary.weights" and "does not fit policy adversary" in str(exc)
    ppo = _save_policy(registry, adv_spec, ["adversary_0"], tmp_path / "ppo.pt", with_config=True, algo="ppo")
    exc = _refused(registry, adv_spec, _with(adversary={"trainable": False, "weights": ppo}))
    assert exc.field == "policies.adversary.weights"
    assert str(exc) == (f"policies.adversary.weights: {Path(ppo).resolve()} was written by another algorithm than "
                        "policies.adversary.algo = 'mappo' (its options anneal_lr, anneal_lr_steps, augment_symmetries "
                        "are not mappo's); set policies.adversary.algo to the algorithm that trained it")


def test_fitting_weights_resolve_from_a_file_a_run_folder_or_a_kept_version(registry, adv_spec, tmp_path):
    run = tmp_path / "runs" / "teams-1"
    adv = _save_policy(registry, adv_spec, ["adversary_0"], run / "checkpoints" / "adversary" / "latest.pt")
    (run / "config.json").write_text("{}")
    for source in (adv, str(run), "teams-1"):
        cfg = _cfg(registry, adv_spec, runs_dir=str(tmp_path / "runs"))
        pols = _build(registry, adv_spec, _with(adversary={"trainable": False, "weights": source}), cfg=cfg)
        assert pols["adversary"].weights == str(Path(adv).resolve()) and pols.trainable == ["good"]
        saved = policies_to_dict(pols)
        assert "trainer" not in saved["policies"]["adversary"] and saved["policies"]["adversary"]["weights"] == \
            str(Path(adv).resolve())
    kept = _save_policy(registry, adv_spec, ["adversary_0"], run / "checkpoints" / "good2" / "policy-v00000120.pt")
    assert resolve_weights("good2@120", "adversary", run_dir=run) == Path(kept).resolve()
    with pytest.raises(ConfigError) as info:
        resolve_weights("good2@121", "adversary", run_dir=run)
    assert str(info.value) == (
        f"policies.adversary.weights = 'good2@121': policy good2 kept no version 121 "
        f"({run}/checkpoints/good2/policy-v00000121.pt does not exist, nor {run}/history/good2/v00000121.pt): "
        "versions are kept with policies.good2.trainer.keep_checkpoints = true or "
        "policies.good2.trainer.history.every_updates = N; give a version it kept")
    # a version the history kept (docs/history.md) is found too
    (run / "history" / "good2").mkdir(parents=True)
    shutil.copy(kept, run / "history" / "good2" / "v00000121.pt")
    assert resolve_weights("good2@121", "adversary", run_dir=run) == (run / "history" / "good2" / "v00000121.pt")
    # a run that names no policy keeps checkpoints/policy-v....pt: default@VERSION (looked in checkpoints/default/)
    shutil.copy(kept, run / "checkpoints" / "policy-v00000007.pt")
    assert resolve_weights("default@7", "adversary", run_dir=run) == (run / "checkpoints" / "policy-v00000007.pt")
    with pytest.raises(ConfigError) as info:
        resolve_weights("default@8", "adversary", run_dir=run)
    assert str(info.value) == (
        f"policies.adversary.weights = 'default@8': policy default kept no version 8 "
        f"({run}/checkpoints/policy-v00000008.pt does not exist, nor {run}/history/default/v00000008.pt): "
        "versions are kept with trainer.keep_checkpoints = true or trainer.history.every_updates = N; "
        "give a version it kept")
    with pytest.raises(ConfigError) as info:
        resolve_weights("good2@120", "adversary")
    assert str(info.value) == ("policies.adversary.weights = 'good2@120': a POLICY@VERSION checkpoint is one this run "
                               "kept, and a new run has none yet; give a checkpoint file or another run's folder")
    shutil.rmtree(run / "checkpoints" / "adversary")
    with pytest.raises(ConfigError) as info:
        resolve_weights(str(run), "adversary")
    assert str(info.value) == (f"policies.adversary.weights = {str(run)!r}: the run folder {run} has no checkpoint of "
                               "policy adversary (checkpoints/adversary/latest.pt) nor of a single policy "
                               "(checkpoints/latest.pt); it has no checkpoint at all")
    with pytest.raises(ConfigError) as info:
        resolve_weights("nowhere", "adversary", runs_dir=tmp_path / "runs")
    assert str(info.value) == (f"policies.adversary.weights = 'nowhere' does not exist (nor "
                               f"{str(tmp_path / 'runs' / 'nowhere')!r}); give a checkpoint file (.pt), a run folder, "
                               "or POLICY@VERSION (docs/policies.md)")


def test_a_single_policy_runs_folder_serves_its_latest_checkpoint(registry, adv_spec, tmp_path):
    run = tmp_path / "old-run"
    adv = _save_policy(registry, adv_spec, ["adversary_0"], latest_path(str(run)))
    assert resolve_weights(str(run), "adversary") == Path(adv).resolve()


# ----------------------------------------------------------------------------- config.json
def test_named_policies_round_trip_through_config_json(registry, adv_spec, tmp_path):
    adv = _save_policy(registry, adv_spec, ["adversary_0"], tmp_path / "adv.pt")
    pols = _build(registry, adv_spec, _with(adversary={"trainable": False, "weights": adv}),
                  ["policies.good.algo.lr=0.002", "policies.good.policy.count=2", "policies.good.trainer.threads=1"])
    saved = json.loads(json.dumps(policies_to_dict(pols)))
    assert saved["agents"] == TEAMS["agents"]
    assert saved["policies"]["good"]["agents"] == ["agent_0", "agent_1"]
    back = policies_from_saved(registry, saved, _cfg(registry, adv_spec))
    assert back.agents == pols.agents and list(back.named) == list(pols.named)
    for name in pols.named:
        a, b = pols[name], back[name]
        assert (a.algo_name, a.algo, a.policy, a.trainable, a.weights, a.agents) == \
            (b.algo_name, b.algo, b.policy, b.trainable, b.weights, b.agents)
    assert back["good"].trainer == pols["good"].trainer and back["good"].algo.lr == 0.002


def test_a_run_made_before_named_policies_resumes_as_its_one_default_policy(registry, tmp_path):
    """tests/unit/data/config_before_policies.json: config.json as `zoo train ppo --env CartPole-v1` wrote it before
    core/policies.py existed (build_config + config_to_dict at commit 5f31fee)."""
    run = tmp_path / "ppo-before-policies"
    run.mkdir()
    shutil.copy(FIXTURE, run / "config.json")
    (run / "checkpoints").mkdir()
    write_checkpoint(latest_path(str(run)), {"format": FORMAT, "algorithm": {}, "policy_version": 3, "updates": 3,
                                             "env_steps": 6144, "frames": 6144, "episodes": 90, "resumes": 0})
    saved = json.loads(FIXTURE.read_text())
    cfg, _ = resume_config(registry, str(run), steps=40_000)
    pols = policies_from_saved(registry, saved, cfg, run_dir=run)
    assert pols.implicit and list(pols.named) == ["default"] and pols.trainable == ["default"]
    default = pols["default"]
    assert (default.algo_name, default.algo, default.policy, default.trainer) == \
        ("ppo", cfg.algo, cfg.policy, cfg.trainer)
    assert (default.trainer.batch_samples, default.policy.count, default.trainable, default.weights) == (8, 1, True, "")
    assert pols.agents == {"agent_0": "default"} and policies_to_dict(pols) == {}


def test_zoo_train_reads_named_policies_from_the_file_and_set_and_names_a_bad_key(registry, tmp_path):
    toml = tmp_path / "teams.toml"
    toml.write_text('[policies.hiders]\nalgo = "ppo"\ntrainer.batch_samples = 8\n')
    cfg = build_config(registry, "ppo", "CartPole-v1", config_file=toml, steps=20_000, name="t",
                       overrides=["policies.hiders.policy.count=1"])
    assert list(cfg.policies.named) == ["hiders"] and not cfg.policies.implicit
    assert cfg.policies["hiders"].trainer.batch_samples == 8 and cfg.policies["hiders"].agents == ("agent_0",)
    saved = config_to_dict(cfg)
    assert saved["policies"]["hiders"]["trainer"]["batch_samples"] == 8 and saved["agents"] == []
    plain = build_config(registry, "ppo", "CartPole-v1", steps=20_000, name="t")
    assert plain.policies is None and "policies" not in config_to_dict(plain)
    toml.write_text('[policies.hiders]\nalgo = "ppo"\ntrainer.batch_sample = 8\n')
    with pytest.raises(ConfigError) as info:
        build_config(registry, "ppo", "CartPole-v1", config_file=toml, steps=20_000, name="t")
    assert info.value.field == "policies.hiders.trainer.batch_sample"


def test_build_policies_leaves_the_global_torch_rng_alone(registry, adv_spec, tmp_path):
    adv = _save_policy(registry, adv_spec, ["adversary_0"], tmp_path / "adv.pt")
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    _build(registry, adv_spec, _with(adversary={"trainable": False, "weights": adv}))
    assert torch.equal(torch.rand(3), expected)


def test_the_issues_hide_and_seek_example_maps_hiders_and_seekers_of_the_real_env(registry, tmp_path):
    toml = tmp_path / "hs.toml"
    toml.write_text('[policies.hiders]\nalgo = "mappo"\n[policies.seekers]\nalgo = "mappo"\npolicy.count = 1\n'
                    '[[agents]]\nmatch = "hider_*"\npolicy = "hiders"\n[[agents]]\nmatch = "seeker_*"\n'
                    'policy = "seekers"\n')
    rest, overrides, layers = split_policy_layers(load_config_file(toml), ["policies.hiders.algo.lr=1e-4"],
                                                  source=f"--config {toml}")
    cfg = build_config(registry, "mappo", "hide-and-seek", steps=1_000_000, name="hs", overrides=overrides)
    pols = build_policies(registry, cfg, layers, file_data=rest, overrides=overrides)
    assert pols.agents == {"hider_0": "hiders", "hider_1": "hiders", "seeker_0": "seekers", "seeker_1": "seekers"}
    assert (pols["hiders"].algo.lr, pols["seekers"].algo.lr) == (1e-4, cfg.algo.lr)
    assert pols["seekers"].explicit == {"algo_name", "policy.count"}


def test_agents_whose_action_spaces_differ_cannot_share_a_policy():
    from gymnasium import spaces

    from zoo.core.env import EnvSpec

    obs = {"obs": spaces.Box(0, 1, (4,), np.float32)}
    spec = EnvSpec("two-heads", ("a", "b", "c"), obs, spaces.Discrete(3),
                   agent_spaces={"a": (obs, spaces.Discrete(3)), "b": (obs, spaces.Discrete(5)),
                                 "c": (obs, spaces.Discrete(3))})
    assert spec.mixed and spec.space_groups() == [("a", "c"), ("b",)]
    assert spec.subset(["c", "a"]).action_space == spaces.Discrete(3)
    with pytest.raises(ValueError) as info:
        spec.subset(["a", "b"])
    assert str(info.value) == ("agents 'a' and 'b' of env 'two-heads' have different spaces: action space Discrete(3) "
                               "(a) vs Discrete(5) (b)")


def test_a_policy_frozen_at_its_initial_weights_serves_bitwise_the_weights_a_trainable_run_starts_from(
        registry, adv_spec):
    from types import SimpleNamespace

    from zoo.core.workers.policy import Inference, frozen_weights
    from zoo.core.workers.trainer import make_algorithm

    def ctx(cfg, policy, role_cfg):
        return SimpleNamespace(cfg=role_cfg, spec=role_cfg.spec, policy=policy, rank=0, attempt=0, registry=registry)

    trainable = _cfg(registry, adv_spec, seed=5)
    trainable.policies = _build(registry, adv_spec, TEAMS, cfg=trainable)
    frozen = _cfg(registry, adv_spec, seed=5)
    frozen.policies = _build(registry, adv_spec, _with(adversary={"trainable": False, "weights": "init"}), cfg=frozen)
    assert frozen.policies.named["adversary"].weights == "init" and not frozen.policies.named["adversary"].trainable
    assert policies_to_dict(frozen.policies)["policies"]["adversary"]["weights"] == "init"
    view = policy_view(trainable, trainable.policies, "adversary")
    # the version-0 weights its trainer publishes (Trainer.publish: algo.policy.state_dict())
    start = make_algorithm(ctx(trainable, "adversary", view), None).policy.state_dict()
    frozen_view = policy_view(frozen, frozen.policies, "adversary")
    assert frozen_weights(frozen_view, "adversary") == "init"
    net = Inference(ctx(frozen, "adversary", frozen_view), 0, frozen_view, frozen_view.spec)
    before = torch.get_rng_state()
    net.load_frozen("init", "adversary")
    assert torch.equal(torch.get_rng_state(), before)  # the worker's action-sampling generator is untouched
    assert net.version == 0
    served = net.policy.state_dict()
    assert list(served) == list(start)
    assert [k for k in start if not torch.equal(served[k], start[k])] == []
    # another seed gives other weights: they are the seeded initial ones, not a fixed network
    other = _cfg(registry, adv_spec, seed=6)
    other.policies = _build(registry, adv_spec, TEAMS, cfg=other)
    view = policy_view(other, other.policies, "adversary")
    moved = make_algorithm(ctx(other, "adversary", view), None).policy.state_dict()
    assert not all(torch.equal(moved[k], start[k]) for k in start if moved[k].is_floating_point())


def test_init_weights_on_a_trainable_policy_are_refused_and_the_missing_weights_message_names_init(
        registry, adv_spec):
    exc = _refused(registry, adv_spec, _with(adversary={"weights": "init"}))
    assert str(exc) == ("policies.adversary.weights = 'init' is set on a trainable policy; weights are what a frozen "
                        "policy serves: set policies.adversary.trainable = false, or remove policies.adversary.weights")
