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


def test_role_resources_come_back_from_config_json_and_from_a_toml_table(tmp_path):
    # Before: a mapping under a table entry was flattened to launcher_options.actor_resources.CPU, so
    # `zoo resume` of such a run failed with "the run's config.json: launcher_options is a table of name=value
    # entries", and a TOML file could not give the resources at all.
    import json

    from zoo.core.config import config_to_dict

    cfg = ray_config("launcher_options.actor_resources={'CPU': 0.5}", "launcher_options.address=local")
    saved = json.loads(json.dumps(config_to_dict(cfg)))  # as written to config.json and read back
    base = {k: v for k, v in saved.items() if k not in ("env_spec", "algo_name", "env_name")}  # as zoo.core.resume
    resumed = build_config(get_registry(), "ppo", "CartPole-v1", launcher="ray", base=base, steps=8192)
    assert resumed.launcher_options == {"actor_resources": {"CPU": 0.5}, "address": "local"}
    conf = tmp_path / "exp.toml"
    conf.write_text('launcher = "ray"\n[launcher_options]\npolicy_resources = {CPU = 0.25, arcade = 1}\n')
    from_file = build_config(get_registry(), "ppo", "CartPole-v1", config_file=conf, steps=4096)
    assert from_file.launcher_options == {"policy_resources": {"CPU": 0.25, "arcade": 1.0}}


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
    assert ("launcher_options.address: launcher 'local' has no options; remove launcher_options.address"
            in str(err.value))


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
    assert lines[1:3] == [
        "  - the run asks for CPU=3 in all, 1 of the cluster's 4 are free now (other jobs hold the rest)",
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


# ----------------------------------------------------------------------------- GPUs (issue 21, faults 4-5)
def test_a_policy_worker_and_a_trainer_share_a_one_gpu_node():
    from zoo.plugins.launchers.ray.launcher import gpu_shares

    cfg = ray_config("policy.device=cuda", "algo.device=cuda")  # the gpu_pong layout: 1 trainer, 1 policy worker
    opts = RayOptions(**cfg.launcher_options)
    # one GPU in the cluster: the trainer asks 0.6, the policy worker the 0.4 left, 1.0 in all
    assert gpu_shares(cfg, 1.0) == {"trainer": 0.6, "policy": 0.4}
    request = placement_request(cfg, opts, cluster_gpus=1.0)
    assert [(role, res) for role, _, res in request if role != "actor"] == [
        ("trainer", {"CPU": 1.0, "GPU": 0.6}), ("policy", {"CPU": 1.0, "GPU": 0.4})]
    assert sum(res.get("GPU", 0.0) for _, _, res in request) == 1.0
    # a GPU for each: whole GPUs; unknown (no cluster yet) or none: whole GPUs (then refused, naming them)
    assert gpu_shares(cfg, 2.0) == gpu_shares(cfg, None) == gpu_shares(cfg, 0.0) == {"trainer": 1.0, "policy": 1.0}


def test_gpu_shares_never_put_two_trainers_on_one_gpu():
    from zoo.plugins.launchers.ray.launcher import gpu_shares

    cfg = ray_config("actors.count=4", "policy.count=2", "trainer.count=2", "policy.device=cuda", "algo.device=cuda")
    # 2 GPUs for 4 GPU workers: 0.6 per trainer (two would need 1.2 > 1 on one GPU), 0.4 per policy worker
    assert gpu_shares(cfg, 2.0) == {"trainer": 0.6, "policy": 0.4}
    # 1 GPU, no trainer on it: the two policy workers halve it
    cpu_trainer = ray_config("actors.count=4", "policy.count=2", "policy.device=cuda")
    assert gpu_shares(cpu_trainer, 1.0) == {"policy": 0.5}
    # 1 GPU, 1 trainer, 2 policy workers: 0.6 + 2 x 0.2
    three = ray_config("actors.count=4", "policy.count=2", "policy.device=cuda", "algo.device=cuda")
    assert gpu_shares(three, 1.0) == {"trainer": 0.6, "policy": 0.2}
    # launcher_options.<role>_resources still win
    given = ray_config("policy.device=cuda", "launcher_options.policy_resources={'CPU': 2, 'GPU': 0.25}")
    assert role_resources(given, RayOptions(**given.launcher_options), "policy", 1.0) == {"CPU": 2.0, "GPU": 0.25}


def test_cuda_n_beyond_the_gpus_of_a_bundle_is_refused_before_ray_starts(monkeypatch):
    import ray

    from zoo.core.launcher import LaunchError
    from zoo.plugins.launchers.ray.launcher import RayLauncher

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("connected to Ray"))
    cfg = ray_config("algo.device=cuda:1")
    with pytest.raises(LaunchError) as err:
        RayLauncher(cfg)
    assert str(err.value) == ("algo.device='cuda:1': under Ray each trainer worker sees only the 1 GPU(s) its bundle "
                              "holds (GPU=1), numbered from cuda:0; use --set algo.device=cuda (or cuda:0), or ask "
                              "more with launcher_options.trainer_resources")
    two = ray_config("policy.device=cuda:2", "launcher_options.policy_resources={'CPU': 1, 'GPU': 2}")
    with pytest.raises(LaunchError, match=r"policy.device='cuda:2': under Ray each policy worker sees only the 2 "
                                          r"GPU\(s\) its bundle holds \(GPU=2\), numbered from cuda:0; use --set "
                                          r"policy.device=cuda \(or cuda:0..cuda:1\)"):
        RayLauncher(two)


