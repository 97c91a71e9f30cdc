"""Inline inference (``policy.inline``): the same samples as the remote path, value for value,
and its config rules.

The samples are those that reach the trainer: the actor's real loop (``actor.run``) pushes
them into a synchronous stand-in for the sample stream. Remote: a real policy worker
(``policy.run``) in a thread over the in-process ``inline`` transport; inline: the actor
alone. The stand-in trainer publishes version r + 1 when the first ring group's sample of
rollout r arrives (while the actor waits in its push; remote: it returns once the policy
worker says it loaded the version), so in both paths rollout r is acted with version r.
"""
from __future__ import annotations

import copy
import threading
import uuid

import numpy as np
import pytest

from zoo.core.config import ConfigError, build_config, validate
from zoo.core.graph import Graph

ROLLOUTS = 3
WAIT_S = 30.0  # bound on each wait for a thread (the waits end in well under a second)


class FakeControl:
    def send(self, bundle, meta, timeout):
        return True

    def close(self):
        pass


class SyncTrainer:
    """The actor's sample stream: keeps every sample (copied) and publishes new parameters
    between rollouts, inside the actor's push (so the actor is held there meanwhile)."""

    def __init__(self, publisher, weights, groups: int, ready) -> None:
        self.publisher, self.weights, self.groups, self.ready = publisher, weights, groups, ready
        self.samples: list[tuple[dict, dict]] = []
        self.actor_ctx = None

    def pusher(self, endpoint):
        return self

    def send(self, bundle, meta, timeout):
        self.samples.append((copy.deepcopy(bundle), copy.deepcopy(meta)))
        rollout = (len(self.samples) - 1) // self.groups
        if meta["env_offset"] == 0 and rollout + 1 < ROLLOUTS:  # the first group's sample of rollout r
            self.publisher.publish(self.weights[rollout + 1], {"policy_version": rollout + 1})
            self.ready(rollout + 1)  # remote: until the policy worker has loaded it
        if len(self.samples) == ROLLOUTS * self.groups:
            self.actor_ctx.stop = True
        return True

    def close(self):
        pass


def versions_of_weights(reg, cfg) -> list[dict[str, np.ndarray]]:
    """``ROLLOUTS`` different weight sets: the network built under seed 0, its parameters (not
    its buffers, e.g. normalisation statistics) + 0.3 x a standard normal draw seeded by the
    version."""
    import torch

    torch.manual_seed(0)
    net = reg.get("algorithm", cfg.algo_name).load().build_policy(cfg.algo, cfg.spec)
    names = {name for name, _ in net.named_parameters()}
    base = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    out = []
    for version in range(ROLLOUTS):
        rng = np.random.default_rng(version)
        out.append({k: (v + 0.3 * rng.standard_normal(v.shape)).astype(v.dtype) if k in names and version else v
                    for k, v in base.items()})
    return out


