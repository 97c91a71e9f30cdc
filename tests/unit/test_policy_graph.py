"""The worker graph of a run with named policies (docs/policies.md, "Endpoints", "Graph and graph.json")."""
from __future__ import annotations

import pytest
from mpe2 import simple_spread_v3

from zoo.core.config import ExperimentConfig, algorithm_config_class
from zoo.core.env import PettingZooEnv
from zoo.core.graph import Graph, endpoint, parameter_endpoint
from zoo.core.plugins import get_registry
from zoo.core.policies import build_policies, policy_view, split_policy_layers
from zoo.core.workers.kinds import builtin_kinds
from zoo.plugins.envs.pettingzoo.env import PettingZooConfig

SPREAD = "mpe2.simple_spread_v3"


@pytest.fixture(scope="module")
def registry():
    return get_registry()


@pytest.fixture(scope="module")
def spread_spec():
    env = PettingZooEnv(simple_spread_v3.parallel_env(), SPREAD)
    env.close()
    return env.spec


def _teams(registry, spec, tables, agents=None):
    cfg = ExperimentConfig(algo_name="mappo", env_name=f"pettingzoo:{SPREAD}",
                           algo=algorithm_config_class(registry.get("algorithm", "mappo"))(), env=PettingZooConfig(),
                           env_steps=1_000_000, name="teams")
    cfg.actors.count = 3
    cfg.spec = spec
    data = {"policies": tables, "agents": agents or [{"match": "agent_0", "policy": "lead"},
                                                     {"match": "*", "policy": "rest"}]}
    rest, overrides, layers = split_policy_layers(data, [])
    cfg.policies = build_policies(registry, cfg, layers, file_data=rest, overrides=overrides)
    return cfg


def test_endpoint_names_of_the_implicit_policy_stay_and_named_ones_carry_the_policy():
    assert endpoint("inference", 1) == "inference-1" and endpoint("sample", 0, "") == "sample-0"
    assert endpoint("inference", 1, "hiders") == "inference-hiders-1"
    assert parameter_endpoint() == "parameter" and parameter_endpoint("seekers") == "parameter-seekers"


def test_each_policy_has_its_own_policy_workers_and_trainers_numbered_across_policies(registry, spread_spec):
    cfg = _teams(registry, spread_spec, {"lead": {"algo": "mappo", "policy": {"count": 2}},
                                         "rest": {"algo": "mappo", "trainer": {"count": 2}}})
    graph = Graph.from_config(cfg, builtin_kinds())
    assert graph.counts == {"trainer": 3, "policy": 3, "actor": 3}
    assert [(p.name, p.policy_workers, p.trainers, p.first_policy_worker, p.first_trainer, p.agents)
            for p in graph.layout] == [("lead", 2, 1, 0, 0, ("agent_0",)),
                                       ("rest", 1, 2, 2, 1, ("agent_1", "agent_2"))]
    found = [(role, i, *(lambda f: (f[0].name, f[1]))(graph.policy_of_worker(role, i)))
             for role, i in graph.workers() if role != "actor"]
    assert found == [("trainer", 0, "lead", 0), ("trainer", 1, "rest", 0), ("trainer", 2, "rest", 1),
                     ("policy", 0, "lead", 0), ("policy", 1, "lead", 1), ("policy", 2, "rest", 0)]
    assert graph.policy_of_worker("actor", 0) is None
    assert [graph.policy_worker_for(a, "lead") for a in range(3)] == [0, 1, 0]
    assert [graph.trainer_for(a, "rest") for a in range(3)] == [0, 1, 0]
    assert graph.actors_of_policy(1) == [1] and graph.actors_of_trainer(2) == [1]
    assert graph.producers("inference") == 3 and graph.producers("sample") == 3  # rest's one worker, lead's trainer


def test_graph_json_lists_the_policies_and_each_workers_policy_and_endpoints(registry, spread_spec):
    cfg = _teams(registry, spread_spec, {"lead": {"algo": "mappo"}, "rest": {"algo": "mappo", "policy":
                                                                            {"inline": True}}})
    graph = Graph.from_config(cfg, builtin_kinds())
    data = graph.to_dict()
    assert data["counts"] == {"trainer": 2, "policy": 1, "actor": 3}
    assert data["policies"] == {
        "lead": {"trainable": True, "agents": ["agent_0"], "inline": False, "policy_workers": [0], "trainers": [0],
                 "parameter": "parameter-lead"},
        "rest": {"trainable": True, "agents": ["agent_1", "agent_2"], "inline": True, "policy_workers": [],
                 "trainers": [1], "parameter": "parameter-rest"}}
    workers = {(w["role"], w["index"]): w for w in data["workers"]}
    assert workers[("trainer", 1)] == {"role": "trainer", "index": 1, "policy": "rest", "rank": 0,
                                       "pulls": "sample-rest-0", "publishes": "parameter-rest", "actors": [0, 1, 2]}
    assert workers[("policy", 0)] == {"role": "policy", "index": 0, "policy": "lead", "local": 0,
                                      "serves": "inference-lead-0", "subscribes": "parameter-lead",
                                      "actors": [0, 1, 2]}
    assert workers[("actor", 2)] == {"role": "actor", "index": 2,
                                     "requests": {"lead": "inference-lead-0", "rest": "inline"},
                                     "pushes": {"lead": "sample-lead-0", "rest": "sample-rest-0"}}
    assert data["kinds"]["actor"]["connects"] == ["inference", "sample", "parameter"]