def test_each_ray_trainer_on_its_own_gpu_gets_nccl_whatever_index_it_sees(monkeypatch):
    import torch.distributed as dist

    from zoo.core.distributed import choose_backend, gpu_identity

    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    no_uuid = lambda index: None  # noqa: E731 - no CUDA here: identities from the environment
    # Ray gave trainer 0 GPU 3 and trainer 1 GPU 1 of one node: each sees its GPU as cuda:0
    ranks = [gpu_identity("cuda:0", {"CUDA_VISIBLE_DEVICES": ids, "ZOO_NODE_ID": "n1"}, no_uuid) for ids in ("3", "1")]
    assert ranks == ["n1/3", "n1/1"]
    assert choose_backend(["cuda:0", "cuda:0"], ranks) == "nccl"
    # the same physical GPU (a shared bundle), or one rank on the CPU: gloo
    same = [gpu_identity("cuda", {"CUDA_VISIBLE_DEVICES": "2", "ZOO_NODE_ID": "n1"}, no_uuid)] * 2
    assert same == ["n1/2", "n1/2"] and choose_backend(["cuda", "cuda"], same) == "gloo"
    assert choose_backend(["cuda:0", "cpu"], ["n1/3", gpu_identity("cpu")]) == "gloo"
    # two nodes, each GPU 0: distinct
    apart = [gpu_identity("cuda:0", {"CUDA_VISIBLE_DEVICES": "0", "ZOO_NODE_ID": n}, no_uuid) for n in ("n1", "n2")]
    assert choose_backend(["cuda:0", "cuda:0"], apart) == "nccl"
    # where CUDA answers, the GPU's UUID decides
    assert gpu_identity("cuda:1", {}, lambda index: f"GPU-{index}") == "uuid:GPU-1"
    # without exchanged identities (every rank on one host, all GPUs visible): the indices decide
    assert choose_backend(["cuda:0", "cuda:1"]) == "nccl" and choose_backend(["cuda:0", "cuda:0"]) == "gloo"


def test_the_worker_host_reports_the_gpus_ray_gave_it(monkeypatch):
    import ray

    from zoo.plugins.launchers.ray import host

    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [3])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    h = host.WorkerHost.__new__(host.WorkerHost)
    h.proc = type("P", (), {"pid": 4242})()
    assert h.info() == {"pid": 4242, "gpu_ids": [3], "cuda_visible_devices": "3"}