def collect(algo: str, env: str, overrides: list[str], inline: bool, groups: int) -> tuple[list, int]:
    """The samples one actor (actor 0) sends in ``ROLLOUTS`` rollouts, and the forward passes
    run by its inline client (remote: -1)."""
    from zoo.core.plugins import get_registry
    from zoo.core.streams import transport_for
    from zoo.core.workers import actor as actor_worker
    from zoo.core.workers import policy as policy_worker
    from zoo.core.workers.base import WorkerContext

    reg = get_registry()
    cfg = build_config(reg, algo, env, overrides=[*overrides, f"policy.inline={str(inline).lower()}"], steps=100000)
    for stream in ("inference", "parameter"):
        getattr(cfg.streams, stream).transport = "inline"  # the in-process transport (threads of this test)
    run_id = f"inline-{uuid.uuid4().hex[:8]}"
    transports = [transport_for(reg, cfg, s, run_id, create=True) for s in ("inference", "parameter")]
    publisher = transports[1].publisher("parameter")
    weights = versions_of_weights(reg, cfg)
    publisher.publish(weights[0], {"policy_version": 0})

    loaded = {"version": -1}
    cond = threading.Condition()

    def policy_heartbeat(every_s=1.0, **meta):  # the policy worker says which version it serves
        if "policy_version" in meta:
            with cond:
                loaded["version"] = meta["policy_version"]
                cond.notify_all()

    def ready(version):
        if inline:
            return  # the actor loads it itself before the next rollout
        with cond:
            assert cond.wait_for(lambda: loaded["version"] == version, WAIT_S), f"version {version} never loaded"

    trainer = SyncTrainer(publisher, weights, groups, ready)
    actor_ctx = WorkerContext("actor", 0, cfg, cfg.spec, run_id, "unused")
    actor_ctx.registry, actor_ctx.control = reg, FakeControl()
    trainer.actor_ctx = actor_ctx
    real_transport = actor_ctx.transport
    actor_ctx.transport = lambda stream: trainer if stream == "sample" else real_transport(stream)
    clients = []
    make_client = actor_worker.inference_client

    def spy(ctx, graph):  # the client the actor uses, to count its forward passes
        clients.append(make_client(ctx, graph))
        return clients[-1]

    threads = [threading.Thread(target=actor_worker.run, args=(actor_ctx,), daemon=True)]
    policy_ctx = None
    if not inline:
        policy_ctx = WorkerContext("policy", 0, cfg, cfg.spec, run_id, "unused")
        policy_ctx.registry, policy_ctx.control = reg, FakeControl()
        policy_ctx.heartbeat = policy_heartbeat
        threads.append(threading.Thread(target=policy_worker.run, args=(policy_ctx,), daemon=True))
    actor_worker.inference_client = spy
    try:
        for t in threads:
            t.start()
        threads[0].join(WAIT_S)
        assert not threads[0].is_alive(), "the actor did not finish its rollouts"
    finally:
        actor_worker.inference_client = make_client
        actor_ctx.stop = True
        if policy_ctx is not None:
            policy_ctx.stop = True
        for t in threads:
            t.join(WAIT_S)
        publisher.close()
        for tr in transports:
            tr.cleanup()
    assert not any(t.is_alive() for t in threads)
    return trainer.samples, (clients[0].passes if inline else -1)


