"""The ``ray`` launcher and resolver without a Ray cluster: the placement request built from
the graph, the options and their errors, the message of an unplaceable run, the resolver's
keys and clean-up, the failure reason naming the node, and Ray missing (issue 12)."""
from __future__ import annotations

import importlib.util
import signal

import pytest
from typer.testing import CliRunner

# Every test here builds a config for launcher ray, which Zoo refuses without the package.
pytest.importorskip("ray", reason='the ray launcher needs Ray: pip install "zoo-rl[ray]"')

from zoo import cli
from zoo.core.config import ConfigError, build_config
from zoo.core.plugins import get_registry
from zoo.core.supervision import Supervisor
from zoo.plugins.launchers.ray.launcher import RayOptions, explain_unplaced, placement_request, role_resources
from zoo.plugins.launchers.ray.resolver import RayResolver

INSTALL = 'pip install "zoo-rl[ray]"'


def ray_config(*overrides: str):
    return build_config(get_registry(), "ppo", "CartPole-v1", launcher="ray", overrides=list(overrides), steps=4096)


def test_the_placement_request_has_one_bundle_per_worker_in_graph_order():
    cfg = ray_config("actors.count=3", "policy.count=2", "trainer.count=2", "algo.device=cuda",
                     "launcher_options.actor_resources={'CPU': 0.5, 'arcade': 1}")
    opts = RayOptions(**cfg.launcher_options)
    # trainers first, then policy workers, then actors (zoo.core.graph); a trainer on cuda asks for a GPU,
    # a policy worker on cpu does not; actors ask for what launcher_options.actor_resources says
    assert placement_request(cfg, opts) == [
        ("trainer", 0, {"CPU": 1.0, "GPU": 1.0}), ("trainer", 1, {"CPU": 1.0, "GPU": 1.0}),
        ("policy", 0, {"CPU": 1.0}), ("policy", 1, {"CPU": 1.0}),
        ("actor", 0, {"CPU": 0.5, "arcade": 1.0}), ("actor", 1, {"CPU": 0.5, "arcade": 1.0}),
        ("actor", 2, {"CPU": 0.5, "arcade": 1.0})]
    # CPU: 2 trainers x 1 + 2 policy workers x 1 + 3 actors x 0.5 = 5.5; GPU: 2 x 1; arcade: 3 x 1
    total = {}
    for _, _, res in placement_request(cfg, opts):
        for k, v in res.items():
            total[k] = total.get(k, 0.0) + v
    assert total == {"CPU": 5.5, "GPU": 2.0, "arcade": 3.0}


def test_a_policy_worker_on_cuda_asks_for_a_gpu():
    cfg = ray_config("policy.device=cuda:1")
    assert role_resources(cfg, RayOptions(), "policy") == {"CPU": 1.0, "GPU": 1.0}
    assert role_resources(cfg, RayOptions(), "trainer") == {"CPU": 1.0}
    assert role_resources(cfg, RayOptions(), "actor") == {"CPU": 1.0}


def test_launcher_ray_uses_the_ray_resolver_and_types_its_options():
    cfg = ray_config("launcher_options.placement_timeout_s=5", "launcher_options.strategy=SPREAD")
    assert cfg.resolver.name == "ray"
    assert cfg.launcher_options == {"placement_timeout_s": 5.0, "strategy": "SPREAD"}
    local = build_config(get_registry(), "ppo", "CartPole-v1", steps=4096)
    assert (local.launcher, local.resolver.name, local.launcher_options) == ("local", "files", {})


@pytest.mark.parametrize("override, message", [
    ("launcher_options.strategy=WIDE",
     "launcher_options.strategy must be one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD, got 'WIDE'"),
    ("launcher_options.placement_timeout_s=0", "launcher_options.placement_timeout_s must be > 0, got 0.0"),
    ("launcher_options.adress=auto", "launcher_options.adress: launcher 'ray' has no option 'adress'; "
                                     "did you mean 'address'?"),
    ("launcher_options.actor_resources={'CPU': 0}", "launcher_options.actor_resources must map resource names to "
                                                     "numbers >= 0, at least one > 0"),
])
def test_bad_launcher_options_are_refused_naming_the_field(override, message):
    with pytest.raises(ConfigError) as err:
        ray_config(override)
    assert message in str(err.value)
    assert err.value.field == override.split("=")[0]