# ----------------------------------------------------------------------------- the handles at size (issue 20 item 11)
class Ref:
    """A fake Ray object ref: ``ready`` once answered, then its ``value`` (or ``error`` raised)."""

    def __init__(self, value=None, ready=True, error=None):
        self.value, self.ready, self.error = value, ready, error


class FakeRay:
    """The calls of ``ray`` the handles and the launcher's release make, recorded in ``calls``."""

    def __init__(self, nodes=None):
        self.calls: list[tuple] = []
        self.alive_nodes = nodes if nodes is not None else {"n" * 56: True}

    def wait(self, refs, num_returns=1, timeout=None):
        self.calls.append(("wait", len(refs), timeout))
        return [r for r in refs if r.ready], [r for r in refs if not r.ready]

    def get(self, refs, timeout=None):
        self.calls.append(("get", len(refs) if isinstance(refs, list) else 1))
        out = []
        for r in refs if isinstance(refs, list) else [refs]:
            if r.error is not None:
                raise r.error
            out.append(r.value)
        return out if isinstance(refs, list) else out[0]

    def kill(self, actor, no_restart=True):
        self.calls.append(("kill", actor.name))

    def nodes(self):
        self.calls.append(("nodes",))
        return [{"NodeID": k, "Alive": v} for k, v in self.alive_nodes.items()]

    def is_initialized(self):
        return True

    def install(self, monkeypatch):
        import ray

        from zoo.plugins.launchers.ray import launcher

        for name in ("wait", "get", "kill", "nodes", "is_initialized"):
            monkeypatch.setattr(ray, name, getattr(self, name))
        monkeypatch.setattr(launcher, "_NODES", (float("-inf"), {}))


class Method:
    def __init__(self, actor, name, ref):
        self.actor, self.name, self.ref = actor, name, ref

    def remote(self, *args):
        self.actor.ray.calls.append((self.name, self.actor.name, *args))
        return self.ref


class FakeActor:
    """A worker host: ``info`` answers with its pid (or never, ``started=False``), ``wait`` with
    its exit status once ``exit`` is set (or raises ``error``)."""

    def __init__(self, ray, name, started=True, error=None):
        self.ray, self.name = ray, name
        self.info = Method(self, "info", Ref({"pid": 1000 + int(name[1:]), "gpu_ids": []}, ready=started))
        self.wait = Method(self, "wait", Ref(ready=error is not None, error=error))
        self.signal = Method(self, "signal", Ref())


def launcher_with(fake, count, **actor_kw):
    from zoo.plugins.launchers.ray.launcher import RayHandle, RayLauncher

    launcher = RayLauncher.__new__(RayLauncher)
    launcher.handles, launcher.agents, launcher.run, launcher.pg = [], {}, None, None
    for i in range(count):
        actor = FakeActor(fake, f"w{i}", **actor_kw)
        launcher.handles.append(RayHandle("actor", i, actor, "n" * 56, "10.0.0.1", launcher=launcher))
    return launcher


def test_the_pids_of_32_workers_are_read_with_one_wait(monkeypatch):
    fake = FakeRay()
    fake.install(monkeypatch)
    launcher = launcher_with(fake, 32)
    launcher.handles[5].actor.info.ref.ready = False  # one actor not started yet
    fake.calls.clear()
    pids = [h.pid for h in launcher.handles]
    assert pids == [1000 + i if i != 5 else None for i in range(32)]
    # one wait for all 32 (at most PID_WAIT_S), one get of the 31 that answered; worker 5 was waited for
    # then, so reading it again does not wait (timeout 0)
    assert fake.calls == [("wait", 32, 30.0), ("get", 31), ("wait", 1, 0.0)]
    launcher.handles[5].actor.info.ref.ready = True
    assert launcher.handles[5].pid == 1005


