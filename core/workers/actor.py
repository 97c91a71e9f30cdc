"""Actor worker: steps environments, asks the policy worker for actions, pushes samples.

Actor ``i`` asks policy worker ``i mod policy.count`` (endpoint ``inference-<m>``) and
pushes to trainer ``i mod trainer.count`` (endpoint ``sample-<k>``); see :mod:`zoo.core.graph`.
With ``policy.inline`` there is no policy worker: the actor runs the policy itself, one
forward pass over all its envs per step, and pulls parameters between rollouts
(:mod:`zoo.core.workers.inline`); samples, resets and meters are as below, but the ring
overlaps nothing (the pass runs before the groups are stepped).

The actor's ``envs_per_actor`` environments are split into ``ring_size`` groups. Each
group has at most one inference request in flight; while the policy worker computes a
group's actions the actor steps another group, so the CPU does not sit idle (SRL,
section 3.2). One request carries all agent-slots of a group: never one message per
environment.

When the env plugin offers a vector env for the run's config (its ``vector_factory``, e.g.
``--env atari:Pong --set env.backend=vector``), each group is one
:class:`zoo.core.env.VectorEnv` (:class:`VectorEnvGroup`): one ``step`` call steps all the
group's envs, and it resets the envs whose episode ended inside that call, so the samples
are laid out exactly as with per-env resets.

Each group records a time-major sample buffer of ``T = sample_length`` steps for its
``n_envs x A`` agent-slots (layout in :mod:`zoo.core.algorithm`). When ``T`` steps are
done, row ``T`` of the observations receives the bootstrap observation, the sample is
pushed to the trainer, and the next sample starts from that same observation. The actor
owns resets: when all agents of an environment are done it records the real final
observation of truncated agents (``final_obs``), resets the environment and continues.

Actions go to the envs as the policy chose them, except Box actions, which are clipped to
the action space's bounds for the whole group at once (:class:`zoo.core.spaces.ActionClipper`);
the sample keeps the unclipped action, whose log-probability the policy returned.

``on_reset`` is per agent-slot: True from an episode's reset until the agent's first
active step, inclusive. An agent that joins an episode late (PettingZoo agents absent
from ``env.agents`` at first) therefore starts from a fresh recurrent state at its first
step of every episode, in the policy worker and in training alike.

When the algorithm's config has ``norm_reward`` set, each sample also carries
``disc_return`` ``float32 [T, S]``: the running discounted return ``R = gamma R + r`` of
each agent-slot (``gamma``: the algorithm's), reset when the agent's episode ends, from
which the trainer scales rewards (:mod:`zoo.plugins.algorithms.normalization`).

**Curriculum** (docs/curriculum.md): with a ``[curriculum]``, the envs start at the stage the
controller gave this worker (``ctx.curriculum_stage``), every reply carries the run's stage
(``curriculum_stage``, from the trainer through the parameters), and an env whose stage
differs is told the new one right before its next reset (:meth:`EnvGroup.want_stage`), never
in the middle of an episode; its episode rows carry ``curriculum_stage``, the stage they were
played at.

At the end every env's ``close()`` is called within :data:`zoo.core.env.CLOSE_BUDGET_S`;
a slow, failing or unfinished close is reported to the controller as a warning.

Every sample message's meta says where its columns come from: ``actor`` (this actor's
index), ``env_offset`` (the index, within the actor, of the group's first env) and
``agents`` (``A``): column ``s`` is env ``env_offset + s // A``, agent ``s % A``.

**Non-finite values.** After each group step the rewards and the floating-point
observations of the group are checked at once (one float64 sum per array over all its
envs); a NaN or an infinity raises :class:`NonFiniteEnvError` naming the env, this actor's
index, the env's index and the step, which the worker reports to the controller as its
error: the run stops there instead of failing later in the policy worker or trainer.

**Env seeds** (:func:`zoo.core.seeding.env_seeds`): env ``i`` of actor ``a`` is built and
first reset with ``derive_seed(seed, "env", a, i)`` (numpy ``SeedSequence`` over the run
seed, the role, the actor and the env slot: independent across envs, actors and runs);
when the run was resumed (``cfg.resume`` = n >= 1) n joins the key, and when this actor is a
restarted process (``ctx.attempt`` = a >= 1) n and a do, so neither a resumed run's envs nor a
restarted actor's replay the episodes of the run's start or of the crashed attempt. Environment
state itself (positions, the envs' own RNGs) is not checkpointed: a resumed run starts new
episodes.

Its heartbeats carry where its time goes (:class:`zoo.core.health.Meter`): ``env``
(stepping a group), ``inference`` (sending requests, waiting for replies; inline: the
forward passes and loading parameters), ``push``
(pushing a sample, which blocks while the trainer does not take it), measured with one
clock read per phase of a group step, never per environment; and each inference request's
round trip, from the stream taking it to the loop taking its reply, in a histogram
(``round_trip``, :mod:`zoo.core.health`), from the clock reads the phases already make (the
routed actor reads the clock once more per reply its non-blocking sweep takes).

This module holds the loops (:func:`run`, :func:`run_routed`); their parts live beside it and
are importable from here too: :mod:`zoo.core.workers.env_group` (the ring groups of envs),
:mod:`zoo.core.workers.samples` (sample buffers; a routed actor's per-policy samples and
actions), :mod:`zoo.core.workers.actor_streams` (requests in flight, the sample outbox).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from zoo.core.env import PAD_SEP, close_envs
from zoo.core.graph import Graph, endpoint
from zoo.core.health import Meter
from zoo.core.seeding import env_seeds
from zoo.core.workers.actor_streams import (
    ATTEMPT_REQUEST_IDS,
    DROP_WAIT_S,
    REQUEST_RETRY_S,
    REQUEST_TIMEOUT_S,
    InferenceRequests,
    PolicyRequests,
    SampleOutbox,
    first_request_id,
)
from zoo.core.workers.base import WorkerContext
from zoo.core.workers.env_group import EnvGroup, NonFiniteEnvError, VectorEnvGroup, follow_stage, make_group
from zoo.core.workers.policy import PLAYED_VERSION
from zoo.core.workers.samples import ActionAssembler, SampleBuffer, split_bundle

__all__ = [
    "run", "run_routed", "inference_client", "actor_env_seeds", "env_seeds", "ROUTED_WAIT_S",
    # the parts, from env_group, samples and actor_streams
    "SampleBuffer", "split_bundle", "ActionAssembler",
    "EnvGroup", "VectorEnvGroup", "NonFiniteEnvError", "follow_stage", "make_group",
    "InferenceRequests", "PolicyRequests", "SampleOutbox", "first_request_id", "ATTEMPT_REQUEST_IDS",
    "REQUEST_TIMEOUT_S", "REQUEST_RETRY_S", "DROP_WAIT_S",
]


def inference_client(ctx: WorkerContext, graph: Graph):
    """Where the actor's requests for actions go: its policy worker's ``inference-<m>`` endpoint
    (a request client of the inference stream), or, with ``policy.inline``, an
    :class:`~zoo.core.workers.inline.InlineClient` running the policy in this process. Both
    have ``send(request, meta, timeout)``, ``recv(timeout)`` and ``close()``."""
    if ctx.cfg.policy.inline:
        from zoo.core.workers.inline import InlineClient

        return InlineClient(ctx)
    policy = graph.policy_of(ctx.index)
    assert policy is not None, "graph.policy_of is None only with policy.inline"
    return ctx.transport("inference").request_client(endpoint("inference", policy), ctx.index)


def actor_env_seeds(ctx: WorkerContext) -> list[int]:
    """The first-reset seeds of this actor's ``actors.envs_per_actor`` envs, slot 0 first
    (module docstring, "Env seeds"): :func:`env_seeds` of the run seed, the actor's index,
    ``cfg.resume`` and ``ctx.attempt``."""
    cfg = ctx.cfg
    return env_seeds(cfg.seed, ctx.index, cfg.actors.envs_per_actor, int(getattr(cfg, "resume", 0) or 0), ctx.attempt)


ROUTED_WAIT_S = 0.002
"""A routed actor with nothing received from any policy waits this long on each client in turn."""


def run_routed(ctx: WorkerContext, graph: Graph) -> None:
    """The actor's loop with named policies (docs/policies.md, "The actor"): each ring group's
    agent-slots are split by policy; one request per policy per group (to its worker ``i mod
    M_P``, or inline); the group steps once every policy answered; its sample is split by
    policy and each trainable policy's part pushed to its trainer ``i mod K_P`` (a frozen
    policy's part is not sent). Every trainable policy's samples carry the env steps; episodes
    (with ``<P>_return`` per policy) ride on the first trainable policy's."""
    from zoo.core.policies import policy_view

    cfg, spec = ctx.cfg, ctx.spec
    n_groups = cfg.actors.ring_size
    per_group = cfg.actors.envs_per_actor // n_groups
    A = spec.num_agents
    policies = cfg.policies
    names = [p.name for p in graph.layout]
    pbt = getattr(cfg, "pbt", None)
    P = int(pbt.members) if pbt is not None else 0  # a population: every agent of env e acts with member e % P
    agent_ids = {n: np.array([spec.agents.index(a) for a in policies.named[n].agents], np.int64) for n in names}
    trainable = [n for n in names if graph.policy(n).trainers]
    views = {n: policy_view(cfg, policies, n) for n in names}
    gammas = [float(views[n].algo.gamma) for n in trainable if getattr(views[n].algo, "norm_reward", False)]
    return_gamma = gammas[0] if gammas else None  # the group's running return: the first such policy's gamma
    all_seeds = actor_env_seeds(ctx)
    groups: list[EnvGroup] = []
    for i in range(n_groups):
        group = make_group(ctx, all_seeds[i * per_group:(i + 1) * per_group], i * per_group, return_gamma)
        group.teams = {} if P else dict(agent_ids)  # a member's return is its episodes' own return
        groups.append(group)
    # per policy and group, the envs its agents act in (a population: a member's, docs/pbt.md)
    env_ids = {n: [np.arange(g.n_envs) if not P else np.arange(j, g.n_envs, P) for g in groups]
               for j, n in enumerate(names)}
    slots = {n: [np.array([e * A + a for e in env_ids[n][g] for a in agent_ids[n]], np.int64)
                 for g in range(n_groups)] for n in names}
    keys: dict[str, dict[str, str] | None] = {n: None for n in names}
    if spec.mixed:  # PaddedSpaces: each policy reads its space group's keys (docs/policies.md)
        space_groups = spec.space_groups()
        for n in names:
            first = policies.named[n].agents[0]
            g = next(i for i, grp in enumerate(space_groups) if first in grp)
            keys[n] = {f"{k}{PAD_SEP}{g}": k for k in spec.observation_space_of(first)}
    if ctx.meter is None:
        ctx.meter = Meter("actor")
    meter = ctx.meter
    clients: dict[str, Any] = {}
    pushers: dict[str, Any] = {}
    try:
        for n in names:
            p = graph.policy(n)
            m = graph.policy_worker_for(ctx.index, n)
            if m is None:
                from zoo.core.workers.inline import InlineClient

                clients[n] = InlineClient(ctx, policy=n)
            else:
                clients[n] = ctx.transport("inference").request_client(endpoint("inference", m, p.tag), ctx.index)
            k = graph.trainer_for(ctx.index, n)
            if k is not None:
                pushers[n] = ctx.transport("sample").pusher(endpoint("sample", k, p.tag))
        requests = {n: PolicyRequests(ctx, clients[n], groups, slots[n], first_request_id(ctx), meter, keys[n])
                    for n in names}
        outboxes = {n: SampleOutbox(ctx, pushers[n], cfg.actors.drop_when_full, meter, counts_steps=j == 0)
                    for j, n in enumerate(trainable)}
        writer = outboxes[trainable[0]]  # the episode writer: episodes ride on its samples only
        if P:  # a population: each env's episodes ride on its member's samples
            for group in groups:
                group.episode_sink = lambda i: outboxes[names[i % P]].episodes  # type: ignore[attr-defined]
        buffers = [SampleBuffer(cfg.sample_length, g.obs, return_gamma is not None) for g in groups]
        # each policy's outputs per group, its actions in its own space's shape and dtype (record_part)
        extras: list[dict[str, dict[str, np.ndarray]]] = [{n: {} for n in names} for _ in groups]
        assemble = [ActionAssembler(spec, agent_ids, g.n_envs, {n: env_ids[n][i] for n in names} if P else None)
                    for i, g in enumerate(groups)]
        replies: list[dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]]] = [{} for _ in groups]
        for g in range(n_groups):
            for n in names:
                requests[n].send(g)
        turn = 0
        while not ctx.stop:
            ctx.heartbeat()
            t = time.perf_counter()
            got = False
            for n in names:
                msg = clients[n].recv(0)
                while msg is not None:
                    got = True
                    answered = requests[n].answered(msg[1]["request_id"], time.perf_counter())
                    if answered is not None:
                        replies[answered][n] = msg
                    msg = clients[n].recv(0)
            if not got:  # no select across transports: wait a little on each client in turn
                n = names[turn % len(names)]
                turn += 1
                msg = clients[n].recv(ROUTED_WAIT_S)
                answered = (requests[n].answered(msg[1]["request_id"], time.perf_counter()) if msg is not None
                            else None)
                if answered is not None and msg is not None:
                    replies[answered][n] = msg
            t = meter.lap("inference", t)
            for n in names:
                requests[n].retry_stale()
            for g in range(n_groups):
                if len(replies[g]) < len(names):
                    continue
                group, buf = groups[g], buffers[g]
                acted = {}
                for n in names:
                    reply, meta = replies[g][n]
                    follow_stage(groups, meta)
                    cols = slots[n][g]
                    acted[n] = buf.record_part(cols, reply, int(meta["policy_version"]), group.active[cols],
                                               group.on_reset[cols], extras[g][n], keep=n in outboxes)
                    if PLAYED_VERSION in reply:  # an opponent: which version acted in each env
                        played = group.played.setdefault(n, np.full(group.n_envs, -1, np.int64))
                        played[cols[group.active[cols]] // A] = reply[PLAYED_VERSION]
                replies[g] = {}
                group.step(assemble[g](acted), buf, writer.episodes)
                t = meter.lap("env", t)
                for outbox in outboxes.values():
                    outbox.stepped(group.n_envs)
                if buf.full:
                    whole = buf.bundle()
                    for n in trainable:
                        part = split_bundle(whole, slots[n][g], extras[g][n], keys[n])
                        more = {"policy": n, "agent_ids": agent_ids[n].tolist()}
                        if P:  # a member's columns: envs env_offset + envs[s // agents]
                            more["envs"] = env_ids[n][g].tolist()
                        if not outboxes[n].push(part, g * per_group, len(agent_ids[n]), t, more):
                            return
                    buffers[g] = SampleBuffer(cfg.sample_length, group.obs, return_gamma is not None)
                    extras[g] = {n: {} for n in names}
                for n in names:
                    requests[n].send(g)
    finally:
        for c in clients.values():
            c.close()
        for pusher in pushers.values():
            pusher.close()
        close_envs([env for group in groups for env in group.envs],
                   report=lambda line: ctx.send_control("warning", timeout=0.5, key="env-close", message=line))


def run(ctx: WorkerContext) -> None:
    """The actor's loop (module docstring): send each env group's inference request; on each
    reply, step that group's envs with the actions, push the sample when it is full, request
    again. With named policies: :func:`run_routed`."""
    cfg = ctx.cfg
    if getattr(cfg, "policies", None) is not None and not cfg.policies.implicit:
        return run_routed(ctx, Graph.from_config(cfg))
    n_groups = cfg.actors.ring_size
    per_group = cfg.actors.envs_per_actor // n_groups
    # reward normalisation (an algorithm option norm_reward with its gamma): samples carry disc_return
    return_gamma = float(cfg.algo.gamma) if getattr(cfg.algo, "norm_reward", False) else None
    all_seeds = actor_env_seeds(ctx)
    groups: list[EnvGroup] = []
    for i in range(n_groups):
        seeds = all_seeds[i * per_group:(i + 1) * per_group]
        groups.append(make_group(ctx, seeds, i * per_group, return_gamma))
    graph = Graph.from_config(cfg)
    client = inference_client(ctx, graph)
    samples = ctx.transport("sample").pusher(endpoint("sample", graph.trainer_of(ctx.index)))
    buffers = [SampleBuffer(cfg.sample_length, g.obs, return_gamma is not None) for g in groups]
    if ctx.meter is None:
        ctx.meter = Meter("actor")
    meter = ctx.meter  # where the time goes: sent with the heartbeats
    requests = InferenceRequests(ctx, client, groups, first_request_id(ctx), meter)
    outbox = SampleOutbox(ctx, samples, cfg.actors.drop_when_full, meter)
    try:
        for i in range(n_groups):
            requests.send(i)
        while not ctx.stop:
            ctx.heartbeat()
            t = time.perf_counter()
            msg = client.recv(REQUEST_TIMEOUT_S)
            t = meter.lap("inference", t)
            requests.retry_stale()
            if msg is None:
                continue
            reply, meta = msg
            g = requests.answered(meta["request_id"], t)  # t: the reply taken, its round trip counted
            if g is None:
                continue  # a reply to a request this actor no longer waits for
            group, buf = groups[g], buffers[g]
            follow_stage(groups, meta)
            action = buf.record_policy(reply, meta["policy_version"], group.active, group.on_reset)
            group.step(action, buf, outbox.episodes)
            t = meter.lap("env", t)
            outbox.stepped(group.n_envs)
            if buf.full:
                if not outbox.push(buf.bundle(), g * per_group, group.A, t):
                    return
                buffers[g] = SampleBuffer(cfg.sample_length, group.obs, return_gamma is not None)
            requests.send(g)
    finally:
        client.close()
        samples.close()
        close_envs([env for group in groups for env in group.envs],
                   report=lambda line: ctx.send_control("warning", timeout=0.5, key="env-close", message=line))