def test_the_local_launcher_has_no_options():
    with pytest.raises(ConfigError) as err:
        build_config(get_registry(), "ppo", "CartPole-v1", overrides=["launcher_options.address=auto"], steps=4096)
    assert "launcher_options.address: launcher 'local' has no options; remove launcher_options.address" in str(err.value)


def test_without_ray_installed_launcher_ray_is_refused_before_anything_starts(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        ray_config()
    assert f"launcher='ray' needs the Python package 'ray', which is not installed: {INSTALL}" in str(err.value)
    assert f"resolver.name='ray' needs the Python package 'ray', which is not installed: {INSTALL}" in str(err.value)
    result = CliRunner().invoke(cli.app, ["train", "ppo", "--env", "CartPole-v1", "--launcher", "ray",
                                          "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == 2
    assert list(tmp_path.iterdir()) == []  # no run folder, no process


def test_ray_address_is_an_option_of_the_ray_launcher_only(tmp_path):
    result = CliRunner().invoke(cli.app, ["train", "ppo", "--env", "CartPole-v1", "--launcher", "local",
                                          "--ray-address", "auto", "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == 2
    assert "--ray-address is an option of --launcher ray, not of --launcher local" in " ".join(result.output.split())
    assert list(tmp_path.iterdir()) == []


def test_an_unplaceable_request_names_every_missing_resource():
    request = [("trainer", 0, {"CPU": 1.0, "GPU": 1.0}), ("policy", 0, {"CPU": 1.0}),
               ("actor", 0, {"CPU": 2.0}), ("actor", 1, {"CPU": 2.0})]
    nodes = [{"id": "a" * 56, "ip": "10.0.0.1", "resources": {"CPU": 2.0, "memory": 1e9}},
             {"id": "b" * 56, "ip": "10.0.0.2", "resources": {"CPU": 1.0}}]
    text = explain_unplaced(request, nodes, {"CPU": 3.0}, "PACK", 60.0)
    # CPU: 1 + 1 + 2 + 2 = 6 asked, 2 + 1 = 3 in the cluster; GPU: 1 asked, none anywhere
    assert text.splitlines() == [
        "Ray could not place the run's 4 workers within launcher_options.placement_timeout_s=60 s (strategy PACK):",
        "  - trainer worker 0 asks for CPU=1, GPU=1, and no node has GPU=1",
        "  - the run asks for CPU=6 in all, the cluster has CPU=3",
        "  - the run asks for GPU=1 in all, the cluster has GPU=0",
        "nodes: 10.0.0.1/aaaaaaaaaaaa: CPU=2; 10.0.0.2/bbbbbbbbbbbb: CPU=1",
        "fix: add nodes or resources, ask for less (launcher_options.<role>_resources, actors.count, policy.count, "
        "trainer.count) or change launcher_options.strategy"]


def test_busy_resources_and_strict_strategies_are_named():
    request = [("policy", 0, {"CPU": 1.0}), ("actor", 0, {"CPU": 1.0}), ("actor", 1, {"CPU": 1.0})]
    nodes = [{"id": "a" * 56, "ip": "10.0.0.1", "resources": {"CPU": 2.0}},
             {"id": "b" * 56, "ip": "10.0.0.2", "resources": {"CPU": 2.0}}]
    lines = explain_unplaced(request, nodes, {"CPU": 1.0}, "STRICT_SPREAD", 5.0).splitlines()
    # 3 CPUs asked, 4 in the cluster but 1 free; 3 workers on their own nodes need 3 nodes, there are 2
    assert lines[1:3] == ["  - the run asks for CPU=3 in all, 1 of the cluster's 4 are free now (other jobs hold the rest)",
                          "  - strategy STRICT_SPREAD puts each of the 3 workers on its own node, the cluster has 2 nodes"]
    lines = explain_unplaced(request, nodes, {"CPU": 4.0}, "STRICT_PACK", 5.0).splitlines()
    assert lines[1] == "  - strategy STRICT_PACK puts every worker on one node, and no node has CPU=3"


class FakeGcs:
    """The calls of ``ray._raylet.GcsClient`` the resolver makes, over a dict {(namespace, key): value}."""

    def __init__(self):
        self.store: dict[tuple[bytes, bytes], bytes] = {}

    def internal_kv_put(self, key, value, overwrite, namespace, timeout=None):
        self.store[(namespace, key)] = value
        return 1

    def internal_kv_get(self, key, namespace, timeout=None):
        return self.store.get((namespace, key))

    def internal_kv_del(self, key, by_prefix, namespace, timeout=None):
        gone = [k for k in self.store if k[0] == namespace and (k[1].startswith(key) if by_prefix else k[1] == key)]
        for k in gone:
            del self.store[k]
        return len(gone)

    def internal_kv_keys(self, prefix, namespace, timeout=None):
        return [k for ns, k in self.store if ns == namespace and k.startswith(prefix)]


def test_the_ray_resolver_keeps_each_key_under_its_name_in_its_namespace():
    resolver, gcs = RayResolver(address="127.0.0.1:6379"), FakeGcs()
    resolver._client = gcs
    resolver.publish("r1/sample.tcp", {"host": "0.0.0.0", "port": 40512})
    resolver.publish("r1/control.ipc", {"path": "/tmp/zoo-r1/control"})
    resolver.publish("r10/sample.tcp", {"port": 1})  # another run whose id starts like r1's
    assert gcs.store[(b"zoo", b"r1/sample.tcp")] == b'{"host": "0.0.0.0", "port": 40512}'
    assert resolver.get("r1/sample.tcp") == {"host": "0.0.0.0", "port": 40512}
    assert resolver.keys("r1") == ["r1/control.ipc", "r1/sample.tcp"]
    resolver.remove("r1/control.ipc")
    assert resolver.keys("r1") == ["r1/sample.tcp"]
    resolver.clear("r1")  # deletes the prefix "r1/": r10's key stays
    assert sorted(gcs.store) == [(b"zoo", b"r10/sample.tcp")]
    with pytest.raises(ValueError):
        resolver.publish("r1/../x", {"port": 1})


def test_the_ray_resolver_options_are_checked():
    with pytest.raises(ValueError, match="address must be the GCS address IP:PORT"):
        RayResolver(address="head-node")
    with pytest.raises(ConfigError, match="resolver.options.address must be the GCS address IP:PORT"):
        ray_config("resolver.options.address=head-node")


class DeadOnNode:
    """A handle whose worker was SIGKILLed with the node it ran on."""

    role, index, pid, host = "actor", 1, 4242, "10.0.0.2/bbbbbbbbbbbb"

    def exitcode(self):
        return -int(signal.SIGKILL)

    def alive(self):
        return False

    def end_note(self):
        return "Ray node 10.0.0.2/bbbbbbbbbbbb died"


def test_a_failure_names_the_node_the_launcher_reports():
    sv = Supervisor(launcher=None, make_context=lambda *a: None)
    from zoo.core.supervision import Worker

    sv.workers[("actor", 1)] = w = Worker("actor", 1)
    w.handle = DeadOnNode()
    assert sv.failure(w, 0.0) == ("killed by SIGKILL (Ray node 10.0.0.2/bbbbbbbbbbbb died)",
                                  "(no traceback: killed by a signal?)")


def test_a_worker_whose_node_died_is_not_restarted():
    from zoo.core.supervision import Worker, WorkerCrashed

    handle = DeadOnNode()
    handle.restartable = False
    sv = Supervisor(launcher=None, make_context=lambda *a: None)  # max_restarts 3 by default
    sv.workers[("actor", 1)] = w = Worker("actor", 1, handle=handle)
    with pytest.raises(WorkerCrashed) as crash:
        sv.check()
    assert (crash.value.role, crash.value.index, crash.value.reason) == (
        "actor", 1, "killed by SIGKILL (Ray node 10.0.0.2/bbbbbbbbbbbb died)")
    assert w.restarts == 0


class HungOnNode(DeadOnNode):
    """A handle whose worker still runs (on a Ray node) but stopped reporting."""

    def exitcode(self):
        return None

    def alive(self):
        return True

    def end_note(self):
        return "on Ray node 10.0.0.2/bbbbbbbbbbbb"


def test_every_failure_reason_names_the_node():
    from zoo.core.supervision import Worker

    sv = Supervisor(launcher=None, make_context=lambda *a: None)
    w = Worker("policy", 0, handle=HungOnNode(), started=0.0, last_seen=10.0)
    # last heard of at 10 s, now 75 s: 65 s > supervision.heartbeat_timeout_s=60
    assert sv.failure(w, 75.0) == ("no heartbeat for 65 s (supervision.heartbeat_timeout_s=60 s): hung "
                                   "(on Ray node 10.0.0.2/bbbbbbbbbbbb)", "")
    w.error = "Traceback ...\nRuntimeError: boom"
    assert sv.failure(w, 11.0) == ("raised an exception (on Ray node 10.0.0.2/bbbbbbbbbbbb)",
                                   "Traceback ...\nRuntimeError: boom")