def test_releasing_kills_every_worker_then_waits_once(monkeypatch):
    import signal as sig

    fake = FakeRay()
    fake.install(monkeypatch)
    launcher = launcher_with(fake, 32)
    for h in launcher.handles:
        h.take_info({"pid": 1, "gpu_ids": []})
    launcher.handles[7].actor.wait.ref.ready = True  # worker 7 has already ended
    launcher.handles[7].actor.wait.ref.value = 0
    fake.calls.clear()
    launcher._release_cluster(lambda pg: None)
    kills = [c for c in fake.calls if c[0] == "signal"]
    assert kills == [("signal", f"w{i}", int(sig.SIGKILL)) for i in range(32) if i != 7]
    waits = [c for c in fake.calls if c[0] == "wait" and c[1] > 1]
    assert waits == [("wait", 31, 2.0)]  # one bounded wait for the 31, after every kill was sent
    assert fake.calls.index(waits[0]) > max(fake.calls.index(k) for k in kills)
    # none of them answered (the fakes never exit): Ray ends their actors; worker 7's was ended when it settled
    assert sorted(c[1] for c in fake.calls if c[0] == "kill") == sorted(f"w{i}" for i in range(32))


def test_a_dead_actor_on_a_live_node_ends_once_its_node_agent_answers(monkeypatch):
    import ray

    from zoo.plugins.launchers.ray import launcher as ray_launcher

    fake = FakeRay()
    fake.install(monkeypatch)
    monkeypatch.setattr(ray_launcher, "NODES_CACHE_S", 1e9)  # one ray.nodes() answers every check of this test
    launcher = launcher_with(fake, 2, error=ray.exceptions.ActorDiedError())
    agent = FakeActor(fake, "a0")
    agent.info.ref = Ref({"node_id": "n" * 56})
    launcher.agents = {"n" * 56: agent}
    codes = [h.exitcode() for h in launcher.handles]
    # decided at the first look: the agent on the actor's node answered, so the node lives: -9, restartable
    assert codes == [-9, -9]
    assert [h.restartable for h in launcher.handles] == [True, True]
    assert launcher.handles[0].end_note() == ("its Ray actor on node 10.0.0.1/nnnnnnnnnnnn died: The actor died "
                                              "unexpectedly before finishing this task.")
    assert fake.calls.count(("nodes",)) == 1


def test_a_dead_actor_whose_node_agent_is_gone_waits_for_rays_word_on_the_node(monkeypatch):
    import ray

    fake = FakeRay()
    fake.install(monkeypatch)
    launcher = launcher_with(fake, 1, error=ray.exceptions.ActorDiedError())
    agent = FakeActor(fake, "a0")
    agent.info.ref = Ref(error=ray.exceptions.ActorDiedError())
    launcher.agents = {"n" * 56: agent}
    h = launcher.handles[0]
    assert h.exitcode() is None  # the node may be dying: not decided yet
    assert h.exitcode() is None  # ... still (the agent is not asked again)
    assert [c[0] for c in fake.calls].count("info") == 1 + 1  # the worker's pid, one ping of the agent
    fake.alive_nodes["n" * 56] = False
    from zoo.plugins.launchers.ray import launcher as ray_launcher

    monkeypatch.setattr(ray_launcher, "_NODES", (float("-inf"), {}))  # the next check asks Ray again
    assert h.exitcode() == -9 and not h.restartable
    assert h.end_note() == "Ray node 10.0.0.1/nnnnnnnnnnnn died"


def test_a_worker_whose_actor_never_started_is_ended_by_kill_without_waiting(monkeypatch):
    fake = FakeRay()
    fake.install(monkeypatch)
    launcher = launcher_with(fake, 1, started=False)
    h = launcher.handles[0]
    assert h.exitcode() is None
    h.kill()
    # Ray drops the actor (it never starts beside a restarted one); no signal queued for it
    assert h.exitcode() == -9 and h.restartable
    assert ("kill", "w0") in fake.calls and not [c for c in fake.calls if c[0] == "signal"]
    assert h.end_note() == ("its Ray actor had not started on node 10.0.0.1/nnnnnnnnnnnn "
                            "(is its bundle's node overloaded?)")
    assert h.wait(5.0) == -9