def test_a_policys_workers_run_on_its_view_and_the_implicit_policy_keeps_todays_graph(registry, spread_spec):
    cfg = _teams(registry, spread_spec, {"lead": {"algo": "mappo", "trainer": {"batch_samples": 8}},
                                         "rest": {"algo": "mappo"}})
    view = policy_view(cfg, cfg.policies, "lead")
    assert view.trainer.batch_samples == 8 and view.spec.agents == ("agent_0",) and view.policies is cfg.policies
    implicit = Graph(4, 2, 2)
    assert not implicit.named and [p.tag for p in implicit.layout] == [""]
    assert "policies" not in implicit.to_dict()
    assert [implicit.policy_of(a) for a in range(4)] == [0, 1, 0, 1] and implicit.trainer_of(3) == 1


def test_a_resuming_policy_cuts_only_its_own_trainer_rows_after_its_checkpoint(tmp_path):
    from zoo.core.workers.metrics import cut_metrics

    path = tmp_path / "metrics.jsonl"
    head = '{"type": "update", "policy": "lead", "updates": 1}\n'
    tail = ['{"type": "update", "policy": "rest", "updates": 2}\n',
            '{"type": "update", "policy": "lead", "updates": 2}\n',
            '{"type": "restart", "role": "actor", "index": 0}\n',
            '{"type": "episode", "policy": "lead", "return": 1}\n',
            '{"type": "end", "policy": "rest", "updates": 3}\n',
            '{"type": "update", "pol']
    path.write_text(head + "".join(tail))
    assert cut_metrics(str(path), len(head), "lead") == 3
    assert path.read_text() == head + tail[0] + tail[2] + tail[4]


def test_two_policies_resuming_at_once_cut_by_their_own_row_counts_and_never_split_a_line(tmp_path):
    # Found by test_pbt_train (a resumed population): lead's cut moves the rows after its byte
    # offset, so rest's byte offset then falls inside a line; the file kept '{{"type": ...'.
    import json

    from zoo.core.workers.metrics import MetricsWriter, cut_metrics

    path = tmp_path / "metrics.jsonl"
    lines = ['{"type": "update", "policy": "lead", "updates": 1}\n',   # lead's checkpoint after this: 1 row
             '{"type": "update", "policy": "rest", "updates": 1}\n',
             '{"type": "update", "policy": "lead", "updates": 2}\n',
             '{"type": "restart", "role": "actor", "index": 0}\n',
             '{"type": "update", "policy": "rest", "updates": 2}\n',   # rest's checkpoint after this: 2 rows
             '{"type": "update", "policy": "lead", "updates": 3}\n',
             '{"type": "update", "policy": "rest", "updates": 3}\n']
    path.write_text("".join(lines))
    lead_bytes, rest_bytes = len(lines[0]), len("".join(lines[:5]))
    assert cut_metrics(str(path), lead_bytes, "lead", rows=1) == 2
    assert path.read_text() == "".join(lines[i] for i in (0, 1, 3, 4, 6))
    assert cut_metrics(str(path), rest_bytes, "rest", rows=2) == 1
    assert path.read_text() == "".join(lines[i] for i in (0, 1, 3, 4))
    assert [json.loads(line)["type"] for line in path.read_text().splitlines()] == [
        "update", "update", "restart", "update"]
    # the writer counts its own trainer rows (what a checkpoint stores as metrics_rows)
    writer = MetricsWriter(str(tmp_path), tensorboard=False, truncate_to=0, policy="rest", truncate_rows=2)
    assert writer.rows == 2
    writer.write({"type": "update", "updates": 3}, 0)
    writer.write({"type": "pbt", "event": "applied"}, 0)  # not a trainer row: a resume keeps it
    assert writer.rows == 3
    writer.close()


def test_a_resume_may_change_a_policys_safe_options_only():
    from zoo.core.resume import is_safe

    assert is_safe("policies.lead.trainer.checkpoint_interval") and is_safe("policies.rest.policy.threads")
    assert not is_safe("policies.lead.algo.lr") and not is_safe("policies.lead.agents") and not is_safe("agents")


def test_every_policys_workers_share_the_cores_in_the_thread_plan(registry, spread_spec, two_cores):
    from zoo.core.workers.threads import thread_plan

    cfg = _teams(registry, spread_spec, {"lead": {"algo": "mappo", "policy": {"count": 2, "threads": 2}},
                                         "rest": {"algo": "mappo", "trainer": {"count": 2}}})
    cfg.policy.threads = 1
    plan = thread_plan(cfg, cores=16)  # 3 actors x 1 + 2 lead workers x 2 + 1 rest worker x 1 = 8; 8 left / 3
    assert (plan.policy_workers, plan.trainers, plan.trainer, plan.actor) == (3, 3, 2, 1)
    assert thread_plan(policy_view(cfg, cfg.policies, "rest"), cores=16) == plan  # a trainer sees the same plan
    inline = _teams(registry, spread_spec, {"lead": {"algo": "mappo", "policy": {"inline": True, "threads": 2}},
                                            "rest": {"algo": "mappo", "policy": {"inline": True, "threads": 1}}})
    plan = thread_plan(inline, cores=16)  # an actor runs both inline policies: 3 x 3 = 9; 7 left / 2
    assert (plan.policy_workers, plan.actor, plan.trainers, plan.trainer) == (0, 3, 2, 3)