CASES = {
    # policy.max_batch = the actor's agent-slots (and max_wait_ms long): the policy worker batches all its
    # groups, as the inline pass does
    # discrete actions, 2 ring groups
    "ppo-cartpole": ("ppo", "CartPole-v1", 2, ["actors.envs_per_actor=4", "actors.ring_size=2",
                                               "policy.max_batch=4"]),
    # Box actions: the sample keeps the unclipped Gaussian action; running reward normalisation
    "ppo-pendulum": ("ppo", "Pendulum-v1", 1, ["actors.envs_per_actor=3", "actors.ring_size=1", "policy.max_batch=3"]),
    # 2 agents, action masks in the observation, a recurrent (GRU) policy whose state the actor keeps
    "mappo-masked-recurrent": ("mappo", "pettingzoo:zoo.core.testing.masked_envs", 2,
                               ["actors.envs_per_actor=2", "actors.ring_size=2", "policy.max_batch=4",
                                "algo.recurrent=true"]),
    # V-trace's behaviour log-probs, action masks in info
    "impala-masked": ("impala", "zoo.core.testing.masked_envs:MaskedTarget-v0", 1,
                      ["actors.envs_per_actor=4", "actors.ring_size=1", "policy.max_batch=4"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_inline_and_remote_inference_give_the_same_samples(case):
    algo, env, groups, extra = CASES[case]
    T = 8
    overrides = ["actors.count=1", f"sample_length={T}", "policy.max_wait_ms=30000", "seed=7", *extra]
    remote, _ = collect(algo, env, overrides, inline=False, groups=groups)
    inline, passes = collect(algo, env, overrides, inline=True, groups=groups)
    # ROLLOUTS rollouts x groups samples each; the inline actor ran one forward pass per step for
    # all its envs: 3 rollouts x T = 8 steps = 24 passes (its last requests are never answered).
    assert len(remote) == len(inline) == ROLLOUTS * groups
    assert passes == ROLLOUTS * T
    for k, ((r_bundle, r_meta), (i_bundle, i_meta)) in enumerate(zip(remote, inline)):
        assert r_meta == i_meta, f"sample {k}: meta differs"
        assert sorted(r_bundle) == sorted(i_bundle), f"sample {k}: keys differ"
        for key in r_bundle:
            r, i = r_bundle[key], i_bundle[key]
            for sub in (r if isinstance(r, dict) else {"": r}):
                a = r[sub] if isinstance(r, dict) else r
                b = i[sub] if isinstance(i, dict) else i
                assert a.dtype == b.dtype and np.array_equal(a, b), f"sample {k}: {key}[{sub!r}] differs"
        # rollout k // groups was acted with version k // groups at every step
        assert (i_bundle["policy_version"] == k // groups).all()
    if algo == "mappo":
        assert "rnn_state" in inline[0][0]
    # the versions changed the actions: not all samples act alike
    assert len({inline[k][0]["action"].tobytes() for k in range(len(inline))}) > 1


@pytest.mark.parametrize("overrides, field, message", [
    (["policy.count=2"], "policy.count",
     "policy.count=2 contradicts policy.inline=true: inline inference runs the policy inside each actor, with no "
     "policy worker; drop --set policy.count=2, or set policy.inline=false to run 2 policy workers"),
    (["policy.device=cuda"], "policy.device",
     "policy.device='cuda' contradicts policy.inline=true: inline inference runs the policy on each actor's CPU; "
     "set --set policy.device=cpu, or policy.inline=false to run inference on cuda in a policy worker"),
])
def test_options_that_contradict_inline_are_refused_naming_the_field(overrides, field, message):
    from zoo.core.plugins import get_registry

    with pytest.raises(ConfigError) as err:
        build_config(get_registry(), "ppo", "CartPole-v1", overrides=["actors.count=2", "policy.inline=true",
                                                                      *overrides], steps=1000)
    assert err.value.field == field
    assert str(err.value) == message


def test_inline_graph_has_no_policy_worker_and_actors_subscribe_to_parameters():
    from zoo.core.plugins import get_registry

    cfg = build_config(get_registry(), "ppo", "CartPole-v1", overrides=["actors.count=3", "policy.inline=true"],
                       steps=1000)
    validate(cfg)
    g = Graph.from_config(cfg)
    assert (g.actors, g.policies, g.trainers, g.inline) == (3, 0, 1, True)
    assert g.workers() == [("trainer", 0), ("actor", 0), ("actor", 1), ("actor", 2)]
    assert g.stream_roles()["parameter"] == ("trainer", "actor") and g.stream_roles()["inference"] == ()
    actor = g.to_dict()["workers"][1]
    assert actor == {"role": "actor", "index": 0, "policy": None, "inference": "inline", "subscribes": "parameter",
                     "trainer": 0, "pushes": "sample-0"}


def test_live_display_names_inline_actors_and_no_missing_policy_worker():
    from zoo.core.health import Health, bottleneck
    from zoo.display import worker_activity

    # actors spend 60% of their time in their own forward passes: inference-bound, no policy worker named
    assert bottleneck({"env": 0.3, "inference": 0.6, "push": 0.1}, None, None, inline=True) == (
        "inference", "inference-bound: actors run the policy 60% of the time (policy.inline; try a larger "
        "actors.envs_per_actor for larger forward passes, or policy.inline=false for a policy worker that "
        "batches every actor's envs)")
    # env stepping dominates: the same sentence as with a policy worker
    assert bottleneck({"env": 0.7, "inference": 0.2, "push": 0.1}, None, None, inline=True) == (
        "env", "env-bound: actors step envs 70% of the time")
    inline = Health(Graph(actors=2, policies=0, trainers=1).workers(), clock=lambda: 0.0)
    remote = Health(Graph(actors=2, policies=1, trainers=1).workers(), clock=lambda: 0.0)
    assert (inline.inline, remote.inline) == (True, False)
    snap = inline.snapshot(now=0.0)
    assert [(w["role"], w.get("inference")) for w in snap["workers"]] == [
        ("trainer", None), ("actor", "inline"), ("actor", "inline")]
    assert snap["bottleneck"]["inline"] is True
    row = {"role": "actor", "env_steps_per_s": 1050.0, "env_frac": 0.6, "inference_frac": 0.3, "push_frac": 0.05}
    assert worker_activity({**row, "inference": "inline"}) == (
        "1,050 env steps/s · envs 60% · runs policy 30% · waits for trainer 5%")
    assert worker_activity(row) == "1,050 env steps/s · envs 60% · waits for actions 30% · waits for trainer 5%"


class FakeNet:
    """Stands in for ``Inference``: loads versions from a list; each pass answers every row
    with the pass number as its action."""

    def __init__(self, published: list[int]) -> None:
        self.version, self.published, self.passes = -1, published, 0

    def refresh(self, params, timeout):
        if self.published and self.published[-1] > self.version:
            self.version = self.published[-1]
            return True
        return False

    def act(self, batch):
        self.passes += 1
        return [{"action": np.full(meta["rows"], self.passes)} for _, _, meta in batch]


def test_inline_client_one_pass_per_step_new_weights_between_rollouts_and_re_sent_requests():
    from types import SimpleNamespace

    from zoo.core.workers.inline import InlineClient

    warnings = []
    cfg = SimpleNamespace(sample_length=2, policy=SimpleNamespace(stall_warning_s=1e-9),
                          trainer=SimpleNamespace(learn=True, max_policy_lag=1))
    ctx = SimpleNamespace(index=0, stop=False, cfg=cfg, heartbeat=lambda **kw: None,
                          send_control=lambda kind, timeout, **meta: warnings.append((kind, meta)) or True)
    published = [0]
    net = FakeNet(published)
    client = InlineClient(ctx, net=net, params=SimpleNamespace(close=lambda: None))
    req = {"obs": {}, "slot": np.arange(2), "on_reset": np.zeros(2, bool)}

    def send(group, request_id):
        assert client.send(req, {"request_id": request_id, "rows": 2, "group": group}, 0.2)

    def recv():
        reply, meta = client.recv(0.2)
        return int(reply["action"][0]), meta["request_id"], meta["policy_version"]

    send(1, 0)
    send(0, 1)
    published.append(1)  # arrives before the first pass: the newest is loaded
    assert recv() == (1, 1, 1)  # pass 1 answers group 0 first (group order), with version 1
    send(1, 2)  # group 1's request sent again (its reply not taken yet): the reply gets the new id
    assert recv() == (1, 2, 1) and client.recv(0.2) is None  # nothing waiting: no pass
    published.append(2)  # mid-rollout (step 1 of T = 2): not loaded yet
    send(0, 3)
    send(1, 4)
    assert [recv(), recv()] == [(2, 3, 1), (2, 4, 1)]  # pass 2: step 1 of the rollout, version 1
    send(0, 5)
    send(1, 6)
    assert [recv(), recv()] == [(3, 5, 2), (3, 6, 2)]  # pass 3 starts rollout 2: version 2 loaded
    assert (client.passes, net.passes) == (3, 3)
    assert warnings == []  # every rollout so far started with newer weights
    for request_id in range(7, 15, 2):  # passes 4-7, no newer version: a stall (threshold 1e-9 s)
        send(0, request_id)
        send(1, request_id + 1)
        assert recv()[2] == recv()[2] == 2
    # warned once, at pass 5 (the first rollout start without newer weights), not again at pass 7
    assert [(kind, meta["key"]) for kind, meta in warnings] == [("warning", "parameter-stall")]
    assert "still acting with policy version 2 (inline inference, 2 forward passes since it arrived)" in \
        warnings[0][1]["message"]