def test_a_worker_waiting_for_a_bundle_on_a_dead_node_ends_at_once(monkeypatch):
    fake = FakeRay(nodes={"n" * 56: False})
    fake.install(monkeypatch)
    h = launcher_with(fake, 1, started=False).handles[0]
    assert h.exitcode() == -9 and not h.restartable
    assert h.end_note() == "Ray node 10.0.0.1/nnnnnnnnnnnn died"


def test_graph_json_names_what_the_ray_launcher_chose(monkeypatch):
    from zoo.plugins.launchers.ray.launcher import RayLauncher

    fake = FakeRay()
    fake.install(monkeypatch)
    cfg = ray_config("policy.device=cuda", "algo.device=cuda")
    launcher = launcher_with(fake, 0)
    launcher.cfg, launcher.opts, launcher.cluster_gpus = cfg, RayOptions(**cfg.launcher_options), 1.0
    launcher.request = placement_request(cfg, launcher.opts, 1.0)
    launcher.where = {(r, i): (b, "n" * 56, "10.0.0.1") for b, (r, i, _) in enumerate(launcher.request)}
    from zoo.plugins.launchers.ray.launcher import RayHandle

    actor = FakeActor(fake, "w0")
    actor.info.ref = Ref({"pid": 7, "gpu_ids": [0], "cuda_visible_devices": "0"})
    launcher.handles.append(RayHandle("trainer", 0, actor, "n" * 56, "10.0.0.1", launcher=launcher))
    assert launcher.handles[0].pid == 7
    entry = RayLauncher.describe(launcher)
    assert {k: entry[k] for k in ("address", "strategy", "cluster_gpus", "gpu_shares")} == {
        "address": "auto", "strategy": "PACK", "cluster_gpus": 1.0, "gpu_shares": {"trainer": 0.6, "policy": 0.4}}
    assert entry["workers"][:2] == [
        {"role": "trainer", "index": 0, "node": "10.0.0.1/nnnnnnnnnnnn", "resources": {"CPU": 1.0, "GPU": 0.6},
         "gpu_ids": [0], "cuda_visible_devices": "0"},
        {"role": "policy", "index": 0, "node": "10.0.0.1/nnnnnnnnnnnn", "resources": {"CPU": 1.0, "GPU": 0.4}}]


def test_a_too_small_local_cluster_is_explained_with_the_arithmetic():
    request = [("trainer", 0, {"CPU": 1.0}), ("policy", 0, {"CPU": 1.0}), ("actor", 0, {"CPU": 1.0}),
               ("actor", 1, {"CPU": 1.0})]
    nodes = [{"id": "a" * 56, "ip": "127.0.0.1", "resources": {"CPU": 2.0}}]
    assert explain_unplaced(request, nodes, {"CPU": 2.0}, "PACK", None).splitlines() == [
        "the one-node Ray cluster started for this run (--ray-address local) cannot hold the run's 4 workers "
        "(strategy PACK):",
        "  - the run asks for CPU=4 in all, the cluster has CPU=2",
        "nodes: 127.0.0.1/aaaaaaaaaaaa: CPU=2",
        "fix: ask for less (e.g. 0.5 CPU for each of the 4 workers fits CPU=2: "
        "--set \"launcher_options.actor_resources={'CPU': 0.5}\" "
        "--set \"launcher_options.policy_resources={'CPU': 0.5}\" "
        "--set \"launcher_options.trainer_resources={'CPU': 0.5}\"; or other amounts with "
        "launcher_options.actor_resources, policy_resources, trainer_resources; actors.count, policy.count, "
        "trainer.count), use the local launcher, or a larger Ray cluster (--ray-address IP:PORT)"]


