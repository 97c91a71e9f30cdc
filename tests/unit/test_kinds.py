"""Worker kinds are plugins (issue 22, item 5): registration, the graph, config options and
supervision of a kind the core does not know (the test plugin ``tests/plugins/zoo-param-stats``)."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from tests.unit.fakes import Clock, FakeLauncher
from zoo.core.config import ConfigError, ExperimentConfig, SupervisionConfig, apply_mapping, apply_override, validate
from zoo.core.graph import Graph, write_graph
from zoo.core.kinds import WorkerKind, by_name, worker_kinds, worker_options
from zoo.core.plugins import PluginHost
from zoo.core.registry import DuplicateComponentError
from zoo.core.supervision import Supervisor, WorkerCrashed

PARAM_STATS = Path(__file__).resolve().parents[1] / "plugins" / "zoo-param-stats"


def _plugin(**hooks) -> types.SimpleNamespace:
    import zoo

    return types.SimpleNamespace(**{name: zoo.hookimpl(fn) for name, fn in hooks.items()})


@pytest.fixture
def param_stats(monkeypatch):
    """A plugin host with the built-ins and the test plugin ``param-stats`` (registered in process).

    While the plugin's folder is on ``sys.path`` its dist-info is an installed distribution, so a
    process-wide registry built then would list ``param-stats`` from its entry point and fail to
    import it after the test: the cached registry is dropped on both sides of the test."""
    from zoo.core.plugins import get_host

    get_host.cache_clear()
    monkeypatch.syspath_prepend(str(PARAM_STATS))
    import zoo_param_stats

    host = PluginHost(strict=True, entry_points=False)
    host.register_plugin(zoo_param_stats, "param-stats", "zoo-param-stats", "0.1.0", False)
    yield host.registry
    sys.modules.pop("zoo_param_stats", None)
    get_host.cache_clear()


def test_actor_policy_worker_trainer_eval_and_pbt_register_through_the_hook():
    host = PluginHost(strict=True, entry_points=False)
    assert host.plugins["zoo.workers"].hooks == ["register_worker_kinds", "register_baselines"]
    kinds = worker_kinds(host.registry)
    assert [(k.name, k.plugin, k.restart, k.lead, k.order) for k in kinds] == [
        ("trainer", "zoo.workers", "from-checkpoint", True, 0), ("policy", "zoo.workers", "restartable", False, 10),
        ("actor", "zoo.workers", "restartable", False, 20), ("eval", "zoo.workers", "restartable", False, 30),
        ("pbt", "zoo.workers", "restartable", False, 40)]
    assert [k.entry for k in kinds] == ["zoo.core.workers.trainer:run", "zoo.core.workers.policy:run",
                                        "zoo.core.workers.actor:run", "zoo.core.workers.evaluator:run",
                                        "zoo.core.workers.population:run"]
    assert [k.device for k in kinds] == ["algo.device", "policy.device", None, None, None]
    assert host.registry.names("baseline") == ["lookahead", "random"]  # random: zoo.workers; lookahead: pettingzoo


def test_a_second_kind_of_the_same_name_is_refused_naming_both_plugins():
    host = PluginHost(strict=False, entry_points=False)
    with pytest.raises(DuplicateComponentError) as err:
        host.register_plugin(_plugin(register_worker_kinds=lambda register: register("actor", "m:run")),
                             "mine", "my-dist", "0.3", False)
    assert str(err.value).startswith("worker 'actor' is registered by both plugin 'zoo.workers' (zoo-rl ")
    assert str(err.value).endswith("and plugin 'mine' (my-dist 0.3); uninstall one of them or rename the component")


@pytest.mark.parametrize("declaration, problem", [
    ({"restart": "sometimes"}, "worker kind 'k': restart='sometimes'; use one of restartable, from-checkpoint, never "
                               "(plugin 'bad')"),
    ({"connects": ("parameters",)}, "worker kind 'k': connects names unknown stream(s) 'parameters'; streams: "
                                    "inference, sample, parameter (plugin 'bad')"),
    ({"gpus": 1}, "worker kind 'k': unknown keyword(s) gpus; a worker kind takes count, options, listens, connects, "
                  "cpus, device, restart, lead, order, describe, policy, check (plugin 'bad')"),
])
def test_a_bad_declaration_fails_its_plugin_naming_it(declaration, problem):
    host = PluginHost(strict=False, entry_points=False)
    host.register_plugin(_plugin(register_worker_kinds=lambda register: register("k", "m:run", **declaration)),
                         "bad", "bad-dist", "1", False)
    assert host.plugins["bad"].error == f"ValueError: {problem}"
    assert "k" not in host.registry.names("worker")


def test_a_second_leading_kind_is_refused():
    host = PluginHost(strict=False, entry_points=False)
    host.register_plugin(_plugin(register_worker_kinds=lambda register: register("learner", "m:run", lead=True)),
                         "two", "two-dist", "1", False)
    with pytest.raises(ConfigError, match=r"exactly one worker kind must lead the run \(lead=True\), found "
                                          r"'trainer' \(plugin 'zoo.workers'\), 'learner' \(plugin 'two'\)"):
        worker_kinds(host.registry)


def test_a_plugins_kind_joins_the_graph_when_the_config_asks_for_it(param_stats, tmp_path):
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    kinds = worker_kinds(param_stats)
    assert Graph.from_config(cfg, kinds).counts == {"trainer": 1, "policy": 1, "actor": 2, "eval": 0,
                                                     "pbt": 0, "param-stats": 0}
    apply_override(cfg, "workers.param-stats.count=2")
    assert cfg.workers == {"param-stats": {"count": "2"}}  # as given; typed by worker_options
    cfg.workers = worker_options(kinds, cfg)
    assert cfg.workers == {"param-stats": {"count": 2}}
    g = Graph.from_config(cfg, kinds)
    assert g.workers() == [("trainer", 0), ("policy", 0), ("actor", 0), ("actor", 1), ("param-stats", 0),
                           ("param-stats", 1)]
    # it subscribes to the parameter stream: placement resolves that stream from its hosts too
    assert g.stream_roles() == {"inference": ("policy", "actor"), "sample": ("trainer", "actor"),
                                "parameter": ("trainer", "policy", "param-stats")}
    assert [g.producers(s) for s in ("inference", "sample", "parameter", "control")] == [2, 2, 1, 6]
    data = json.loads(Path(write_graph(cfg, str(tmp_path), kinds)).read_text())
    assert data["counts"] == {"trainer": 1, "policy": 1, "actor": 2, "eval": 0, "pbt": 0, "param-stats": 2}
    assert data["workers"][-1] == {"role": "param-stats", "index": 1, "listens": [], "connects": ["parameter"]}
    assert data["kinds"]["param-stats"] == {"plugin": "param-stats", "entry": "zoo_param_stats:run", "listens": [],
                                            "connects": ["parameter"], "restart": "restartable", "lead": False,
                                            "order": 50}
    # what graph.json said before kinds: the built-in workers' entries are unchanged
    assert data["workers"][0] == {"role": "trainer", "index": 0, "rank": 0, "pulls": "sample-0",
                                  "publishes": "parameter", "actors": [0, 1]}


def test_a_toml_table_and_a_resumed_config_set_the_kinds_options(param_stats):
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    apply_mapping(cfg, {"workers": {"param-stats": {"count": 1, "file": "norms"}}}, source="--config f.toml")
    assert worker_options(worker_kinds(param_stats), cfg) == {"param-stats": {"count": 1, "file": "norms"}}


@pytest.mark.parametrize("override, field, problem", [
    ("workers.param-stats.cont=1", "workers.param-stats.cont",
     "workers.param-stats.cont: worker kind 'param-stats' has no option 'cont'; did you mean 'count'? its options: "
     "count, file"),
    ("workers.param-stats.count=-1", "workers.param-stats.count", "workers.param-stats.count must be >= 0, got -1"),
    ("workers.param-stats.count=two", "workers.param-stats.count",
     "workers.param-stats.count expects an int, got 'two'"),
    ("workers.param-stats.file=../x", "workers.param-stats.file",
     "workers.param-stats.file must be a plain file name (no '/', not starting with '.'), got '../x'"),
    ("workers.param-stat.count=1", "workers.param-stat",
     "workers.param-stat: no worker kind 'param-stat' is installed; did you mean 'param-stats'? worker kinds: actor, "
     "eval, param-stats, pbt, policy, trainer (see `zoo list workers`)"),
    ("workers.actor.count=3", "workers.actor.count",
     "workers.actor.count: worker kind 'actor' (plugin 'zoo.workers') has no options under workers.actor (its number "
     "of workers: actors.count); remove workers.actor.count"),
])
def test_bad_kind_options_are_refused_naming_the_key_and_the_fix(param_stats, override, field, problem):
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=100_000, name="r")
    apply_override(cfg, override)
    with pytest.raises(ConfigError) as err:
        validate(cfg, param_stats)
    assert (err.value.field, str(err.value)) == (field, problem)


def test_a_table_of_tables_takes_one_option_per_key():
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1")
    with pytest.raises(ConfigError, match=r"workers is a table of name=value entries: set "
                                          r"workers.<name>.<option>=value"):
        apply_override(cfg, "workers.param-stats.a.b=1")


def _supervisor(kinds):
    launcher, clock = FakeLauncher(), Clock()
    s = Supervisor(launcher, lambda role, index, attempt: (role, index, attempt),
                   SupervisionConfig(max_restarts=2, restart_backoff_s=1.0), clock, kinds=kinds)
    return s, launcher, clock


def test_supervision_follows_each_kinds_restart_policy():
    from zoo.core.workers.kinds import builtin_kinds

    kinds = [*builtin_kinds(), WorkerKind("recorder", "m:run", order=50),
             WorkerKind("judge", "m:run", restart="never", order=60)]
    s, launcher, clock = _supervisor(kinds)
    s.start_all([("trainer", 0), ("recorder", 0), ("judge", 0)])
    for role in ("trainer", "recorder", "judge"):
        s.on_message({"type": "heartbeat", "role": role, "index": 0, "attempt": 0})
    s.workers[("recorder", 0)].handle.code = 0  # a worker of a kind that does not lead: exit 0 is a failure
    (r,) = s.check()
    assert (r.role, r.reason, r.restarts) == ("recorder", "exited before the run ended", 1)
    assert s.allowed(s.workers[("recorder", 0)]) == 2  # restartable: supervision.max_restarts
    s.workers[("judge", 0)].handle.code = -9
    with pytest.raises(WorkerCrashed) as crash:
        s.check()
    assert (crash.value.role, crash.value.reason) == ("judge", "killed by SIGKILL")  # never: no restart
    assert s.lead == ("trainer", 0) and not s.trainer_finished()
    s.workers[("trainer", 0)].handle.code = 0
    assert s.trainer_finished()


def test_on_a_stop_only_the_leading_kind_may_finish_its_work():
    kinds = [WorkerKind("learner", "m:run", lead=True), WorkerKind("recorder", "m:run")]
    s, launcher, clock = _supervisor(kinds)
    s.start_all([("learner", 0), ("recorder", 0)])
    learner, recorder = (s.workers[k].handle for k in (("learner", 0), ("recorder", 0)))
    learner.code = 0  # finished at once
    s.stop_all()
    assert recorder.calls == ["stop", "kill"] and learner.calls == ["stop"]


def test_the_controller_starts_each_worker_with_its_kinds_entry():
    from zoo.core.controller import Controller

    c = Controller.__new__(Controller)  # no streams, no processes
    c.cfg, c.spec, c.run_id, c.run_dir, c.streams = ExperimentConfig(algo_name="ppo", env_name="x"), None, "r", "d", {}
    c.graph = Graph(2, 1, 1, kinds=[*by_name(worker_kinds()).values(), WorkerKind("recorder", "pkg.mod:run")])
    assert c.context("recorder", 0, 3).entry == "pkg.mod:run" and c.context("recorder", 0, 3).cfg is c.cfg
    assert c.context("actor", 1, 0).entry == "zoo.core.workers.actor:run"
    assert c.context("trainer", 0, 2).cfg.resume == 2  # from-checkpoint: continues from the last checkpoint


def test_zoo_list_workers_shows_every_kind_with_its_plugin():
    import subprocess

    from zoo.core.testing import subprocess_env

    proc = subprocess.run([sys.executable, "-m", "zoo", "list", "workers"], capture_output=True, text=True,
                          timeout=300, env=subprocess_env(PARAM_STATS, COLUMNS="250", ZOO_STRICT_PLUGINS="1"))
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]]
            for line in proc.stdout.splitlines() if line.startswith("│")}
    assert rows == {"actor": ["worker", "zoo.workers", rows["actor"][2]], "policy": ["worker", "zoo.workers",
                    rows["actor"][2]], "trainer": ["worker", "zoo.workers", rows["actor"][2]],
                    "eval": ["worker", "zoo.workers", rows["actor"][2]],
                    "pbt": ["worker", "zoo.workers", rows["actor"][2]],
                    "param-stats": ["worker", "param-stats", "0.1.0"]}


def _saved_run(registry, tmp_path, overrides):
    import os

    from zoo.core.checkpoint import FORMAT, latest_path, write_checkpoint
    from zoo.core.config import build_config, save_config

    cfg = build_config(registry, "ppo", "CartPole-v1", name="r", steps=1000, overrides=[f"runs_dir={tmp_path}",
                                                                                        *overrides])
    path = tmp_path / "r"
    save_config(cfg, path)
    os.makedirs(path / "checkpoints")
    write_checkpoint(latest_path(str(path)), {"format": FORMAT, "algorithm": {}, "policy_version": 4, "updates": 4,
                                              "env_steps": 1024, "frames": 1024, "episodes": 140, "resumes": 0})
    return path


def test_a_run_resumes_with_its_kinds_options_and_one_made_before_kinds_resumes_too(param_stats, tmp_path):
    from zoo.core.resume import resume_config

    path = _saved_run(param_stats, tmp_path, ["workers.param-stats.count=1", "workers.param-stats.file=norms"])
    assert json.loads((path / "config.json").read_text())["workers"] == {"param-stats": {"count": 1, "file": "norms"}}
    cfg, _ = resume_config(param_stats, str(path), steps=3000)
    assert cfg.workers == {"param-stats": {"count": 1, "file": "norms"}}
    assert Graph.from_config(cfg, worker_kinds(param_stats)).counts["param-stats"] == 1
    # a config.json written before worker kinds existed has no "workers": the run resumes without any
    saved = json.loads((path / "config.json").read_text())
    del saved["workers"]
    (path / "config.json").write_text(json.dumps(saved))
    cfg, _ = resume_config(param_stats, str(path), steps=3000)
    assert cfg.workers == {} and Graph.from_config(cfg, worker_kinds(param_stats)).counts["param-stats"] == 0