def test_the_fix_for_a_too_small_local_cluster_fits_it_and_keeps_other_resources():
    # The old example (actors at CPU=0.25) still asked for CPU=2.5 of 2 with the default layout.
    # 3 actors, a policy worker with a GPU share, a trainer of 0.25 CPU: 5 workers on CPU=2 -> 0.4 each; the trainer
    # already asks less and is left alone, the policy worker keeps its GPU share.
    request = [("trainer", 0, {"CPU": 0.25}), ("policy", 0, {"CPU": 1.0, "GPU": 0.5}), ("actor", 0, {"CPU": 1.0}),
               ("actor", 1, {"CPU": 1.0}), ("actor", 2, {"CPU": 1.0})]
    nodes = [{"id": "a" * 56, "ip": "127.0.0.1", "resources": {"CPU": 2.0, "GPU": 1.0}}]
    fix = explain_unplaced(request, nodes, {"CPU": 2.0, "GPU": 1.0}, "PACK", None).splitlines()[-1]
    assert fix == (
        "fix: ask for less (e.g. 0.4 CPU for each of the 5 workers fits CPU=2: "
        "--set \"launcher_options.actor_resources={'CPU': 0.4}\" "
        "--set \"launcher_options.policy_resources={'CPU': 0.4, 'GPU': 0.5}\"; or other amounts with "
        "launcher_options.actor_resources, policy_resources, trainer_resources; actors.count, policy.count, "
        "trainer.count), use the local launcher, or a larger Ray cluster (--ray-address IP:PORT)")
    # Short of a GPU, not of CPUs: no CPU shares are suggested.
    request = [("trainer", 0, {"CPU": 1.0, "GPU": 2.0})]
    fix = explain_unplaced(request, nodes, {"CPU": 2.0, "GPU": 1.0}, "PACK", None).splitlines()[-1]
    assert fix.startswith("fix: ask for less (launcher_options.actor_resources, policy_resources, trainer_resources;")


def test_two_ray_trainers_each_on_its_own_gpu_resolve_cuda_0_and_choose_nccl(monkeypatch):
    import torch
    import torch.distributed as dist

    from zoo.core import distributed
    from zoo.core.workers.trainer import _devices

    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # Ray shows each trainer the one GPU of its bundle
    monkeypatch.setattr(distributed, "_cuda_uuid", lambda index: None)
    cfg = ray_config("actors.count=2", "trainer.count=2", "algo.device=cuda")
    seen = []
    for rank, gpu in enumerate([1, 0]):  # the GPU ids Ray gave trainer 0 and trainer 1 (ray.get_gpu_ids())
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(gpu))
        monkeypatch.setenv("ZOO_NODE_ID", "n" * 56)
        device = _devices(cfg, 2)[rank]
        seen.append((device, distributed.gpu_identity(device)))
    assert seen == [("cuda:0", "n" * 56 + "/1"), ("cuda:0", "n" * 56 + "/0")]
    # what each rank then chooses from the exchanged devices and GPUs (TrainerGroup.join)
    assert distributed.choose_backend([d for d, _ in seen], [g for _, g in seen]) == "nccl"


def test_ray_address_local_on_a_ray_without_the_internals_it_needs_is_one_launch_error(monkeypatch, tmp_path):
    # --ray-address local sets two of Ray's internals (the version the `ray` extra pins has them);
    # on another Ray it was an AttributeError/ImportError traceback, and a temporary folder was left.
    import tempfile

    import ray
    from ray._private import ray_constants

    from zoo.core.launcher import LaunchError
    from zoo.plugins.launchers.ray.launcher import RayLauncher

    monkeypatch.delattr(ray_constants, "ENABLE_RAY_CLUSTER")
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was called"))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # an earlier test may have connected this process
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cfg = ray_config("launcher_options.address=local")
    with pytest.raises(LaunchError) as err:
        RayLauncher(cfg)
    assert str(err.value).startswith(
        f"--ray-address local needs Ray's internals of the version the `ray` extra pins (pip install 'zoo-rl[ray]'); "
        f"Ray {ray.__version__} lacks them (")
    assert str(err.value).endswith("use --ray-address auto instead")
    assert list(tmp_path.iterdir()) == []  # no temporary folder made
